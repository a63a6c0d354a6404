// The per-thread bucket pool's public face: its size classes, its accounting (live blocks and
// bytes per bucket, per pool and for the system allocator) and its lifetime controls.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>

namespace coverse::alloc {

/// Buckets of 1, 2, 4, 8 and 16 KiB of user data (the header comes on top).
inline constexpr std::size_t pool_bucket_count = 5;
inline constexpr std::size_t pool_smallest_bucket = 1024;
inline constexpr std::size_t pool_largest_bucket = pool_smallest_bucket << (pool_bucket_count - 1);

/// User bytes an entry of bucket `index` holds.
constexpr std::size_t pool_bucket_capacity(std::size_t index) noexcept {
    return pool_smallest_bucket << index;
}

/// The bucket serving a message of `size` bytes; pool_bucket_count if it goes to the system.
constexpr std::size_t pool_bucket_index(std::size_t size) noexcept {
    if (size <= pool_smallest_bucket) return 0;
    if (size > pool_largest_bucket) return pool_bucket_count;
    // Smallest power of two >= size, counted from the 1 KiB bucket.
    return static_cast<std::size_t>(std::bit_width(size - 1)) -
           static_cast<std::size_t>(std::countr_zero(pool_smallest_bucket));
}

/// Accounting of one bucket of one pool.
struct bucket_stats {
    std::size_t capacity = 0;     ///< user bytes per entry
    std::size_t live_blocks = 0;  ///< entries handed out and not yet given back
    std::size_t live_bytes = 0;   ///< user bytes asked for by the live entries
    std::size_t entries = 0;      ///< entries the bucket owns, live or free
    std::size_t slabs = 0;        ///< allocations the entries came in (1 + times grown)
};

/// Accounting of the calling thread's pool.
struct pool_stats {
    bool exists = false;       ///< false: this thread has no pool (none yet, or MEMORY_POOL=0)
    std::uint64_t serial = 0;  ///< the pool's number in the leak report
    std::array<bucket_stats, pool_bucket_count> buckets{};
    std::size_t remote_frees = 0;  ///< blocks other threads gave back, collected so far

    std::size_t live_blocks() const noexcept;
    std::size_t live_bytes() const noexcept;
};

/// Accounting of messages served by the system allocator (large ones, or all with the pool off).
struct system_stats {
    std::size_t live_blocks = 0;
    std::size_t live_bytes = 0;
};

/// The calling thread's pool, after collecting the blocks other threads have given back to it.
pool_stats thread_pool_stats();

/// Messages currently live from the system allocator, all threads together.
system_stats system_allocation_stats();

/// Gives up the calling thread's pool, as thread exit does: a pool with no live block is
/// destroyed; one with live blocks is retired and destroyed once they are all freed. The next
/// allocation on this thread creates a new pool from the settings then in force.
void release_thread_pool();

/// Destroys retired pools whose blocks have all come back. Returns how many are still retired.
std::size_t reclaim_retired_pools();

}  // namespace coverse::alloc
