// wire: header and control-payload encoding, the validating decoders, and the error texts.
#include <coverse/net/wire.hpp>

#include <algorithm>
#include <cstdio>
#include <optional>

#include <coverse/net/detail/little_endian.hpp>

namespace coverse::net {

using detail::load_le;
using detail::store_le;

namespace {

// Payload field offsets, pinned like the header's: each layout is append-only.
namespace hello_off {
constexpr std::size_t job_key = 0, rank = 8, num_pes = 12, protocol_version = 16, reserved = 20;
static_assert(rank == job_key + 8 && num_pes == rank + 4 && protocol_version == num_pes + 4 &&
              reserved == protocol_version + 4 && hello_payload::wire_size == reserved + 4);
}  // namespace hello_off
namespace publish_off {
constexpr std::size_t address = 0, key = 8, size = 16, handle = 24, reserved = 28;
static_assert(key == address + 8 && size == key + 8 && handle == size + 8 &&
              reserved == handle + 4 && publish_payload::wire_size == reserved + 4);
}  // namespace publish_off
namespace rma_off {
constexpr std::size_t address = 0, key = 8, size = 16, id = 24, reserved = 28;
static_assert(key == address + 8 && size == key + 8 && id == size + 8 && reserved == id + 4 &&
              rma_request_payload::wire_size == reserved + 4);
constexpr std::size_t c_id = 0, c_op = 4, c_status = 8, c_reserved = 12;
static_assert(c_op == c_id + 4 && c_status == c_op + 4 && c_reserved == c_status + 4 &&
              rma_complete_payload::wire_size == c_reserved + 4);
}  // namespace rma_off
namespace get_done_off {
constexpr std::size_t handle = 0, status = 4;
static_assert(status == handle + 4 && get_done_payload::wire_size == status + 4);
}  // namespace get_done_off
namespace credit_off {
constexpr std::size_t count = 0;
static_assert(credit_payload::wire_size == count + 4);
}  // namespace credit_off
namespace barrier_off {
constexpr std::size_t epoch = 0, phase = 4;
static_assert(phase == epoch + 4 && barrier_payload::wire_size == phase + 4);
}  // namespace barrier_off
namespace persistent_off {
constexpr std::size_t max_size = 0, handle = 8, reserved = 12;
static_assert(handle == max_size + 8 && reserved == handle + 4 &&
              persistent_request_payload::wire_size == reserved + 4);
}  // namespace persistent_off
namespace eager_off {
constexpr std::size_t action = 0, kind = 4, channel = 8, handle = 12, slots = 16, capacity = 20,
                      reserved = 24;
static_assert(eager_channel_payload::wire_size == reserved + 8);
}  // namespace eager_off
namespace eager_put_off {
constexpr std::size_t channel = 0, slots = 4, capacity = 8, reserved = 12, address = 16, key = 24;
static_assert(slots == channel + 4 && capacity == slots + 4 && reserved == capacity + 4 &&
              address == reserved + 4 && key == address + 8 &&
              eager_put_open_payload::wire_size == key + 8);
}  // namespace eager_put_off
namespace disconnect_off {
constexpr std::size_t reason = 0;
static_assert(disconnect_payload::wire_size == reason + 4);
}  // namespace disconnect_off
namespace abort_off {
constexpr std::size_t exit_code = 0, origin_pe = 4, text = 8;
static_assert(origin_pe == exit_code + 4 && text == origin_pe + 4 &&
              abort_payload::wire_size == text);
}  // namespace abort_off
namespace peer_lost_off {
constexpr std::size_t pe = 0, reserved = 4, text = 8;
static_assert(reserved == pe + 4 && text == reserved + 4 && peer_lost_payload::wire_size == text);
}  // namespace peer_lost_off
namespace register_off {
constexpr std::size_t node = 0, pe_count = 4, data_port = 8, reserved = 10, protocol_version = 12,
                      machine_id = 16, job_key = 24, ip = 32;
static_assert(pe_count == node + 4 && data_port == pe_count + 4 && reserved == data_port + 2 &&
              protocol_version == reserved + 2 && machine_id == protocol_version + 4 &&
              job_key == machine_id + 8 && ip == job_key + 8 &&
              register_node_payload::wire_size == ip);
}  // namespace register_off
namespace node_table_off {
constexpr std::size_t status = 0, count = 4, records = 8;
static_assert(count == status + 4 && records == count + 4 &&
              node_table_payload::wire_size == records);
}  // namespace node_table_off
namespace record_off {
constexpr std::size_t machine_id = 0, node = 8, pe_count = 12, data_port = 16, ip_length = 18,
                      ip = 20;
static_assert(node == machine_id + 8 && pe_count == node + 4 && data_port == pe_count + 4 &&
              ip_length == data_port + 2 && ip == ip_length + 2 && node_record::wire_size == ip);
}  // namespace record_off

template <class T>
void put(std::byte* base, wire_field f, T value) noexcept {
    static_assert(sizeof(T) <= 8);
    store_le<T>(base + f.offset, value);
}

constexpr decode_error fail(decode_status status, frame_type type, std::string_view field,
                            std::uint64_t value, std::uint64_t limit = 0) noexcept {
    return decode_error{status, type, field, value, limit};
}

bool valid_pe(std::uint32_t pe, const decode_limits& limits) noexcept {
    return pe < limits.num_pes || (limits.accept_launcher && pe == launcher_pe);
}

// A fixed payload must be exactly its wire size; payload decoders are also called on
// spans that did not come through decode_header, so they check again.
decode_error check_exact(std::span<const std::byte> bytes, std::size_t size,
                         frame_type type) noexcept {
    if (bytes.size() != size) {
        return fail(decode_status::payload_length_mismatch, type, "payload_length", bytes.size(),
                    size);
    }
    return {};
}

// A payload of a fixed prefix and a variable rest (text, a blob).
decode_error check_at_least(std::span<const std::byte> bytes, std::size_t prefix,
                            frame_type type) noexcept {
    if (bytes.size() < prefix) {
        return fail(decode_status::payload_length_mismatch, type, "payload_length", bytes.size(),
                    prefix);
    }
    return {};
}

}  // namespace

std::string_view frame_type_name(frame_type type) noexcept {
    switch (type) {
        case frame_type::standard:
            return "standard";
        case frame_type::barrier:
            return "barrier";
        case frame_type::persistent_request:
            return "persistent_request";
        case frame_type::credit:
            return "credit";
        case frame_type::latency_vector_request:
            return "latency_vector_request";
        case frame_type::latency_vector_reply:
            return "latency_vector_reply";
        case frame_type::cluster_mapping:
            return "cluster_mapping";
        case frame_type::publish:
            return "publish";
        case frame_type::get_done:
            return "get_done";
        case frame_type::hello:
            return "hello";
        case frame_type::disconnect:
            return "disconnect";
        case frame_type::abort:
            return "abort";
        case frame_type::print:
            return "print";
        case frame_type::error:
            return "error";
        case frame_type::scan:
            return "scan";
        case frame_type::scan_reply:
            return "scan_reply";
        case frame_type::register_node:
            return "register_node";
        case frame_type::node_table:
            return "node_table";
        case frame_type::rma_get_request:
            return "rma_get_request";
        case frame_type::rma_get_reply:
            return "rma_get_reply";
        case frame_type::rma_put_request:
            return "rma_put_request";
        case frame_type::rma_put_data:
            return "rma_put_data";
        case frame_type::rma_complete:
            return "rma_complete";
        case frame_type::rdma_address:
            return "rdma_address";
        case frame_type::eager_channel:
            return "eager_channel";
        case frame_type::eager_data:
            return "eager_data";
        case frame_type::state_request:
            return "state_request";
        case frame_type::state_reply:
            return "state_reply";
        case frame_type::latency_ping:
            return "latency_ping";
        case frame_type::latency_pong:
            return "latency_pong";
        case frame_type::latency_table:
            return "latency_table";
        case frame_type::latency_vector_minimum:
            return "latency_vector_minimum";
        case frame_type::connect_declined:
            return "connect_declined";
        case frame_type::peer_lost:
            return "peer_lost";
        case frame_type::eager_put_open:
            return "eager_put_open";
    }
    return "unknown";
}

std::uint16_t allowed_flags(frame_type type) noexcept {
    return type == frame_type::standard || type == frame_type::publish ? frame_flags::broadcast
                                                                       : std::uint16_t{0};
}

bool uses_tag(frame_type type) noexcept {
    switch (type) {
        case frame_type::standard:  // only with frame_flags::broadcast; checked in decode_header
        case frame_type::publish:   // likewise
        case frame_type::rma_get_reply:
        case frame_type::rma_put_data:
        case frame_type::latency_vector_request:
        case frame_type::latency_vector_reply:
        case frame_type::scan:
        case frame_type::scan_reply:
        case frame_type::state_request:
        case frame_type::state_reply:
        case frame_type::latency_ping:
        case frame_type::latency_pong:
        case frame_type::latency_table:
        case frame_type::latency_vector_minimum:
        case frame_type::eager_data:  // 0: the short channel; else a long channel's id
            return true;
        default:
            return false;
    }
}

void encode_header(const frame_header& h, std::span<std::byte, header_size> out) noexcept {
    std::byte* p = out.data();
    put<std::uint32_t>(p, header_field::magic, frame_magic);
    put<std::uint8_t>(p, header_field::version, wire_version);
    put<std::uint8_t>(p, header_field::type, static_cast<std::uint8_t>(h.type));
    put<std::uint16_t>(p, header_field::flags, h.flags);
    put<std::uint32_t>(p, header_field::source_pe, h.source_pe);
    put<std::uint32_t>(p, header_field::payload_length, h.payload_length);
    put<std::uint16_t>(p, header_field::credits, h.credits);
    put<std::uint16_t>(p, header_field::reserved, 0);
    put<std::uint32_t>(p, header_field::tag, h.tag);
}

std::array<std::byte, header_size> encode_header(const frame_header& header) noexcept {
    std::array<std::byte, header_size> out{};
    encode_header(header, std::span<std::byte, header_size>(out));
    return out;
}

payload_rule payload_rule_for(frame_type type, const decode_limits& limits) noexcept {
    using k = payload_length_kind;
    // 64-bit product: num_pes up to 2^32 - 1 would overflow u32.
    const std::uint64_t vector = 4ull * limits.num_pes;
    switch (type) {
        case frame_type::barrier:
            return {k::exact, barrier_payload::wire_size};
        case frame_type::persistent_request:
            return {k::exact, persistent_request_payload::wire_size};
        case frame_type::credit:
            return {k::exact, credit_payload::wire_size};
        case frame_type::latency_vector_request:
            return {k::exact, 0};
        case frame_type::latency_vector_reply:
            return {k::exact, vector};
        case frame_type::cluster_mapping:
            return {k::exact, vector};
        case frame_type::publish:
            return {k::exact, publish_payload::wire_size};
        case frame_type::get_done:
            return {k::exact, get_done_payload::wire_size};
        case frame_type::rma_get_request:
        case frame_type::rma_put_request:
            return {k::exact, rma_request_payload::wire_size};
        case frame_type::rma_complete:
            return {k::exact, rma_complete_payload::wire_size};
        case frame_type::rdma_address:
            return {k::at_least, rdma_address_payload::wire_size};
        case frame_type::eager_channel:
            return {k::exact, eager_channel_payload::wire_size};
        case frame_type::eager_put_open:
            return {k::exact, eager_put_open_payload::wire_size};
        case frame_type::hello:
            return {k::exact, hello_payload::wire_size};
        case frame_type::disconnect:
            return {k::exact, disconnect_payload::wire_size};
        case frame_type::abort:
            return {k::at_least, abort_payload::wire_size};
        case frame_type::register_node:
            return {k::at_least, register_node_payload::wire_size};
        case frame_type::node_table:
            return {k::at_least, node_table_payload::wire_size};
        case frame_type::state_request:
            return {k::exact, state_request_payload::wire_size};
        case frame_type::latency_ping:
        case frame_type::latency_pong:
            return {k::exact, 8};
        case frame_type::latency_table:
            return {k::exact, vector * limits.num_pes};
        case frame_type::latency_vector_minimum:
            return {k::exact, vector};
        case frame_type::connect_declined:
            return {k::exact, 0};
        case frame_type::peer_lost:
            return {k::at_least, peer_lost_payload::wire_size};
        default:
            return {k::any, 0};
    }
}

decoded<frame_header> decode_header(std::span<const std::byte> bytes,
                                    const decode_limits& limits) noexcept {
    decoded<frame_header> r;
    if (bytes.size() < header_size) {
        r.error = fail(decode_status::truncated, {}, "header", bytes.size(), header_size);
        return r;
    }
    const std::byte* p = bytes.data();
    auto get32 = [p](wire_field f) { return load_le<std::uint32_t>(p + f.offset); };
    auto get16 = [p](wire_field f) { return load_le<std::uint16_t>(p + f.offset); };
    auto get8 = [p](wire_field f) { return load_le<std::uint8_t>(p + f.offset); };

    if (const auto magic = get32(header_field::magic); magic != frame_magic) {
        r.error = fail(decode_status::bad_magic, {}, "magic", magic, frame_magic);
        return r;
    }
    if (const auto version = get8(header_field::version); version != wire_version) {
        r.error = fail(decode_status::unsupported_version, {}, "version", version, wire_version);
        return r;
    }
    const auto raw_type = get8(header_field::type);
    if (raw_type < first_frame_type || raw_type > last_frame_type) {
        r.error = fail(decode_status::unknown_type, {}, "type", raw_type, last_frame_type);
        return r;
    }
    frame_header& h = r.value;
    h.type = static_cast<frame_type>(raw_type);
    h.flags = get16(header_field::flags);
    h.source_pe = get32(header_field::source_pe);
    h.payload_length = get32(header_field::payload_length);
    h.credits = get16(header_field::credits);
    h.tag = get32(header_field::tag);

    if (const std::uint16_t allowed = allowed_flags(h.type); (h.flags & ~allowed) != 0) {
        r.error = fail(decode_status::reserved_bits_set, h.type, "flags", h.flags, allowed);
        return r;
    }
    if (const auto reserved = get16(header_field::reserved); reserved != 0) {
        r.error = fail(decode_status::reserved_bits_set, h.type, "reserved", reserved, 0);
        return r;
    }
    if (!valid_pe(h.source_pe, limits)) {
        r.error = fail(decode_status::source_pe_out_of_range, h.type, "source_pe", h.source_pe,
                       limits.num_pes);
        return r;
    }
    if (h.payload_length > limits.max_payload) {
        r.error = fail(decode_status::payload_too_long, h.type, "payload_length", h.payload_length,
                       limits.max_payload);
        return r;
    }
    const payload_rule rule = payload_rule_for(h.type, limits);
    const bool length_fits =
        rule.kind == payload_length_kind::any ||
        (rule.kind == payload_length_kind::exact && h.payload_length == rule.length) ||
        (rule.kind == payload_length_kind::at_least && h.payload_length >= rule.length);
    if (!length_fits) {
        r.error = fail(decode_status::payload_length_mismatch, h.type, "payload_length",
                       h.payload_length, rule.length);
        return r;
    }
    const bool tree = h.type == frame_type::standard || h.type == frame_type::publish;
    if (tree && (h.flags & frame_flags::broadcast) != 0) {
        if (h.tag >= limits.num_pes) {
            r.error = fail(decode_status::broadcast_root_out_of_range, h.type, "tag", h.tag,
                           limits.num_pes);
            return r;
        }
    } else if (h.tag != 0 && (!uses_tag(h.type) || tree)) {
        r.error = fail(decode_status::reserved_bits_set, h.type, "tag", h.tag, 0);
        return r;
    }
    return r;
}

decode_error validate_payload(const frame_header& header, std::span<const std::byte> payload,
                              const decode_limits& limits) noexcept {
    if (payload.size() != header.payload_length) {
        return fail(decode_status::truncated, header.type, "payload", payload.size(),
                    header.payload_length);
    }
    switch (header.type) {
        case frame_type::hello: {
            auto d = decode_hello(payload, limits);
            if (!d.ok()) return d.error;
            // The hello speaks for the connection; a rank other than the frame's source
            // means a confused or forged peer.
            if (d.value.rank != header.source_pe) {
                return fail(decode_status::invalid_field, header.type, "hello.rank/source_pe",
                            d.value.rank, header.source_pe);
            }
            return {};
        }
        case frame_type::publish:
            return decode_publish(payload, limits).error;
        case frame_type::get_done:
            return decode_get_done(payload, limits).error;
        case frame_type::rma_get_request:
        case frame_type::rma_put_request:
            return decode_rma_request(payload, header.type).error;
        case frame_type::rma_complete:
            return decode_rma_complete(payload).error;
        case frame_type::rdma_address:
            return decode_rdma_address(payload).error;
        case frame_type::eager_channel:
            return decode_eager_channel(payload).error;
        case frame_type::eager_put_open:
            return decode_eager_put_open(payload).error;
        case frame_type::credit:
            return decode_credit(payload, limits).error;
        case frame_type::barrier:
            return decode_barrier(payload, limits).error;
        case frame_type::persistent_request:
            return decode_persistent_request(payload, limits).error;
        case frame_type::disconnect:
            return decode_disconnect(payload, limits).error;
        case frame_type::abort:
            return decode_abort(payload, limits).error;
        case frame_type::register_node: {
            auto d = decode_register_node(payload, limits);
            if (!d.ok()) return d.error;
            // Like hello: the registration speaks for the connection's PE.
            if (d.value.node != header.source_pe) {
                return fail(decode_status::invalid_field, header.type,
                            "register_node.node/source_pe", d.value.node, header.source_pe);
            }
            return {};
        }
        case frame_type::node_table:
            // Only the launcher hands out node tables.
            if (header.source_pe != launcher_pe) {
                return fail(decode_status::invalid_field, header.type, "node_table/source_pe",
                            header.source_pe, launcher_pe);
            }
            return decode_node_table(payload, limits).error;
        case frame_type::state_request:
            return decode_state_request(payload, limits).error;
        case frame_type::peer_lost:
            // Only the launcher knows that a PE died.
            if (header.source_pe != launcher_pe) {
                return fail(decode_status::invalid_field, header.type, "peer_lost/source_pe",
                            header.source_pe, launcher_pe);
            }
            return decode_peer_lost(payload, limits).error;
        default:
            return {};
    }
}

// ---------------------------------------------------------------------------------------
// Control payloads

std::array<std::byte, hello_payload::wire_size> encode(const hello_payload& v) noexcept {
    std::array<std::byte, hello_payload::wire_size> out{};
    store_le<std::uint64_t>(out.data() + hello_off::job_key, v.job_key);
    store_le<std::uint32_t>(out.data() + hello_off::rank, v.rank);
    store_le<std::uint32_t>(out.data() + hello_off::num_pes, v.num_pes);
    store_le<std::uint32_t>(out.data() + hello_off::protocol_version, v.protocol_version);
    return out;
}

decoded<hello_payload> decode_hello(std::span<const std::byte> b,
                                    const decode_limits& limits) noexcept {
    decoded<hello_payload> r;
    if ((r.error = check_exact(b, hello_payload::wire_size, frame_type::hello))) return r;
    const std::byte* p = b.data();
    r.value.job_key = load_le<std::uint64_t>(p + hello_off::job_key);
    r.value.rank = load_le<std::uint32_t>(p + hello_off::rank);
    r.value.num_pes = load_le<std::uint32_t>(p + hello_off::num_pes);
    r.value.protocol_version = load_le<std::uint32_t>(p + hello_off::protocol_version);
    const auto reserved = load_le<std::uint32_t>(p + hello_off::reserved);
    if (reserved != 0) {
        r.error =
            fail(decode_status::reserved_bits_set, frame_type::hello, "hello.reserved", reserved);
    } else if (r.value.protocol_version == 0) {
        r.error = fail(decode_status::invalid_field, frame_type::hello, "hello.protocol_version", 0,
                       protocol_revision);
    } else if (r.value.num_pes != limits.num_pes) {
        r.error = fail(decode_status::invalid_field, frame_type::hello, "hello.num_pes",
                       r.value.num_pes, limits.num_pes);
    } else if (r.value.rank >= limits.num_pes) {
        r.error = fail(decode_status::invalid_field, frame_type::hello, "hello.rank", r.value.rank,
                       limits.num_pes);
    }
    return r;
}

std::array<std::byte, publish_payload::wire_size> encode(const publish_payload& v) noexcept {
    std::array<std::byte, publish_payload::wire_size> out{};
    store_le<std::uint64_t>(out.data() + publish_off::address, v.address);
    store_le<std::uint64_t>(out.data() + publish_off::key, v.key);
    store_le<std::uint64_t>(out.data() + publish_off::size, v.size);
    store_le<std::uint32_t>(out.data() + publish_off::handle, v.handle);
    return out;
}

decoded<publish_payload> decode_publish(std::span<const std::byte> b,
                                        const decode_limits& limits) noexcept {
    decoded<publish_payload> r;
    if ((r.error = check_exact(b, publish_payload::wire_size, frame_type::publish))) return r;
    const std::byte* p = b.data();
    r.value.address = load_le<std::uint64_t>(p + publish_off::address);
    r.value.key = load_le<std::uint64_t>(p + publish_off::key);
    r.value.size = load_le<std::uint64_t>(p + publish_off::size);
    r.value.handle = load_le<std::uint32_t>(p + publish_off::handle);
    const auto reserved = load_le<std::uint32_t>(p + publish_off::reserved);
    if (reserved != 0) {
        r.error = fail(decode_status::reserved_bits_set, frame_type::publish, "publish.reserved",
                       reserved);
    } else if (r.value.size == 0 || r.value.size > limits.max_message) {
        // The receiver allocates `size` bytes before the get: MAX_MESSAGE bounds that.
        r.error = fail(decode_status::invalid_field, frame_type::publish, "publish.size",
                       r.value.size, limits.max_message);
    }
    return r;
}

std::array<std::byte, rma_request_payload::wire_size> encode(
    const rma_request_payload& v) noexcept {
    std::array<std::byte, rma_request_payload::wire_size> out{};
    store_le<std::uint64_t>(out.data() + rma_off::address, v.address);
    store_le<std::uint64_t>(out.data() + rma_off::key, v.key);
    store_le<std::uint64_t>(out.data() + rma_off::size, v.size);
    store_le<std::uint32_t>(out.data() + rma_off::id, v.id);
    return out;
}

decoded<rma_request_payload> decode_rma_request(std::span<const std::byte> b,
                                                frame_type type) noexcept {
    decoded<rma_request_payload> r;
    if ((r.error = check_exact(b, rma_request_payload::wire_size, type))) return r;
    const std::byte* p = b.data();
    r.value.address = load_le<std::uint64_t>(p + rma_off::address);
    r.value.key = load_le<std::uint64_t>(p + rma_off::key);
    r.value.size = load_le<std::uint64_t>(p + rma_off::size);
    r.value.id = load_le<std::uint32_t>(p + rma_off::id);
    if (const auto reserved = load_le<std::uint32_t>(p + rma_off::reserved); reserved != 0)
        r.error = fail(decode_status::reserved_bits_set, type, "rma_request.reserved", reserved);
    else if (r.value.size == 0)
        r.error = fail(decode_status::invalid_field, type, "rma_request.size", 0, 1);
    return r;
}

std::array<std::byte, rma_complete_payload::wire_size> encode(
    const rma_complete_payload& v) noexcept {
    std::array<std::byte, rma_complete_payload::wire_size> out{};
    store_le<std::uint32_t>(out.data() + rma_off::c_id, v.id);
    store_le<std::uint32_t>(out.data() + rma_off::c_op, static_cast<std::uint32_t>(v.op));
    store_le<std::uint32_t>(out.data() + rma_off::c_status, static_cast<std::uint32_t>(v.status));
    return out;
}

std::vector<std::byte> encode(const rdma_address_payload& v) {
    std::vector<std::byte> out(rdma_address_payload::wire_size + v.blob.size());
    store_le<std::uint32_t>(out.data(), v.stage);
    store_le<std::uint32_t>(out.data() + 4, v.provider);
    std::copy(v.blob.begin(), v.blob.end(), out.begin() + rdma_address_payload::wire_size);
    return out;
}

decoded<rdma_address_payload> decode_rdma_address(std::span<const std::byte> b) noexcept {
    decoded<rdma_address_payload> r;
    constexpr auto type = frame_type::rdma_address;
    if ((r.error = check_at_least(b, rdma_address_payload::wire_size, type))) return r;
    r.value.stage = load_le<std::uint32_t>(b.data());
    r.value.provider = load_le<std::uint32_t>(b.data() + 4);
    r.value.blob = b.subspan(rdma_address_payload::wire_size);
    if (r.value.stage < 1 || r.value.stage > 2)
        r.error = fail(decode_status::invalid_field, type, "rdma_address.stage", r.value.stage, 2);
    else if (r.value.provider < 1 || r.value.provider > 3)
        r.error =
            fail(decode_status::invalid_field, type, "rdma_address.provider", r.value.provider, 3);
    return r;
}

decoded<rma_complete_payload> decode_rma_complete(std::span<const std::byte> b) noexcept {
    decoded<rma_complete_payload> r;
    constexpr auto type = frame_type::rma_complete;
    if ((r.error = check_exact(b, rma_complete_payload::wire_size, type))) return r;
    const std::byte* p = b.data();
    r.value.id = load_le<std::uint32_t>(p + rma_off::c_id);
    const auto op = load_le<std::uint32_t>(p + rma_off::c_op);
    const auto status = load_le<std::uint32_t>(p + rma_off::c_status);
    const auto reserved = load_le<std::uint32_t>(p + rma_off::c_reserved);
    if (reserved != 0) {
        r.error = fail(decode_status::reserved_bits_set, type, "rma_complete.reserved", reserved);
    } else if (op < 1 || op > 2) {
        r.error = fail(decode_status::invalid_field, type, "rma_complete.op", op, 2);
    } else if (status > 1) {
        r.error = fail(decode_status::invalid_field, type, "rma_complete.status", status, 1);
    } else {
        r.value.op = static_cast<rma_op>(op);
        r.value.status = static_cast<rma_status>(status);
    }
    return r;
}

std::array<std::byte, get_done_payload::wire_size> encode(const get_done_payload& v) noexcept {
    std::array<std::byte, get_done_payload::wire_size> out{};
    store_le<std::uint32_t>(out.data() + get_done_off::handle, v.handle);
    store_le<std::uint32_t>(out.data() + get_done_off::status,
                            static_cast<std::uint32_t>(v.status));
    return out;
}

decoded<get_done_payload> decode_get_done(std::span<const std::byte> b,
                                          const decode_limits&) noexcept {
    decoded<get_done_payload> r;
    if ((r.error = check_exact(b, get_done_payload::wire_size, frame_type::get_done))) return r;
    r.value.handle = load_le<std::uint32_t>(b.data() + get_done_off::handle);
    const auto status = load_le<std::uint32_t>(b.data() + get_done_off::status);
    if (status > static_cast<std::uint32_t>(get_status::failed)) {
        r.error = fail(decode_status::invalid_field, frame_type::get_done, "get_done.status",
                       status, static_cast<std::uint32_t>(get_status::failed));
        return r;
    }
    r.value.status = static_cast<get_status>(status);
    return r;
}

std::array<std::byte, credit_payload::wire_size> encode(const credit_payload& v) noexcept {
    std::array<std::byte, credit_payload::wire_size> out{};
    store_le<std::uint32_t>(out.data() + credit_off::count, v.count);
    return out;
}

decoded<credit_payload> decode_credit(std::span<const std::byte> b, const decode_limits&) noexcept {
    decoded<credit_payload> r;
    if ((r.error = check_exact(b, credit_payload::wire_size, frame_type::credit))) return r;
    r.value.count = load_le<std::uint32_t>(b.data() + credit_off::count);
    if (r.value.count == 0) {
        r.error = fail(decode_status::invalid_field, frame_type::credit, "credit.count", 0, 1);
    }
    return r;
}

std::array<std::byte, barrier_payload::wire_size> encode(const barrier_payload& v) noexcept {
    std::array<std::byte, barrier_payload::wire_size> out{};
    store_le<std::uint32_t>(out.data() + barrier_off::epoch, v.epoch);
    store_le<std::uint32_t>(out.data() + barrier_off::phase, static_cast<std::uint32_t>(v.phase));
    return out;
}

decoded<barrier_payload> decode_barrier(std::span<const std::byte> b,
                                        const decode_limits&) noexcept {
    decoded<barrier_payload> r;
    if ((r.error = check_exact(b, barrier_payload::wire_size, frame_type::barrier))) return r;
    r.value.epoch = load_le<std::uint32_t>(b.data() + barrier_off::epoch);
    const auto phase = load_le<std::uint32_t>(b.data() + barrier_off::phase);
    if (phase != static_cast<std::uint32_t>(barrier_phase::arrive) &&
        phase != static_cast<std::uint32_t>(barrier_phase::release)) {
        r.error = fail(decode_status::invalid_field, frame_type::barrier, "barrier.phase", phase,
                       static_cast<std::uint32_t>(barrier_phase::release));
        return r;
    }
    r.value.phase = static_cast<barrier_phase>(phase);
    return r;
}

std::array<std::byte, persistent_request_payload::wire_size> encode(
    const persistent_request_payload& v) noexcept {
    std::array<std::byte, persistent_request_payload::wire_size> out{};
    store_le<std::uint64_t>(out.data() + persistent_off::max_size, v.max_size);
    store_le<std::uint32_t>(out.data() + persistent_off::handle, v.handle);
    return out;
}

decoded<persistent_request_payload> decode_persistent_request(
    std::span<const std::byte> b, const decode_limits& limits) noexcept {
    decoded<persistent_request_payload> r;
    if ((r.error = check_exact(b, persistent_request_payload::wire_size,
                               frame_type::persistent_request))) {
        return r;
    }
    r.value.max_size = load_le<std::uint64_t>(b.data() + persistent_off::max_size);
    r.value.handle = load_le<std::uint32_t>(b.data() + persistent_off::handle);
    const auto reserved = load_le<std::uint32_t>(b.data() + persistent_off::reserved);
    if (reserved != 0) {
        r.error = fail(decode_status::reserved_bits_set, frame_type::persistent_request,
                       "persistent_request.reserved", reserved);
    } else if (r.value.max_size == 0 || r.value.max_size > limits.max_payload) {
        r.error = fail(decode_status::invalid_field, frame_type::persistent_request,
                       "persistent_request.max_size", r.value.max_size, limits.max_payload);
    }
    return r;
}

std::array<std::byte, eager_channel_payload::wire_size> encode(
    const eager_channel_payload& v) noexcept {
    std::array<std::byte, eager_channel_payload::wire_size> out{};
    store_le<std::uint32_t>(out.data() + eager_off::action, static_cast<std::uint32_t>(v.action));
    store_le<std::uint32_t>(out.data() + eager_off::kind, v.kind);
    store_le<std::uint32_t>(out.data() + eager_off::channel, v.channel);
    store_le<std::uint32_t>(out.data() + eager_off::handle, v.handle);
    store_le<std::uint32_t>(out.data() + eager_off::slots, v.slots);
    store_le<std::uint32_t>(out.data() + eager_off::capacity, v.capacity);
    return out;
}

decoded<eager_channel_payload> decode_eager_channel(std::span<const std::byte> b) noexcept {
    decoded<eager_channel_payload> r;
    constexpr auto type = frame_type::eager_channel;
    if ((r.error = check_exact(b, eager_channel_payload::wire_size, type))) return r;
    const auto action = load_le<std::uint32_t>(b.data() + eager_off::action);
    r.value.action = static_cast<eager_action>(action);
    r.value.kind = load_le<std::uint32_t>(b.data() + eager_off::kind);
    r.value.channel = load_le<std::uint32_t>(b.data() + eager_off::channel);
    r.value.handle = load_le<std::uint32_t>(b.data() + eager_off::handle);
    r.value.slots = load_le<std::uint32_t>(b.data() + eager_off::slots);
    r.value.capacity = load_le<std::uint32_t>(b.data() + eager_off::capacity);
    const auto reserved = load_le<std::uint64_t>(b.data() + eager_off::reserved);
    if (reserved != 0) {
        r.error = fail(decode_status::reserved_bits_set, type, "eager_channel.reserved", reserved);
    } else if (action < 1 || action > 6) {
        r.error = fail(decode_status::invalid_field, type, "eager_channel.action", action, 6);
    } else if (r.value.kind < 1 || r.value.kind > 2) {
        r.error = fail(decode_status::invalid_field, type, "eager_channel.kind", r.value.kind, 2);
    } else if (r.value.channel == 0 && r.value.action != eager_action::refuse &&
               r.value.action != eager_action::destroy) {
        r.error = fail(decode_status::invalid_field, type, "eager_channel.channel", 0, 1);
    } else if (r.value.action == eager_action::open &&
               (r.value.slots < 1 || r.value.slots > 1024)) {
        r.error =
            fail(decode_status::invalid_field, type, "eager_channel.slots", r.value.slots, 1024);
    } else if (r.value.action == eager_action::open && r.value.capacity == 0) {
        r.error = fail(decode_status::invalid_field, type, "eager_channel.capacity", 0, 1);
    } else if (r.value.action == eager_action::credit && r.value.slots == 0) {
        r.error = fail(decode_status::invalid_field, type, "eager_channel.slots", 0, 1);
    }
    return r;
}

std::array<std::byte, eager_put_open_payload::wire_size> encode(
    const eager_put_open_payload& v) noexcept {
    std::array<std::byte, eager_put_open_payload::wire_size> out{};
    store_le<std::uint32_t>(out.data() + eager_put_off::channel, v.channel);
    store_le<std::uint32_t>(out.data() + eager_put_off::slots, v.slots);
    store_le<std::uint32_t>(out.data() + eager_put_off::capacity, v.capacity);
    store_le<std::uint64_t>(out.data() + eager_put_off::address, v.address);
    store_le<std::uint64_t>(out.data() + eager_put_off::key, v.key);
    return out;
}

decoded<eager_put_open_payload> decode_eager_put_open(std::span<const std::byte> b) noexcept {
    decoded<eager_put_open_payload> r;
    constexpr auto type = frame_type::eager_put_open;
    if ((r.error = check_exact(b, eager_put_open_payload::wire_size, type))) return r;
    auto& v = r.value;
    v.channel = load_le<std::uint32_t>(b.data() + eager_put_off::channel);
    v.slots = load_le<std::uint32_t>(b.data() + eager_put_off::slots);
    v.capacity = load_le<std::uint32_t>(b.data() + eager_put_off::capacity);
    const auto reserved = load_le<std::uint32_t>(b.data() + eager_put_off::reserved);
    v.address = load_le<std::uint64_t>(b.data() + eager_put_off::address);
    v.key = load_le<std::uint64_t>(b.data() + eager_put_off::key);
    if (reserved != 0)
        r.error = fail(decode_status::reserved_bits_set, type, "eager_put_open.reserved", reserved);
    else if (v.channel == 0)
        r.error = fail(decode_status::invalid_field, type, "eager_put_open.channel", 0, 1);
    else if (v.slots < 1 || v.slots > 1024)
        r.error = fail(decode_status::invalid_field, type, "eager_put_open.slots", v.slots, 1024);
    else if (v.capacity < 1 || v.capacity > (1u << 30))
        r.error = fail(decode_status::invalid_field, type, "eager_put_open.capacity", v.capacity,
                       1u << 30);
    else if (v.address == 0)
        r.error = fail(decode_status::invalid_field, type, "eager_put_open.address", 0, 1);
    return r;
}

std::array<std::byte, disconnect_payload::wire_size> encode(const disconnect_payload& v) noexcept {
    std::array<std::byte, disconnect_payload::wire_size> out{};
    store_le<std::uint32_t>(out.data() + disconnect_off::reason,
                            static_cast<std::uint32_t>(v.reason));
    return out;
}

decoded<disconnect_payload> decode_disconnect(std::span<const std::byte> b,
                                              const decode_limits&) noexcept {
    decoded<disconnect_payload> r;
    if ((r.error = check_exact(b, disconnect_payload::wire_size, frame_type::disconnect))) return r;
    const auto reason = load_le<std::uint32_t>(b.data() + disconnect_off::reason);
    if (reason < static_cast<std::uint32_t>(disconnect_reason::shutdown) ||
        reason > static_cast<std::uint32_t>(disconnect_reason::timeout)) {
        r.error = fail(decode_status::invalid_field, frame_type::disconnect, "disconnect.reason",
                       reason, static_cast<std::uint32_t>(disconnect_reason::timeout));
        return r;
    }
    r.value.reason = static_cast<disconnect_reason>(reason);
    return r;
}

std::array<std::byte, state_request_payload::wire_size> encode(
    const state_request_payload& v) noexcept {
    std::array<std::byte, state_request_payload::wire_size> out{};
    store_le<std::uint32_t>(out.data(), static_cast<std::uint32_t>(v.want));
    return out;
}

decoded<state_request_payload> decode_state_request(std::span<const std::byte> b,
                                                    const decode_limits&) noexcept {
    decoded<state_request_payload> r;
    constexpr auto type = frame_type::state_request;
    if ((r.error = check_exact(b, state_request_payload::wire_size, type))) return r;
    const auto want = load_le<std::uint32_t>(b.data());
    if (want < static_cast<std::uint32_t>(state_want::progress) ||
        want > static_cast<std::uint32_t>(state_want::full)) {
        r.error = fail(decode_status::invalid_field, type, "state_request.want", want,
                       static_cast<std::uint32_t>(state_want::full));
        return r;
    }
    r.value.want = static_cast<state_want>(want);
    return r;
}

std::vector<std::byte> encode(const abort_payload& v) {
    std::vector<std::byte> out(abort_payload::wire_size + v.text.size());
    store_le<std::uint32_t>(out.data() + abort_off::exit_code,
                            static_cast<std::uint32_t>(v.exit_code));
    store_le<std::uint32_t>(out.data() + abort_off::origin_pe, v.origin_pe);
    for (std::size_t i = 0; i < v.text.size(); ++i) {
        out[abort_off::text + i] = static_cast<std::byte>(v.text[i]);
    }
    return out;
}

decoded<abort_payload> decode_abort(std::span<const std::byte> b,
                                    const decode_limits& limits) noexcept {
    decoded<abort_payload> r;
    if (b.size() < abort_payload::wire_size) {
        r.error = fail(decode_status::payload_length_mismatch, frame_type::abort, "payload_length",
                       b.size(), abort_payload::wire_size);
        return r;
    }
    // Two's complement by definition in C++20, so the cast round-trips negative codes.
    r.value.exit_code =
        static_cast<std::int32_t>(load_le<std::uint32_t>(b.data() + abort_off::exit_code));
    r.value.origin_pe = load_le<std::uint32_t>(b.data() + abort_off::origin_pe);
    r.value.text = std::string_view(reinterpret_cast<const char*>(b.data()) + abort_off::text,
                                    b.size() - abort_off::text);
    if (!valid_pe(r.value.origin_pe, {limits.max_payload, limits.num_pes, true})) {
        r.error = fail(decode_status::invalid_field, frame_type::abort, "abort.origin_pe",
                       r.value.origin_pe, limits.num_pes);
    }
    return r;
}

std::vector<std::byte> encode(const peer_lost_payload& v) {
    std::vector<std::byte> out(peer_lost_payload::wire_size + v.text.size());
    store_le<std::uint32_t>(out.data() + peer_lost_off::pe, v.pe);
    for (std::size_t i = 0; i < v.text.size(); ++i)
        out[peer_lost_off::text + i] = static_cast<std::byte>(v.text[i]);
    return out;
}

decoded<peer_lost_payload> decode_peer_lost(std::span<const std::byte> b,
                                            const decode_limits& limits) noexcept {
    decoded<peer_lost_payload> r;
    constexpr auto type = frame_type::peer_lost;
    if ((r.error = check_at_least(b, peer_lost_payload::wire_size, type))) return r;
    r.value.pe = load_le<std::uint32_t>(b.data() + peer_lost_off::pe);
    const auto reserved = load_le<std::uint32_t>(b.data() + peer_lost_off::reserved);
    r.value.text = std::string_view(reinterpret_cast<const char*>(b.data()) + peer_lost_off::text,
                                    b.size() - peer_lost_off::text);
    if (reserved != 0)
        r.error = fail(decode_status::reserved_bits_set, type, "peer_lost.reserved", reserved);
    else if (r.value.pe >= limits.num_pes)
        r.error =
            fail(decode_status::invalid_field, type, "peer_lost.pe", r.value.pe, limits.num_pes);
    return r;
}

namespace {

// An IP address or host name as text: 1..max_ip_text printable ASCII bytes, no space.
// Returns the offending value (length, or the first bad byte) when it is not one.
std::optional<std::uint64_t> bad_ip_text(std::string_view ip) noexcept {
    if (ip.empty() || ip.size() > max_ip_text) return ip.size();
    for (char c : ip) {
        const auto u = static_cast<unsigned char>(c);
        if (u < 0x21 || u > 0x7E) return u;
    }
    return std::nullopt;
}

std::string_view text_at(std::span<const std::byte> b, std::size_t offset,
                         std::size_t length) noexcept {
    return std::string_view(reinterpret_cast<const char*>(b.data()) + offset, length);
}

void put_text(std::byte* out, std::string_view text) noexcept {
    for (std::size_t i = 0; i < text.size(); ++i)
        out[i] = static_cast<std::byte>(text[i]);
}

}  // namespace

std::vector<std::byte> encode(const register_node_payload& v) {
    std::vector<std::byte> out(register_node_payload::wire_size + v.ip.size());
    std::byte* p = out.data();
    store_le<std::uint32_t>(p + register_off::node, v.node);
    store_le<std::uint32_t>(p + register_off::pe_count, v.pe_count);
    store_le<std::uint16_t>(p + register_off::data_port, v.data_port);
    store_le<std::uint32_t>(p + register_off::protocol_version, v.protocol_version);
    store_le<std::uint64_t>(p + register_off::machine_id, v.machine_id);
    store_le<std::uint64_t>(p + register_off::job_key, v.job_key);
    put_text(p + register_off::ip, v.ip);
    return out;
}

decoded<register_node_payload> decode_register_node(std::span<const std::byte> b,
                                                    const decode_limits& limits) noexcept {
    constexpr auto type = frame_type::register_node;
    decoded<register_node_payload> r;
    if (b.size() < register_node_payload::wire_size) {
        r.error = fail(decode_status::payload_length_mismatch, type, "payload_length", b.size(),
                       register_node_payload::wire_size);
        return r;
    }
    const std::byte* p = b.data();
    auto& v = r.value;
    v.node = load_le<std::uint32_t>(p + register_off::node);
    v.pe_count = load_le<std::uint32_t>(p + register_off::pe_count);
    v.data_port = load_le<std::uint16_t>(p + register_off::data_port);
    v.protocol_version = load_le<std::uint32_t>(p + register_off::protocol_version);
    v.machine_id = load_le<std::uint64_t>(p + register_off::machine_id);
    v.job_key = load_le<std::uint64_t>(p + register_off::job_key);
    v.ip = text_at(b, register_off::ip, b.size() - register_off::ip);
    const auto reserved = load_le<std::uint16_t>(p + register_off::reserved);
    if (reserved != 0) {
        r.error = fail(decode_status::reserved_bits_set, type, "register_node.reserved", reserved);
    } else if (v.protocol_version == 0) {
        r.error = fail(decode_status::invalid_field, type, "register_node.protocol_version", 0,
                       protocol_revision);
    } else if (v.node >= limits.num_pes) {
        r.error =
            fail(decode_status::invalid_field, type, "register_node.node", v.node, limits.num_pes);
    } else if (v.pe_count == 0 || v.pe_count > limits.num_pes - v.node) {
        r.error = fail(decode_status::invalid_field, type, "register_node.pe_count", v.pe_count,
                       limits.num_pes - v.node);
    } else if (v.data_port == 0) {
        r.error = fail(decode_status::invalid_field, type, "register_node.data_port", 0);
    } else if (const auto bad = bad_ip_text(v.ip)) {
        r.error = fail(decode_status::invalid_field, type, "register_node.ip", *bad, max_ip_text);
    }
    return r;
}

std::vector<std::byte> encode_node_table(std::span<const node_record> records) {
    std::size_t size = node_table_payload::wire_size;
    for (const node_record& n : records)
        size += node_record::wire_size + n.ip.size();
    std::vector<std::byte> out(size);
    std::byte* p = out.data();
    store_le<std::uint32_t>(p + node_table_off::status,
                            static_cast<std::uint32_t>(node_table_status::ok));
    store_le<std::uint32_t>(p + node_table_off::count, static_cast<std::uint32_t>(records.size()));
    p += node_table_off::records;
    for (const node_record& n : records) {
        store_le<std::uint64_t>(p + record_off::machine_id, n.machine_id);
        store_le<std::uint32_t>(p + record_off::node, n.node);
        store_le<std::uint32_t>(p + record_off::pe_count, n.pe_count);
        store_le<std::uint16_t>(p + record_off::data_port, n.data_port);
        store_le<std::uint16_t>(p + record_off::ip_length, static_cast<std::uint16_t>(n.ip.size()));
        put_text(p + record_off::ip, n.ip);
        p += node_record::wire_size + n.ip.size();
    }
    return out;
}

std::vector<std::byte> encode_node_table_refusal(std::string_view why) {
    std::vector<std::byte> out(node_table_payload::wire_size + why.size());
    store_le<std::uint32_t>(out.data() + node_table_off::status,
                            static_cast<std::uint32_t>(node_table_status::refused));
    store_le<std::uint32_t>(out.data() + node_table_off::count, 0);
    put_text(out.data() + node_table_off::records, why);
    return out;
}

namespace {

// Reads the record at `offset`; the caller has checked that its fixed part fits.
node_record record_at(std::span<const std::byte> b, std::size_t offset) noexcept {
    const std::byte* p = b.data() + offset;
    node_record n;
    n.machine_id = load_le<std::uint64_t>(p + record_off::machine_id);
    n.node = load_le<std::uint32_t>(p + record_off::node);
    n.pe_count = load_le<std::uint32_t>(p + record_off::pe_count);
    n.data_port = load_le<std::uint16_t>(p + record_off::data_port);
    const auto ip_length = load_le<std::uint16_t>(p + record_off::ip_length);
    const std::size_t ip_at = offset + record_off::ip;
    n.ip = text_at(b, ip_at, std::min<std::size_t>(ip_length, b.size() - ip_at));
    return n;
}

}  // namespace

decoded<node_table_payload> decode_node_table(std::span<const std::byte> b,
                                              const decode_limits& limits) noexcept {
    constexpr auto type = frame_type::node_table;
    decoded<node_table_payload> r;
    if (b.size() < node_table_payload::wire_size) {
        r.error = fail(decode_status::payload_length_mismatch, type, "payload_length", b.size(),
                       node_table_payload::wire_size);
        return r;
    }
    auto& v = r.value;
    const auto status = load_le<std::uint32_t>(b.data() + node_table_off::status);
    v.count = load_le<std::uint32_t>(b.data() + node_table_off::count);
    if (status > static_cast<std::uint32_t>(node_table_status::refused)) {
        r.error = fail(decode_status::invalid_field, type, "node_table.status", status,
                       static_cast<std::uint32_t>(node_table_status::refused));
        return r;
    }
    v.status = static_cast<node_table_status>(status);
    const auto rest = b.subspan(node_table_off::records);
    if (v.status == node_table_status::refused) {
        if (v.count != 0) {
            r.error = fail(decode_status::invalid_field, type, "node_table.count", v.count, 0);
        }
        v.text = text_at(b, node_table_off::records, rest.size());
        return r;
    }
    if (v.count == 0 || v.count > limits.num_pes) {
        r.error =
            fail(decode_status::invalid_field, type, "node_table.count", v.count, limits.num_pes);
        return r;
    }
    // Walk the records: each must fit, and together they cover PEs [0, num_pes) in order.
    std::size_t offset = node_table_off::records;
    std::uint64_t next_pe = 0;
    for (std::uint32_t i = 0; i < v.count; ++i) {
        if (b.size() - offset < node_record::wire_size) {
            r.error = fail(decode_status::invalid_field, type, "node_table.record_length",
                           b.size() - offset, node_record::wire_size);
            return r;
        }
        const auto ip_length = load_le<std::uint16_t>(b.data() + offset + record_off::ip_length);
        if (b.size() - offset - node_record::wire_size < ip_length) {
            r.error = fail(decode_status::invalid_field, type, "node_table.record_length",
                           b.size() - offset, node_record::wire_size + ip_length);
            return r;
        }
        const node_record n = record_at(b, offset);
        if (n.node != next_pe) {
            r.error = fail(decode_status::invalid_field, type, "node_table.node", n.node, next_pe);
            return r;
        }
        if (n.pe_count == 0 || n.pe_count > limits.num_pes - next_pe) {
            r.error = fail(decode_status::invalid_field, type, "node_table.pe_count", n.pe_count,
                           limits.num_pes - next_pe);
            return r;
        }
        if (n.data_port == 0) {
            r.error = fail(decode_status::invalid_field, type, "node_table.data_port", 0);
            return r;
        }
        if (const auto bad = bad_ip_text(n.ip)) {
            r.error = fail(decode_status::invalid_field, type, "node_table.ip", *bad, max_ip_text);
            return r;
        }
        next_pe += n.pe_count;
        offset += node_record::wire_size + ip_length;
    }
    if (next_pe != limits.num_pes) {
        r.error = fail(decode_status::invalid_field, type, "node_table.pe_total", next_pe,
                       limits.num_pes);
        return r;
    }
    if (offset != b.size()) {
        r.error =
            fail(decode_status::invalid_field, type, "node_table.trailing", b.size() - offset, 0);
        return r;
    }
    v.records = b.subspan(node_table_off::records, offset - node_table_off::records);
    return r;
}

std::vector<node_record> node_records(const node_table_payload& table) {
    std::vector<node_record> out;
    out.reserve(table.count);
    std::size_t offset = 0;
    for (std::uint32_t i = 0; i < table.count && offset < table.records.size(); ++i) {
        out.push_back(record_at(table.records, offset));
        offset += node_record::wire_size + out.back().ip.size();
    }
    return out;
}

// ---------------------------------------------------------------------------------------
// Error texts

std::string_view decode_status_name(decode_status status) noexcept {
    switch (status) {
        case decode_status::ok:
            return "ok";
        case decode_status::truncated:
            return "truncated";
        case decode_status::bad_magic:
            return "bad_magic";
        case decode_status::unsupported_version:
            return "unsupported_version";
        case decode_status::unknown_type:
            return "unknown_type";
        case decode_status::reserved_bits_set:
            return "reserved_bits_set";
        case decode_status::source_pe_out_of_range:
            return "source_pe_out_of_range";
        case decode_status::payload_too_long:
            return "payload_too_long";
        case decode_status::payload_length_mismatch:
            return "payload_length_mismatch";
        case decode_status::broadcast_root_out_of_range:
            return "broadcast_root_out_of_range";
        case decode_status::invalid_field:
            return "invalid_field";
        case decode_status::payload_allocation_failed:
            return "payload_allocation_failed";
    }
    return "unknown";
}

namespace {

std::string format(const char* fmt, auto... args) {
    char buf[256];
    const int n = std::snprintf(buf, sizeof buf, fmt, args...);
    return std::string(
        buf, n < 0 ? 0 : std::min<std::size_t>(static_cast<std::size_t>(n), sizeof buf - 1));
}

// Built with append, not operator+ chains: GCC 12 at -O3 raises a false -Wrestrict on those.
std::string type_label(const decode_error& e) {
    std::string out;
    out += '\'';
    out.append(frame_type_name(e.type));
    out += '\'';
    return out;
}

// What a valid value of each range-checked payload field looks like; each text takes the
// error's `limit` as its one %llu (or ignores it).
const char* field_rule(std::string_view field) {
    struct rule {
        std::string_view field;
        const char* text;
    };
    static constexpr rule rules[] = {
        {"hello.protocol_version", "must be at least 1; this build speaks revision %llu"},
        {"hello.num_pes", "this job has %llu PEs"},
        {"hello.rank", "the job has %llu PEs"},
        {"hello.rank/source_pe", "the frame's source PE is %llu"},
        {"publish.size", "must be 1..%llu (COVERSE_MAX_MESSAGE)"},
        {"rma_request.size", "must be at least %llu byte"},
        {"rma_complete.op", "must be 1 (get) or %llu (put)"},
        {"rma_complete.status", "must be 0 (ok) or %llu (refused)"},
        {"rdma_address.stage", "must be 1 (offer) or %llu (verdict)"},
        {"eager_channel.action", "must be 1 (open) .. %llu (destroy)"},
        {"eager_channel.kind", "must be 1 (short slots) or %llu (long buffers)"},
        {"eager_channel.channel", "must be at least %llu"},
        {"eager_channel.slots", "must be 1 .. %llu"},
        {"eager_channel.capacity", "must be at least %llu"},
        {"eager_channel.reserved", "must be 0"},
        {"eager_put_open.channel", "must be at least %llu"},
        {"eager_put_open.slots", "must be 1 .. %llu"},
        {"eager_put_open.capacity", "must be 1 .. %llu bytes"},
        {"eager_put_open.address", "must not be 0"},
        {"eager_put_open.reserved", "must be 0"},
        {"rdma_address.provider", "must be 1 (cma), 2 (tcp) or %llu (verbs)"},
        {"persistent_request.max_size", "must be 1..%llu (COVERSE_MAX_MESSAGE)"},
        {"get_done.status", "known: 0 ok, 1 failed"},
        {"credit.count", "must be at least 1"},
        {"barrier.phase", "known: 1 arrive, 2 release"},
        {"disconnect.reason", "known: 1 shutdown, 2 error, 3 timeout"},
        {"state_request.want", "known: 1 progress, 2 full"},
        {"abort.origin_pe", "the job has %llu PEs; the launcher is 4294967295"},
        {"register_node.protocol_version", "must be at least 1; this build speaks revision %llu"},
        {"register_node.node", "the job has %llu PEs"},
        {"register_node.node/source_pe", "the frame's source PE is %llu"},
        {"register_node.pe_count", "must be 1..%llu: the node's PEs must fit in the job"},
        {"register_node.data_port", "must not be 0"},
        {"register_node.ip",
         "must be 1..%llu printable ASCII bytes without spaces: an IP address or host name"},
        {"node_table/source_pe", "only the launcher (%llu) sends node tables"},
        {"node_table.status", "known: 0 ok, 1 refused"},
        {"node_table.count", "must be 1..%llu nodes for a table, 0 for a refusal"},
        {"node_table.record_length", "bytes left for a record that needs %llu"},
        {"node_table.node", "records must be contiguous; expected node %llu"},
        {"node_table.pe_count", "must be 1..%llu, the PEs left in the job"},
        {"node_table.pe_total", "the nodes' PE counts must add up to the job's %llu PEs"},
        {"node_table.data_port", "must not be 0"},
        {"node_table.ip",
         "must be 1..%llu printable ASCII bytes without spaces: an IP address or host name"},
        {"node_table.trailing", "bytes after the last record; expected %llu"},
        {"peer_lost/source_pe", "only the launcher (%llu) reports a lost PE"},
        {"peer_lost.pe", "the job has %llu PEs"},
    };
    for (const rule& r : rules) {
        if (r.field == field) return r.text;
    }
    return "limit %llu";
}

}  // namespace

std::string describe(const decode_error& e, std::string_view peer) {
    using ull = unsigned long long;
    const auto v = static_cast<ull>(e.value);
    const auto lim = static_cast<ull>(e.limit);
    const std::string field(e.field);
    std::string what;
    std::string fix;
    switch (e.status) {
        case decode_status::ok:
            break;
        case decode_status::truncated:
            what = format("%s has %llu bytes, needs %llu", field.c_str(), v, lim);
            fix = "the connection ended or the buffer was cut mid-frame";
            break;
        case decode_status::bad_magic:
            what = format("bad magic 0x%08llx (expected 0x%08llx, \"CVRS\")", v, lim);
            fix = "the peer is not a coverse process or the stream lost sync";
            break;
        case decode_status::unsupported_version:
            what = format("header version %llu is not supported (this build speaks version %llu)",
                          v, lim);
            fix = "run the same coverse release on every node";
            break;
        case decode_status::unknown_type:
            what = format("unknown frame type %llu (known: 1..%llu)", v, lim);
            fix = "the peer runs a newer or incompatible coverse; run the same release everywhere";
            break;
        case decode_status::reserved_bits_set:
            if (e.field == "flags") {
                what = format(
                    "flags 0x%04llx set bits not allowed on frame type %s (allowed: 0x%04llx)", v,
                    type_label(e).c_str(), lim);
            } else {
                what = format("reserved field '%s' of frame type %s is 0x%llx, must be 0",
                              field.c_str(), type_label(e).c_str(), v);
            }
            fix = "the peer runs a newer or incompatible coverse; run the same release everywhere";
            break;
        case decode_status::source_pe_out_of_range:
            what = format("source PE %llu is out of range (the job has %llu PEs)", v, lim);
            fix = "the peer belongs to another job or has a stale node table";
            break;
        case decode_status::payload_too_long:
            what = format("payload length %llu exceeds the frame maximum %llu", v, lim);
            fix =
                "no coverse sends frames that long (larger messages go by rendezvous): the peer "
                "runs an incompatible coverse or the stream is corrupt";
            break;
        case decode_status::payload_length_mismatch: {
            const bool at_least =
                payload_rule_for(e.type, decode_limits{}).kind == payload_length_kind::at_least;
            const char* rule = at_least ? "at least " : "";
            what = format("payload length %llu does not match frame type %s (expects %s%llu bytes)",
                          v, type_label(e).c_str(), rule, lim);
            fix =
                "the peer runs an incompatible coverse or the job size differs; run the same "
                "release and node table everywhere";
            break;
        }
        case decode_status::broadcast_root_out_of_range:
            what = format("broadcast root PE %llu (tag) is out of range (the job has %llu PEs)", v,
                          lim);
            fix = "the peer belongs to another job or has a stale node table";
            break;
        case decode_status::invalid_field:
            what = format("field '%s' of frame type %s has invalid value %llu (", field.c_str(),
                          type_label(e).c_str(), v) +
                   format(field_rule(e.field), lim) + ")";
            fix = "the peer runs an incompatible coverse or belongs to another job";
            break;
        case decode_status::payload_allocation_failed:
            what = format("could not allocate %llu bytes for a payload of frame type %s", v,
                          type_label(e).c_str());
            fix = "give the process more memory (ulimit -v, the container's limit)";
            break;
    }
    std::string out = "frame from ";
    out.append(peer);
    if (e.ok()) {
        out += ": no error";
        return out;
    }
    out += ": ";
    out += what;
    out += "; ";
    out += fix;
    out += "; closing the connection";
    return out;
}

}  // namespace coverse::net
