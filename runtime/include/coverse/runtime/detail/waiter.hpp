// Intrusive FIFO waiter lists and the cancellable-wait awaiter base shared by event,
// semaphore, channel and sleep. Waking never resumes inline: it queues the waiter on its
// scheduler, so a release() inside a handler cannot recurse into other tasks.
#pragma once

#include <coroutine>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <stop_token>

#include <coverse/runtime/scheduler.hpp>
#include <coverse/runtime/task.hpp>

namespace coverse::detail {

struct waiter {
    enum class state : unsigned char { idle, waiting, woken, cancelled };
    // Written when the wait begins (cancellable_wait::await_suspend, waiter_list::push_back)
    // and read only after: an awaiter that completes at once (await_ready) never writes
    // them. `st` says which: idle until then.
    waiter* prev;
    waiter* next;
    std::coroutine_handle<> handle;
    scheduler* sched;
    state st = state::idle;

    /// Called by the primitive after it unlinked this waiter: resume it later.
    void wake() noexcept {
        st = state::woken;
        sched->schedule(handle);
    }
};

class waiter_list {
public:
    bool empty() const noexcept { return _head == nullptr; }
    waiter* front() const noexcept { return _head; }
    void push_back(waiter* w) noexcept {
        w->prev = _tail;
        w->next = nullptr;
        if (_tail)
            _tail->next = w;
        else
            _head = w;
        _tail = w;
    }
    /// For a waiter that was linked (pushed), popped or not: never for one that never waited,
    /// whose prev is not set (waiter: written when the wait begins).
    void remove(waiter* w) noexcept {
        if (!w->prev && _head != w) return;  // not linked (already popped): nothing to do
        if (w->prev)
            w->prev->next = w->next;
        else
            _head = w->next;
        if (w->next)
            w->next->prev = w->prev;
        else
            _tail = w->prev;
        w->prev = w->next = nullptr;
    }
    waiter* pop_front() noexcept {
        waiter* w = _head;
        if (!w) return nullptr;
        _head = w->next;
        if (_head)
            _head->prev = nullptr;
        else
            _tail = nullptr;
        w->next = nullptr;  // prev is null already: it was the head
        return w;
    }

private:
    waiter* _head = nullptr;
    waiter* _tail = nullptr;
};

/// CRTP base of an awaiter that waits in some primitive's list and honours the awaiting
/// task's stop token. Derived provides `bool try_now()` (complete without waiting),
/// `void enqueue()` and `void dequeue()` (link/unlink itself in the primitive's list).
/// Stop callbacks must run on the scheduler's thread (request stop from a task, a timer
/// or a scheduler.post()): primitives are single-scheduler objects.
template <class Derived>
class cancellable_wait : protected waiter {
public:
    cancellable_wait() = default;
    cancellable_wait(const cancellable_wait&) = delete;
    cancellable_wait& operator=(const cancellable_wait&) = delete;

    bool await_ready() noexcept { return derived().try_now(); }

    template <class P>
    bool await_suspend(std::coroutine_handle<P> h) {
        stop_anchor* stop = nullptr;
        if constexpr (has_stop_v<P>) stop = h.promise().stop_anchor_of();
        if (stop && stop->token.stop_requested()) {
            st = state::cancelled;
            return false;
        }
        handle = h;
        sched = &scheduler::this_thread();
        st = state::waiting;
        derived().enqueue();
        if (stop) {
            _on_stop.cancel = &cancellable_wait::cancel_by_stop;
            _on_stop.owner = this;
            stop->waits.push(&_on_stop);
        }
        return true;
    }

    ~cancellable_wait() {
        if (_on_stop.list) _on_stop.list->remove(&_on_stop);
    }

protected:
    /// For the derived awaiter's destructor: a frame destroyed while it waits (its task
    /// was dropped after an exception unwound the loop) must leave the primitive's list,
    /// or the primitive would later wake freed memory.
    void leave_if_waiting() noexcept {
        if (st == state::waiting) {
            derived().dequeue();
            st = state::cancelled;
        }
    }
    /// For await_resume: throws cancelled_error if the wait was cancelled.
    void check_cancelled() const {
        if (st == state::cancelled) throw cancelled_error{};
    }

private:
    // The stop anchor of the task's token unlinked this wait and cancels it.
    static void cancel_by_stop(stop_wait* w) noexcept {
        auto* self = static_cast<cancellable_wait*>(w->owner);
        if (scheduler::current() != self->sched) wrong_thread_stop();
        if (self->st != state::waiting) return;
        self->derived().dequeue();
        self->st = state::cancelled;
        self->sched->schedule(self->handle);
    }
    [[noreturn]] static void wrong_thread_stop() noexcept {
        std::fputs(
            "coverse: a stop was requested from a thread other than the waiting task's "
            "scheduler; request stops on that scheduler (scheduler::post a lambda that "
            "calls request_stop)\n",
            stderr);
        std::abort();
    }
    Derived& derived() noexcept { return static_cast<Derived&>(*this); }

    stop_wait _on_stop;
};

}  // namespace coverse::detail
