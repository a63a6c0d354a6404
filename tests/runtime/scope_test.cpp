// task_scope and scheduler::spawn: detached tasks are owned, joined, stoppable, and a
// failure is reported with the task's name (fatal by default).
#include <stdexcept>
#include <string>
#include <vector>

#include "fixture.hpp"

namespace coverse::test {
namespace {

using scope_test = runtime_test;

task<void> add_after_yields(int* counter, int yields) {
    for (int i = 0; i < yields; ++i)
        co_await yield();
    ++*counter;
}

TEST_F(scope_test, join_waits_for_every_spawned_task) {
    int done = 0;
    sync_wait([](int* d) -> task<void> {
        task_scope scope("workers");
        for (int i = 0; i < 100; ++i)
            scope.spawn(add_after_yields(d, i % 7), "worker-" + std::to_string(i));
        EXPECT_EQ(scope.live(), 100u);
        co_await scope.join();
        EXPECT_EQ(scope.live(), 0u);
    }(&done));
    EXPECT_EQ(done, 100);
}

task<void> fail_later() {
    co_await yield();
    throw std::runtime_error("disk on fire");
}

TEST_F(scope_test, a_failed_spawned_task_is_reported_with_its_name) {
    std::vector<std::string> reports;
    auto old = set_spawn_failure_handler([&](std::string_view name, std::exception_ptr e) {
        try {
            std::rethrow_exception(e);
        } catch (const std::exception& x) {
            reports.push_back(std::string(name) + ": " + x.what());
        }
    });
    sync_wait([]() -> task<void> {
        task_scope scope("s");
        scope.spawn(fail_later(), "credit-returner pe=3");
        co_await scope.join();
    }());
    set_spawn_failure_handler(std::move(old));
    ASSERT_EQ(reports.size(), 1u);
    EXPECT_EQ(reports[0], "credit-returner pe=3: disk on fire");
}

TEST_F(scope_test, a_failed_spawned_task_is_fatal_by_default_and_names_the_task) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(
        {
            scheduler s;
            s.spawn(fail_later(), "rendezvous-get handle=17");
            s.run_until([] { return false; });
        },
        "spawned task 'rendezvous-get handle=17' failed: disk on fire");
}

task<void> sleep_forever() {
    co_await sleep_for(std::chrono::hours(1));
}

TEST_F(scope_test, request_stop_cancels_waiting_tasks_without_reporting_failure) {
    int failures = 0;
    auto old = set_spawn_failure_handler([&](std::string_view, std::exception_ptr) { ++failures; });
    sync_wait([]() -> task<void> {
        task_scope scope("sleepers");
        for (int i = 0; i < 5; ++i)
            scope.spawn(sleep_forever(), "sleeper");
        co_await yield();
        scope.request_stop();
        co_await scope.join();
    }());
    set_spawn_failure_handler(std::move(old));
    EXPECT_EQ(failures, 0);
}

task<void> wait_for(event& e, int* woken, int* cancelled) {
    try {
        co_await e.wait();
        ++*woken;
    } catch (const cancelled_error&) {
        ++*cancelled;
    }
}

// A stop cancels the waits of its own scope's tasks only (each scope's stop anchor holds the
// waits under its token), a wait woken before the stop still completes,
// and no wait stays linked once its task ended.
TEST_F(scope_test, a_stop_cancels_its_own_scopes_waits_only) {
    int woken = 0, cancelled = 0;
    sync_wait([](int* w, int* c) -> task<void> {
        event a, b, early;
        task_scope stopped("stopped"), kept("kept");
        for (int i = 0; i < 3; ++i) {
            stopped.spawn(wait_for(a, w, c), "stopped waiter");
            kept.spawn(wait_for(b, w, c), "kept waiter");
        }
        stopped.spawn(wait_for(early, w, c), "woken before the stop");
        co_await yield();
        early.set();  // woken (queued to run), not yet resumed when the stop comes
        stopped.request_stop();
        co_await stopped.join();
        EXPECT_EQ(*c, 3);
        EXPECT_EQ(*w, 1);
        EXPECT_EQ(kept.live(), 3u);
        b.set();
        co_await kept.join();
        EXPECT_FALSE(kept.waiting_for_stop());
        EXPECT_FALSE(stopped.waiting_for_stop());
    }(&woken, &cancelled));
    EXPECT_EQ(woken, 4);
    EXPECT_EQ(cancelled, 3);
}

TEST_F(scope_test, destroying_an_unjoined_scope_is_reported) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(
        {
            scheduler s;
            task_scope scope("forgotten");
            scope.spawn(sleep_forever(), "lonely-sleeper");
        },
        "task_scope 'forgotten' destroyed with 1 task\\(s\\) still running \\(lonely-sleeper\\)");
}

TEST_F(scope_test, scheduler_shutdown_stops_its_spawned_tasks) {
    int done = 0;
    sched->spawn(sleep_forever(), "root-sleeper");
    sched->spawn(add_after_yields(&done, 3), "root-counter");
    sched->run_until([&] { return done == 1; });
    EXPECT_EQ(sched->root_scope().live(), 1u);
    sched.reset();  // must stop the sleeper, not hang, not leak (the fixture checks frames)
    EXPECT_EQ(done, 1);
}

}  // namespace
}  // namespace coverse::test
