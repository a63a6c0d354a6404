// asio_backend: coverse::net::backend on standalone Asio, for schedulers without io_uring.
// Asio's io_context is one of the scheduler's pollers (and does its blocking when there is
// no ring); every Asio operation completes into an immovable awaiter in the suspended
// coroutine's frame, which the loop then resumes. Asio stays inside this file.
#include <coverse/net/transport.hpp>

#include <unistd.h>

#include <asio/bind_cancellation_slot.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/error.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/posix/stream_descriptor.hpp>
#include <asio/version.hpp>
#include <asio/write.hpp>

#include <algorithm>
#include <array>
#include <cerrno>
#include <climits>
#include <coroutine>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <optional>
#include <stop_token>
#include <utility>
#include <vector>

namespace coverse::net {
namespace {

using tcp = asio::ip::tcp;
using stream_result = io_result<std::unique_ptr<stream>>;

/// The one place Asio's error codes become coverse's -errno values. On POSIX Asio reports
/// socket errors in the system category, whose values are errno already
/// (connection_refused = ECONNREFUSED, operation_aborted = ECANCELED, ...).
int to_errno(const asio::error_code& ec) noexcept {
    if (!ec) return 0;
    if (ec.category() == asio::system_category() || ec.category() == std::generic_category())
        return -ec.value();
    // A receive maps eof to 0 itself; anywhere else the peer has ended the stream.
    if (ec == asio::error::eof) return -EPIPE;
    if (ec == asio::error::already_open) return -EISCONN;
    return -EIO;
}

const char* reactor_name() noexcept {
#if defined(ASIO_HAS_IO_URING_AS_DEFAULT)
    return "io_uring";
#elif defined(ASIO_HAS_EPOLL)
    return "epoll";
#elif defined(ASIO_HAS_KQUEUE)
    return "kqueue";
#else
    return "select";
#endif
}

// ---- the poller ---------------------------------------------------------------------

/// One io_context per scheduler, shared by the backend, its streams and its listeners (each
/// holds a shared_ptr, so a stream that outlives the backend still has its event loop).
/// Only one per scheduler: the scheduler lets a single poller do its blocking, and a second
/// io_context's sockets would then never wake it.
class asio_core final : public poller {
public:
    static std::shared_ptr<asio_core> for_scheduler(scheduler& s) {
        // Keyed by scheduler on the thread that runs it: a scheduler is single-threaded.
        thread_local std::vector<std::pair<scheduler*, std::weak_ptr<asio_core>>> cores;
        std::erase_if(cores, [](const auto& c) { return c.second.expired(); });
        for (auto& [sched, core] : cores)
            if (sched == &s) return core.lock();
        auto core = std::make_shared<asio_core>(s);
        cores.emplace_back(&s, core);
        return core;
    }

    explicit asio_core(scheduler& s) : _sched(s) { _sched.add_poller(*this); }
    ~asio_core() override {
        _sched.remove_poller(*this);
        // Closing the wake descriptor aborts its read; the io_context's destructor then
        // destroys that handler without running it. No socket operation is left: every
        // stream and listener holds this core until its own operations have completed.
        _wake.reset();
        _keep_running.reset();
    }
    asio_core(const asio_core&) = delete;
    asio_core& operator=(const asio_core&) = delete;

    asio::io_context& context() noexcept { return _ctx; }
    scheduler& sched() noexcept { return _sched; }
    bool has_ring() noexcept { return _sched.io() != nullptr; }

    void op_started() noexcept { ++_outstanding; }
    void op_finished() noexcept { --_outstanding; }

    /// Runs Asio handlers until `done()`, for a destructor that must see the final
    /// completion of operations it has just cancelled (their handlers are already queued,
    /// so this does not wait for the network).
    template <class Pred>
    void drive_until(Pred done) {
        while (!done())
            _ctx.run_one();
    }

    bool poll() override {
        // Nothing of ours in flight: skip the epoll_wait(0) that ctx.poll() would cost.
        // A wake-up read that completes meanwhile is reaped by the next block().
        if (_outstanding == 0) return false;
        return _ctx.poll() > 0;
    }

