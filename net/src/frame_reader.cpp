// frame_reader: header accumulation, payload allocation at the validated length, and the
// hand-over of complete frames.
#include <coverse/net/frame_reader.hpp>

#include <algorithm>
#include <cstring>
#include <new>
#include <utility>

namespace coverse::net {

std::size_t frame_reader::feed(std::span<const std::byte> chunk) noexcept {
    std::size_t used = 0;
    while (used < chunk.size()) {
        if (_stage == stage::header) {
            const std::size_t n = std::min(header_size - _header_filled, chunk.size() - used);
            std::memcpy(_header_bytes.data() + _header_filled, chunk.data() + used, n);
            _header_filled += n;
            used += n;
            if (_header_filled == header_size) header_complete();
        } else if (_stage == stage::payload) {
            const std::span<std::byte> window = payload_window();
            const std::size_t n = std::min(window.size(), chunk.size() - used);
            std::memcpy(window.data(), chunk.data() + used, n);
            used += n;
            commit_payload(n);
        } else {
            break;  // ready (take the frame first) or failed (final)
        }
        if (_stage == stage::ready || _stage == stage::failed) break;
    }
    return used;
}

void frame_reader::header_complete() noexcept {
    _header_filled = 0;
    const auto decoded = decode_header(_header_bytes, _limits);
    if (!decoded.ok()) {
        fail(decoded.error);
        return;
    }
    begin_payload(decoded.value);
}

void frame_reader::begin_payload(const frame_header& header) noexcept {
    _current.header = header;
    _payload_filled = 0;
    if (header.payload_length == 0) {
        payload_complete();
        return;
    }
    if (make_payload(header, _current.payload)) _stage = stage::payload;
}

// Allocated only once the header is validated, at its length (never the maximum up front),
// and left uninitialised: the stream overwrites every byte.
bool frame_reader::make_payload(const frame_header& header, payload_ptr& out) noexcept {
    if (std::byte* placed = _place.place ? _place.place(_place.ctx, header) : nullptr)
        out = payload_ptr(placed, payload_deleter{&keep_placed_payload});
    else if (_alloc.allocate)
        out = payload_ptr(static_cast<std::byte*>(_alloc.allocate(header.payload_length)),
                          payload_deleter{_alloc.release});
    else
        out = payload_ptr(new (std::nothrow) std::byte[header.payload_length]);
    if (out) return true;
    fail(decode_error{decode_status::payload_allocation_failed, header.type, "payload_length",
                      header.payload_length, _limits.max_payload});
    return false;
}

bool frame_reader::take_whole(std::span<const std::byte>& chunk, frame& out) noexcept {
    const auto decoded = decode_header(chunk.first<header_size>(), _limits);
    if (!decoded.ok()) {
        fail(decoded.error);
        return false;
    }
    const std::uint32_t length = decoded.value.payload_length;
    if (chunk.size() - header_size < length) {  // cut: its payload is filled in stages
        chunk = chunk.subspan(header_size);
        begin_payload(decoded.value);
        return false;
    }
    // Validated where it lies, before a placement (which advances its target) is asked for:
    // an invalid frame is never placed, a valid one once.
    const auto bytes = chunk.subspan(header_size, length);
    if (const decode_error error = validate_payload(decoded.value, bytes, _limits); !error.ok()) {
        fail(error);
        return false;
    }
    payload_ptr payload;
    if (length > 0) {
        if (!make_payload(decoded.value, payload)) return false;
        std::memcpy(payload.get(), bytes.data(), length);
    }
    out.header = decoded.value;
    out.payload = std::move(payload);
    chunk = chunk.subspan(header_size + length);
    return true;
}

void frame_reader::payload_complete() noexcept {
    const decode_error error = validate_payload(_current.header, _current.payload_bytes(), _limits);
    if (!error.ok()) {
        fail(error);
        return;
    }
    _stage = stage::ready;
}

void frame_reader::fail(const decode_error& error) noexcept {
    _error = error;
    _current.payload.reset();
    _stage = stage::failed;
}

frame frame_reader::take_frame() noexcept {
    frame out = std::move(_current);
    _current = frame{};
    _stage = stage::header;
    return out;
}

std::span<std::byte> frame_reader::payload_window() noexcept {
    if (_stage != stage::payload) return {};
    return _current.payload_bytes().subspan(_payload_filled);
}

void frame_reader::commit_payload(std::size_t n) noexcept {
    if (_stage != stage::payload) return;
    _payload_filled += std::min(n, _current.header.payload_length - _payload_filled);
    if (_payload_filled == _current.header.payload_length) payload_complete();
}

std::size_t frame_reader::bytes_needed() const noexcept {
    switch (_stage) {
        case stage::header:
            return header_size - _header_filled;
        case stage::payload:
            return _current.header.payload_length - _payload_filled;
        default:
            return 0;
    }
}

}  // namespace coverse::net
