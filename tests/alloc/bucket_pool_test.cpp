// The bucket pool: size classes, preallocation and growth, large requests to the system, the
// pool switch, per-bucket and per-owner accounting, retiring a pool with live blocks.
#include <coverse/alloc/bucket_pool.hpp>
#include <coverse/alloc/message.hpp>

#include "alloc_test_support.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <string_view>
#include <vector>

namespace coverse::alloc {
namespace {

using test::pool_config;
using test::scoped_config;

static_assert(pool_bucket_index(0) == 0);
static_assert(pool_bucket_index(1024) == 0);
static_assert(pool_bucket_index(1025) == 1);
static_assert(pool_bucket_index(2048) == 1);
static_assert(pool_bucket_index(2049) == 2);
static_assert(pool_bucket_index(8192) == 3);
static_assert(pool_bucket_index(16384) == 4);
static_assert(pool_bucket_index(16385) == pool_bucket_count);
static_assert(pool_bucket_capacity(4) == 16384);

std::string_view owner_of(const void* msg) {
    return msg_owner(msg).name();
}

TEST(bucket_pool, each_bucket_preallocates_128_entries_by_default) {
    scoped_config config(pool_config(true));
    void* msg = msg_alloc(10);
    const pool_stats s = thread_pool_stats();
    ASSERT_TRUE(s.exists);
    for (std::size_t i = 0; i < pool_bucket_count; ++i) {
        EXPECT_EQ(s.buckets[i].capacity, pool_bucket_capacity(i));
        EXPECT_EQ(s.buckets[i].entries, 128u) << "bucket " << i;
        EXPECT_EQ(s.buckets[i].slabs, 1u);
    }
    msg_free(msg);
}

TEST(bucket_pool, a_bucket_grows_by_the_grow_count_when_empty) {
    scoped_config config(pool_config(true, 4, 3));
    std::vector<void*> held;
    for (int i = 0; i < 4; ++i)
        held.push_back(msg_alloc(2000));
    EXPECT_EQ(thread_pool_stats().buckets[1].entries, 4u);
    held.push_back(msg_alloc(2000));
    EXPECT_EQ(thread_pool_stats().buckets[1].entries, 7u);
    EXPECT_EQ(thread_pool_stats().buckets[1].slabs, 2u);
    for (int i = 0; i < 3; ++i)
        held.push_back(msg_alloc(1500));
    EXPECT_EQ(thread_pool_stats().buckets[1].entries, 10u);
    EXPECT_EQ(thread_pool_stats().buckets[0].entries, 4u) << "other buckets are untouched";
    for (void* m : held)
        msg_free(m);
    EXPECT_EQ(thread_pool_stats().buckets[1].live_blocks, 0u);
}

TEST(bucket_pool, preallocate_zero_grows_on_first_use) {
    scoped_config config(pool_config(true, 0, 2));
    EXPECT_EQ(thread_pool_stats().exists, false);
    void* msg = msg_alloc(100);
    EXPECT_EQ(thread_pool_stats().buckets[0].entries, 2u);
    EXPECT_EQ(thread_pool_stats().buckets[4].entries, 0u);
    msg_free(msg);
}

TEST(bucket_pool, sizes_up_to_16_kib_come_from_the_pool_larger_from_the_system) {
    scoped_config config(pool_config(true, 2, 2));
    const system_stats before = system_allocation_stats();
    void* small = msg_alloc(16384);
    void* large = msg_alloc(16385);
    EXPECT_EQ(owner_of(small), "pool");
    EXPECT_EQ(owner_of(large), "system");
    EXPECT_EQ(thread_pool_stats().buckets[4].live_blocks, 1u);
    EXPECT_EQ(system_allocation_stats().live_blocks, before.live_blocks + 1);
    EXPECT_EQ(system_allocation_stats().live_bytes, before.live_bytes + 16385);
    msg_free(small);
    msg_free(large);
    EXPECT_EQ(system_allocation_stats().live_blocks, before.live_blocks);
}

TEST(bucket_pool, pool_off_sends_every_size_to_the_system) {
    scoped_config config(pool_config(false));
    void* msg = msg_alloc(64);
    EXPECT_EQ(owner_of(msg), "system");
    EXPECT_FALSE(thread_pool_stats().exists);
    msg_free(msg);
}

TEST(bucket_pool, live_blocks_and_bytes_per_bucket) {
    scoped_config config(pool_config(true, 4, 4));
    void* a = msg_alloc(100);
    void* b = msg_alloc(1000);
    void* c = msg_alloc(3000);
    void* d = msg_alloc(9000);
    pool_stats s = thread_pool_stats();
    EXPECT_EQ(s.buckets[0].live_blocks, 2u);
    EXPECT_EQ(s.buckets[0].live_bytes, 1100u);
    EXPECT_EQ(s.buckets[2].live_blocks, 1u);
    EXPECT_EQ(s.buckets[2].live_bytes, 3000u);
    EXPECT_EQ(s.buckets[4].live_bytes, 9000u);
    EXPECT_EQ(s.live_blocks(), 4u);
    EXPECT_EQ(s.live_bytes(), 13100u);
    for (void* m : {a, b, c, d})
        msg_free(m);
    s = thread_pool_stats();
    EXPECT_EQ(s.live_blocks(), 0u);
    EXPECT_EQ(s.live_bytes(), 0u);
}

TEST(bucket_pool, a_freed_entry_is_reused_first) {
    scoped_config config(pool_config(true, 4, 4));
    void* a = msg_alloc(500);
    msg_free(a);
    void* b = msg_alloc(700);
    EXPECT_EQ(a, b);
    msg_free(b);
}

TEST(bucket_pool, entries_are_independent_and_fully_writable) {
    scoped_config config(pool_config(true, 8, 8));
    std::vector<void*> held;
    for (std::size_t i = 0; i < 8; ++i) {
        void* m = msg_alloc(1024);
        std::memset(m, static_cast<int>(i), 1024);
        held.push_back(m);
    }
    for (std::size_t i = 0; i < held.size(); ++i) {
        const auto* bytes = static_cast<const unsigned char*>(held[i]);
        EXPECT_EQ(bytes[0], i);
        EXPECT_EQ(bytes[1023], i) << "a neighbour's header overwrote the tail";
        EXPECT_EQ(msg_size(held[i]), 1024u);
    }
    for (void* m : held)
        msg_free(m);
}

TEST(bucket_pool, releasing_a_pool_with_live_blocks_retires_it_until_they_come_back) {
    scoped_config config(pool_config(true, 2, 2));
    void* msg = msg_alloc(100);
    const std::uint64_t first = thread_pool_stats().serial;
    release_thread_pool();
    EXPECT_GE(reclaim_retired_pools(), 1u);
    void* next = msg_alloc(100);  // a new pool for this thread
    EXPECT_NE(thread_pool_stats().serial, first);
    msg_free(msg);  // goes back to the retired pool
    EXPECT_EQ(reclaim_retired_pools(), 0u);
    msg_free(next);
}

TEST(bucket_pool, config_changes_apply_to_the_next_pool) {
    scoped_config config(pool_config(false));
    void* off = msg_alloc(10);
    EXPECT_EQ(owner_of(off), "system");
    set_config(pool_config(true, 1, 1));
    void* still_off = msg_alloc(10);
    EXPECT_EQ(owner_of(still_off), "system") << "a thread keeps its decision until released";
    release_thread_pool();
    void* on = msg_alloc(10);
    EXPECT_EQ(owner_of(on), "pool");
    for (void* m : {off, still_off, on})
        msg_free(m);
}

#if defined(__SANITIZE_ADDRESS__)
// Under ASan the pool poisons what the user must not touch, as malloc would.
TEST(bucket_pool_asan, writing_past_the_requested_size_inside_an_entry_is_caught) {
    scoped_config config(pool_config(true, 2, 2));
    EXPECT_DEATH(
        {
            auto* m = static_cast<char*>(msg_alloc(100));
            m[100] = 1;
        },
        "use-after-poison");
}

TEST(bucket_pool_asan, using_a_pool_entry_after_free_is_caught) {
    scoped_config config(pool_config(true, 2, 2));
    EXPECT_DEATH(
        {
            auto* m = static_cast<char*>(msg_alloc(100));
            msg_free(m);
            m[0] = 1;
        },
        "use-after-poison");
}
#endif

}  // namespace
}  // namespace coverse::alloc
