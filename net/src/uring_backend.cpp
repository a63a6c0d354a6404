// uring_backend: the io_uring implementation of coverse::net::backend — TCP streams and
// listeners whose accept, connect, send and recv are requests on the scheduler's ring, each
// pointing at one immovable completion object in the awaiting coroutine's frame.
//
// Lifetimes. A request (`socket_request`) is the awaiter: it lives in the suspended
// coroutine's frame and is also the request's user_data, so it cannot move. The coroutine
// resumes only after the request's *final* completion — for a zero-copy send that is the
// notification CQE (IORING_CQE_F_NOTIF), which comes after the send's own CQE — so the
// caller's buffers, the iovecs and the msghdr (all in the same frame) outlive every kernel
// access. Each socket keeps the list of its requests in flight (`socket_state`): close()
// stops intake, cancels them (IORING_OP_ASYNC_CANCEL by user_data), waits for their final
// completions and only then closes the fd; closing an fd cancels nothing in io_uring.
// With COVERSE_RECV_MULTISHOT=1 a stream receives through one multishot request of its own
// into its own provided-buffer ring (`multishot_receiver`), and recv_some copies out of it.
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <coroutine>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <optional>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <vector>

#include <coverse/alloc/config.hpp>
#include <coverse/net/transport.hpp>
#include <coverse/runtime/reactor.hpp>
#include <coverse/runtime/scope.hpp>

namespace coverse::net {

namespace {

// The data path's socket calls go to the kernel by syscall(), not by libc's recv(),
// send() and sendmsg(). In a process with a second thread (the hang doctor's responder)
// those are cancellation points: each call switches the thread's cancel type on and off
// around the system call, two atomic instructions, ~5 % of the CPU samples of an 8 B
// ping-pong over loopback TCP (docs/perf.md, stop 41). coverse cancels no thread.
ssize_t recv_now(int fd, void* buf, std::size_t len, int flags) noexcept {
    return ::syscall(SYS_recvfrom, fd, buf, len, flags, nullptr, nullptr);
}
ssize_t send_now(int fd, const void* buf, std::size_t len, int flags) noexcept {
    return ::syscall(SYS_sendto, fd, buf, len, flags, nullptr, 0);
}
ssize_t sendmsg_now(int fd, const msghdr* msg, int flags) noexcept {
    return ::syscall(SYS_sendmsg, fd, msg, flags);
}

// Zero-copy send threshold when COVERSE_ZC_THRESHOLD is unset: 0, i.e. off, because it
// lost at every size on loopback. Measured here (2 vCPUs, kernel 6.18; one connection, two
// threads each with its own scheduler, 2 GB of back-to-back send_all of one size, receiver
// reading 256 KiB at a time; median MB/s of 7 runs alternating copy and ZC at 64 and
// 128 KiB, of 5 runs in back-to-back blocks at the other sizes; copy vs ZC):
//   16 KiB 1091 vs 712, 64 KiB 3341 vs 2570, 128 KiB 4276 vs 3235, 256 KiB 4667 vs 3326,
//   1 MiB 5972 vs 3748, 8 MiB 5666 vs 3065.
// Over loopback the kernel copies the pages anyway when it hands them to the receiving
// socket, so ZC only adds page pinning and a second CQE per send (which send_all waits
// for). On a real NIC it should pay for large sends: set COVERSE_ZC_THRESHOLD (e.g.
// 65536) there, after measuring.
constexpr std::size_t default_zc_threshold = 0;

// Multishot receive when COVERSE_RECV_MULTISHOT is unset (and the kernel has provided-buffer
// rings): off, because it is not at least as fast at every size. The ring each stream gets
// then: COVERSE_RECV_BUFFERS buffers (a power of two) of COVERSE_RECV_BUFFER_SIZE bytes.
// Measured here (2 vCPUs, noisy, kernel 6.18; bench_net --mode io_uring, two processes,
// mesh ping-pong; =0 and =1 alternating, medians of 8, 6 and 10 runs in three sessions
// whose load differed; off vs on, 32 x 32 KiB buffers):
//   8 B p50 µs    6.88 vs 5.86,  6.33 vs 5.52,  8.19 vs 7.37
//   1 KiB p50 µs  6.61 vs 6.38,  6.51 vs 5.83,  8.79 vs 7.94
//   64 KiB p50 µs 20.7 vs 28.4,  20.7 vs 25.2,  49.6 vs 48.9
//   1 MiB MB/s    1580 vs 1428,  1421 vs 1630,  2312 vs 1840
// Small messages gain 0.3-1 µs (presumably no SQE and no request set-up per receive); big
// payloads lose: the mesh's reader receives a big frame's payload straight into the frame,
// but multishot copies it twice — kernel to ring buffer, ring buffer to frame. 16 x 64 KiB
// and 64 x 16 KiB buffers did no better at 64 KiB (23.3 and 27.5 µs in the second session).
// Serving big windows with a plain receive (not done) would need the armed request
// cancelled and its final CQE reaped before each one and re-armed after — only one receive
// may take bytes at a time. Try COVERSE_RECV_MULTISHOT=1 where messages are small.
constexpr bool default_recv_multishot = false;

// Spinning receive (`spin_receive`) when COVERSE_RECV_SPIN is unset: on. See docs/perf.md
// ("TCP: reading the socket while the loop spins") for the side-by-side measurement.
constexpr bool default_recv_spin = true;
// Streams of one thread that spin at once: each costs a system call per loop iteration,
// so the rest wait in the ring as before.
constexpr unsigned max_spinning_streams = 4;
constexpr unsigned default_recv_buffers = 32;
constexpr std::size_t default_recv_buffer_size = 32 * 1024;
constexpr unsigned max_recv_buffers = 32768;  // the kernel's limit on a buffer ring
constexpr std::size_t max_recv_buffer_size = std::size_t{16} << 20;

// Largest single request: sqe->len is 32 bits and the kernel caps one transfer at about
// INT_MAX; the send loop continues where a capped request stopped.
constexpr std::size_t max_request_bytes = std::size_t{1} << 30;
// IOV_MAX: sendmsg refuses longer gathers, so a longer gather goes out in slices.
constexpr std::size_t max_iov = 1024;

using stream_result = io_result<std::unique_ptr<stream>>;

struct uring_settings {
    std::size_t zc_threshold = default_zc_threshold;  // 0: never zero-copy
    bool sendmsg_zc = false;      // IORING_OP_SENDMSG_ZC (gathers); SEND_ZC alone serves one part
    bool recv_multishot = false;  // multishot receive into a provided-buffer ring per stream
    bool recv_spin = default_recv_spin;  // spinning receive (spin_receive) while the loop spins
    unsigned recv_buffers = default_recv_buffers;
    std::size_t recv_buffer_size = default_recv_buffer_size;
};

[[noreturn]] void wrong_thread() noexcept {
    std::fputs(
        "coverse: an io_uring socket was used (or stopped) from a thread other than the "
        "scheduler that created it; use each stream on its own scheduler's thread\n",
        stderr);
    std::abort();
}

// A request that close() and the owner's destructor must cancel and reap: a node of its
// socket's list while it is in flight (a one-shot socket_request, or a stream's multishot
// receive).
class tracked_request : public completion {
public:
    /// Asks the request to end: its final completion follows (ring requests), or it ends
    /// here and leaves the socket's list (a spinning receive, which is not in the ring).
    virtual void cancel(reactor& ring) noexcept { ring.cancel(this); }

protected:
    ~tracked_request() = default;

private:
    friend class socket_state;
    tracked_request* _prev = nullptr;
    tracked_request* _next = nullptr;
};

// One socket's fd and the requests it has in flight, so that close() and the owner's
// destructor can cancel them and wait for every final completion before the fd closes.
class socket_state {
public:
    socket_state(scheduler& s, int fd) noexcept : sched(&s), ring(s.io()), fd(fd) {}
    socket_state(const socket_state&) = delete;
    socket_state& operator=(const socket_state&) = delete;

