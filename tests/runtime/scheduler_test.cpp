// scheduler: timer order and lower bounds (no wall-clock upper bounds: CI hosts are
// noisy), the task quota, pollers, user-handler delivery nesting, cross-thread posts.
#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "fixture.hpp"

namespace coverse::test {
namespace {

using namespace std::chrono_literals;
using scheduler_test = runtime_test;

task<void> sleep_then_record(clock::duration d, int id, std::vector<int>* order) {
    co_await sleep_for(d);
    order->push_back(id);
}

TEST_F(scheduler_test, timers_fire_in_deadline_order_and_fifo_among_equals) {
    std::vector<int> order;
    sync_wait([](std::vector<int>* o) -> task<void> {
        task_scope scope("timers");
        scope.spawn(sleep_then_record(30ms, 3, o), "t3");
        scope.spawn(sleep_then_record(10ms, 1, o), "t1");
        scope.spawn(sleep_then_record(20ms, 2, o), "t2");
        // Same deadline: insertion order decides.
        const auto when = clock::now() + 40ms;
        for (int id = 4; id <= 6; ++id)
            scope.spawn(
                [](clock::time_point w, int i, std::vector<int>* out) -> task<void> {
                    co_await sleep_until(w);
                    out->push_back(i);
                }(when, id, o),
                "same-deadline");
        co_await scope.join();
    }(&order));
    EXPECT_EQ(order, (std::vector<int>{1, 2, 3, 4, 5, 6}));
}

TEST_F(scheduler_test, sleep_never_returns_early) {
    for (auto d : {1ms, 5ms, 15ms}) {
        const auto t0 = clock::now();
        sync_wait([](clock::duration x) -> task<void> { co_await sleep_for(x); }(d));
        EXPECT_GE(clock::now() - t0, d);
    }
}

TEST_F(scheduler_test, cancelled_timers_leave_the_heap) {
    // 1000 one-hour sleeps, each cancelled by with_timeout's stop request: every one must
    // be removed from the heap at once, not left to fire (or dangle) an hour later.
    sync_wait([]() -> task<void> {
        for (int i = 0; i < 1000; ++i) {
            bool finished =
                co_await with_timeout([]() -> task<void> { co_await sleep_for(1h); }(), 1us);
            EXPECT_FALSE(finished);
        }
    }());
    EXPECT_EQ(sched->pending_timers(), 0u);
}

class counting_poller : public poller {
public:
    bool poll() override {
        ++polls;
        return false;
    }
    int polls = 0;
};

TEST_F(scheduler_test, a_busy_yielding_task_cannot_starve_the_pollers) {
    counting_poller p;
    sched->add_poller(p);
    sync_wait([]() -> task<void> {
        for (int i = 0; i < 10'000; ++i)
            co_await yield();
    }());
    sched->remove_poller(p);
    // With a quota of 64 tasks per iteration, 10,000 yields give the pollers at least
    // 10,000 / 64 turns.
    EXPECT_GE(p.polls, 10'000 / 64);
}

TEST_F(scheduler_test, nested_sync_wait_inside_a_delivery_runs_no_other_delivery) {
    std::vector<std::string> log;
    sched->post_delivery([&] {
        log.push_back("handler 1 begins");
        // A handler that blocks on protocol work (CmiSyncSend inside a handler): the
        // nested loop must make progress (the sleep finishes) but must not deliver
        // handler 2.
        sync_wait([](std::vector<std::string>* l) -> task<void> {
            co_await sleep_for(2ms);
            l->push_back("nested work done");
        }(&log));
        EXPECT_TRUE(sched->in_delivery());
        EXPECT_EQ(sched->pending_deliveries(), 1u);
        log.push_back("handler 1 ends");
    });
    sched->post_delivery([&] { log.push_back("handler 2"); });
    sched->run_until([&] { return log.size() == 4; });
    EXPECT_EQ(log, (std::vector<std::string>{"handler 1 begins", "nested work done",
                                             "handler 1 ends", "handler 2"}));
    EXPECT_FALSE(sched->in_delivery());
}

// A deferred call: once per defer, at the loop's next turn, in a nested loop too, not at
// all once cancelled, and a call that defers itself does not hold the loop.
TEST_F(scheduler_test, a_deferred_call_runs_once_at_the_next_turn_in_whatever_loop_runs) {
    struct counter {
        int runs = 0;
        bool again = false;
        scheduler* s = nullptr;
        deferred_call call;
    } a, b;
    for (counter* c : {&a, &b}) {
        c->s = &*sched;
        c->call.context = c;
        c->call.fn = [](void* p) {
            auto* self = static_cast<counter*>(p);
            ++self->runs;
            if (self->again) self->s->defer(self->call);
        };
    }
    sched->defer(a.call);
    sched->defer(a.call);  // queued already: still once
    EXPECT_TRUE(a.call.queued);
    EXPECT_EQ(a.runs, 0);  // not before a turn
    EXPECT_TRUE(sched->run_once());
    EXPECT_EQ(a.runs, 1);
    EXPECT_FALSE(a.call.queued);
    sched->run_once();
    EXPECT_EQ(a.runs, 1);

    // Cancelled (the first of two, then the last of two): it never runs.
    sched->defer(a.call);
    sched->defer(b.call);
    sched->cancel_deferred(a.call);
    EXPECT_FALSE(a.call.queued);
    sched->run_once();
    EXPECT_EQ(a.runs, 1);
    EXPECT_EQ(b.runs, 1);
    sched->defer(a.call);
    sched->defer(b.call);
    sched->cancel_deferred(b.call);
    sched->defer(b.call);  // queued again, behind a
    sched->run_once();
    EXPECT_EQ(a.runs, 2);
    EXPECT_EQ(b.runs, 2);

    // Deferring itself on every run: once per turn, and the loop goes on.
    a.again = true;
    sched->defer(a.call);
    for (int turn = 1; turn <= 5; ++turn) {
        sched->run_once();
        EXPECT_EQ(a.runs, 2 + turn);
    }
    a.again = false;
    sched->run_once();
    EXPECT_EQ(a.runs, 8);
    EXPECT_FALSE(a.call.queued);

    // Deferred by a task that then waits in a nested loop (sync_wait inside it, as
    // CmiDeliverSpecificMsg waits inside a handler): it runs there, before the task goes on.
    bool ran_before_the_task_went_on = false;
    sync_wait([](counter* c, bool* ok) -> task<void> {
        c->s->defer(c->call);
        const int before = c->runs;
        sync_wait([]() -> task<void> { co_await sleep_for(std::chrono::milliseconds(1)); }());
        *ok = c->runs == before + 1;
        co_return;
    }(&b, &ran_before_the_task_went_on));
    EXPECT_TRUE(ran_before_the_task_went_on);
}

// A call deferred while the loop decides to sleep (a poller's try_sleep) keeps it awake:
// it runs before the 5 s timer that would otherwise end the sleep.
TEST_F(scheduler_test, a_call_deferred_while_the_loop_goes_to_sleep_runs_without_the_sleep) {
    struct deferring_poller : poller {
        scheduler* s = nullptr;
        deferred_call call;
        bool deferred = false, ran = false;
        bool poll() override { return false; }
        bool try_sleep() override {
            if (!deferred) {
                deferred = true;
                s->defer(call);
            }
            return true;
        }
    } p;
    p.s = &*sched;
    p.call.context = &p;
    p.call.fn = [](void* self) { static_cast<deferring_poller*>(self)->ran = true; };
    bool timer_fired = false;
    timer_node t;
    t.fire = [](timer_node* n) noexcept { *static_cast<bool*>(n->context) = true; };
    t.context = &timer_fired;
    t.deadline = clock::now() + std::chrono::seconds(5);
    sched->add_timer(t);
    sched->add_poller(p);
    sched->run_until([&] { return p.ran || timer_fired; });
    sched->remove_poller(p);
    if (t.armed()) sched->cancel_timer(t);
    EXPECT_TRUE(p.ran);
    EXPECT_FALSE(timer_fired) << "the loop slept with a deferred call queued";
}

// How many loop turns after it fell due (armed from the 20th turn's predicate, the loop
// idle by then) a timer fired while run_until() spun; -1 if it never did.
int turns_until_a_due_timer_fires(scheduler& s) {
    bool fired = false;
    int turn = 0, fired_at = -1;
    constexpr int due_at = 20;
    timer_node due;
    due.fire = [](timer_node* n) noexcept { *static_cast<bool*>(n->context) = true; };
    due.context = &fired;
    s.run_until([&] {
        if (++turn == due_at) {
            due.deadline = clock::now();
            s.add_timer(due);
        }
        if (fired && fired_at < 0) fired_at = turn;
        return fired_at >= 0 || turn > 100'000;
    });
    if (due.armed()) s.cancel_timer(due);
    return fired_at < 0 ? -1 : fired_at - due_at;
}

// A spinning loop reads the clock for its timers on every 8th idle turn only (step()); the
// turns in between must not leave a later run_once() of its own caller (CsdSchedulePoll,
// CmiDeliverMsgs) without its timers: a due timer fires in the first one. While the loop
// spins, a timer that falls due fires within 8 idle turns.
TEST_F(scheduler_test, a_due_timer_fires_in_run_once_right_after_an_idle_spin) {
    bool far_fired = false, due_fired = false;
    const auto set = [](timer_node* n) noexcept { *static_cast<bool*>(n->context) = true; };
    timer_node far;  // armed through the spin, so that every idle turn has timers to skip
    far.fire = set;
    far.context = &far_fired;
    far.deadline = clock::now() + std::chrono::hours(1);
    sched->add_timer(far);
    for (int idle_turns = 1; idle_turns <= 9; ++idle_turns) {
        int turns = 0;
        sched->run_until([&] { return ++turns > idle_turns; });  // ends on a skipping turn too
        timer_node due;
        due.fire = set;
        due.context = &due_fired;
        due.deadline = clock::now();
        sched->add_timer(due);
        due_fired = false;
        sched->run_once();
        if (due.armed()) sched->cancel_timer(due);
        EXPECT_TRUE(due_fired) << "after " << idle_turns << " turns";
    }
    // And while it spins: a timer that falls due fires within 8 idle turns.
    const int late = turns_until_a_due_timer_fires(*sched);
    EXPECT_GE(late, 0) << "a due timer did not fire while the loop spun";
    EXPECT_LE(late, 9) << "it fired " << late << " turns after it fell due";
    sched->cancel_timer(far);
    EXPECT_FALSE(far_fired);
}

TEST_F(scheduler_test, a_deferred_call_that_throws_is_reported_with_its_name) {
    std::string failed;
    auto old = set_spawn_failure_handler([&](std::string_view name, std::exception_ptr e) {
        failed = std::string(name) + ": " + exception_text(e);
    });
    deferred_call c;
    c.name = "return the credits";
    c.fn = [](void*) { throw std::runtime_error("no memory for the credit message"); };
    sched->defer(c);
    sched->run_once();
    set_spawn_failure_handler(std::move(old));
    EXPECT_EQ(failed, "return the credits: no memory for the credit message");
    EXPECT_FALSE(c.queued);
}

TEST_F(scheduler_test, four_threads_post_a_million_items_each_none_lost_none_duplicated) {
    constexpr int threads = 4;
    constexpr int per_thread = 1'000'000;
    // One byte per item: the handler counts every arrival; a loss leaves a 0, a
    // duplicate a 2.
    std::vector<unsigned char> seen(static_cast<std::size_t>(threads) * per_thread, 0);
    struct ctx {
        std::vector<unsigned char>* seen;
        std::size_t received = 0;
        std::uintptr_t last[threads] = {};  // per producer: items must arrive in order
        std::size_t out_of_order = 0;
    } c{&seen};
    static thread_local ctx* t_ctx = nullptr;
    t_ctx = &c;
    std::atomic<int> ready{0};
    std::vector<std::thread> posters;
    scheduler* s = &*sched;
    for (int t = 0; t < threads; ++t) {
        posters.emplace_back([s, t, &ready] {
            ready.fetch_add(1);
            while (ready.load() < threads)
                std::this_thread::yield();
            for (int i = 0; i < per_thread; ++i) {
                const auto id = static_cast<std::uintptr_t>(t) * per_thread + i;
                s->post(
                    [](void* arg) {
                        auto k = reinterpret_cast<std::uintptr_t>(arg);
                        const auto producer = k / per_thread;
                        if (k % per_thread != 0 && k <= t_ctx->last[producer])
                            ++t_ctx->out_of_order;
                        t_ctx->last[producer] = k;
                        ++(*t_ctx->seen)[k];
                        ++t_ctx->received;
                    },
                    reinterpret_cast<void*>(id));
            }
        });
    }
    sched->run_until([&] { return c.received == seen.size(); });
    for (auto& th : posters)
        th.join();
    sched->run_once();  // anything extra would show up as a duplicate
    std::size_t lost = 0, dup = 0;
    for (unsigned char v : seen) {
        lost += v == 0;
        dup += v > 1;
    }
    EXPECT_EQ(lost, 0u);
    EXPECT_EQ(dup, 0u);
    EXPECT_EQ(c.out_of_order, 0u) << "a producer's posts must run in the order it made them";
    EXPECT_EQ(c.received, seen.size());
    t_ctx = nullptr;
}

class no_spin_test : public runtime_test {
protected:
    scheduler_options options() override {
        scheduler_options o;
        o.spin = std::chrono::microseconds(0);  // block at once when idle
        return o;
    }
};

TEST_F(no_spin_test, a_post_from_another_thread_wakes_a_blocked_scheduler) {
    for (int round = 0; round < 50; ++round) {
        event done;
        std::thread t([&] {
            std::this_thread::sleep_for(1ms);
            sched->post([&] { done.set(); });
        });
        sync_wait([](event* e) -> task<void> { co_await e->wait(); }(&done));
        t.join();
    }
    EXPECT_GT(sched->stats().blocks, 0u) << "the scheduler never blocked: the test proved nothing";
}

TEST_F(no_spin_test, timers_wake_a_blocked_scheduler) {
    const auto blocks_before = sched->stats().blocks;
    sync_wait([]() -> task<void> { co_await sleep_for(5ms); }());
    EXPECT_GT(sched->stats().blocks, blocks_before);
}

// run_until with a limit: a loop with nothing else armed blocks at once here, so only the
// limit's own timer can end the first wait (without it the test hangs until ctest's
// timeout); a condition that comes true first ends the second, and the limit's timer
// leaves the heap either way.
TEST_F(no_spin_test, run_until_a_limit_wakes_a_loop_with_nothing_armed_and_stops_at_done) {
    const auto blocks_before = sched->stats().blocks;
    EXPECT_FALSE(sched->run_until([] { return false; }, 5ms));
    EXPECT_GT(sched->stats().blocks, blocks_before) << "the loop never blocked: nothing proved";
    EXPECT_EQ(sched->pending_timers(), 0u);

    bool set = false;
    std::thread t([&] {
        std::this_thread::sleep_for(1ms);
        sched->post([&] { set = true; });
    });
    EXPECT_TRUE(sched->run_until([&] { return set; }, 60s));
    t.join();
    EXPECT_EQ(sched->pending_timers(), 0u);

    // Already true on entry: no loop turn is needed, and the timer is gone at once.
    EXPECT_TRUE(sched->run_until([] { return true; }, 60s));
    EXPECT_EQ(sched->pending_timers(), 0u);
}

// More PEs than cores: each idle turn yields the CPU and may be a time slice, so such a loop
// reads the clock for its timers on every turn: a timer that falls due mid-spin fires in the
// next turn.
class yielding_test : public runtime_test {
protected:
    scheduler_options options() override {
        scheduler_options o;
        o.yield_while_spinning = true;
        return o;
    }
};

TEST_F(yielding_test, a_timer_due_while_the_loop_spins_fires_in_the_next_turn) {
    const int late = turns_until_a_due_timer_fires(*sched);
    EXPECT_GE(late, 0) << "a due timer did not fire while the loop spun";
    EXPECT_LE(late, 1) << "it fired " << late << " turns after it fell due";
}

TEST(scheduler_fallback, runs_without_io_uring) {
    scheduler_options o;
    o.use_io_uring = false;
    o.spin = std::chrono::microseconds(0);
    scheduler s(o);
    EXPECT_EQ(s.io(), nullptr);
    EXPECT_NE(s.io_unavailable_reason().find("COVERSE_IO_URING=0"), std::string::npos);
    event done;
    std::thread t([&] {
        std::this_thread::sleep_for(2ms);
        s.post([&] { done.set(); });
    });
    sync_wait([](event* e) -> task<void> {
        co_await sleep_for(1ms);
        co_await e->wait();
    }(&done));
    t.join();
    EXPECT_GT(s.stats().blocks, 0u);
}

TEST(scheduler_nesting, current_is_restored_when_a_nested_scheduler_dies) {
    EXPECT_EQ(scheduler::current(), nullptr);
    {
        scheduler outer;
        EXPECT_EQ(scheduler::current(), &outer);
        {
            scheduler inner;
            EXPECT_EQ(scheduler::current(), &inner);
        }
        EXPECT_EQ(scheduler::current(), &outer);
    }
    EXPECT_EQ(scheduler::current(), nullptr);
}

}  // namespace
}  // namespace coverse::test
