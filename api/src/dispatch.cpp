// Receive and dispatch: frames from the mesh and the same-host path become messages in the
// network queue; the scheduler loop (CsdScheduler and friends) delivers them to handlers.
#include "pe_core.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

#include <coverse/alloc/config.hpp>
#include <coverse/alloc/message.hpp>
#include <coverse/runtime/settings.hpp>
#include <coverse/runtime/sync_wait.hpp>
#include <coverse/runtime/timer.hpp>

namespace coverse::detail {

// ---------------------------------------------------------------------------------------
// Receiving

task<void> pe_core::receive_loop() {
    for (;;) {
        std::optional<net::received> r;
        std::string failure;
        try {
            r = co_await _mesh->receive();
        } catch (const std::exception& e) {
            failure = e.what();
        }
        if (!failure.empty()) {
            if (_shut_down) co_return;
            peer_lost(_loss_text.empty() ? "PE " + std::to_string(_pe) + ": " + failure
                                         : _loss_text);
        }
        if (!r) break;
        on_frame(std::move(*r));
    }
    _receiving = false;
}

void pe_core::on_frame(net::received r) {
    const auto& h = r.frame.header;
    switch (h.type) {
        case net::frame_type::barrier:
            on_barrier_frame(r.from, r.frame);
            return;
        case net::frame_type::latency_ping:
        case net::frame_type::latency_pong:
        case net::frame_type::latency_vector_request:
        case net::frame_type::latency_vector_reply:
        case net::frame_type::latency_vector_minimum:
        case net::frame_type::latency_table:
        case net::frame_type::cluster_mapping:
            on_latency_frame(r.from, r.frame);
            return;
        case net::frame_type::abort: {
            // A PE that stops the job without coverse-run tells the PEs it is connected to
            // (pe_core::relay_abort): stop too, saying why.
            net::decode_limits lim;
            lim.num_pes = _num_pes;
            const auto d = net::decode_abort(r.frame.payload_bytes(), lim);
            fatal("PE " + std::to_string(_pe) + " lost PE " + std::to_string(r.from) +
                  ": it stopped the job: " +
                  (d.ok() ? std::string(d.value.text) : std::string("(unreadable reason)")));
        }
        default:
            print("coverse: PE " + std::to_string(_pe) + " ignored a " +
                      std::string(net::frame_type_name(h.type)) + " frame from PE " +
                      std::to_string(r.from) + "\n",
                  true);
    }
}

// A received message (CmiAlloc'd, owned): forwarded along its broadcast tree, then queued
// for its handler. The same for both paths (TCP mesh, shared-memory ring).
void pe_core::accept_message(std::uint32_t from, void* msg, std::uint32_t size, bool broadcast,
                             std::uint32_t root) {
    _activity.heard_from(from);
    // The common case in one place: a point-to-point message for a user handler with
    // tracing and the grid queue off needs only its sequence count and its queue slot (the
    // internal handlers, barrier arrivals among them, sit above internal_handler_base).
    // Everything else is out of line, so this path sets up no frame for it.
    if (!broadcast && size >= CmiMsgHeaderSizeBytes && !_grid.enabled() && !trace::enabled() &&
        header_of(msg)->handler < internal_handler_base) [[likely]] {
        ++_recv_seq[from];
        if (header_of(msg)->flags & header_flag_carries_credits) [[unlikely]]
            take_carried_credits(from, msg);
        header_of(msg)->flags &= ~header_flag_traced_receive;  // a sender's bit means nothing
        _net_queue.push_back(msg);
        _sched->end_turn();
        return;
    }
    accept_message_slow(from, msg, size, broadcast, root);
}

// Stream credits a coroutine send carried back (machine::take_due_credits): to the machine,
// and off the header, which the receiver's handler and tracing then have to themselves.
void pe_core::take_carried_credits(std::uint32_t from, void* msg) {
    CmiMsgHeaderBasic* h = header_of(msg);
    const std::uint32_t carried = std::exchange(h->reserved, 0);
    h->flags &= ~header_flag_carries_credits;
    _machine.credits_carried(from, carried);
}

void pe_core::accept_message_slow(std::uint32_t from, void* msg, std::uint32_t size, bool broadcast,
                                  std::uint32_t root) {
    if (size >= CmiMsgHeaderSizeBytes && (header_of(msg)->flags & header_flag_carries_credits))
        take_carried_credits(from, msg);
    if (size < CmiMsgHeaderSizeBytes) {  // a peer's bug: report it, never hand it on
        if (msg) alloc::msg_free(msg);
        ++_recv_seq[from];
        print("coverse: PE " + std::to_string(_pe) + " dropped a " + std::to_string(size) +
                  "-byte message from PE " + std::to_string(from) +
                  ": shorter than the Converse header\n",
              true);
        return;
    }
    spanning_tree::children_list children;
    if (broadcast) children = tree_children(root, _pe);
    if (!children.empty()) {
        // The received buffer goes on to the tree children (each holding a reference); the
        // handler gets a copy it may change or free while those sends are still queued.
        void* fwd = msg;
        msg = alloc::msg_alloc(size);
        if (!msg) fatal("out of memory receiving " + std::to_string(size) + " bytes");
        std::memcpy(msg, fwd, size);
        _sends_in_flight += children.count;
        for (std::uint32_t c : children) {
            if (trace::enabled()) {
                const std::uint64_t id = (1ull << 62) | _forward_ids++;
                trace_send(id, c, size);
                trace::emit(trace::kind::handle_completed, id);
                trace::emit(trace::kind::handle_released, id);
            }
            ++_send_seq[c];
            alloc::msg_reference(fwd);
            frame_ticket* t = new_ticket(c);
            t->forward = fwd;
            transmit(c, fwd, size, true, root, t);
        }
        alloc::msg_free(fwd);
    }
    trace_receive(msg, from, size);
    if (take_barrier_message(msg, from) || take_exit_message(msg, from)) {
        if (header_of(msg)->flags & header_flag_traced_receive) {  // consumed here: closed
            const auto id = receive_trace_id(header_of(msg)->reserved);
            trace::emit(trace::kind::handle_completed, id);
            trace::emit(trace::kind::handle_released, id);
        }
        alloc::msg_free(msg);
        return;
    }
    // The grid queue: a message from another cluster for a registered border object goes
    // ahead of every queued message that did not jump (in arrival order among those that did).
    if (_grid.enabled() && grid_jumps(from, msg, size)) {
        _grid_ahead = std::min(_grid_ahead, _net_queue.size());
        _net_queue.insert(_net_queue.begin() + static_cast<std::ptrdiff_t>(_grid_ahead), msg);
        ++_grid_ahead;
    } else {
        _net_queue.push_back(msg);
    }
    _sched->end_turn();  // the handler runs before the loop enters the kernel again
}

bool pe_core::grid_jumps(std::uint32_t from, void* msg, std::uint32_t size) const {
    const int mine = _latency.cluster_of(static_cast<int>(_pe));
    const int theirs = _latency.cluster_of(static_cast<int>(from));
    return mine >= 0 && theirs >= 0 && mine != theirs && _grid.contains_message(msg, size);
}

void* pe_core::pop_network() {
    void* m = _net_queue.front();
    _net_queue.pop_front();
    if (_grid_ahead > 0) --_grid_ahead;
    return m;
}

// ---------------------------------------------------------------------------------------
// Scheduling and dispatch

void* pe_core::next_message() {
    if (!_net_queue.empty()) {
        void* m = pop_network();
        return m;
    }
    return _sched_queue.empty() ? nullptr : _sched_queue.pop();  // asked on every idle turn
}

void pe_core::call_handler(void* msg) {
    const std::uint32_t n = header_of(msg)->handler;
    // A registered user handler and an untraced receive: the per-message cost is the marks
    // the hang doctor reads and the call.
    if (n < _handlers.size() && (_handlers[n].fn || _handlers[n].fnx) &&
        !(header_of(msg)->flags & header_flag_traced_receive)) [[likely]] {
        const handler_entry& e = _handlers[n];
        delivery_guard guard(*_sched);
        const pe_activity::in_handler mark(_activity, static_cast<std::int32_t>(n), e.address());
        if (e.fnx)
            e.fnx(msg, e.user);  // CmiRegisterHandlerEx, a coroutine stream
        else
            e.fn(msg);
        return;
    }
    call_handler_slow(msg);
}

// A coroutine stream takes the messages for it that wait right behind `msg` in the network
// queue (a ring drain queues up to 256) together: the task waiting on it is resumed once
// and takes them one by one without suspending, instead of being resumed and suspended for
// each (the coroutine API's 8 B rate, docs/perf.md stop 29). Untraced user messages only;
// the handler sees exactly the messages it would have seen one at a time, in that order.
std::size_t pe_core::call_handler_batch(void* msg, std::size_t limit) {
    constexpr std::size_t most = 64;
    const std::uint32_t n = header_of(msg)->handler;
    const auto same = [n](void* m) {
        return header_of(m)->handler == n && !(header_of(m)->flags & header_flag_traced_receive);
    };
    if (limit < 2 || _net_queue.empty() || n >= _handlers.size() || !_handlers[n].batch ||
        !same(msg) || !same(_net_queue.front())) {
        call_handler(msg);
        return 1;
    }
    void* batch[most];
    std::size_t count = 0;
    batch[count++] = msg;
    while (count < std::min(limit, most) && !_net_queue.empty() && same(_net_queue.front()))
        batch[count++] = pop_network();
    const handler_entry& e = _handlers[n];
    delivery_guard guard(*_sched);
    const pe_activity::in_handler mark(_activity, static_cast<std::int32_t>(n), e.address());
    e.batch(batch, count, e.user);
    return count;
}

void pe_core::call_handler_slow(void* msg) {
    const std::uint32_t n = header_of(msg)->handler;
    const handler_entry* e = nullptr;
    if (n >= internal_handler_base) {
        auto it = _internal.find(n);
        if (it != _internal.end()) e = &it->second;
    } else if (n < _handlers.size() && (_handlers[n].fn || _handlers[n].fnx)) {
        e = &_handlers[n];
    }
    if (!e)
        fatal("PE " + std::to_string(_pe) + " received a message for handler " + std::to_string(n) +
              ", which is not registered here (" + std::to_string(_handlers.size()) +
              " handlers registered); register the same handlers in the same order on every PE "
              "before messages for them arrive");
    std::uint64_t traced = 0;
    if (header_of(msg)->flags & header_flag_traced_receive) {
        header_of(msg)->flags &= ~header_flag_traced_receive;
        traced = receive_trace_id(header_of(msg)->reserved);
        trace::emit(trace::kind::handle_completed, traced);
        _running_receives.push_back(traced);
    }
    {
        delivery_guard guard(*_sched);
        const pe_activity::in_handler mark(_activity, static_cast<std::int32_t>(n), e->address());
        if (e->fnx)
            e->fnx(msg, e->user);
        else
            e->fn(msg);
    }
    if (traced) {
        _running_receives.pop_back();
        trace::emit(trace::kind::handle_released, traced);
    }
}

void pe_core::handle_message(void* msg) {
    call_handler(msg);
}

task<void> pe_core::timer_task(pe_core* self, double due) {
    const auto wait = std::chrono::duration<double>(std::max(0.0, due - self->wall_time()));
    try {
        co_await sleep_for(std::chrono::duration_cast<std::chrono::microseconds>(wait) +
                           std::chrono::microseconds(1));
    } catch (const cancelled_error&) {
        co_return;  // shutting down
    }
    if (self->_armed_due == due) self->_armed_due = -1;
}

void pe_core::run_idle_wait() {
    double due = _timed.empty() ? -1 : _timed.front().due;
    // Registered periodic conditions need the loop awake when they come due, too.
    if (has_periodic()) {
        const double next = std::max(_periodic_due, wall_time() + 0.001);
        due = due < 0 ? next : std::min(due, next);
    }
    // Re-arm unless a timer task already waits for this deadline or an earlier one that
    // has not passed yet (an armed deadline in the past is stale: its task may not have
    // run yet, but it will not wake us again).
    if (due >= 0 && (_armed_due < 0 || due < _armed_due || _armed_due <= wall_time())) {
        // Wake the loop for the earliest timed callback; its wake-up alone ends the wait.
        _armed_due = due;
        _sched->spawn(timer_task(this, due), "ccd timer");
    }
    const wait_scope idle({wait_kind::message, no_peer, ~0ull, "idle in the scheduler loop"});
    _sched->run_until([&] {
        // _armed_due < 0: the armed timer fired (it may have been for an earlier deadline
        // than `due`, which then has no timer of its own): re-arm from the loop.
        return !_net_queue.empty() || !_sched_queue.empty() || _exit_requested ||
               (due >= 0 && (wall_time() >= due || _armed_due < 0));
    });
}

int pe_core::schedule(int max_msgs, bool poll_only) {
    int delivered = 0;
    for (;;) {
        if (_exit_requested) {
            _exit_requested = false;
            break;
        }
        if (max_msgs > 0 && delivered >= max_msgs) break;
        if (!_timed.empty() || _periodic_known != 0) fire_timers();  // -1: not known yet
        void* msg = _deliveries_held ? nullptr : next_message();
        if (!msg) {
            _sched->run_once();
            msg = _deliveries_held ? nullptr : next_message();
        }
        if (msg) {
            if (_idle) {
                _idle = false;
                raise_condition(CcdPROCESSOR_END_IDLE);
            }
            // A coroutine stream's handler resumes the task waiting for the message inline
            // (resume_inline_ok), unless this loop runs inside another handler.
            // A lone message (a ping-pong), or one for a handler that takes them one at a
            // time (every Converse handler): no run to look for.
            if (_net_queue.empty() || !has_batch_handler(msg)) {
                call_handler(msg);
                ++delivered;
            } else {
                delivered += static_cast<int>(call_handler_batch(
                    msg, max_msgs > 0 ? static_cast<std::size_t>(max_msgs - delivered) : SIZE_MAX));
            }
            // The handler's sends over connections leave now, together (its ring sends
            // went already); then a task it woke otherwise (an event, a semaphore) runs too,
            // before the loop looks for the next message.
            if (_mesh) _mesh->flush();
            _sched->run_ready_now();
            continue;
        }
        if (poll_only) break;
        if (_deliveries_held) continue;  // the entry task is queued: the next turn starts it
        if (!_idle) {
            _idle = true;
            raise_condition(CcdPROCESSOR_BEGIN_IDLE);
            continue;  // a callback may have sent or enqueued something
        }
        run_idle_wait();
    }
    return delivered;
}

bool pe_core::enqueue(void* msg, int strategy, int priobits, const void* prio) {
    return _sched_queue.push(msg, strategy, priobits, prio);
}

int pe_core::deliver_network(int max_msgs) {
    _sched->run_once();
    int n = 0;
    while (!_net_queue.empty() && (max_msgs <= 0 || n < max_msgs)) {
        void* m = pop_network();
        call_handler(m);
        ++n;
    }
    return max_msgs - n;
}

void pe_core::deliver_specific(int handler) {
    for (;;) {
        for (auto it = _net_queue.begin(); it != _net_queue.end(); ++it) {
            if (header_of(*it)->handler == static_cast<std::uint32_t>(handler)) {
                void* m = *it;
                _net_queue.erase(it);
                call_handler(m);
                return;
            }
        }
        if (_num_pes == 1 || !_receiving)
            fatal("CmiDeliverSpecificMsg(" + std::to_string(handler) +
                  "): no such message is queued and none can arrive");
        const std::size_t seen = _net_queue.size();
        _sched->run_until([&] { return _net_queue.size() != seen; });
    }
}

void* pe_core::get_non_local() {
    _sched->run_once();
    if (_net_queue.empty()) return nullptr;
    void* m = pop_network();
    if (header_of(m)->flags & header_flag_traced_receive) {  // handed over: its handle ends
        header_of(m)->flags &= ~header_flag_traced_receive;
        trace::emit(trace::kind::handle_completed, receive_trace_id(header_of(m)->reserved));
        trace::emit(trace::kind::handle_released, receive_trace_id(header_of(m)->reserved));
    }
    return m;
}

}  // namespace coverse::detail
