// The owner interface of message memory: who takes a message's storage back when its last
// reference is freed (a pool bucket, the system allocator, later an eager slot), and how an owner
// places a message in storage it provides.
#pragma once

#include <cstddef>

namespace coverse::alloc {

/// Bytes in front of every message (size, reference count, owner, canary, allocation site).
inline constexpr std::size_t message_header_size = 32;
/// Alignment of every message's user pointer, and of the storage given to place_message.
inline constexpr std::size_t message_alignment = 16;

/// Storage an owner must provide for a message of `size` bytes.
constexpr std::size_t message_storage_size(std::size_t size) noexcept {
    return message_header_size + size;
}

/// Whoever a message's storage goes back to. An owner outlives every message it owns.
class chunk_owner {
public:
    /// Takes back `storage` (the pointer given to place_message) of a message of `size` bytes
    /// whose last reference was just freed. Runs on whichever thread freed it, so an owner used
    /// from several threads synchronises here.
    virtual void take_back(void* storage, std::size_t size) noexcept = 0;

    /// A short name for error messages and the leak report, e.g. "eager slot".
    virtual const char* name() const noexcept = 0;

protected:
    chunk_owner() = default;
    chunk_owner(const chunk_owner&) = default;
    chunk_owner& operator=(const chunk_owner&) = default;
    // Owners are never deleted through this interface.
    ~chunk_owner() = default;
};

/// Builds a message of `size` bytes with one reference in `storage`, which must be
/// message_alignment-aligned and hold message_storage_size(size) bytes. Returns the user pointer;
/// the last msg_free hands `storage` to `owner.take_back`. `site_tag` (a string that outlives
/// the message) names the allocation in the leak report. Aborts on misaligned storage.
void* place_message(void* storage, std::size_t size, chunk_owner& owner,
                    const char* site_tag = nullptr) noexcept;

}  // namespace coverse::alloc
