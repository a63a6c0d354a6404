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
    _current.header = decoded.value;
    _payload_filled = 0;
    const std::uint32_t length = decoded.value.payload_length;
    if (length == 0) {
        payload_complete();
        return;
    }
    // Allocated only now, at the validated length (never the maximum up front), and left
    // uninitialised: the stream overwrites every byte.
    std::byte* placed = _place.place ? _place.place(_place.ctx, decoded.value) : nullptr;
    if (placed)
        _current.payload = payload_ptr(placed, payload_deleter{&keep_placed_payload});
    else if (_alloc.allocate)
        _current.payload = payload_ptr(static_cast<std::byte*>(_alloc.allocate(length)),
                                       payload_deleter{_alloc.release});
    else
        _current.payload = payload_ptr(new (std::nothrow) std::byte[length]);
    if (!_current.payload) {
        fail(decode_error{decode_status::payload_allocation_failed, decoded.value.type,
                          "payload_length", length, _limits.max_payload});
        return;
    }
    _stage = stage::payload;
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