    /// The owner dies: anything still in flight (a task still awaits this socket — a bug
    /// of the caller, but the kernel must not write freed memory) is cancelled and reaped
    /// here, blocking, like io_op's destructor; the fd closes after.
    ~socket_state();

    /// Stops intake, cancels what is in flight, waits until every request has had its
    /// final completion, then closes the fd. Idempotent; concurrent callers all wait.
    task<void> close();

    void add(tracked_request* r) noexcept;
    void remove(tracked_request* r) noexcept;

    /// Why a request cannot start on this socket now (-EBADF, or -ECANCELED when closing
    /// or when the awaiting coroutine's stop was requested), or 0. `stop` receives the
    /// awaiting coroutine's stop token (null when it has none).
    template <class P>
    int refusal(std::coroutine_handle<P> h, const std::stop_token*& stop) const noexcept {
        if (scheduler::current() != sched) wrong_thread();
        if (fd < 0) return -EBADF;
        if (closing) return -ECANCELED;
        if constexpr (coverse::detail::has_stop_v<P>) stop = h.promise().stop();
        return stop && stop->stop_requested() ? -ECANCELED : 0;
    }

    scheduler* sched;
    reactor* ring;
    int fd;
    bool closing = false;     // close() started: new requests fail with -ECANCELED
    bool destroying = false;  // the owner is being destroyed: results become -ECANCELED

private:
    // Non-cancellable wait until nothing is in flight: a close() that returned early on a
    // stop request would leave the kernel holding the caller's buffers.
    class drain_awaiter {
    public:
        explicit drain_awaiter(socket_state& s) noexcept : _s(s) {}
        drain_awaiter(const drain_awaiter&) = delete;
        drain_awaiter& operator=(const drain_awaiter&) = delete;
        ~drain_awaiter() {
            std::erase(_s._drain_waiters, _h);  // a frame destroyed while it waits
        }
        bool await_ready() const noexcept { return _s._head == nullptr; }
        void await_suspend(std::coroutine_handle<> h) {
            _h = h;
            _s._drain_waiters.push_back(h);
        }
        void await_resume() const noexcept {}

    private:
        socket_state& _s;
        std::coroutine_handle<> _h;
    };

    void cancel_all() noexcept;

    tracked_request* _head = nullptr;
    std::vector<std::coroutine_handle<>> _drain_waiters;
};

// The awaiter and completion object of one request on a socket. Yields the request's result
// (>= 0, or -errno; -ECANCELED after a stop request or close()). Derived classes only say
// how to fill the submission entry.
class socket_request : public tracked_request {
public:
    socket_request(const socket_request&) = delete;
    socket_request& operator=(const socket_request&) = delete;

    bool await_ready() const noexcept { return false; }

    template <class P>
    bool await_suspend(std::coroutine_handle<P> h) {
        const std::stop_token* tok = nullptr;
        if (const int e = _state->refusal(h, tok)) return finish_early(e);
        _handle = h;
        if (!start_elsewhere(tok)) to_ring(tok);
        return true;
    }

    int await_resume() noexcept {
        _on_stop.reset();
        return _result;
    }

    void complete(int result, std::uint32_t flags) noexcept override {
        // A zero-copy send completes twice: first its result (with F_MORE), then the
        // notification (F_NOTIF) once the kernel no longer reads the buffer.
        if (!(flags & IORING_CQE_F_NOTIF)) _result = result;
        if (flags & IORING_CQE_F_MORE) return;
        _in_flight = false;
        socket_state* s = _state;
        if (s->destroying) _result = -ECANCELED;  // the task must not touch the stream again
        s->remove(this);
        if (!_abandoned) s->sched->schedule(_handle);  // resumed by the loop, not in the reap
    }

protected:
    explicit socket_request(socket_state& s) noexcept : _state(&s) {}
    ~socket_request() = default;

    virtual void prepare(io_uring_sqe* sqe, int fd) noexcept = 0;

    /// A request that can first try without the ring (a spinning receive) takes over here
    /// and returns true; it later ends through resume_with() or hands over with to_ring().
    virtual bool start_elsewhere(const std::stop_token*) noexcept { return false; }

    /// Puts the request in the ring and in the socket's list; its final completion resumes
    /// the awaiting coroutine. `stop` (may be null) cancels it.
    void to_ring(const std::stop_token* stop) noexcept {
        socket_state& s = *_state;
        prepare(s.ring->prepare(this), s.fd);
        _in_flight = true;
        s.add(this);
        // After prepare(): a cancel queued behind the request finds it.
        if (stop && stop->stop_possible()) _on_stop.emplace(*stop, canceller{this});
    }

    /// Ends a request that never went to the ring: the coroutine resumes with `result` on
    /// the loop's next turn.
    void resume_with(int result) noexcept {
        _result = result;
        _state->sched->schedule(_handle);
    }

    socket_state& state() const noexcept { return *_state; }

    /// For the final class's destructor, before its members go: a frame destroyed with the
    /// request in flight (an exception unwound its task) cancels it and reaps until the
    /// kernel has let go of the buffer and of this object.
    void abandon() noexcept {
        if (!_in_flight) return;
        _abandoned = true;
        _on_stop.reset();
        reactor* ring = _state->ring;
        ring->cancel(this);
        while (_in_flight)
            ring->wait(std::chrono::milliseconds(10));
    }

private:
    struct canceller {
        socket_request* self;
        void operator()() const noexcept {
            // Ask only: the final completion still comes through complete(). The ring is
            // single-issuer, so a stop from a foreign thread would race on the SQ.
            if (scheduler::current() != self->_state->sched) wrong_thread();
            self->_state->ring->cancel(self);
        }
    };

    bool finish_early(int result) noexcept {
        _result = result;
        return false;
    }

