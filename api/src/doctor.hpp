// doctor (PE side): what the hang report needs from a running PE. `pe_activity` is the
// handful of counters the PE thread keeps current on its hot path (relaxed atomic stores,
// one writer, no lock, no clock read); `pe_doctor` is the responder thread that answers the
// launcher's state requests on the doctor channel — from the scheduler when it is free
// (a posted snapshot), from those counters alone when the PE is busy in a handler.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>

#include <coverse/net/doctor.hpp>

namespace coverse::detail {

class pe_core;

/// Written only by the PE thread, read by the responder thread.
class pe_activity {
public:
    /// Sizes the per-peer counters (at start-up, before any message arrives).
    void reset(std::uint32_t num_pes) {
        _heard = std::make_unique<std::atomic<std::uint64_t>[]>(num_pes);
        _num_pes = num_pes;
    }
    /// A message (or barrier frame) arrived from `pe`.
    void heard_from(std::uint32_t pe) noexcept {
        if (pe < _num_pes) bump(_heard[pe]);
        bump(_progress);
    }
    std::uint32_t num_pes() const noexcept { return _num_pes; }
    std::uint64_t heard(std::uint32_t pe) const noexcept {
        return _heard[pe].load(std::memory_order_relaxed);
    }
    std::uint64_t progress() const noexcept { return _progress.load(std::memory_order_relaxed); }
    std::uint64_t handler_entries() const noexcept {
        return _entries.load(std::memory_order_relaxed);
    }
    std::int32_t handler() const noexcept { return _handler.load(std::memory_order_relaxed); }
    const void* handler_fn() const noexcept { return _fn.load(std::memory_order_relaxed); }

    /// Marks a handler call for its lifetime (call_handler wraps each one).
    class in_handler {
    public:
        in_handler(pe_activity& a, std::int32_t handler, const void* fn) noexcept
            : _a(a),
              _prev(a._handler.load(std::memory_order_relaxed)),
              _prev_fn(a._fn.load(std::memory_order_relaxed)) {
            a._fn.store(fn, std::memory_order_relaxed);
            a._handler.store(handler, std::memory_order_relaxed);
            bump(a._entries);
        }
        ~in_handler() {
            _a._handler.store(_prev, std::memory_order_relaxed);
            _a._fn.store(_prev_fn, std::memory_order_relaxed);
            bump(_a._progress);
        }
        in_handler(const in_handler&) = delete;
        in_handler& operator=(const in_handler&) = delete;

    private:
        pe_activity& _a;
        std::int32_t _prev;
        const void* _prev_fn;
    };

private:
    // One writer: a plain load and store, no read-modify-write instruction.
    static void bump(std::atomic<std::uint64_t>& a) noexcept {
        a.store(a.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    }
    std::unique_ptr<std::atomic<std::uint64_t>[]> _heard;
    std::uint32_t _num_pes = 0;
    std::atomic<std::uint64_t> _progress{0};
    std::atomic<std::uint64_t> _entries{0};
    std::atomic<std::int32_t> _handler{-1};
    std::atomic<const void*> _fn{nullptr};
};

/// The responder thread. Started when COVERSE_DOCTOR_FD names a doctor channel (the
/// launcher made one); the destructor (on the PE thread, before the scheduler goes) stops
/// and joins it.
class pe_doctor {
public:
    /// nullptr when the process has no doctor channel.
    static std::unique_ptr<pe_doctor> start_from_env(pe_core& core);
    ~pe_doctor();
    pe_doctor(const pe_doctor&) = delete;
    pe_doctor& operator=(const pe_doctor&) = delete;

    struct shared;  // what the thread and posted snapshots share

private:
    pe_doctor(pe_core& core, int fd);
    std::shared_ptr<shared> _shared;
    std::thread _thread;
};

}  // namespace coverse::detail
