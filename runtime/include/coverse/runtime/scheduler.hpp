// scheduler: one per thread, one per PE. Ready queue, timer heap, pollers, cross-thread
// hand-off, the notion of user-handler delivery, and the idle policy (spin, then block in
// the io_uring reactor).
#pragma once

#include <boost/lockfree/stack.hpp>

#include <atomic>
#include <chrono>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <new>
#include <string>
#include <type_traits>
#include <vector>

#include <coverse/runtime/reactor.hpp>
#include <coverse/runtime/wait_reason.hpp>

namespace coverse {

using clock = std::chrono::steady_clock;

/// Something the scheduler polls every loop iteration: a verbs completion queue, shared
/// memory rings, a foreign event loop. `poll()` must not block and returns whether it did
/// work. Before the scheduler blocks it asks every poller `try_sleep()`: false means "I
/// cannot promise to wake you" (work pending, or no fd armed), so it keeps spinning;
/// `wake()` follows every block.
class poller {
public:
    virtual ~poller() = default;
    virtual bool poll() = 0;
    virtual bool try_sleep() { return true; }
    virtual void wake() {}
    /// For a poller that owns a blocking event loop of its own (Asio's reactor, when the
    /// scheduler has no io_uring ring): block until its events, `timeout` (negative: no
    /// limit), or `wake_fd` (the scheduler's eventfd, written by cross-thread posts) is
    /// readable — the poller must consume that eventfd's value. Return false to decline;
    /// the scheduler then blocks by itself. Only asked when the scheduler has no ring.
    virtual bool block(std::chrono::nanoseconds timeout, int wake_fd) {
        (void)timeout;
        (void)wake_fd;
        return false;
    }
};

/// A timer entry, owned by whoever waits on it (it lives in an awaiter's frame), kept in
/// the scheduler's indexed heap so a cancel removes it in O(log n) without allocating.
struct timer_node {
    clock::time_point deadline{};
    std::uint64_t seq = 0;  // FIFO order among equal deadlines
    std::size_t heap_index = static_cast<std::size_t>(-1);
    void (*fire)(timer_node*) noexcept = nullptr;  // runs on the loop; must not block
    void* context = nullptr;
    bool armed() const noexcept { return heap_index != static_cast<std::size_t>(-1); }
};

/// A call the loop makes once, at its next turn (in whatever loop runs then, a nested one
/// too), owned by the caller and queued without allocating: for work that must wait until
/// the running task suspends, such as returning the stream credits it took (a task spawned
/// for it cost ~700 instructions). Kept alive by its owner while queued (cancel_deferred).
struct deferred_call {
    void (*fn)(void* context) = nullptr;  // may throw: reported like a failed spawned task
    void* context = nullptr;
    const char* name = "deferred call";
    deferred_call* next = nullptr;
    bool queued = false;
};

struct scheduler_options {
    /// How long an idle loop keeps polling before it blocks. A blocking wake-up costs
    /// about 8 µs on the target machines, a spin iteration well under one.
    std::chrono::microseconds spin{200};
    /// Ready tasks run per loop iteration before the pollers get a turn.
    unsigned task_quota = 64;
    unsigned ring_entries = 256;
    /// false: never create an io_uring ring (block with poll(2) on the wake-up eventfd).
    bool use_io_uring = true;
    /// Yield the CPU (sched_yield) on each idle poll while spinning: for more busy
    /// processes than cores (4 PEs on 2 cores), where a spinning PE would otherwise hold
    /// the core the PE it waits for needs.
    bool yield_while_spinning = false;
    /// KERNEL_POLL_EVERY: how often a loop iteration with nothing to submit enters the
    /// kernel for io_uring completions once set_shared_memory_only(true) said the data
    /// comes through pollers (a system call costs 1-2 µs on the target machines, a
    /// shared-memory poll a few ns).
    unsigned kernel_poll_every = 16;
    /// SPIN_PAUSE: pause instructions after each idle poll while spinning (x86 `pause`,
    /// Arm `yield`, nothing elsewhere; 0: none; at most 64). Polled back to back, a ring's line was
    /// read away from the peer between the stores of its write: one pause (~43 cycles here) made
    /// the 8 B same-host one-way 4.6 % shorter (docs/perf.md, stop 38).
    unsigned spin_pause = 1;

