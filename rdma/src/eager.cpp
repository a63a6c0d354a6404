// Eager channels on the same-host path (eager.hpp): a receiver's slots in shared memory that
// one sender writes into, handed to handlers without a copy; short channels for busy senders
// and long channels behind persistent handles.
//
// Stages of a channel: opened by its receiver (a short one when a sender sent EAGER_THRESHOLD
// messages within EAGER_INTERVAL, a long one for a persistent request or
// CmiCreateReceiverPersistent) -> mapped by its sender (eager_channel open, on the stream
// path) -> in use (the sender spends a credit per message: the next slot, in turn, whose
// message the handler freed, skipping slots still held; the receiver's poller walks the slots
// in the same turn, and the handler's CmiFree marks its slot freed) -> closing (an idle short
// channel: the receiver sends close; a destroyed persistent handle: the sender sends destroy) ->
// closed (the sender's closed / destroy comes after every slot it wrote, so the receiver stops
// polling) -> reaped once no handler holds a slot of it.
//
// Order per pair: every path a message can take to one peer (the ring, each channel) is
// ordered in itself. A message may take a different path than the previous one only once
// the receiver has taken everything sent on that previous path: the ring's consumer has
// caught up with its producer, or the channel's `delivered` counter reached the count its
// sender wrote. Until then the message queues behind them (the ring's queue is gated), so the
// receiver's single poller delivers in send order without sequence numbers across paths.
// One switch goes at once: from a channel back to the ring, whose next record is then
// flagged after_channel; the receiver takes the sender's channels before such a record
// (ring_drain), and the sender writes a channel again only once the ring has caught up.
// (Over a connection the order is the connection's; a channel written by one-sided put keeps
// it with a position in each footer: eager_put.cpp.)
#include "layer_impl.hpp"

#include <time.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>

#include <coverse/alloc/chunk_owner.hpp>
#include <coverse/alloc/message.hpp>
#include <coverse/runtime/trace.hpp>

