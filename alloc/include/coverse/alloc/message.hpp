// Message memory: the allocation behind CmiAlloc/CmiFree/CmiReference/CmiSize. Each message is
// preceded by a header naming its size, its reference count and the owner it goes back to.
#pragma once

#include <coverse/alloc/chunk_owner.hpp>

#include <cstddef>
#include <cstdint>

namespace coverse::alloc {

/// Allocates a message of `size` bytes with one reference, 16-byte aligned: from the calling
/// thread's pool up to 16 KiB (unless MEMORY_POOL=0), else from the system. The leak report
/// records the caller's return address. nullptr when memory is exhausted.
[[nodiscard]] void* msg_alloc(std::size_t size) noexcept;

/// As msg_alloc(size), recording `site_tag` (a string that outlives the message) for the report.
[[nodiscard]] void* msg_alloc(std::size_t size, const char* site_tag) noexcept;

/// Drops one reference; the last one gives the storage back to its owner. Any thread may free.
/// nullptr is ignored. A pointer that is not a live message aborts with a message naming it.
void msg_free(void* msg) noexcept;

/// Adds a reference: the message survives one more msg_free.
void msg_reference(void* msg) noexcept;

/// The size the message was allocated with.
std::size_t msg_size(const void* msg) noexcept;

/// The current number of references (diagnostics and tests).
std::uint32_t msg_reference_count(const void* msg) noexcept;

/// The owner the message goes back to (diagnostics and tests).
const chunk_owner& msg_owner(const void* msg) noexcept;

}  // namespace coverse::alloc
