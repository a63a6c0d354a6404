// Message memory: size, reference counting, alignment and owners, with the pool on and off;
// owners that bring their own storage; references dropped on several threads at once.
#include <coverse/alloc/message.hpp>

#include "alloc_test_support.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <string_view>
#include <thread>
#include <vector>

namespace coverse::alloc {
namespace {

using test::arena_owner;
using test::pool_config;
using test::scoped_config;

// Every test runs with the pool on and with the pool off (MEMORY_POOL=0).
class message : public testing::TestWithParam<bool> {
protected:
    bool pool_on() const { return GetParam(); }
    scoped_config _config{pool_config(GetParam(), 4, 4)};
};

INSTANTIATE_TEST_SUITE_P(pool, message, testing::Bool(), [](const testing::TestParamInfo<bool>& p) {
    return p.param ? "on" : "off";
});

TEST_P(message, size_is_what_was_asked_for) {
    for (std::size_t size : {0, 1, 17, 1024, 1025, 4096, 16384, 16385, 100000}) {
        void* m = msg_alloc(size);
        ASSERT_NE(m, nullptr);
        EXPECT_EQ(msg_size(m), size);
        std::memset(m, 0xab, size);  // every byte is usable (ASan checks)
        msg_free(m);
    }
}

TEST_P(message, user_pointer_is_16_byte_aligned) {
    std::vector<void*> held;
    for (std::size_t size = 0; size < 20000; size += 997) {
        void* m = msg_alloc(size);
        EXPECT_EQ(reinterpret_cast<std::uintptr_t>(m) % 16, 0u) << "size " << size;
        held.push_back(m);
    }
    for (void* m : held)
        msg_free(m);
}

TEST_P(message, owner_is_the_pool_up_to_16_kib_when_it_is_on) {
    void* small = msg_alloc(100);
    void* large = msg_alloc(20000);
    EXPECT_EQ(std::string_view(msg_owner(small).name()), pool_on() ? "pool" : "system");
    EXPECT_EQ(std::string_view(msg_owner(large).name()), "system");
    msg_free(small);
    msg_free(large);
}

TEST_P(message, the_last_free_releases) {
    const system_stats sys_before = system_allocation_stats();
    void* m = msg_alloc(300, "refcount test");
    EXPECT_EQ(msg_reference_count(m), 1u);
    msg_reference(m);
    msg_reference(m);
    EXPECT_EQ(msg_reference_count(m), 3u);
    msg_free(m);
    msg_free(m);
    EXPECT_EQ(msg_reference_count(m), 1u);
    static_cast<char*>(m)[299] = 1;  // still ours
    EXPECT_EQ(thread_pool_stats().live_blocks() + system_allocation_stats().live_blocks,
              sys_before.live_blocks + 1);
    msg_free(m);
    EXPECT_EQ(thread_pool_stats().live_blocks(), 0u);
    EXPECT_EQ(system_allocation_stats().live_blocks, sys_before.live_blocks);
}

TEST_P(message, freeing_nullptr_does_nothing) {
    msg_free(nullptr);
}

TEST_P(message, references_dropped_on_many_threads_release_exactly_once) {
    arena_owner owner(false);
    constexpr int threads = 8;
    for (int round = 0; round < 50; ++round) {
        void* m = round % 2 == 0 ? msg_alloc(512) : owner.place(512);
        for (int i = 1; i < threads; ++i)
            msg_reference(m);
        std::vector<std::thread> pool;
        for (int i = 0; i < threads; ++i)
            pool.emplace_back([m] { msg_free(m); });
        for (auto& t : pool)
            t.join();
    }
    EXPECT_EQ(owner.taken_back.load(), 25);
    EXPECT_EQ(thread_pool_stats().live_blocks(), 0u);
}

// An owner that lends its own storage (an eager slot, later) gets it back on the last free.
TEST_P(message, a_custom_owner_gets_its_storage_back_on_the_last_free) {
    arena_owner owner(false);
    void* m = owner.place(1000, "eager slot test");
    EXPECT_EQ(static_cast<std::byte*>(m),
              static_cast<std::byte*>(owner.storage()) + message_header_size);
    EXPECT_EQ(msg_size(m), 1000u);
    EXPECT_EQ(&msg_owner(m), &owner);
    msg_reference(m);
    msg_free(m);
    EXPECT_EQ(owner.taken_back.load(), 0);
    msg_free(m);
    EXPECT_EQ(owner.taken_back.load(), 1);
    EXPECT_EQ(owner.last_storage, owner.storage());
    EXPECT_EQ(owner.last_size, 1000u);
    void* again = owner.place(10);  // the owner may reuse its storage at once
    EXPECT_EQ(again, m);
    msg_free(again);
    EXPECT_EQ(owner.taken_back.load(), 2);
}

TEST(message_storage, header_and_storage_size) {
    static_assert(message_header_size == 32);
    static_assert(message_storage_size(100) == 132);
    EXPECT_EQ(message_alignment, 16u);
}

// Large messages come back from the large-block cache: the same block serves a later request
// of its size class (no fresh pages), every byte of the requested size is usable (ASan checks
// the bounds), and LARGE_CACHE=0 turns the reuse off.
TEST(large_messages, a_freed_block_serves_the_next_request_of_its_class) {
    scoped_config cfg(test::pool_config(true, 2, 2));
    for (std::size_t size :
         {std::size_t{20} << 10, std::size_t{1} << 20, (std::size_t{1} << 20) + 1,
          std::size_t{3} << 20, std::size_t{64} << 20}) {
        void* m = msg_alloc(size);
        ASSERT_NE(m, nullptr) << size;
        std::memset(m, 0xA5, size);
        EXPECT_EQ(msg_size(m), size);
        msg_free(m);
        void* again = msg_alloc(size - 1);
        EXPECT_EQ(again, m) << size;
        std::memset(again, 0x5A, size - 1);
        msg_free(again);
    }
    alloc_config off = test::pool_config(true, 2, 2);
    off.large_cache_bytes = 0;
    scoped_config no_cache(off);
    void* a = msg_alloc(std::size_t{2} << 20);
    void* keep = msg_alloc(std::size_t{2} << 20);  // so malloc cannot simply hand a back
    msg_free(a);
    void* b = msg_alloc(std::size_t{3} << 20);
    EXPECT_NE(b, a);
    msg_free(b);
    msg_free(keep);
}

}  // namespace
}  // namespace coverse::alloc
