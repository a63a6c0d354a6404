// Internals shared by the alloc layer's source files: the per-thread pool and its buckets, the
// thread's pool pointer, the leak-tracking switch and the fatal-error reporter.
#pragma once

#include <coverse/alloc/bucket_pool.hpp>
#include <coverse/alloc/chunk_owner.hpp>
#include <coverse/alloc/config.hpp>
#include <coverse/alloc/detail/chunk_header.hpp>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define COVERSE_ALLOC_ASAN 1
#else
#define COVERSE_ALLOC_ASAN 0
#endif

namespace coverse::alloc::detail {

// Under ASan a free entry's user bytes are poisoned and a live entry's bytes past the requested
// size stay poisoned, so use after free and overflow inside a bucket entry are caught too.
inline void poison(void* address, std::size_t length) noexcept {
#if COVERSE_ALLOC_ASAN
    __asan_poison_memory_region(address, length);
#else
    (void)address;
    (void)length;
#endif
}

inline void unpoison(void* address, std::size_t length) noexcept {
#if COVERSE_ALLOC_ASAN
    __asan_unpoison_memory_region(address, length);
#else
    (void)address;
    (void)length;
#endif
}

// Prints to stderr and aborts: for misuse that would otherwise corrupt memory silently.
[[noreturn, gnu::format(printf, 1, 2)]] void fatal(const char* format, ...) noexcept;

// Leak tracking: -1 not read from the config yet, 0 off, 1 on. Read on every allocation, so it
// is one relaxed byte load rather than a call.
extern std::atomic<int> leak_tracking_state;
void set_leak_tracking(bool on);                         // config.cpp, with the config lock held
void set_large_cache_limit(std::size_t bytes) noexcept;  // likewise (message.cpp)
bool leak_tracking_enabled() noexcept;

class pool;

// One region a bucket's entries were carved from.
struct slab {
    std::byte* base;
    std::size_t entries;
};

// One size class of a pool. It is the owner recorded in its entries' headers, so a free finds
// its bucket without a lookup. Everything but take_back runs on the pool's thread only.
class bucket final : public chunk_owner {
public:
    void take_back(void* storage, std::size_t size) noexcept override;
    const char* name() const noexcept override { return "pool"; }

private:
    friend class pool;

    void put(chunk_header* chunk) noexcept {
        chunk->next_free = _free;
        _free = chunk;
        --_live_blocks;
        _live_bytes -= chunk->size;
    }
    bool grow(std::size_t entries) noexcept;
    /// Links the next entries of the newest slab into the free list (refill, when it is
    /// empty): a slab's pages are touched as entries are needed, not when it is made.
    void carve() noexcept;
    std::size_t stride() const noexcept { return sizeof(chunk_header) + _capacity; }

    // The two live counters are kept apart on purpose: side by side, GCC fuses their updates
    // into one 16-byte load/add/store on allocation but not on free, and the 16-byte load then
    // waits for the two 8-byte stores of the previous free (a store-forwarding stall that cost
    // a third of the fast path).
    chunk_header* _free = nullptr;
    std::size_t _live_blocks = 0;
    pool* _pool = nullptr;
    std::size_t _live_bytes = 0;
    std::size_t _capacity = 0;
    std::size_t _entries = 0;
    std::vector<slab> _slabs;
    std::byte* _carve = nullptr;  // the newest slab's first entry not yet on the free list
    std::size_t _carve_left = 0;  // entries from there to the slab's end
};

// A thread's pool: five buckets plus the list other threads push freed entries onto.
class pool {
public:
    pool(const alloc_config& config, std::uint64_t serial, long thread_id);
    ~pool();
    pool(const pool&) = delete;
    pool& operator=(const pool&) = delete;

    // Owner thread. A header whose size and site the caller fills in; nullptr if out of memory.
    chunk_header* take(std::size_t index, std::size_t size) noexcept {
        bucket& b = _buckets[index];
        chunk_header* chunk = b._free;
        if (chunk == nullptr) [[unlikely]] {
            chunk = refill(b);
            if (chunk == nullptr) return nullptr;
        }
        b._free = chunk->next_free;
        ++b._live_blocks;
        b._live_bytes += size;
        return chunk;
    }

    // Owner thread, fast path: nullptr when the bucket is empty (then take() refills).
    chunk_header* try_take(std::size_t index, std::size_t size) noexcept {
        bucket& b = _buckets[index];
        chunk_header* chunk = b._free;
        if (chunk == nullptr) [[unlikely]]
            return nullptr;
        b._free = chunk->next_free;
        ++b._live_blocks;
        b._live_bytes += size;
        return chunk;
    }

    // Owner thread: takes a freed chunk back if one of this pool's buckets owns it. Spares the
    // common free (same thread) the virtual call and the owner check of bucket::take_back.
    bool put_if_local(chunk_header* chunk) noexcept {
        const auto owner = reinterpret_cast<std::uintptr_t>(chunk->owner);
        const auto first = reinterpret_cast<std::uintptr_t>(_buckets.data());
        if (owner - first >= sizeof(_buckets)) return false;
        auto* b = static_cast<bucket*>(chunk->owner);
        poison(chunk->user(), b->_capacity);
        b->put(chunk);
        return true;
    }

    // Any thread: the entry goes on the remote-free list for the owner to collect.
    void push_remote(chunk_header* chunk) noexcept;
    // Owner thread (or the registry, for a retired pool): moves remote frees to the free lists.
    void collect_remote_frees() noexcept;

    std::size_t live_blocks() const noexcept;
    pool_stats stats() const noexcept;
    std::uint64_t serial() const noexcept { return _serial; }
    long thread_id() const noexcept { return _thread_id; }

    // Calls `visit(chunk, bucket_index)` for every live entry (leak report).
    void for_each_live(const std::function<void(chunk_header&, std::size_t)>& visit) const;

private:
    chunk_header* refill(bucket& b) noexcept;

    // Own cache line: other threads write it, the owner reads it only when a bucket runs empty.
    alignas(64) std::atomic<chunk_header*> _remote_frees{nullptr};
    alignas(64) std::array<bucket, pool_bucket_count> _buckets;
    std::size_t _grow;
    std::size_t _remote_collected = 0;
    std::uint64_t _serial;
    long _thread_id;
};

// The calling thread's pool; nullptr before its first allocation, with the pool off, or after
// release. constinit lets other files read it without a TLS wrapper call.
extern constinit thread_local pool* tls_pool;

// Set when this thread must not create a pool: the pool is off, or the thread is exiting (its
// pool was already retired by the exit hook, and a new one would never be released).
extern constinit thread_local bool tls_no_pool;

// Creates the calling thread's pool; nullptr if the pool is off or the thread is exiting.
pool* local_pool_slow() noexcept;

// Leak report sources; each runs `visit` under the lock of what it walks.
struct live_block {
    const chunk_header* chunk;
    const char* owner;          // "pool" or "system"
    std::uint64_t pool_serial;  // 0 for system
    long thread_id;             // pool's thread, 0 for system
    std::size_t capacity;       // bucket capacity, or the size for system blocks
};
void for_each_live_pool_block(const std::function<void(const live_block&)>& visit);
void for_each_tracked_system_block(const std::function<void(const live_block&)>& visit);

}  // namespace coverse::alloc::detail