    bool try_sleep() override {
        // With a ring the scheduler sleeps in io_uring, which cannot see Asio's epoll set:
        // while a socket operation waits, keep the loop polling instead.
        return !has_ring() || _outstanding == 0;
    }

    bool block(std::chrono::nanoseconds timeout, int wake_fd) override {
        if (!arm_wake(wake_fd)) {
            // Without our own view of the eventfd a cross-thread post could not end the
            // wait: wait in short slices so posts are still seen within a millisecond.
            const std::chrono::nanoseconds slice = std::chrono::milliseconds(1);
            _ctx.run_one_for(timeout.count() < 0 ? slice : std::min(timeout, slice));
            return true;
        }
        if (timeout.count() < 0)
            _ctx.run_one();
        else
            _ctx.run_one_for(timeout);
        return true;
    }

private:
    /// Keeps a read of the scheduler's eventfd armed in Asio's reactor, so a post from
    /// another thread ends run_one(); the read consumes the counter, as block() must.
    bool arm_wake(int wake_fd) {
        if (_wake_armed) return true;
        if (!_wake) {
            if (_wake_failed) return false;
            // A dup, so that closing our descriptor never closes the scheduler's eventfd.
            const int fd = ::dup(wake_fd);
            if (fd < 0) {
                _wake_failed = true;
                std::fprintf(stderr,
                             "coverse: asio backend: dup of the scheduler's eventfd failed: %s; "
                             "idle waits fall back to 1 ms slices (raise the open-files "
                             "limit: ulimit -n)\n",
                             std::strerror(errno));
                return false;
            }
            _wake.emplace(_ctx, fd);
        }
        _wake_armed = true;
        // Asio tries the read at once: a counter already set completes it immediately.
        _wake->async_read_some(asio::buffer(&_wake_value, sizeof _wake_value),
                               [this](const asio::error_code&, std::size_t) {
                                   // Re-armed by the next block(): while the loop spins it
                                   // takes remote posts from their queue directly.
                                   _wake_armed = false;
                               });
        return true;
    }

    scheduler& _sched;
    asio::io_context _ctx{1};
    asio::executor_work_guard<asio::io_context::executor_type> _keep_running =
        asio::make_work_guard(_ctx);  // run_one() waits for events instead of returning
    std::optional<asio::posix::stream_descriptor> _wake;  // declared after _ctx: dies first
    std::uint64_t _wake_value = 0;
    bool _wake_armed = false;
    bool _wake_failed = false;
    std::size_t _outstanding = 0;  // socket operations whose handler has not run yet
};

// ---- one awaited operation ----------------------------------------------------------

class op_owner;

/// The state one Asio handler writes into. It lives in the awaiter, in the suspended
/// coroutine's frame, so it cannot move while the operation is in flight.
struct op_state {
    asio_core* core = nullptr;
    op_owner* owner = nullptr;  // the stream or listener counting it; null once that is gone
    op_state* prev = nullptr;
    op_state* next = nullptr;
    std::coroutine_handle<> handle;
    asio::error_code ec;
    std::size_t bytes = 0;
    bool in_flight = false;
    bool abandoned = false;  // the frame is being destroyed: never resume it

    void finish(const asio::error_code& e, std::size_t n) noexcept;
};

/// The stream's or listener's list of its operations in flight, for close() (wait until
/// they have all completed) and for the destructor (cancel them and see them complete).
class op_owner {
public:
    op_owner() = default;
    op_owner(const op_owner&) = delete;
    op_owner& operator=(const op_owner&) = delete;

    bool idle() const noexcept { return _ops == nullptr; }

    void attach(op_state& op) noexcept {
        op.prev = nullptr;
        op.next = _ops;
        if (_ops) _ops->prev = &op;
        _ops = &op;
    }

    void detach(op_state& op) noexcept {
        if (op.prev)
            op.prev->next = op.next;
        else
            _ops = op.next;
        if (op.next) op.next->prev = op.prev;
        op.prev = op.next = nullptr;
        op.owner = nullptr;
        if (idle() && !_idle_waiters.empty()) {
            scheduler& s = op.core->sched();
            for (auto h : _idle_waiters)
                s.schedule(h);
            _idle_waiters.clear();
        }
    }

