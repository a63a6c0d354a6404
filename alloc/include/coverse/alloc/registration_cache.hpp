// Registration cache: remembers which [address, length) ranges a provider has registered
// (a verbs memory region; cma, which pins nothing; a test registrar) so a buffer sent again is
// registered once. Entries are disjoint: a request overlapping cached entries is registered as
// their union, which replaces them. Unused entries are evicted least recently used first past
// a count or byte limit; entries in use never are. Memory the alloc layer gives back drops its
// entries before the address can be reused.
#pragma once

#include <coverse/alloc/memory_release.hpp>

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <system_error>
#include <utility>

namespace coverse::alloc {

/// What the cache needs from a provider. `registration` is whatever the provider hands out
/// (a verbs MR with its keys, a plain address for cma).
template <class R>
concept registrar = requires(R& r, std::byte* address, std::size_t length,
                             typename R::registration& out) {
    { r.register_memory(address, length, out) } -> std::same_as<std::error_code>;
    { r.deregister_memory(out) }
    noexcept;
};

/// Limits and the on/off switch.
struct rcache_config {
    /// COVERSE_RCACHE: off registers every request anew and deregisters it on release.
    bool enabled = true;
    /// COVERSE_RCACHE_MAX_ENTRIES / COVERSE_RCACHE_MAX_BYTES: past either, unused entries are
    /// evicted. In-use entries count too but are never evicted, so the cache may exceed a limit
    /// while everything in it is in use.
    std::size_t max_entries = 4096;
    std::size_t max_bytes = std::size_t{1} << 30;

    /// Reads the settings above (any spelling env_setting accepts); bad values are reported.
    static rcache_config from_environment();
};

/// Counters of one cache.
struct rcache_stats {
    std::size_t hits = 0;
    std::size_t misses = 0;
    std::size_t merges = 0;  ///< cached entries replaced by a union registration
    std::size_t evictions = 0;
    std::size_t invalidations = 0;  ///< entries dropped because their memory was released
    std::size_t registrations = 0;
    std::size_t deregistrations = 0;
    std::size_t entries = 0;  ///< cached now (in use or not)
    std::size_t bytes = 0;    ///< bytes covered by cached entries
    std::size_t in_use = 0;   ///< live handles
};

/// A registration cache over `Registrar`. Thread-safe: lookups come from the owning PE, but
/// invalidations arrive from whichever thread frees memory. Must outlive its handles.
template <registrar Registrar>
class registration_cache final : private release_listener {
    struct entry;

public:
    using registration = typename Registrar::registration;

    /// One use of a registration; releases it when destroyed. Move-only.
    class handle {
    public:
        handle() noexcept = default;
        handle(handle&& other) noexcept
            : _cache(std::exchange(other._cache, nullptr)),
              _entry(std::exchange(other._entry, nullptr)) {}
        handle& operator=(handle&& other) noexcept {
            if (this != &other) {
                reset();
                _cache = std::exchange(other._cache, nullptr);
                _entry = std::exchange(other._entry, nullptr);
            }
            return *this;
        }
        handle(const handle&) = delete;
        handle& operator=(const handle&) = delete;
        ~handle() { reset(); }

        explicit operator bool() const noexcept { return _entry != nullptr; }
        /// The provider's registration, covering at least the requested range.
        const registration& get() const noexcept { return _entry->reg; }
        /// The registered range, which may be larger than the request (a union).
        const std::byte* address() const noexcept {
            return reinterpret_cast<const std::byte*>(_entry->begin);
        }
        std::size_t length() const noexcept { return _entry->end - _entry->begin; }

        void reset() noexcept {
            if (_entry != nullptr) _cache->release(_entry);
            _cache = nullptr;
            _entry = nullptr;
        }

    private:
        friend class registration_cache;
        handle(registration_cache* cache, entry* e) noexcept : _cache(cache), _entry(e) {}

        registration_cache* _cache = nullptr;
        entry* _entry = nullptr;
    };

