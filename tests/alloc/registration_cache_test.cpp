// The registration cache, every test with the cache on and off (COVERSE_RCACHE=0): hits inside
// a cached range, overlapping requests registered as a union, LRU eviction past the count and
// byte limits, in-use entries never evicted, and entries dropped when their memory is released
// — above all, no stale registration after the same address is reused.
#include <coverse/alloc/message.hpp>
#include <coverse/alloc/registration_cache.hpp>

#include "alloc_test_support.hpp"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace coverse::alloc {
namespace {

using test::arena_owner;
using test::id_registrar;
using test::pool_config;
using test::scoped_config;

using cache = registration_cache<id_registrar>;

// A provider that pins nothing (cma): the registration is the address itself.
struct address_registrar {
    struct registration {
        const std::byte* address = nullptr;
    };
    std::error_code register_memory(std::byte* address, std::size_t, registration& out) {
        out.address = address;
        return {};
    }
    void deregister_memory(registration&) noexcept {}
};
static_assert(registrar<id_registrar>);
static_assert(registrar<address_registrar>);

// Addresses the registrar never dereferences, so tests can use any numbers.
const std::byte* at(std::uintptr_t address) {
    return reinterpret_cast<const std::byte*>(address);
}

class rcache : public testing::TestWithParam<bool> {
protected:
    bool on() const { return GetParam(); }
    rcache_config config(std::size_t max_entries = 64, std::size_t max_bytes = 1 << 30) const {
        return rcache_config{GetParam(), max_entries, max_bytes};
    }
    std::uint64_t id_of(cache& c, const void* address, std::size_t length) {
        cache::handle h;
        EXPECT_FALSE(c.acquire(address, length, h));
        return h ? h.get().id : 0;
    }
    id_registrar _registrar;
};

INSTANTIATE_TEST_SUITE_P(rcache, rcache, testing::Bool(),
                         [](const testing::TestParamInfo<bool>& p) {
                             return p.param ? "on" : "off";
                         });

TEST_P(rcache, a_lookup_inside_a_cached_range_hits) {
    cache c(_registrar, config());
    const std::uint64_t whole = id_of(c, at(0x10000), 4096);
    cache::handle inner;
    ASSERT_FALSE(c.acquire(at(0x10100), 200, inner));
    EXPECT_LE(inner.address(), at(0x10100));
    EXPECT_GE(inner.address() + inner.length(), at(0x10100 + 200));
    if (on()) {
        EXPECT_EQ(inner.get().id, whole);
        EXPECT_EQ(c.stats().hits, 1u);
        EXPECT_EQ(_registrar.last_id, 1u);
    } else {
        EXPECT_NE(inner.get().id, whole);
        EXPECT_EQ(c.stats().hits, 0u);
        EXPECT_EQ(_registrar.last_id, 2u);
    }
    inner.reset();
    EXPECT_EQ(_registrar.live.size(), on() ? 1u : 0u) << "off: released means deregistered";
}

TEST_P(rcache, a_lookup_past_the_end_of_a_cached_range_misses) {
    cache c(_registrar, config());
    const std::uint64_t first = id_of(c, at(0x10000), 4096);
    EXPECT_NE(id_of(c, at(0x20000), 16), first);
    EXPECT_EQ(c.stats().hits, 0u);
    EXPECT_EQ(c.stats().misses, 2u);
}

TEST_P(rcache, an_overlapping_request_is_registered_as_the_union) {
    cache c(_registrar, config());
    (void)id_of(c, at(0x10000), 0x1000);  // [0x10000, 0x11000)
    (void)id_of(c, at(0x12000), 0x1000);  // [0x12000, 0x13000)
    cache::handle both;
    ASSERT_FALSE(c.acquire(at(0x10800), 0x2000, both));  // overlaps both
    if (on()) {
        EXPECT_EQ(both.address(), at(0x10000));
        EXPECT_EQ(both.length(), 0x3000u);
        EXPECT_EQ(c.stats().merges, 2u);
        EXPECT_EQ(c.stats().entries, 1u);
        EXPECT_EQ(_registrar.live.size(), 1u) << "the merged entries were deregistered";
        EXPECT_EQ(id_of(c, at(0x12f00), 0x100), both.get().id) << "the union now serves both";
    } else {
        EXPECT_EQ(both.address(), at(0x10800));
        EXPECT_EQ(both.length(), 0x2000u);
    }
}

TEST_P(rcache, a_merge_keeps_an_in_use_entry_registered_until_released) {
    cache c(_registrar, config());
    cache::handle old;
    ASSERT_FALSE(c.acquire(at(0x10000), 0x1000, old));
    const std::uint64_t old_id = old.get().id;
    cache::handle merged;
    ASSERT_FALSE(c.acquire(at(0x10800), 0x1000, merged));
    EXPECT_TRUE(_registrar.live.contains(old_id)) << "a user still holds it";
    EXPECT_EQ(old.get().id, old_id);
    old.reset();
    EXPECT_FALSE(_registrar.live.contains(old_id));
    EXPECT_EQ(c.stats().entries, on() ? 1u : 0u);
}

TEST_P(rcache, the_least_recently_used_entry_goes_past_the_count_limit) {
    cache c(_registrar, config(2));
    const std::uint64_t a = id_of(c, at(0x10000), 64);
    const std::uint64_t b = id_of(c, at(0x20000), 64);
    const std::uint64_t a_again = id_of(c, at(0x10000), 64);  // a is now the most recent
    if (on()) {
        EXPECT_EQ(a_again, a);
    }
    (void)id_of(c, at(0x30000), 64);  // evicts b, the least recently used
    if (on()) {
        EXPECT_EQ(c.stats().evictions, 1u);
        EXPECT_EQ(c.stats().entries, 2u);
        EXPECT_EQ(id_of(c, at(0x10000), 64), a) << "a survived";
        EXPECT_NE(id_of(c, at(0x20000), 64), b) << "b was evicted";
    } else {
        EXPECT_EQ(c.stats().entries, 0u);
        EXPECT_TRUE(_registrar.live.empty());
    }
}

TEST_P(rcache, unused_entries_go_past_the_byte_limit) {
    cache c(_registrar, config(64, 8192));
    for (std::uintptr_t i = 0; i < 4; ++i)
        (void)id_of(c, at(0x100000 + i * 0x10000), 4096);
    EXPECT_LE(c.stats().bytes, 8192u);
    EXPECT_EQ(c.stats().evictions, on() ? 2u : 0u);
    EXPECT_EQ(_registrar.live.size(), on() ? 2u : 0u);
}

TEST_P(rcache, entries_in_use_are_never_evicted) {
    cache c(_registrar, config(1, 4096));
    std::vector<cache::handle> held(4);
    for (std::uintptr_t i = 0; i < held.size(); ++i) {
        ASSERT_FALSE(c.acquire(at(0x100000 + i * 0x10000), 4096, held[i]));
    }
    EXPECT_EQ(c.stats().evictions, 0u);
    EXPECT_EQ(_registrar.live.size(), 4u);
    EXPECT_EQ(c.stats().in_use, 4u);
    if (on()) {
        EXPECT_EQ(c.stats().entries, 4u) << "over the limit while all are in use";
    }
    held.clear();
    EXPECT_EQ(c.stats().entries, on() ? 1u : 0u)
        << "released entries are evicted down to the limit";
    EXPECT_EQ(c.stats().in_use, 0u);
}

// The classic corruption bug: memory registered, freed, and the same address handed out again
// backed by other pages. The cache must not return the first registration.
TEST_P(rcache, no_stale_registration_after_an_owner_gives_memory_back_and_reuses_the_address) {
    cache c(_registrar, config());
    arena_owner owner(/*announce=*/true);
    void* first = owner.place(1000);
    const std::uint64_t first_id = id_of(c, first, 1000);
    msg_free(first);  // the owner gives the storage back and announces it
    void* second = owner.place(1000);
    ASSERT_EQ(second, first) << "the test needs the same address again";
    const std::uint64_t second_id = id_of(c, second, 1000);
    EXPECT_NE(second_id, first_id);
    EXPECT_FALSE(_registrar.live.contains(first_id));
    if (on()) {
        EXPECT_EQ(c.stats().invalidations, 1u);
    }
    msg_free(second);
}

TEST_P(rcache, a_large_message_freed_to_the_system_drops_its_entries) {
    alloc_config no_large_cache = pool_config(true, 2, 2);
    no_large_cache.large_cache_bytes = 0;  // the block really goes back to malloc
    scoped_config pool(no_large_cache);
    cache c(_registrar, config());
    void* m = msg_alloc(64 * 1024);
    const std::uint64_t first_id = id_of(c, m, 64 * 1024);
    EXPECT_EQ(c.stats().entries, on() ? 1u : 0u);
    msg_free(m);
    EXPECT_EQ(c.stats().entries, 0u);
    EXPECT_TRUE(_registrar.live.empty());
    // Whether or not malloc hands out the same address again, the old range is unknown now.
    void* again = msg_alloc(64 * 1024);
    EXPECT_NE(id_of(c, m, 64 * 1024), first_id);
    EXPECT_NE(id_of(c, again, 64 * 1024), first_id);
    msg_free(again);
}

// A large message freed into the large-block cache stays ours, like pooled memory: its
// registration stays valid and the recycled block hits it. Only when the cache is full does
// the block go back to malloc, and then its entries go (the test above).
TEST_P(rcache, a_large_block_kept_for_reuse_keeps_its_registration) {
    scoped_config pool(pool_config(true, 2, 2));  // LARGE_CACHE at its default
    cache c(_registrar, config());
    void* m = msg_alloc(64 * 1024);
    const std::uint64_t first_id = id_of(c, m, 64 * 1024);
    msg_free(m);
    void* again = msg_alloc(64 * 1024);
    ASSERT_EQ(again, m);  // the same block, from the cache
    EXPECT_EQ(c.stats().invalidations, 0u);
    if (on()) {
        EXPECT_EQ(id_of(c, again, 64 * 1024), first_id);
    }
    msg_free(again);
}

// Pooled memory never leaves the pool, so its pages stay the same and its registration stays
// valid: re-registering every recycled block would defeat "pooled memory is registered once".
TEST_P(rcache, a_recycled_pool_block_keeps_its_registration_until_the_pool_goes) {
    scoped_config pool(pool_config(true, 2, 2));
    cache c(_registrar, config());
    void* m = msg_alloc(1000);
    const std::uint64_t first_id = id_of(c, m, 1000);
    msg_free(m);
    void* again = msg_alloc(1000);
    ASSERT_EQ(again, m);
    EXPECT_EQ(id_of(c, again, 1000) == first_id, on());
    msg_free(again);
    release_thread_pool();  // the slabs go back to the system now
    EXPECT_EQ(c.stats().entries, 0u);
    EXPECT_TRUE(_registrar.live.empty());
}

TEST_P(rcache, invalidating_an_entry_in_use_deregisters_it_on_release) {
    cache c(_registrar, config());
    cache::handle h;
    ASSERT_FALSE(c.acquire(at(0x10000), 4096, h));
    const std::uint64_t id = h.get().id;
    c.invalidate(at(0x10800), 16);
    EXPECT_EQ(c.stats().entries, 0u);
    EXPECT_TRUE(_registrar.live.contains(id));
    EXPECT_NE(id_of(c, at(0x10000), 4096), id) << "a later lookup registers anew";
    h.reset();
    EXPECT_FALSE(_registrar.live.contains(id));
}

TEST_P(rcache, a_registrar_failure_is_returned_as_a_value) {
    cache c(_registrar, config());
    _registrar.fail_next = 1;
    cache::handle h;
    EXPECT_EQ(c.acquire(at(0x10000), 64, h), std::errc::not_enough_memory);
    EXPECT_FALSE(h);
    EXPECT_EQ(c.stats().entries, 0u);
    EXPECT_EQ(c.acquire(at(0x10000), 0, h), std::errc::invalid_argument);
}

TEST_P(rcache, a_failed_registration_is_retried_after_giving_back_unused_entries) {
    cache c(_registrar, config());
    (void)id_of(c, at(0x10000), 64);
    _registrar.fail_next = 1;
    cache::handle h;
    const std::error_code ec = c.acquire(at(0x20000), 64, h);
    if (on()) {
        EXPECT_FALSE(ec) << "retried once with the unused entry evicted";
        EXPECT_EQ(c.stats().evictions, 1u);
    } else {
        EXPECT_EQ(ec, std::errc::not_enough_memory) << "nothing cached to give back";
    }
}

TEST_P(rcache, handles_move_and_the_cache_deregisters_everything_when_destroyed) {
    {
        cache c(_registrar, config());
        cache::handle a;
        ASSERT_FALSE(c.acquire(at(0x10000), 64, a));
        cache::handle b = std::move(a);
        EXPECT_FALSE(a);
        EXPECT_TRUE(b);
        a = std::move(b);
        EXPECT_EQ(c.stats().in_use, 1u);
    }
    EXPECT_TRUE(_registrar.live.empty());
}

TEST_P(rcache, frees_on_other_threads_invalidate_while_this_one_looks_up) {
    scoped_config pool(pool_config(true, 2, 2));
    cache c(_registrar, config());
    std::vector<void*> blocks;
    for (int i = 0; i < 64; ++i) {
        void* m = msg_alloc(20000);
        (void)id_of(c, m, 20000);
        blocks.push_back(m);
    }
    std::thread freer([&] {
        for (void* m : blocks)
            msg_free(m);
    });
    for (int i = 0; i < 2000; ++i)
        (void)id_of(c, at(0x10000 + (i % 7) * 0x1000), 64);
    freer.join();
    for (void* m : blocks) {
        cache::handle h;
        ASSERT_FALSE(c.acquire(m, 20000, h));
        EXPECT_GT(h.get().id, 64u) << "a freed block's registration was handed back";
    }
}

TEST(rcache_providers, a_provider_that_pins_nothing_fits_the_same_cache) {
    address_registrar provider;
    registration_cache<address_registrar> c(provider, rcache_config{true, 8, 1 << 20});
    registration_cache<address_registrar>::handle h;
    ASSERT_FALSE(c.acquire(at(0x10000), 64, h));
    EXPECT_EQ(h.get().address, at(0x10000));
}

}  // namespace
}  // namespace coverse::alloc
