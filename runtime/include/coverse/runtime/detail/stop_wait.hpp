// Cancellation of waits by stop token without a std::stop_callback per wait. A wait that
// honours its task's stop token links itself into its scheduler's stop_wait_list; the owner
// of the stop_source (a task_scope, when_all's join state) holds one stop_hook, whose single
// std::stop_callback cancels the current scheduler's waits on that token. Registering a
// std::stop_callback per wait cost two locked read-modify-writes on the way in and two on
// the way out, on every receive of a ping-pong (docs/coroutines.md, "Costs").
#pragma once

#include <stop_token>

namespace coverse::detail {

struct stop_wait {
    stop_wait* prev = nullptr;
    stop_wait* next = nullptr;
    const std::stop_token* token = nullptr;  // set while linked
    void (*cancel)(stop_wait*) noexcept = nullptr;
    void* owner = nullptr;  // for `cancel`: the wait this is part of
};

/// One scheduler's waits that a stop may cancel (same-thread, like the scheduler).
class stop_wait_list {
public:
    void push(stop_wait* w) noexcept {
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
        w->token = nullptr;
    }
    /// Unlinks and cancels every wait on `token`.
    void cancel_all(const std::stop_token* token) noexcept {
        for (stop_wait* w = _head; w != nullptr;) {
            stop_wait* next = w->next;
            if (w->token == token) {
                remove(w);
                w->cancel(w);
            }
            w = next;
        }
    }
    bool empty() const noexcept { return _head == nullptr; }

private:
    stop_wait* _head = nullptr;
};

/// Cancels the calling thread's scheduler's waits on `token` (stop callbacks run on the
/// thread that requests the stop: request it on the tasks' scheduler, as waiter.hpp says).
void cancel_stop_waits(const std::stop_token* token) noexcept;

/// Held next to a stop_source whose token is handed to tasks; must be declared after the
/// token (it refers to it) and so destroyed before it.
class stop_hook {
public:
    explicit stop_hook(const std::stop_token& t) : _cb(t, fire{&t}) {}
    stop_hook(const stop_hook&) = delete;
    stop_hook& operator=(const stop_hook&) = delete;

private:
    struct fire {
        const std::stop_token* token;
        void operator()() const noexcept { cancel_stop_waits(token); }
    };
    std::stop_callback<fire> _cb;
};

}  // namespace coverse::detail
