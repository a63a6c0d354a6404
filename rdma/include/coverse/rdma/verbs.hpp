// verbs: libibverbs RC queue pairs, one per peer, for hosts with RDMA hardware. Memory
// regions come from the registration cache; the completion queue is polled by a scheduler
// poller and its completion channel's fd is covered by the idle wait. Detected at start-up:
// with no device (or no active port) it says why and the layer uses cma/tcp.
#pragma once

#include <cstdint>
#include <memory>
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

/// A provider over the first active port of the first usable device, registered as a
/// poller of `sched`; null with `why` when there is none.
std::unique_ptr<provider> make_verbs_provider(scheduler& sched, std::uint32_t rank,
                                              std::uint32_t num_pes, std::string* why);

}  // namespace coverse::rdma
