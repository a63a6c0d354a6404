// Tests of frame_reader: any chunking of a stream yields the same frames in order,
// the first invalid frame stops it for good, and big payloads arrive intact.
#include <coverse/net/frame_reader.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace coverse::net {
namespace {

constexpr decode_limits limits4{default_max_payload, 4, false};

struct expected_frame {
    frame_header header;
    std::vector<std::byte> payload;
};

void append_frame(std::vector<std::byte>& stream, frame_header h,
                  std::span<const std::byte> payload) {
    h.payload_length = static_cast<std::uint32_t>(payload.size());
    const auto head = encode_header(h);
    stream.insert(stream.end(), head.begin(), head.end());
    stream.insert(stream.end(), payload.begin(), payload.end());
}

std::vector<std::byte> pattern(std::size_t n, unsigned seed) {
    std::vector<std::byte> out(n);
    for (std::size_t i = 0; i < n; ++i)
        out[i] = static_cast<std::byte>((i * 31 + seed) & 0xFF);
    return out;
}

// A few frames of different shapes, including zero-length payloads back to back.
std::vector<expected_frame> sample_frames() {
    std::vector<expected_frame> frames;
    auto add = [&](frame_type type, std::uint32_t source, std::vector<std::byte> payload,
                   std::uint16_t flags = 0, std::uint32_t tag = 0, std::uint16_t credits = 0) {
        frame_header h{type,    flags, source, static_cast<std::uint32_t>(payload.size()),
                       credits, tag};
        frames.push_back({h, std::move(payload)});
    };
    const auto hello = encode(hello_payload{42, 1, 4, protocol_revision});
    add(frame_type::hello, 1, {hello.begin(), hello.end()});
    add(frame_type::standard, 1, pattern(37, 1), 0, 0, 3);
    add(frame_type::standard, 1, {});
    add(frame_type::latency_vector_request, 1, {}, 0, 17);
    const auto credit = encode(credit_payload{5});
    add(frame_type::credit, 1, {credit.begin(), credit.end()});
    add(frame_type::standard, 1, pattern(5, 9), frame_flags::broadcast, 2);
    add(frame_type::print, 1, {});
    return frames;
}

std::vector<std::byte> stream_of(const std::vector<expected_frame>& frames) {
    std::vector<std::byte> stream;
    for (const auto& f : frames)
        append_frame(stream, f.header, f.payload);
    return stream;
}

void expect_same(const std::vector<frame>& got, const std::vector<expected_frame>& want) {
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
        EXPECT_EQ(got[i].header, want[i].header) << "frame " << i;
        const auto bytes = got[i].payload_bytes();
        EXPECT_EQ(std::vector<std::byte>(bytes.begin(), bytes.end()), want[i].payload)
            << "frame " << i;
        if (want[i].payload.empty()) {
            EXPECT_EQ(got[i].payload, nullptr);
        }
    }
}

// Feeds `stream` in the given chunks; collects frames; returns the final status.
decode_status feed_chunks(frame_reader& reader, std::span<const std::byte> stream,
                          std::span<const std::size_t> cuts, std::vector<frame>& out) {
    std::size_t begin = 0;
    for (std::size_t i = 0; i <= cuts.size(); ++i) {
        const std::size_t end = i < cuts.size() ? cuts[i] : stream.size();
        reader.feed_all(stream.subspan(begin, end - begin),
                        [&](frame&& f) { out.push_back(std::move(f)); });
        begin = end;
    }
    return reader.error().status;
}

TEST(frame_reader, whole_stream_in_one_chunk) {
    const auto frames = sample_frames();
    const auto stream = stream_of(frames);
    frame_reader reader(limits4);
    std::vector<frame> got;
    EXPECT_EQ(reader.feed_all(stream, [&](frame&& f) { got.push_back(std::move(f)); }),
              decode_status::ok);
    expect_same(got, frames);
    EXPECT_EQ(reader.bytes_needed(), header_size);
}