    /// Defaults overridden by the settings SPIN_US, SPIN_PAUSE, TASK_QUOTA, IO_URING and
    /// KERNEL_POLL_EVERY (command line or environment, see docs/settings.md:
    /// COVERSE_SPIN_US=50, COVERSE_IO_URING=0). A malformed value is reported on stderr and
    /// the default kept.
    static scheduler_options from_env();
};

class task_scope;
template <class T>
class task;

class scheduler {
public:
    explicit scheduler(scheduler_options opts = scheduler_options::from_env());
    /// Stops intake, asks spawned tasks to stop, runs until they finish (reporting any that
    /// do not within 10 s and aborting), reaps the reactor until nothing is in flight, then
    /// closes it. After leave_tasks_at_exit(): no wait, and the tasks still there are left.
    ~scheduler();
    scheduler(const scheduler&) = delete;
    scheduler& operator=(const scheduler&) = delete;
    /// The process is ending inside code this loop runs (exit() called from a task or a
    /// handler): that code never returns to the loop, so the destructor does not wait for
    /// the tasks to end (nor run the loop at all).
    void leave_tasks_at_exit() noexcept { _exiting = true; }

    /// The scheduler of the calling thread, or null.
    static scheduler* current() noexcept;
    /// The scheduler of the calling thread; aborts with a clear message when there is none
    /// (a coverse awaitable used outside `sync_wait` or a scheduler's loop).
    static scheduler& this_thread() noexcept;

    // ---- same-thread ----------------------------------------------------------------
    /// Queues a suspended coroutine to be resumed by this scheduler's loop.
    void schedule(std::coroutine_handle<> h) { _ready.push_back(h); }

    /// Starts `t` detached, owned by the scheduler's root scope; see task_scope::spawn.
    void spawn(task<void> t, std::string name);

    void add_timer(timer_node& t);
    void cancel_timer(timer_node& t) noexcept;

    /// Queues `c` for the loop's next turn (nothing if queued already), behind the calls
    /// queued before it. A call that defers itself runs again a turn later, not at once.
    void defer(deferred_call& c) noexcept;
    /// Takes `c` off the queue if it is there.
    void cancel_deferred(deferred_call& c) noexcept;

    /// True while the pollers carry the data (every peer on shared memory): the reactor
    /// is then polled on every kernel_poll_every-th iteration with nothing to submit,
    /// instead of every one. Submissions always go at once.
    void set_shared_memory_only(bool on) noexcept {
        _shared_memory_only = on;
        _kernel_poll_every = on ? _opts.kernel_poll_every : 1;
    }
    bool shared_memory_only() const noexcept { return _shared_memory_only; }

    void add_poller(poller& p);
    void remove_poller(poller& p) noexcept;

    /// Queues a user-handler delivery (a Converse message for its handler, a callback the
    /// application registered). Deliveries run only from a loop that is not itself inside
    /// a delivery: a handler that calls sync_wait (CmiSyncSend inside a handler) makes
    /// I/O and protocol progress, but later messages wait, in order, for the outer loop.
    void post_delivery(std::function<void()> fn) { _deliveries.push_back(std::move(fn)); }
    std::size_t pending_deliveries() const noexcept { return _deliveries.size(); }
    /// True while a user-handler delivery is running on this scheduler.
    bool in_delivery() const noexcept { return _delivery_depth > 0; }
    /// How many user-handler deliveries are running, one inside another.
    int delivery_depth() const noexcept { return _delivery_depth; }
    /// Runs one queued delivery now, if allowed (not nested). For CmiDeliverMsgs-style
    /// callers that pump deliveries one by one. Returns whether one ran.
    bool deliver_one();

