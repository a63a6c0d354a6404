// task<T>: the lazy, move-only coroutine type every coverse protocol step is written as.
// Symmetric transfer at final_suspend, exceptions delivered to the awaiter, and the
// awaiter's cancellation token inherited by the awaited task.
#pragma once

#include <atomic>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <mutex>
#include <new>
#include <stop_token>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include <coverse/runtime/detail/stop_wait.hpp>

namespace coverse {

/// Thrown by a cancellable wait (sleep, event, semaphore, channel) whose stop token was
/// triggered. Tasks normally let it propagate; `with_timeout` and `when_any` absorb it.
class cancelled_error : public std::exception {
public:
    const char* what() const noexcept override { return "coverse: operation cancelled"; }
};

template <class T = void>
class task;

/// How an awaited task hands control back. Optimised GCC builds turn symmetric transfer
/// into a real tail call; at -O0, and under ASan at any -O (its stack redzones keep the
/// call from being the last thing the resuming function does), GCC 12 emits a nested call
/// instead, and a loop of a million synchronously completing awaits overflows the stack.
/// Those builds therefore use a handshake: the awaiter resumes the child with a plain call
/// and, if the child finished meanwhile, does not suspend at all. Both paths are tested by
/// the Debug+ASan and the Release runs of the same test.
#if defined(__OPTIMIZE__) && !defined(__SANITIZE_ADDRESS__) && !defined(COVERSE_TASK_HANDSHAKE)
#define COVERSE_TASK_SYMMETRIC_TRANSFER 1
#else
#define COVERSE_TASK_SYMMETRIC_TRANSFER 0
#endif

namespace detail {

/// Live coroutine frames of every promise type that derives from promise_base, counted per
/// thread: each thread's shard is written by that thread alone with a relaxed load and store,
/// no locked read-modify-write (two of those per frame were a measurable part of a small
/// coroutine send). Tests read the sum, live_task_frames(), to prove nothing leaks; a frame
/// made on one thread and freed on another leaves +1 and -1 in two shards, which sum right.
class frame_counter {
public:
    static frame_counter& of_this_thread() noexcept {
        // A constant-initialised pointer: no guard or init call on each frame; the shard is
        // made, and registered, on the thread's first frame only.
        if (!t_shard) [[unlikely]]
            t_shard = &make_for_this_thread();
        return *t_shard;
    }
    void add(std::int64_t d) noexcept {
        if (this == &late()) [[unlikely]]  // shared by every thread that is ending
            _n.fetch_add(d, std::memory_order_relaxed);
        else
            _n.store(_n.load(std::memory_order_relaxed) + d, std::memory_order_relaxed);
    }
    /// Every thread's count plus those of threads that ended.
    static std::int64_t total() noexcept {
        const std::lock_guard lock(registry().mu);
        std::int64_t sum = registry().retired + late()._n.load(std::memory_order_relaxed);
        for (const frame_counter* c : registry().live)
            sum += c->_n.load(std::memory_order_relaxed);
        return sum;
    }
    frame_counter(const frame_counter&) = delete;
    frame_counter& operator=(const frame_counter&) = delete;

private:
    struct shards {
        std::mutex mu;
        std::vector<frame_counter*> live;
        std::int64_t retired = 0;
    };
    struct late_tag {};
    static inline constinit thread_local frame_counter* t_shard = nullptr;
    [[gnu::noinline]] static frame_counter& make_for_this_thread() noexcept {
        thread_local frame_counter c;
        return c;
    }
    // Never destroyed: threads may end (and retire their shard) after static destructors.
    static shards& registry() noexcept {
        static shards* s = new shards;
        return *s;
    }
    // Frames freed on a thread after its shard was retired (thread-local teardown) count
    // here, with a read-modify-write: several threads may be ending at once.
    static frame_counter& late() noexcept {
        static frame_counter* c = new frame_counter(late_tag{});
        return *c;
    }
    explicit frame_counter(late_tag) noexcept {}
    frame_counter() {
        const std::lock_guard lock(registry().mu);
        registry().live.push_back(this);
    }
    ~frame_counter() {
        const std::lock_guard lock(registry().mu);
        auto& v = registry().live;
        registry().retired += _n.load(std::memory_order_relaxed);
        for (std::size_t i = 0; i < v.size(); ++i)
            if (v[i] == this) {
                v[i] = v.back();
                v.pop_back();
                break;
            }
        t_shard = &late();
    }
    std::atomic<std::int64_t> _n{0};
};

/// A per-thread cache of coroutine frames by size class. Protocol code awaits short-lived
/// child tasks all the time; recycling their frames instead of going to malloc halves the
/// cost of an await (bench_runtime resume_ready/child). Off under ASan, which must see
/// every frame's allocation and release to catch a use after free.
class frame_cache {
public:
    static constexpr std::size_t granule = 64;
    static constexpr std::size_t classes = 16;  // frames up to 1 KiB
    static constexpr unsigned max_per_class = 64;

