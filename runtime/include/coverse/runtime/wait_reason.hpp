// wait_reason: what a suspended task waits for, recorded where it suspends, so that a
// report of a hung job (coverse-run --report-stuck-after, SIGQUIT; docs/doctor.md) can say
// which PE waits for which, and on what.
#pragma once

#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

namespace coverse {

/// The kinds of wait the report knows. Append only: the number travels in state replies.
enum class wait_kind : std::uint8_t {
    other = 0,         ///< anything else; `detail` says what
    credits = 1,       ///< eager credits from `peer`
    get_done = 2,      ///< a rendezvous get-done from `peer` (`id`: the handle)
    barrier = 3,       ///< barrier epoch `id`; `peer`: the PE whose arrival or release is due
    handle_slot = 4,   ///< a free handle slot (every MAXIMUM_HANDLES slot is in use)
    socket_drain = 5,  ///< bytes to `peer` that have not left (socket or ring full)
    reply = 6,         ///< an application's reply or message from `peer`
    message = 7,       ///< a message for handler `id`, from any PE
    cth_thread = 8,    ///< a Cth thread suspended in handler `id`
    connect = 9,       ///< connection set-up with `peer`
    timer = 10,        ///< a sleep or timed callback
    exit_vote = 11,    ///< ConverseExit's exit vote (CONNECT=lazy); `peer`: whose word is due
};
inline constexpr unsigned wait_kind_count = 12;

/// "credits", "get-done", "barrier", ... ("other" for numbers this build does not know).
constexpr const char* wait_kind_name(wait_kind k) noexcept {
    switch (k) {
        case wait_kind::other:
            return "other";
        case wait_kind::credits:
            return "credits";
        case wait_kind::get_done:
            return "get-done";
        case wait_kind::barrier:
            return "barrier";
        case wait_kind::handle_slot:
            return "handle-slot";
        case wait_kind::socket_drain:
            return "socket-drain";
        case wait_kind::reply:
            return "reply";
        case wait_kind::message:
            return "message";
        case wait_kind::cth_thread:
            return "cth-thread";
        case wait_kind::connect:
            return "connect";
        case wait_kind::timer:
            return "timer";
        case wait_kind::exit_vote:
            return "exit-vote";
    }
    return "other";
}

/// No PE: the wait is not on one particular peer.
inline constexpr std::uint32_t no_peer = 0xFFFF'FFFFu;

/// What is awaited. A plain value: building one is a few stores, no allocation.
struct wait_reason {
    wait_kind kind = wait_kind::other;
    std::uint32_t peer = no_peer;  ///< the PE that has to act, or no_peer
    std::uint64_t id = 0;          ///< kind-specific: handle id, barrier epoch, handler index
    /// Static text (a string literal) naming the protocol step, e.g. "rndv/get: get-done";
    /// it must outlive the wait. May be null.
    const char* detail = nullptr;
};

class wait_registry;
class scheduler;

/// One wait in progress: lives in the waiting frame (inside `wait_scope` or the awaiter
/// of `waiting_for`) and is linked into its scheduler's registry while it lasts.
class wait_record {
public:
    wait_reason reason;

private:
    friend class wait_registry;
    wait_record* _prev = nullptr;
    wait_record* _next = nullptr;
    bool _linked = false;
};

/// The waits in progress on one scheduler, an intrusive list (oldest first). Only the
/// scheduler's own thread touches it: a report reads it from that thread (a posted
/// function), never from another one.
class wait_registry {
public:
    wait_registry() = default;
    wait_registry(const wait_registry&) = delete;
    wait_registry& operator=(const wait_registry&) = delete;

    /// The registry of the calling thread's scheduler (aborts when there is none, like
    /// scheduler::this_thread()). Inline: one thread-local load, no call.
    static wait_registry& this_thread() noexcept {
        if (_current == nullptr) [[unlikely]]
            no_scheduler();
        return *_current;
    }

    void add(wait_record& r) noexcept {
        r._prev = _tail;
        r._next = nullptr;
        if (_tail)
            _tail->_next = &r;
        else
            _head = &r;
        _tail = &r;
        r._linked = true;
        ++_size;
    }
    void remove(wait_record& r) noexcept {
        if (!r._linked) return;
        if (r._prev)
            r._prev->_next = r._next;
        else
            _head = r._next;
        if (r._next)
            r._next->_prev = r._prev;
        else
            _tail = r._prev;
        r._prev = r._next = nullptr;
        r._linked = false;
        --_size;
    }
    /// Calls `f(const wait_reason&)` for each wait, oldest first.
    template <class F>
    void for_each(F&& f) const {
        for (const wait_record* r = _head; r != nullptr; r = r->_next)
            f(r->reason);
    }
    std::size_t size() const noexcept { return _size; }
    bool empty() const noexcept { return _size == 0; }

private:
    friend class scheduler;  // keeps _current equal to its own registry
    [[noreturn]] static void no_scheduler() noexcept;
    static inline thread_local constinit wait_registry* _current = nullptr;

