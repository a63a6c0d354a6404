// reactor: the scheduler's io_uring ring. Owns the ring, hands out submission entries
// with back-pressure, and routes each completion to the one immovable `completion` object
// its request points at. net/ builds socket operations on it; the scheduler blocks in it.
#pragma once

#include <liburing.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace coverse {

/// The object an in-flight io_uring request points at (its user_data). It must not move
/// or die until its final completion has been delivered — also after a cancel, and also
/// for a zero-copy send's second (notification) completion. `complete` runs on the
/// reactor's thread from inside `reactor::poll`/`wait`.
class completion {
public:
    virtual void complete(int result, std::uint32_t cqe_flags) noexcept = 0;

protected:
    ~completion() = default;
};

/// Setup flags and features the kernel granted; printed by `describe()`.
struct reactor_features {
    bool single_issuer = false;
    bool defer_taskrun = false;
    bool coop_taskrun = false;
    bool submit_all = false;
    bool taskrun_flag = false;  // the ring's flags say when task_work waits (no blind enter)
    bool ext_arg = false;       // timeout passed to io_uring_enter directly
    bool nodrop = false;
    bool fast_poll = false;
    bool send_zc = false;   // IORING_OP_SEND_ZC supported
    bool buf_ring = false;  // provided-buffer rings can be registered
    unsigned entries = 0;
};

class reactor {
public:
    /// Creates a ring with the best setup flags this kernel accepts, trying them from the
    /// most to the least capable (never by kernel version). Returns null and fills `why`
    /// when io_uring cannot be used at all (seccomp, kernel.io_uring_disabled, ENOSYS).
    static std::unique_ptr<reactor> create(unsigned entries, std::string* why);

    ~reactor();
    reactor(const reactor&) = delete;
    reactor& operator=(const reactor&) = delete;

    /// A submission entry whose user_data will be `c`. A full submission queue is
    /// back-pressure: pending entries are submitted and completions reaped until one is
    /// free — it never fails.
    io_uring_sqe* prepare(completion* c);
    /// Like prepare(), for a long-lived request that should not keep the loop entering the
    /// kernel while it spins (the scheduler's wake-up read): it only matters when the loop
    /// blocks, and blocking enters the kernel anyway.
    io_uring_sqe* prepare_background(completion* c);
    /// Asks the kernel to cancel the request whose completion object is `c`. Its final
    /// completion (usually -ECANCELED) still arrives through `c`.
    void cancel(completion* c);
    /// Cancels nothing: reaps until no request is in flight or `limit` passes. Returns
    /// whether everything completed.
    bool drain(std::chrono::nanoseconds limit);
    /// A submission entry whose completion is ignored (e.g. a cancel whose outcome the
    /// cancelled request's own completion reports).
    io_uring_sqe* prepare_untracked();

    /// Submits pending entries and reaps whatever completions are ready, without blocking.
    /// Runs deferred task_work when requests are in flight, since with DEFER_TASKRUN (and
    /// in practice without it) completions appear only when the ring's owner enters the
    /// kernel. With TASKRUN_FLAG it enters the kernel only when the ring's flags say that
    /// work waits there, so a spinning loop makes no system call while nothing happens.
    /// Returns true if any completion was delivered.
    bool poll();

    /// Blocks until at least one completion arrives or `timeout` passes (negative: no
    /// limit), then reaps. Returns true if any completion was delivered.
    bool wait(std::chrono::nanoseconds timeout);

    /// True when prepared entries wait for their submission.
    bool has_unsubmitted() const noexcept { return _unsubmitted != 0; }
    /// True when entering the kernel may find completion work (task_work queued, an
    /// overflowed completion queue), or when this ring cannot tell (no TASKRUN_FLAG).
    bool kernel_has_work() const noexcept {
        if (!_features.taskrun_flag) return true;  // no way to know: always ask
        const unsigned flags = IO_URING_READ_ONCE(*_ring.sq.kflags);
        return (flags & (IORING_SQ_TASKRUN | IORING_SQ_CQ_OVERFLOW)) != 0;
    }
    /// True when poll() would do anything: entries to submit, completions posted, or (with
    /// a request in flight) work the kernel holds. Inline: the spinning loop asks it on
    /// every turn.
    bool poll_needed() const noexcept {
        return _unsubmitted != 0 || io_uring_cq_ready(&_ring) != 0 ||
               (_in_flight != 0 && kernel_has_work());
    }
    /// True when poll() enters the kernel only when kernel_has_work() says so.
    bool polls_without_syscalls() const noexcept { return _features.taskrun_flag; }

    /// Requests in flight (tracked ones), for shutdown: reap until this reaches zero.
    std::uint64_t in_flight() const noexcept { return _in_flight + _background; }

    const reactor_features& features() const noexcept { return _features; }
    /// One line: "io_uring: entries=256 single_issuer defer_taskrun ... send_zc".
    std::string describe() const;
    /// The names of the granted features, in describe()'s order ("single_issuer", ...).
    static std::vector<std::string> feature_names(const reactor_features& f);

    io_uring* ring() noexcept { return &_ring; }

private:
    reactor() = default;
    unsigned reap();
    void submit_pending();

    io_uring _ring{};
    reactor_features _features;
    std::uint64_t _in_flight = 0;   // requests that poll() must enter the kernel for
    std::uint64_t _background = 0;  // requests that only matter when blocking
    unsigned _unsubmitted = 0;
};

}  // namespace coverse