    /// Ends the current loop iteration right after the ready tasks, before remote posts,
    /// timers and the reactor (which enters the kernel): for a task that just made work for
    /// the loop's caller, e.g. a received message its handler should see at once. The
    /// skipped steps run in the next iteration.
    void end_turn() noexcept { _end_turn = true; }
    /// One loop iteration without blocking: ready tasks (up to the quota), deferred calls,
    /// remote posts, expired timers, the reactor, the pollers, and deliveries when not
    /// nested.
    /// Returns whether anything ran.
    bool run_once() { return turn(true); }
    /// Runs the ready tasks now (up to the quota) and the deferred calls, nothing else: for
    /// a dispatch loop whose handler just woke the task that waits for its message (a
    /// coroutine stream), so that the task runs before the next message is looked for, as a
    /// handler would have, and what it deferred follows it. Returns whether any ran.
    bool run_ready_now() {
        bool did = !_ready.empty() && run_ready();
        if (_deferred_head) did |= run_deferred();
        return did;
    }
    /// Runs the loop (idle policy included) until `done()` is true.
    template <class Pred>
    void run_until(Pred done) {
        loop_state st;
        while (!done())
            step(st);
    }
    /// Runs the loop until `done()` is true or `limit` has passed; false when the limit came
    /// first. A timer marks the limit, so a loop that would block with nothing else armed
    /// still wakes for it.
    template <class Pred>
    bool run_until(Pred done, clock::duration limit) {
        bool expired = false;
        timer_node deadline;
        deadline.fire = [](timer_node* t) noexcept { *static_cast<bool*>(t->context) = true; };
        deadline.context = &expired;
        deadline.deadline = clock::now() + limit;
        add_timer(deadline);
        run_until([&] { return done() || expired; });
        if (deadline.armed()) cancel_timer(deadline);
        return !expired;
    }

    // ---- any thread -----------------------------------------------------------------
    /// Hands `fn(arg)` to this scheduler from any thread: a Boost.Lockfree queue plus an
    /// eventfd wake-up when the scheduler sleeps. Never blocks, never drops.
    void post(void (*fn)(void*), void* arg);
    /// Hands a callable to this scheduler from any thread. A trivially copyable callable
    /// no bigger than a pointer (a lambda capturing one pointer or reference) travels in
    /// the item itself; anything else costs one allocation.
    template <class F>
    void post(F&& f) {
        using fn_t = std::decay_t<F>;
        if constexpr (sizeof(fn_t) <= sizeof(void*) && std::is_trivially_copyable_v<fn_t> &&
                      std::is_trivially_destructible_v<fn_t>) {
            void* packed = nullptr;
            std::memcpy(&packed, &f, sizeof(fn_t));
            post(
                [](void* p) {
                    alignas(fn_t) unsigned char bytes[sizeof(fn_t)];
                    std::memcpy(bytes, &p, sizeof(fn_t));
                    (*std::launder(reinterpret_cast<fn_t*>(bytes)))();
                },
                packed);
        } else {
            post(
                [](void* p) {
                    std::unique_ptr<fn_t> owned(static_cast<fn_t*>(p));
                    (*owned)();
                },
                new fn_t(std::forward<F>(f)));
        }
    }
    /// Resumes `h` on this scheduler, from any thread (no allocation).
    void post(std::coroutine_handle<> h) {
        post([](void* a) { std::coroutine_handle<>::from_address(a).resume(); }, h.address());
    }
    /// The eventfd that post() writes to wake a sleeping scheduler. A posting thread that
    /// keeps a file table of its own (unshare(CLONE_FILES)) must keep this one open in it.
    [[nodiscard]] int wake_fd() const noexcept { return _wake_fd; }

    /// `co_await sched.enter()` continues the awaiting coroutine on this scheduler.
    auto enter() noexcept {
        struct awaiter {
            scheduler* s;
            bool await_ready() const noexcept { return scheduler::current() == s; }
            void await_suspend(std::coroutine_handle<> h) { s->post(h); }
            void await_resume() const noexcept {}
        };
        return awaiter{this};
    }