    /// `co_await wait_idle()`: until every operation in flight has completed. Deliberately
    /// not cancellable: it only ever follows a cancel, whose completions are on their way.
    auto wait_idle() noexcept {
        struct awaiter {
            op_owner* self;
            bool await_ready() const noexcept { return self->idle(); }
            void await_suspend(std::coroutine_handle<> h) { self->_idle_waiters.push_back(h); }
            void await_resume() const noexcept {}
        };
        return awaiter{this};
    }

protected:
    ~op_owner() {
        for (op_state* op = _ops; op; op = op->next)
            op->owner = nullptr;
    }

private:
    op_state* _ops = nullptr;
    std::vector<std::coroutine_handle<>> _idle_waiters;
};

void op_state::finish(const asio::error_code& e, std::size_t n) noexcept {
    ec = e;
    bytes = n;
    in_flight = false;
    core->op_finished();
    // The operation's own coroutine is queued before anyone waiting in close(), so it
    // runs first; neither runs inside Asio's handler.
    if (!abandoned) core->sched().schedule(handle);
    if (owner) owner->detach(*this);
}

/// The completion handler given to Asio: two pointers' worth, so Asio's recycling
/// allocator serves it. Both signatures: reads and writes report bytes, accept and
/// connect do not.
struct on_complete {
    op_state* op;
    void operator()(const asio::error_code& ec) const noexcept { op->finish(ec, 0); }
    void operator()(const asio::error_code& ec, std::size_t n) const noexcept { op->finish(ec, n); }
};

struct op_result {
    asio::error_code ec;
    std::size_t bytes = 0;
};

/// Why streams try their reads and sends synchronously before handing them to Asio: Asio
/// 1.22's epoll reactor counts a stream read or send that moves no bytes (end of stream, or
/// an error) as "exhausted", and then defers the descriptor's next operation of that kind
/// until the next edge-triggered event. Once the end of stream or the reset has been
/// reported no event ever comes again, so a second recv_some after EOF, or a second
/// send_all after EPIPE, would wait forever. A synchronous try that would block instead
/// guarantees a fresh event (data, space, FIN, reset) for the Asio operation that follows.
///
/// The attempt for an operation that has nothing to try.
struct no_attempt {
    bool operator()(asio::error_code&, std::size_t&) const noexcept { return false; }
};

/// Awaits one Asio operation started by `Start` (a callable taking the completion handler).
/// `Attempt` (ec, bytes) is tried first, after the stop check: if it returns true, the
/// operation completed without Asio and the coroutine does not suspend.
/// A stop request cancels this operation only — through its own cancellation slot, not
/// socket.cancel(), which would also abort the other direction's operation — and the
/// coroutine resumes only after the handler has run (with operation_aborted, unless the
/// operation had completed first). Not movable: Asio holds a pointer into it.
template <class Start, class Attempt = no_attempt>
class asio_op {
public:
    asio_op(asio_core& core, op_owner* owner, Start start) : _start(std::move(start)) {
        _op.core = &core;
        _op.owner = owner;
    }
    asio_op(asio_core& core, op_owner* owner, Attempt attempt, Start start)
        : _start(std::move(start)), _attempt(std::move(attempt)) {
        _op.core = &core;
        _op.owner = owner;
    }
    asio_op(const asio_op&) = delete;
    asio_op& operator=(const asio_op&) = delete;
    /// Destroyed while in flight (its frame was dropped): cancel, and run Asio until the
    /// handler has let go of this object; the handler must not resume the dead frame.
    ~asio_op() {
        if (!_op.in_flight) return;
        _op.abandoned = true;
        _on_stop.reset();
        _signal.emit(asio::cancellation_type::terminal);
        _op.core->drive_until([this] { return !_op.in_flight; });
    }

    bool await_ready() const noexcept { return false; }

