// cma: same-host one-sided memory with process_vm_readv / process_vm_writev (Linux cross
// memory attach). Nothing is pinned or registered: a peer names our memory by its address,
// and the key is our pid. The kernel may refuse (ptrace policy, another user, a container):
// connect_peer() probes each peer once and says why, so that peer can use tcp instead.
#pragma once

#include <sys/types.h>

#include <memory>
#include <vector>

#include <coverse/rdma/provider.hpp>

namespace coverse::rdma {

class cma_provider final : public provider {
public:
    explicit cma_provider(std::uint32_t num_pes,
                          alloc::rcache_config cache = alloc::rcache_config::from_environment());
    ~cma_provider() override { cache().release_unused(); }

    provider_kind kind() const noexcept override { return provider_kind::cma; }
    capabilities caps() const noexcept override;
    std::vector<std::byte> address_blob() override;
    std::optional<std::string> connect_peer(std::uint32_t pe,
                                            std::span<const std::byte> blob) override;
    void post_get(std::uint32_t pe, std::span<std::byte> local, remote_memory remote,
                  op_completion& done) override;
    void post_put(std::uint32_t pe, std::span<const std::byte> local, remote_memory remote,
                  op_completion& done) override;
    void peer_lost(std::uint32_t pe) override;
    std::error_code register_memory(std::byte* address, std::size_t length,
                                    registration& out) override;
    void deregister_memory(registration& r) noexcept override;

    /// The peer's pid (0 before connect_peer).
    pid_t peer_pid(std::uint32_t pe) const noexcept { return pe < _pids.size() ? _pids[pe] : 0; }

private:
    std::vector<pid_t> _pids;
};

}  // namespace coverse::rdma
