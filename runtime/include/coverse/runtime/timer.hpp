// Timers: sleep_for / sleep_until on the scheduler's timer heap (never early; cancellable),
// and with_timeout, which races a task against a timer and waits for the loser to finish.
#pragma once

#include <chrono>
#include <coroutine>
#include <exception>
#include <optional>
#include <type_traits>

#include <coverse/runtime/detail/waiter.hpp>
#include <coverse/runtime/scheduler.hpp>
#include <coverse/runtime/task.hpp>
#include <coverse/runtime/when.hpp>

namespace coverse {

namespace detail {
class sleep_awaiter : public cancellable_wait<sleep_awaiter> {
public:
    explicit sleep_awaiter(clock::time_point deadline) noexcept { _node.deadline = deadline; }
    ~sleep_awaiter() { this->leave_if_waiting(); }
    bool try_now() const noexcept { return clock::now() >= _node.deadline; }
    void enqueue() {
        _node.fire = &on_fire;
        _node.context = this;
        sched->add_timer(_node);
    }
    void dequeue() noexcept { sched->cancel_timer(_node); }
    void await_resume() const { check_cancelled(); }

private:
    static void on_fire(timer_node* n) noexcept { static_cast<sleep_awaiter*>(n->context)->wake(); }
    timer_node _node;
};
}  // namespace detail

/// Suspends until `deadline` (never earlier). Throws cancelled_error if the task's stop
/// token fires first.
inline detail::sleep_awaiter sleep_until(clock::time_point deadline) noexcept {
    return detail::sleep_awaiter{deadline};
}
/// Suspends for at least `d`. Throws cancelled_error if the task's stop token fires first.
template <class Rep, class Period>
detail::sleep_awaiter sleep_for(std::chrono::duration<Rep, Period> d) noexcept {
    return detail::sleep_awaiter{clock::now() + std::chrono::duration_cast<clock::duration>(d)};
}

namespace detail {
inline task<void> sleep_task(clock::duration d) {
    co_await sleep_for(d);
}
}  // namespace detail

namespace detail {
inline bool is_cancellation(const std::exception_ptr& e) noexcept {
    try {
        std::rethrow_exception(e);
    } catch (const cancelled_error&) {
        return true;
    } catch (...) {
        return false;
    }
}
}  // namespace detail

/// Runs `t` with a deadline. If the timer fires first, `t` is asked to stop (its
/// cancellable waits throw cancelled_error) and with_timeout waits until it has finished.
/// Whatever `t` produced is returned even if the timer fired first — a permit, a message
/// or bytes it already took are never dropped; otherwise nullopt (for task<void>: false).
/// A real error of `t` is rethrown; so is cancellation from the caller's own stop token.
template <class T, class Rep, class Period>
auto with_timeout(task<T> t, std::chrono::duration<Rep, Period> limit)
    -> task<std::conditional_t<std::is_void_v<T>, bool, std::optional<T>>> {
    detail::join_state st(2);
    st.stop_on_first = true;
    detail::stop_link link(co_await this_task::stop_token(), st);
    std::optional<detail::value_t<T>> result;
    std::optional<std::monostate> timer_fired;
    auto work = detail::run_child(std::move(t), &st, &result, 0);
    auto timer =
        detail::run_child(detail::sleep_task(std::chrono::duration_cast<clock::duration>(limit)),
                          &st, &timer_fired, 1);
    work.start(st);
    timer.start(st);
    co_await st.wait();
    if (result) {
        if constexpr (std::is_void_v<T>)
            co_return true;
        else
            co_return std::optional<T>(std::move(*result));
    }
    if (timer_fired && (!st.first_error || detail::is_cancellation(st.first_error))) {
        if constexpr (std::is_void_v<T>)
            co_return false;
        else
            co_return std::optional<T>{};
    }
    std::rethrow_exception(st.first_error);
}

}  // namespace coverse
