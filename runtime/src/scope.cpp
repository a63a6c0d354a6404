// task_scope: detached-task ownership, failure reporting with the task's name, join.
#include <coverse/runtime/scope.hpp>

#include <cstdio>
#include <cstdlib>
#include <mutex>

#include <coverse/runtime/scheduler.hpp>
#include <coverse/runtime/trace.hpp>

namespace coverse {

namespace {
std::mutex g_failure_mutex;
spawn_failure_handler g_failure_handler;
}  // namespace

std::string exception_text(std::exception_ptr e) {
    try {
        std::rethrow_exception(e);
    } catch (const std::exception& x) {
        return x.what();
    } catch (...) {
        return "a non-std exception";
    }
}

spawn_failure_handler set_spawn_failure_handler(spawn_failure_handler h) {
    std::lock_guard lock(g_failure_mutex);
    return std::exchange(g_failure_handler, std::move(h));
}

namespace detail {
void report_spawn_failure(std::string_view name, std::exception_ptr e) noexcept {
    spawn_failure_handler h;
    {
        std::lock_guard lock(g_failure_mutex);
        h = g_failure_handler;
    }
    if (h) {
        h(name, e);
        return;
    }
    std::fprintf(stderr, "coverse: spawned task '%.*s' failed: %s\n", static_cast<int>(name.size()),
                 name.data(), exception_text(e).c_str());
    std::abort();
}
}  // namespace detail

/// The runner of one spawned task. Its promise holds the task's record (linked into the
/// scope from spawn() on, so names are known even before the first run); its frame
/// destroys itself at the end and wakes the joiner when it was the last.
struct task_scope::runner {
    struct promise_type : detail::promise_base {
        task_scope* scope = nullptr;
        record rec;
        runner get_return_object() noexcept {
            return runner{std::coroutine_handle<promise_type>::from_promise(*this)};
        }
        std::suspend_always initial_suspend() const noexcept { return {}; }
        struct final_awaiter {
            bool await_ready() const noexcept { return false; }
            std::coroutine_handle<> await_suspend(
                std::coroutine_handle<promise_type> h) const noexcept {
                task_scope* s = h.promise().scope;
                s->on_finished(h.promise().rec);
                h.destroy();
                if (s->_live == 0 && !s->_joiners.empty()) {
                    auto joiners = std::exchange(s->_joiners, {});
                    for (std::size_t i = 1; i < joiners.size(); ++i)
                        scheduler::this_thread().schedule(joiners[i]);
                    return joiners.front();
                }
                return std::noop_coroutine();
            }
            void await_resume() const noexcept {}
        };
        final_awaiter final_suspend() const noexcept { return {}; }
        void return_void() const noexcept {}
        void unhandled_exception() noexcept {
            try {
                throw;
            } catch (const cancelled_error&) {
                // Ended by a stop request: that is how a scope stops its tasks.
            } catch (...) {
                trace::emit(trace::kind::task_failed, reinterpret_cast<std::uintptr_t>(&rec));
                detail::report_spawn_failure(rec.name, std::current_exception());
            }
        }
    };
    std::coroutine_handle<promise_type> h;
};

task_scope::runner task_scope::run(task<void> t) {
    co_await std::move(t);
}

task_scope::task_scope(std::string name)
    : _name(std::move(name)), _stop(_stop_source.get_token()) {}

task_scope::~task_scope() {
    if (_live > 0) {
        std::fprintf(stderr,
                     "coverse: task_scope '%s' destroyed with %zu task(s) still running (%s); "
                     "co_await scope.join() before the scope goes out of scope\n",
                     _name.c_str(), _live, live_names().c_str());
        std::abort();
    }
}

void task_scope::spawn(task<void> t, std::string name) {
    spawn(std::move(t), std::move(name), scheduler::this_thread());
}

void task_scope::spawn(task<void> t, std::string name, scheduler& on) {
    runner r = run(std::move(t));
    auto& p = r.h.promise();
    p.scope = this;
    p.rec.name = std::move(name);
    p.set_stop(&_stop);
    // Link at the front of the live list.
    p.rec.next = _records;
    if (_records) _records->prev = &p.rec;
    _records = &p.rec;
    ++_live;
    trace::emit(trace::kind::task_spawned, reinterpret_cast<std::uintptr_t>(&p.rec));
    on.schedule(r.h);
}

void task_scope::on_finished(record& r) noexcept {
    trace::emit(trace::kind::task_finished, reinterpret_cast<std::uintptr_t>(&r));
    if (r.prev)
        r.prev->next = r.next;
    else
        _records = r.next;
    if (r.next) r.next->prev = r.prev;
    --_live;
}

task<void> task_scope::join() {
    struct awaiter {
        task_scope* s;
        bool await_ready() const noexcept { return s->_live == 0; }
        void await_suspend(std::coroutine_handle<> h) { s->_joiners.push_back(h); }
        void await_resume() const noexcept {}
    };
    co_await awaiter{this};
}

std::string task_scope::live_names() const {
    std::string out;
    for (const record* r = _records; r; r = r->next) {
        if (!out.empty()) out += ", ";
        out += r->name;
    }
    return out;
}

}  // namespace coverse
