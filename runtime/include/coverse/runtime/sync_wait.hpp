// sync_wait: runs the calling thread's scheduler loop until a task finishes and returns
// its value. Re-entrant: called inside a user-handler delivery it makes I/O and protocol
// progress but runs no other delivery (see scheduler::post_delivery).
#pragma once

#include <coroutine>
#include <exception>
#include <optional>
#include <type_traits>
#include <utility>

#include <coverse/runtime/scheduler.hpp>
#include <coverse/runtime/task.hpp>

namespace coverse {

namespace detail {
class sync_runner {
public:
    struct promise_type : promise_base {
        bool done = false;
        sync_runner get_return_object() noexcept {
            return sync_runner{std::coroutine_handle<promise_type>::from_promise(*this)};
        }
        std::suspend_always initial_suspend() const noexcept { return {}; }
        std::suspend_always final_suspend() const noexcept { return {}; }
        void return_void() noexcept { done = true; }
        void unhandled_exception() const noexcept { std::terminate(); }  // body catches
    };
    explicit sync_runner(std::coroutine_handle<promise_type> h) noexcept : _h(h) {}
    sync_runner(sync_runner&& o) noexcept : _h(std::exchange(o._h, {})) {}
    ~sync_runner() {
        if (_h) _h.destroy();
    }
    std::coroutine_handle<promise_type> handle() const noexcept { return _h; }

private:
    std::coroutine_handle<promise_type> _h;
};

template <class T>
sync_runner run_sync(task<T> t, std::optional<value_t<T>>* out, std::exception_ptr* err) {
    try {
        if constexpr (std::is_void_v<T>) {
            co_await std::move(t);
            out->emplace();
        } else {
            out->emplace(co_await std::move(t));
        }
    } catch (...) {
        *err = std::current_exception();
    }
}
}  // namespace detail

/// Runs `t` to completion on this thread's scheduler (creating one for the call if the
/// thread has none) and returns its value or rethrows its exception.
template <class T>
T sync_wait(task<T> t) {
    std::optional<scheduler> own;
    scheduler* s = scheduler::current();
    if (!s) s = &own.emplace();
    std::optional<detail::value_t<T>> out;
    std::exception_ptr err;
    auto runner = detail::run_sync(std::move(t), &out, &err);
    auto h = runner.handle();
    h.resume();
    s->run_until([&] { return h.done(); });
    if (err) std::rethrow_exception(err);
    if constexpr (!std::is_void_v<T>) return std::move(*out);
}

}  // namespace coverse
