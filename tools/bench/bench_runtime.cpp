// bench_runtime: the coverse scheduler and task<T> beside Asio's io_context + awaitable,
// same work on both sides. Every name has `coverse` or `asio` as one `/` part, so
// scripts/bench-pairs.py can pair them; docs/runtime-bench.md has the numbers.
#include <benchmark/benchmark.h>
#include <asio.hpp>

#include <atomic>
#include <chrono>
#include <coroutine>
#include <cstdint>
#include <exception>
#include <string>
#include <thread>

#include <coverse/runtime/scheduler.hpp>
#include <coverse/runtime/scope.hpp>
#include <coverse/runtime/sync_wait.hpp>
#include <coverse/runtime/task.hpp>
#include <coverse/runtime/timer.hpp>
#include <coverse/runtime/wait_reason.hpp>

namespace {

using namespace std::chrono_literals;

// Asio's single-threaded configuration: hint 1 lets a handler's posts go to a thread-private
// queue, but keeps the mutex, so cross-thread post stays legal (as it is for coverse).
constexpr int asio_concurrency_hint = 1;

// The coverse scheduler is per thread and the ring is single-issuer: one per benchmark run,
// made and destroyed on the benchmark thread, outside the timed loop. Labels the run when
// there is no io_uring ring, since the loop then skips the reactor poll.
void label_reactor(benchmark::State& state, coverse::scheduler& sched) {
    if (!sched.io()) state.SetLabel("no io_uring: " + sched.io_unavailable_reason());
}

// Rethrows an exception escaping an Asio benchmark coroutine out of ctx.run().
void rethrow_if(std::exception_ptr e) {
    if (e) std::rethrow_exception(e);
}

// ---- resume_ready ---------------------------------------------------------------------
// child: one `co_await child(i)` where the child completes without suspending. Both sides
// allocate a frame, start the child, return a value and resume the parent; no queue, no
// loop. coverse does it by symmetric transfer, Asio through its awaitable_thread trampoline.

coverse::task<std::int64_t> coverse_child(std::int64_t x) {
    co_return x + 1;
}

coverse::task<void> coverse_await_children(benchmark::State* state) {
    std::int64_t sum = 0;
    for (auto _ : *state) {
        sum = co_await coverse_child(sum);
        benchmark::DoNotOptimize(sum);
    }
}

void resume_ready_child_coverse(benchmark::State& state) {
    coverse::scheduler sched;
    label_reactor(state, sched);
    coverse::sync_wait(coverse_await_children(&state));
    state.SetItemsProcessed(state.iterations());
}

asio::awaitable<std::int64_t> asio_child(std::int64_t x) {
    co_return x + 1;
}

asio::awaitable<void> asio_await_children(benchmark::State* state) {
    std::int64_t sum = 0;
    for (auto _ : *state) {
        sum = co_await asio_child(sum);
        benchmark::DoNotOptimize(sum);
    }
}

void resume_ready_child_asio(benchmark::State& state) {
    asio::io_context ctx{asio_concurrency_hint};
    asio::co_spawn(ctx, asio_await_children(&state), rethrow_if);
    ctx.run();
    state.SetItemsProcessed(state.iterations());
}

// requeue: the running coroutine puts itself back on its loop's ready queue and the loop
// resumes it: coverse `co_await yield()` (ready deque, run_once) against Asio
// `co_await post(use_awaitable)` (handler queue, io_context::run). One task on each side,
// so the loop has nothing else to run in between.

coverse::task<void> coverse_requeue(benchmark::State* state) {
    std::int64_t n = 0;
    for (auto _ : *state) {
        co_await coverse::yield();
        benchmark::DoNotOptimize(++n);
    }
}

void resume_ready_requeue_coverse(benchmark::State& state) {
    coverse::scheduler sched;
    label_reactor(state, sched);
    coverse::sync_wait(coverse_requeue(&state));
    state.SetItemsProcessed(state.iterations());
}

asio::awaitable<void> asio_requeue(benchmark::State* state) {
    std::int64_t n = 0;
    for (auto _ : *state) {
        co_await asio::post(asio::use_awaitable);
        benchmark::DoNotOptimize(++n);
    }
}

void resume_ready_requeue_asio(benchmark::State& state) {
    asio::io_context ctx{asio_concurrency_hint};
    asio::co_spawn(ctx, asio_requeue(&state), rethrow_if);
    ctx.run();
    state.SetItemsProcessed(state.iterations());
}

// requeue_wait_reason: the same requeue, with the wait named for the hang report
// (waiting_for: a record linked into the scheduler's registry at suspension, unlinked at
// resumption). Beside resume_ready/requeue/coverse it shows what naming a wait costs.

coverse::task<void> coverse_requeue_with_reason(benchmark::State* state) {
    std::int64_t n = 0;
    for (auto _ : *state) {
        co_await coverse::waiting_for({coverse::wait_kind::credits, 1, 0, "bench"},
                                      coverse::yield());
        benchmark::DoNotOptimize(++n);
    }
}

void resume_ready_requeue_wait_reason_coverse(benchmark::State& state) {
    coverse::scheduler sched;
    label_reactor(state, sched);
    coverse::sync_wait(coverse_requeue_with_reason(&state));
    state.SetItemsProcessed(state.iterations());
}

// ---- spawn_complete -------------------------------------------------------------------
// A batch of detached tasks that finish at once, started from outside the loop, then the
// loop runs until all have finished. coverse: scheduler::spawn (root scope: runner frame,
// task frame, name record) + run_until; Asio: co_spawn(detached) + run().

constexpr std::int64_t spawn_batch = 1000;

coverse::task<void> coverse_finish_now(std::int64_t* done) {
    ++*done;
    co_return;
}

void spawn_complete_coverse(benchmark::State& state) {
    coverse::scheduler sched;
    label_reactor(state, sched);
    std::int64_t done = 0;
    for (auto _ : state) {
        for (std::int64_t i = 0; i < spawn_batch; ++i)
            sched.spawn(coverse_finish_now(&done), "bench");
        sched.run_until([&] { return sched.root_scope().live() == 0; });
    }
    benchmark::DoNotOptimize(done);
    if (done != state.iterations() * spawn_batch) state.SkipWithError("lost spawned tasks");
    state.SetItemsProcessed(state.iterations() * spawn_batch);
}

asio::awaitable<void> asio_finish_now(std::int64_t* done) {
    ++*done;
    co_return;
}

void spawn_complete_asio(benchmark::State& state) {
    asio::io_context ctx{asio_concurrency_hint};
    std::int64_t done = 0;
    for (auto _ : state) {
        for (std::int64_t i = 0; i < spawn_batch; ++i)
            asio::co_spawn(ctx, asio_finish_now(&done), asio::detached);
        ctx.run();
        ctx.restart();
    }
    benchmark::DoNotOptimize(done);
    if (done != state.iterations() * spawn_batch) state.SkipWithError("lost spawned tasks");
    state.SetItemsProcessed(state.iterations() * spawn_batch);
}

// ---- timer_fire -----------------------------------------------------------------------
// One task waits on a timer that is due by the time the loop looks at it: the timer goes
// into the loop's timer queue, the loop finds it expired, fires it and resumes the task.
//
// coverse's sleep_until/sleep_for check the clock in await_ready and do not suspend at all
// when the deadline has passed, and now+1ns has always passed by then (one clock read takes
// longer), so they would skip the heap that Asio's steady_timer always uses. The paired
// coverse side therefore arms a timer_node on the scheduler's heap directly, exactly what
// sleep_awaiter::enqueue does. `timer_fire/sleep_for_1ns/coverse` shows the public call
// with its short cut, for reference (no Asio pair: the work differs).

class expired_timer_awaiter {
public:
    bool await_ready() const noexcept { return false; }
    void await_suspend(std::coroutine_handle<> h) {
        _handle = h;
        _sched = &coverse::scheduler::this_thread();
        _node.deadline = coverse::clock::now();
        _node.fire = &on_fire;
        _node.context = this;
        _sched->add_timer(_node);
    }
    void await_resume() const noexcept {}

private:
    static void on_fire(coverse::timer_node* n) noexcept {
        auto* self = static_cast<expired_timer_awaiter*>(n->context);
        self->_sched->schedule(self->_handle);
    }
    coverse::timer_node _node;
    coverse::scheduler* _sched = nullptr;
    std::coroutine_handle<> _handle;
};

coverse::task<void> coverse_timer_loop(benchmark::State* state) {
    for (auto _ : *state)
        co_await expired_timer_awaiter{};
}

void timer_fire_coverse(benchmark::State& state) {
    coverse::scheduler sched;
    label_reactor(state, sched);
    coverse::sync_wait(coverse_timer_loop(&state));
    // Every wait must have gone through the heap, or this measured something else.
    if (sched.stats().timers_fired != static_cast<std::uint64_t>(state.iterations()))
        state.SkipWithError("a timer wait did not go through the heap");
    state.SetItemsProcessed(state.iterations());
}

coverse::task<void> coverse_sleep_loop(benchmark::State* state) {
    for (auto _ : *state)
        co_await coverse::sleep_for(1ns);
}

void timer_fire_sleep_for_coverse(benchmark::State& state) {
    coverse::scheduler sched;
    label_reactor(state, sched);
    coverse::sync_wait(coverse_sleep_loop(&state));
    state.counters["heap_fraction"] =
        static_cast<double>(sched.stats().timers_fired) / static_cast<double>(state.iterations());
    state.SetItemsProcessed(state.iterations());
}

asio::awaitable<void> asio_timer_loop(benchmark::State* state) {
    asio::steady_timer timer(co_await asio::this_coro::executor);
    for (auto _ : *state) {
        timer.expires_after(1ns);
        co_await timer.async_wait(asio::use_awaitable);
    }
}

void timer_fire_asio(benchmark::State& state) {
    asio::io_context ctx{asio_concurrency_hint};
    asio::co_spawn(ctx, asio_timer_loop(&state), rethrow_if);
    ctx.run();
    state.SetItemsProcessed(state.iterations());
}

// ---- cross_thread_post ----------------------------------------------------------------
// A second thread posts `n` items to the loop thread, which runs them. The producer lives
// for the whole run and is released once per iteration, so thread start-up is not timed;
// both loops spin or sleep as they normally do while waiting for the first item.

constexpr std::int64_t post_batch = 10000;

// Runs `post_all()` on a helper thread once per call to release(), until destroyed.
template <class PostAll>
class producer_thread {
public:
    explicit producer_thread(PostAll post_all)
        : _post_all(std::move(post_all)), _thread([this] { loop(); }) {}
    ~producer_thread() {
        _round.store(stop_round, std::memory_order_release);
        _round.notify_one();
        _thread.join();
    }
    producer_thread(const producer_thread&) = delete;
    producer_thread& operator=(const producer_thread&) = delete;