    ~frame_cache() {
        _alive = false;
        for (node*& head : _heads)
            while (head)
                ::operator delete(std::exchange(head, head->next));
    }

    void* allocate(std::size_t n) {
        const std::size_t c = (n - 1) / granule;
        if (c < classes) {
            if (node* f = _heads[c]) {
                _heads[c] = f->next;
                --_counts[c];
                return f;
            }
            return fresh((c + 1) * granule);
        }
        return fresh(n);
    }

    void release(void* p, std::size_t n) noexcept {
        const std::size_t c = (n - 1) / granule;
        if (c < classes && _alive && _counts[c] < max_per_class) {
            _heads[c] = new (p) node{_heads[c]};
            ++_counts[c];
            return;
        }
        ::operator delete(p);
    }

private:
    struct node {
        node* next;
    };
    // Out of line: g++ 12, seeing ::operator new inlined into a frame's allocation and the
    // promise's own operator delete at its end, warns of a mismatched pair (a false alarm).
    [[gnu::noinline]] static void* fresh(std::size_t n) { return ::operator new(n); }
    node* _heads[classes] = {};
    unsigned _counts[classes] = {};
    bool _alive = true;  // frames freed during thread teardown bypass the cache
};

#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool frame_cache_enabled = false;
#else
inline constexpr bool frame_cache_enabled = true;
#endif

inline frame_cache& thread_frame_cache() noexcept {
    thread_local frame_cache cache;
    return cache;
}

class promise_base {
public:
    static void* operator new(std::size_t n) {
        if constexpr (frame_cache_enabled) return thread_frame_cache().allocate(n);
        return ::operator new(n);
    }
    static void operator delete(void* p, std::size_t n) noexcept {
        if constexpr (frame_cache_enabled)
            thread_frame_cache().release(p, n);
        else
            ::operator delete(p);
    }

    promise_base() noexcept { frame_counter::of_this_thread().add(1); }
    ~promise_base() { frame_counter::of_this_thread().add(-1); }
    promise_base(const promise_base&) = delete;
    promise_base& operator=(const promise_base&) = delete;

    /// The stop token of the operation this frame belongs to. A pointer, not a copy: the
    /// token lives in an ancestor frame (with_timeout, when_any, a scope) that outlives
    /// this one, and copying a std::stop_token costs two atomic operations per await.
    const std::stop_token* stop() const noexcept { return _stop ? &_stop->token : nullptr; }
    /// The token with the waits under it (detail/stop_wait.hpp).
    stop_anchor* stop_anchor_of() const noexcept { return _stop; }
    void set_stop(stop_anchor* s) noexcept { _stop = s; }

protected:
    stop_anchor* _stop = nullptr;
};

template <class P>
inline constexpr bool has_stop_v = std::is_base_of_v<promise_base, P>;

/// Copies the awaiting coroutine's stop token into the awaited one, when both have one.
template <class Caller>
void inherit_stop(promise_base& callee, std::coroutine_handle<Caller> caller) noexcept {
    if constexpr (has_stop_v<Caller>) callee.set_stop(caller.promise().stop_anchor_of());
}

class task_promise_base : public promise_base {
public:
    std::suspend_always initial_suspend() const noexcept { return {}; }

    struct final_awaiter {
        bool await_ready() const noexcept { return false; }
        // Symmetric transfer: resuming the awaiter is a tail call, so a loop of
        // synchronously completing awaits does not grow the stack.
        template <class P>
        std::coroutine_handle<> await_suspend(std::coroutine_handle<P> self) const noexcept {
#if COVERSE_TASK_SYMMETRIC_TRANSFER
            return self.promise()._continuation;
#else
            // Whoever arrives second continues: if the awaiter is still inside its
            // await_suspend, it sees the flag and simply does not suspend.
            auto& p = self.promise();
            if (p._handshake.exchange(true, std::memory_order_acq_rel)) return p._continuation;
            return std::noop_coroutine();
#endif
        }
        void await_resume() const noexcept {}
    };
    final_awaiter final_suspend() const noexcept {
        return {};
    }

    void set_continuation(std::coroutine_handle<> c) noexcept {
        _continuation = c;
    }

#if !COVERSE_TASK_SYMMETRIC_TRANSFER
    /// Starts the task with a plain call; true if the awaiter must suspend (the task has
    /// not finished yet, and will resume the awaiter when it does).
    bool start_and_check_pending(std::coroutine_handle<> self) noexcept {
        self.resume();
        return !_handshake.exchange(true, std::memory_order_acq_rel);
    }

private:
    std::atomic<bool> _handshake{false};
#else
private:
#endif
    std::coroutine_handle<> _continuation = std::noop_coroutine();
};

template <class T>
class task_promise final : public task_promise_base {
public:
    task<T> get_return_object() noexcept;