    template <class P>
    bool await_suspend(std::coroutine_handle<P> h) {
        const std::stop_token* tok = nullptr;
        if constexpr (coverse::detail::has_stop_v<P>) tok = h.promise().stop();
        if (tok && tok->stop_requested()) {
            _op.ec = asio::error::operation_aborted;
            return false;
        }
        if (_attempt(_op.ec, _op.bytes)) return false;
        _op.handle = h;
        // Asio never runs a handler inside the initiating call, so the flags set after it
        // are in place before finish() can run.
        _start(asio::bind_cancellation_slot(_signal.slot(), on_complete{&_op}));
        _op.in_flight = true;
        _op.core->op_started();
        if (_op.owner) _op.owner->attach(_op);
        if (tok && tok->stop_possible()) _on_stop.emplace(*tok, canceller{this});
        return true;
    }

    op_result await_resume() noexcept {
        _on_stop.reset();
        return {_op.ec, _op.bytes};
    }

private:
    struct canceller {
        asio_op* self;
        void operator()() const noexcept {
            // Asio's per-descriptor state is touched without the scheduler's knowledge:
            // a stop from another thread would race with the loop.
            if (scheduler::current() != &self->_op.core->sched()) {
                std::fputs(
                    "coverse: a stop was requested from a thread other than the scheduler "
                    "running the socket operation; request stops on that scheduler\n",
                    stderr);
                std::abort();
            }
            // Ask only: the handler still runs (operation_aborted), and only then does
            // the coroutine resume.
            if (self->_op.in_flight) self->_signal.emit(asio::cancellation_type::terminal);
        }
    };

    Start _start;
    [[no_unique_address]] Attempt _attempt;
    op_state _op;
    asio::cancellation_signal _signal;
    std::optional<std::stop_callback<canceller>> _on_stop;
};

template <class Start>
asio_op(asio_core&, op_owner*, Start) -> asio_op<Start>;
template <class Attempt, class Start>
asio_op(asio_core&, op_owner*, Attempt, Start) -> asio_op<Start, Attempt>;

// ---- streams ------------------------------------------------------------------------

/// The parts of one send_all as Asio buffers, empty parts left out. Up to 8 parts (a
/// header and a payload, usually) without allocating.
class gather {
public:
    explicit gather(std::span<const std::span<const std::byte>> parts) {
        const auto n = static_cast<std::size_t>(
            std::count_if(parts.begin(), parts.end(), [](const auto& p) { return !p.empty(); }));
        asio::const_buffer* base = _inline.data();
        if (n > _inline.size()) {
            _heap.resize(n);
            base = _heap.data();
        }
        asio::const_buffer* out = base;
        for (const auto& p : parts)
            if (!p.empty()) *out++ = asio::const_buffer(p.data(), p.size());
        _first = base;
        _count = n;
    }
    gather(const gather&) = delete;
    gather& operator=(const gather&) = delete;

    bool empty() const noexcept { return _count == 0; }
    /// A view: Asio copies the sequence object, so a span (not the vector) is what it copies.
    std::span<const asio::const_buffer> buffers() const noexcept { return {_first, _count}; }

    /// Drops the first `n` bytes (those a send has already taken).
    void consume(std::size_t n) noexcept {
        while (n > 0 && _count > 0) {
            const std::size_t k = std::min(n, _first->size());
            *_first += k;
            n -= k;
            if (_first->size() == 0) {
                ++_first;
                --_count;
            }
        }
    }

private:
    std::array<asio::const_buffer, 8> _inline;
    std::vector<asio::const_buffer> _heap;
    asio::const_buffer* _first = nullptr;
    std::size_t _count = 0;
};

std::string name_of(const tcp::endpoint& ep) {
    return ep.address().to_string() + ":" + std::to_string(ep.port());
}

/// One connected TCP socket. Every coroutine below reads its members only before its
/// await: the stream may be destroyed while one waits (its operations then complete with
/// -ECANCELED and the coroutine returns without touching `this`).
class asio_stream final : public stream, private op_owner {
public:
    asio_stream(std::shared_ptr<asio_core> core, tcp::socket socket, std::string peer)
        : _core(std::move(core)), _socket(std::move(socket)), _peer(std::move(peer)) {}

    /// Owners should close() first. A stream destroyed with operations in flight cancels
    /// them and runs Asio until their handlers have run: nothing is left pointing at the
    /// socket, and the waiting coroutines resume with -ECANCELED.
    ~asio_stream() override {
        if (!idle()) {
            asio::error_code ec;
            _socket.cancel(ec);
            _core->drive_until([this] { return idle(); });
        }
    }

