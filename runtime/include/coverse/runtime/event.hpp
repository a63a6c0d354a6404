// event: a manual-reset event. set() releases every current and future waiter until
// reset(). Single-scheduler; waits are cancellable.
#pragma once

#include <coverse/runtime/detail/waiter.hpp>

namespace coverse {

class event {
public:
    explicit event(bool set = false) noexcept : _set(set) {}
    event(const event&) = delete;
    event& operator=(const event&) = delete;

    bool is_set() const noexcept { return _set; }
    void set() noexcept {
        _set = true;
        while (auto* w = _waiters.pop_front())
            w->wake();
    }
    void reset() noexcept { _set = false; }

    class wait_awaiter : public detail::cancellable_wait<wait_awaiter> {
    public:
        explicit wait_awaiter(event& e) noexcept : _e(e) {}
        ~wait_awaiter() { this->leave_if_waiting(); }
        bool try_now() const noexcept { return _e._set; }
        void enqueue() noexcept { _e._waiters.push_back(this); }
        void dequeue() noexcept { _e._waiters.remove(this); }
        void await_resume() const { check_cancelled(); }

    private:
        event& _e;
    };
    /// `co_await ev.wait()`: returns once the event is set; throws cancelled_error if the
    /// task's stop token fires first.
    wait_awaiter wait() noexcept { return wait_awaiter{*this}; }

private:
    bool _set;
    detail::waiter_list _waiters;
};

}  // namespace coverse