TEST(frame_reader, split_at_every_position) {
    const auto frames = sample_frames();
    const auto stream = stream_of(frames);
    for (std::size_t cut = 0; cut <= stream.size(); ++cut) {
        SCOPED_TRACE("cut at " + std::to_string(cut));
        frame_reader reader(limits4);
        std::vector<frame> got;
        const std::size_t cuts[] = {cut};
        ASSERT_EQ(feed_chunks(reader, stream, cuts, got), decode_status::ok);
        expect_same(got, frames);
    }
}

TEST(frame_reader, split_at_every_pair_of_positions) {
    const auto frames = sample_frames();
    const auto stream = stream_of(frames);
    for (std::size_t a = 0; a <= stream.size(); a += 3) {
        for (std::size_t b = a; b <= stream.size(); ++b) {
            frame_reader reader(limits4);
            std::vector<frame> got;
            const std::size_t cuts[] = {a, b};
            ASSERT_EQ(feed_chunks(reader, stream, cuts, got), decode_status::ok);
            ASSERT_EQ(got.size(), frames.size()) << "cuts " << a << ", " << b;
        }
    }
}

TEST(frame_reader, one_byte_at_a_time) {
    const auto frames = sample_frames();
    const auto stream = stream_of(frames);
    frame_reader reader(limits4);
    std::vector<frame> got;
    for (std::size_t i = 0; i < stream.size(); ++i) {
        ASSERT_EQ(reader.feed(std::span(stream).subspan(i, 1)), 1u) << "byte " << i;
        if (reader.has_frame()) got.push_back(reader.take_frame());
    }
    EXPECT_FALSE(reader.failed());
    expect_same(got, frames);
}

TEST(frame_reader, knows_when_the_stream_stops_mid_frame) {
    const auto frames = sample_frames();
    const auto stream = stream_of(frames);
    frame_reader reader(limits4);
    EXPECT_TRUE(reader.at_frame_boundary());
    std::size_t boundary = 0;
    for (std::size_t i = 0; i < stream.size(); ++i) {
        ASSERT_EQ(reader.feed(std::span(stream).subspan(i, 1)), 1u);
        if (reader.has_frame()) {
            EXPECT_FALSE(reader.at_frame_boundary());  // the frame is not taken yet
            const frame f = reader.take_frame();
            boundary = i + 1;
        }
        EXPECT_EQ(reader.at_frame_boundary(), boundary == i + 1) << "byte " << i;
    }
}

TEST(frame_reader, feed_stops_at_each_frame_until_it_is_taken) {
    const auto frames = sample_frames();
    const auto stream = stream_of(frames);
    frame_reader reader(limits4);
    const std::size_t first = reader.feed(stream);
    EXPECT_EQ(first, header_size + frames[0].payload.size());
    ASSERT_TRUE(reader.has_frame());
    EXPECT_EQ(reader.feed(std::span(stream).subspan(first)), 0u);  // not taken yet
    const frame f = reader.take_frame();
    EXPECT_EQ(f.header, frames[0].header);
    EXPECT_GT(reader.feed(std::span(stream).subspan(first)), 0u);
}

