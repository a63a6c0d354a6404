// The send path of the machine core: point-to-point, list, multicast and broadcast sends,
// sends to self, each frame handed to the rdma layer with its typed completion, and groups.
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
    const auto proto = protocol_of(size);
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
                          bool broadcast, std::uint32_t root) {
    frame_ticket* t = new_ticket(dest);
    t->extra = trace_frame(slot, dest, size);
    t->slot = slot;
    _slots[slot].dest = dest;
    ++_slots[slot].pending;
    transmit(dest, buf, size, broadcast, root, t);
}

pe_core::frame_ticket* pe_core::new_ticket(std::uint32_t dest) {
    frame_ticket* t;
    if (_spare_tickets.empty()) {
        t = new frame_ticket;
    } else {
        t = _spare_tickets.back().release();
        _spare_tickets.pop_back();
    }
    t->core = this;
    t->dest = dest;
    t->extra = 0;
    t->forward = nullptr;
    return t;
}

// One frame to `dest` through the rdma layer, which picks the stream path (ring or
// connection) or a rendezvous by size; `t` completes when the buffer may be reused.
void pe_core::transmit(std::uint32_t dest, void* buf, std::uint32_t size, bool broadcast,
                       std::uint32_t root, frame_ticket* t) {
    _rdma->send(dest, static_cast<const std::byte*>(buf), size, broadcast, root, t);
}

// The layer put the frame into an eager channel: the handle's protocol for the hang report,
// and a put_done event naming the protocol for coverse-trace (it re-files the handle).
void pe_core::frame_ticket::via_eager(bool long_buffer) noexcept {
    const auto p = long_buffer ? trace::protocol::eager_long : trace::protocol::eager_short;
    if (forward) return;
    auto& sl = core->_slots[slot];
    sl.protocol = static_cast<std::uint8_t>(long_buffer ? send_protocol::eager_long
                                                        : send_protocol::eager_short);
    if (trace::enabled())
        trace::emit(trace::kind::handle_put_done, extra ? extra_trace_id(extra) : sl.trace_id,
                    trace::credit_protocol(p));
}

void pe_core::frame_ticket::sent(int result) noexcept {
    core->frame_done(*this, result);
}

// A send to `dest` failed (-errno): the job stops, naming the loss that failed it (said
// when it was found) or else the error.
void pe_core::send_failed(std::uint32_t dest, int result) {
    peer_lost(!_loss_text.empty()
                  ? _loss_text
                  : "PE " + std::to_string(_pe) + " could not send a message to PE " +
                        std::to_string(dest) + ": " + std::strerror(-result) +
                        (result == -ENOTCONN || result == -EPIPE ? " (that PE has exited or failed)"
                                                                 : ""));
}

void pe_core::frame_done(frame_ticket& t, int result) {
    const std::uint32_t dest = t.dest;
    const std::uint32_t slot = t.slot;
    const std::uint32_t extra = t.extra;
    void* forward = t.forward;
    _spare_tickets.emplace_back(&t);         // recycled first: what follows may send again
    if (result == -EMSGSIZE && !_shut_down)  // a size limit, not a dead peer
        fatal("PE " + std::to_string(_pe) + " could not send a message to PE " +
              std::to_string(dest) + ": it is larger than a frame may carry (" +
              std::to_string(net::default_max_payload) +
              " bytes); MEDIUM_MESSAGE_BOUNDARY must stay below it");
    // ON_PEER_LOST=report: a coroutine send's frame to a dead PE fails its send (the API
    // sees the PE lost); anything else still stops the job.
    const bool reported = _report_lost && !forward && _slots[slot].api;
    if (result < 0 && !_shut_down && !reported) send_failed(dest, result);
    if (forward) {  // a broadcast forward: drop its reference to the buffer
        alloc::msg_free(forward);
        --_sends_in_flight;
        _send_waiters.notify_all();
        return;
    }
    if (extra) {
        trace::emit(trace::kind::handle_completed, extra_trace_id(extra));
        trace::emit(trace::kind::handle_released, extra_trace_id(extra));
    }
    slot_sent(slot);
}

