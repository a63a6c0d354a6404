// Message memory: msg_alloc/msg_free/msg_reference/msg_size over the pool and the system
// allocator, the header checks that catch foreign and double frees, and place_message for
// owners that bring their own storage.
#include <coverse/alloc/message.hpp>

#include <coverse/alloc/memory_release.hpp>

#include "internal.hpp"

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <new>
#include <unordered_set>

namespace coverse::alloc {
namespace detail {

constinit std::atomic<int> leak_tracking_state{-1};

void set_large_cache_limit(std::size_t bytes) noexcept;

bool leak_tracking_enabled() noexcept {
    int state = leak_tracking_state.load(std::memory_order_relaxed);
    if (state < 0) {
        (void)current_config();  // publishes the state
        state = leak_tracking_state.load(std::memory_order_relaxed);
    }
    return state > 0;
}

void fatal(const char* format, ...) noexcept {
    std::va_list args;
    va_start(args, format);
    std::fputs("coverse alloc: ", stderr);
    std::vfprintf(stderr, format, args);
    std::fputc('\n', stderr);
    va_end(args);
    std::fflush(stderr);
    std::abort();
}

namespace {

// Counts of live system messages, one shard per thread. A thread updates only its own shard,
// with a relaxed load and store instead of a locked read-modify-write; a message freed on
// another thread raises one shard and lowers another, so only the sum means anything. Shards
// pass to later threads and are never freed.
struct counter_shard {
    std::atomic<std::int64_t> blocks{0};
    std::atomic<std::int64_t> bytes{0};
    counter_shard* next = nullptr;
    bool in_use = false;  // guarded by shard_list::mutex
    bool shared = false;  // the fallback shard, updated with read-modify-writes
};

struct shard_list {
    shard_list() {
        fallback.shared = true;
        head = &fallback;
    }
    std::mutex mutex;
    counter_shard fallback;  // for threads past their exit hook, or when memory runs out
    counter_shard* head;
};

// Never destroyed: system messages may be freed by static destructors of other files.
shard_list& shards() {
    static auto* l = new shard_list;
    return *l;
}

constinit thread_local counter_shard* tls_shard = nullptr;
constinit thread_local bool tls_shard_returned = false;

// Hands the thread's shard to a later thread when this one exits.
struct shard_exit_hook {
    counter_shard* shard = nullptr;
    ~shard_exit_hook() {
        tls_shard = nullptr;
        tls_shard_returned = true;
        if (shard != nullptr) {
            shard_list& l = shards();
            std::lock_guard lock(l.mutex);
            shard->in_use = false;  // the lock orders this thread's last counts before reuse
        }
    }
};
thread_local shard_exit_hook tls_shard_hook;

[[gnu::noinline]] counter_shard& adopt_shard() noexcept {
    shard_list& l = shards();
    if (tls_shard_returned) return l.fallback;
    std::lock_guard lock(l.mutex);
    counter_shard* s = l.head;
    while (s != nullptr && (s->in_use || s->shared))
        s = s->next;
    if (s == nullptr) {
        s = new (std::nothrow) counter_shard;
        if (s == nullptr) return l.fallback;
        s->next = l.head;
        l.head = s;
    }
    s->in_use = true;
    tls_shard_hook.shard = s;
    tls_shard = s;
    return *s;
}

inline void count_system(std::int64_t blocks, std::int64_t bytes) noexcept {
    counter_shard* s = tls_shard;
    if (s == nullptr) [[unlikely]]
        s = &adopt_shard();
    if (s->shared) [[unlikely]] {
        s->blocks.fetch_add(blocks, std::memory_order_relaxed);
        s->bytes.fetch_add(bytes, std::memory_order_relaxed);
        return;
    }
    s->blocks.store(s->blocks.load(std::memory_order_relaxed) + blocks, std::memory_order_relaxed);
    s->bytes.store(s->bytes.load(std::memory_order_relaxed) + bytes, std::memory_order_relaxed);
}

// Large messages, and all of them with the pool off. malloc is thread-safe already, so a free
// on any thread goes straight back to it.
class system_owner final : public chunk_owner {
public:
    void take_back(void* storage, std::size_t size) noexcept override;
    const char* name() const noexcept override { return "system"; }
};

// Trivially destructible, so it is never torn down under a late free.
constinit system_owner the_system_owner;

// System blocks allocated while the leak report is on. Pool blocks need no such set: the
// report walks the slabs.
struct system_tracker {
    std::mutex mutex;
    std::unordered_set<const chunk_header*> live;
};
constinit std::atomic<bool> tracker_used{false};

system_tracker& tracker() {
    static auto* t = new system_tracker;
    return *t;
}

// Freed large blocks kept for reuse (LARGE_CACHE bytes at most). A large message freed to
// malloc comes back as fresh pages the next time (mmap'd, or the heap trimmed), and faulting
// in 1 MiB costs more than copying it. Blocks are allocated at their size class (four
// classes per power of two from 32 KiB to 64 MiB, at most 25% slack, and one class above
// it, so a 64 MiB message with its header is cached too), so a cached block
// serves any request of its class. They stay ours while cached: registrations of them stay
// valid, and the release listeners hear of a block only when it really goes back.
class large_block_cache {
public:
    static constexpr std::size_t smallest = std::size_t{32} << 10;
    static constexpr std::size_t largest = (std::size_t{64} << 20) + (std::size_t{16} << 20);
    static constexpr int classes = 4 * 12 + 1;

