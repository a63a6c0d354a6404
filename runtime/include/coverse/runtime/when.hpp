// when_all / when_any: run several tasks concurrently on the current scheduler and wait.
// Children inherit a stop token linked to the caller's. when_all fails fast (first error
// stops the siblings) but always waits for every child before it returns; when_any stops
// the losers and waits for them too, so nothing outlives the call.
#pragma once

#include <coroutine>
#include <cstddef>
#include <exception>
#include <optional>
#include <stop_token>
#include <tuple>
#include <utility>
#include <variant>
#include <vector>

#include <coverse/runtime/detail/stop_wait.hpp>
#include <coverse/runtime/task.hpp>

namespace coverse {

namespace detail {

struct join_state {
    explicit join_state(std::size_t children) : remaining(children + 1) {}
    std::size_t remaining;  // children + the parent's own arrival in wait()
    std::coroutine_handle<> parent;
    std::exception_ptr first_error;
    std::size_t winner = static_cast<std::size_t>(-1);
    bool stop_on_first = false;  // when_any: the first finisher stops the rest
    std::stop_source stop;
    stop_anchor anchor{stop.get_token()};  // the children's token and their waits

    /// The parent's arrival: suspends unless every child already finished.
    auto wait() noexcept {
        struct awaiter {
            join_state* st;
            bool await_ready() const noexcept { return false; }
            bool await_suspend(std::coroutine_handle<> h) noexcept {
                st->parent = h;
                return --st->remaining != 0;
            }
            void await_resume() const noexcept {}
        };
        return awaiter{this};
    }
};

/// A child runner: starts inline, destroys its own frame at the end and, if it is the
/// last to arrive, resumes the parent by symmetric transfer.
class join_child {
public:
    struct promise_type : promise_base {
        join_state* st = nullptr;
        join_child get_return_object() noexcept {
            return join_child{std::coroutine_handle<promise_type>::from_promise(*this)};
        }
        std::suspend_always initial_suspend() const noexcept { return {}; }
        struct final_awaiter {
            bool await_ready() const noexcept { return false; }
            std::coroutine_handle<> await_suspend(
                std::coroutine_handle<promise_type> h) const noexcept {
                join_state* st = h.promise().st;
                h.destroy();
                if (--st->remaining == 0) return st->parent;
                return std::noop_coroutine();
            }
            void await_resume() const noexcept {}
        };
        final_awaiter final_suspend() const noexcept { return {}; }
        void return_void() const noexcept {}
        void unhandled_exception() const noexcept { std::terminate(); }  // bodies catch all
    };