    socket_state* _state;
    std::coroutine_handle<> _handle;
    int _result = 0;
    bool _in_flight = false;
    bool _abandoned = false;
    std::optional<std::stop_callback<canceller>> _on_stop;
};

template <class Prep>
class socket_op final : public socket_request {
public:
    socket_op(socket_state& s, Prep prep) noexcept : socket_request(s), _prep(prep) {}
    ~socket_op() { abandon(); }

private:
    void prepare(io_uring_sqe* sqe, int fd) noexcept override { _prep(sqe, fd); }
    Prep _prep;
};

/// `co_await on(state, [](io_uring_sqe*, int fd) {...})`: one request on the socket.
template <class Prep>
socket_op<Prep> on(socket_state& s, Prep prep) noexcept {
    return socket_op<Prep>(s, prep);
}

// ---- spinning receive ------------------------------------------------------------------
//
// While the loop spins, a stream reads its socket itself, with one recv(MSG_DONTWAIT) per
// loop iteration, instead of arming a ring receive. A ring receive costs more per message
// on the path that matters when the loop spins: the socket's wake-up queues task work, the
// loop sees IORING_SQ_TASKRUN and enters the kernel to run it, and only then does the
// completion arrive. UCX and Open MPI read their sockets the same way while they poll.
//
// The receive suspends at once and becomes a poller of the scheduler: its first recv runs
// with the loop's pollers, after the ready tasks (a handler's reply goes out before the
// receiver looks for the next message). It ends when bytes come, the stream ends or fails,
// the stop token fires or close() cancels it. When the spin budget (the scheduler's SPIN_US)
// runs out or the loop wants to sleep, the same request goes into the ring as a plain
// receive, which wakes a sleeping loop: the awaiting coroutine is resumed once, with the
// result, and never touches the stream between the two stages. It is in the socket's list
// in both stages, so close() and the owner's destructor end it before the fd closes.
//
// With a sink (recv_each), bytes that arrive while spinning go to the sink from the poll
// itself and the receive spins on: no task is resumed and nothing re-registered per
// arrival. It ends when the sink says so, or as above; bytes that come by the ring stage
// are the awaiter's, which hands them to the sink itself.
class spin_receive final : public socket_request, public poller {
public:
    spin_receive(socket_state& s, std::span<std::byte> buf, recv_sink sink = {}) noexcept
        : socket_request(s), _buf(buf), _sink(sink) {}
    ~spin_receive() {
        if (_alive) *_alive = false;  // gone inside its sink's nested loop (hand_over)
        leave();                      // the frame went while spinning: unhook, resume nobody
        abandon();                    // or while in the ring: cancel and reap
    }

    /// The sink asked to stop (the awaited result is then 0 and means nothing else).
    [[nodiscard]] bool sink_stopped() const noexcept { return _sink_stopped; }
    /// What the sink threw, for the awaiter to rethrow; null if nothing.
    [[nodiscard]] const std::exception_ptr& sink_failure() const noexcept { return _sink_failure; }

    bool poll() override {
        // Not again from a loop that its own sink runs: the buffer and the sink's state are
        // in use further up the stack.
        if (_alive) return false;
        // Before reading: bytes that keep coming must not outrun a stop request.
        if (_stop && _stop->stop_requested()) return finish(-ECANCELED);
        const int r = try_recv();
        if (r > 0 && _sink.take) return hand_over(static_cast<std::size_t>(r));
        if (r != -EAGAIN) return finish(r);
        // The clock is read every 16th empty poll: a read costs about a tenth of the recv.
        // After bytes came, that reading starts the budget again.
        if ((++_empty_polls & 15) == 0) {
            const auto now = coverse::clock::now();
            if (_restart_budget) {
                _restart_budget = false;
                _deadline = now + state().sched->options().spin;
            } else if (now >= _deadline) {
                leave();
                to_ring(_stop);
                return true;
            }
        }
        return false;
    }

    /// The loop wants to sleep, which it cannot while nothing is armed to wake it: the
    /// next poll hands the receive to the ring. (Not here: leaving the pollers while the
    /// loop asks each of them would make it skip the next one.)
    bool try_sleep() override {
        _deadline = coverse::clock::time_point::min();
        _restart_budget = false;
        _empty_polls = 15;
        return false;
    }

    void cancel(reactor& ring) noexcept override {
        if (_spinning)
            finish(-ECANCELED);
        else
            socket_request::cancel(ring);
    }

private:
    static inline thread_local unsigned t_spinning = 0;  // spinning streams of this thread

    void prepare(io_uring_sqe* sqe, int fd) noexcept override {
        io_uring_prep_recv(sqe, fd, _buf.data(), static_cast<unsigned>(_buf.size()), 0);
    }

    bool start_elsewhere(const std::stop_token* stop) noexcept override {
        socket_state& s = state();
        // Not while every peer's data comes through shared memory (the sockets carry only
        // control frames then), nor for more streams than a loop iteration should afford.
        if (s.sched->shared_memory_only() || t_spinning >= max_spinning_streams) return false;
        s.sched->add_poller(*this);  // first: it may throw, with nothing else changed yet
        _stop = stop;
        _deadline = coverse::clock::now() + s.sched->options().spin;
        s.add(this);
        ++t_spinning;
        _spinning = true;
        return true;
    }

    /// Bytes (> 0), 0 at the end of the stream, -EAGAIN when nothing waits, or -errno.
    int try_recv() noexcept {
        const ssize_t r = recv_now(state().fd, _buf.data(), _buf.size(), MSG_DONTWAIT);
        if (r >= 0) return static_cast<int>(r);
        return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? -EAGAIN : -errno;
    }

    /// n bytes arrived in the buffer while spinning: the sink's. A sink may run a nested
    /// loop (a PE stopping the job relays its reason that way), in which this request may
    /// end (close, cancel) and even be destroyed with its task's frame: `alive` says so.
    bool hand_over(std::size_t n) noexcept {
        bool more = false;
        bool alive = true;
        std::exception_ptr failure;
        _alive = &alive;
        try {
            more = _sink(std::span<const std::byte>(_buf.data(), n));
        } catch (...) {
            failure = std::current_exception();
        }
        if (!alive) {  // nobody awaits it any more: said like a failed task's
            if (failure) coverse::detail::report_spawn_failure("a stream's receive sink", failure);
            return true;
        }
        _alive = nullptr;
        _sink_failure = failure;
        if (!_spinning) return true;  // the sink closed the stream: it ended there
        if (!more || _sink_failure) {
            _sink_stopped = true;
            return finish(0);
        }
        _empty_polls = 0;
        _restart_budget = true;
        return true;
    }

    bool finish(int result) noexcept {
        if (!_spinning) return false;
        leave();
        resume_with(result);  // resumed by the loop, not inside its poll
        return true;
    }

