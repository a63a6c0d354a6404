// The protocols a message can take, as named descriptors chosen by size and by what the path
// to the peer offers (STYLE.md: "a protocol is a named descriptor, chosen by data, and says
// so"). The layer picks from one table per peer; coverse-info and ++verbose print the tables.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <coverse/rdma/provider.hpp>

namespace coverse::rdma {

/// How the layer moves a message once a protocol is chosen.
enum class protocol_method : std::uint8_t {
    stream,      // one frame on the ordered stream path (ring or connection)
    rendezvous,  // publish the buffer; the receiver gets it (and may ask us to put a part)
};

struct protocol_info {
    std::string_view name;  // "stream/inline/shm", "rndv/get/cma", ...
    protocol_method method = protocol_method::stream;
    std::size_t min_size = 0;  // inclusive
    std::size_t max_size = 0;  // inclusive
    std::string_view needs;    // what it needs from the path and the provider
};

/// The stream path to a peer.
enum class stream_path : std::uint8_t { shm_ring, connection };

/// The protocols for one kind of peer, smallest sizes first; every size has exactly one.
struct protocol_table {
    std::array<protocol_info, 4> rows{};
    std::size_t count = 0;

    const protocol_info& choose(std::size_t size) const noexcept {
        for (std::size_t i = 0; i + 1 < count; ++i)
            if (size <= rows[i].max_size) return rows[i];
        return rows[count - 1];
    }
    /// "stream/inline/shm 0..2048 B, stream/buffered/shm 2049..16384 B, rndv/get/cma 16385 B.."
    std::string describe() const;
};

/// The table for a peer reached by `path` whose large messages go by `rndv`. `split`: from
/// this size the cma rendezvous is copied by both PEs at once (0, or not above medium:
/// never); it adds a fourth row.
protocol_table make_protocol_table(stream_path path, provider_kind rndv, std::size_t small,
                                   std::size_t medium, std::size_t split);

/// The eager short channel beside a table: a receiver opens one to a busy sender
/// (EAGER_PROTOCOL), which then sends messages up to `short_bytes` into its slots instead of
/// by the rows above. Named by how the slots are written: "eager/short/shm" (same host, in
/// shared memory), "eager/short/put/<provider>" (one put of message and footer into the
/// receiver's registered slots; verbs by default, EAGER_REMOTE=put on another provider),
/// "eager/short/frames/tcp" (eager_data frames the receiver's reader places into a slot).
std::string_view eager_protocol_name(stream_path path, provider_kind kind, bool by_put) noexcept;
/// "eager/short/shm 513..16384 B once busy (16 slots; 1000 messages in 10000 us)": on the
/// same host messages up to `shm_minimum` (EAGER_SHORT_MINIMUM) keep to the ring; over a
/// connection the range starts at 0.
std::string describe_eager(stream_path path, provider_kind kind, bool by_put,
                           std::size_t short_bytes, std::size_t shm_minimum, std::uint32_t slots,
                           std::uint32_t threshold, std::uint64_t interval_ns);

}  // namespace coverse::rdma
