// wait_reason: waiting_for and wait_scope list a suspended task's wait in its scheduler's
// registry exactly while it waits, for every kind of awaitable, and leave no record behind
// when a wait is cancelled or its frame dies.
#include <coverse/runtime/wait_reason.hpp>

#include <vector>

#include "fixture.hpp"

namespace coverse::test {
namespace {

using wait_reason_test = runtime_test;

std::vector<wait_reason> listed(const scheduler& s) {
    std::vector<wait_reason> out;
    s.waits().for_each([&](const wait_reason& r) { out.push_back(r); });
    return out;
}

task<void> wait_for_event(event* e) {
    co_await waiting_for({wait_kind::get_done, 3, 17, "rndv/get: get-done"}, e->wait());
}

TEST_F(wait_reason_test, an_event_wait_is_listed_while_suspended_and_gone_after) {
    event e;
    sync_wait([](event* ev, scheduler* s) -> task<void> {
        task_scope scope("waiter");
        scope.spawn(wait_for_event(ev), "rndv");
        EXPECT_TRUE(s->waits().empty()) << "nothing waits before the task runs";
        co_await yield();
        const auto w = listed(*s);
        EXPECT_EQ(w.size(), 1u);
        if (!w.empty()) {
            EXPECT_EQ(w[0].kind, wait_kind::get_done);
            EXPECT_EQ(w[0].peer, 3u);
            EXPECT_EQ(w[0].id, 17u);
            EXPECT_STREQ(w[0].detail, "rndv/get: get-done");
        }
        ev->set();
        co_await scope.join();
        EXPECT_TRUE(s->waits().empty()) << "the record left when the task resumed";
    }(&e, &*sched));
}

task<int> child_value(event* e) {
    co_await e->wait();
    co_return 42;
}

TEST_F(wait_reason_test, a_task_wait_returns_the_value_and_nests_with_the_inner_wait) {
    event e;
    int got = 0;
    sync_wait([](event* ev, scheduler* s, int* out) -> task<void> {
        task_scope scope("waiter");
        scope.spawn(
            [](event* ev2, int* o) -> task<void> {
                *o = co_await waiting_for({wait_kind::credits, 1}, child_value(ev2));
            }(ev, out),
            "credits");
        co_await yield();
        EXPECT_EQ(listed(*s).size(), 1u);
        ev->set();
        co_await scope.join();
        EXPECT_TRUE(s->waits().empty());
    }(&e, &*sched, &got));
    EXPECT_EQ(got, 42);
}

TEST_F(wait_reason_test, a_wait_that_completes_at_once_leaves_no_record) {
    sync_wait([](scheduler* s) -> task<void> {
        event set_already(true);
        co_await waiting_for({wait_kind::reply, 2}, set_already.wait());
        semaphore sem(1);
        co_await waiting_for({wait_kind::credits, 2}, sem.acquire());
        EXPECT_TRUE(s->waits().empty());
    }(&*sched));
}

TEST_F(wait_reason_test, a_cancelled_wait_unlinks_its_record) {
    sync_wait([](scheduler* s) -> task<void> {
        event never;
        bool cancelled = false;
        try {
            co_await with_timeout(
                [](event* e) -> task<void> {
                    co_await waiting_for({wait_kind::barrier, 0, 5}, e->wait());
                }(&never),
                std::chrono::milliseconds(5));
        } catch (const cancelled_error&) {
            cancelled = true;
        }
        (void)cancelled;  // with_timeout may absorb it: what matters is the registry
        EXPECT_TRUE(s->waits().empty());
    }(&*sched));
}

TEST_F(wait_reason_test, wait_scope_lists_a_synchronous_wait_and_can_change_it) {
    auto& reg = sched->waits();
    {
        wait_scope w({wait_kind::handle_slot});
        ASSERT_EQ(reg.size(), 1u);
        w.update({wait_kind::barrier, 4, 9});
        const auto l = listed(*sched);
        ASSERT_EQ(l.size(), 1u);
        EXPECT_EQ(l[0].kind, wait_kind::barrier);
        EXPECT_EQ(l[0].peer, 4u);
        {
            wait_scope inner({wait_kind::socket_drain, 4});
            EXPECT_EQ(reg.size(), 2u);
            EXPECT_EQ(listed(*sched)[1].kind, wait_kind::socket_drain) << "oldest first";
        }
        EXPECT_EQ(reg.size(), 1u);
    }
    EXPECT_TRUE(reg.empty());
}

TEST_F(wait_reason_test, every_kind_has_a_name) {
    for (unsigned k = 0; k < wait_kind_count; ++k) {
        const std::string name = wait_kind_name(static_cast<wait_kind>(k));
        EXPECT_FALSE(name.empty());
        if (k != 0) {
            EXPECT_NE(name, "other") << k;
        }
    }
    EXPECT_STREQ(wait_kind_name(wait_kind::credits), "credits");
    EXPECT_STREQ(wait_kind_name(wait_kind::get_done), "get-done");
}

}  // namespace
}  // namespace coverse::test
