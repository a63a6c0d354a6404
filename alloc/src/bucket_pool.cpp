// The per-thread bucket pool: slabs and free lists, the lock-free list that takes back blocks
// freed on other threads, and the registry that retires pools whose thread is gone.
#include "internal.hpp"

#include <coverse/alloc/memory_release.hpp>

#include <unistd.h>
#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <new>
#include <utility>

namespace coverse::alloc {
namespace detail {

constinit thread_local pool* tls_pool = nullptr;

constinit thread_local bool tls_no_pool = false;

namespace {

struct pool_registry {
    std::mutex mutex;
    std::vector<pool*> active;
    std::vector<pool*> retired;  // thread gone, blocks still live
    std::uint64_t next_serial = 1;
};

// Never destroyed: blocks may be freed, and the leak report read, after static destructors ran.
pool_registry& registry() {
    static auto* r = new pool_registry;
    return *r;
}

// Collects remote frees of retired pools and removes the ones that are empty. Called with the
// registry lock held, which is what makes the registry the single owner of retired pools.
std::vector<pool*> take_empty_retired(pool_registry& r) {
    std::vector<pool*> empty;
    std::erase_if(r.retired, [&](pool* p) {
        p->collect_remote_frees();
        if (p->live_blocks() != 0) return false;
        empty.push_back(p);
        return true;
    });
    return empty;
}

void retire(pool* p) noexcept {
    p->collect_remote_frees();
    pool_registry& r = registry();
    std::vector<pool*> doomed;
    {
        std::lock_guard lock(r.mutex);
        std::erase(r.active, p);
        // A block still out keeps its pool alive: its free will push onto this pool's list.
        if (p->live_blocks() == 0) {
            doomed.push_back(p);
        } else {
            r.retired.push_back(p);
        }
        auto empty = take_empty_retired(r);
        doomed.insert(doomed.end(), empty.begin(), empty.end());
    }
    // Outside the lock: destroying announces the slabs to release listeners.
    for (pool* d : doomed)
        delete d;
}

// Retires the thread's pool when the thread exits. Separate from tls_pool so that the
// allocation fast path reads a trivially initialised pointer.
struct thread_exit_hook {
    bool armed = false;
    ~thread_exit_hook() {
        tls_no_pool = true;
        if (pool* p = std::exchange(tls_pool, nullptr)) retire(p);
    }
};
thread_local thread_exit_hook tls_exit_hook;

}  // namespace

pool* local_pool_slow() noexcept {
    if (tls_no_pool) return nullptr;
    const alloc_config config = current_config();
    if (!config.pool_enabled) {
        tls_no_pool = true;
        return nullptr;
    }
    pool_registry& r = registry();
    std::vector<pool*> doomed;
    pool* p = nullptr;
    {
        std::lock_guard lock(r.mutex);
        p = new (std::nothrow) pool(config, r.next_serial++, static_cast<long>(::gettid()));
        if (p == nullptr) return nullptr;
        r.active.push_back(p);
        // Creating a pool is rare and already locked: a good time to reclaim retired ones.
        doomed = take_empty_retired(r);
    }
    for (pool* d : doomed)
        delete d;
    tls_exit_hook.armed = true;  // odr-use registers the hook's destructor for this thread
    tls_pool = p;
    return p;
}

void bucket::take_back(void* storage, std::size_t) noexcept {
    auto* chunk = static_cast<chunk_header*>(storage);
    poison(chunk->user(), _capacity);
    if (_pool == tls_pool) [[likely]] {
        put(chunk);
    } else {
        _pool->push_remote(chunk);
    }
}

bool bucket::grow(std::size_t entries) noexcept {
    if (entries == 0) return true;
    const std::size_t bytes = entries * stride();
    // 64-byte aligned slabs keep each header's first field at the start of a cache line for
    // the 1 KiB bucket onwards (stride is a multiple of 32).
    auto* base = static_cast<std::byte*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64));
    if (base == nullptr) return false;
    try {
        _slabs.push_back(slab{base, entries});
    } catch (const std::bad_alloc&) {
        std::free(base);
        return false;
    }
    _carve = base;
    _carve_left = entries;
    _entries += entries;
    carve();
    return true;
}

void bucket::carve() noexcept {
    // About 16 KiB at a time. Writing every entry's header when the slab is made faulted in
    // a PE's whole preallocation (128 entries in each of five buckets, ~2 MB of pages, 4 ms
    // of a 256-PE start-up's CPU per PE) for memory most PEs never use.
    constexpr std::size_t batch_bytes = 16 * 1024;
    const std::size_t n = std::min(_carve_left, std::max<std::size_t>(1, batch_bytes / stride()));
    // Link back to front so the free list hands entries out in address order.
    for (std::size_t i = n; i-- > 0;) {
        auto* chunk = new (_carve + i * stride()) chunk_header(0, this, nullptr, canary_freed);
        chunk->next_free = _free;
        _free = chunk;
        poison(chunk->user(), _capacity);
    }
    _carve += n * stride();
    _carve_left -= n;
}

