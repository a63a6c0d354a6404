// Cancellation of waits by stop token without a std::stop_callback per wait. The owner of a
// stop_source whose token reaches tasks (a task_scope, when_all's join state) holds a
// stop_anchor: the token, the list of waits under it, and one std::stop_callback that
// cancels them. Promises point at the anchor, so a wait links into its own token's list
// (two pointer writes) instead of registering a std::stop_callback, which cost two locked
// read-modify-writes on the way in and two on the way out, on every receive of a
// ping-pong (docs/coroutines.md, "How it works").
#pragma once

#include <stop_token>
#include <utility>

namespace coverse::detail {

struct stop_wait {
    // All but `list` are written when the wait is linked and read only while it is: a wait
    // that never suspends (its awaiter's await_ready) pays one store here.
    stop_wait* prev;
    stop_wait* next;
    class stop_wait_list* list = nullptr;  // set while linked
    void (*cancel)(stop_wait*) noexcept;
    void* owner;  // for `cancel`: the wait this is part of
};

/// The waits under one stop token; same-thread, like the primitives they wait on.
class stop_wait_list {
public:
    void push(stop_wait* w) noexcept {
        w->list = this;
        w->prev = nullptr;
        w->next = _head;
        if (_head) _head->prev = w;
        _head = w;
    }
    void remove(stop_wait* w) noexcept {
        if (w->prev)
            w->prev->next = w->next;
        else
            _head = w->next;
        if (w->next) w->next->prev = w->prev;
        w->prev = w->next = nullptr;
        w->list = nullptr;
    }
    /// Unlinks and cancels every wait.
    void cancel_all() noexcept {
        while (stop_wait* w = _head) {
            remove(w);
            w->cancel(w);
        }
    }
    bool empty() const noexcept { return _head == nullptr; }

private:
    stop_wait* _head = nullptr;
};

/// A stop token handed to tasks, with the waits under it. Lives beside its stop_source
/// and outlives every task that holds a pointer to it.
class stop_anchor {
public:
    explicit stop_anchor(std::stop_token t) : token(std::move(t)), _cb(token, fire{this}) {}
    stop_anchor(const stop_anchor&) = delete;
    stop_anchor& operator=(const stop_anchor&) = delete;

    const std::stop_token token;
    stop_wait_list waits;

private:
    struct fire {
        stop_anchor* self;
        void operator()() const noexcept { self->waits.cancel_all(); }
    };
    std::stop_callback<fire> _cb;  // last: registered once the list exists
};

}  // namespace coverse::detail
