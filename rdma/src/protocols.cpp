// The protocol descriptors and their table (see protocols.hpp).
#include <coverse/rdma/protocols.hpp>

namespace coverse::rdma {

namespace {

std::string bytes_range(const protocol_info& p, bool last) {
    std::string out = std::to_string(p.min_size);
    if (last) return out + " B..";
    return out + ".." + std::to_string(p.max_size) + " B";
}

}  // namespace

std::string protocol_table::describe() const {
    std::string out;
    for (std::size_t i = 0; i < count; ++i) {
        if (i) out += ", ";
        out += std::string(rows[i].name) + " " + bytes_range(rows[i], i + 1 == count);
    }
    return out;
}

std::string_view eager_protocol_name(stream_path path, provider_kind kind, bool by_put) noexcept {
    if (path == stream_path::shm_ring) return "eager/short/shm";
    if (!by_put) return "eager/short/frames/tcp";
    switch (kind) {
        case provider_kind::verbs:
            return "eager/short/put/verbs";
        case provider_kind::cma:
            return "eager/short/put/cma";
        default:
            return "eager/short/put/tcp";
    }
}

std::string describe_eager(stream_path path, provider_kind kind, bool by_put,
                           std::size_t short_bytes, std::size_t shm_minimum, std::uint32_t slots,
                           std::uint32_t threshold, std::uint64_t interval_ns) {
    const std::size_t from = path == stream_path::shm_ring && shm_minimum > 0 ? shm_minimum + 1 : 0;
    return std::string(eager_protocol_name(path, kind, by_put)) + " " + std::to_string(from) +
           ".." + std::to_string(short_bytes) + " B once busy (" + std::to_string(slots) +
           " slots; " + std::to_string(threshold) + " messages in " +
           std::to_string(interval_ns / 1000) + " us)";
}

protocol_table make_protocol_table(stream_path path, provider_kind rndv, std::size_t small,
                                   std::size_t medium, std::size_t split) {
    const bool ring = path == stream_path::shm_ring;
    protocol_table t;
    t.rows[0] =
        protocol_info{ring ? "stream/inline/shm" : "stream/inline/tcp", protocol_method::stream, 0,
                      small, ring ? "a shared-memory ring record" : "one frame in one send"};
    t.rows[1] = protocol_info{ring ? "stream/buffered/shm" : "stream/buffered/tcp",
                              protocol_method::stream, small + 1, medium,
                              ring ? "ring records, queued while the ring is full"
                                   : "frames gathered by the connection's writer"};
    std::string_view name = "rndv/get/tcp";
    std::string_view needs = "get emulated over the connection, served by the sender";
    if (rndv == provider_kind::cma) {
        name = "rndv/get/cma";
        needs = "process_vm_readv by the receiver";
    } else if (rndv == provider_kind::verbs) {
        name = "rndv/get/verbs";
        needs = "an RDMA read on an RC queue pair, registered memory on both sides";
    }
    constexpr std::size_t unbounded = static_cast<std::size_t>(-1);
    const bool two = rndv == provider_kind::cma && split > medium;
    t.rows[2] = protocol_info{name, protocol_method::rendezvous, medium + 1,
                              two ? split - 1 : unbounded, needs};
    t.count = 3;
    if (two)
        t.rows[t.count++] =
            protocol_info{"rndv/get+put/cma", protocol_method::rendezvous, split, unbounded,
                          "the receiver gets the first half while the sender puts the second "
                          "(process_vm_readv and process_vm_writev on both cores)"};
    return t;
}

}  // namespace coverse::rdma
