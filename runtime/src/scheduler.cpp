// scheduler: the per-PE loop. Order per iteration: ready tasks (bounded by the quota),
// remote posts, expired timers, the reactor, the pollers, then user-handler deliveries
// unless nested inside one. Idle: spin for `spin`, then block in the reactor.
#include <coverse/runtime/scheduler.hpp>

#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include <coverse/alloc/config.hpp>
#include <coverse/runtime/scope.hpp>
#include <coverse/runtime/sync_wait.hpp>

namespace coverse {

namespace {
// A spin-wait hint: the core slows this thread's polling (and gives a sibling hyperthread
// its resources) for a few dozen cycles.
inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
}

thread_local scheduler* t_current = nullptr;

// A count setting (any spelling alloc::env_setting accepts); a malformed value is reported
// and the default kept, so a typo never stops a job.
long env_long(const char* name, long fallback) {
    const auto v = alloc::env_setting(name);
    if (!v) return fallback;
    const auto x = alloc::parse_count(v->value);
    if (!x || *x > static_cast<std::size_t>(std::numeric_limits<long>::max())) {
        std::fprintf(stderr, "coverse: ignoring %s=%s: expected a non-negative integer\n",
                     v->variable.c_str(), v->value.c_str());
        return fallback;
    }
    return static_cast<long>(*x);
}

// A duration setting in microseconds, through the settings' one duration parser (200, 2ms).
long env_microseconds(const char* name, long fallback) {
    const auto v = alloc::env_setting(name);
    if (!v) return fallback;
    const auto us = alloc::parse_duration_us(v->value, 1);
    if (!us || *us > static_cast<std::uint64_t>(std::numeric_limits<long>::max())) {
        std::fprintf(stderr, "coverse: ignoring %s=%s: expected microseconds (200, 2ms, 0.5s)\n",
                     v->variable.c_str(), v->value.c_str());
        return fallback;
    }
    return static_cast<long>(*us);
}

bool env_switch(const char* name, bool fallback) {
    const auto v = alloc::env_setting(name);
    if (!v) return fallback;
    const auto on = alloc::parse_switch(v->value);
    if (!on) {
        std::fprintf(stderr,
                     "coverse: ignoring %s=%s: expected 1/0, on/off, true/false or yes/no\n",
                     v->variable.c_str(), v->value.c_str());
        return fallback;
    }
    return *on;
}
}  // namespace

scheduler_options scheduler_options::from_env() {
    scheduler_options o;
    o.spin = std::chrono::microseconds(env_microseconds("SPIN_US", o.spin.count()));
    o.task_quota =
        static_cast<unsigned>(std::clamp(env_long("TASK_QUOTA", o.task_quota), 1L,
                                         static_cast<long>(std::numeric_limits<unsigned>::max())));
    o.use_io_uring = env_switch("IO_URING", o.use_io_uring);
    o.kernel_poll_every = static_cast<unsigned>(
        std::clamp(env_long("KERNEL_POLL_EVERY", o.kernel_poll_every), 1L, 1L << 20));
    o.spin_pause = static_cast<unsigned>(std::clamp(env_long("SPIN_PAUSE", o.spin_pause), 0L, 64L));
    return o;
}

/// The wake-up read: a background io_uring read of the eventfd, re-armed after every
/// completion, so a post from another thread ends the scheduler's block in the ring.
class scheduler::wakeup_read final : public completion {
public:
    wakeup_read(reactor& r, int fd) : _r(r), _fd(fd) {}
    void arm() {
        if (_armed || _stopping) return;
        io_uring_prep_read(_r.prepare_background(this), _fd, &_value, sizeof _value, 0);
        _armed = true;
    }
    void stop() {
        _stopping = true;
        if (_armed) _r.cancel(this);
    }
    void complete(int, std::uint32_t) noexcept override {
        _armed = false;
        // Re-armed lazily by the next block(): while the loop spins it drains the remote
        // queue directly, so no read needs to be in flight.
    }

private:
    reactor& _r;
    int _fd;
    std::uint64_t _value = 0;  // the kernel writes here until the final completion
    bool _armed = false;
    bool _stopping = false;
};

std::string scheduler::describe_io() const {
    if (_reactor) return _reactor->describe();
    return "none: " + _no_reactor_why + " (blocking with poll(2))";
}

scheduler* scheduler::current() noexcept {
    return t_current;
}

scheduler& scheduler::this_thread() noexcept {
    if (!t_current) {
        std::fprintf(stderr,
                     "coverse: a coverse awaitable was used on a thread with no scheduler; run "
                     "the task with coverse::sync_wait() or inside a PE's loop\n");
        std::abort();
    }
    return *t_current;
}

void wait_registry::no_scheduler() noexcept {
    scheduler::this_thread();  // prints why and aborts
    std::abort();
}