    void leave() noexcept {
        if (!_spinning) return;
        _spinning = false;
        --t_spinning;
        state().sched->remove_poller(*this);
        state().remove(this);
    }

    std::span<std::byte> _buf;
    recv_sink _sink;
    std::exception_ptr _sink_failure;
    bool* _alive = nullptr;  // hand_over's, while its sink runs (set: in the sink)
    const std::stop_token* _stop = nullptr;
    coverse::clock::time_point _deadline{};
    unsigned _empty_polls = 0;
    bool _spinning = false;
    bool _restart_budget = false;
    bool _sink_stopped = false;
};

void socket_state::add(tracked_request* r) noexcept {
    r->_prev = nullptr;
    r->_next = _head;
    if (_head) _head->_prev = r;
    _head = r;
}

void socket_state::remove(tracked_request* r) noexcept {
    if (r->_prev)
        r->_prev->_next = r->_next;
    else
        _head = r->_next;
    if (r->_next) r->_next->_prev = r->_prev;
    r->_prev = r->_next = nullptr;
    if (_head == nullptr && !_drain_waiters.empty()) {
        for (auto h : _drain_waiters)
            sched->schedule(h);
        _drain_waiters.clear();
    }
}

void socket_state::cancel_all() noexcept {
    // A zero-copy send whose result already arrived is not found (its notification
    // follows by itself); anything else completes with -ECANCELED or its partial result.
    // A request that ends at once leaves the list as it is cancelled: step past it first.
    for (tracked_request* r = _head; r;) {
        tracked_request* next = r->_next;
        r->cancel(*ring);
        r = next;
    }
}

task<void> socket_state::close() {
    if (fd < 0) co_return;
    if (scheduler::current() != sched) wrong_thread();
    if (!closing) {
        closing = true;
        cancel_all();
    }
    co_await drain_awaiter(*this);
    if (fd >= 0) {
        ::close(fd);
        fd = -1;
    }
}

socket_state::~socket_state() {
    if (fd < 0) return;
    if (_head) {
        closing = destroying = true;
        cancel_all();
        while (_head)
            ring->wait(std::chrono::milliseconds(10));
    }
    ::close(fd);
}

// ---- addresses and sockets ------------------------------------------------------------

int resolve(const endpoint& at, sockaddr_in& out) {
    out = {};
    out.sin_family = AF_INET;
    out.sin_port = htons(at.port);
    if (::inet_pton(AF_INET, at.host.c_str(), &out.sin_addr) == 1) return 0;
    // A host name: resolved once per connect/listen (blocking, rare), IPv4 only.
    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    if (::getaddrinfo(at.host.c_str(), nullptr, &hints, &res) != 0 || !res) return -EINVAL;
    out.sin_addr = reinterpret_cast<const sockaddr_in*>(res->ai_addr)->sin_addr;
    ::freeaddrinfo(res);
    return 0;
}

std::string name_of(const sockaddr_in& a) {
    char host[INET_ADDRSTRLEN] = {};
    ::inet_ntop(AF_INET, &a.sin_addr, host, sizeof host);
    return endpoint{host, ntohs(a.sin_port)}.to_string();
}

int set_nodelay(int fd) {
    const int one = 1;
    return ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) == 0 ? 0 : -errno;
}

// ---- multishot receive into a provided-buffer ring ------------------------------------
//
// One per stream, created at its first recv_some when multishot is on. Stages: idle (no
// ring yet) → started (buffer ring registered, every buffer in the kernel's ring) → armed
// (one IORING_OP_RECV with IORING_RECV_MULTISHOT + IOSQE_BUFFER_SELECT in flight, owned
// by this object, not by an awaiter) ⇄ unarmed (its last CQE had no F_MORE: re-armed at
// once, or, after -ENOBUFS, as soon as recv_some hands a buffer back) → ended (EOF or an
// error, delivered after the queued data) → released (close() or the destructor reaped the
// request, then unregistered the ring and freed the memory — release() is the one place).
//
// Each data CQE names a buffer (bid) the kernel filled; it queues here in arrival order and
// recv_some copies out of the queue, keeping an offset into a partly read buffer, and gives
// a buffer back to the ring (io_uring_buf_ring_add + advance) once it has been read. At
// most one multishot request exists per stream, so bytes can never arrive out of order.
// The kernel writes into the buffers until the request's final CQE: the memory is freed
// only after that, in release().
class multishot_receiver final : public tracked_request {
public:
    class receive;

    multishot_receiver(socket_state& s, unsigned count, std::size_t size) noexcept
        : _s(s), _count(count), _size(size) {}
    multishot_receiver(const multishot_receiver&) = delete;
    multishot_receiver& operator=(const multishot_receiver&) = delete;

    /// The owner dies: a waiting receive ends with -ECANCELED, the request is cancelled and
    /// reaped (blocking, like socket_request::abandon) before the buffers are freed.
    ~multishot_receiver();

    /// Allocates and registers the buffer ring under a buffer group id no other ring user
    /// holds: 0, or -errno (the stream then receives with plain recv).
    int start();

    /// `co_await receiver(buf)`: > 0 bytes, 0 at EOF, -errno; -ECANCELED after a stop
    /// request (the multishot request stays armed and keeps queueing) or close().
    receive operator()(std::span<std::byte> buf) noexcept;

    /// close() began: a waiting receive ends with -ECANCELED now; socket_state::close()
    /// cancels the request itself.
    void stop_intake() noexcept;

    /// After the final CQE (close() drained the socket): unregisters the ring, frees the
    /// memory. Idempotent.
    void release() noexcept;

    void complete(int result, std::uint32_t flags) noexcept override;

private:
    struct filled {
        std::uint16_t bid;
        std::uint32_t len;
        std::uint32_t off;  // bytes of it already copied out
    };

    std::byte* buffer(std::uint16_t bid) const noexcept { return _bufs + bid * _size; }
    /// Copies queued bytes into `buf`: the count, or the end result once nothing is queued
    /// after EOF or an error, or nothing (the caller waits).
    std::optional<int> take(std::span<std::byte> buf) noexcept;
    void give_back(std::uint16_t bid, int offset) noexcept {
        io_uring_buf_ring_add(_br, buffer(bid), static_cast<unsigned>(_size), bid,
                              io_uring_buf_ring_mask(_count), offset);
    }
    /// Arms the multishot request unless it is armed, ended, closing, or the kernel's ring
    /// has no buffer (then -ENOBUFS would end it at once; the next give_back re-arms).
    void arm() noexcept;
    void wake_waiter(int result) noexcept;