pool::pool(const alloc_config& config, std::uint64_t serial, long thread_id)
    : _grow(std::max<std::size_t>(config.pool_grow, 1)), _serial(serial), _thread_id(thread_id) {
    for (std::size_t i = 0; i < pool_bucket_count; ++i) {
        _buckets[i]._pool = this;
        _buckets[i]._capacity = pool_bucket_capacity(i);
        // A failed preallocation is retried by refill when the bucket is first used.
        (void)_buckets[i].grow(config.pool_preallocate);
    }
}

pool::~pool() {
    for (bucket& b : _buckets) {
        for (const slab& s : b._slabs) {
            const std::size_t bytes = s.entries * b.stride();
            unpoison(s.base, bytes);
            // Registrations of pooled memory stay valid while the pool lives; only now do
            // the pages go back, so only now may a registration cache forget them.
            announce_release(s.base, bytes);
            std::free(s.base);
        }
    }
}

chunk_header* pool::refill(bucket& b) noexcept {
    collect_remote_frees();
    if (b._free == nullptr && b._carve_left > 0) b.carve();
    if (b._free == nullptr && !b.grow(_grow)) return nullptr;
    return b._free;
}

void pool::push_remote(chunk_header* chunk) noexcept {
    // Treiber push. The owner only ever takes the whole list (exchange), never pops one node,
    // so a node's `next` can never be read after the node was reused: no ABA.
    chunk_header* head = _remote_frees.load(std::memory_order_relaxed);
    do {
        chunk->next_free = head;
    } while (!_remote_frees.compare_exchange_weak(head, chunk, std::memory_order_release,
                                                  std::memory_order_relaxed));
    // Nothing after the exchange may touch the pool: once the owner collects this block, a
    // retiring pool with no live block left may be destroyed.
}

void pool::collect_remote_frees() noexcept {
    // Acquire pairs with the pushers' release: their header writes are visible here.
    chunk_header* chunk = _remote_frees.exchange(nullptr, std::memory_order_acquire);
    while (chunk != nullptr) {
        chunk_header* next = chunk->next_free;
        static_cast<bucket*>(chunk->owner)->put(chunk);
        ++_remote_collected;
        chunk = next;
    }
}

std::size_t pool::live_blocks() const noexcept {
    std::size_t n = 0;
    for (const bucket& b : _buckets)
        n += b._live_blocks;
    return n;
}

pool_stats pool::stats() const noexcept {
    pool_stats s;
    s.exists = true;
    s.serial = _serial;
    s.remote_frees = _remote_collected;
    for (std::size_t i = 0; i < pool_bucket_count; ++i) {
        const bucket& b = _buckets[i];
        s.buckets[i] =
            bucket_stats{b._capacity, b._live_blocks, b._live_bytes, b._entries, b._slabs.size()};
    }
    return s;
}

void pool::for_each_live(const std::function<void(chunk_header&, std::size_t)>& visit) const {
    for (std::size_t i = 0; i < pool_bucket_count; ++i) {
        const bucket& b = _buckets[i];
        for (const slab& s : b._slabs) {
            // The newest slab's last entries are not carved yet: never written, never live.
            const std::size_t carved =
                &s == &b._slabs.back() ? s.entries - b._carve_left : s.entries;
            for (std::size_t e = 0; e < carved; ++e) {
                auto* chunk = reinterpret_cast<chunk_header*>(s.base + e * b.stride());
                if (chunk->live()) visit(*chunk, i);
            }
        }
    }
}

void for_each_live_pool_block(const std::function<void(const live_block&)>& visit) {
    pool_registry& r = registry();
    std::lock_guard lock(r.mutex);
    for (const auto* list : {&r.active, &r.retired}) {
        for (pool* p : *list) {
            p->for_each_live([&](chunk_header& chunk, std::size_t index) {
                visit(live_block{&chunk, "pool", p->serial(), p->thread_id(),
                                 pool_bucket_capacity(index)});
            });
        }
    }
}

}  // namespace detail

std::size_t pool_stats::live_blocks() const noexcept {
    std::size_t n = 0;
    for (const bucket_stats& b : buckets)
        n += b.live_blocks;
    return n;
}

std::size_t pool_stats::live_bytes() const noexcept {
    std::size_t n = 0;
    for (const bucket_stats& b : buckets)
        n += b.live_bytes;
    return n;
}

pool_stats thread_pool_stats() {
    detail::pool* p = detail::tls_pool;
    if (p == nullptr) return pool_stats{};
    p->collect_remote_frees();
    return p->stats();
}

void release_thread_pool() {
    detail::tls_no_pool = false;  // the next allocation decides again from the settings
    if (detail::pool* p = std::exchange(detail::tls_pool, nullptr)) detail::retire(p);
}

std::size_t reclaim_retired_pools() {
    detail::pool_registry& r = detail::registry();
    std::vector<detail::pool*> doomed;
    std::size_t remaining = 0;
    {
        std::lock_guard lock(r.mutex);
        doomed = detail::take_empty_retired(r);
        remaining = r.retired.size();
    }
    for (detail::pool* d : doomed)
        delete d;
    return remaining;
}

}  // namespace coverse::alloc