    template <class U>
    requires std::is_convertible_v<U&&, T>
    void return_value(U&& v) noexcept(std::is_nothrow_constructible_v<T, U&&>) {
        _result.template emplace<1>(std::forward<U>(v));
    }
    void unhandled_exception() noexcept { _result.template emplace<2>(std::current_exception()); }

    T take() {
        if (_result.index() == 2) std::rethrow_exception(std::get<2>(_result));
        return std::move(std::get<1>(_result));
    }

private:
    std::variant<std::monostate, T, std::exception_ptr> _result;
};

template <>
class task_promise<void> final : public task_promise_base {
public:
    task<void> get_return_object() noexcept;
    void return_void() noexcept {}
    void unhandled_exception() noexcept { _exception = std::current_exception(); }
    void take() {
        if (_exception) std::rethrow_exception(_exception);
    }

private:
    std::exception_ptr _exception;
};

}  // namespace detail

/// A lazily started coroutine producing a T. Awaiting it starts it; its frame is freed
/// when the task object is destroyed. Only `co_await`, `sync_wait` or an owning scope
/// (`task_scope::spawn`, `scheduler::spawn`) may run it.
template <class T>
class [[nodiscard]] task {
public:
    using promise_type = detail::task_promise<T>;
    using handle_type = std::coroutine_handle<promise_type>;
    using value_type = T;

    task() noexcept = default;
    explicit task(handle_type h) noexcept : _h(h) {}
    task(task&& o) noexcept : _h(std::exchange(o._h, {})) {}
    task& operator=(task&& o) noexcept {
        if (this != &o) {
            if (_h) _h.destroy();
            _h = std::exchange(o._h, {});
        }
        return *this;
    }
    task(const task&) = delete;
    task& operator=(const task&) = delete;
    ~task() {
        if (_h) _h.destroy();
    }

    bool valid() const noexcept { return static_cast<bool>(_h); }

    struct awaiter {
        handle_type h;
        bool await_ready() const noexcept { return false; }
#if COVERSE_TASK_SYMMETRIC_TRANSFER
        template <class Caller>
        std::coroutine_handle<> await_suspend(std::coroutine_handle<Caller> caller) noexcept {
            h.promise().set_continuation(caller);
            detail::inherit_stop(h.promise(), caller);
            return h;
        }
#else
        template <class Caller>
        bool await_suspend(std::coroutine_handle<Caller> caller) noexcept {
            h.promise().set_continuation(caller);
            detail::inherit_stop(h.promise(), caller);
            return h.promise().start_and_check_pending(h);
        }
#endif
        T await_resume() {
            return h.promise().take();
        }
    };

    /// Awaiting an empty (moved-from) task is a programming error caught in debug builds.
    awaiter operator co_await() const& noexcept {
        return awaiter{_h};
    }
    awaiter operator co_await() && noexcept {
        return awaiter{_h};
    }

    /// For the runners in this library (sync_wait, scopes, when_all): the raw handle.
    handle_type handle() const noexcept {
        return _h;
    }

private:
    handle_type _h;
};

namespace detail {
template <class T>
task<T> task_promise<T>::get_return_object() noexcept {
    return task<T>{std::coroutine_handle<task_promise<T>>::from_promise(*this)};
}
inline task<void> task_promise<void>::get_return_object() noexcept {
    return task<void>{std::coroutine_handle<task_promise<void>>::from_promise(*this)};
}

/// The value a task<T> yields in aggregate results: void becomes std::monostate.
template <class T>
using value_t = std::conditional_t<std::is_void_v<T>, std::monostate, T>;
}  // namespace detail

/// The number of live coroutine frames whose promise derives from coverse's promise base.
inline std::int64_t live_task_frames() noexcept {
    return detail::frame_counter::total();
}

namespace this_task {
/// `co_await this_task::stop_token()` yields the current task's stop token (empty when the
/// task was started without one), for tasks that poll for cancellation themselves.
struct stop_token_awaiter {
    std::stop_token token;
    bool await_ready() const noexcept { return false; }
    template <class P>
    bool await_suspend(std::coroutine_handle<P> h) noexcept {
        if constexpr (detail::has_stop_v<P>) {
            if (auto* s = h.promise().stop()) token = *s;
        }
        return false;  // never actually suspends
    }
    std::stop_token await_resume() noexcept { return std::move(token); }
};
inline stop_token_awaiter stop_token() noexcept {
    return {};
}
}  // namespace this_task

}  // namespace coverse