    wait_record* _head = nullptr;
    wait_record* _tail = nullptr;
    std::size_t _size = 0;
};

/// The enclosing code waits for `reason` while this object lives: for waits that span
/// several suspensions, or a blocking loop (`run_until`) in synchronous code.
///
///     coverse::wait_scope w({coverse::wait_kind::credits, dest});
///     while (credits == 0) co_await credit_returned.wait();
///
/// `update()` changes what is awaited (a barrier that now waits on another child).
class wait_scope {
public:
    explicit wait_scope(wait_reason r) noexcept : wait_scope(wait_registry::this_thread(), r) {}
    wait_scope(wait_registry& reg, wait_reason r) noexcept : _reg(reg) {
        _rec.reason = r;
        _reg.add(_rec);
    }
    ~wait_scope() { _reg.remove(_rec); }
    wait_scope(const wait_scope&) = delete;
    wait_scope& operator=(const wait_scope&) = delete;

    void update(wait_reason r) noexcept { _rec.reason = r; }
    const wait_reason& reason() const noexcept { return _rec.reason; }

private:
    wait_registry& _reg;
    wait_record _rec;
};

namespace detail {
template <class A>
concept has_member_co_await = requires(A& a) {
    std::move(a).operator co_await();
};
struct no_conversion {};
template <class A>
concept has_free_co_await = requires(A& a) {
    operator co_await(std::move(a));
};

/// The awaiter of `waiting_for`: links its record just before the inner awaiter suspends
/// and unlinks it when the task resumes (or when the frame dies while waiting). A movable
/// awaitable is moved in; a non-movable one (an event's or semaphore's awaiter) is kept
/// by reference, which is why the result must be awaited in the same expression.
template <class A>
class waiting_awaiter {
    static constexpr bool converts = has_member_co_await<A> || has_free_co_await<A>;
    using stored_t = std::conditional_t<std::is_move_constructible_v<A>, A, A&>;
    static auto convert(A& a) {
        if constexpr (has_member_co_await<A>)
            return std::move(a).operator co_await();
        else if constexpr (has_free_co_await<A>)
            return operator co_await(std::move(a));
        else
            return no_conversion{};
    }
    using converted_t = decltype(convert(std::declval<A&>()));

public:
    waiting_awaiter(wait_reason r, A&& a)
        : _awaitable(static_cast<std::conditional_t<std::is_move_constructible_v<A>, A&&, A&>>(a)),
          _converted(convert(_awaitable)) {
        _rec.reason = r;
    }
    waiting_awaiter(const waiting_awaiter&) = delete;
    waiting_awaiter& operator=(const waiting_awaiter&) = delete;
    ~waiting_awaiter() { leave(); }

    bool await_ready() { return inner().await_ready(); }

    template <class P>
    auto await_suspend(std::coroutine_handle<P> h) {
        _reg = &wait_registry::this_thread();
        _reg->add(_rec);
        using result_t = decltype(inner().await_suspend(h));
        if constexpr (std::is_same_v<result_t, bool>) {
            // After a true return the task may already run elsewhere: touch nothing then.
            if (inner().await_suspend(h)) return true;
            leave();
            return false;
        } else {
            return inner().await_suspend(h);
        }
    }

    decltype(auto) await_resume() {
        leave();
        return inner().await_resume();
    }

private:
    auto& inner() noexcept {
        if constexpr (converts)
            return _converted;
        else
            return static_cast<A&>(_awaitable);
    }
    void leave() noexcept {
        if (_reg) _reg->remove(_rec);
    }

    stored_t _awaitable;
    [[no_unique_address]] converted_t _converted;
    wait_record _rec;
    wait_registry* _reg = nullptr;
};
}  // namespace detail

/// `co_await waiting_for(reason, awaitable)` awaits `awaitable`; while the task is
/// suspended there, the scheduler's registry lists `reason`. One line at the suspension
/// point of a protocol:
///
///     co_await coverse::waiting_for({coverse::wait_kind::get_done, peer, handle,
///                                    "rndv/get: get-done"}, done.wait());
///     co_await coverse::waiting_for({coverse::wait_kind::credits, peer}, credits.acquire());
///
/// Costs a few pointer stores when the task suspends and when it resumes: no allocation,
/// no clock read, no lock. Takes any awaitable (a task, an event's wait(), a semaphore's
/// acquire()); await the result in the same expression, as above.
template <class A>
detail::waiting_awaiter<std::remove_cvref_t<A>> waiting_for(wait_reason r, A&& awaitable) {
    static_assert(!std::is_lvalue_reference_v<A>,
                  "waiting_for takes a temporary awaitable (or std::move one)");
    return detail::waiting_awaiter<std::remove_cvref_t<A>>(r, static_cast<A&&>(awaitable));
}

}  // namespace coverse