    void release() {
        _round.fetch_add(1, std::memory_order_release);
        _round.notify_one();
    }

private:
    static constexpr std::int64_t stop_round = -1;
    void loop() {
        std::int64_t seen = 0;
        for (;;) {
            _round.wait(seen, std::memory_order_acquire);
            const std::int64_t r = _round.load(std::memory_order_acquire);
            if (r == stop_round) return;
            for (; seen < r; ++seen)
                _post_all();
        }
    }
    PostAll _post_all;
    std::atomic<std::int64_t> _round{0};
    std::thread _thread;
};

// Only the loop thread touches `ran`; the producer passes a pointer to it along.
void count_item(void* p) {
    ++*static_cast<std::int64_t*>(p);
}

// coverse's native form: a function pointer and an argument, no allocation.
void cross_thread_post_fn_arg_coverse(benchmark::State& state) {
    coverse::scheduler sched;
    label_reactor(state, sched);
    std::int64_t ran = 0;
    producer_thread producer([&] {
        for (std::int64_t i = 0; i < post_batch; ++i)
            sched.post(&count_item, &ran);
    });
    std::int64_t target = 0;
    for (auto _ : state) {
        target += post_batch;
        producer.release();
        sched.run_until([&] { return ran == target; });
    }
    state.SetItemsProcessed(state.iterations() * post_batch);
}

// The callable form: one heap allocation per item, like Asio's handler op.
void cross_thread_post_coverse(benchmark::State& state) {
    coverse::scheduler sched;
    label_reactor(state, sched);
    std::int64_t ran = 0;
    producer_thread producer([&] {
        for (std::int64_t i = 0; i < post_batch; ++i)
            sched.post([p = &ran] { ++*p; });
    });
    std::int64_t target = 0;
    for (auto _ : state) {
        target += post_batch;
        producer.release();
        sched.run_until([&] { return ran == target; });
    }
    state.SetItemsProcessed(state.iterations() * post_batch);
}

// The last item of a round stops run(); the work guard keeps run() from returning before
// the producer's first post arrives.
void cross_thread_post_asio(benchmark::State& state) {
    asio::io_context ctx{asio_concurrency_hint};
    auto guard = asio::make_work_guard(ctx);
    std::int64_t ran = 0;
    std::int64_t target = 0;
    producer_thread producer([&] {
        for (std::int64_t i = 0; i < post_batch; ++i)
            asio::post(ctx, [&ctx, p = &ran, t = &target] {
                if (++*p == *t) ctx.stop();
            });
    });
    for (auto _ : state) {
        target += post_batch;  // written before release(), read by items after it
        producer.release();
        ctx.run();
        ctx.restart();
    }
    state.SetItemsProcessed(state.iterations() * post_batch);
}

}  // namespace

