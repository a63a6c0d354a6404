// The send path of the machine core: point-to-point, list, multicast and broadcast sends,
// sends to self, the route of each frame (same-host path or mesh), and groups.
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
// Sends

void pe_core::deliver_local(void* owned_copy, std::uint32_t size) {
    trace_receive(owned_copy, _pe, size);
    _net_queue.push_back(owned_copy);
}

// A receive handle: opened when a message arrives, completed when its handler starts,
// released when the handler returns. Its index rides in the header's machine fields,
// which every send overwrites, so a message the handler sends on is not confused with it.
void pe_core::trace_receive(void* msg, std::uint32_t from, std::uint32_t size) {
    const std::uint64_t seq = _recv_seq[from]++;
    if (!trace::enabled()) {
        header_of(msg)->flags &= ~header_flag_traced_receive;  // a sender's bit means nothing
        return;
    }
    const std::uint32_t index = static_cast<std::uint32_t>(_recv_ids++);
    const auto proto = size <= _small_boundary ? send_protocol::inline_send : send_protocol::stream;
    trace::emit(trace::kind::handle_allocated, receive_trace_id(index), (seq << 32) | size,
                (std::uint64_t{from} << 32) | (1u << 8) | static_cast<std::uint64_t>(proto));
    header_of(msg)->flags |= header_flag_traced_receive;
    header_of(msg)->reserved = index;
}

// Counts the frame in its pair's sequence and opens its trace handle: a send handle's first
// frame is the handle itself; each further destination (list send, multicast, broadcast)
// gets a handle of its own, which closes with that frame. Returns that extra handle's
// index, 0 when there is none.
std::uint32_t pe_core::trace_frame(std::uint32_t slot, std::uint32_t dest, std::uint32_t size) {
    std::uint32_t extra = 0;
    if (trace::enabled()) {
        auto& sl = _slots[slot];
        if (!sl.traced_first) {
            sl.traced_first = true;
            trace_send(sl.trace_id, dest, size);
        } else {
            if (++_extra_trace_ids == 0) ++_extra_trace_ids;
            extra = _extra_trace_ids;
            trace_send(extra_trace_id(extra), dest, size);
        }
    }
    ++_send_seq[dest];
    return extra;
}

// A destination that is this PE: delivered by copy at once, so an extra handle closes now.
void pe_core::self_frame_traced(std::uint32_t slot, std::uint32_t size) {
    if (const std::uint32_t extra = trace_frame(slot, _pe, size)) {
        trace::emit(trace::kind::handle_completed, extra_trace_id(extra));
        trace::emit(trace::kind::handle_released, extra_trace_id(extra));
    }
}

void pe_core::start_frame(std::uint32_t dest, void* buf, std::uint32_t size, std::uint32_t slot,
                          std::uint16_t flags, std::uint32_t tag) {
    const std::uint32_t extra = trace_frame(slot, dest, size);
    ++_slots[slot].pending;
    void* ctx =
        reinterpret_cast<void*>(static_cast<std::uintptr_t>((std::uint64_t{extra} << 32) | slot));
    transmit(dest, buf, size, flags, tag, ctx);
}

// One frame to `dest`: through its shared-memory ring when it is on this host, else the
// mesh. Every frame to one PE takes the same path, so they stay in order. `ctx` says what
// completes when the bytes are out (see frame_sent).
void pe_core::transmit(std::uint32_t dest, void* buf, std::uint32_t size, std::uint16_t flags,
                       std::uint32_t tag, void* ctx) {
    if (!_shm_out.empty() && _shm_out[dest].ring) {
        shm_send(dest, static_cast<const std::byte*>(buf), size,
                 (flags & net::frame_flags::broadcast) ? net::shm_flags::broadcast : 0, tag, ctx);
        return;
    }
    net::frame_header h;
    h.type = net::frame_type::standard;
    h.flags = flags;
    h.tag = tag;
    // Posted, not awaited: no coroutine frame per message; the writer calls back.
    const int rc =
        _mesh->post(dest, h, std::span<const std::byte>(static_cast<std::byte*>(buf), size),
                    &pe_core::frame_sent, ctx);
    if (rc < 0) frame_sent(ctx, rc, dest);
}