    explicit registration_cache(Registrar& registrar,
                                rcache_config config = rcache_config::from_environment())
        : _registrar(registrar), _config(config) {
        add_release_listener(*this);
    }

    registration_cache(const registration_cache&) = delete;
    registration_cache& operator=(const registration_cache&) = delete;

    ~registration_cache() {
        remove_release_listener(*this);
        std::lock_guard lock(_mutex);
        if (_stats.in_use != 0) {
            // A handle outliving the cache would release into freed memory later.
            std::fprintf(stderr,
                         "coverse alloc: registration_cache destroyed with %zu registrations "
                         "still in use; release every handle before destroying the cache\n",
                         _stats.in_use);
            std::abort();
        }
        for (auto& [begin, e] : _entries)
            destroy(e);
        _entries.clear();
    }

    bool enabled() const noexcept { return _config.enabled; }

    /// A registration covering [address, address + length): a cached one that contains it, or
    /// a new one. On failure `out` is empty and the provider's error is returned.
    std::error_code acquire(const void* address, std::size_t length, handle& out) {
        out.reset();
        if (length == 0) return std::make_error_code(std::errc::invalid_argument);
        const auto begin = reinterpret_cast<std::uintptr_t>(address);
        const std::uintptr_t end = begin + length;
        std::lock_guard lock(_mutex);
        if (!_config.enabled) {
            ++_stats.misses;
            entry* e = nullptr;
            if (auto ec = register_range(begin, end, e)) return ec;
            ++e->users;
            ++_stats.in_use;
            out = handle(this, e);
            return {};
        }
        if (entry* e = find_containing(begin, end)) {
            ++_stats.hits;
            if (e->users++ == 0) lru_unlink(e);
            ++_stats.in_use;
            out = handle(this, e);
            return {};
        }
        ++_stats.misses;
        // The union of the request and every cached entry it overlaps: entries stay disjoint,
        // so a lookup is one ordered-map search, and the next request for any of them hits.
        std::uintptr_t union_begin = begin;
        std::uintptr_t union_end = end;
        auto first = first_overlapping(begin, end);
        auto last = first;
        for (; last != _entries.end() && last->first < end; ++last) {
            union_begin = std::min(union_begin, last->second->begin);
            union_end = std::max(union_end, last->second->end);
        }
        entry* fresh = nullptr;
        std::error_code ec = register_range(union_begin, union_end, fresh);
        if (ec && evict_unused_all()) {
            // The provider may be short of pinnable memory (RLIMIT_MEMLOCK): retry once with
            // every unused registration given back. The overlapping set may have shrunk.
            first = first_overlapping(begin, end);
            last = first;
            union_begin = begin;
            union_end = end;
            for (; last != _entries.end() && last->first < end; ++last) {
                union_begin = std::min(union_begin, last->second->begin);
                union_end = std::max(union_end, last->second->end);
            }
            ec = register_range(union_begin, union_end, fresh);
        }
        if (ec) return ec;
        while (first != last) {
            ++_stats.merges;
            first = detach(first);
        }
        fresh->cached = true;
        fresh->users = 1;
        ++_stats.in_use;
        _entries.emplace(fresh->begin, fresh);
        ++_stats.entries;
        _stats.bytes += fresh->end - fresh->begin;
        evict_over_limit();
        out = handle(this, fresh);
        return {};
    }

    /// Drops every entry overlapping [address, address + length): its memory is going away.
    /// Entries in use leave the cache now and are deregistered when their last handle goes.
    void invalidate(const void* address, std::size_t length) noexcept {
        if (length == 0) return;
        const auto begin = reinterpret_cast<std::uintptr_t>(address);
        const std::uintptr_t end = begin + length;
        std::lock_guard lock(_mutex);
        for (auto it = first_overlapping(begin, end); it != _entries.end() && it->first < end;) {
            ++_stats.invalidations;
            it = detach(it);
        }
    }

    rcache_stats stats() const {
        std::lock_guard lock(_mutex);
        return _stats;
    }