    task<int> send_all(std::span<const std::span<const std::byte>> parts) override {
        if (_closing) co_return -EBADF;
        gather g(parts);
        if (g.empty()) co_return 0;
        // Send at once; whatever the socket did not take goes to Asio (see no_attempt).
        auto attempt = [&](asio::error_code& ec, std::size_t&) {
            const std::size_t sent = _socket.send(g.buffers(), 0, ec);  // non-blocking
            if (ec == asio::error::would_block || ec == asio::error::try_again)
                ec.clear();
            else if (ec)
                return true;
            g.consume(sent);
            return g.empty();
        };
        // async_write continues after partial sends until every byte is out, in order.
        const op_result r = co_await asio_op(*_core, this, attempt, [&](auto handler) {
            asio::async_write(_socket, g.buffers(), std::move(handler));
        });
        co_return to_errno(r.ec);
    }

    task<int> recv_some(std::span<std::byte> buf) override {
        if (_closing) co_return -EBADF;
        if (buf.empty()) co_return 0;  // as recv(2) with length 0
        const std::size_t n = std::min<std::size_t>(buf.size(), INT_MAX);
        // Read at once; only a read that would block goes to Asio (see no_attempt).
        auto attempt = [&](asio::error_code& ec, std::size_t& bytes) {
            bytes = _socket.receive(asio::buffer(buf.data(), n), 0, ec);  // non-blocking
            return ec != asio::error::would_block && ec != asio::error::try_again;
        };
        const op_result r = co_await asio_op(*_core, this, attempt, [&](auto handler) {
            _socket.async_read_some(asio::buffer(buf.data(), n), std::move(handler));
        });
        if (r.ec == asio::error::eof) co_return 0;
        if (r.ec) co_return to_errno(r.ec);
        co_return static_cast<int>(r.bytes);
    }

    void shutdown_send() noexcept override {
        if (_closing) return;
        asio::error_code ec;  // ENOTCONN after a reset: nothing left to half-close
        _socket.shutdown(tcp::socket::shutdown_send, ec);
    }

    task<void> close() override {
        if (!_closing) {
            _closing = true;
            asio::error_code ec;
            _socket.cancel(ec);
        }
        co_await wait_idle();  // a second close() waits as well
        if (_socket.is_open()) {
            asio::error_code ec;
            _socket.close(ec);
        }
    }

    const std::string& peer_name() const noexcept override { return _peer; }

private:
    std::shared_ptr<asio_core> _core;  // declared before the socket: outlives it
    tcp::socket _socket;
    std::string _peer;
    bool _closing = false;
};

/// A stream around a connected socket: TCP_NODELAY, as every coverse connection, and in
/// non-blocking mode for the synchronous first tries of recv_some and send_all.
stream_result make_stream(std::shared_ptr<asio_core> core, tcp::socket socket, std::string peer) {
    asio::error_code ec;
    socket.set_option(tcp::no_delay(true), ec);
    // The synchronous first tries of recv_some and send_all report would_block, not wait.
    if (!ec) socket.non_blocking(true, ec);
    if (ec) return {nullptr, to_errno(ec)};
    return {std::make_unique<asio_stream>(std::move(core), std::move(socket), std::move(peer)), 0};
}

io_result<tcp::endpoint> resolve(const endpoint& e) {
    asio::error_code ec;
    const asio::ip::address addr = asio::ip::make_address(e.host, ec);
    if (ec) return {{}, -EINVAL};  // a numeric address is expected; no name lookups here
    return {tcp::endpoint(addr, e.port), 0};
}

// ---- listener -----------------------------------------------------------------------

class asio_listener final : public listener, private op_owner {
public:
    asio_listener(std::shared_ptr<asio_core> core, tcp::acceptor acceptor, endpoint local)
        : _core(std::move(core)), _acceptor(std::move(acceptor)), _local(std::move(local)) {}

