// A sleep whose timer cannot be queued (the timer heap's allocation fails): the sleep throws
// std::bad_alloc to its task, and the scheduler's timers are left as they were: a later
// sleep and the scheduler's end work. Its own executable: it replaces the global operator
// new (to fail one allocation on demand), which the other runtime tests must not share.
#include <gtest/gtest.h>

#include <cstdlib>
#include <new>

#include <coverse/runtime/runtime.hpp>

namespace {
bool fail_next_allocation = false;  // one thread: the test's
}  // namespace

void* operator new(std::size_t n) {
    if (fail_next_allocation) {
        fail_next_allocation = false;
        throw std::bad_alloc();
    }
    if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
    throw std::bad_alloc();
}
void operator delete(void* p) noexcept {
    std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
    std::free(p);
}

namespace coverse {
namespace {

using namespace std::chrono_literals;

TEST(timer_allocation_failure, a_sleep_that_cannot_queue_its_timer_throws_and_leaves_the_heap) {
    scheduler sched;  // no timer yet: the first sleep grows the heap's vector
    const auto result = sync_wait([]() -> task<int> {
        int threw = 0;
        fail_next_allocation = true;
        try {
            co_await sleep_for(1ms);
        } catch (const std::bad_alloc&) {
            ++threw;
        }
        fail_next_allocation = false;
        co_await sleep_for(1ms);  // the heap works: this one is queued and fires
        co_return threw;
    }());
    EXPECT_EQ(result, 1) << "the failed sleep should have thrown std::bad_alloc to its task";
    EXPECT_EQ(sched.stats().timers_fired, 1u) << "only the second sleep's timer ran";
}

}  // namespace
}  // namespace coverse