    socket_state& _s;
    const unsigned _count;  // a power of two
    const std::size_t _size;
    io_uring_buf_ring* _br = nullptr;
    std::byte* _bufs = nullptr;
    int _bgid = -1;
    std::vector<filled> _queue;  // circular, _count slots: each bid is queued at most once
    unsigned _q_head = 0;
    unsigned _q_len = 0;
    unsigned _in_ring = 0;  // buffers the kernel may fill
    bool _armed = false;
    bool _ended = false;
    int _end_result = 0;  // 0 (EOF) or -errno, once _ended
    bool _dying = false;
    receive* _waiter = nullptr;
};

class multishot_receiver::receive {
public:
    receive(multishot_receiver& r, std::span<std::byte> buf) noexcept : _r(r), _buf(buf) {}
    receive(const receive&) = delete;
    receive& operator=(const receive&) = delete;
    ~receive() {
        if (_waiting) _r._waiter = nullptr;  // the frame was destroyed while it waited
    }

    bool await_ready() const noexcept { return false; }

    template <class P>
    bool await_suspend(std::coroutine_handle<P> h) {
        socket_state& s = _r._s;
        if (scheduler::current() != s.sched) wrong_thread();
        if (s.fd < 0) return finish_early(-EBADF);
        if (s.closing) return finish_early(-ECANCELED);
        if (_buf.empty()) return finish_early(0);  // what recv(2) of nothing returns
        if (auto r = _r.take(_buf)) return finish_early(*r);
        const std::stop_token* tok = nullptr;
        if constexpr (coverse::detail::has_stop_v<P>) tok = h.promise().stop();
        if (tok && tok->stop_requested()) return finish_early(-ECANCELED);
        _r.arm();  // nothing is queued, so every buffer is in the kernel's ring
        _handle = h;
        _waiting = true;
        _r._waiter = this;
        if (tok && tok->stop_possible()) _on_stop.emplace(*tok, on_stop{this});
        return true;
    }

    int await_resume() noexcept {
        _on_stop.reset();
        return _result;
    }

private:
    friend class multishot_receiver;

    struct on_stop {
        receive* self;
        void operator()() const noexcept {
            // Only this receive ends: the request stays armed, later data stays queued.
            if (scheduler::current() != self->_r._s.sched) wrong_thread();
            if (self->_waiting) self->wake(-ECANCELED);
        }
    };

    bool finish_early(int result) noexcept {
        _result = result;
        return false;
    }
    // The result is final before the resumption, which the loop runs later: nothing after
    // this touches the receiver, which may be gone by then.
    void wake(int result) noexcept {
        _result = result;
        _waiting = false;
        _r._waiter = nullptr;
        _r._s.sched->schedule(_handle);
    }

    multishot_receiver& _r;
    std::span<std::byte> _buf;
    std::coroutine_handle<> _handle;
    int _result = 0;
    bool _waiting = false;
    std::optional<std::stop_callback<on_stop>> _on_stop;
};

multishot_receiver::receive multishot_receiver::operator()(std::span<std::byte> buf) noexcept {
    return receive(*this, buf);
}

int multishot_receiver::start() {
    constexpr std::size_t page = 4096;
    auto round_up = [](std::size_t n) { return (n + page - 1) / page * page; };
    void* ring_mem = std::aligned_alloc(page, round_up(_count * sizeof(io_uring_buf)));
    void* buf_mem = std::aligned_alloc(page, round_up(_count * _size));
    if (!ring_mem || !buf_mem) {
        std::free(ring_mem);
        std::free(buf_mem);
        return -ENOMEM;
    }
    std::memset(ring_mem, 0, round_up(_count * sizeof(io_uring_buf)));
    _br = static_cast<io_uring_buf_ring*>(ring_mem);
    io_uring_buf_ring_init(_br);
    io_uring_buf_reg reg{};
    reg.ring_addr = reinterpret_cast<std::uint64_t>(ring_mem);
    reg.ring_entries = _count;
    // Group ids are per ring; streams of other schedulers may hold the same one, ours not:
    // a taken id answers -EEXIST and the next is tried.
    static std::atomic<std::uint16_t> next_bgid{0};
    int r = -EEXIST;
    for (unsigned tries = 0; r == -EEXIST && tries <= 0xffff; ++tries) {
        reg.bgid = next_bgid.fetch_add(1, std::memory_order_relaxed);
        r = io_uring_register_buf_ring(_s.ring->ring(), &reg, 0);
    }
    if (r < 0) {
        _br = nullptr;
        std::free(ring_mem);
        std::free(buf_mem);
        return r;
    }
    _bgid = reg.bgid;
    _bufs = static_cast<std::byte*>(buf_mem);
    _queue.resize(_count);
    for (unsigned i = 0; i < _count; ++i)
        give_back(static_cast<std::uint16_t>(i), static_cast<int>(i));
    io_uring_buf_ring_advance(_br, static_cast<int>(_count));
    _in_ring = _count;
    return 0;
}

void multishot_receiver::arm() noexcept {
    if (_armed || _ended || _dying || !_br || _s.closing || _s.fd < 0 || _in_ring == 0) return;
    io_uring_sqe* sqe = _s.ring->prepare(this);
    io_uring_prep_recv_multishot(sqe, _s.fd, nullptr, 0, 0);
    sqe->flags |= IOSQE_BUFFER_SELECT;
    sqe->buf_group = static_cast<std::uint16_t>(_bgid);
    _armed = true;
    _s.add(this);
}

std::optional<int> multishot_receiver::take(std::span<std::byte> buf) noexcept {
    const std::size_t want = std::min(buf.size(), max_request_bytes);
    std::size_t n = 0;
    int returned = 0;
    while (n < want && _q_len > 0) {
        filled& f = _queue[_q_head];
        const std::size_t k = std::min<std::size_t>(want - n, f.len - f.off);
        std::memcpy(buf.data() + n, buffer(f.bid) + f.off, k);
        n += k;
        f.off += static_cast<std::uint32_t>(k);
        if (f.off == f.len) {
            give_back(f.bid, returned++);
            _q_head = (_q_head + 1) & (_count - 1);
            --_q_len;
        }
    }
    if (returned > 0) {
        io_uring_buf_ring_advance(_br, returned);
        _in_ring += static_cast<unsigned>(returned);
        arm();  // after -ENOBUFS the request waits for buffers: here they are
    }
    if (n > 0) return static_cast<int>(n);
    if (_ended) return _end_result;
    return std::nullopt;
}

void multishot_receiver::complete(int result, std::uint32_t flags) noexcept {
    if (flags & IORING_CQE_F_BUFFER) {
        const auto bid = static_cast<std::uint16_t>(flags >> IORING_CQE_BUFFER_SHIFT);
        --_in_ring;
        if (result > 0) {
            _queue[(_q_head + _q_len) & (_count - 1)] = {bid, static_cast<std::uint32_t>(result),
                                                         0};
            ++_q_len;
        } else {
            give_back(bid, 0);  // a buffer picked for nothing: straight back
            io_uring_buf_ring_advance(_br, 1);
            ++_in_ring;
        }
    }
    // -ENOBUFS: the ring ran dry (the reader is behind); the request ended without data
    // and is re-armed once a buffer is back. Anything else non-positive ends the stream:
    // 0 is EOF, -ECANCELED our own cancel (close, destructor), the rest socket errors.
    if (result <= 0 && result != -ENOBUFS && !_ended) {
        _ended = true;
        _end_result = result;
    }
    if (!(flags & IORING_CQE_F_MORE)) {
        _armed = false;
        _s.remove(this);
        arm();
    }
    if (_waiter) {
        if (auto r = take(_waiter->_buf)) _waiter->wake(*r);
    }
}

void multishot_receiver::wake_waiter(int result) noexcept {
    if (_waiter) _waiter->wake(result);
}

void multishot_receiver::stop_intake() noexcept {
    wake_waiter(-ECANCELED);
}

void multishot_receiver::release() noexcept {
    if (!_br || _armed) return;
    io_uring_unregister_buf_ring(_s.ring->ring(), _bgid);
    std::free(_br);
    std::free(_bufs);
    _br = nullptr;
    _bufs = nullptr;
    _q_len = 0;
    _in_ring = 0;
}

multishot_receiver::~multishot_receiver() {
    _dying = true;
    wake_waiter(-ECANCELED);
    if (_armed) {
        _s.ring->cancel(this);
        while (_armed)
            _s.ring->wait(std::chrono::milliseconds(10));
    }
    release();
}

// ---- stream ---------------------------------------------------------------------------

class uring_stream final : public stream {
public:
    uring_stream(scheduler& s, int fd, std::string peer, const uring_settings& cfg) noexcept
        : _state(s, fd), _peer(std::move(peer)), _cfg(cfg) {}