scheduler::scheduler(scheduler_options opts) : _opts(opts) {
    _wake_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (_wake_fd < 0) {
        std::fprintf(stderr,
                     "coverse: eventfd failed: %s (raise the open-files limit: ulimit -n)\n",
                     std::strerror(errno));
        std::abort();
    }
    if (_opts.use_io_uring) {
        _reactor = reactor::create(_opts.ring_entries, &_no_reactor_why);
    } else {
        _no_reactor_why =
            "io_uring disabled by configuration (the IO_URING setting, e.g. COVERSE_IO_URING=0)";
    }
    if (_reactor) _wakeup = std::make_unique<wakeup_read>(*_reactor, _wake_fd);
    _root = std::make_unique<task_scope>("scheduler");
    _previous = t_current;
    t_current = this;
    wait_registry::_current = &_waits;
}

scheduler::~scheduler() {
    // 1. Ask spawned tasks to stop and let them finish, for 10 s at most. At the process's
    //    exit (leave_tasks_at_exit), the code that called exit() may be one of them, below
    //    us on the stack, never to return to the loop, and the PE that ran them is gone:
    //    the loop does not run again, and the tasks still there are left as they are.
    if (_root->live() > 0) {
        _root->request_stop();
        if (_exiting) {
            (void)_root.release();  // their frames may still be running
        } else {
            run_until([&] { return _root->live() == 0; }, std::chrono::seconds(10));
            if (_root->live() > 0) {
                std::fprintf(stderr,
                             "coverse: scheduler shutdown: %zu spawned task(s) did not stop "
                             "within 10 s after a stop request: %s\n",
                             _root->live(), _root->live_names().c_str());
                std::abort();
            }
        }
    }
    _root.reset();
    // 2. Cancel our own request and reap until the ring has nothing in flight: closing
    //    the ring does not wait for what the kernel still writes into our buffers.
    if (_reactor) {
        _wakeup->stop();
        if (!_reactor->drain(std::chrono::seconds(5))) {
            // The kernel may still write the wake-up buffer: leak it rather than free it.
            (void)_wakeup.release();
            std::fprintf(stderr,
                         "coverse: scheduler shutdown: %llu io_uring request(s) still "
                         "in flight after 5 s\n",
                         static_cast<unsigned long long>(_reactor->in_flight()));
        }
        _reactor.reset();
        _wakeup.reset();
    }
    ::close(_wake_fd);
    t_current = _previous;
    wait_registry::_current = _previous ? &_previous->_waits : nullptr;
}

void scheduler::spawn(task<void> t, std::string name) {
    _root->spawn(std::move(t), std::move(name), *this);
}

void scheduler::add_poller(poller& p) {
    _pollers.push_back(&p);
}

void scheduler::remove_poller(poller& p) noexcept {
    _pollers.erase(std::remove(_pollers.begin(), _pollers.end(), &p), _pollers.end());
}

// ---- timers: an indexed binary min-heap ---------------------------------------------

bool scheduler::heap_less(std::size_t a, std::size_t b) const noexcept {
    const timer_node* x = _timers[a];
    const timer_node* y = _timers[b];
    return x->deadline < y->deadline || (x->deadline == y->deadline && x->seq < y->seq);
}

void scheduler::heap_swap(std::size_t a, std::size_t b) noexcept {
    std::swap(_timers[a], _timers[b]);
    _timers[a]->heap_index = a;
    _timers[b]->heap_index = b;
}

void scheduler::heap_up(std::size_t i) noexcept {
    while (i > 0) {
        std::size_t parent = (i - 1) / 2;
        if (!heap_less(i, parent)) break;
        heap_swap(i, parent);
        i = parent;
    }
}

void scheduler::heap_down(std::size_t i) noexcept {
    const std::size_t n = _timers.size();
    for (;;) {
        std::size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && heap_less(l, m)) m = l;
        if (r < n && heap_less(r, m)) m = r;
        if (m == i) return;
        heap_swap(i, m);
        i = m;
    }
}

void scheduler::add_timer(timer_node& t) {
    _timers.push_back(&t);  // first: if it throws, the node is left unarmed, and cancel_timer
                            // (a sleep's clean-up) leaves the heap alone
    t.seq = ++_timer_seq;
    t.heap_index = _timers.size() - 1;
    heap_up(t.heap_index);
}

void scheduler::cancel_timer(timer_node& t) noexcept {
    if (!t.armed()) return;
    const std::size_t i = t.heap_index;
    const std::size_t last = _timers.size() - 1;
    if (i != last) heap_swap(i, last);
    _timers.pop_back();
    t.heap_index = static_cast<std::size_t>(-1);
    if (i < _timers.size()) {
        heap_up(i);
        heap_down(i);
    }
}

