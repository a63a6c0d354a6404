// frame_reader: the incremental decoder of one connection's byte stream. Fed chunks of any
// size, it yields validated frames in order and stops for good at the first invalid one
// (its owner then closes the connection).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include <coverse/net/wire.hpp>

namespace coverse::net {

/// Where payloads are allocated. The default is new[]; the machine layer supplies message
/// memory (CmiAlloc's), so a received payload becomes a Converse message without a copy.
struct payload_allocator {
    void* (*allocate)(std::size_t bytes) noexcept = nullptr;  // null: new[]; may return null
    void (*release)(void* p) noexcept = nullptr;
};

/// Where the owner wants a frame's payload to land instead (one-sided data straight into the
/// requester's buffer): called with each validated header that has a payload; returns the
/// destination of header.payload_length bytes, or null for an ordinary allocated payload.
/// A placed payload is not owned by the frame (its deleter does nothing).
struct payload_placement {
    std::byte* (*place)(void* ctx, const frame_header& header) noexcept = nullptr;
    void* ctx = nullptr;
};

/// The release function of placed payloads: the memory belongs to whoever placed it.
inline void keep_placed_payload(void*) noexcept {}

/// Frees a payload the way it was allocated.
struct payload_deleter {
    void (*release)(void* p) noexcept = nullptr;
    void operator()(std::byte* p) const noexcept {
        if (release)
            release(p);
        else
            delete[] p;
    }
};
using payload_ptr = std::unique_ptr<std::byte[], payload_deleter>;

/// One received frame: a validated header and exactly header.payload_length bytes.
struct frame {
    frame_header header;
    payload_ptr payload;  // null when payload_length == 0

    [[nodiscard]] std::span<std::byte> payload_bytes() const noexcept {
        return {payload.get(), header.payload_length};
    }
};

/// Stages: header (collecting 24 bytes into a small array) -> payload (filling one buffer
/// allocated at the header's validated length) -> ready (a frame waits for take_frame)
/// -> header again; or failed, which is final.
///
/// Each payload byte is copied once, from the caller's chunk into the frame's buffer; a
/// socket owner that wants zero copies receives straight into payload_window() instead.
class frame_reader {
public:
    explicit frame_reader(const decode_limits& limits, payload_allocator alloc = {}) noexcept
        : _limits(limits), _alloc(alloc) {}

    /// Consumes bytes from `chunk` until a frame is complete, the chunk is used up, or a
    /// header fails validation; returns how many bytes it consumed. Consumes nothing while
    /// a frame is ready (take it first) or after a failure.
    std::size_t feed(std::span<const std::byte> chunk) noexcept;

    /// Feeds all of `chunk`, calling on_frame(frame&&) for each complete frame in order.
    /// Returns ok, or the error that stopped the reader (no frame follows an error).
    template <class OnFrame>
    decode_status feed_all(std::span<const std::byte> chunk, OnFrame&& on_frame) {
        // Between frames, each frame is decoded where it lies: a whole one goes out at once
        // (no stage to pass through), a cut one continues in the payload stage, and whole
        // ones after it go in place again.
        while (!failed()) {
            if (at_frame_boundary()) {
                while (chunk.size() >= header_size) {
                    frame whole;
                    if (!take_whole(chunk, whole)) break;
                    on_frame(std::move(whole));
                }
                if (chunk.empty() || failed()) break;
            }
            const std::size_t used = feed(chunk);
            chunk = chunk.subspan(used);
            if (has_frame()) {
                on_frame(take_frame());
            } else if (chunk.empty() || failed()) {
                break;
            }
        }
        return _error.status;
    }

    [[nodiscard]] bool has_frame() const noexcept { return _stage == stage::ready; }
    /// Hands over the complete frame. Precondition: has_frame().
    [[nodiscard]] frame take_frame() noexcept;

    [[nodiscard]] bool failed() const noexcept { return _stage == stage::failed; }
    /// Why the reader stopped; ok() while it has not.
    [[nodiscard]] const decode_error& error() const noexcept { return _error; }

    /// The rest of the current payload, for a receive straight into the frame's buffer;
    /// empty unless a payload is being filled. Follow a receive with commit_payload(n).
    [[nodiscard]] std::span<std::byte> payload_window() noexcept;
    /// Accounts n bytes written into payload_window(). n must not exceed its size.
    void commit_payload(std::size_t n) noexcept;

    /// Bytes still missing from the current stage (header or payload); 0 when a frame is
    /// ready or the reader failed. Lets the owner size its next receive.
    [[nodiscard]] std::size_t bytes_needed() const noexcept;

    /// True between frames: no header or payload bytes are pending. An end of stream
    /// anywhere else means the peer closed or died in the middle of a frame.
    [[nodiscard]] bool at_frame_boundary() const noexcept {
        return _stage == stage::header && _header_filled == 0;
    }

    [[nodiscard]] const decode_limits& limits() const noexcept { return _limits; }

    /// Payloads from now on may be placed (see payload_placement).
    void set_placement(payload_placement p) noexcept { _place = p; }

private:
    enum class stage : std::uint8_t { header, payload, ready, failed };

    // Decodes the frame at the start of `chunk` (header_size bytes at least) where it lies.
    // A valid frame wholly in the chunk goes into `out`, `chunk` past it: true. Else false:
    // a frame the chunk cuts begins its payload stage (`chunk` past its header), and an
    // invalid one, or a payload that cannot be allocated, fails the reader as the stages do.
    bool take_whole(std::span<const std::byte>& chunk, frame& out) noexcept;
    // The current frame is `header` (validated): its payload stage begins (or it is ready).
    void begin_payload(const frame_header& header) noexcept;
    // The payload buffer of validated `header` (payload_length > 0) into `out`: placed, else
    // allocated; false, and the reader failed, when it cannot be allocated.
    bool make_payload(const frame_header& header, payload_ptr& out) noexcept;
    void header_complete() noexcept;
    void payload_complete() noexcept;
    void fail(const decode_error& error) noexcept;

    decode_limits _limits;
    payload_allocator _alloc;
    payload_placement _place;
    stage _stage = stage::header;
    std::array<std::byte, header_size> _header_bytes{};
    std::size_t _header_filled = 0;
    frame _current;
    std::size_t _payload_filled = 0;
    decode_error _error;
};

}  // namespace coverse::net