    task<int> send_all(std::span<const std::span<const std::byte>> parts) override;
    int try_send(std::span<const std::span<const std::byte>> parts) noexcept override;
    task<int> recv_all(std::span<std::byte> buf) override;
    task<int> recv_some(std::span<std::byte> buf) override;
    task<int> recv_each(std::span<std::byte> buf, recv_sink sink) override;
    void shutdown_send() noexcept override {
        if (_state.fd >= 0) ::shutdown(_state.fd, SHUT_WR);
    }
    task<void> close() override;
    const std::string& peer_name() const noexcept override { return _peer; }

    /// IORING_OP_CONNECT on the (non-blocking) socket: 0 or -errno.
    task<int> connect(sockaddr_in to);

private:
    socket_state _state;
    std::string _peer;
    uring_settings _cfg;
    bool _multishot_failed = false;  // registering the ring failed: plain recv from then on
    // Declared after _state, so destroyed before it: its destructor reaps its request
    // while the fd is still open, then frees the buffers.
    std::optional<multishot_receiver> _multishot;
};

task<void> uring_stream::close() {
    if (_multishot) _multishot->stop_intake();
    co_await _state.close();
    if (_multishot) _multishot->release();
}

namespace {
// Steps past `sent` bytes of iov[first..]: a partly sent iovec continues from its remainder.
// Returns the first iovec with bytes left.
std::size_t step_past(iovec* iov, std::size_t first, std::size_t sent) noexcept {
    while (sent > 0) {
        iovec& v = iov[first];
        if (sent >= v.iov_len) {
            sent -= v.iov_len;
            ++first;
        } else {
            v.iov_base = static_cast<std::byte*>(v.iov_base) + sent;
            v.iov_len -= sent;
            sent = 0;
        }
    }
    return first;
}
}  // namespace

task<int> uring_stream::send_all(std::span<const std::span<const std::byte>> parts) {
    // The iovecs live in this frame, which outlives every request below (each resumes us
    // only at its final completion). Empty parts are dropped: they would only cost slots.
    constexpr std::size_t inline_parts = 8;
    iovec inline_iov[inline_parts];
    std::vector<iovec> heap_iov;
    std::size_t count = 0;
    for (const auto& p : parts)
        count += p.empty() ? 0 : 1;
    iovec* iov = inline_iov;
    if (count > inline_parts) {
        heap_iov.resize(count);
        iov = heap_iov.data();
    }
    std::size_t k = 0;
    for (const auto& p : parts)
        if (!p.empty()) iov[k++] = {const_cast<std::byte*>(p.data()), p.size()};

    std::size_t first = 0;
    // Try first: one non-blocking sendmsg puts a small frame on the wire now, instead of
    // after the loop's next trip into the kernel plus a completion to reap (the same one
    // system call either way). What does not fit goes through io_uring below.
    if (_state.fd >= 0 && !_state.closing && _cfg.zc_threshold == 0 && count > 0) {
        msghdr msg{};
        msg.msg_iov = iov;
        msg.msg_iovlen = std::min(count, max_iov);
        const ssize_t r = sendmsg_now(_state.fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) co_return -errno;
        if (r > 0) first = step_past(iov, first, static_cast<std::size_t>(r));
    }

    // MSG_WAITALL: the kernel itself continues a short send on a stream socket, so one
    // request usually carries the whole gather; the loop covers caps, signals and slices.
    constexpr int flags = MSG_NOSIGNAL | MSG_WAITALL;
    while (first < count) {
        const std::size_t n = std::min(count - first, max_iov);
        std::size_t bytes = 0;
        for (std::size_t i = first; i < first + n; ++i)
            bytes += iov[i].iov_len;
        const bool zc =
            _cfg.zc_threshold != 0 && bytes >= _cfg.zc_threshold && (n == 1 || _cfg.sendmsg_zc);
        int r = 0;
        if (n == 1) {
            void* p = iov[first].iov_base;
            const auto len = static_cast<unsigned>(std::min(iov[first].iov_len, max_request_bytes));
            if (zc)
                r = co_await on(_state, [p, len, flags](io_uring_sqe* sqe, int fd) {
                    io_uring_prep_send_zc(sqe, fd, p, len, flags, 0);
                });
            else
                r = co_await on(_state, [p, len, flags](io_uring_sqe* sqe, int fd) {
                    io_uring_prep_send(sqe, fd, p, len, flags);
                });
        } else {
            msghdr msg{};
            msg.msg_iov = iov + first;
            msg.msg_iovlen = n;
            msghdr* m = &msg;
            if (zc)
                r = co_await on(_state, [m, flags](io_uring_sqe* sqe, int fd) {
                    io_uring_prep_sendmsg_zc(sqe, fd, m, flags);
                });
            else
                r = co_await on(_state, [m, flags](io_uring_sqe* sqe, int fd) {
                    io_uring_prep_sendmsg(sqe, fd, m, flags);
                });
        }
        if (r < 0) co_return r;
        if (r == 0) co_return -EPIPE;  // a stream socket accepted nothing: never spin on it
        first = step_past(iov, first, static_cast<std::size_t>(r));
    }
    co_return 0;
}

// One non-blocking sendmsg, as send_all's first try, for a caller that has nothing else in
// flight on this stream (net::mesh::flush, while the writer idles): queued frames leave
// within the caller's own call, with no writer turn and no task frame in between.
int uring_stream::try_send(std::span<const std::span<const std::byte>> parts) noexcept {
    if (_state.fd < 0 || _state.closing || _cfg.zc_threshold != 0) return 0;
    constexpr std::size_t max_parts = 160;  // a writer's batch: 64 frames, header + payload
    iovec iov[max_parts];
    std::size_t n = 0;
    for (const auto& p : parts) {
        if (p.empty()) continue;
        if (n == max_parts) break;  // the rest goes by the writer
        iov[n++] = {const_cast<std::byte*>(p.data()), p.size()};
    }
    if (n == 0) return 0;
    // One buffer by send(): the kernel imports it without a message header or an iovec
    // array (~3 % of an 8 B hop over loopback TCP against sendmsg of two parts).
    ssize_t r;
    if (n == 1) {
        r = send_now(_state.fd, iov[0].iov_base, iov[0].iov_len, MSG_NOSIGNAL | MSG_DONTWAIT);
    } else {
        msghdr msg{};
        msg.msg_iov = iov;
        msg.msg_iovlen = n;
        r = sendmsg_now(_state.fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    if (r >= 0) return static_cast<int>(r);
    return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -errno;
}

task<int> uring_stream::recv_some(std::span<std::byte> buf) {
    if (_cfg.recv_multishot && !_multishot && !_multishot_failed && _state.fd >= 0 &&
        !_state.closing) {
        // First receive: the ring is registered now, not at connect, so streams that only
        // send cost no buffers.
        _multishot.emplace(_state, _cfg.recv_buffers, _cfg.recv_buffer_size);
        if (const int e = _multishot->start(); e < 0) {
            _multishot.reset();
            _multishot_failed = true;
            static std::atomic<bool> reported{false};
            if (!reported.exchange(true))
                std::fprintf(stderr,
                             "coverse: multishot receive is off for the stream from %s (and "
                             "maybe others): registering its provided-buffer ring of %u x %zu "
                             "bytes failed: %s; it receives with plain recv. Raise the "
                             "locked-memory limit (ulimit -l), lower COVERSE_RECV_BUFFERS or "
                             "COVERSE_RECV_BUFFER_SIZE, or set COVERSE_RECV_MULTISHOT=0\n",
                             _peer.c_str(), _cfg.recv_buffers, _cfg.recv_buffer_size,
                             std::strerror(-e));
        }
    }
    if (_multishot) co_return co_await (*_multishot)(buf);
    // Plain receive: multishot is off, or registering this stream's ring failed.
    void* p = buf.data();
    const auto len = static_cast<unsigned>(std::min(buf.size(), max_request_bytes));
    if (_cfg.recv_spin) co_return co_await spin_receive(_state, buf.first(len));
    co_return co_await on(
        _state, [p, len](io_uring_sqe* sqe, int fd) { io_uring_prep_recv(sqe, fd, p, len, 0); });
}

task<int> uring_stream::recv_each(std::span<std::byte> buf, recv_sink sink) {
    // Multishot (when asked for) serves every receive; without the spinning receive there
    // is no poll to hand bytes over from.
    if (!_cfg.recv_spin || (_cfg.recv_multishot && !_multishot_failed))
        co_return co_await stream::recv_each(buf, sink);
    require_take(sink);
    buf = buf.first(std::min(buf.size(), max_request_bytes));
    for (;;) {
        spin_receive r(_state, buf, sink);
        const int n = co_await r;
        if (r.sink_failure()) std::rethrow_exception(r.sink_failure());
        if (r.sink_stopped()) co_return 1;
        if (n <= 0) co_return n;
        // The ring stage's bytes (the loop had stopped spinning).
        if (!sink(buf.first(static_cast<std::size_t>(n)))) co_return 1;
    }
}

task<int> uring_stream::recv_all(std::span<std::byte> buf) {
    if (_multishot) co_return co_await (*_multishot)(buf);  // buffers are the ring's
    // MSG_WAITALL: io_uring retries short receives itself and completes once, when the
    // whole payload is in (or the stream ended or failed first).
    void* p = buf.data();
    const auto len = static_cast<unsigned>(std::min(buf.size(), max_request_bytes));
    co_return co_await on(_state, [p, len](io_uring_sqe* sqe, int fd) {
        io_uring_prep_recv(sqe, fd, p, len, MSG_WAITALL);
    });
}

task<int> uring_stream::connect(sockaddr_in to) {
    // `to` lives in this frame until the request's final completion. On a non-blocking
    // socket io_uring waits for the handshake itself (it arms a poll on EINPROGRESS).
    const sockaddr_in* a = &to;
    co_return co_await on(_state, [a](io_uring_sqe* sqe, int fd) {
        io_uring_prep_connect(sqe, fd, reinterpret_cast<const sockaddr*>(a), sizeof *a);
    });
}

// ---- listener -------------------------------------------------------------------------

class uring_listener final : public listener {
public:
    uring_listener(scheduler& s, int fd, endpoint local, const uring_settings& cfg) noexcept
        : _state(s, fd), _local(std::move(local)), _cfg(cfg) {}

    task<io_result<std::unique_ptr<stream>>> accept() override;
    endpoint local() const override { return _local; }
    task<void> close() override { return _state.close(); }

private:
    socket_state _state;
    endpoint _local;
    uring_settings _cfg;
};

task<io_result<std::unique_ptr<stream>>> uring_listener::accept() {
    // The peer address is written by the kernel: it lives in this frame, declared before
    // the request, so it outlives it.
    sockaddr_in peer{};
    socklen_t peer_len = sizeof peer;
    sockaddr_in* pa = &peer;
    socklen_t* pl = &peer_len;
    const int fd = co_await on(_state, [pa, pl](io_uring_sqe* sqe, int lfd) {
        io_uring_prep_accept(sqe, lfd, reinterpret_cast<sockaddr*>(pa), pl,
                             SOCK_CLOEXEC | SOCK_NONBLOCK);
    });
    if (fd < 0) co_return stream_result{nullptr, fd};
    if (const int e = set_nodelay(fd); e < 0) {
        ::close(fd);
        co_return stream_result{nullptr, e};
    }
    co_return stream_result{std::make_unique<uring_stream>(*_state.sched, fd, name_of(peer), _cfg),
                            0};
}

// ---- backend --------------------------------------------------------------------------

class uring_backend final : public backend {
public:
    uring_backend(scheduler& s, uring_settings cfg, std::string multishot_off_why) noexcept
        : _sched(s), _cfg(cfg), _multishot_off_why(std::move(multishot_off_why)) {}

    std::string_view name() const noexcept override { return "io_uring"; }

    std::string describe() const override {
        std::string s = _sched.io()->describe();
        s += _cfg.zc_threshold ? " zc_threshold=" + std::to_string(_cfg.zc_threshold)
                               : std::string(" zc_threshold=off");
        if (_cfg.zc_threshold && !_cfg.sendmsg_zc) s += " (single-part sends only)";
        if (_cfg.recv_multishot)
            s += " recv_multishot=on (" + std::to_string(_cfg.recv_buffers) + " x " +
                 std::to_string(_cfg.recv_buffer_size) + " B buffers per stream)";
        else
            s += " recv_multishot=off (" + _multishot_off_why + ")";
        if (!_cfg.recv_multishot) s += _cfg.recv_spin ? " recv_spin=on" : " recv_spin=off";
        return s;
    }

    task<io_result<std::unique_ptr<stream>>> connect(endpoint to) override {
        sockaddr_in addr{};
        if (const int e = resolve(to, addr); e < 0) co_return stream_result{nullptr, e};
        const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0) co_return stream_result{nullptr, -errno};
        if (const int e = set_nodelay(fd); e < 0) {
            ::close(fd);
            co_return stream_result{nullptr, e};
        }
        auto s = std::make_unique<uring_stream>(_sched, fd, name_of(addr), _cfg);
        const int r = co_await s->connect(addr);
        if (r < 0) {
            co_await s->close();
            co_return stream_result{nullptr, r};
        }
        co_return stream_result{std::move(s), 0};
    }

    io_result<std::unique_ptr<listener>> listen(const endpoint& at) override {
        sockaddr_in addr{};
        if (const int e = resolve(at, addr); e < 0) return {nullptr, e};
        const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0) return {nullptr, -errno};
        auto fail = [fd] {
            const int e = -errno;
            ::close(fd);
            return io_result<std::unique_ptr<listener>>{nullptr, e};
        };
        const int one = 1;
        if (::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0) return fail();
        if (::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) return fail();
        if (::listen(fd, SOMAXCONN) != 0) return fail();
        sockaddr_in bound{};
        socklen_t len = sizeof bound;
        if (::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len) != 0) return fail();
        return {std::make_unique<uring_listener>(_sched, fd,
                                                 endpoint{at.host, ntohs(bound.sin_port)}, _cfg),
                0};
    }

private:
    scheduler& _sched;
    uring_settings _cfg;
    std::string _multishot_off_why;
};