// The small-message fast path: a message to one other PE that the rdma layer can copy into
// its eager slot or ring right now is done when that copy is — no handle slot, no ticket,
// no completion, no copy of our own. It needs what the full path would have done at once
// anyway: nothing queued before it to that PE (order), tracing off (tracing records a handle
// per send), and a size the stream path takes (not a rendezvous).
bool pe_core::try_send_now(int dest, int size, void* msg, ownership own) {
    if (size < CmiMsgHeaderSizeBytes || !msg) return false;
    if (!_api_send) clear_api_flags(msg);
    if (!api_send_now(static_cast<std::uint32_t>(dest), msg, static_cast<std::uint32_t>(size),
                      own == ownership::borrow ? _small_boundary : _medium_boundary))
        return false;
    if (own == ownership::take) alloc::msg_free(msg);
    return true;
}

CmiCommHandle pe_core::send(int dest, int size, void* msg, ownership own, const char* caller) {
    if (try_send_now(dest, size, msg, own)) return nullptr;
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
    if (msg && usize >= CmiMsgHeaderSizeBytes && !_api_send) clear_api_flags(msg);
    // Small async sends are copied: the caller gets handle 0 and its buffer back at once.
    if (own == ownership::borrow && usize <= _small_boundary) own = ownership::copy;
    // A large Sync send goes by rendezvous straight from the caller's buffer and returns
    // at get-done, instead of copying the whole message first (see docs/rdma.md).
    const bool sync_wait = own == ownership::copy && usize > _medium_boundary && _num_pes > 1;
    if (sync_wait) own = ownership::borrow;
    void* buf = msg;
    if (own != ownership::borrow && _held_bytes + usize > _held_limit && _sends_in_flight > 0) {
        // Back-pressure: the peers take less than we send. Wait for earlier sends to go
        // (protocol tasks run, handlers do not) instead of queueing without bound.
        const wait_scope w({wait_kind::socket_drain, no_peer, _held_bytes,
                            "SEND_QUEUE_BYTES of sends still queued"});
        ++_send_queue_waits;
        _sched->run_until(
            [&] { return _held_bytes + usize <= _held_limit || _sends_in_flight == 0; });
    }
    if (own == ownership::copy) {
        buf = alloc::msg_alloc(usize);
        if (!buf)
            fatal(std::string(caller) + ": out of memory copying " + std::to_string(size) +
                  " bytes");
        std::memcpy(buf, msg, usize);
    }
    const std::uint32_t s = acquire_slot(caller);
    _slots[s].api = _api_send;
    _slots[s].protocol = static_cast<std::uint8_t>(protocol_of(usize));
    ++_sends_in_flight;
    _slots[s].pending = 1;  // held until every frame is started
    if (own != ownership::borrow) {
        _slots[s].free_when_done = buf;
        _slots[s].held = usize;
        _held_bytes += usize;
    }
    return open_send{buf, s, usize, own == ownership::borrow && !sync_wait, sync_wait};
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
    const std::uint32_t generation = _slots[o.slot].generation;
    slot_sent(o.slot);  // completes now if every frame already went (all local, or copied)
    if (o.sync_wait) {
        // Nested progress (protocol tasks, never handlers) until the receivers fetched it:
        // the slot is freed, and its generation moves on, at the last get-done.
        _sched->run_until([&] { return _slots[o.slot].generation != generation; });
        return nullptr;
    }
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
            start_frame(static_cast<std::uint32_t>(p), o.buf, o.size, o.slot, false, 0);
    }
    return end_send(o, caller);
}

