// task_scope: the only owner of tasks that nobody awaits. Spawned tasks run detached on
// the current scheduler; the scope counts them, can ask them to stop, and must be joined
// before it dies. An exception escaping a spawned task is reported with the task's name.
#pragma once

#include <coroutine>
#include <cstddef>
#include <exception>
#include <functional>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include <coverse/runtime/detail/stop_wait.hpp>
#include <coverse/runtime/task.hpp>

namespace coverse {

/// Called with the task's name and its exception when a spawned task fails. The default
/// prints "coverse: spawned task '<name>' failed: <what>" to stderr and aborts: a protocol
/// task that dies silently is how runtimes hang.
using spawn_failure_handler = std::function<void(std::string_view name, std::exception_ptr)>;
/// Installs a process-wide handler (null restores the default); returns the previous one.
spawn_failure_handler set_spawn_failure_handler(spawn_failure_handler h);
/// An exception's what(), or "a non-std exception": for the reports of failed tasks.
std::string exception_text(std::exception_ptr e);

class scheduler;

class task_scope {
public:
    explicit task_scope(std::string name = "scope");
    /// A scope destroyed while tasks it spawned still run is a bug (they would outlive
    /// what they reference): it is reported with the scope's and the tasks' names, and
    /// the process aborts.
    ~task_scope();
    task_scope(const task_scope&) = delete;
    task_scope& operator=(const task_scope&) = delete;

    /// Starts `t` on the current scheduler (it runs from the next loop iteration). The
    /// task inherits this scope's stop token.
    void spawn(task<void> t, std::string name);
    /// Same, on the given scheduler (of this thread) rather than the current one.
    void spawn(task<void> t, std::string name, scheduler& on);

    /// Completes when every spawned task has finished (immediately if none runs). Any
    /// number of tasks may join at once.
    task<void> join();
    /// Asks every spawned task to stop (their cancellable waits throw cancelled_error).
    /// Call it on the scheduler's thread (from a task, a timer or a scheduler::post).
    void request_stop() noexcept { _stop_source.request_stop(); }
    /// Whether a task of this scope is in a cancellable wait (diagnostics and tests).
    bool waiting_for_stop() const noexcept { return !_stop.waits.empty(); }
    std::size_t live() const noexcept { return _live; }
    const std::string& name() const noexcept { return _name; }
    /// Names of the running tasks, comma separated (for diagnostics).
    std::string live_names() const;

private:
    struct record {
        std::string name;
        record* prev = nullptr;
        record* next = nullptr;
    };
    struct runner;
    static runner run(task<void> t);
    void on_finished(record& r) noexcept;

    std::string _name;
    std::stop_source _stop_source;
    detail::stop_anchor _stop;  // its token, and our tasks' waits that a stop cancels
    std::size_t _live = 0;
    record* _records = nullptr;
    std::vector<std::coroutine_handle<>> _joiners;
};

namespace detail {
void report_spawn_failure(std::string_view name, std::exception_ptr e) noexcept;
}

}  // namespace coverse
