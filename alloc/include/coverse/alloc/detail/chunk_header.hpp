// The 32-byte header in front of every message. Internal to the alloc layer: other layers use
// message.hpp and chunk_owner.hpp, which never expose these fields.
#pragma once

#include <coverse/alloc/chunk_owner.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace coverse::alloc::detail {

// The canary tells a live message from a freed one and from memory that never was a message.
// Its low bit says what `site` holds, so the header stays 32 bytes.
inline constexpr std::uint32_t canary_live = 0xC0FE'A110;              // site: return address
inline constexpr std::uint32_t canary_live_tagged = canary_live | 1u;  // site: const char* tag
inline constexpr std::uint32_t canary_freed = 0xDEAD'F4EE;

struct chunk_header {
    chunk_header(std::uint64_t user_size, chunk_owner* back_to, const void* alloc_site,
                 std::uint32_t canary_value) noexcept
        : size(user_size), owner(back_to), site(alloc_site), refcount(1), canary(canary_value) {}

    std::uint64_t size;  // bytes the user asked for
    chunk_owner* owner;  // who takes the storage back on the last free
    union {
        const void* site;         // live: allocation site (only when the leak report is on)
        chunk_header* next_free;  // free: link in a pool's free list or remote-free list
    };
    std::atomic<std::uint32_t> refcount;
    std::uint32_t canary;

    bool live() const noexcept { return (canary | 1u) == canary_live_tagged; }
    bool site_is_tag() const noexcept { return canary == canary_live_tagged; }

    void* user() noexcept { return reinterpret_cast<std::byte*>(this) + sizeof(chunk_header); }

    static chunk_header* of(const void* user) noexcept {
        return reinterpret_cast<chunk_header*>(
            const_cast<std::byte*>(static_cast<const std::byte*>(user)) - sizeof(chunk_header));
    }
};

// Pinned: the facade's CmiMsgHeaderSizeBytes arithmetic and the 16-byte user alignment rely on it.
static_assert(sizeof(chunk_header) == message_header_size);
static_assert(message_header_size % message_alignment == 0);
static_assert(std::atomic<std::uint32_t>::is_always_lock_free);

}  // namespace coverse::alloc::detail
