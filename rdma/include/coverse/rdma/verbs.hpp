// verbs: libibverbs RC queue pairs, one per peer, for hosts with RDMA hardware. Memory
// regions come from the registration cache; the completion queue is polled by a scheduler
// poller and its completion channel's fd is covered by the idle wait. Detected at start-up:
// with no device (or no active port) it says why and the layer uses cma/tcp.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <coverse/rdma/provider.hpp>
#include <coverse/runtime/scheduler.hpp>

namespace coverse::rdma {

struct verbs_port {
    std::uint8_t number = 0;
    std::string state;       // "active", "down", ...
    std::string link_layer;  // "InfiniBand", "Ethernet"
    std::uint16_t lid = 0;
    std::string active_mtu;  // "4096"
};

struct verbs_device {
    std::string name;
    std::string node_guid;
    std::uint32_t max_qp_wr = 0;
    std::uint32_t max_sge = 0;
    std::uint64_t max_mr_size = 0;
    std::vector<verbs_port> ports;
};

/// Every RDMA device and its ports (ibv_get_device_list, ibv_query_device/_port). Empty
/// when there is none; `why` then says so ("no RDMA device").
std::vector<verbs_device> list_verbs_devices(std::string* why);

/// What one PE's queue pair for a peer looks like to that peer: everything the peer needs
/// to move its own queue pair to RTR against ours. Sent in the layer's rdma_address frame.
struct verbs_address {
    std::uint32_t qpn = 0;        // queue pair number (24 bits)
    std::uint32_t psn = 0;        // first packet sequence number we send (24 bits)
    std::uint16_t lid = 0;        // InfiniBand: the port's LID; 0 on RoCE
    std::uint8_t port = 0;        // our port number (for messages)
    std::uint8_t mtu = 0;         // the port's active MTU as enum ibv_mtu (1 = 256 ... 5 = 4096)
    std::uint8_t link_layer = 0;  // 1 InfiniBand, 2 Ethernet (RoCE)
    std::uint8_t rd_atomic = 0;   // RDMA reads we serve at once (our max_dest_rd_atomic)
    std::array<std::uint8_t, 16> gid{};  // RoCE: the GID the peer's packets go to
    friend bool operator==(const verbs_address&, const verbs_address&) = default;
};
inline constexpr std::uint8_t verbs_link_infiniband = 1;
inline constexpr std::uint8_t verbs_link_ethernet = 2;

/// The blob: 32 bytes, little-endian — u32 qpn, u32 psn, u16 lid, u8 port, u8 mtu,
/// u8 link_layer, u8 rd_atomic, 2 bytes zero, 16 bytes gid (as the NIC stores it).
inline constexpr std::size_t verbs_address_size = 32;
std::vector<std::byte> encode_verbs_address(const verbs_address& a);
/// Reads a peer's blob; nullopt with `why` for a wrong size or an impossible field.
std::optional<verbs_address> decode_verbs_address(std::span<const std::byte> blob,
                                                  std::string* why);

/// A provider over the first active port of the first usable device, registered as a
/// poller of `sched`; null with `why` when there is none.
std::unique_ptr<provider> make_verbs_provider(scheduler& sched, std::uint32_t rank,
                                              std::uint32_t num_pes, std::string* why);

}  // namespace coverse::rdma
