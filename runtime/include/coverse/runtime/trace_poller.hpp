// trace_poller: lets a PE's scheduler hand its recorder's partly filled chunk to the writer
// thread when the loop goes idle, so a PE that waits or hangs has its latest events on disk.
#pragma once

#include <chrono>
#include <cstdint>

#include <coverse/runtime/scheduler.hpp>
#include <coverse/runtime/trace.hpp>

namespace coverse::trace {

/// A scheduler poller for a trace recorder: `sched.add_poller(p)` after the session is
/// made, `sched.remove_poller(p)` before either dies. Before the scheduler blocks it hands
/// the partly filled chunk to the writer; while the loop keeps spinning it does the same
/// every 1024 polls when that chunk's oldest event is older than `max_age`. It never
/// reports work, so it does not keep the loop awake, and it never writes itself.
class flush_poller final : public coverse::poller {
public:
    explicit flush_poller(sink& s,
                          std::chrono::nanoseconds max_age = std::chrono::milliseconds(100))
        : _sink(s), _max_age(max_age) {}

    bool poll() override {
        if ((++_polls & 1023) == 0) _sink.hand_off_if_older(_max_age);
        return false;
    }
    bool try_sleep() override {
        _sink.hand_off();
        return true;
    }

private:
    sink& _sink;
    std::chrono::nanoseconds _max_age;
    std::uint32_t _polls = 0;
};

}  // namespace coverse::trace