    explicit join_child(std::coroutine_handle<promise_type> h) noexcept : _h(h) {}
    join_child(join_child&& o) noexcept : _h(std::exchange(o._h, {})) {}
    join_child& operator=(join_child&&) = delete;
    /// A child that was never started (a later sibling's frame allocation threw) is
    /// destroyed here; a started one destroys itself when it finishes.
    ~join_child() {
        if (_h) _h.destroy();
    }
    void start(join_state& st) {
        auto h = std::exchange(_h, {});
        h.promise().st = &st;
        h.promise().set_stop(&st.anchor);
        h.resume();
    }

private:
    std::coroutine_handle<promise_type> _h;
};

template <class T>
join_child run_child(task<T> t, join_state* st, std::optional<value_t<T>>* out, std::size_t index) {
    try {
        if constexpr (std::is_void_v<T>) {
            co_await std::move(t);
            out->emplace();
        } else {
            out->emplace(co_await std::move(t));
        }
    } catch (...) {
        if (!st->first_error) st->first_error = std::current_exception();
        st->stop.request_stop();
    }
    if (st->winner == static_cast<std::size_t>(-1)) {
        st->winner = index;
        if (st->stop_on_first) st->stop.request_stop();
    }
}

/// Links the caller's stop token to the children's stop source for the call's duration.
struct stop_link {
    struct forward {
        join_state* st;
        void operator()() const noexcept { st->stop.request_stop(); }
    };
    std::stop_callback<forward> cb;
    stop_link(const std::stop_token& parent, join_state& st) : cb(parent, forward{&st}) {}
};

}  // namespace detail

/// Waits for every task; returns their results as a tuple (void → std::monostate).
/// If any child throws, the others are asked to stop, and the first exception is
/// rethrown once all have finished.
template <class... Ts>
task<std::tuple<detail::value_t<Ts>...>> when_all(task<Ts>... tasks) {
    detail::join_state st(sizeof...(Ts));
    detail::stop_link link(co_await this_task::stop_token(), st);
    std::tuple<std::optional<detail::value_t<Ts>>...> results;
    auto start = [&]<std::size_t... I>(std::index_sequence<I...>, auto&... ts) {
        // Every child frame is allocated before any starts: if an allocation throws,
        // nothing is running yet that could point into this unwinding frame.
        detail::join_child children[] = {
            detail::run_child(std::move(ts), &st, &std::get<I>(results), I)...};
        for (auto& c : children)
            c.start(st);
    };
    start(std::index_sequence_for<Ts...>{}, tasks...);
    co_await st.wait();
    if (st.first_error) std::rethrow_exception(st.first_error);
    co_return std::apply(
        [](auto&... r) { return std::tuple<detail::value_t<Ts>...>(std::move(*r)...); }, results);
}

/// Waits for every task of a vector; results in the same order.
template <class T>
task<std::vector<detail::value_t<T>>> when_all(std::vector<task<T>> tasks) {
    detail::join_state st(tasks.size());
    detail::stop_link link(co_await this_task::stop_token(), st);
    std::vector<std::optional<detail::value_t<T>>> results(tasks.size());
    std::vector<detail::join_child> children;  // allocated first: see when_all above
    children.reserve(tasks.size());
    for (std::size_t i = 0; i < tasks.size(); ++i)
        children.push_back(detail::run_child(std::move(tasks[i]), &st, &results[i], i));
    for (auto& c : children)
        c.start(st);
    co_await st.wait();
    if (st.first_error) std::rethrow_exception(st.first_error);
    std::vector<detail::value_t<T>> out;
    out.reserve(results.size());
    for (auto& r : results)
        out.push_back(std::move(*r));
    co_return out;
}

template <class... Ts>
struct when_any_result {
    std::size_t index;  // which task finished first
    std::variant<detail::value_t<Ts>...> value;
};

/// Waits for the first task to finish, asks the others to stop and waits for them, then
/// returns the winner's index and value (or rethrows the winner's exception). Losers'
/// results and exceptions (usually cancelled_error) are discarded.
template <class... Ts>
task<when_any_result<Ts...>> when_any(task<Ts>... tasks) {
    detail::join_state st(sizeof...(Ts));
    st.stop_on_first = true;
    detail::stop_link link(co_await this_task::stop_token(), st);
    std::tuple<std::optional<detail::value_t<Ts>>...> results;
    auto start = [&]<std::size_t... I>(std::index_sequence<I...>, auto&... ts) {
        // Every child frame is allocated before any starts: if an allocation throws,
        // nothing is running yet that could point into this unwinding frame.
        detail::join_child children[] = {
            detail::run_child(std::move(ts), &st, &std::get<I>(results), I)...};
        for (auto& c : children)
            c.start(st);
    };
    start(std::index_sequence_for<Ts...>{}, tasks...);
    co_await st.wait();
    std::optional<when_any_result<Ts...>> out;
    auto pick = [&]<std::size_t I>(std::integral_constant<std::size_t, I>) {
        if (I == st.winner && std::get<I>(results).has_value())
            out.emplace(when_any_result<Ts...>{
                I, std::variant<detail::value_t<Ts>...>(std::in_place_index<I>,
                                                        std::move(*std::get<I>(results)))});
    };
    [&]<std::size_t... I>(std::index_sequence<I...>) {
        (pick(std::integral_constant<std::size_t, I>{}), ...);
    }
    (std::index_sequence_for<Ts...>{});
    if (!out) std::rethrow_exception(st.first_error);
    co_return std::move(*out);
}

}  // namespace coverse