    // ---- introspection --------------------------------------------------------------
    /// The io_uring reactor, or null when io_uring is unavailable or disabled.
    coverse::reactor* io() noexcept { return _reactor.get(); }
    /// Why there is no reactor ("" when there is one).
    const std::string& io_unavailable_reason() const noexcept { return _no_reactor_why; }
    /// One line for coverse-demo and coverse-info: "io_uring: entries=256 single_issuer ...",
    /// or "none: <why> (blocking with poll(2))".
    std::string describe_io() const;
    const scheduler_options& options() const noexcept { return _opts; }
    task_scope& root_scope() noexcept { return *_root; }

    struct counters {
        std::uint64_t resumed = 0, remote = 0, timers_fired = 0, deliveries = 0, blocks = 0;
    };
    const counters& stats() const noexcept { return _stats; }
    std::size_t pending_timers() const noexcept { return _timers.size(); }
    std::size_t ready_tasks() const noexcept { return _ready.size(); }
    /// What this scheduler's suspended tasks wait for (coverse/runtime/wait_reason.hpp).
    /// Same thread only.
    wait_registry& waits() noexcept { return _waits; }
    const wait_registry& waits() const noexcept { return _waits; }

private:
    struct loop_state {
        clock::time_point idle_since{};
        unsigned idle_polls = 0;  // read the clock every 64 idle iterations only
        bool idle = false;
    };
    struct remote_item {
        void (*fn)(void*);
        void* arg;
    };
    friend class delivery_guard;

    void step(loop_state& st);
    bool run_ready();
    bool run_deferred();
    /// run_once(), reading the clock for the timers only when `timers` (step() skips it on
    /// most idle turns).
    bool turn(bool timers);
    bool drain_remote();
    bool fire_timers(clock::time_point now);
    bool poll_pollers();
    void block(clock::time_point now);

    // timer heap (indexed, min by deadline then seq)
    void heap_up(std::size_t i) noexcept;
    void heap_down(std::size_t i) noexcept;
    void heap_swap(std::size_t a, std::size_t b) noexcept;
    bool heap_less(std::size_t a, std::size_t b) const noexcept;

    scheduler_options _opts;
    scheduler* _previous = nullptr;  // the thread's scheduler before this one (nesting)
    std::deque<std::coroutine_handle<>> _ready;
    deferred_call* _deferred_head = nullptr;
    deferred_call* _deferred_tail = nullptr;
    std::vector<timer_node*> _timers;
    std::uint64_t _timer_seq = 0;
    std::vector<poller*> _pollers;
    std::deque<std::function<void()>> _deliveries;
    int _delivery_depth = 0;
    bool _end_turn = false;
    bool _shared_memory_only = false;  // see set_shared_memory_only
    unsigned _kernel_poll_every = 1;
    unsigned _kernel_polls_skipped = 0;

    // Producers push one node each; the loop takes the whole stack with one atomic
    // exchange and runs it oldest first, so each producer's items keep their order.
    boost::lockfree::stack<remote_item> _remote{1024};
    std::deque<remote_item> _remote_batch;
    std::atomic<bool> _sleeping{false};
    int _wake_fd = -1;

    std::unique_ptr<coverse::reactor> _reactor;
    std::string _no_reactor_why;
    class wakeup_read;
    std::unique_ptr<wakeup_read> _wakeup;

    std::unique_ptr<task_scope> _root;
    bool _exiting = false;  // leave_tasks_at_exit()
    counters _stats;
    wait_registry _waits;
};

/// Marks the running code as a user-handler delivery for its lifetime (the facade wraps
/// each handler call in one); sync_wait inside it will not run other deliveries.
class delivery_guard {
public:
    explicit delivery_guard(scheduler& s) noexcept : _s(s) { ++_s._delivery_depth; }
    ~delivery_guard() { --_s._delivery_depth; }
    delivery_guard(const delivery_guard&) = delete;
    delivery_guard& operator=(const delivery_guard&) = delete;

private:
    scheduler& _s;
};

/// `co_await yield()` lets every other ready task and the pollers run once.
inline auto yield() noexcept {
    struct awaiter {
        bool await_ready() const noexcept { return false; }
        void await_suspend(std::coroutine_handle<> h) const {
            scheduler::this_thread().schedule(h);
        }
        void await_resume() const noexcept {}
    };
    return awaiter{};
}

}  // namespace coverse