bool scheduler::fire_timers(clock::time_point now) {
    bool fired = false;
    while (!_timers.empty() && _timers.front()->deadline <= now) {
        timer_node* t = _timers.front();
        cancel_timer(*t);
        ++_stats.timers_fired;
        t->fire(t);
        fired = true;
    }
    return fired;
}

// ---- the loop -----------------------------------------------------------------------

bool scheduler::run_ready() {
    unsigned n = 0;
    while (n < _opts.task_quota && !_ready.empty()) {
        std::coroutine_handle<> h = _ready.front();
        _ready.pop_front();
        h.resume();
        ++n;
    }
    _stats.resumed += n;
    return n > 0;
}

void scheduler::defer(deferred_call& c) noexcept {
    if (c.queued) return;
    c.queued = true;
    c.next = nullptr;
    if (_deferred_tail)
        _deferred_tail->next = &c;
    else
        _deferred_head = &c;
    _deferred_tail = &c;
}

void scheduler::cancel_deferred(deferred_call& c) noexcept {
    if (!c.queued) return;
    deferred_call* prev = nullptr;
    for (deferred_call* at = _deferred_head; at != nullptr; prev = at, at = at->next) {
        if (at != &c) continue;
        (prev ? prev->next : _deferred_head) = c.next;
        if (_deferred_tail == &c) _deferred_tail = prev;
        break;
    }
    c.next = nullptr;
    c.queued = false;
}

bool scheduler::run_deferred() {
    // As many calls as are queued now, each off the queue before it runs (it may defer
    // itself or others again: a call that always defers cannot hold the loop here).
    std::size_t n = 0;
    for (const deferred_call* c = _deferred_head; c != nullptr; c = c->next)
        ++n;
    for (; n > 0 && _deferred_head; --n) {
        deferred_call* c = _deferred_head;
        _deferred_head = c->next;
        if (!_deferred_head) _deferred_tail = nullptr;
        c->next = nullptr;
        c->queued = false;
        try {
            c->fn(c->context);
        } catch (...) {
            detail::report_spawn_failure(c->name, std::current_exception());
        }
    }
    return true;
}

void scheduler::post(void (*fn)(void*), void* arg) {
    if (!_remote.push(remote_item{fn, arg})) {
        std::fprintf(stderr, "coverse: cross-thread post failed: out of memory\n");
        std::abort();
    }
    // Pairs with the fence in block(): either the scheduler sees our item before it
    // sleeps, or we see it sleeping and wake it (Dekker-style; both sides fence).
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (_sleeping.load(std::memory_order_relaxed) && _sleeping.exchange(false)) {
        const std::uint64_t one = 1;
        [[maybe_unused]] ssize_t r = ::write(_wake_fd, &one, sizeof one);  // EAGAIN: already due
    }
}

bool scheduler::drain_remote() {
    // Take everything posted so far with one exchange, oldest first, into a batch that a
    // nested loop (an item that runs sync_wait) continues from, so order holds.
    if (_remote_batch.empty())
        _remote.consume_all_atomic_reversed(
            [this](const remote_item& item) { _remote_batch.push_back(item); });
    std::size_t n = 0;
    while (!_remote_batch.empty()) {
        const remote_item item = _remote_batch.front();
        _remote_batch.pop_front();
        ++n;
        try {
            item.fn(item.arg);
        } catch (...) {
            detail::report_spawn_failure("cross-thread post", std::current_exception());
        }
    }
    _stats.remote += n;
    return n > 0;
}

bool scheduler::poll_pollers() {
    bool did = false;
    for (std::size_t i = 0; i < _pollers.size();) {
        poller* p = _pollers[i];
        did |= p->poll();
        // A poller may remove itself (a spinning receive that ended): the next one then
        // sits at i, and is not skipped.
        if (i < _pollers.size() && _pollers[i] == p) ++i;
    }
    return did;
}

bool scheduler::deliver_one() {
    if (_delivery_depth > 0 || _deliveries.empty()) return false;
    std::function<void()> fn = std::move(_deliveries.front());
    _deliveries.pop_front();
    delivery_guard guard(*this);
    ++_stats.deliveries;
    try {
        fn();
    } catch (...) {
        // An exception must not unwind through the loop: it would abandon suspended
        // frames of whoever called sync_wait. Reported like a failed spawned task.
        detail::report_spawn_failure("user-handler delivery", std::current_exception());
    }
    return true;
}