namespace coverse::rdma {

namespace {

constexpr std::uint32_t unattached = 0xFFFF'FFFFu;  // a receiver-initiated channel's sender

std::string segment_name(std::uint64_t key, std::uint32_t receiver, std::uint32_t channel) {
    return pe_shm_prefix(key, receiver) + "eager-" + std::to_string(channel);
}

trace::protocol protocol_of(eager_kind k) noexcept {
    return k == eager_kind::short_slots ? trace::protocol::eager_short
                                        : trace::protocol::eager_long;
}

}  // namespace

void eager_rx::take_back(void* storage, std::size_t) noexcept {
    const auto i = seg.slot_of(storage);
    if (!i) return;  // cannot be: place_message got pointers into slots only
    // Release: the handler's reads of the slot come before the sender may write it again.
    seg.freed(*i).store(static_cast<std::uint32_t>(slot_message[*i]), std::memory_order_release);
    --held;
    if (trace::enabled())
        trace::emit(trace::kind::credit_returned, from, 1,
                    trace::credit_protocol(protocol_of(kind)));
}

// The sender's walk: message `written` goes to the first slot from `at` whose message was
// freed; the slots before it, still held by handlers, get a skip for it. A footer the
// receiver has not passed yet (its mark names a message not taken) is never written over,
// and skips are written only when a slot follows them, so a correct sender never skips a
// whole lap. What the receiver freed is read again only when the slot at `at` is not known
// to be free (in a steady flow once per lap: the words of 16 slots share a line), and its
// `delivered` only when that slot is still not free after that read.
std::optional<std::uint32_t> eager_tx::claim_slot(std::uint64_t taken) noexcept {
    const std::uint32_t n = seg.slots();
    // A slot's message was freed (and so taken); a skip in its footer must have been passed.
    const auto usable = [&](std::uint32_t s) {
        const bool freed = data[s] == 0 || freed_seen[s] == static_cast<std::uint32_t>(data[s]);
        return freed && (marked[s] == data[s] || marked[s] <= delivered_seen);
    };
    if (usable(at)) return at;
    for (std::uint32_t i = 0; i < n; ++i)
        freed_seen[i] = seg.freed(i).load(std::memory_order_acquire);
    if (usable(at)) return at;
    delivered_seen = seg.header().delivered.load(std::memory_order_acquire);
    std::optional<std::uint32_t> slot;
    for (std::uint32_t j = 0; j < n && !slot; ++j) {
        const std::uint32_t s = (at + j) % n;
        if (usable(s))
            slot = s;
        else if (marked[s] > delivered_seen)
            return std::nullopt;  // not passed by the receiver: no skip over it
    }
    if (!slot) return std::nullopt;
    // Held by handlers: the message goes further on, and these footers say so.
    const std::uint64_t skip =
        eager_footer::encode(eager_sentinel::skip, static_cast<std::uint16_t>(written), 0);
    for (std::uint32_t s = at; s != *slot; s = (s + 1) % n)
        write_footer(s, skip, taken);
    return slot;
}

eager_state::eager_state() = default;
eager_state::~eager_state() = default;

// ---- sending --------------------------------------------------------------------------

bool layer::impl::gate_drained(std::uint32_t dest) noexcept {
    peer& p = peers[dest];
    if (p.gate) return p.gate->drained();
    if (p.gate_segment) {
        const auto& h = p.gate_segment->header();
        if (h.delivered.load(std::memory_order_acquire) != p.gate_drain &&
            h.receiver_stopped.load(std::memory_order_acquire) == 0)
            return false;
        p.gate_segment.reset();  // a dropped channel, now drained: its mapping can go
    }
    return true;
}

bool layer::impl::may_switch_to(std::uint32_t dest, const eager_tx* path) noexcept {
    peer& p = peers[dest];
    // The same channel as the last message, with nothing queued for the ring behind it.
    if (path && p.gate == path) return p.out_queue.empty();
    if (!path && p.gate && p.out_ring) {
        // Back to the ring at once: its next record is flagged, and the receiver takes what
        // the channel holds before it (ring_drain). Waiting here for the channel to drain
        // cost a burst that began in a slot one crossing of the cores. The flag stays with
        // the ring until a record is written (a full ring queues this one), and a flag on a
        // record that did not need it only makes the receiver look at the channels first.
        if (!p.gate->drained()) {
            p.out_ring->follow_channel();
            ++eager.ring_after_channel;
        }
        p.gate = nullptr;
        return true;
    }
    if (!gate_drained(dest)) return false;
    if (!path) {
        p.gate = nullptr;  // back to the ring: the channel is drained
        return true;
    }
    // From the ring (or a drained channel) to a channel: the ring must be caught up. Within
    // one burst (no poll since this peer's last ring write: a handler sending a window) the
    // consumer is behind and asking costs a transfer of its line per message, so only the
    // position last read is consulted; after a turn of the loop, the consumer's line is read.
    if (!p.out_queue.empty()) return false;
    const bool look = p.caught_up_asked_at != ring_polls;
    p.caught_up_asked_at = ring_polls;
    return p.out_ring->consumer_caught_up_if(look);
}

bool layer::impl::eager_send(std::uint32_t dest, const std::byte* buf, std::uint32_t size,
                             send_completion* done) {
    peer& p = peers[dest];
    eager_tx* c = nullptr;
    for (std::uint32_t h : eager.current) {
        auto it = eager.persistent.find(h);
        if (it != eager.persistent.end() && it->second.dest == dest && it->second.channel &&
            size <= it->second.channel->seg.capacity()) {
            c = it->second.channel.get();
            break;
        }
    }
    // A short channel takes what the ring does not carry as fast: messages over
    // EAGER_SHORT_MINIMUM (asked before anything else, so a small message costs no look at the
    // receiver's position).
    if (!c && p.eager_out && short_channel_size(size)) {
        // A short channel takes a message only while the receiver has taken every earlier one
        // (latency-bound traffic: a ping-pong, a reply). The second message of a burst goes
        // by the ring at once (its record flagged after_channel), and the rest of the burst
        // stays there (bursts in the slots measured 8 B rate 0.79x vader with the footers
        // packed apart from the slots, and no better with them in the slots). A ping-pong
        // learns it from the footers of the replies, not by reading the receiver's counter
        // (a cache line from the other core on every message); one-way traffic reads it.
        if (!p.eager_out->drained_hinted()) return false;
        c = p.eager_out.get();
    }
    if (!c || !c->open_for(size)) return false;
    if (!may_switch_to(dest, c)) {
        ++eager.order_waits;
        return false;  // the ring still carries earlier messages: stay on it
    }
    // A credit: the next slot whose message was freed, skipping those still held.
    const std::uint32_t taken = p.eager_in ? static_cast<std::uint32_t>(p.eager_in->delivered) : 0;
    const auto slot = c->claim_slot(taken);
    if (!slot) {
        ++eager.no_credit;
        return false;  // every slot is held: the stream path carries it (after the channel)
    }
    std::memcpy(c->seg.message(*slot, size), buf, size);
    // The mark carries what we took from dest's channel to us, so its next send there need
    // not read our counter (drained_hinted).
    c->write_footer(
        *slot,
        eager_footer::encode(eager_sentinel::data, static_cast<std::uint16_t>(c->written), size),
        taken);
    c->data[*slot] = c->written + 1;
    c->wrote(*slot);
    p.gate = c;
    ++eager.sends;
    if (trace::enabled())
        trace::emit(trace::kind::credit_spent, dest, 1,
                    trace::credit_protocol(protocol_of(c->kind)));
    if (p.out_ring->take_sleeper()) p.out_bell->ring();
    if (done) {
        done->via_eager(c->kind == eager_kind::long_buffers);
        done->sent(0);
    }
    return true;
}

// ---- receiving ------------------------------------------------------------------------

bool layer::impl::eager_poll() {
    bool did = false;
    for (std::size_t k = 0; k < eager.polled.size(); ++k)
        // A bounded batch per channel, like the rings, so one sender cannot hold the loop.
        did |= eager_take(*eager.polled[k], 64, unattached);
    return did;
}

void layer::impl::eager_take_from(std::uint32_t from) {
    // A ring record flagged after_channel follows what its sender wrote into a channel to
    // us: all of it is published (the record's mark, read with acquire, was stored after
    // it), and nothing the sender wrote there later can be (it goes back to a channel only
    // once we consumed the ring to its end). The sender's slots bound the walk.
    for (std::size_t k = 0; k < eager.polled.size(); ++k) {
        eager_rx& c = *eager.polled[k];
        if (c.from == from || c.from == unattached) (void)eager_take(c, 1 << 30, from);
    }
}

// Takes up to `limit` messages from channel c (attaching a receiver-initiated one its
// sender attached; with `only_from`, only if that sender is the one).
bool layer::impl::eager_take(eager_rx& c, int limit, std::uint32_t only_from) {
    if (c.done) return false;
    if (c.from == unattached) {
        if (!c.seg.header().attached.load(std::memory_order_acquire)) return false;
        const std::uint32_t s = c.seg.header().sender.load(std::memory_order_relaxed);
        if (only_from != unattached && s != only_from) return false;
        if (s >= cfg.num_pes || s == cfg.rank || !peers[s].in_ring) {
            up.on_notice("coverse: PE " + std::to_string(cfg.rank) +
                         ": a persistent channel was attached by PE " + std::to_string(s) +
                         ", which cannot write to it; the channel is closed\n");
            c.done = true;
            return false;
        }
        c.from = s;
    }
    bool did = false;
    const std::uint32_t n = c.seg.slots();
    for (int batch = 0; batch < limit; ++batch) {
        // The footer of the slot the walk is at: the next message (one cache line for a
        // small one), or a skip past a slot a handler still holds.
        const std::uint64_t k = c.delivered;
        const std::uint32_t slot = c.at;
        const std::uint64_t mark = c.seg.footer_mark(slot).load(std::memory_order_acquire);
        if (!eager_mark_names(mark, k)) break;
        eager_footer_error err;
        const eager_footer f = decode_eager_footer(
            c.seg.footer_word(slot).load(std::memory_order_relaxed), c.seg.capacity(), err);
        if (!err && f.sentinel != eager_sentinel::data && f.sentinel != eager_sentinel::skip)
            err = {"a published slot without a message", f.sentinel, 0};
        if (!err && f.seq != static_cast<std::uint16_t>(k))
            err = {"a sequence number out of turn", f.seq, static_cast<std::uint16_t>(k)};
        if (!err && f.sentinel == eager_sentinel::skip && ++c.skips >= n)
            err = {"a skip over every slot", c.skips, n - 1};
        if (err) {
            eager_bad_footer(c, slot, err);
            break;
        }
        c.at = (slot + 1) % n;
        if (f.sentinel == eager_sentinel::skip) continue;
        c.skips = 0;
        std::byte* const body = c.seg.message(slot, f.size);
        // The message's lines are in the sender's cache: ask for all of them now, so
        // that they cross while the message goes up to its handler, instead of one
        // miss after another when the handler reads it.
        for (std::uint32_t at = 64; at < f.size; at += 64)
            __builtin_prefetch(body + at);
        void* msg = alloc::place_message(body - alloc::message_header_size, f.size, c,
                                         c.seg.name().c_str());
        c.slot_message[slot] = k + 1;
        ++c.held;
        c.delivered = k + 1;
        // What the sender took from our channel to it, when it wrote this.
        if (peers[c.from].eager_out)
            peers[c.from].eager_out->taken_hint = static_cast<std::uint32_t>(mark >> 32);
        deliver(c.from, msg, f.size, false, 0);
        c.seg.header().delivered.store(c.delivered, std::memory_order_release);
        ++eager.receives;
        did = true;
        c.use.used = true;
    }
    return did;
}

void layer::impl::note_bad_footer(std::uint32_t from, std::uint32_t slot,
                                  const eager_footer_error& e) {
    up.on_notice("coverse: PE " + std::to_string(cfg.rank) + ": the eager channel from PE " +
                 std::to_string(from) + " holds a bad footer in slot " + std::to_string(slot) +
                 " (" + std::string(e.what) + ": " + std::to_string(e.value) + ", limit " +
                 std::to_string(e.limit) + "); that channel is closed and PE " +
                 std::to_string(from) + "'s later messages come by the stream path\n");
    ++eager.bad_footers;
}

void layer::impl::eager_bad_footer(eager_rx& c, std::uint32_t slot, const eager_footer_error& e) {
    note_bad_footer(c.from, slot, e);
    c.done = true;
    c.seg.header().receiver_stopped.store(1, std::memory_order_release);
    if (c.from != unattached) {
        net::eager_channel_payload close;
        close.action = net::eager_action::close;
        close.kind = static_cast<std::uint32_t>(c.kind);
        close.channel = c.id;
        const auto bytes = net::encode(close);
        (void)stream_control(c.from, net::frame_type::eager_channel, false, 0, bytes);
    }
}

bool layer::impl::eager_pending() const noexcept {
    for (const auto& c : eager.polled) {
        if (c->done) continue;
        // A persistent channel a sender attached since the last poll: its first message may
        // already be in it (the sender attaches before it writes), and only eager_poll
        // attaches it here, so the PE must not sleep before that poll.
        if (c->from == unattached) {
            if (c->seg.header().attached.load(std::memory_order_acquire)) return true;
            continue;
        }
        if (eager_mark_names(c->seg.footer_mark(c->at).load(std::memory_order_acquire),
                             c->delivered))
            return true;
    }
    return false;
}

// Adaptive set-up, at the receiver: a sender busy on the ring gets a short channel.
void layer::impl::eager_note_stream_message(std::uint32_t from) {
    peer& p = peers[from];
    if (!cfg.eager || p.eager_in || p.tcp_in || p.put_in || p.eager_refused || p.eager_due) return;
    // Counted per message, timed per EAGER_THRESHOLD messages (a clock read on every ring
    // message cost the receiver ~60 instructions of its ~700): the window is busy when its
    // THRESHOLD-th message came within INTERVAL of its first; else a new window starts.
    if (p.window_count++ == 0) p.window_start_ns = coarse_now_ns();
    if (p.window_count < cfg.eager_threshold) return;
    if (coarse_now_ns() - p.window_start_ns > cfg.eager_interval_ns) {
        p.window_count = 0;  // too slow: the next message starts a new window
        return;
    }
    p.window_count = 0;
    if (p.reopen_at_ns != 0 && coarse_now_ns() < p.reopen_at_ns) return;  // its last went unused
    if (!p.ready) {
        // Ring messages can come before the connection brings the sender's verdict: which
        // path the channel takes is not known yet. It opens when the set-up completes
        // (setup_check), not on some later message that may never come.
        p.eager_due = true;
        return;
    }
    eager_open_short(from);
}

void layer::impl::eager_open_short(std::uint32_t from) {
    peer& p = peers[from];
    // No channel of any kind, and not refused: eager_note_stream_message saw to that, and
    // nothing opens one before the set-up completes (an eager_due peer).
    p.eager_due = false;
    const bool rings = p.in_ring && p.out_ring;
    if (!rings && !mesh) return;
    // Counted once per EAGER_THRESHOLD messages, not on every message once a full pollset
    // has turned the sender away.
    std::size_t shorts = 0;
    for (const auto& c : eager.polled)
        shorts += c->kind == eager_kind::short_slots && !c->done;
    for (const auto& q : peers)
        shorts += (q.tcp_in != nullptr) + (q.put_in != nullptr);
    if (shorts >= cfg.eager_pollset) return;
    if (!rings) {
        // Over the connection: slots the sender writes by put (EAGER_REMOTE), else frames.
        if (!put_wanted(from) || !put_open(from)) tcp_eager_open(from);
        return;
    }
    eager_rx* c =
        eager_create(from, eager_kind::short_slots, cfg.eager_slots, cfg.eager_short_bytes);
    if (!c) {
        p.eager_refused = true;  // said once; this peer stays on the ring
        return;
    }
    p.eager_in = c;
    eager_announce(*c, 0);
}

eager_rx* layer::impl::eager_create(std::uint32_t from, eager_kind kind, std::uint32_t slots,
                                    std::uint32_t capacity) {
    const std::uint32_t id = eager.next_id++;
    try {
        auto seg =
            eager_segment::create(segment_name(cfg.job_key, cfg.rank, id), kind, slots, capacity);
        eager.polled.push_back(std::make_unique<eager_rx>(id, from, kind, std::move(seg)));
        eager_rx* c = eager.polled.back().get();
        c->use.seen_ns = coarse_now_ns();
        ++eager.opened;
        return c;
    } catch (const std::exception& e) {
        up.on_notice("coverse: PE " + std::to_string(cfg.rank) + ": " + e.what() +
                     "; messages go by the stream path\n");
        return nullptr;
    }
}

void layer::impl::eager_announce(eager_rx& c, std::uint32_t handle) {
    net::eager_channel_payload open;
    open.action = net::eager_action::open;
    open.kind = static_cast<std::uint32_t>(c.kind);
    open.channel = c.id;
    open.handle = handle;
    open.slots = c.seg.slots();
    open.capacity = c.seg.capacity();
    c.handle = handle;
    const auto bytes = net::encode(open);
    if (stream_control(c.from, net::frame_type::eager_channel, false, 0, bytes) < 0) c.done = true;
}

eager_rx* layer::impl::eager_find_rx(std::uint32_t from, std::uint32_t id) noexcept {
    for (auto& c : eager.polled)
        if (c->id == id && c->from == from) return c.get();
    return nullptr;
}

// Idle short channels retire so their slots and the poller's time go to busier senders.
std::uint64_t layer::impl::coarse_now_ns() noexcept {
    timespec ts{};
    ::clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u +
           static_cast<std::uint64_t>(ts.tv_nsec);
}

std::uint64_t layer::impl::eager_clock_tick(std::uint32_t& polls) noexcept {
    // Read on every 64th poll only: a spinning loop polls every few tens of ns, and
    // idleness is judged in units of 100 ms.
    return (polls++ & 63) == 0 ? coarse_now_ns() : 0;
}

std::uint64_t layer::impl::eager_idle_period_ns() const noexcept {
    return std::max<std::uint64_t>(10 * cfg.eager_interval_ns, 100'000'000);
}

bool layer::impl::eager_unused(use_mark& use, std::uint64_t now) const noexcept {
    // The time is the sweep's fresh read, not one stored at the take: that would be the last
    // tick's, which after the loop slept is as old as the sleep, and a channel used a moment
    // ago would retire as idle.
    if (std::exchange(use.used, false)) {
        use.seen_ns = now;
        return false;
    }
    return now - use.seen_ns > eager_idle_period_ns();
}

void layer::impl::eager_retire_idle() {
    const std::uint64_t now = eager_clock_tick(eager.ring_sweep_polls);
    if (now == 0 || now < eager.next_sweep_ns) return;
    eager.next_sweep_ns = now + cfg.eager_interval_ns;
    for (auto& c : eager.polled) {
        if (c->kind == eager_kind::short_slots && !c->closing && !c->done &&
            eager_unused(c->use, now)) {
            c->closing = true;
            ++eager.retired;
            // One that never carried a message: the next waits one idle period, doubled for
            // each such channel in a row (up to 64 periods); one that did resets that.
            peer& q = peers[c->from];
            if (c->delivered == 0) {
                q.unused_channels = static_cast<std::uint8_t>(std::min(q.unused_channels + 1, 7));
                q.reopen_at_ns = now + (eager_idle_period_ns() << (q.unused_channels - 1));
            } else {
                q.unused_channels = 0;
                q.reopen_at_ns = 0;
            }
            net::eager_channel_payload close;
            close.action = net::eager_action::close;
            close.kind = static_cast<std::uint32_t>(c->kind);
            close.channel = c->id;
            const auto bytes = net::encode(close);
            if (stream_control(c->from, net::frame_type::eager_channel, false, 0, bytes) < 0)
                c->done = true;
        }
    }
    // Reap channels nobody writes to and no handler holds a slot of.
    std::erase_if(eager.polled, [&](const std::unique_ptr<eager_rx>& c) {
        if (!c->done || c->held) return false;
        if (c->from != unattached && peers[c->from].eager_in == c.get())
            peers[c->from].eager_in = nullptr;
        return true;
    });
}

// ---- control frames -------------------------------------------------------------------

void layer::impl::on_eager_channel(std::uint32_t from, const net::eager_channel_payload& f) {
    using net::eager_action;
    peer& p = peers[from];
    switch (f.action) {
        case eager_action::open: {  // we are the sender
            std::unique_ptr<eager_tx> tx;
            std::string why;
            if (!p.out_ring && f.kind == static_cast<std::uint32_t>(eager_kind::long_buffers)) {
                tcp_long_opened(from, f);  // over the connection (eager_tcp.cpp)
                return;
            }
            if (!p.out_ring && f.kind == static_cast<std::uint32_t>(eager_kind::short_slots)) {
                // Over the connection: its slots are its own memory; we hold the credits.
                p.tcp_out = std::make_unique<tcp_tx>(tcp_tx{f.slots, f.capacity, 0});
                return;
            }
            if (!p.out_ring) {
                why = "no shared-memory ring to that PE";
            } else {
                try {
                    tx.reset(
                        new eager_tx{from, f.channel, static_cast<eager_kind>(f.kind),
                                     eager_segment::open(segment_name(cfg.job_key, from, f.channel),
                                                         f.slots, f.capacity)});
                } catch (const std::exception& e) {
                    why = e.what();
                }
            }
            if (!tx) {
                up.on_notice("coverse: PE " + std::to_string(cfg.rank) +
                             " cannot use the eager channel PE " + std::to_string(from) +
                             " opened: " + why + "; sending by the stream path\n");
                net::eager_channel_payload closed = f;
                closed.action = eager_action::closed;
                const auto bytes = net::encode(closed);
                (void)stream_control(from, net::frame_type::eager_channel, false, 0, bytes);
                if (f.handle) eager_persistent_refused(f.handle);
                return;
            }
            tx->seg.unlink();  // both sides have it mapped now
            if (f.kind == static_cast<std::uint32_t>(eager_kind::short_slots)) {
                // Our receivers close a channel before they open the next; an open without
                // that close replaces the channel as a close would: what the old one holds
                // still goes first (its segment gates the ring until taken). The receiver,
                // told nothing, keeps polling the old one until it retires as idle.
                if (p.eager_out) {
                    ++eager.replaced;
                    eager_drop_tx(from, p.eager_out.get());
                }
                p.eager_out = std::move(tx);
                return;
            }
            auto it = eager.persistent.find(f.handle);
            if (it == eager.persistent.end() || it->second.dest != from) {
                // Destroyed meanwhile: tell the receiver the channel is not needed.
                net::eager_channel_payload d = f;
                d.action = eager_action::destroy;
                const auto bytes = net::encode(d);
                (void)stream_control(from, net::frame_type::eager_channel, false, 0, bytes);
                return;
            }
            it->second.channel = std::move(tx);
            return;
        }
        case eager_action::close: {  // we are the sender: stop writing, say so behind the data
            if (put_close(from, f.channel)) return;  // written by put (eager_put.cpp)
            if (p.eager_out && p.eager_out->id == f.channel) {
                eager_drop_tx(from, p.eager_out.get());
                p.eager_out.reset();
            }
            for (auto& [h, po] : eager.persistent)
                if (po.dest == from && po.channel && po.channel->id == f.channel) {
                    eager_drop_tx(from, po.channel.get());
                    po.channel.reset();
                    po.refused = true;
                }
            net::eager_channel_payload closed = f;
            closed.action = eager_action::closed;
            const auto bytes = net::encode(closed);
            (void)stream_control(from, net::frame_type::eager_channel, false, 0, bytes);
            return;
        }
        case eager_action::credit:  // we are the sender: long buffers freed (connections)
            tcp_long_credit(from, f);
            return;
        case eager_action::closed:     // we are the receiver: nothing more comes on it
        case eager_action::destroy: {  // likewise, for a persistent handle
            if (f.action == eager_action::destroy && tcp_long_destroyed(from, f.channel)) return;
            if (f.action == eager_action::closed && put_closed(from, f.channel)) return;
            eager_rx* c = eager_find_rx(from, f.channel);
            if (!c && f.action == eager_action::destroy) {
                // A receiver-initiated channel: its sender named itself in the segment.
                for (auto& r : eager.polled)
                    if (r->id == f.channel && r->kind == eager_kind::long_buffers) c = r.get();
            }
            if (!c) return;
            c->done = true;
            if (p.eager_in == c) {
                p.eager_in = nullptr;
                if (f.action == eager_action::closed && !c->closing)
                    p.eager_refused = true;  // the sender could not map it: do not retry
            }
            return;
        }
        case eager_action::refuse:
            eager_persistent_refused(f.handle);
            return;
    }
}

void layer::impl::eager_drop_tx(std::uint32_t dest, eager_tx* c) {
    // The closed/destroy frame goes out gated behind c's messages; the gate then needs
    // nothing of c, which is about to go away.
    peer& p = peers[dest];
    if (p.gate == c) {
        p.gate_drain = c->written;
        p.gate_segment = std::make_unique<eager_segment>(std::move(c->seg));
        p.gate = nullptr;
    }
}

void layer::impl::on_persistent_request(std::uint32_t from,
                                        const net::persistent_request_payload& r) {
    peer& p = peers[from];
    if (!p.ready) {
        // The requester is set up (its request left by its ring or after its set-up) and
        // chose its paths; deciding before ours are known would offer buffers where it does
        // not look. Answered when the set-up completes (setup_check).
        p.early_requests.push_back(r);
        return;
    }
    eager_rx* c = nullptr;
    if (cfg.eager_long_buffers > 0 && p.in_ring && p.out_ring) {
        const auto cap =
            static_cast<std::uint32_t>(std::min<std::uint64_t>(r.max_size, cfg.eager_long_bytes));
        c = eager_create(from, eager_kind::long_buffers, cfg.eager_long_buffers, cap);
    } else if (!(p.in_ring && p.out_ring) && tcp_long_open(from, r)) {
        return;  // long buffers over the connection (eager_tcp.cpp)
    }
    if (!c) {
        ++eager.refused;
        net::eager_channel_payload no;
        no.action = net::eager_action::refuse;
        no.kind = static_cast<std::uint32_t>(eager_kind::long_buffers);
        no.handle = r.handle;
        const auto bytes = net::encode(no);
        (void)stream_control(from, net::frame_type::eager_channel, false, 0, bytes);
        return;
    }
    eager_announce(*c, r.handle);
}

void layer::impl::eager_persistent_refused(std::uint32_t handle) {
    auto it = eager.persistent.find(handle);
    if (it != eager.persistent.end()) it->second.refused = true;
}

// ---- the layer's persistent API -------------------------------------------------------

std::uint32_t layer::persistent_create(std::uint32_t dest, std::uint32_t max_bytes) {
    impl& m = *_impl;
    const std::uint32_t h = m.eager.next_handle++;
    m.eager.persistent.emplace(h, persistent_out{dest, max_bytes, nullptr, false, nullptr});
    if (dest == m.cfg.rank || dest >= m.cfg.num_pes || max_bytes == 0) {
        m.eager.persistent.at(h).refused = true;  // to self or nowhere: sends go as usual
        return h;
    }
    net::persistent_request_payload r;
    r.max_size = std::min<std::uint32_t>(max_bytes, net::default_max_payload);
    r.handle = h;
    const auto bytes = net::encode(r);
    if (m.stream_control(dest, net::frame_type::persistent_request, false, 0, bytes) < 0)
        m.eager.persistent.at(h).refused = true;
    return h;
}

layer::persistent_offer layer::persistent_create_receiver(std::uint32_t max_bytes) {
    impl& m = *_impl;
    if (m.cfg.eager_long_buffers == 0 || !m.shm_wanted || m.shm_failed || max_bytes == 0) return {};
    const auto cap = std::min<std::uint32_t>(max_bytes, m.cfg.eager_long_bytes);
    eager_rx* c =
        m.eager_create(unattached, eager_kind::long_buffers, m.cfg.eager_long_buffers, cap);
    if (!c) return {};
    return {c->id, cap};
}

std::uint32_t layer::persistent_register_receive(std::uint32_t receiver, std::uint32_t channel,
                                                 std::uint32_t max_bytes) {
    impl& m = *_impl;
    const std::uint32_t h = m.eager.next_handle++;
    persistent_out po{receiver, max_bytes, nullptr, true, nullptr};
    if (channel != 0 && receiver < m.cfg.num_pes && receiver != m.cfg.rank &&
        m.peers[receiver].out_ring) {
        try {
            auto seg = eager_segment::open(segment_name(m.cfg.job_key, receiver, channel),
                                           m.cfg.eager_long_buffers, max_bytes);
            seg.header().sender.store(m.cfg.rank, std::memory_order_relaxed);
            seg.header().attached.store(1, std::memory_order_release);
            seg.unlink();
            po.channel.reset(
                new eager_tx{receiver, channel, eager_kind::long_buffers, std::move(seg)});
            po.refused = false;
        } catch (const std::exception& e) {
            m.up.on_notice("coverse: PE " + std::to_string(m.cfg.rank) +
                           " cannot attach the persistent channel of PE " +
                           std::to_string(receiver) + ": " + e.what() +
                           "; sends on the handle go by the usual paths\n");
        }
    }
    m.eager.persistent.emplace(h, std::move(po));
    return h;
}

void layer::persistent_use(std::span<const std::uint32_t> handles) {
    _impl->eager.current.assign(handles.begin(), handles.end());
}

void layer::persistent_destroy(std::uint32_t handle) {
    impl& m = *_impl;
    auto it = m.eager.persistent.find(handle);
    if (it == m.eager.persistent.end()) return;
    std::erase(m.eager.current, handle);
    if (it->second.channel) {
        const std::uint32_t dest = it->second.dest;
        net::eager_channel_payload d;
        d.action = net::eager_action::destroy;
        d.kind = static_cast<std::uint32_t>(eager_kind::long_buffers);
        d.channel = it->second.channel->id;
        d.handle = handle;
        m.eager_drop_tx(dest, it->second.channel.get());
        const auto bytes = net::encode(d);
        (void)m.stream_control(dest, net::frame_type::eager_channel, false, 0, bytes);
    } else if (it->second.tcp) {
        // Behind the handle's last eager_data frame on the same connection.
        net::eager_channel_payload d;
        d.action = net::eager_action::destroy;
        d.kind = static_cast<std::uint32_t>(eager_kind::long_buffers);
        d.channel = it->second.tcp->channel;
        d.handle = handle;
        const auto bytes = net::encode(d);
        (void)m.stream_control(it->second.dest, net::frame_type::eager_channel, false, 0, bytes);
    }
    m.eager.persistent.erase(it);
}

layer::persistent_state layer::persistent_status(std::uint32_t handle) const noexcept {
    const impl& m = *_impl;
    auto it = m.eager.persistent.find(handle);
    if (it == m.eager.persistent.end()) return persistent_state::unknown;
    if (it->second.channel || it->second.tcp) return persistent_state::open;
    return it->second.refused ? persistent_state::refused : persistent_state::pending;
}

void layer::hold_eager_polls_until_a_ring_record_follows() noexcept {
    _impl->eager_polls_held = true;
}

layer::eager_counters layer::eager_stats() const noexcept {
    const impl& m = *_impl;
    eager_counters c;
    c.sends = m.eager.sends;
    c.receives = m.eager.receives;
    c.no_credit = m.eager.no_credit;
    c.order_waits = m.eager.order_waits;
    c.ring_after_channel = m.eager.ring_after_channel;
    c.opened = m.eager.opened;
    c.refused = m.eager.refused;
    c.retired = m.eager.retired;
    c.bad_footers = m.eager.bad_footers;
    c.replaced = m.eager.replaced;
    for (const auto& r : m.eager.polled)
        if (!r->done) ++c.polled;
    for (const auto& p : m.peers) {
        if (p.eager_out || p.tcp_out || p.put_out) ++c.writing;
        if (p.tcp_in || (p.put_in && !p.put_in->done)) ++c.polled;
        c.polled += p.tcp_long.size();
    }
    for (const auto& [h, po] : m.eager.persistent)
        if (po.tcp) ++c.writing;
    c.credit_frames = m.credit_frames;
    c.credits_back = m.credits_back;
    c.put_sends = m.eager.put_sends;
    c.put_receives = m.eager.put_receives;
    c.put_waits = m.eager.put_waits;
    return c;
}

bool layer::inject_replacing_short_open(std::uint32_t from) {
    impl& m = *_impl;
    if (from >= m.peers.size()) return false;
    auto& p = m.peers[from];
    if (!p.eager_in || p.eager_in->kind != eager_kind::short_slots || p.eager_in->done ||
        p.eager_in->closing || !(p.in_ring && p.out_ring))
        return false;
    eager_rx* c =
        m.eager_create(from, eager_kind::short_slots, m.cfg.eager_slots, m.cfg.eager_short_bytes);
    if (!c) return false;
    p.eager_in = c;  // the old one stays in the pollset, unclosed
    m.eager_announce(*c, 0);
    return !c->done;  // done: the open could not be sent
}

bool layer::inject_bad_eager_footer(std::uint32_t dest, footer_fault fault) {
    impl& m = *_impl;
    if (dest >= m.peers.size()) return false;
    eager_tx* c = m.peers[dest].eager_out.get();
    if (!c) return m.put_inject_bad_footer(dest, fault);
    // A free slot, as a send would take it: writing over a slot the receiver has not taken
    // yet would destroy a good message (the test then lost one under load).
    const auto slot = c->claim_slot(0);
    if (!slot) return false;
    const eager_footer bad =
        bad_footer_for(fault, static_cast<std::uint16_t>(c->written), c->seg.capacity());
    c->write_footer(*slot, eager_footer::encode(bad.sentinel, bad.seq, bad.size), 0);
    c->wrote(*slot);
    m.peers[dest].gate = c;
    if (m.peers[dest].out_ring->take_sleeper()) m.peers[dest].out_bell->ring();
    return true;
}

void layer::impl::eager_peer_lost(std::uint32_t pe) {
    put_peer_lost(pe);
    peer& p = peers[pe];
    p.tcp_out.reset();
    if (p.gate && p.gate->to == pe) p.gate = nullptr;
    p.gate_segment.reset();
    p.eager_out.reset();
    for (auto& [h, po] : eager.persistent)
        if (po.dest == pe) {
            po.channel.reset();
            po.tcp.reset();
            po.refused = true;
        }
    // What it wrote before it died is still delivered; then its channels stop. Slots that
    // handlers hold stay valid: the segments are ours.
    for (auto& c : eager.polled)
        if (c->from == pe) c->closing = true;
}

namespace {
// Channels closed while handlers still hold their slots: an owner must outlive what it owns,
// and a message may be freed after the layer is gone, so they stay here (reachable, mapped)
// until the process ends.
struct retired {
    std::vector<std::unique_ptr<eager_rx>> shm;
    std::vector<std::unique_ptr<tcp_rx>> tcp;
    std::vector<std::unique_ptr<put_rx>> put;
    std::vector<std::unique_ptr<put_tx>> put_out;  // puts still in flight: their completions
};
retired& retired_owners() {
    static auto* r = new retired;  // never freed: reachable until exit
    return *r;
}
}  // namespace

void layer::impl::retire_tcp_rx(std::unique_ptr<tcp_rx> c) {
    retired_owners().tcp.push_back(std::move(c));
}

void layer::impl::retire_put_rx(std::unique_ptr<put_rx> c) {
    retired_owners().put.push_back(std::move(c));
}

void layer::impl::retire_put_tx(std::unique_ptr<put_tx> c) {
    retired_owners().put_out.push_back(std::move(c));
}

void layer::impl::eager_close() {
    put_close_all();
    for (auto& p : peers) {
        p.tcp_out.reset();
        if (p.tcp_in) {
            p.tcp_in->ctx = nullptr;
            // Slots a handler still holds: the owner outlives them (see below).
            if (p.tcp_in->held) retired_owners().tcp.push_back(std::move(p.tcp_in));
        }
        for (auto& c : p.tcp_long) {
            c->ctx = nullptr;
            if (c->held) retired_owners().tcp.push_back(std::move(c));
        }
        p.tcp_long.clear();
        p.gate = nullptr;
        p.gate_segment.reset();
        p.eager_out.reset();
    }
    eager.persistent.clear();
    // A channel whose slots a handler still holds must outlive those messages (the owner
    // outlives what it owns): it stays mapped until the process ends.
    for (auto& c : eager.polled) {
        c->seg.unlink();
        if (c->held) retired_owners().shm.push_back(std::move(c));
    }
    eager.polled.clear();
}

}  // namespace coverse::rdma