void pe_core::frame_sent(void* ctx, int result) {
    frame_sent(ctx, result, 0xFFFF'FFFFu);
}

void pe_core::frame_sent(void* ctx, int result, std::uint32_t dest) {
    pe_core& self = *_instance;
    if (result == -EMSGSIZE && !self._shut_down)  // a size limit, not a dead peer
        self.fatal("PE " + std::to_string(self._pe) + " could not send a message" +
                   (dest != 0xFFFF'FFFFu ? " to PE " + std::to_string(dest) : std::string()) +
                   ": it is larger than MAX_MESSAGE (" +
                   std::to_string(net::max_message_from_env()) +
                   " bytes); raise it on every PE, e.g. ++set MAX_MESSAGE=256M");
    if (result < 0 && !self._shut_down)
        self.peer_lost(
            "PE " + std::to_string(self._pe) + " could not send a message" +
            (dest != 0xFFFF'FFFFu ? " to PE " + std::to_string(dest) : std::string()) + ": " +
            std::strerror(-result) +
            (result == -ENOTCONN || result == -EPIPE ? " (that PE has exited or failed)" : ""));
    const auto v = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(ctx));
    if (v & forward_ctx_bit) {  // a broadcast forward: drop its reference to the buffer
        alloc::msg_free(reinterpret_cast<void*>(static_cast<std::uintptr_t>(v & ~forward_ctx_bit)));
        --self._sends_in_flight;
        self._send_waiters.notify_all();
        return;
    }
    if (const auto extra = static_cast<std::uint32_t>(v >> 32)) {
        trace::emit(trace::kind::handle_completed, extra_trace_id(extra));
        trace::emit(trace::kind::handle_released, extra_trace_id(extra));
    }
    self.slot_sent(static_cast<std::uint32_t>(v));
}

CmiCommHandle pe_core::send(int dest, int size, void* msg, ownership own, const char* caller) {
    const int one[1] = {dest};
    return send_many(std::span<const int>(one, 1), size, msg, own, caller);
}

void pe_core::check_message(int size, const void* msg, const char* caller) {
    if (size < CmiMsgHeaderSizeBytes || !msg)
        fatal(std::string(caller) + ": a message of " + std::to_string(size) +
              " bytes is shorter than the Converse header (CmiMsgHeaderSizeBytes = " +
              std::to_string(CmiMsgHeaderSizeBytes) + "); allocate header + data");
}

// Opens a send: the buffer its frames go out from (a copy for Sync and small Async sends,
// the caller's for AndFree and large Async ones) and its handle, held until end_send().
pe_core::open_send pe_core::begin_send(int size, void* msg, ownership own, const char* caller) {
    const auto usize = static_cast<std::uint32_t>(size);
    // Small async sends are copied: the caller gets handle 0 and its buffer back at once.
    if (own == ownership::borrow && usize <= _small_boundary) own = ownership::copy;
    void* buf = msg;
    if (own == ownership::copy) {
        buf = alloc::msg_alloc(usize);
        if (!buf)
            fatal(std::string(caller) + ": out of memory copying " + std::to_string(size) +
                  " bytes");
        std::memcpy(buf, msg, usize);
    }
    const std::uint32_t s = acquire_slot(caller);
    ++_sends_in_flight;
    _slots[s].pending = 1;  // held until every frame is started
    if (own != ownership::borrow) _slots[s].free_when_done = buf;
    return open_send{buf, s, usize, own == ownership::borrow};
}

// The destination that is this PE: a copy goes straight to the network queue.
void pe_core::send_to_self(const open_send& o, const char* caller) {
    self_frame_traced(o.slot, o.size);
    void* copy = alloc::msg_alloc(o.size);
    if (!copy) fatal(std::string(caller) + ": out of memory");
    std::memcpy(copy, o.buf, o.size);
    deliver_local(copy, o.size);
}

// Drops the hold of begin_send(); returns the user's handle, or 0 when the send is done.
CmiCommHandle pe_core::end_send(const open_send& o, const char* caller) {
    _slots[o.slot].user_owned = o.user;
    CmiCommHandle h = o.user ? user_handle(o.slot) : nullptr;
    slot_sent(o.slot);  // completes now if every frame already went (all local, or copied)
    if (o.user && _slots[o.slot].pending == 0) {
        release_handle(h, caller);  // finished: the handle would only need releasing
        return nullptr;
    }
    return h;
}

CmiCommHandle pe_core::send_many(std::span<const int> pes, int size, void* msg, ownership own,
                                 const char* caller) {
    check_message(size, msg, caller);
    for (int p : pes)
        if (p < 0 || static_cast<std::uint32_t>(p) >= _num_pes)
            fatal(std::string(caller) + ": destination PE " + std::to_string(p) +
                  " is out of range (the job has " + std::to_string(_num_pes) + " PEs)");
    if (pes.empty()) {
        if (own == ownership::take) alloc::msg_free(msg);
        return nullptr;
    }
    const open_send o = begin_send(size, msg, own, caller);
    for (int p : pes) {
        if (static_cast<std::uint32_t>(p) == _pe)
            send_to_self(o, caller);
        else
            start_frame(static_cast<std::uint32_t>(p), o.buf, o.size, o.slot, 0, 0);
    }
    return end_send(o, caller);
}

CmiCommHandle pe_core::broadcast(int size, void* msg, ownership own, bool include_self,
                                 const char* caller) {
    check_message(size, msg, caller);
    header_of(msg)->root_plus_one = _pe + 1;
    if (!_broadcast_tree) {
        std::vector<int> all;
        for (std::uint32_t p = 0; p < _num_pes; ++p)
            if (p != _pe || include_self) all.push_back(static_cast<int>(p));
        return send_many(all, size, msg, own, caller);
    }
    const open_send o = begin_send(size, msg, own, caller);
    if (include_self) send_to_self(o, caller);
    for (std::uint32_t c : tree_children(_pe, _pe))
        start_frame(c, o.buf, o.size, o.slot, net::frame_flags::broadcast, _pe);
    return end_send(o, caller);
}

task<void> pe_core::send_async(std::uint32_t dest, std::span<const std::byte> msg) {
    co_await wait_for_slot();
    CmiCommHandle h = send(static_cast<int>(dest), static_cast<int>(msg.size()),
                           const_cast<std::byte*>(msg.data()), ownership::borrow, "send");
    while (h && _slots[slot_of(h, "send")].pending > 0)
        co_await _send_waiters.wait();
    release_handle(h, "send");
}

task<void> pe_core::broadcast_async(std::span<const std::byte> msg, bool include_self) {
    co_await wait_for_slot();
    CmiCommHandle h = broadcast(static_cast<int>(msg.size()), const_cast<std::byte*>(msg.data()),
                                ownership::borrow, include_self, "broadcast");
    while (h && _slots[slot_of(h, "broadcast")].pending > 0)
        co_await _send_waiters.wait();
    release_handle(h, "broadcast");
}

// ---------------------------------------------------------------------------------------
// Groups

CmiGroup pe_core::establish_group(int npes, const int* pes) {
    if (npes < 0 || (npes > 0 && !pes)) fatal("CmiEstablishGroup: invalid PE list");
    std::vector<int> members(pes, pes + npes);
    for (int p : members)
        if (p < 0 || static_cast<std::uint32_t>(p) >= _num_pes)
            fatal("CmiEstablishGroup: PE " + std::to_string(p) + " is out of range (the job has " +
                  std::to_string(_num_pes) + " PEs)");
    _groups.push_back(std::move(members));
    return CmiGroup{static_cast<std::uint32_t>(_groups.size())};
}

const std::vector<int>& pe_core::group(CmiGroup g, const char* caller) const {
    if (g.id == 0 || g.id > _groups.size())
        const_cast<pe_core*>(this)->fatal(std::string(caller) + ": group " + std::to_string(g.id) +
                                          " was not made by CmiEstablishGroup on this PE");
    return _groups[g.id - 1];
}

}  // namespace coverse::detail