bool scheduler::turn(bool timers) {
    // An idle iteration is what a spinning PE repeats between messages, and the time to
    // notice a message is up to one of them: each step is guarded by a test of its own
    // queue, so an idle turn is a few loads and the pollers.
    bool did = !_ready.empty() && run_ready();
    if (_deferred_head) did |= run_deferred();
    if (_end_turn) {
        // A task made something ready for the loop's caller (a message for a handler):
        // return to it now rather than after a trip into the kernel.
        _end_turn = false;
        return true;
    }
    if (!_remote_batch.empty() || !_remote.empty()) did |= drain_remote();
    if (timers && !_timers.empty()) did |= fire_timers(clock::now());
    if (_reactor) {
        // Entering the kernel is what costs here (1-2 µs). A ring with TASKRUN_FLAG says
        // when that would find work, so poll() is asked only then; on a ring without it,
        // with the data on shared memory, only every N-th iteration polls, unless
        // something waits to be submitted.
        if (_reactor->polls_without_syscalls()) {
            if (_reactor->poll_needed()) did |= _reactor->poll();
        } else if (_kernel_poll_every <= 1 || _reactor->has_unsubmitted() ||
                   ++_kernel_polls_skipped >= _kernel_poll_every) {
            _kernel_polls_skipped = 0;
            did |= _reactor->poll();
        }
    }
    if (!_pollers.empty()) did |= poll_pollers();
    if (_delivery_depth == 0 && !_deliveries.empty()) {
        for (unsigned n = 0; n < _opts.task_quota && deliver_one(); ++n)
            did = true;
    }
    return did;
}

void scheduler::step(loop_state& st) {
    // While it spins idle, the loop reads the clock for its timers on every 8th turn only: a
    // read is ~25 ns here, and with a timer armed it was ~7 % of the CPU samples of an 8 B
    // TCP ping-pong, each turn the longer (docs/perf.md, stop 41). A timer fires at most 7
    // idle turns late, a few µs; a busy loop, run_once() called by itself, and a loop whose
    // idle turns yield the CPU (more PEs than cores: a turn may be a time slice) read it on
    // every turn.
    const bool timers = !st.idle || _opts.yield_while_spinning || (st.idle_polls & 7) == 0;
    if (turn(timers) || !_ready.empty() || _deferred_head) {
        st.idle = false;
        return;
    }
    if (!st.idle) {
        st.idle = true;
        st.idle_polls = 0;
        st.idle_since = clock::now();
        return;
    }
    // Keep polling while the spin budget lasts (a wake-up costs ~8 µs); the clock is read
    // only every 64 idle iterations so that spinning is mostly polling.
    if (_opts.yield_while_spinning) ::sched_yield();
    for (unsigned i = 0; i < _opts.spin_pause; ++i)
        cpu_relax();
    if ((++st.idle_polls & 63) != 0) return;
    const auto now = clock::now();
    if (now - st.idle_since < _opts.spin) return;
    block(now);
    st.idle = false;
}

void scheduler::block(clock::time_point now) {
    // Pollers that agreed to sleep get wake() on every way out, including the early ones.
    std::size_t agreed = 0;
    auto wake_agreed = [&] {
        for (std::size_t i = 0; i < agreed; ++i)
            _pollers[i]->wake();
    };
    for (; agreed < _pollers.size(); ++agreed)
        if (!_pollers[agreed]->try_sleep()) {
            wake_agreed();
            return;
        }
    if (!_ready.empty() || _deferred_head) {  // a try_sleep() may have made work ready
        wake_agreed();
        return;
    }

    std::chrono::nanoseconds timeout(-1);
    if (!_timers.empty())
        timeout = std::max(
            std::chrono::nanoseconds::zero(),
            std::chrono::duration_cast<std::chrono::nanoseconds>(_timers.front()->deadline - now));

    if (_reactor) _wakeup->arm();
    _sleeping.store(true, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (!_remote.empty()) {
        _sleeping.store(false, std::memory_order_relaxed);
        wake_agreed();
        return;
    }
    ++_stats.blocks;
    bool delegated = false;
    if (!_reactor)
        for (poller* p : _pollers)
            if ((delegated = p->block(timeout, _wake_fd))) break;
    if (delegated) {
        // a poller's own event loop did the waiting
    } else if (_reactor) {
        _reactor->wait(timeout);
    } else {
        pollfd pfd{_wake_fd, POLLIN, 0};
        timespec ts{};
        timespec* tsp = nullptr;
        if (timeout.count() >= 0) {
            ts.tv_sec = timeout.count() / 1'000'000'000;
            ts.tv_nsec = timeout.count() % 1'000'000'000;
            tsp = &ts;
        }
        if (::ppoll(&pfd, 1, tsp, nullptr) > 0) {
            std::uint64_t v = 0;
            [[maybe_unused]] ssize_t r = ::read(_wake_fd, &v, sizeof v);
        }
    }
    _sleeping.store(false, std::memory_order_relaxed);
    wake_agreed();
}

}  // namespace coverse
