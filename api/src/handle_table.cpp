// The handle table of one PE's machine core: send handles (index, generation, frames in
// flight, the buffer to free) from acquisition to release. See pe_core.hpp for the stages.
#include "pe_core.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>

#include <coverse/alloc/config.hpp>
#include <coverse/alloc/message.hpp>
#include <coverse/runtime/settings.hpp>
#include <coverse/runtime/sync_wait.hpp>
#include <coverse/runtime/timer.hpp>

namespace coverse::detail {

// ---------------------------------------------------------------------------------------
// The handle table

CmiCommHandle pe_core::user_handle(std::uint32_t slot) const noexcept {
    const std::uint64_t v = (std::uint64_t{_slots[slot].generation} << 32) | (slot + 1);
    return reinterpret_cast<CmiCommHandle>(static_cast<std::uintptr_t>(v));
}

std::uint32_t pe_core::slot_of(CmiCommHandle h, const char* caller) const {
    const auto v = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(h));
    const std::uint32_t index = static_cast<std::uint32_t>(v & 0xFFFF'FFFFu);
    const std::uint32_t gen = static_cast<std::uint32_t>(v >> 32);
    if (index == 0 || index > _slots.size() || !_slots[index - 1].in_use ||
        _slots[index - 1].generation != gen || !_slots[index - 1].user_owned ||
        _slots[index - 1].released) {
        char buf[160];
        std::snprintf(buf, sizeof buf,
                      "%s: %p is not a live communication handle of PE %u (already released, "
                      "or not returned by an async send)",
                      caller, h, _pe);
        const_cast<pe_core*>(this)->fatal(buf);
    }
    return index - 1;
}

std::uint32_t pe_core::acquire_slot(const char* caller) {
    if (_free_slots.empty()) {
        // Back-pressure: wait for a send to finish. If nothing is in flight, every handle is
        // held by the application and waiting would never end.
        if (_sends_in_flight == 0)
            fatal(std::string(caller) + ": all " + std::to_string(_slots.size()) +
                  " communication handles are held by the application (async sends whose "
                  "handles were never released with CmiReleaseCommHandle); release them or "
                  "raise MAXIMUM_HANDLES");
        const wait_scope w({wait_kind::handle_slot, no_peer, 0, "MAXIMUM_HANDLES in use"});
        _sched->run_until([&] { return !_free_slots.empty() || _sends_in_flight == 0; });
        if (_free_slots.empty()) return acquire_slot(caller);
    }
    const std::uint32_t s = _free_slots.back();
    _free_slots.pop_back();
    auto& slot = _slots[s];
    slot.in_use = true;
    slot.user_owned = false;
    slot.released = false;
    slot.pending = 0;
    slot.free_when_done = nullptr;
    slot.traced_first = false;
    slot.trace_id = (std::uint64_t{slot.generation} << 32) | s;
    return s;
}

task<void> pe_core::wait_for_slot() {
    while (_free_slots.empty())
        co_await slot_or_loss();
}

void pe_core::free_slot(std::uint32_t s) {
    auto& slot = _slots[s];
    trace::emit(trace::kind::handle_released, slot.trace_id);
    slot.in_use = false;
    ++slot.generation;
    _free_slots.push_back(s);
    _slot_waiters.notify_all();
}

// A frame of the slot's send reached the kernel (or the local queue).
void pe_core::slot_sent(std::uint32_t s) {
    auto& slot = _slots[s];
    if (--slot.pending > 0) return;
    --_sends_in_flight;
    trace::emit(trace::kind::handle_completed, slot.trace_id);
    if (slot.free_when_done) {
        alloc::msg_free(slot.free_when_done);
        slot.free_when_done = nullptr;
    }
    _held_bytes -= slot.held;
    slot.held = 0;
    if (!slot.user_owned || slot.released) free_slot(s);
    _send_waiters.notify_all();
}

bool pe_core::handle_done(CmiCommHandle h, const char* caller) {
    if (!h) return true;
    const std::uint32_t s = slot_of(h, caller);
    if (_slots[s].pending == 0) return true;
    // A loop around CmiAsyncMsgSent must finish on its own: make progress here.
    _sched->run_once();
    return _slots[s].pending == 0;
}

void pe_core::release_handle(CmiCommHandle h, const char* caller) {
    if (!h) return;
    const std::uint32_t s = slot_of(h, caller);
    _slots[s].released = true;
    if (_slots[s].pending == 0) free_slot(s);
}

void pe_core::trace_send(std::uint64_t id, std::uint32_t dest, std::uint32_t size) {
    if (!trace::enabled()) return;
    const auto proto = protocol_of(size);
    const std::uint64_t seq = _send_seq[dest];
    trace::emit(trace::kind::handle_allocated, id, (seq << 32) | size,
                (std::uint64_t{dest} << 32) | static_cast<std::uint64_t>(proto));
}

}  // namespace coverse::detail