CmiCommHandle pe_core::broadcast(int size, void* msg, ownership own, bool include_self,
                                 const char* caller) {
    check_message(size, msg, caller);
    // Stored only when it changes: broadcast_async hands over the caller's read-only bytes
    // when they name this PE already.
    if (header_of(msg)->root_plus_one != _pe + 1) header_of(msg)->root_plus_one = _pe + 1;
    if (!_broadcast_tree) {
        std::vector<int> all;
        for (std::uint32_t p = 0; p < _num_pes; ++p)
            if (p != _pe || include_self) all.push_back(static_cast<int>(p));
        return send_many(all, size, msg, own, caller);
    }
    const open_send o = begin_send(size, msg, own, caller);
    if (include_self) send_to_self(o, caller);
    for (std::uint32_t c : tree_children(_pe, _pe))
        start_frame(c, o.buf, o.size, o.slot, true, _pe);
    return end_send(o, caller);
}

namespace {
// Marks the sends made in its scope as the API's (pe_core::_api_send), until the scope ends
// however it ends: a send that threw (no memory for its frame) must not leave the facade's
// later sends marked, which would then keep API flags a program's header happens to hold.
class api_send_scope {
public:
    explicit api_send_scope(bool& flag) noexcept : _flag(flag), _was(flag) { _flag = true; }
    api_send_scope(const api_send_scope&) = delete;
    api_send_scope& operator=(const api_send_scope&) = delete;
    ~api_send_scope() { _flag = _was; }

private:
    bool& _flag;
    bool _was;  // as it was before (a scope inside another leaves it set)
};
}  // namespace

std::optional<CmiCommHandle> pe_core::start_send(std::uint32_t dest,
                                                 std::span<const std::byte> msg) {
    if (_free_slots.empty()) return std::nullopt;
    const api_send_scope api(_api_send);
    return send(static_cast<int>(dest), static_cast<int>(msg.size()),
                const_cast<std::byte*>(msg.data()), ownership::borrow, "send");
}

void pe_core::send_for_api(std::uint32_t dest, void* msg) {
    const api_send_scope api(_api_send);
    send(static_cast<int>(dest), CmiSize(msg), msg, ownership::take, "coverse internal send");
}

task<void> pe_core::slot_or_loss() {
    if (!_free_slots.empty()) co_return;
    if (_sends_in_flight == 0)
        fatal("send: all " + std::to_string(_slots.size()) +
              " communication handles are held by the application; release them or "
              "raise MAXIMUM_HANDLES");
    co_await waiting_for({wait_kind::handle_slot, no_peer, 0, "MAXIMUM_HANDLES in use"},
                         _slot_waiters.wait());
}

task<void> pe_core::finish_send(CmiCommHandle h, std::uint32_t dest) {
    while (h && _slots[slot_of(h, "send")].pending > 0)
        co_await waiting_for({wait_kind::socket_drain, dest, 0, "send not complete"},
                             _send_waiters.wait());
    release_handle(h, "send");
}

task<void> pe_core::send_async(std::uint32_t dest, std::span<const std::byte> msg) {
    std::optional<CmiCommHandle> h;
    while (!(h = start_send(dest, msg)))
        co_await wait_for_slot();
    co_await finish_send(*h, dest);
}

// The caller's bytes are read-only (coverse::machine::broadcast). A header that the
// broadcast would change (the root, the API's flags: broadcast() and begin_send() write
// them) goes as a copy that the send owns; one that needs nothing goes from them as it is.
task<void> pe_core::broadcast_async(std::span<const std::byte> msg, bool include_self) {
    co_await wait_for_slot();
    void* buf = const_cast<std::byte*>(msg.data());
    ownership own = ownership::borrow;
    if (msg.size() >= CmiMsgHeaderSizeBytes) {
        CmiMsgHeaderBasic head;
        std::memcpy(&head, msg.data(), sizeof head);
        if (head.root_plus_one != _pe + 1 || has_api_flags(head)) {
            buf = alloc::msg_alloc(msg.size());
            if (!buf)
                fatal("broadcast: out of memory copying " + std::to_string(msg.size()) + " bytes");
            std::memcpy(buf, msg.data(), msg.size());
            own = ownership::take;
        }
    }
    CmiCommHandle h = broadcast(static_cast<int>(msg.size()), buf, own, include_self, "broadcast");
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
