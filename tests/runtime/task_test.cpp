// task<T>: values, exceptions through nested awaits, laziness, move-only ownership, and
// a million synchronously completing awaits without stack growth.
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

#include "fixture.hpp"

namespace coverse::test {
namespace {

using task_test = runtime_test;

task<int> answer() {
    co_return 42;
}

// The machine stack pointer of the caller's frame. Not the address of a local: locals of
// a coroutine live in its heap frame, and ASan may move stack locals to a fake stack.
[[gnu::noinline]] std::uintptr_t machine_stack_depth() {
    return reinterpret_cast<std::uintptr_t>(__builtin_frame_address(0));
}

task<std::uintptr_t> stack_address() {
    co_return machine_stack_depth();
}

task<std::int64_t> million_awaits(std::uintptr_t* first, std::uintptr_t* last) {
    std::int64_t sum = 0;
    for (int i = 0; i < 1'000'000; ++i) {
        std::uintptr_t where = co_await stack_address();
        if (i == 0) *first = where;
        *last = where;
        sum += co_await answer();
    }
    co_return sum;
}

TEST_F(task_test, million_synchronous_awaits_do_not_grow_the_stack) {
    std::uintptr_t first = 0, last = 0;
    EXPECT_EQ(sync_wait(million_awaits(&first, &last)), 42'000'000);
    // Symmetric transfer: the child's frame is resumed from the same stack depth on every
    // iteration. Without it, each await would nest one level deeper.
    EXPECT_NE(first, 0u);
    const auto drift = first > last ? first - last : last - first;
    EXPECT_LT(drift, 4096u) << "stack grew by " << drift << " bytes over a million awaits";
}

task<void> thrower(int depth) {
    if (depth == 0) throw std::runtime_error("deep failure");
    co_await thrower(depth - 1);
}

task<std::string> catcher() {
    try {
        co_await thrower(50);
    } catch (const std::runtime_error& e) {
        co_return e.what();
    }
    co_return "no exception";
}

TEST_F(task_test, exceptions_propagate_through_nested_tasks) {
    EXPECT_EQ(sync_wait(catcher()), "deep failure");
    EXPECT_THROW(sync_wait(thrower(3)), std::runtime_error);
}

TEST_F(task_test, tasks_are_lazy_and_free_their_frame_when_dropped) {
    bool started = false;
    const auto before = live_task_frames();
    {
        auto t = [](bool* s) -> task<void> {
            *s = true;
            co_return;
        }(&started);
        EXPECT_EQ(live_task_frames(), before + 1);
        EXPECT_FALSE(started) << "a task must not run before it is awaited";
    }
    EXPECT_EQ(live_task_frames(), before);
    EXPECT_FALSE(started);
}

TEST_F(task_test, move_only_values_and_moved_tasks) {
    auto make = []() -> task<std::unique_ptr<int>> { co_return std::make_unique<int>(7); };
    task<std::unique_ptr<int>> a = make();
    task<std::unique_ptr<int>> b = std::move(a);
    EXPECT_FALSE(a.valid());
    ASSERT_TRUE(b.valid());
    auto p = sync_wait(std::move(b));
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(*p, 7);
}

TEST_F(task_test, sync_wait_without_a_scheduler_makes_one_for_the_call) {
    sched.reset();
    EXPECT_EQ(scheduler::current(), nullptr);
    EXPECT_EQ(sync_wait(answer()), 42);
    EXPECT_EQ(scheduler::current(), nullptr);
}

}  // namespace
}  // namespace coverse::test