// A decimal count: nullopt if it is not one.
std::optional<unsigned long long> parse_count(const std::string& s) {
    return alloc::parse_count(s);
}

std::size_t zc_threshold_from_env() {
    const auto v = alloc::env_setting("ZC_THRESHOLD");
    if (!v) return default_zc_threshold;
    const std::string& s = v->value;
    if (s == "off") return 0;
    const auto n = alloc::parse_size(s);
    if (!n)
        throw std::invalid_argument("coverse: " + v->variable + "=" + s +
                                    " is not a size in bytes; use e.g. 65536 (zero-copy "
                                    "send from 64 KiB up), or 0/off to turn it off");
    return static_cast<std::size_t>(*n);
}

// A switch setting (1/0, on/off, ...); unset is `fallback`. A value that is not a switch is
// an error that says what each value does. `set_by` receives "COVERSE_X=v" when it is set.
bool switch_from_env(const char* name, bool fallback, const char* on_means, const char* off_means,
                     std::string* set_by = nullptr) {
    const auto v = alloc::env_setting(name);
    if (!v) return fallback;
    const auto on = alloc::parse_switch(v->value);
    if (!on)
        throw std::invalid_argument(
            "coverse: " + v->variable + "=" + v->value + " is not a switch; use 1 (or on) " +
            on_means + ", 0 (or off) " + off_means + ", or leave it unset for the default (" +
            (fallback ? "1" : "0") + ")");
    if (set_by) *set_by = v->variable + "=" + v->value;
    return *on;
}