BENCHMARK(resume_ready_child_coverse)->Name("resume_ready/child/coverse");
BENCHMARK(resume_ready_child_asio)->Name("resume_ready/child/asio");
BENCHMARK(resume_ready_requeue_coverse)->Name("resume_ready/requeue/coverse");
BENCHMARK(resume_ready_requeue_asio)->Name("resume_ready/requeue/asio");
BENCHMARK(resume_ready_requeue_wait_reason_coverse)
    ->Name("resume_ready/requeue_wait_reason/coverse");
BENCHMARK(spawn_complete_coverse)->Name("spawn_complete/coverse");
BENCHMARK(spawn_complete_asio)->Name("spawn_complete/asio");
BENCHMARK(timer_fire_coverse)->Name("timer_fire/coverse");
BENCHMARK(timer_fire_asio)->Name("timer_fire/asio");
BENCHMARK(timer_fire_sleep_for_coverse)->Name("timer_fire/sleep_for_1ns/coverse");
BENCHMARK(cross_thread_post_coverse)->Name("cross_thread_post/coverse")->UseRealTime();
BENCHMARK(cross_thread_post_asio)->Name("cross_thread_post/asio")->UseRealTime();
BENCHMARK(cross_thread_post_fn_arg_coverse)
    ->Name("cross_thread_post/fn_arg/coverse")
    ->UseRealTime();

BENCHMARK_MAIN();