    ~asio_listener() override {
        if (!idle()) {
            asio::error_code ec;
            _acceptor.cancel(ec);
            _core->drive_until([this] { return idle(); });
        }
    }

    task<stream_result> accept() override {
        if (_closing) co_return stream_result{nullptr, -EBADF};
        std::shared_ptr<asio_core> core = _core;  // `this` may be gone after the await
        tcp::socket peer(core->context());
        tcp::endpoint from;
        const op_result r = co_await asio_op(*core, this, [&](auto handler) {
            _acceptor.async_accept(peer, from, std::move(handler));
        });
        if (r.ec) co_return stream_result{nullptr, to_errno(r.ec)};
        co_return make_stream(std::move(core), std::move(peer), name_of(from));
    }

    endpoint local() const override { return _local; }

    task<void> close() override {
        if (!_closing) {
            _closing = true;
            asio::error_code ec;
            _acceptor.cancel(ec);
        }
        co_await wait_idle();
        if (_acceptor.is_open()) {
            asio::error_code ec;
            _acceptor.close(ec);
        }
    }

private:
    std::shared_ptr<asio_core> _core;
    tcp::acceptor _acceptor;
    endpoint _local;
    bool _closing = false;
};

// ---- backend ------------------------------------------------------------------------

class asio_backend final : public backend {
public:
    explicit asio_backend(std::shared_ptr<asio_core> core) : _core(std::move(core)) {}

    std::string_view name() const noexcept override { return "asio"; }

    std::string describe() const override {
        std::string s = "asio " + std::to_string(ASIO_VERSION / 100000) + "." +
                        std::to_string(ASIO_VERSION / 100 % 1000) + "." +
                        std::to_string(ASIO_VERSION % 100) + " (" + reactor_name() +
                        "), polled by the coverse scheduler";
        if (_core->has_ring())
            s += "; the scheduler has an io_uring ring, so it keeps polling while a socket "
                 "waits (COVERSE_NET_BACKEND=asio is meant for COVERSE_IO_URING=0)";
        else
            s += ", which sleeps in Asio's reactor";
        return s;
    }

    task<stream_result> connect(endpoint to) override {
        std::shared_ptr<asio_core> core = _core;
        const io_result<tcp::endpoint> ep = resolve(to);
        if (!ep) co_return stream_result{nullptr, ep.error};
        tcp::socket socket(core->context());
        asio::error_code ec;
        socket.open(ep.value.protocol(), ec);
        if (ec) co_return stream_result{nullptr, to_errno(ec)};
        const op_result r = co_await asio_op(*core, nullptr, [&](auto handler) {
            socket.async_connect(ep.value, std::move(handler));
        });
        if (r.ec) co_return stream_result{nullptr, to_errno(r.ec)};
        co_return make_stream(std::move(core), std::move(socket), to.to_string());
    }

    io_result<std::unique_ptr<listener>> listen(const endpoint& at) override {
        const io_result<tcp::endpoint> ep = resolve(at);
        if (!ep) return {nullptr, ep.error};
        tcp::acceptor acceptor(_core->context());
        asio::error_code ec;
        acceptor.open(ep.value.protocol(), ec);
        if (!ec) acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
        if (!ec) acceptor.bind(ep.value, ec);
        if (!ec) acceptor.listen(tcp::acceptor::max_listen_connections, ec);
        tcp::endpoint bound;
        if (!ec) bound = acceptor.local_endpoint(ec);
        if (ec) return {nullptr, to_errno(ec)};
        endpoint local{bound.address().to_string(), bound.port()};
        return {std::make_unique<asio_listener>(_core, std::move(acceptor), std::move(local)), 0};
    }

private:
    std::shared_ptr<asio_core> _core;
};

}  // namespace

std::unique_ptr<backend> make_asio_backend(scheduler& sched, std::string* why) {
    try {
        return std::make_unique<asio_backend>(asio_core::for_scheduler(sched));
    } catch (const std::exception& e) {
        // io_context creation fails only when epoll or eventfd descriptors run out.
        if (why)
            *why = std::string("asio: cannot create its event loop: ") + e.what() +
                   " (raise the open-files limit: ulimit -n)";
        return nullptr;
    }
}

}  // namespace coverse::net
