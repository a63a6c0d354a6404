// The one-sided provider interface: register memory (through alloc's registration cache),
// post gets and puts whose completions resume a waiting coroutine, the address blob each
// side hands the other, and what the provider can do. Providers: cma (same host,
// process_vm_readv/writev), tcp (emulated over the mesh connection), verbs (RC queue pairs).
#pragma once

#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <coverse/alloc/registration_cache.hpp>

namespace coverse::rdma {

enum class provider_kind : std::uint8_t { cma = 1, tcp = 2, verbs = 3 };
/// "cma", "tcp", "verbs".
std::string_view to_string(provider_kind kind) noexcept;
/// Parses "cma", "tcp" or "verbs"; nullopt for anything else.
std::optional<provider_kind> provider_from_string(std::string_view text) noexcept;

/// What a provider can do, for the protocol table and the split of large transfers.
struct capabilities {
    /// A put into the peer is a plain store into mapped memory (shared memory).
    bool put_is_store = false;
    /// Local memory must be registered too before a get lands in it (verbs).
    bool local_registration = false;
    /// Peers on this host only.
    bool same_host_only = false;
    /// Largest single operation posted; larger ones are split by the provider itself.
    std::size_t max_transfer = 0;
    /// The bytes of one put become visible at the target in address order, so a flag in its
    /// last bytes is seen only after everything before it (tcp: the target's reader receives
    /// the connection in order; verbs: how RC HCAs place an RDMA WRITE, which the verbs spec
    /// does not promise). False: a put's bytes may land in any order (cma's kernel copy), so
    /// an eager put channel writes its footer with a second put once the first completed.
    bool put_in_order = false;
};

/// A registration as the provider hands it out; `key` is what a peer names it by (verbs
/// rkey, cma: our pid, tcp: our registration id).
struct registration {
    std::uint64_t key = 0;
    std::uint32_t local_key = 0;  // verbs lkey
    void* native = nullptr;       // verbs ibv_mr*
};

/// Memory of a peer that a get reads or a put writes.
struct remote_memory {
    std::uint64_t address = 0;
    std::uint64_t key = 0;
    std::uint64_t length = 0;
};

/// Outcome of a one-sided operation: a value, never an exception, on the hot path.
enum class op_status : std::uint8_t {
    ok,
    peer_lost,  // the peer died or its connection failed
    refused,    // the peer does not know that memory (bad key or range)
    failed,     // the provider failed (detail says how)
};
std::string_view to_string(op_status s) noexcept;

struct op_result {
    op_status status = op_status::ok;
    std::string detail;  // empty when ok
    bool ok() const noexcept { return status == op_status::ok; }
};

/// The completion object of one posted operation. Immovable; the provider points at it
/// from the moment of posting until it calls complete(), exactly once.
class op_completion {
public:
    virtual void complete(op_result result) noexcept = 0;

protected:
    ~op_completion() = default;
};

class provider;

/// The registrar the registration cache calls (alloc/registration_cache.hpp).
struct provider_registrar {
    using registration = rdma::registration;
    provider* owner = nullptr;
    std::error_code register_memory(std::byte* address, std::size_t length, registration& out);
    void deregister_memory(registration& r) noexcept;
};
using registration_cache = alloc::registration_cache<provider_registrar>;
/// One use of a registration; the registration is released when it goes.
using registered = registration_cache::handle;

class provider {
public:
    explicit provider(alloc::rcache_config cache = alloc::rcache_config::from_environment());
    virtual ~provider();
    provider(const provider&) = delete;
    provider& operator=(const provider&) = delete;

    virtual provider_kind kind() const noexcept = 0;
    virtual capabilities caps() const noexcept = 0;

    /// Makes [data, data + size) reachable by peers (through the registration cache).
    /// Throws std::system_error naming the range and the fix when the provider refuses.
    registered expose(std::span<const std::byte> memory);
    registration_cache& cache() noexcept { return _cache; }

    /// What this PE hands every peer of this provider; the peer's connect_peer() reads it.
    virtual std::vector<std::byte> address_blob() = 0;
    /// What this PE hands peer `pe`: the same blob for every peer unless the provider keeps
    /// per-peer state (verbs: the queue pair of that pair of PEs). The layer calls this one.
    virtual std::vector<std::byte> address_blob_for(std::uint32_t pe) {
        (void)pe;
        return address_blob();
    }
    /// Takes a peer's blob. nullopt when the peer can be served; otherwise why not (the
    /// caller then picks another provider for that peer).
    virtual std::optional<std::string> connect_peer(std::uint32_t pe,
                                                    std::span<const std::byte> blob) = 0;

    /// Reads remote into local; completes `done` (maybe before returning).
    virtual void post_get(std::uint32_t pe, std::span<std::byte> local, remote_memory remote,
                          op_completion& done) = 0;
    /// Writes local into remote; completes `done` once the bytes are in the peer's memory.
    virtual void post_put(std::uint32_t pe, std::span<const std::byte> local, remote_memory remote,
                          op_completion& done) = 0;
    /// The peer is gone: every operation outstanding with it completes with peer_lost.
    virtual void peer_lost(std::uint32_t pe) = 0;

    /// Provider hooks of the registration cache.
    virtual std::error_code register_memory(std::byte* address, std::size_t length,
                                            registration& out) = 0;
    virtual void deregister_memory(registration& r) noexcept = 0;

private:
    provider_registrar _registrar;
    registration_cache _cache;
};

/// `co_await get(p, pe, local, remote)`: one get as an awaitable; resumes with its result.
/// The awaiter is the operation's completion object, so it lives in the coroutine frame.
class op_awaiter final : public op_completion {
public:
    enum class op : std::uint8_t { get, put };
    op_awaiter(provider& p, op o, std::uint32_t pe, std::span<std::byte> local,
               remote_memory remote) noexcept
        : _p(p), _op(o), _pe(pe), _local(local), _remote(remote) {}
    op_awaiter(const op_awaiter&) = delete;
    op_awaiter& operator=(const op_awaiter&) = delete;

    bool await_ready() noexcept;
    bool await_suspend(std::coroutine_handle<> h) noexcept;
    op_result await_resume() noexcept { return std::move(_result); }
    void complete(op_result result) noexcept override;

private:
    provider& _p;
    op _op;
    std::uint32_t _pe;
    std::span<std::byte> _local;
    remote_memory _remote;
    op_result _result;
    std::coroutine_handle<> _waiter;
    bool _done = false;
    bool _posting = false;
};

inline op_awaiter get(provider& p, std::uint32_t pe, std::span<std::byte> local,
                      remote_memory remote) noexcept {
    return op_awaiter(p, op_awaiter::op::get, pe, local, remote);
}
inline op_awaiter put(provider& p, std::uint32_t pe, std::span<const std::byte> local,
                      remote_memory remote) noexcept {
    return op_awaiter(p, op_awaiter::op::put, pe,
                      std::span<std::byte>(const_cast<std::byte*>(local.data()), local.size()),
                      remote);
}

}  // namespace coverse::rdma
