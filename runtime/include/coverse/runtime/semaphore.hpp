// semaphore: counting, strictly FIFO. A release hands its permit straight to the oldest
// waiter, so a newcomer can never overtake a task already waiting. Eager-channel credits
// are one of these. Single-scheduler; waits are cancellable.
#pragma once

#include <cstddef>

#include <coverse/runtime/detail/waiter.hpp>

namespace coverse {

class semaphore {
public:
    explicit semaphore(std::size_t initial) noexcept : _count(initial) {}
    semaphore(const semaphore&) = delete;
    semaphore& operator=(const semaphore&) = delete;

    std::size_t available() const noexcept { return _count; }
    bool has_waiters() const noexcept { return !_waiters.empty(); }

    /// Takes a permit if one is free and nobody is queued ahead.
    bool try_acquire() noexcept {
        if (_count == 0 || !_waiters.empty()) return false;
        --_count;
        return true;
    }

    void release(std::size_t n = 1) noexcept {
        while (n > 0) {
            auto* w = _waiters.pop_front();
            if (!w) break;
            --n;
            w->wake();  // the permit travels with the wake-up
        }
        _count += n;
    }

    class acquire_awaiter : public detail::cancellable_wait<acquire_awaiter> {
    public:
        explicit acquire_awaiter(semaphore& s) noexcept : _s(s) {}
        ~acquire_awaiter() { this->leave_if_waiting(); }
        bool try_now() noexcept { return _s.try_acquire(); }
        void enqueue() noexcept { _s._waiters.push_back(this); }
        void dequeue() noexcept { _s._waiters.remove(this); }
        void await_resume() const { check_cancelled(); }

    private:
        semaphore& _s;
    };
    /// `co_await sem.acquire()`: waits for a permit (FIFO). Throws cancelled_error if the
    /// task's stop token fires first; no permit is taken then.
    acquire_awaiter acquire() noexcept { return acquire_awaiter{*this}; }

private:
    std::size_t _count;
    detail::waiter_list _waiters;
};

}  // namespace coverse
