// Little-endian loads and stores of unsigned integers at a byte pointer, so the wire order is
// the same on every host. On a little-endian host they are one memcpy of the integer (a
// plain load or store): g++ 12 left the byte-by-byte shifts as they were written, one load,
// shift and or per byte (a frame header's decode cost ~120 instructions, docs/perf.md
// stop 37). The shifts remain for constant evaluation and big-endian hosts.
#pragma once

#include <bit>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace coverse::net::detail {

template <std::unsigned_integral T>
constexpr void store_le(std::byte* out, T value) noexcept {
    if constexpr (std::endian::native == std::endian::little) {
        if (!std::is_constant_evaluated()) {
            std::memcpy(out, &value, sizeof value);
            return;
        }
    }
    for (std::size_t i = 0; i < sizeof(T); ++i) {
        out[i] = static_cast<std::byte>(static_cast<std::uint8_t>(value >> (8 * i)));
    }
}

template <std::unsigned_integral T>
constexpr T load_le(const std::byte* in) noexcept {
    if constexpr (std::endian::native == std::endian::little) {
        if (!std::is_constant_evaluated()) {
            T value;
            std::memcpy(&value, in, sizeof value);
            return value;
        }
    }
    T value = 0;
    for (std::size_t i = 0; i < sizeof(T); ++i) {
        value = static_cast<T>(value |
                               (static_cast<T>(std::to_integer<std::uint8_t>(in[i])) << (8 * i)));
    }
    return value;
}

}  // namespace coverse::net::detail
