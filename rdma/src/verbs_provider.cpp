// Device discovery for the verbs provider (see verbs.hpp).
#include <coverse/rdma/verbs.hpp>

#include <infiniband/verbs.h>

#include <cinttypes>
#include <cstdio>

namespace coverse::rdma {

namespace {

std::string port_state_name(ibv_port_state s) {
    switch (s) {
        case IBV_PORT_ACTIVE:
            return "active";
        case IBV_PORT_DOWN:
            return "down";
        case IBV_PORT_INIT:
            return "init";
        case IBV_PORT_ARMED:
            return "armed";
        default:
            return "state " + std::to_string(static_cast<int>(s));
    }
}

}  // namespace

std::vector<verbs_device> list_verbs_devices(std::string* why) {
    std::vector<verbs_device> out;
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    if (!list) {
        if (why)
            *why =
                "no RDMA device (ibv_get_device_list failed: the kernel has no RDMA "
                "support or no driver is loaded)";
        return out;
    }
    for (int i = 0; i < n; ++i) {
        verbs_device d;
        d.name = ibv_get_device_name(list[i]);
        char guid[24];
        std::snprintf(guid, sizeof guid, "%016" PRIx64,
                      static_cast<std::uint64_t>(be64toh(ibv_get_device_guid(list[i]))));
        d.node_guid = guid;
        if (ibv_context* ctx = ibv_open_device(list[i])) {
            ibv_device_attr attr{};
            if (ibv_query_device(ctx, &attr) == 0) {
                d.max_qp_wr = static_cast<std::uint32_t>(attr.max_qp_wr);
                d.max_sge = static_cast<std::uint32_t>(attr.max_sge);
                d.max_mr_size = attr.max_mr_size;
                for (std::uint8_t p = 1; p <= attr.phys_port_cnt; ++p) {
                    ibv_port_attr pa{};
                    if (ibv_query_port(ctx, p, &pa) != 0) continue;
                    verbs_port port;
                    port.number = p;
                    port.state = port_state_name(pa.state);
                    port.link_layer =
                        pa.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet" : "InfiniBand";
                    port.lid = pa.lid;
                    port.active_mtu = std::to_string(128 << pa.active_mtu);
                    d.ports.push_back(port);
                }
            }
            ibv_close_device(ctx);
        }
        out.push_back(std::move(d));
    }
    ibv_free_device_list(list);
    if (out.empty() && why) *why = "no RDMA device";
    return out;
}

std::unique_ptr<provider> make_verbs_provider(scheduler&, std::uint32_t, std::uint32_t,
                                              std::string* why) {
    std::string none;
    const auto devices = list_verbs_devices(&none);
    if (devices.empty()) {
        if (why) *why = none;
        return nullptr;
    }
    if (why)
        *why = "RDMA device " + devices.front().name +
               " found, but this build has no verbs queue pairs yet";
    return nullptr;
}

}  // namespace coverse::rdma
