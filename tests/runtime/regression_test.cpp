// Regressions found in review, each opened by its cause.
#include <stdexcept>
#include <string>
#include <vector>

#include "fixture.hpp"

namespace coverse::test {
namespace {

using namespace std::chrono_literals;
using regression_test = runtime_test;

// Cause: with_timeout discarded the task's result whenever the limit timer won the race,
// even if the task had already been handed a permit (release hands permits over
// directly), so an eager credit was lost for good.
TEST_F(regression_test, with_timeout_keeps_a_permit_the_task_already_received) {
    sync_wait([]() -> task<void> {
        semaphore sem(0);
        task_scope scope("releaser");
        // The releaser's timer and the limit expire in the same loop iteration: the
        // release runs first and hands the permit over, then the limit timer fires.
        const auto when = clock::now() + 3ms;
        scope.spawn(
            [](semaphore* s, clock::time_point w) -> task<void> {
                co_await sleep_until(w);
                s->release();
            }(&sem, when),
            "releaser");
        co_await sleep_until(when - 1ms);
        bool got = co_await with_timeout(
            [](semaphore* s) -> task<void> { co_await s->acquire(); }(&sem), when - clock::now());
        co_await scope.join();
        // Either the acquire got the permit (and says so) or the permit is still there.
        EXPECT_EQ(static_cast<std::size_t>(got) + sem.available(), 1u)
            << "got=" << got << " available=" << sem.available();
    }());
}

// Cause: an awaiter destroyed while waiting (its frame dropped after an exception unwound
// sync_wait) stayed linked in the semaphore's list; the next release woke freed memory.
TEST_F(regression_test, a_waiter_destroyed_while_waiting_leaves_the_queue) {
    semaphore sem(0);
    {
        auto t = [](semaphore* s) -> task<void> { co_await s->acquire(); }(&sem);
        auto waiter = [](task<void>* inner) -> task<void> { co_await *inner; }(&t);
        // Start the waiter by hand and then drop it while it is suspended.
        sched->post_delivery([] { throw std::runtime_error("handler failed"); });
        std::vector<std::string> reports;
        auto old = set_spawn_failure_handler(
            [&](std::string_view n, std::exception_ptr) { reports.emplace_back(n); });
        task_scope scope("holder");
        scope.spawn([](semaphore* s) -> task<void> { co_await s->acquire(); }(&sem), "waiter");
        sched->run_until([&] { return sem.has_waiters() && !reports.empty(); });
        set_spawn_failure_handler(std::move(old));
        EXPECT_EQ(reports, std::vector<std::string>{"user-handler delivery"})
            << "a throwing handler must be reported, not unwind through the loop";
        sem.release();  // lets the spawned waiter finish
        sync_wait(scope.join());
        (void)waiter;
    }
    EXPECT_FALSE(sem.has_waiters());
    // The direct case: a frame suspended in acquire() and then destroyed.
    {
        semaphore s2(0);
        {
            auto t = [](semaphore* s) -> task<void> { co_await s->acquire(); }(&s2);
            t.handle().resume();  // runs to the acquire and suspends there
            EXPECT_TRUE(s2.has_waiters());
        }  // the task dies suspended
        EXPECT_FALSE(s2.has_waiters());
        s2.release();  // would touch freed memory before the fix (ASan)
        EXPECT_EQ(s2.available(), 1u);
    }
}

// Cause: join() kept a single joiner; a second one was never resumed.
TEST_F(regression_test, every_joiner_is_resumed) {
    int resumed = 0;
    sync_wait([](int* r) -> task<void> {
        task_scope scope("work");
        scope.spawn([]() -> task<void> { co_await sleep_for(1ms); }(), "sleeper");
        task_scope joiners("joiners");
        for (int i = 0; i < 3; ++i)
            joiners.spawn(
                [](task_scope* s, int* n) -> task<void> {
                    co_await s->join();
                    ++*n;
                }(&scope, r),
                "joiner");
        co_await joiners.join();
        co_await scope.join();
    }(&resumed));
    EXPECT_EQ(resumed, 3);
}

// Cause: scheduler::spawn queued the task on the thread's current scheduler, so with a
// nested scheduler alive the outer one's task ran on (or was stranded in) the inner one.
TEST_F(regression_test, scheduler_spawn_runs_on_that_scheduler) {
    scheduler& outer = *sched;
    bool ran = false;
    {
        scheduler inner;
        outer.spawn(
            [](bool* r) -> task<void> {
                *r = true;
                co_return;
            }(&ran),
            "outer-task");
        EXPECT_EQ(inner.ready_tasks(), 0u);
        EXPECT_EQ(outer.ready_tasks(), 1u);
    }
    outer.run_until([&] { return ran; });
    EXPECT_TRUE(ran);
}

// Cause: a posted callable that threw lost the rest of its batch.
TEST_F(regression_test, a_throwing_post_is_reported_and_the_batch_still_runs) {
    std::vector<std::string> reports;
    auto old = set_spawn_failure_handler(
        [&](std::string_view n, std::exception_ptr) { reports.emplace_back(n); });
    int ran = 0;
    sched->post([] { throw std::runtime_error("bad item"); });
    sched->post([&ran] { ++ran; });
    sched->run_until([&] { return ran == 1; });
    set_spawn_failure_handler(std::move(old));
    EXPECT_EQ(reports, std::vector<std::string>{"cross-thread post"});
}

}  // namespace
}  // namespace coverse::test
