// Little-endian loads and stores of unsigned integers at a byte pointer. Written as shifts,
// not memcpy of host integers, so the wire order is the same on every host; compilers turn
// them into one plain load/store on little-endian machines.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>

namespace coverse::net::detail {

template <std::unsigned_integral T>
constexpr void store_le(std::byte* out, T value) noexcept {
    for (std::size_t i = 0; i < sizeof(T); ++i) {
        out[i] = static_cast<std::byte>(static_cast<std::uint8_t>(value >> (8 * i)));
    }
}

template <std::unsigned_integral T>
constexpr T load_le(const std::byte* in) noexcept {
    T value = 0;
    for (std::size_t i = 0; i < sizeof(T); ++i) {
        value = static_cast<T>(value |
                               (static_cast<T>(std::to_integer<std::uint8_t>(in[i])) << (8 * i)));
    }
    return value;
}

}  // namespace coverse::net::detail