    // The class of a block of `storage` bytes, or -1 when it is not cached.
    static int class_of(std::size_t storage) noexcept {
        if (storage <= smallest / 2 || storage > largest) return -1;
        int k = 0;
        while ((std::size_t{1} << (k + 1)) < storage)
            ++k;  // 2^k < storage <= 2^(k+1)
        const std::size_t quarter = std::size_t{1} << (k - 2);
        const std::size_t steps = (storage - (std::size_t{1} << k) + quarter - 1) / quarter;
        return (k - 14) * 4 + static_cast<int>(steps) - 1;
    }
    static std::size_t class_bytes(int c) noexcept {
        const int k = c / 4 + 14;
        return (std::size_t{1} << k) +
               static_cast<std::size_t>(c % 4 + 1) * (std::size_t{1} << (k - 2));
    }

    void* take(int c) noexcept {
        if (_limit.load(std::memory_order_relaxed) == 0) return nullptr;
        std::lock_guard lock(_mutex);
        auto& list = _free[c];
        if (list.empty()) return nullptr;
        void* b = list.back();
        list.pop_back();
        _bytes -= class_bytes(c);
        return b;
    }
    // True when the cache kept the block.
    bool give(void* storage, int c) noexcept {
        const std::size_t limit = _limit.load(std::memory_order_relaxed);
        const std::size_t bytes = class_bytes(c);
        std::lock_guard lock(_mutex);
        if (_bytes + bytes > limit) return false;
        try {
            _free[c].push_back(storage);
        } catch (const std::bad_alloc&) {
            return false;
        }
        _bytes += bytes;
        return true;
    }
    void set_limit(std::size_t bytes) noexcept { _limit.store(bytes, std::memory_order_relaxed); }

private:
    std::mutex _mutex;
    std::vector<void*> _free[classes];
    std::size_t _bytes = 0;
    std::atomic<std::size_t> _limit{std::size_t{256} << 20};
};

// Never destroyed: a late free may still reach it. Its blocks go with the process.
large_block_cache& large_cache() {
    static auto* c = new large_block_cache;
    return *c;
}

}  // namespace

void set_large_cache_limit(std::size_t bytes) noexcept {
    large_cache().set_limit(bytes);
}

namespace {

void system_owner::take_back(void* storage, std::size_t size) noexcept {
    count_system(-1, -static_cast<std::int64_t>(size));
    if (tracker_used.load(std::memory_order_relaxed)) {
        system_tracker& t = tracker();
        std::lock_guard lock(t.mutex);
        t.live.erase(static_cast<const chunk_header*>(storage));
    }
    const std::size_t storage_bytes = message_storage_size(size);
    const int c = large_block_cache::class_of(storage_bytes);
    if (c >= 0 && large_cache().give(storage, c)) {
        poison(storage, large_block_cache::class_bytes(c));
        return;
    }
    // Before free(): once the address can be handed out again, no cache may still map it.
    announce_release(storage, c >= 0 ? large_block_cache::class_bytes(c) : storage_bytes);
    std::free(storage);
}

void* system_allocate(std::size_t size, const void* site, std::uint32_t canary) noexcept {
    if (size > SIZE_MAX - sizeof(chunk_header)) return nullptr;
    static_assert(alignof(std::max_align_t) >= message_alignment,
                  "malloc must return message_alignment-aligned memory");
    const int c = large_block_cache::class_of(sizeof(chunk_header) + size);
    void* storage = nullptr;
    if (c >= 0) {
        storage = large_cache().take(c);
        if (storage) unpoison(storage, large_block_cache::class_bytes(c));
        if (!storage) storage = std::malloc(large_block_cache::class_bytes(c));
    } else {
        storage = std::malloc(sizeof(chunk_header) + size);
    }
    if (storage == nullptr) return nullptr;
    auto* chunk = new (storage) chunk_header(size, &the_system_owner, site, canary);
    count_system(1, static_cast<std::int64_t>(size));
    if (leak_tracking_state.load(std::memory_order_relaxed) > 0) {
        system_tracker& t = tracker();
        std::lock_guard lock(t.mutex);
        try {
            t.live.insert(chunk);
            tracker_used.store(true, std::memory_order_relaxed);
        } catch (const std::bad_alloc&) {
            // The report misses this block; the allocation itself is fine.
        }
    }
    return chunk->user();
}

// Fills in a pool entry's header: the owner field was set once, when its slab was carved.
inline void* hand_out(chunk_header* chunk, std::size_t size, const void* site,
                      std::uint32_t canary) noexcept {
    chunk->size = size;
    chunk->site = site;
    chunk->refcount.store(1, std::memory_order_relaxed);
    chunk->canary = canary;
    unpoison(chunk->user(), size);
    return chunk->user();
}

// Everything but a pooled size from an existing, non-empty bucket with the report off. Out of
// line, so the fast path in msg_alloc needs no stack frame.
[[gnu::noinline]] void* allocate_slow(std::size_t size, const void* site,
                                      std::uint32_t canary) noexcept {
    if (size <= pool_largest_bucket) {
        pool* p = tls_pool;
        if (p == nullptr && !tls_no_pool) p = local_pool_slow();
        if (p != nullptr) {
            chunk_header* chunk = p->take(pool_bucket_index(size), size);
            return chunk != nullptr ? hand_out(chunk, size, site, canary) : nullptr;
        }
    }
    return system_allocate(size, site, canary);
}

inline void* allocate(std::size_t size) noexcept {
    pool* p = tls_pool;
    if (size <= pool_largest_bucket && p != nullptr) [[likely]] {
        if (chunk_header* chunk = p->try_take(pool_bucket_index(size), size)) [[likely]] {
            return hand_out(chunk, size, nullptr, canary_live);
        }
    }
    return allocate_slow(size, nullptr, canary_live);
}

// Validates `msg` before anything trusts its header. Every message names the pointer.
chunk_header* checked_header(const void* msg, const char* operation) noexcept {
    if (reinterpret_cast<std::uintptr_t>(msg) % message_alignment != 0) [[unlikely]] {
        fatal(
            "%s(%p): not a coverse message: it is not %zu-byte aligned, so msg_alloc did not "
            "return it",
            operation, msg, message_alignment);
    }
    chunk_header* chunk = chunk_header::of(msg);
#if COVERSE_ALLOC_ASAN
    // Reading the header of a freed system block or of foreign memory would be an ASan error
    // of its own; say what it means instead.
    if (__asan_region_is_poisoned(chunk, sizeof(chunk_header)) != nullptr) {
        fatal(
            "%s(%p): not a live coverse message: ASan marks its header unaddressable, so it "
            "was freed already or never came from msg_alloc",
            operation, msg);
    }
#endif
    if (!chunk->live()) [[unlikely]] {
        if (chunk->canary == canary_freed) {
            fatal(
                "%s(%p): double free: this message's last reference was already freed (take "
                "an extra reference with msg_reference to share a message)",
                operation, msg);
        }
        fatal(
            "%s(%p): not a coverse message: its header canary is 0x%08x, not 0x%08x, so "
            "msg_alloc did not return it (or something wrote in front of it)",
            operation, msg, chunk->canary, canary_live);
    }
    return chunk;
}

}  // namespace
}  // namespace detail

using detail::chunk_header;

// noinline: the return address must be msg_alloc's caller.
[[gnu::noinline]] void* msg_alloc(std::size_t size) noexcept {
    if (detail::leak_tracking_state.load(std::memory_order_relaxed) != 0) [[unlikely]] {
        const void* site = detail::leak_tracking_enabled() ? __builtin_return_address(0) : nullptr;
        return detail::allocate_slow(size, site, detail::canary_live);
    }
    return detail::allocate(size);
}

void* msg_alloc(std::size_t size, const char* site_tag) noexcept {
    if (detail::leak_tracking_state.load(std::memory_order_relaxed) != 0) [[unlikely]] {
        const bool tracked = detail::leak_tracking_enabled() && site_tag != nullptr;
        return detail::allocate_slow(size, tracked ? site_tag : nullptr,
                                     tracked ? detail::canary_live_tagged : detail::canary_live);
    }
    return detail::allocate(size);
}

void msg_free(void* msg) noexcept {
    if (msg == nullptr) return;
    chunk_header* chunk = detail::checked_header(msg, "msg_free");
    // A holder that sees a count of 1 is the only holder: nobody can add a reference without
    // holding one, so the common case skips the atomic read-modify-write.
    if (chunk->refcount.load(std::memory_order_acquire) != 1 &&
        chunk->refcount.fetch_sub(1, std::memory_order_acq_rel) != 1) {
        return;
    }
    chunk->canary = detail::canary_freed;
    detail::pool* p = detail::tls_pool;
    if (p != nullptr && p->put_if_local(chunk)) [[likely]]
        return;
    chunk->owner->take_back(chunk, chunk->size);
}

void msg_reference(void* msg) noexcept {
    detail::checked_header(msg, "msg_reference")->refcount.fetch_add(1, std::memory_order_relaxed);
}

std::size_t msg_size(const void* msg) noexcept {
    return detail::checked_header(msg, "msg_size")->size;
}

std::uint32_t msg_reference_count(const void* msg) noexcept {
    return detail::checked_header(msg, "msg_reference_count")
        ->refcount.load(std::memory_order_acquire);
}

const chunk_owner& msg_owner(const void* msg) noexcept {
    return *detail::checked_header(msg, "msg_owner")->owner;
}

void* place_message(void* storage, std::size_t size, chunk_owner& owner,
                    const char* site_tag) noexcept {
    if (reinterpret_cast<std::uintptr_t>(storage) % message_alignment != 0) {
        detail::fatal(
            "place_message(%p): storage for a message must be %zu-byte aligned (the "
            "owner '%s' passed misaligned memory)",
            storage, message_alignment, owner.name());
    }
    auto* chunk = new (storage) chunk_header(
        size, &owner, site_tag, site_tag ? detail::canary_live_tagged : detail::canary_live);
    return chunk->user();
}

system_stats system_allocation_stats() {
    detail::shard_list& l = detail::shards();
    std::lock_guard lock(l.mutex);
    std::int64_t blocks = 0;
    std::int64_t bytes = 0;
    for (const detail::counter_shard* s = l.head; s != nullptr; s = s->next) {
        blocks += s->blocks.load(std::memory_order_relaxed);
        bytes += s->bytes.load(std::memory_order_relaxed);
    }
    // Exact when the threads are quiet; while they run, a shard read mid-update can lag.
    return system_stats{static_cast<std::size_t>(std::max<std::int64_t>(blocks, 0)),
                        static_cast<std::size_t>(std::max<std::int64_t>(bytes, 0))};
}

namespace detail {

void for_each_tracked_system_block(const std::function<void(const live_block&)>& visit) {
    system_tracker& t = tracker();
    std::lock_guard lock(t.mutex);
    for (const chunk_header* chunk : t.live) {
        visit(live_block{chunk, "system", 0, 0, static_cast<std::size_t>(chunk->size)});
    }
}

}  // namespace detail
}  // namespace coverse::alloc
