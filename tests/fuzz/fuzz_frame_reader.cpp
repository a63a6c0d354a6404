// libFuzzer target for net's frame_reader: arbitrary bytes, cut into chunks chosen by the
// input, must never crash, and must decode the same way whatever the chunking.
// Built and run by scripts/fuzz.sh (clang++ -fsanitize=fuzzer,address,undefined).
//
// Input: byte 0 -> num_pes (1..256), byte 1 -> max_payload = 2^(b % 21) (up to 1 MiB, so
// a lying header cannot make each run allocate 64 MiB), bit 7 of byte 1 -> accept the
// launcher, byte 2 -> largest chunk (1..256), byte 3 -> chunking seed; the rest is the stream.
#include <coverse/net/frame_reader.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

using namespace coverse::net;

struct outcome {
    std::vector<frame> frames;
    decode_error error;
};

void check(bool condition) {
    if (!condition) std::abort();  // libFuzzer reports the input that got here
}

// The invariants every frame a reader yields must satisfy.
void check_frame(const frame& f, const decode_limits& limits, bool failed_before) {
    check(!failed_before);
    check(f.payload_bytes().size() == f.header.payload_length);
    check(f.header.payload_length <= limits.max_payload);
    check((f.header.payload_length == 0) == (f.payload == nullptr));
    check(validate_payload(f.header, f.payload_bytes(), limits).ok());
    // A yielded header re-encodes and decodes to itself.
    const auto again = decode_header(encode_header(f.header), limits);
    check(again.ok() && again.value == f.header);
}

outcome run(std::span<const std::byte> stream, const decode_limits& limits, std::size_t max_chunk,
            std::uint32_t seed, bool in_place) {
    outcome out;
    frame_reader reader(limits);
    std::size_t pos = 0;
    std::uint32_t state = seed * 2654435761u + 1;
    while (pos < stream.size() && !reader.failed()) {
        state = state * 1103515245u + 12345u;
        // max_chunk 0: the whole stream in one chunk.
        std::size_t n = stream.size() - pos;
        if (max_chunk != 0) n = std::min(n, 1 + (state >> 16) % max_chunk);
        const auto window = reader.payload_window();
        if (in_place && !window.empty()) {
            // The socket path: receive straight into the frame's buffer.
            n = std::min(n, window.size());
            std::memcpy(window.data(), stream.data() + pos, n);
            reader.commit_payload(n);
            if (reader.has_frame()) {
                out.frames.push_back(reader.take_frame());
                check_frame(out.frames.back(), limits, false);
            }
        } else {
            const bool was_failed = reader.failed();
            reader.feed_all(stream.subspan(pos, n), [&](frame&& f) {
                check_frame(f, limits, was_failed || reader.failed());
                out.frames.push_back(std::move(f));
            });
        }
        pos += n;
    }
    out.error = reader.error();
    if (reader.failed()) {
        check(!out.error.ok());
        check(reader.feed(stream) == 0 && !reader.has_frame());
        check(!describe(out.error, "PE 0 (fuzz)").empty());
    }
    return out;
}

bool same(const outcome& a, const outcome& b) {
    if (a.frames.size() != b.frames.size() || a.error.status != b.error.status ||
        a.error.field != b.error.field || a.error.value != b.error.value) {
        return false;
    }
    for (std::size_t i = 0; i < a.frames.size(); ++i) {
        const auto x = a.frames[i].payload_bytes();
        const auto y = b.frames[i].payload_bytes();
        if (!(a.frames[i].header == b.frames[i].header) ||
            !std::equal(x.begin(), x.end(), y.begin(), y.end())) {
            return false;
        }
    }
    return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 4) return 0;
    decode_limits limits;
    limits.num_pes = static_cast<std::uint32_t>(data[0]) + 1;
    limits.max_payload = std::uint32_t{1} << (data[1] % 21);
    limits.accept_launcher = (data[1] & 0x80) != 0;
    const std::size_t max_chunk = static_cast<std::size_t>(data[2]) + 1;
    const std::uint32_t seed = data[3];
    const std::span<const std::byte> stream(reinterpret_cast<const std::byte*>(data) + 4, size - 4);

    // The same stream, whole, chunked, and chunked into payload windows, decodes the same.
    const outcome whole = run(stream, limits, 0, 0, false);
    check(same(whole, run(stream, limits, max_chunk, seed, false)));
    check(same(whole, run(stream, limits, max_chunk, seed, true)));
    return 0;
}
