// Tests of the wire format: header and control-payload round trips, the pinned byte
// layout, and every validation rule with its status and error text.
#include <coverse/net/wire.hpp>

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace coverse::net {
namespace {

constexpr std::string_view peer = "PE 3 (127.0.0.1:40123)";

decode_limits limits4() {
    return decode_limits{default_max_payload, 4, false};
}

std::vector<std::byte> bytes(std::initializer_list<int> values) {
    std::vector<std::byte> out;
    for (int v : values)
        out.push_back(static_cast<std::byte>(v));
    return out;
}

// A header whose payload length fits its type under limits4().
frame_header valid_header(frame_type type) {
    frame_header h;
    h.type = type;
    h.source_pe = 2;
    h.credits = 7;
    const payload_rule rule = payload_rule_for(type, limits4());
    h.payload_length =
        static_cast<std::uint32_t>(rule.kind == payload_length_kind::any ? 100 : rule.length);
    if (uses_tag(type) && type != frame_type::standard && type != frame_type::publish)
        h.tag = 0xABCD;
    return h;
}

void expect_error(const decode_error& e, decode_status status, std::string_view field,
                  std::initializer_list<std::string_view> text_parts) {
    EXPECT_EQ(e.status, status) << decode_status_name(e.status);
    EXPECT_EQ(e.field, field);
    const std::string text = describe(e, peer);
    EXPECT_TRUE(text.starts_with("frame from PE 3 (127.0.0.1:40123): ")) << text;
    EXPECT_TRUE(text.ends_with("; closing the connection")) << text;
    for (std::string_view part : text_parts) {
        EXPECT_NE(text.find(part), std::string::npos) << "'" << part << "' missing from: " << text;
    }
}

TEST(wire_header, layout_is_little_endian_at_pinned_offsets) {
    frame_header h;
    h.type = frame_type::publish;
    h.flags = 0;
    h.source_pe = 0x04030201;
    h.payload_length = 32;
    h.credits = 0x0605;
    h.tag = 0;
    const auto b = encode_header(h);
    const auto expected = bytes({'C',  'V',  'R',  'S',  1, 8, 0, 0,  // magic, version, type, flags
                                 0x01, 0x02, 0x03, 0x04,              // source PE
                                 32,   0,    0,    0,                 // payload length
                                 0x05, 0x06, 0,    0,                 // credits, reserved
                                 0,    0,    0,    0});               // tag
    EXPECT_EQ(std::vector<std::byte>(b.begin(), b.end()), expected);
}

TEST(wire_header, every_type_round_trips) {
    for (int t = first_frame_type; t <= last_frame_type; ++t) {
        const auto type = static_cast<frame_type>(t);
        SCOPED_TRACE(std::string(frame_type_name(type)));
        EXPECT_NE(frame_type_name(type), "unknown");
        frame_header h = valid_header(type);
        const auto d = decode_header(encode_header(h), limits4());
        ASSERT_TRUE(d.ok()) << describe(d.error, peer);
        EXPECT_EQ(d.value, h);
    }
}

TEST(wire_header, broadcast_root_and_launcher_source_round_trip) {
    frame_header h = valid_header(frame_type::standard);
    h.flags = frame_flags::broadcast;
    h.tag = 3;
    auto d = decode_header(encode_header(h), limits4());
    ASSERT_TRUE(d.ok()) << describe(d.error, peer);
    EXPECT_EQ(d.value, h);

    h = valid_header(frame_type::scan_reply);
    h.source_pe = launcher_pe;
    d = decode_header(encode_header(h), decode_limits{default_max_payload, 4, true});
    ASSERT_TRUE(d.ok()) << describe(d.error, peer);
    EXPECT_EQ(d.value, h);
}

TEST(wire_header, extreme_values_round_trip) {
    frame_header h = valid_header(frame_type::standard);
    h.source_pe = 0xFFFF'FFFE;
    h.credits = 0xFFFF;
    h.payload_length = 0xFFFF'FFFF;
    const auto d = decode_header(encode_header(h), decode_limits{0xFFFF'FFFF, 0xFFFF'FFFF, false});
    ASSERT_TRUE(d.ok()) << describe(d.error, peer);
    EXPECT_EQ(d.value, h);
}

TEST(wire_header, zero_length_payload_is_valid) {
    frame_header h = valid_header(frame_type::standard);
    h.payload_length = 0;
    EXPECT_TRUE(decode_header(encode_header(h), limits4()).ok());
}

// Patches wire bytes of a valid header so each rule can be broken on its own.
std::array<std::byte, header_size> patched(frame_header h, std::size_t offset,
                                           std::initializer_list<int> values) {
    auto b = encode_header(h);
    for (int v : values)
        b[offset++] = static_cast<std::byte>(v);
    return b;
}

TEST(wire_header_validation, truncated) {
    const auto b = encode_header(valid_header(frame_type::standard));
    const auto d = decode_header(std::span(b).first(23), limits4());
    expect_error(d.error, decode_status::truncated, "header", {"header has 23 bytes, needs 24"});
}

TEST(wire_header_validation, bad_magic) {
    const auto b = patched(valid_header(frame_type::standard), 0, {'G', 'E', 'T', ' '});
    expect_error(decode_header(b, limits4()).error, decode_status::bad_magic, "magic",
                 {"bad magic 0x20544547", "expected 0x53525643", "not a coverse process"});
}

TEST(wire_header_validation, unsupported_version) {
    const auto b = patched(valid_header(frame_type::standard), 4, {2});
    expect_error(decode_header(b, limits4()).error, decode_status::unsupported_version, "version",
                 {"header version 2 is not supported (this build speaks version 1)",
                  "same coverse release"});
}

TEST(wire_header_validation, unknown_type) {
    for (int t : {0, last_frame_type + 1, 255}) {
        const auto b = patched(valid_header(frame_type::standard), 5, {t});
        expect_error(decode_header(b, limits4()).error, decode_status::unknown_type, "type",
                     {"unknown frame type " + std::to_string(t) + " (known: 1.." +
                      std::to_string(last_frame_type) + ")"});
    }
}

TEST(wire_header_validation, flags_not_allowed_for_type) {
    frame_header h = valid_header(frame_type::barrier);
    h.flags = frame_flags::broadcast;
    expect_error(decode_header(encode_header(h), limits4()).error, decode_status::reserved_bits_set,
                 "flags",
                 {"flags 0x0001 set bits not allowed on frame type 'barrier' (allowed: 0x0000)"});
    h = valid_header(frame_type::standard);
    h.flags = frame_flags::extension;
    expect_error(decode_header(encode_header(h), limits4()).error, decode_status::reserved_bits_set,
                 "flags", {"flags 0x8000", "'standard' (allowed: 0x0001)"});
}

TEST(wire_header_validation, reserved_field_nonzero) {
    const auto b = patched(valid_header(frame_type::credit), 18, {0x34, 0x12});
    expect_error(decode_header(b, limits4()).error, decode_status::reserved_bits_set, "reserved",
                 {"reserved field 'reserved' of frame type 'credit' is 0x1234, must be 0"});
}

TEST(wire_header_validation, tag_on_a_type_without_one) {
    frame_header h = valid_header(frame_type::publish);
    h.tag = 9;
    expect_error(decode_header(encode_header(h), limits4()).error, decode_status::reserved_bits_set,
                 "tag", {"reserved field 'tag' of frame type 'publish' is 0x9"});
    h = valid_header(frame_type::standard);  // a tag without the broadcast flag
    h.tag = 1;
    expect_error(decode_header(encode_header(h), limits4()).error, decode_status::reserved_bits_set,
                 "tag", {"'standard' is 0x1"});
}

TEST(wire_header_validation, source_pe_out_of_range) {
    frame_header h = valid_header(frame_type::standard);
    h.source_pe = 4;
    expect_error(decode_header(encode_header(h), limits4()).error,
                 decode_status::source_pe_out_of_range, "source_pe",
                 {"source PE 4 is out of range (the job has 4 PEs)", "another job"});
    // The launcher's id is accepted only on launcher connections.
    h.source_pe = launcher_pe;
    EXPECT_EQ(decode_header(encode_header(h), limits4()).error.status,
              decode_status::source_pe_out_of_range);
}

TEST(wire_header_validation, payload_too_long) {
    frame_header h = valid_header(frame_type::standard);
    h.payload_length = 2147483648u;
    expect_error(decode_header(encode_header(h), limits4()).error, decode_status::payload_too_long,
                 "payload_length",
                 {"frame from PE 3 (127.0.0.1:40123): payload length 2147483648 exceeds the "
                  "frame maximum 67108864",
                  "larger messages go by rendezvous"});
    h.payload_length = default_max_payload;  // the maximum itself is fine
    EXPECT_TRUE(decode_header(encode_header(h), limits4()).ok());
}

TEST(wire_header_validation, control_payload_length_mismatch) {
    struct test_case {
        frame_type type;
        std::uint32_t length;
        std::string text;
    };
    const test_case cases[] = {
        {frame_type::credit, 5,
         "payload length 5 does not match frame type 'credit' (expects 4 bytes)"},
        {frame_type::hello, 0, "'hello' (expects 24 bytes)"},
        {frame_type::publish, 31, "'publish' (expects 32 bytes)"},
        {frame_type::get_done, 9, "'get_done' (expects 8 bytes)"},
        {frame_type::barrier, 4, "'barrier' (expects 8 bytes)"},
        {frame_type::persistent_request, 8, "(expects 16 bytes)"},
        {frame_type::disconnect, 0, "(expects 4 bytes)"},
        {frame_type::latency_vector_request, 1, "(expects 0 bytes)"},
        {frame_type::latency_vector_reply, 12, "'latency_vector_reply' (expects 16 bytes)"},
        {frame_type::cluster_mapping, 20, "(expects 16 bytes)"},
        {frame_type::abort, 7, "'abort' (expects at least 8 bytes)"},
        {frame_type::register_node, 31, "'register_node' (expects at least 32 bytes)"},
        {frame_type::node_table, 7, "'node_table' (expects at least 8 bytes)"},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(std::string(frame_type_name(c.type)));
        frame_header h = valid_header(c.type);
        h.payload_length = c.length;
        expect_error(decode_header(encode_header(h), limits4()).error,
                     decode_status::payload_length_mismatch, "payload_length", {c.text});
    }
}

TEST(wire_header_validation, broadcast_root_out_of_range) {
    frame_header h = valid_header(frame_type::standard);
    h.flags = frame_flags::broadcast;
    h.tag = 4;
    expect_error(decode_header(encode_header(h), limits4()).error,
                 decode_status::broadcast_root_out_of_range, "tag",
                 {"broadcast root PE 4 (tag) is out of range (the job has 4 PEs)"});
}

TEST(wire_header_validation, checks_run_in_documented_order) {
    // Bad magic and bad version together: magic is reported, since nothing else about a
    // non-coverse stream means anything.
    auto b = patched(valid_header(frame_type::standard), 0, {0, 0, 0, 0, 9});
    EXPECT_EQ(decode_header(b, limits4()).error.status, decode_status::bad_magic);
    // Too long and wrong for its type: the maximum is reported first.
    frame_header h = valid_header(frame_type::credit);
    h.payload_length = default_max_payload + 1;
    EXPECT_EQ(decode_header(encode_header(h), limits4()).error.status,
              decode_status::payload_too_long);
}

// ---------------------------------------------------------------------------------------

TEST(wire_payloads, hello_round_trips_with_pinned_layout) {
    const hello_payload p{0x0807060504030201ull, 2, 4, protocol_revision};
    const auto b = encode(p);
    EXPECT_EQ(std::vector<std::byte>(b.begin(), b.end()),
              bytes({1, 2, 3, 4, 5, 6, 7, 8, 2, 0, 0, 0, 4, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0}));
    const auto d = decode_hello(b, limits4());
    ASSERT_TRUE(d.ok()) << describe(d.error, peer);
    EXPECT_EQ(d.value, p);
}

TEST(wire_payloads, publish_round_trips) {
    const publish_payload p{0x00007F00DEADBEEFull, 0x1234'5678'9ABC'DEF0ull, 1u << 20, 9999};
    const auto b = encode(p);
    EXPECT_EQ(b[16], std::byte{0x00});  // size little-endian at 16: 0x100000
    EXPECT_EQ(b[18], std::byte{0x10});
    const auto d = decode_publish(b, limits4());
    ASSERT_TRUE(d.ok()) << describe(d.error, peer);
    EXPECT_EQ(d.value, p);
}

TEST(wire_payloads, small_payloads_round_trip) {
    const get_done_payload g{77, get_status::failed};
    EXPECT_EQ(decode_get_done(encode(g), limits4()).value, g);
    const credit_payload c{16};
    EXPECT_EQ(decode_credit(encode(c), limits4()).value, c);
    const barrier_payload br{5, barrier_phase::release};
    EXPECT_EQ(decode_barrier(encode(br), limits4()).value, br);
    const persistent_request_payload pr{1u << 20, 3};
    EXPECT_EQ(decode_persistent_request(encode(pr), limits4()).value, pr);
    for (auto reason :
         {disconnect_reason::shutdown, disconnect_reason::error, disconnect_reason::timeout}) {
        const disconnect_payload d{reason};
        EXPECT_EQ(decode_disconnect(encode(d), limits4()).value, d);
    }
}

TEST(wire_payloads, abort_round_trips_text_and_negative_code) {
    const abort_payload p{-6, 1, "out of memory on PE 1"};
    const auto b = encode(p);
    ASSERT_EQ(b.size(), abort_payload::wire_size + p.text.size());
    const auto d = decode_abort(b, limits4());
    ASSERT_TRUE(d.ok()) << describe(d.error, peer);
    EXPECT_EQ(d.value, p);
    // Empty text and the launcher as origin are valid.
    const abort_payload q{1, launcher_pe, ""};
    EXPECT_EQ(decode_abort(encode(q), limits4()).value, q);
}

TEST(wire_payload_validation, lengths_are_checked_by_the_decoders_too) {
    const std::array<std::byte, 3> short_span{};
    expect_error(decode_hello(short_span, limits4()).error, decode_status::payload_length_mismatch,
                 "payload_length", {"payload length 3 does not match frame type 'hello'"});
    EXPECT_EQ(decode_publish(short_span, limits4()).error.status,
              decode_status::payload_length_mismatch);
    EXPECT_EQ(decode_get_done(short_span, limits4()).error.status,
              decode_status::payload_length_mismatch);
    EXPECT_EQ(decode_credit(short_span, limits4()).error.status,
              decode_status::payload_length_mismatch);
    EXPECT_EQ(decode_barrier(short_span, limits4()).error.status,
              decode_status::payload_length_mismatch);
    EXPECT_EQ(decode_persistent_request(short_span, limits4()).error.status,
              decode_status::payload_length_mismatch);
    EXPECT_EQ(decode_disconnect(short_span, limits4()).error.status,
              decode_status::payload_length_mismatch);
    expect_error(decode_abort(short_span, limits4()).error, decode_status::payload_length_mismatch,
                 "payload_length", {"expects at least 8 bytes"});
}

TEST(wire_payload_validation, hello_fields) {
    auto b = encode(hello_payload{1, 2, 4, protocol_revision});
    b[20] = std::byte{1};
    expect_error(decode_hello(b, limits4()).error, decode_status::reserved_bits_set,
                 "hello.reserved",
                 {"reserved field 'hello.reserved' of frame type 'hello' is 0x1"});
    expect_error(
        decode_hello(encode(hello_payload{1, 2, 8, protocol_revision}), limits4()).error,
        decode_status::invalid_field, "hello.num_pes",
        {"field 'hello.num_pes' of frame type 'hello' has invalid value 8 (this job has 4 PEs)"});
    expect_error(decode_hello(encode(hello_payload{1, 4, 4, protocol_revision}), limits4()).error,
                 decode_status::invalid_field, "hello.rank",
                 {"invalid value 4 (the job has 4 PEs)"});
    expect_error(decode_hello(encode(hello_payload{1, 0, 4, 0}), limits4()).error,
                 decode_status::invalid_field, "hello.protocol_version", {"must be at least 1"});
}

TEST(wire_payload_validation, hello_rank_must_match_source_pe) {
    frame_header h = valid_header(frame_type::hello);  // source PE 2
    const auto b = encode(hello_payload{1, 1, 4, protocol_revision});
    expect_error(validate_payload(h, b, limits4()), decode_status::invalid_field,
                 "hello.rank/source_pe", {"invalid value 1 (the frame's source PE is 2)"});
    EXPECT_TRUE(validate_payload(h, encode(hello_payload{1, 2, 4, 1}), limits4()).ok());
}

TEST(wire_payload_validation, publish_fields) {
    auto b = encode(publish_payload{1, 2, 3, 4});
    b[31] = std::byte{0x80};
    EXPECT_EQ(decode_publish(b, limits4()).error.status, decode_status::reserved_bits_set);
    expect_error(decode_publish(encode(publish_payload{1, 2, 0, 4}), limits4()).error,
                 decode_status::invalid_field, "publish.size",
                 {"invalid value 0 (must be 1..2147483647 (COVERSE_MAX_MESSAGE))"});
    EXPECT_EQ(
        decode_publish(encode(publish_payload{1, 2, default_max_message + 1ull, 4}), limits4())
            .error.status,
        decode_status::invalid_field);
    // A publish may be far larger than a frame: the message is moved by a get, not a frame.
    EXPECT_TRUE(decode_publish(encode(publish_payload{1, 2, 1ull << 30, 4}), limits4()).ok());
    decode_limits small = limits4();
    small.max_message = 1000;
    EXPECT_EQ(decode_publish(encode(publish_payload{1, 2, 1001, 4}), small).error.status,
              decode_status::invalid_field);
}

TEST(wire_payload_validation, rma_request_round_trip_and_checks) {
    const rma_request_payload in{0x7f00'1234'5678ull, 0xABCDull, 3ull << 30, 77};
    for (auto type : {frame_type::rma_get_request, frame_type::rma_put_request}) {
        const auto b = encode(in);
        const auto d = decode_rma_request(b, type);
        ASSERT_TRUE(d.ok()) << describe(d.error, "PE 1");
        EXPECT_EQ(d.value, in);
        frame_header h = valid_header(type);
        h.payload_length = static_cast<std::uint32_t>(b.size());
        EXPECT_TRUE(validate_payload(h, b, limits4()).ok());
        auto r = b;
        r[29] = std::byte{1};
        EXPECT_EQ(decode_rma_request(r, type).error.status, decode_status::reserved_bits_set);
        EXPECT_EQ(decode_rma_request(encode(rma_request_payload{1, 2, 0, 3}), type).error.status,
                  decode_status::invalid_field);
        EXPECT_EQ(decode_rma_request(std::span(b).first(31), type).error.status,
                  decode_status::payload_length_mismatch);
    }
}

TEST(wire_payload_validation, rma_complete_round_trip_and_checks) {
    const rma_complete_payload in{9, rma_op::put, rma_status::refused};
    auto b = encode(in);
    const auto d = decode_rma_complete(b);
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(d.value, in);
    auto bad_op = b;
    bad_op[4] = std::byte{3};
    EXPECT_EQ(decode_rma_complete(bad_op).error.status, decode_status::invalid_field);
    auto bad_status = b;
    bad_status[8] = std::byte{2};
    EXPECT_EQ(decode_rma_complete(bad_status).error.status, decode_status::invalid_field);
    auto reserved = b;
    reserved[15] = std::byte{1};
    EXPECT_EQ(decode_rma_complete(reserved).error.status, decode_status::reserved_bits_set);
}

TEST(wire_payload_validation, eager_put_open_round_trips_at_pinned_offsets_and_checks_fields) {
    const eager_put_open_payload in{7, 16, 16384, 0x7f00'1234'5000ull, 0xABCD'0001ull};
    const auto b = encode(in);
    const auto expected = bytes({7,    0,    0,    0,                         // channel
                                 16,   0,    0,    0,                         // slots
                                 0,    0x40, 0,    0,                         // capacity
                                 0,    0,    0,    0,                         // reserved
                                 0x00, 0x50, 0x34, 0x12, 0x00, 0x7f, 0, 0,    // address
                                 0x01, 0x00, 0xCD, 0xAB, 0,    0,    0, 0});  // key
    EXPECT_EQ(std::vector<std::byte>(b.begin(), b.end()), expected);
    const auto d = decode_eager_put_open(b);
    ASSERT_TRUE(d.ok()) << describe(d.error, peer);
    EXPECT_EQ(d.value, in);
    frame_header h = valid_header(frame_type::eager_put_open);
    EXPECT_EQ(h.payload_length, eager_put_open_payload::wire_size);
    EXPECT_TRUE(validate_payload(h, b, limits4()).ok());
    const auto with = [&](auto change) {
        eager_put_open_payload v = in;
        change(v);
        return decode_eager_put_open(encode(v)).error;
    };
    expect_error(with([](auto& v) { v.channel = 0; }), decode_status::invalid_field,
                 "eager_put_open.channel", {"must be at least 1"});
    expect_error(with([](auto& v) { v.slots = 0; }), decode_status::invalid_field,
                 "eager_put_open.slots", {"must be 1 .. 1024"});
    EXPECT_EQ(with([](auto& v) { v.slots = 1025; }).status, decode_status::invalid_field);
    EXPECT_EQ(with([](auto& v) { v.capacity = 0; }).status, decode_status::invalid_field);
    expect_error(with([](auto& v) { v.capacity = (1u << 30) + 1; }), decode_status::invalid_field,
                 "eager_put_open.capacity", {"must be 1 .. 1073741824 bytes"});
    expect_error(with([](auto& v) { v.address = 0; }), decode_status::invalid_field,
                 "eager_put_open.address", {"must not be 0"});
    auto reserved = b;
    reserved[13] = std::byte{1};
    EXPECT_EQ(decode_eager_put_open(reserved).error.status, decode_status::reserved_bits_set);
    EXPECT_EQ(validate_payload(h, reserved, limits4()).status, decode_status::reserved_bits_set);
    EXPECT_EQ(decode_eager_put_open(std::span(b).first(31)).error.status,
              decode_status::payload_length_mismatch);
}

TEST(wire_payload_validation, rdma_address_round_trip_and_checks) {
    const std::array<std::byte, 3> blob{std::byte{1}, std::byte{2}, std::byte{3}};
    const auto b = encode(rdma_address_payload{1, 3, blob});
    const auto d = decode_rdma_address(b);
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(d.value.stage, 1u);
    EXPECT_EQ(d.value.provider, 3u);
    ASSERT_EQ(d.value.blob.size(), 3u);
    EXPECT_EQ(d.value.blob[2], std::byte{3});
    EXPECT_EQ(decode_rdma_address(encode(rdma_address_payload{3, 1, {}})).error.status,
              decode_status::invalid_field);
    EXPECT_EQ(decode_rdma_address(encode(rdma_address_payload{2, 4, {}})).error.status,
              decode_status::invalid_field);
    EXPECT_EQ(decode_rdma_address(std::span(b).first(7)).error.status,
              decode_status::payload_length_mismatch);
}

TEST(wire_header_test, rma_data_frames_carry_their_request_id_and_publish_may_broadcast) {
    for (auto type : {frame_type::rma_get_reply, frame_type::rma_put_data}) {
        frame_header h = valid_header(type);
        h.tag = 12345;  // the request id
        h.payload_length = 4096;
        EXPECT_TRUE(decode_header(encode_header(h), limits4()).ok());
    }
    frame_header p = valid_header(frame_type::publish);
    p.flags = frame_flags::broadcast;
    p.tag = 3;  // the root
    EXPECT_TRUE(decode_header(encode_header(p), limits4()).ok());
    p.tag = 4;  // no such PE
    EXPECT_EQ(decode_header(encode_header(p), limits4()).error.status,
              decode_status::broadcast_root_out_of_range);
    p.flags = 0;
    p.tag = 1;  // a tag without the broadcast flag means nothing
    EXPECT_EQ(decode_header(encode_header(p), limits4()).error.status,
              decode_status::reserved_bits_set);
    frame_header c = valid_header(frame_type::rma_complete);
    c.flags = frame_flags::broadcast;
    EXPECT_EQ(decode_header(encode_header(c), limits4()).error.status,
              decode_status::reserved_bits_set);
}

TEST(wire_payload_validation, enum_and_count_fields) {
    auto g = encode(get_done_payload{1, get_status::ok});
    g[4] = std::byte{2};
    expect_error(decode_get_done(g, limits4()).error, decode_status::invalid_field,
                 "get_done.status", {"invalid value 2 (known: 0 ok, 1 failed)"});
    expect_error(decode_credit(encode(credit_payload{0}), limits4()).error,
                 decode_status::invalid_field, "credit.count", {"must be at least 1"});
    auto br = encode(barrier_payload{1, barrier_phase::arrive});
    br[4] = std::byte{0};
    expect_error(decode_barrier(br, limits4()).error, decode_status::invalid_field, "barrier.phase",
                 {"known: 1 arrive, 2 release"});
    auto d = encode(disconnect_payload{});
    d[0] = std::byte{4};
    expect_error(decode_disconnect(d, limits4()).error, decode_status::invalid_field,
                 "disconnect.reason", {"invalid value 4 (known: 1 shutdown, 2 error, 3 timeout)"});
    auto pr = encode(persistent_request_payload{0, 1});
    expect_error(decode_persistent_request(pr, limits4()).error, decode_status::invalid_field,
                 "persistent_request.max_size", {"must be 1..67108864"});
    pr = encode(persistent_request_payload{8, 1});
    pr[12] = std::byte{1};
    EXPECT_EQ(decode_persistent_request(pr, limits4()).error.status,
              decode_status::reserved_bits_set);
    expect_error(decode_abort(encode(abort_payload{1, 9, "x"}), limits4()).error,
                 decode_status::invalid_field, "abort.origin_pe",
                 {"invalid value 9 (the job has 4 PEs"});
}

TEST(wire_payload_validation, validate_payload_covers_every_control_type) {
    const auto l = limits4();
    frame_header h = valid_header(frame_type::credit);
    EXPECT_EQ(validate_payload(h, encode(credit_payload{0}), l).status,
              decode_status::invalid_field);
    EXPECT_TRUE(validate_payload(h, encode(credit_payload{1}), l).ok());
    // A payload span that disagrees with the header is reported, not read past.
    const auto credit = encode(credit_payload{1});
    EXPECT_EQ(validate_payload(h, std::span(credit).first(2), l).status, decode_status::truncated);
    // Data types pass whatever they carry.
    h = valid_header(frame_type::print);
    std::vector<std::byte> text(100, std::byte{0xFF});
    EXPECT_TRUE(validate_payload(h, text, l).ok());
}

// ---------------------------------------------------------------------------------------
// The launcher's control frames

TEST(wire_launcher, new_types_have_names_and_no_flags_or_tag) {
    EXPECT_EQ(frame_type_name(frame_type::register_node), "register_node");
    EXPECT_EQ(frame_type_name(frame_type::node_table), "node_table");
    EXPECT_EQ(static_cast<int>(frame_type::register_node), 17);
    EXPECT_EQ(static_cast<int>(frame_type::node_table), 18);
    for (auto type : {frame_type::register_node, frame_type::node_table}) {
        EXPECT_EQ(allowed_flags(type), 0);
        EXPECT_FALSE(uses_tag(type));
        frame_header h = valid_header(type);
        h.tag = 1;
        EXPECT_EQ(decode_header(encode_header(h), limits4()).error.status,
                  decode_status::reserved_bits_set);
    }
    EXPECT_EQ(payload_rule_for(frame_type::register_node, limits4()).kind,
              payload_length_kind::at_least);
    EXPECT_EQ(payload_rule_for(frame_type::register_node, limits4()).length, 32u);
    EXPECT_EQ(payload_rule_for(frame_type::node_table, limits4()).length, 8u);
}

TEST(wire_launcher, register_node_round_trips_with_pinned_layout) {
    const register_node_payload p{
        2, 1, 0x9C41, protocol_revision, 0x1112131415161718ull, 0x2122232425262728ull, "127.0.0.1"};
    const auto b = encode(p);
    const auto expected = bytes({2,    0,    0,    0,     // node
                                 1,    0,    0,    0,     // pe_count
                                 0x41, 0x9C, 0,    0,     // data_port, reserved
                                 2,    0,    0,    0,     // protocol_version
                                 0x18, 0x17, 0x16, 0x15,  // machine_id
                                 0x14, 0x13, 0x12, 0x11,  //
                                 0x28, 0x27, 0x26, 0x25,  // job_key
                                 0x24, 0x23, 0x22, 0x21,  //
                                 '1',  '2',  '7',  '.',  '0', '.', '0', '.', '1'});
    EXPECT_EQ(b, expected);
    const auto d = decode_register_node(b, limits4());
    ASSERT_TRUE(d.ok()) << describe(d.error, peer);
    EXPECT_EQ(d.value, p);
    frame_header h = valid_header(frame_type::register_node);  // source PE 2
    h.payload_length = static_cast<std::uint32_t>(b.size());
    EXPECT_TRUE(validate_payload(h, b, limits4()).ok());
}

TEST(wire_launcher, register_node_fields) {
    auto reg = [](std::uint32_t node, std::uint32_t count, std::uint16_t port,
                  std::string_view ip) {
        return encode(register_node_payload{node, count, port, protocol_revision, 1, 2, ip});
    };
    auto b = reg(0, 1, 80, "::1");
    b[10] = std::byte{1};
    expect_error(decode_register_node(b, limits4()).error, decode_status::reserved_bits_set,
                 "register_node.reserved", {"reserved field 'register_node.reserved'"});
    b = reg(0, 1, 80, "::1");
    b[12] = std::byte{0};
    expect_error(decode_register_node(b, limits4()).error, decode_status::invalid_field,
                 "register_node.protocol_version", {"must be at least 1"});
    expect_error(decode_register_node(reg(4, 1, 80, "h"), limits4()).error,
                 decode_status::invalid_field, "register_node.node",
                 {"field 'register_node.node' of frame type 'register_node' has invalid value 4 "
                  "(the job has 4 PEs)"});
    expect_error(decode_register_node(reg(3, 2, 80, "h"), limits4()).error,
                 decode_status::invalid_field, "register_node.pe_count",
                 {"invalid value 2 (must be 1..1: the node's PEs must fit in the job)"});
    EXPECT_EQ(decode_register_node(reg(0, 0, 80, "h"), limits4()).error.field,
              "register_node.pe_count");
    EXPECT_TRUE(decode_register_node(reg(0, 4, 80, "h"), limits4()).ok());
    expect_error(decode_register_node(reg(0, 1, 0, "h"), limits4()).error,
                 decode_status::invalid_field, "register_node.data_port", {"must not be 0"});
    expect_error(decode_register_node(reg(0, 1, 80, ""), limits4()).error,
                 decode_status::invalid_field, "register_node.ip",
                 {"invalid value 0 (must be 1..255 printable ASCII bytes without spaces"});
    EXPECT_EQ(decode_register_node(reg(0, 1, 80, "a b"), limits4()).error.value, 0x20u);
    EXPECT_EQ(decode_register_node(reg(0, 1, 80, std::string(256, 'x')), limits4()).error.field,
              "register_node.ip");
    EXPECT_TRUE(decode_register_node(reg(0, 1, 80, std::string(255, 'x')), limits4()).ok());
    const std::array<std::byte, 31> short_span{};
    EXPECT_EQ(decode_register_node(short_span, limits4()).error.status,
              decode_status::payload_length_mismatch);
    // The registration speaks for its sender.
    frame_header h = valid_header(frame_type::register_node);  // source PE 2
    b = reg(1, 1, 80, "h");
    h.payload_length = static_cast<std::uint32_t>(b.size());
    expect_error(validate_payload(h, b, limits4()), decode_status::invalid_field,
                 "register_node.node/source_pe", {"invalid value 1 (the frame's source PE is 2)"});
}

std::vector<node_record> four_nodes() {
    return {{0xA, 0, 1, 4000, "127.0.0.1"},
            {0xA, 1, 1, 4001, "127.0.0.1"},
            {0xB, 2, 2, 4002, "10.0.0.2"}};
}

TEST(wire_launcher, node_table_round_trips) {
    const auto records = four_nodes();
    const auto b = encode_node_table(records);
    ASSERT_EQ(b.size(), 8 + 3 * node_record::wire_size + 9 + 9 + 8);
    EXPECT_EQ(std::vector<std::byte>(b.begin(), b.begin() + 8), bytes({0, 0, 0, 0, 3, 0, 0, 0}));
    // The first record: machine id, node, PE count, port, IP length, IP.
    EXPECT_EQ(std::vector<std::byte>(b.begin() + 8, b.begin() + 28),
              bytes({0xA, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0xA0, 0x0F, 9, 0}));
    const auto d = decode_node_table(b, limits4());
    ASSERT_TRUE(d.ok()) << describe(d.error, peer);
    EXPECT_EQ(d.value.status, node_table_status::ok);
    EXPECT_EQ(d.value.count, 3u);
    EXPECT_EQ(node_records(d.value), records);

    frame_header h = valid_header(frame_type::node_table);
    h.source_pe = launcher_pe;
    h.payload_length = static_cast<std::uint32_t>(b.size());
    const decode_limits from_launcher{default_max_payload, 4, true};
    EXPECT_TRUE(validate_payload(h, b, from_launcher).ok());
    // Only the launcher hands out node tables.
    h.source_pe = 1;
    expect_error(validate_payload(h, b, from_launcher), decode_status::invalid_field,
                 "node_table/source_pe", {"only the launcher (4294967295) sends node tables"});
}

TEST(wire_launcher, node_table_refusal_carries_the_reason) {
    const auto b = encode_node_table_refusal("PE 2 of 4 did not register within 5.0 s");
    const auto d = decode_node_table(b, limits4());
    ASSERT_TRUE(d.ok()) << describe(d.error, peer);
    EXPECT_EQ(d.value.status, node_table_status::refused);
    EXPECT_EQ(d.value.count, 0u);
    EXPECT_EQ(d.value.text, "PE 2 of 4 did not register within 5.0 s");
    EXPECT_TRUE(decode_node_table(encode_node_table_refusal(""), limits4()).ok());
}

TEST(wire_launcher, node_table_validation) {
    auto decode = [](std::vector<node_record> records) {
        return decode_node_table(encode_node_table(records), limits4()).error;
    };
    auto b = encode_node_table_refusal("x");
    b[0] = std::byte{2};
    expect_error(decode_node_table(b, limits4()).error, decode_status::invalid_field,
                 "node_table.status", {"invalid value 2 (known: 0 ok, 1 refused)"});
    b = encode_node_table_refusal("x");
    b[4] = std::byte{1};
    expect_error(decode_node_table(b, limits4()).error, decode_status::invalid_field,
                 "node_table.count", {"0 for a refusal"});
    expect_error(decode({}), decode_status::invalid_field, "node_table.count",
                 {"invalid value 0 (must be 1..4 nodes for a table"});
    auto r = four_nodes();
    r[1].node = 2;
    expect_error(decode(r), decode_status::invalid_field, "node_table.node",
                 {"invalid value 2 (records must be contiguous; expected node 1)"});
    r = four_nodes();
    r[2].pe_count = 3;
    expect_error(decode(r), decode_status::invalid_field, "node_table.pe_count",
                 {"invalid value 3 (must be 1..2, the PEs left in the job)"});
    r = four_nodes();
    r[2].pe_count = 1;
    expect_error(decode(r), decode_status::invalid_field, "node_table.pe_total",
                 {"invalid value 3 (the nodes' PE counts must add up to the job's 4 PEs)"});
    r = four_nodes();
    r[0].data_port = 0;
    EXPECT_EQ(decode(r).field, "node_table.data_port");
    r = four_nodes();
    r[1].ip = "";
    EXPECT_EQ(decode(r).field, "node_table.ip");
    r = four_nodes();
    r[1].ip = "bad\nip";
    EXPECT_EQ(decode(r).field, "node_table.ip");
    // A record cut short, an IP length running past the end, bytes after the last record.
    b = encode_node_table(four_nodes());
    expect_error(decode_node_table(std::span(b).first(b.size() - 20), limits4()).error,
                 decode_status::invalid_field, "node_table.record_length",
                 {"bytes left for a record that needs 20"});
    expect_error(decode_node_table(std::span(b).first(b.size() - 1), limits4()).error,
                 decode_status::invalid_field, "node_table.record_length",
                 {"invalid value 27 (bytes left for a record that needs 28)"});
    b.push_back(std::byte{0});
    expect_error(decode_node_table(b, limits4()).error, decode_status::invalid_field,
                 "node_table.trailing", {"invalid value 1 (bytes after the last record"});
    const std::array<std::byte, 7> short_span{};
    EXPECT_EQ(decode_node_table(short_span, limits4()).error.status,
              decode_status::payload_length_mismatch);
}

TEST(wire_errors, every_status_has_a_name_and_a_text) {
    EXPECT_EQ(describe(decode_error{}, "PE 1 (x)"), "frame from PE 1 (x): no error");
    for (int s = 1; s <= static_cast<int>(decode_status::payload_allocation_failed); ++s) {
        decode_error e{static_cast<decode_status>(s), frame_type::standard, "payload_length", 1, 2};
        EXPECT_NE(decode_status_name(e.status), "unknown");
        const std::string text = describe(e, "the launcher (10.0.0.1:7777)");
        EXPECT_TRUE(text.starts_with("frame from the launcher (10.0.0.1:7777): ")) << text;
        EXPECT_TRUE(text.ends_with("; closing the connection")) << text;
    }
}

// peer_lost (launcher -> PE, CONNECT=lazy): the PE and the text, from the launcher only.
TEST(wire_launcher, peer_lost_round_trips_and_comes_from_the_launcher_only) {
    const decode_limits from_launcher{default_max_payload, 4, true};
    const auto b = encode(peer_lost_payload{3, "PE 3 of 4 (pid 12) was killed by signal 9"});
    ASSERT_EQ(b.size(), 8u + 41u);
    EXPECT_EQ(std::vector<std::byte>(b.begin(), b.begin() + 8), bytes({3, 0, 0, 0, 0, 0, 0, 0}));
    const auto d = decode_peer_lost(b, from_launcher);
    ASSERT_TRUE(d.ok()) << describe(d.error, peer);
    EXPECT_EQ(d.value.pe, 3u);
    EXPECT_EQ(d.value.text, "PE 3 of 4 (pid 12) was killed by signal 9");
    frame_header h = valid_header(frame_type::peer_lost);
    h.source_pe = launcher_pe;
    h.payload_length = static_cast<std::uint32_t>(b.size());
    EXPECT_TRUE(validate_payload(h, b, from_launcher).ok());
    h.source_pe = 1;
    expect_error(validate_payload(h, b, from_launcher), decode_status::invalid_field,
                 "peer_lost/source_pe", {"only the launcher (4294967295) reports a lost PE"});
    expect_error(decode_peer_lost(encode(peer_lost_payload{4, ""}), from_launcher).error,
                 decode_status::invalid_field, "peer_lost.pe", {"the job has 4 PEs"});
    auto r = encode(peer_lost_payload{0, "x"});
    r[4] = std::byte{1};
    EXPECT_EQ(decode_peer_lost(r, from_launcher).error.status, decode_status::reserved_bits_set);
    EXPECT_EQ(decode_peer_lost(std::span(r).first(7), from_launcher).error.status,
              decode_status::payload_length_mismatch);
}

// connect_declined (CONNECT=lazy, both PEs dialed at once): an empty answer to a hello.
TEST(wire_header, connect_declined_is_empty_with_no_flags_or_tag) {
    EXPECT_EQ(frame_type_name(frame_type::connect_declined), "connect_declined");
    EXPECT_EQ(allowed_flags(frame_type::connect_declined), 0);
    EXPECT_FALSE(uses_tag(frame_type::connect_declined));
    frame_header h = valid_header(frame_type::connect_declined);
    h.payload_length = 0;
    const auto head = encode_header(h);
    EXPECT_TRUE(decode_header(head, decode_limits{default_max_payload, 4, false}).ok());
    h.payload_length = 4;
    EXPECT_EQ(
        decode_header(encode_header(h), decode_limits{default_max_payload, 4, false}).error.status,
        decode_status::payload_length_mismatch);
}

TEST(wire_payload, state_request_round_trips_and_rejects_unknown_wants) {
    const decode_limits lim{default_max_payload, 4, true};
    for (auto want : {state_want::progress, state_want::full}) {
        const auto d = decode_state_request(encode(state_request_payload{want}), lim);
        ASSERT_TRUE(d.ok()) << describe(d.error, peer);
        EXPECT_EQ(d.value.want, want);
    }
    std::array<std::byte, 4> bad{std::byte{3}};
    expect_error(decode_state_request(bad, lim).error, decode_status::invalid_field,
                 "state_request.want", {"known: 1 progress, 2 full"});
}

}  // namespace
}  // namespace coverse::net