TEST(frame_reader, big_payload_in_random_chunks) {
    const std::size_t size = 8u << 20;
    const auto payload = pattern(size, 5);
    std::vector<std::byte> stream;
    append_frame(stream, frame_header{frame_type::standard, 0, 3, 0, 0, 0}, payload);
    append_frame(stream, frame_header{frame_type::standard, 0, 3, 0, 0, 0}, pattern(10, 6));
    std::mt19937 rng(7);
    frame_reader reader(limits4);
    std::vector<frame> got;
    std::size_t pos = 0;
    while (pos < stream.size()) {
        const std::size_t n = std::min<std::size_t>(stream.size() - pos, 1 + rng() % 200'000);
        reader.feed_all(std::span(stream).subspan(pos, n),
                        [&](frame&& f) { got.push_back(std::move(f)); });
        pos += n;
    }
    ASSERT_EQ(got.size(), 2u);
    ASSERT_EQ(got[0].header.payload_length, size);
    EXPECT_TRUE(std::equal(payload.begin(), payload.end(), got[0].payload_bytes().begin()));
    EXPECT_EQ(got[1].header.payload_length, 10u);
}

TEST(frame_reader, maximum_payload_received_in_place) {
    // The zero-copy path: after the header, the socket writes straight into the frame.
    frame_reader reader(limits4);
    const auto head = encode_header({frame_type::standard, 0, 1, default_max_payload, 0, 0});
    EXPECT_EQ(reader.feed(head), header_size);
    EXPECT_EQ(reader.bytes_needed(), default_max_payload);
    std::size_t filled = 0;
    while (!reader.has_frame()) {
        const auto window = reader.payload_window();
        ASSERT_FALSE(window.empty());
        const std::size_t n = std::min<std::size_t>(window.size(), 3u << 20);
        window[0] = static_cast<std::byte>(filled >> 20);
        reader.commit_payload(n);
        filled += n;
    }
    EXPECT_EQ(filled, default_max_payload);
    const frame f = reader.take_frame();
    EXPECT_EQ(f.payload_bytes().size(), default_max_payload);
    EXPECT_EQ(f.payload_bytes()[3u << 20], std::byte{3});
    EXPECT_TRUE(reader.payload_window().empty());
}

TEST(frame_reader, frames_before_an_invalid_header_are_delivered_and_none_after) {
    const auto frames = sample_frames();
    auto stream = stream_of(frames);
    const std::size_t bad_at = stream.size();
    append_frame(stream, frame_header{frame_type::standard, 0, 9, 0, 0, 0}, pattern(4, 1));
    const auto tail = stream_of(frames);  // valid frames after the bad one must never appear
    stream.insert(stream.end(), tail.begin(), tail.end());

    for (std::size_t cut : {std::size_t{0}, bad_at - 1, bad_at, bad_at + 5, stream.size()}) {
        frame_reader reader(limits4);
        std::vector<frame> got;
        const std::size_t cuts[] = {cut};
        EXPECT_EQ(feed_chunks(reader, stream, cuts, got), decode_status::source_pe_out_of_range);
        expect_same(got, frames);
        EXPECT_TRUE(reader.failed());
        EXPECT_EQ(reader.feed(stream), 0u);
        EXPECT_FALSE(reader.has_frame());
        EXPECT_EQ(reader.bytes_needed(), 0u);
        EXPECT_NE(describe(reader.error(), "PE 9 (127.0.0.1:1)").find("source PE 9"),
                  std::string::npos);
    }
}

TEST(frame_reader, invalid_control_payload_stops_the_reader) {
    std::vector<std::byte> stream;
    const auto credit = encode(credit_payload{0});
    append_frame(stream, frame_header{frame_type::credit, 0, 1, 0, 0, 0}, credit);
    append_frame(stream, frame_header{frame_type::standard, 0, 1, 0, 0, 0}, {});
    frame_reader reader(limits4);
    int count = 0;
    EXPECT_EQ(reader.feed_all(stream, [&](frame&&) { ++count; }), decode_status::invalid_field);
    EXPECT_EQ(count, 0);
    EXPECT_EQ(reader.error().field, "credit.count");
}

TEST(frame_reader, oversized_length_fails_before_allocating) {
    frame_reader reader(decode_limits{1024, 4, false});
    const auto head = encode_header({frame_type::standard, 0, 1, 0xFFFF'FFFF, 0, 0});
    EXPECT_EQ(reader.feed(head), header_size);
    EXPECT_TRUE(reader.failed());
    EXPECT_EQ(reader.error().status, decode_status::payload_too_long);
    EXPECT_EQ(describe(reader.error(), "PE 1 (127.0.0.1:40000)"),
              "frame from PE 1 (127.0.0.1:40000): payload length 4294967295 exceeds the frame "
              "maximum 1024; no coverse sends frames that long (larger messages go by "
              "rendezvous): the peer runs an incompatible coverse or the stream is corrupt; "
              "closing the connection");
}

TEST(frame_reader, random_garbage_never_yields_a_frame_after_an_error) {
    std::mt19937 rng(12345);
    const auto valid = stream_of(sample_frames());
    for (int round = 0; round < 2000; ++round) {
        // Half the rounds start with valid frames, then garbage; some garbage gets a valid
        // magic and version so decoding reaches the later checks.
        std::vector<std::byte> stream;
        if (round % 2 == 0) stream = valid;
        const std::size_t n = rng() % 300;
        for (std::size_t i = 0; i < n; ++i)
            stream.push_back(static_cast<std::byte>(rng()));
        if (round % 3 == 0 && stream.size() >= valid.size() + 6) {
            const auto head = encode_header({});
            std::copy(head.begin(), head.begin() + 5,
                      stream.begin() + valid.size() * (round % 2 == 0));
        }
        frame_reader reader(
            decode_limits{4096, static_cast<std::uint32_t>(1 + rng() % 8), round % 5 == 0});
        bool saw_error = false;
        std::size_t pos = 0;
        while (pos < stream.size()) {
            const std::size_t len = std::min<std::size_t>(stream.size() - pos, 1 + rng() % 40);
            reader.feed_all(std::span(stream).subspan(pos, len), [&](frame&& f) {
                EXPECT_FALSE(saw_error);
                EXPECT_EQ(f.payload_bytes().size(), f.header.payload_length);
                EXPECT_TRUE(validate_payload(f.header, f.payload_bytes(), reader.limits()).ok());
            });
            if (reader.failed()) {
                saw_error = true;
                EXPECT_FALSE(describe(reader.error(), "PE 0 (x)").empty());
            }
            pos += len;
        }
    }
}

// One-sided data lands where its owner says (rdma/'s tcp provider): the bytes go straight
// into the destination, the frame does not own them, and frames the owner does not place
// are allocated as before.
TEST(frame_reader, placed_payloads_land_in_the_owners_buffer) {
    std::vector<std::byte> dest(10, std::byte{0});
    struct owner {
        std::byte* at;
        int calls = 0;
    } o{dest.data() + 3};
    frame_reader reader(decode_limits{1024, 4, false});
    reader.set_placement(
        payload_placement{[](void* ctx, const frame_header& h) noexcept -> std::byte* {
                              auto* self = static_cast<owner*>(ctx);
                              ++self->calls;
                              return h.type == frame_type::rma_get_reply ? self->at : nullptr;
                          },
                          &o});
    std::vector<std::byte> wire;
    const auto append = [&](frame_type type, std::uint32_t tag, std::string_view body) {
        const auto h = encode_header({type, 0, 1, static_cast<std::uint32_t>(body.size()), 0, tag});
        wire.insert(wire.end(), h.begin(), h.end());
        for (char ch : body)
            wire.push_back(static_cast<std::byte>(ch));
    };
    append(frame_type::rma_get_reply, 7, "abcd");
    append(frame_type::standard, 0, "xyz");
    std::vector<frame> got;
    EXPECT_EQ(reader.feed_all(wire, [&](frame&& f) { got.push_back(std::move(f)); }),
              decode_status::ok);
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(o.calls, 2);
    EXPECT_EQ(got[0].payload.get(), dest.data() + 3);
    EXPECT_EQ(std::memcmp(dest.data() + 3, "abcd", 4), 0);
    EXPECT_EQ(dest[2], std::byte{0});
    EXPECT_EQ(dest[7], std::byte{0});
    EXPECT_NE(got[1].payload.get(), dest.data() + 3);
    EXPECT_EQ(std::memcmp(got[1].payload.get(), "xyz", 3), 0);
    got.clear();  // the placed frame's deleter must not free dest (ASan would say so)
}

// A placement advances its owner's target (the tcp provider's get moves on by each frame's
// length), so it must be asked once per frame, and only for a frame that is handed out:
// whether a frame lies whole in a chunk (decoded in place) or is cut (decoded in stages).
TEST(frame_reader, each_placed_frame_is_placed_once_however_the_stream_is_cut) {
    struct owner {
        std::vector<std::byte> dest = std::vector<std::byte>(64, std::byte{0});
        std::size_t placed = 0;
        int calls = 0;
    };
    std::vector<std::byte> wire;
    std::vector<std::byte> want;
    const auto append = [&](frame_type type, std::vector<std::byte> body) {
        if (type == frame_type::rma_get_reply) want.insert(want.end(), body.begin(), body.end());
        const std::uint32_t tag = type == frame_type::rma_get_reply ? 7 : 0;
        append_frame(wire, frame_header{type, 0, 1, 0, 0, tag}, body);
    };
    append(frame_type::rma_get_reply, pattern(5, 1));
    append(frame_type::standard, pattern(3, 2));
    append(frame_type::rma_get_reply, pattern(9, 3));
    append(frame_type::rma_get_reply, pattern(1, 4));
    append(frame_type::standard, {});
    for (std::size_t cut = 0; cut <= wire.size(); ++cut) {
        owner o;
        frame_reader reader(decode_limits{1024, 4, false});
        reader.set_placement(
            payload_placement{[](void* ctx, const frame_header& h) noexcept -> std::byte* {
                                  auto* self = static_cast<owner*>(ctx);
                                  if (h.type != frame_type::rma_get_reply) return nullptr;
                                  ++self->calls;
                                  std::byte* at = self->dest.data() + self->placed;
                                  self->placed += h.payload_length;
                                  return at;
                              },
                              &o});
        std::vector<frame> got;
        const std::size_t cuts[] = {cut};
        EXPECT_EQ(feed_chunks(reader, wire, cuts, got), decode_status::ok)
            << "cut " << cut << ": " << describe(reader.error(), "PE 1");
        EXPECT_EQ(got.size(), 5u) << "cut " << cut;
        EXPECT_EQ(o.calls, 3) << "cut " << cut;
        EXPECT_EQ(std::vector<std::byte>(o.dest.begin(), o.dest.begin() + want.size()), want)
            << "cut " << cut;
    }
}

// A payload that cannot be allocated, for a frame whose placement was declined: the placement
// is asked once (whole frames are decoded in place first; the stages must not ask again).
TEST(frame_reader, a_declined_placement_is_asked_once_when_allocation_fails) {
    struct owner {
        int calls = 0;
    } o;
    frame_reader reader(decode_limits{1024, 4, false},
                        payload_allocator{[](std::size_t) noexcept -> void* { return nullptr; },
                                          [](void*) noexcept {}});
    reader.set_placement(
        payload_placement{[](void* ctx, const frame_header&) noexcept -> std::byte* {
                              ++static_cast<owner*>(ctx)->calls;
                              return nullptr;
                          },
                          &o});
    std::vector<std::byte> wire;
    append_frame(wire, frame_header{frame_type::standard, 0, 1, 0, 0, 0}, pattern(9, 1));
    int frames = 0;
    EXPECT_EQ(reader.feed_all(wire, [&](frame&&) { ++frames; }),
              decode_status::payload_allocation_failed);
    EXPECT_EQ(frames, 0);
    EXPECT_EQ(o.calls, 1);
}

// Frames decoded in place and frames decoded in stages are the same frames: random streams
// (valid frames of several types, some placed, corrupted headers, invalid control payloads,
// over-long lengths, payloads that cannot be allocated, cut tails), fed byte by byte (always
// in stages) and in a few random chunks (mostly in place), give the same frames, the same
// error, the same placements and the same state after.
TEST(frame_reader, frames_decoded_in_place_equal_frames_decoded_in_stages) {
    struct outcome {
        std::vector<std::vector<std::byte>> frames;  // header and payload, as handed out
        std::vector<std::uint32_t> placed;           // the length asked for, per placement
        decode_status status;
        std::string error;
        bool boundary;
        std::size_t needed;
    };
    // The same, but for placements: the stages ask for a frame's placement before its
    // payload is in, so for a frame then found invalid they asked once more than in place.
    const auto same = [](const outcome& staged, const outcome& chunked) {
        const bool placements =
            staged.placed == chunked.placed ||
            (staged.status != decode_status::ok &&
             staged.placed.size() == chunked.placed.size() + 1 &&
             std::equal(chunked.placed.begin(), chunked.placed.end(), staged.placed.begin()));
        return staged.frames == chunked.frames && staged.status == chunked.status &&
               staged.error == chunked.error && staged.boundary == chunked.boundary &&
               staged.needed == chunked.needed && placements;
    };
    const auto run = [](const std::vector<std::byte>& wire, const std::vector<std::size_t>& cuts) {
        struct owner {
            std::vector<std::byte> dest = std::vector<std::byte>(4096);
            std::size_t at = 0;
            std::vector<std::uint32_t> asked;
        } o;
        const payload_allocator no_13{[](std::size_t n) noexcept -> void* {
                                          return n == 13 ? nullptr
                                                         : ::operator new(n, std::nothrow);
                                      },
                                      [](void* p) noexcept { ::operator delete(p); }};
        frame_reader reader(decode_limits{64, 4, false}, no_13);
        reader.set_placement(
            payload_placement{[](void* ctx, const frame_header& h) noexcept -> std::byte* {
                                  auto* self = static_cast<owner*>(ctx);
                                  self->asked.push_back(h.payload_length);
                                  if (h.type != frame_type::rma_get_reply) return nullptr;
                                  std::byte* at = self->dest.data() + self->at;
                                  self->at += h.payload_length;
                                  return at;
                              },
                              &o});
        outcome out;
        std::vector<frame> got;
        const decode_status st = feed_chunks(reader, wire, cuts, got);
        for (const frame& f : got) {
            const auto head = encode_header(f.header);
            std::vector<std::byte> bytes(head.begin(), head.end());
            const auto payload = f.payload_bytes();
            bytes.insert(bytes.end(), payload.begin(), payload.end());
            out.frames.push_back(std::move(bytes));
        }
        out.placed = o.asked;
        out.status = st;
        out.error = reader.failed() ? describe(reader.error(), "PE 1") : "";
        out.boundary = reader.at_frame_boundary();
        out.needed = reader.bytes_needed();
        return out;
    };
    std::mt19937 rng(4242);
    for (int round = 0; round < 3000; ++round) {
        std::vector<std::byte> wire;
        for (int k = 1 + static_cast<int>(rng() % 6); k > 0; --k) {
            const std::size_t at = wire.size();
            std::size_t length = rng() % 3 == 0 ? 0 : rng() % 20;
            if (rng() % 10 == 0) length = 13;  // its allocation fails (unless placed)
            switch (rng() % 4) {
                case 0:
                    append_frame(wire, frame_header{frame_type::rma_get_reply, 0, 1, 0, 0, 7},
                                 pattern(length, k));
                    break;
                case 1: {
                    const auto credit =
                        encode(credit_payload{static_cast<std::uint16_t>(rng() % 3)});
                    append_frame(wire, frame_header{frame_type::credit, 0, 2, 0, 0, 0}, credit);
                    break;
                }
                default:
                    append_frame(wire, frame_header{frame_type::standard, 0, 3, 0, 0, 0},
                                 pattern(length, k));
            }
            if (rng() % 15 == 0) wire[at + rng() % header_size] ^= std::byte{0x10};
            if (rng() % 20 == 0) {  // a header announcing more than the limit (64)
                const auto head = encode_header(frame_header{frame_type::standard, 0, 0, 70, 0, 0});
                wire.insert(wire.end(), head.begin(), head.end());
            }
        }
        if (rng() % 5 == 0)
            wire.resize(wire.size() - 1 - rng() % std::min<std::size_t>(3, wire.size()));
        std::vector<std::size_t> each_byte;
        for (std::size_t i = 1; i < wire.size(); ++i)
            each_byte.push_back(i);
        std::vector<std::size_t> cuts;
        for (int c = static_cast<int>(rng() % 4); c > 0; --c)
            cuts.push_back(rng() % (wire.size() + 1));
        std::sort(cuts.begin(), cuts.end());
        const outcome staged = run(wire, each_byte);
        const outcome chunked = run(wire, cuts);
        ASSERT_TRUE(same(staged, chunked))
            << "round " << round << ": " << staged.frames.size() << " frames and '" << staged.error
            << "' byte by byte, " << chunked.frames.size() << " and '" << chunked.error
            << "' in chunks";
    }
}

}  // namespace
}  // namespace coverse::net
