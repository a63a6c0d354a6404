// event, semaphore, channel: FIFO fairness, back-pressure, close, cancellation.
#include <string>
#include <vector>

#include "fixture.hpp"

namespace coverse::test {
namespace {

using namespace std::chrono_literals;
using sync_test = runtime_test;

TEST_F(sync_test, event_releases_all_waiters_until_reset) {
    int woken = 0;
    sync_wait([](int* w) -> task<void> {
        event e;
        task_scope scope("waiters");
        for (int i = 0; i < 10; ++i)
            scope.spawn(
                [](event* ev, int* n) -> task<void> {
                    co_await ev->wait();
                    ++*n;
                }(&e, w),
                "waiter");
        co_await yield();
        EXPECT_EQ(*w, 0);
        e.set();
        co_await scope.join();
        co_await e.wait();  // already set: does not suspend
        e.reset();
        EXPECT_FALSE(e.is_set());
    }(&woken));
    EXPECT_EQ(woken, 10);
}

task<void> acquire_and_log(semaphore* s, int id, std::vector<int>* order) {
    co_await s->acquire();
    order->push_back(id);
}

TEST_F(sync_test, semaphore_serves_waiters_in_fifo_order_and_newcomers_cannot_barge) {
    std::vector<int> order;
    sync_wait([](std::vector<int>* o) -> task<void> {
        semaphore sem(0);
        task_scope scope("acquirers");
        for (int id = 0; id < 8; ++id)
            scope.spawn(acquire_and_log(&sem, id, o), "acquirer");
        co_await yield();  // all eight are queued now
        sem.release(3);
        EXPECT_FALSE(sem.try_acquire()) << "permits went to the queued waiters, not to us";
        co_await yield();
        EXPECT_EQ(*o, (std::vector<int>{0, 1, 2}));
        sem.release(5);
        co_await scope.join();
        EXPECT_EQ(sem.available(), 0u);
    }(&order));
    EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
}

TEST_F(sync_test, a_cancelled_acquire_takes_no_permit) {
    sync_wait([]() -> task<void> {
        semaphore sem(0);
        auto got = co_await with_timeout(
            [](semaphore* s) -> task<void> { co_await s->acquire(); }(&sem), 2ms);
        EXPECT_FALSE(got);
        EXPECT_FALSE(sem.has_waiters()) << "the cancelled waiter must leave the queue";
        sem.release();
        EXPECT_EQ(sem.available(), 1u);
    }());
}

task<void> produce(channel<int>* ch, int n, std::vector<std::size_t>* sizes) {
    for (int i = 0; i < n; ++i) {
        EXPECT_TRUE(co_await ch->send(i));
        sizes->push_back(ch->size());
    }
    ch->close();
}

TEST_F(sync_test, channel_applies_back_pressure_and_keeps_order) {
    std::vector<int> got;
    std::vector<std::size_t> sizes;
    sync_wait([](std::vector<int>* g, std::vector<std::size_t>* sz) -> task<void> {
        channel<int> ch(4);
        task_scope scope("producer");
        scope.spawn(produce(&ch, 1000, sz), "producer");
        // Let the producer run alone: it must stop at the capacity, not run ahead.
        for (int i = 0; i < 10; ++i)
            co_await yield();
        EXPECT_EQ(ch.size(), 4u);
        EXPECT_EQ(sz->size(), 4u) << "the producer must be suspended by the full channel";
        while (auto v = co_await ch.recv())
            g->push_back(*v);
        co_await scope.join();
    }(&got, &sizes));
    ASSERT_EQ(got.size(), 1000u);
    for (int i = 0; i < 1000; ++i)
        ASSERT_EQ(got[i], i);
    for (auto s : sizes)
        EXPECT_LE(s, 4u);
}

TEST_F(sync_test, zero_capacity_channel_is_a_rendezvous) {
    sync_wait([]() -> task<void> {
        channel<std::string> ch(0);
        std::string v = "x";
        EXPECT_FALSE(ch.try_send(v)) << "nobody is receiving";
        task_scope scope("sender");
        scope.spawn(
            [](channel<std::string>* c) -> task<void> {
                EXPECT_TRUE(co_await c->send("hello"));
                EXPECT_TRUE(co_await c->send("world"));
            }(&ch),
            "sender");
        auto a = co_await ch.recv();
        auto b = co_await ch.recv();
        co_await scope.join();
        EXPECT_TRUE(a && b);
        EXPECT_EQ(a.value_or("?") + " " + b.value_or("?"), "hello world");
    }());
}

TEST_F(sync_test, closing_a_channel_wakes_blocked_senders_and_receivers) {
    sync_wait([]() -> task<void> {
        channel<int> full(1), empty(1);
        EXPECT_TRUE(co_await full.send(1));
        int outcomes = 0;
        task_scope scope("blocked");
        scope.spawn(
            [](channel<int>* c, int* o) -> task<void> {
                if (!co_await c->send(2)) ++*o;  // blocked on a full channel
            }(&full, &outcomes),
            "sender");
        scope.spawn(
            [](channel<int>* c, int* o) -> task<void> {
                if (!co_await c->recv()) ++*o;  // blocked on an empty channel
            }(&empty, &outcomes),
            "receiver");
        co_await yield();
        full.close();
        empty.close();
        co_await scope.join();
        EXPECT_EQ(outcomes, 2);
        auto buffered = co_await full.recv();  // what was buffered still drains
        EXPECT_EQ(buffered.value_or(-1), 1);
        EXPECT_FALSE((co_await full.recv()).has_value());
    }());
}

}  // namespace
}  // namespace coverse::test
