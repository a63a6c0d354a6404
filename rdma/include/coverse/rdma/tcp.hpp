// tcp: one-sided memory emulated over the mesh connection, for peers without RDMA hardware.
// A get is a request the target's progress serves: it sends the bytes straight from the
// registered memory, and the requester's reader places them straight into the buffer the
// get named (frame types rma_get_request/rma_get_reply; no staging copy on either side).
// A put is a request followed by data frames the target's reader places into its
// registered memory; the target confirms with rma_complete. Keys are registration ids the
// target checks every request against: a peer reads and writes only what we registered.
#pragma once

#include <cstdint>
#include <map>
#include <unordered_map>
#include <vector>

#include <coverse/net/mesh.hpp>
#include <coverse/rdma/provider.hpp>

namespace coverse::rdma {

class tcp_provider final : public provider {
public:
    /// `mesh` carries the requests and the data; `chunk` bounds one data frame.
    tcp_provider(net::mesh& mesh, std::size_t chunk = 4u << 20,
                 alloc::rcache_config cache = alloc::rcache_config::from_environment());
    ~tcp_provider() override;

    provider_kind kind() const noexcept override { return provider_kind::tcp; }
    capabilities caps() const noexcept override;
    std::vector<std::byte> address_blob() override { return {}; }
    std::optional<std::string> connect_peer(std::uint32_t, std::span<const std::byte>) override {
        return std::nullopt;  // the mesh connection is all it needs
    }
    void post_get(std::uint32_t pe, std::span<std::byte> local, remote_memory remote,
                  op_completion& done) override;
    void post_put(std::uint32_t pe, std::span<const std::byte> local, remote_memory remote,
                  op_completion& done) override;
    void peer_lost(std::uint32_t pe) override;
    std::error_code register_memory(std::byte* address, std::size_t length,
                                    registration& out) override;
    void deregister_memory(registration& r) noexcept override;

    /// The reader's hooks (the layer forwards frames of types rma_*).
    std::byte* place(std::uint32_t pe, const net::frame_header& h) noexcept;
    void take(std::uint32_t pe, net::frame& f);
    /// Operations of ours still waiting for a peer.
    std::size_t outstanding() const noexcept { return _gets.size() + _puts.size(); }

private:
    struct get_op {
        op_completion* done;
        std::uint32_t pe;
        std::byte* dest;
        std::uint64_t size;
        std::uint64_t placed = 0;    // bytes the reader was told where to put
        std::uint64_t received = 0;  // bytes complete in place
    };
    struct put_op {
        op_completion* done;
        std::uint32_t pe;
    };
    struct incoming_put {
        std::byte* dest = nullptr;  // null: refused (its data is dropped)
        std::uint64_t size = 0;
        std::uint64_t placed = 0;
        std::uint64_t received = 0;
    };
    struct region {
        std::uintptr_t begin;
        std::size_t length;
    };

    std::byte* checked_range(std::uint64_t key, std::uint64_t address,
                             std::uint64_t size) const noexcept;
    void serve_get(std::uint32_t pe, const net::rma_request_payload& r);
    void start_put(std::uint32_t pe, const net::rma_request_payload& r);
    void reply(std::uint32_t pe, std::uint32_t id, net::rma_op op, net::rma_status status);
    int post_control(std::uint32_t pe, net::frame_type type, std::span<const std::byte> payload);
    void post_data(std::uint32_t pe, net::frame_type type, std::uint32_t id, const std::byte* data,
                   std::uint64_t size);
    void fail_get(std::uint32_t id, op_result r);

    net::mesh& _mesh;
    std::size_t _chunk;
    std::uint32_t _next_id = 1;
    std::uint64_t _next_key = 1;
    std::unordered_map<std::uint32_t, get_op> _gets;  // by our id
    std::unordered_map<std::uint32_t, put_op> _puts;
    std::map<std::pair<std::uint32_t, std::uint32_t>, incoming_put> _incoming;  // (pe, id)
    std::unordered_map<std::uint64_t, region> _regions;                         // by key
};

}  // namespace coverse::rdma
