// io_op: the awaitable form of one io_uring request. The awaiter is the request's
// completion object (it lives in the suspended coroutine's frame, so it cannot move), and
// a stop request cancels the operation and then waits for its final completion before
// the coroutine resumes — the buffer is never released while the kernel may still write.
#pragma once

#include <chrono>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <stop_token>
#include <utility>

#include <coverse/runtime/reactor.hpp>
#include <coverse/runtime/scheduler.hpp>
#include <coverse/runtime/task.hpp>

namespace coverse {

/// Awaits one io_uring request prepared by `Prep` (a callable taking io_uring_sqe*).
/// Yields the CQE result: >= 0 on success, -errno on failure (-ECANCELED after a stop
/// request). Errors are values: the hot path never throws.
template <class Prep>
class io_op final : public completion {
public:
    explicit io_op(Prep prep) : _prep(std::move(prep)) {}
    io_op(const io_op&) = delete;
    io_op& operator=(const io_op&) = delete;
    /// Destroyed while in flight (its frame was dropped after an exception unwound the
    /// loop): cancel and reap until the kernel has let go of the buffer and of us.
    ~io_op() {
        if (!_in_flight) return;
        _abandoned = true;
        _reactor->cancel(this);
        while (_in_flight)
            _reactor->wait(std::chrono::milliseconds(10));
    }

    bool await_ready() const noexcept { return false; }

    template <class P>
    bool await_suspend(std::coroutine_handle<P> h) {
        scheduler& s = scheduler::this_thread();
        _reactor = s.io();
        if (!_reactor) {
            _result = -ENOSYS;  // no ring: the caller's backend (Asio) must serve it
            return false;
        }
        if constexpr (detail::has_stop_v<P>) {
            if (const std::stop_token* tok = h.promise().stop()) {
                if (tok->stop_requested()) {
                    _result = -ECANCELED;
                    return false;
                }
                if (tok->stop_possible()) _on_stop.emplace(*tok, canceller{this});
            }
        }
        _handle = h;
        _sched = &s;
        _prep(_reactor->prepare(this));
        _in_flight = true;
        return true;
    }

    int await_resume() noexcept {
        _on_stop.reset();
        return _result;
    }

    void complete(int result, std::uint32_t flags) noexcept override {
        _result = result;
        _flags = flags;
        _in_flight = false;
        if (!_abandoned) _sched->schedule(_handle);  // resumed by the loop, not in the reap
    }

    std::uint32_t cqe_flags() const noexcept { return _flags; }

private:
    struct canceller {
        io_op* self;
        void operator()() const noexcept {
            // Ask only: the final completion still arrives through complete(), and only
            // then does the awaiting coroutine resume. The ring is single-issuer: a stop
            // from another thread would race on the submission queue, so it is refused.
            if (scheduler::current() != self->_sched) {
                std::fputs(
                    "coverse: a stop was requested from a thread other than the "
                    "scheduler running the I/O; request stops on that scheduler\n",
                    stderr);
                std::abort();
            }
            self->_reactor->cancel(self);
        }
    };

    Prep _prep;
    reactor* _reactor = nullptr;
    scheduler* _sched = nullptr;
    std::coroutine_handle<> _handle;
    int _result = 0;
    std::uint32_t _flags = 0;
    bool _in_flight = false;
    bool _abandoned = false;
    std::optional<std::stop_callback<canceller>> _on_stop;
};

/// `co_await read_some(fd, buf, n)`: bytes read, 0 at end of file, or -errno.
inline auto read_some(int fd, void* buf, std::size_t n, std::uint64_t offset = ~0ull) {
    return io_op([=](io_uring_sqe* sqe) {
        io_uring_prep_read(sqe, fd, buf, static_cast<unsigned>(n), offset);
    });
}

/// `co_await write_some(fd, buf, n)`: bytes written or -errno.
inline auto write_some(int fd, const void* buf, std::size_t n, std::uint64_t offset = ~0ull) {
    return io_op([=](io_uring_sqe* sqe) {
        io_uring_prep_write(sqe, fd, buf, static_cast<unsigned>(n), offset);
    });
}

/// `co_await poll_fd(fd, POLLIN)`: the ready events mask or -errno. For eventfds and the
/// verbs completion channel, whose readiness the loop must wait on.
inline auto poll_fd(int fd, unsigned events) {
    return io_op([=](io_uring_sqe* sqe) { io_uring_prep_poll_add(sqe, fd, events); });
}

}  // namespace coverse