// RECV_MULTISHOT: `why_off` receives what turned it off when it is off.
bool recv_multishot_from_env(std::string& why_off) {
    why_off = "off by default; COVERSE_RECV_MULTISHOT=1 turns it on";
    return switch_from_env("RECV_MULTISHOT", default_recv_multishot,
                           "for multishot receive into a provided-buffer ring",
                           "for one plain receive per call", &why_off);
}

bool recv_spin_from_env() {
    return switch_from_env("RECV_SPIN", default_recv_spin,
                           "to read sockets with recv while the loop spins",
                           "to receive through the ring only");
}

void recv_ring_from_env(uring_settings& cfg) {
    if (const auto v = alloc::env_setting("RECV_BUFFERS")) {
        const auto n = parse_count(v->value);
        if (!n || *n == 0 || *n > max_recv_buffers || (*n & (*n - 1)) != 0)
            throw std::invalid_argument(
                "coverse: " + v->variable + "=" + v->value + " is not a power of two from 1 to " +
                std::to_string(max_recv_buffers) +
                "; it is the number of receive buffers per stream, e.g. 32");
        cfg.recv_buffers = static_cast<unsigned>(*n);
    }
    if (const auto v = alloc::env_setting("RECV_BUFFER_SIZE")) {
        const auto n = alloc::parse_size(v->value);
        if (!n || *n == 0 || *n > max_recv_buffer_size)
            throw std::invalid_argument("coverse: " + v->variable + "=" + v->value +
                                        " is not a size in bytes from 1 to " +
                                        std::to_string(max_recv_buffer_size) + ", e.g. 32768");
        cfg.recv_buffer_size = static_cast<std::size_t>(*n);
    }
}

}  // namespace

std::unique_ptr<backend> make_uring_backend(scheduler& sched, std::string* why) {
    reactor* ring = sched.io();
    if (!ring) {
        if (why)
            *why = "the scheduler has no io_uring ring (" + sched.io_unavailable_reason() +
                   "); use COVERSE_NET_BACKEND=asio or auto";
        return nullptr;
    }
    uring_settings cfg;
    cfg.zc_threshold = ring->features().send_zc ? zc_threshold_from_env() : 0;
    if (cfg.zc_threshold) {
        if (io_uring_probe* probe = io_uring_get_probe_ring(ring->ring())) {
            cfg.sendmsg_zc = io_uring_opcode_supported(probe, IORING_OP_SENDMSG_ZC);
            io_uring_free_probe(probe);
        }
    }
    // Read (and checked) even where the kernel lacks buffer rings: a bad value is an error
    // on every machine, not only on those that would use it.
    std::string off_why;
    const bool want_multishot = recv_multishot_from_env(off_why);
    recv_ring_from_env(cfg);
    if (want_multishot)
        off_why =
            ring->features().buf_ring ? "" : "this kernel cannot register provided-buffer rings";
    cfg.recv_multishot = off_why.empty();
    cfg.recv_spin = recv_spin_from_env();
    return std::make_unique<uring_backend>(sched, cfg, std::move(off_why));
}

}  // namespace coverse::net