    /// Deregisters every cached entry nobody uses (a provider shutting down, before the
    /// registrar it calls goes away).
    void release_unused() noexcept {
        std::lock_guard lock(_mutex);
        evict_unused_all();
    }

private:
    struct entry {
        std::uintptr_t begin = 0;
        std::uintptr_t end = 0;
        registration reg{};
        std::size_t users = 0;
        bool cached = false;  // in _entries; otherwise it dies with its last user
        entry* lru_prev = nullptr;
        entry* lru_next = nullptr;
    };
    using entry_map = std::map<std::uintptr_t, entry*>;

    void on_memory_released(const void* address, std::size_t length) noexcept override {
        invalidate(address, length);
    }

    std::error_code register_range(std::uintptr_t begin, std::uintptr_t end, entry*& out) {
        auto* e = new entry;
        e->begin = begin;
        e->end = end;
        if (auto ec = _registrar.register_memory(reinterpret_cast<std::byte*>(begin), end - begin,
                                                 e->reg)) {
            delete e;
            return ec;
        }
        ++_stats.registrations;
        out = e;
        return {};
    }

    void destroy(entry* e) noexcept {
        _registrar.deregister_memory(e->reg);
        ++_stats.deregistrations;
        delete e;
    }

    // The cached entry containing [begin, end), if any. Entries are disjoint, so only the last
    // one starting at or before `begin` can.
    entry* find_containing(std::uintptr_t begin, std::uintptr_t end) const {
        auto it = _entries.upper_bound(begin);
        if (it == _entries.begin()) return nullptr;
        entry* e = std::prev(it)->second;
        return e->end >= end ? e : nullptr;
    }

    typename entry_map::iterator first_overlapping(std::uintptr_t begin, std::uintptr_t) {
        auto it = _entries.upper_bound(begin);
        if (it != _entries.begin() && std::prev(it)->second->end > begin) --it;
        return it;
    }

    // Takes an entry out of the cache; an unused one is deregistered now.
    typename entry_map::iterator detach(typename entry_map::iterator it) noexcept {
        entry* e = it->second;
        --_stats.entries;
        _stats.bytes -= e->end - e->begin;
        e->cached = false;
        if (e->users == 0) {
            lru_unlink(e);
            destroy(e);
        }
        return _entries.erase(it);
    }

    void release(entry* e) noexcept {
        std::lock_guard lock(_mutex);
        --_stats.in_use;
        if (--e->users != 0) return;
        if (!e->cached) {
            destroy(e);
            return;
        }
        lru_push_front(e);
        evict_over_limit();
    }

    bool over_limit() const noexcept {
        return _stats.entries > _config.max_entries || _stats.bytes > _config.max_bytes;
    }

    void evict_over_limit() noexcept {
        while (over_limit() && _lru_tail != nullptr)
            evict(_lru_tail);
    }

    bool evict_unused_all() noexcept {
        const bool any = _lru_tail != nullptr;
        while (_lru_tail != nullptr)
            evict(_lru_tail);
        return any;
    }

    void evict(entry* e) noexcept {
        ++_stats.evictions;
        detach(_entries.find(e->begin));
    }

    // The LRU list holds exactly the cached entries with no user, most recently used first.
    void lru_push_front(entry* e) noexcept {
        e->lru_prev = nullptr;
        e->lru_next = _lru_head;
        if (_lru_head != nullptr) _lru_head->lru_prev = e;
        _lru_head = e;
        if (_lru_tail == nullptr) _lru_tail = e;
    }

    void lru_unlink(entry* e) noexcept {
        (e->lru_prev != nullptr ? e->lru_prev->lru_next : _lru_head) = e->lru_next;
        (e->lru_next != nullptr ? e->lru_next->lru_prev : _lru_tail) = e->lru_prev;
        e->lru_prev = e->lru_next = nullptr;
    }

    Registrar& _registrar;
    const rcache_config _config;
    mutable std::mutex _mutex;
    entry_map _entries;
    entry* _lru_head = nullptr;
    entry* _lru_tail = nullptr;
    rcache_stats _stats;
};

}  // namespace coverse::alloc
