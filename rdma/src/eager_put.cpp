// Eager short channels written by one-sided put (EAGER_REMOTE; the seed's form for RDMA
// hardware): the receiver's slots are memory registered with the provider the sender reaches
// it by; the sender writes message + footer into its next slot with one put (verbs: an RDMA
// WRITE; tcp: emulated over the connection; cma: process_vm_writev) and the receiver polls
// the footers. No frame per message; credits come back as on any connection channel
// (eager_tcp.cpp: on any frame's header, or in credit frames).
//
// Stages of a channel: opened by its receiver for a busy sender (eager_put_open: slots,
// address, key) -> accepted by the sender (it maps nothing: it keeps a staging copy of each
// slot in its own memory) or refused (closed) -> in use (a put per message, one credit each;
// the receiver takes slots in sequence order and returns a credit for each slot freed, in
// slot order) -> closing (idle, or a bad footer: the receiver sends close; the sender answers
// closed once its puts have landed) -> done (closed, or the peer died: no more puts come; the
// registration goes) -> reaped once no handler holds a slot.
//
// Slots are used in turn (slot = sequence mod slots), so the sender needs no view of which
// are free: a credit comes back when the oldest slot not yet returned is freed. A handler
// that keeps a slot stops the returns behind it; the sender then has no credit and sends by
// the stream path, never over a slot in use.
//
// Order per pair (the stream path is the connection; the puts take another path):
// - a put after stream messages: its footer names how many frames carrying a message the
//   sender had posted to the connection before it (`after`, peer::streamed); the receiver
//   counts those it took (peer::stream_taken) and delivers the put only when they are equal;
// - a stream message after puts: it waits (put_tx::behind) until every put has completed —
//   its bytes are in the receiver's memory — and the receiver, before it takes any frame
//   that carries a message, delivers the puts whose turn has come (put_stream_message).
// The same code runs on every provider: tcp's puts travel on the connection itself, cma's
// complete before post_put returns, verbs' complete when the NIC has written them.
//
// Footer safety: one put of [message, slot end) writes the sentinel last where the provider
// places a put's bytes in address order (capabilities::put_in_order: tcp, verbs); elsewhere
// (cma) the footer word goes in a second put once the first completed. docs/rdma.md,
// "Channels written by put", says why per provider.
#include "layer_impl.hpp"

#include <atomic>
#include <bit>
#include <cstdlib>
#include <cstring>

#include <coverse/alloc/memory_release.hpp>
#include <coverse/alloc/message.hpp>
#include <coverse/runtime/trace.hpp>

namespace coverse::rdma {

static_assert(std::endian::native == std::endian::little,
              "put footers are little-endian in memory (eager.hpp)");

namespace {

std::size_t page_round(std::size_t n) noexcept {
    return (n + 4095) / 4096 * 4096;
}

// The footer's head and word (eager.hpp, "channels written by one-sided put"), as our own
// thread reads and writes them while a peer (or the kernel on its behalf) may write them too.
std::atomic_ref<std::uint64_t> footer_head(std::byte* slot, std::uint32_t stride) noexcept {
    return eager_footer_at(slot, stride, 0);
}
std::atomic_ref<std::uint64_t> footer_word(std::byte* slot, std::uint32_t stride) noexcept {
    return eager_footer_at(slot, stride, 1);
}

std::uint16_t sentinel_of(std::uint64_t word) noexcept {
    return static_cast<std::uint16_t>(word >> 48);
}

}  // namespace

// ---- the receiver's slots ---------------------------------------------------------------

put_rx::put_rx(std::uint32_t f, std::uint32_t i, std::uint32_t n, std::uint32_t cap)
    : owed_credits{f, n}, id(i), capacity(cap), stride(eager_slot_stride(cap)) {
    bytes = page_round(std::size_t{stride} * n);
    mem = static_cast<std::byte*>(std::aligned_alloc(4096, bytes));
    if (!mem) return;
    std::memset(mem, 0, bytes);
    for (std::uint32_t s = 0; s < n; ++s)
        footer_word(slot(s), stride)
            .store(eager_put_word(eager_sentinel::ready, 0, 0), std::memory_order_relaxed);
}

put_rx::~put_rx() {
    reg.reset();
    if (!mem) return;
    // No cached registration may outlive the memory it names (a later allocation could
    // reuse the address).
    alloc::announce_release(mem, bytes);
    std::free(mem);
}

void put_rx::count_freed() noexcept {
    while (
        returned != next &&
        sentinel_of(footer_word(slot(returned % slots), stride).load(std::memory_order_relaxed)) ==
            eager_sentinel::free) {
        ++returned;
        ++pending_credits;
    }
}

void put_rx::take_back(void* storage, std::size_t) noexcept {
    const auto i = static_cast<std::uint32_t>((static_cast<std::byte*>(storage) - mem) /
                                              std::ptrdiff_t{stride});
    auto word = footer_word(slot(i), stride);
    const std::uint64_t w = word.load(std::memory_order_relaxed);
    word.store(eager_put_word(eager_sentinel::free, static_cast<std::uint16_t>(w),
                              static_cast<std::uint32_t>(w >> 16)),
               std::memory_order_relaxed);
    --held;
    if (trace::enabled())
        trace::emit(trace::kind::credit_returned, from, 1,
                    trace::credit_protocol(trace::protocol::eager_short));
    if (done || !ctx) return;  // the sender is gone: nobody to return credits to
    count_freed();
    if (pending_credits) credit_due(ctx, *this);
}

bool layer::impl::put_wanted(std::uint32_t from) const noexcept {
    const provider_kind k = peers[from].publish_with;
    return provider_of(k) && cfg.eager_by_put(k);
}

// The receiver: a busy sender over a connection gets slots it writes by put. False: none (the
// caller opens a channel written by frames instead).
bool layer::impl::put_open(std::uint32_t from) {
    peer& p = peers[from];
    provider* prov = provider_of(p.publish_with);
    auto c = std::make_unique<put_rx>(from, eager.next_id, cfg.eager_slots, cfg.eager_short_bytes);
    std::string why;
    if (!c->mem) {
        why = "no memory for " + std::to_string(cfg.eager_slots) + " slots";
    } else {
        try {
            c->reg = prov->expose(std::span<const std::byte>(c->mem, c->bytes));
        } catch (const std::exception& e) {
            why = e.what();
        }
    }
    if (!why.empty()) {
        up.on_notice("coverse: PE " + std::to_string(cfg.rank) + ": eager slots for PE " +
                     std::to_string(from) + " to write by put: " + why +
                     "; its eager messages come as frames instead (EAGER_REMOTE=frames)\n");
        return false;
    }
    ++eager.next_id;
    c->prov = prov;
    c->wakes = prov->kind() == provider_kind::tcp;
    c->ctx = this;
    c->credit_due = [](void* m, put_rx& r) noexcept {
        static_cast<impl*>(m)->tcp_return_credits(r);
    };
    c->use.seen_ns = coarse_now_ns();
    net::eager_put_open_payload o;
    o.channel = c->id;
    o.slots = c->slots;
    o.capacity = c->capacity;
    o.address = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(c->mem));
    o.key = c->reg.get().key;
    const auto bytes = net::encode(o);
    if (stream_control(from, net::frame_type::eager_put_open, false, 0, bytes) < 0)
        return true;  // the peer is gone: no channel of either kind
    p.put_in = std::move(c);
    eager.put_sources.push_back(from);
    ++eager.opened;
    put_start_polling();
    return true;
}

// Takes the messages of `c` whose turn has come, a bounded batch. True: it took some.
bool layer::impl::put_take(put_rx& c) {
    bool did = false;
    for (int batch = 0; batch < 64 && !c.stopped && !c.done; ++batch) {
        const std::uint32_t i = c.next % c.slots;
        std::byte* s = c.slot(i);
        // The word first (acquire): its sentinel is the last thing a put writes, so what the
        // same put wrote before it (the head, the message) is in place once it says data.
        const std::uint64_t word = footer_word(s, c.stride).load(std::memory_order_acquire);
        const std::uint16_t sentinel = sentinel_of(word);
        if (sentinel == eager_sentinel::ready || sentinel == eager_sentinel::received ||
            sentinel == eager_sentinel::free) {
            c.suspecting = false;
            break;  // nothing yet: the slot still holds what we wrote into it
        }
        const std::uint64_t head = footer_head(s, c.stride).load(std::memory_order_relaxed);
        eager_footer_error err;
        const eager_put_footer f = decode_eager_put_footer(head, word, c.capacity, err);
        const std::uint32_t taken = peers[c.from].stream_taken;
        if (!err && f.footer.seq != static_cast<std::uint16_t>(c.next))
            err = {"a sequence number out of turn", f.footer.seq,
                   static_cast<std::uint16_t>(c.next)};
        if (!err && f.after != taken) {
            // Ahead: stream messages it sent before this one are still on their way. Behind:
            // impossible for a correct sender (it was delivered before those were taken).
            if (f.after - taken < 0x8000'0000u) break;
            err = {"a stream position already passed", f.after, taken};
        }
        if (err) {
            // A word caught while a copy writes it is not a broken peer: bad only when the
            // next look reads the same word.
            if (!c.suspecting || c.suspect != word) {
                c.suspecting = true;
                c.suspect = word;
                break;
            }
            put_bad_footer(c, i, err);
            break;
        }
        c.suspecting = false;
        const std::uint32_t size = f.footer.size;
        void* msg = alloc::place_message(
            s + eager_message_offset(c.stride, size) - alloc::message_header_size, size, c,
            "eager slot (put)");
        footer_word(s, c.stride)
            .store(eager_put_word(eager_sentinel::received, f.footer.seq, size),
                   std::memory_order_relaxed);
        ++c.held;
        ++c.next;
        ++eager.receives;
        ++eager.put_receives;
        did = true;
        deliver(c.from, msg, size, false, 0);
    }
    c.use.used |= did;
    return did;
}

void layer::impl::put_stream_message(std::uint32_t from) {
    peer& p = peers[from];
    // Every put sent before this frame has landed (the sender waited for it), so whatever
    // waits for this frame's predecessors is taken now, before the frame counts.
    if (p.put_in) [[unlikely]]
        while (put_take(*p.put_in)) {
        }
    ++p.stream_taken;
}

void layer::impl::put_bad_footer(put_rx& c, std::uint32_t slot, const eager_footer_error& e) {
    note_bad_footer(c.from, slot, e);
    c.stopped = true;
    if (!c.closing) {
        c.closing = true;
        put_tell(c.from, net::eager_action::close, c.id);
    }
}

void layer::impl::put_tell(std::uint32_t to, net::eager_action action, std::uint32_t channel) {
    net::eager_channel_payload f;
    f.action = action;
    f.kind = static_cast<std::uint32_t>(eager_kind::short_slots);
    f.channel = channel;
    const auto bytes = net::encode(f);
    (void)stream_control(to, net::frame_type::eager_channel, false, 0, bytes);
}

// The receiver: the sender stopped (it answered close, or refused the channel). Everything it
// put came before this frame, and landed before it was sent.
bool layer::impl::put_closed(std::uint32_t from, std::uint32_t channel) {
    peer& p = peers[from];
    if (!p.put_in || p.put_in->id != channel) return false;
    while (put_take(*p.put_in)) {
    }
    // Refused, or broken: this sender gets no new channel (as for shared memory).
    if (!p.put_in->closing || p.put_in->stopped) p.eager_refused = true;
    put_rx_done(from);
    return true;
}

// No more puts come into `from`'s channel: its registration goes; its memory stays while a
// handler holds a slot of it.
void layer::impl::put_rx_done(std::uint32_t from) {
    std::unique_ptr<put_rx> c = std::move(peers[from].put_in);
    std::erase(eager.put_sources, from);
    c->done = true;
    c->pending_credits = 0;
    c->reg.reset();
    c->prov->cache().invalidate(c->mem, c->bytes);
    if (c->held) eager.put_draining.push_back(std::move(c));
}

// ---- the sender -------------------------------------------------------------------------

put_tx::put_tx(std::uint32_t dest, const net::eager_put_open_payload& open, provider& p)
    : to(dest),
      id(open.channel),
      slots(open.slots),
      capacity(open.capacity),
      stride(eager_slot_stride(open.capacity)),
      prov(p),
      remote{open.address, open.key, std::uint64_t{open.slots} * stride},
      footer_apart(!p.caps().put_in_order),
      bytes(page_round(std::size_t{stride} * open.slots)),
      ops(new put_op[open.slots]),
      credits(open.slots) {
    staging = static_cast<std::byte*>(std::aligned_alloc(4096, bytes));
    for (std::uint32_t i = 0; i < slots; ++i) {
        ops[i].channel = this;
        ops[i].slot = i;
    }
}

put_tx::~put_tx() {
    if (!staging) return;
    alloc::announce_release(staging, bytes);  // verbs registered it for its puts
    std::free(staging);
}

void put_op::complete(op_result r) noexcept {
    channel->put_done(channel->ctx, *this, std::move(r));
}

// The sender: a receiver gave us slots to write by put.
void layer::impl::on_put_open(std::uint32_t from, const net::eager_put_open_payload& f) {
    peer& p = peers[from];
    provider* prov = provider_of(p.get_with);
    std::string why;
    if (p.out_ring)
        why = "a shared-memory ring carries our messages to it";
    else if (p.put_out || p.tcp_out)
        why = "it gave us a channel already";
    else if (!prov)
        why = "this PE has no " + std::string(to_string(p.get_with)) + " provider";
    else if (f.address > ~std::uint64_t{0} - std::uint64_t{f.slots} * eager_slot_stride(f.capacity))
        why = "its slots run past the end of the address space";
    std::unique_ptr<put_tx> c;
    if (why.empty()) {
        c = std::make_unique<put_tx>(from, f, *prov);
        c->ctx = this;
        c->put_done = [](void* m, put_op& op, op_result r) noexcept {
            static_cast<impl*>(m)->put_done(op, std::move(r));
        };
        if (!c->staging) why = "no memory to stage " + std::to_string(f.slots) + " slots";
    }
    if (!why.empty()) {
        up.on_notice("coverse: PE " + std::to_string(cfg.rank) +
                     " cannot write the eager slots PE " + std::to_string(from) +
                     " gave it by put: " + why + "; sending by the stream path\n");
        put_tell(from, net::eager_action::closed, f.channel);
        return;
    }
    p.put_out = std::move(c);
    put_start_polling();
}

bool layer::impl::put_send(std::uint32_t dest, const std::byte* buf, std::uint32_t size,
                           bool broadcast, std::uint32_t root, send_completion* done) {
    put_tx& c = *peers[dest].put_out;
    const bool in_turn = c.behind.empty() || c.releasing;
    // A persistent handle's long channel takes what it holds (eager_tcp.cpp), as on rings.
    const bool eligible = in_turn && !broadcast && !c.closing && size >= 1 && size <= c.capacity &&
                          (eager.current.empty() || !tcp_persistent_for(dest, size));
    if (eligible) {
        const std::uint32_t i = c.next % c.slots;
        if (c.credits == 0 || c.ops[i].stage != put_op::idle) {
            ++eager.no_credit;  // every slot taken (or its last put still flying): the stream
        } else {
            std::byte* s = c.staging + std::size_t{i} * c.stride;
            const std::uint32_t at = eager_message_offset(c.stride, size);
            std::memcpy(s + at, buf, size);
            ++eager.sends;
            ++eager.put_sends;
            if (trace::enabled())
                trace::emit(trace::kind::credit_spent, dest, 1,
                            trace::credit_protocol(trace::protocol::eager_short));
            put_post(
                c, at, eager_put_head(peers[dest].streamed),
                eager_put_word(eager_sentinel::data, static_cast<std::uint16_t>(c.next), size));
            // The staging copy is the message now: the caller's buffer is free.
            if (done) {
                done->via_eager(false);
                done->sent(0);
            }
            return true;
        }
    }
    // By the stream path: at once, unless a put has not landed yet — the receiver must find
    // every earlier put in its memory when this frame arrives.
    if (in_turn && c.in_flight == 0) return false;
    ++eager.put_waits;
    const held_send h{buf, size, broadcast, root, done};
    if (c.releasing)
        c.behind.push_front(h);  // still the first in line: the release stops here
    else
        c.behind.push_back(h);
    return true;
}

// Puts the staged slot `c.next % slots` from `offset` to its end: one put, or the message and
// then its footer word apart where the provider may place a put's bytes out of order.
void layer::impl::put_post(put_tx& c, std::uint32_t offset, std::uint64_t head,
                           std::uint64_t word) {
    const std::uint32_t i = c.next % c.slots;
    std::byte* s = c.staging + std::size_t{i} * c.stride;
    std::memcpy(s + c.stride - eager_footer_size, &head, 8);
    std::memcpy(s + c.stride - 8, &word, 8);
    put_op& op = c.ops[i];
    op.stage = put_op::message;
    --c.credits;
    ++c.next;
    ++c.in_flight;
    const std::uint32_t end = c.footer_apart ? c.stride - 8 : c.stride;
    const std::uint64_t at = c.remote.address + std::uint64_t{i} * c.stride + offset;
    c.posting = true;
    c.prov.post_put(c.to, std::span<const std::byte>(s + offset, end - offset),
                    remote_memory{at, c.remote.key, end - offset}, op);
    c.posting = false;
    put_settle(c);  // cma completed it already
}

void layer::impl::put_done(put_op& op, op_result r) noexcept {
    put_tx& c = *op.channel;
    if (!r.ok() && r.status != op_status::peer_lost)  // a lost peer is reported as such
        up.on_fatal("PE " + std::to_string(cfg.rank) + ": an eager put into slot " +
                    std::to_string(op.slot) + " of PE " + std::to_string(c.to) + " failed (" +
                    std::string(to_string(r.status)) + ": " + r.detail +
                    "); the message it carried is lost. EAGER_REMOTE=frames avoids puts");
    if (r.ok() && op.stage == put_op::message && c.footer_apart) {
        // The message is in place: now the word that says so.
        op.stage = put_op::footer;
        std::byte* s = c.staging + std::size_t{op.slot} * c.stride;
        const std::uint64_t at =
            c.remote.address + std::uint64_t{op.slot} * c.stride + c.stride - 8;
        c.prov.post_put(c.to, std::span<const std::byte>(s + c.stride - 8, 8),
                        remote_memory{at, c.remote.key, 8}, op);
        return;
    }
    op.stage = put_op::idle;
    --c.in_flight;
    if (!c.posting) put_settle(c);
}

// Nothing in flight: what waited behind the puts goes, in order; a closing channel answers.
void layer::impl::put_settle(put_tx& c) {
    if (c.posting || c.releasing || c.in_flight != 0) return;
    while (!c.behind.empty() && c.in_flight == 0) {
        const held_send h = c.behind.front();
        c.behind.pop_front();
        c.releasing = true;
        self.send_direct(c.to, h.buf, h.size, h.broadcast, h.root, h.done);
        c.releasing = false;
    }
    if (!c.closing || c.in_flight != 0 || !c.behind.empty()) return;
    peer& p = peers[c.to];
    if (p.put_out.get() != &c) return;  // finished already
    // Behind every put (all landed) and every message that waited for them.
    put_tell(c.to, net::eager_action::closed, c.id);
    // Maybe inside one of its own completions: freed at the next poll.
    eager.put_finished.push_back(std::move(p.put_out));
}

// The sender: the receiver asks us to stop writing channel `channel`.
bool layer::impl::put_close(std::uint32_t from, std::uint32_t channel) {
    put_tx* c = peers[from].put_out.get();
    if (!c || c->id != channel) return false;
    c->closing = true;
    put_settle(*c);
    return true;
}

bool layer::impl::put_inject_bad_footer(std::uint32_t dest, footer_fault fault) {
    put_tx* c = peers[dest].put_out.get();
    if (!c || c->closing || !c->behind.empty() || c->credits == 0 ||
        c->ops[c->next % c->slots].stage != put_op::idle)
        return false;
    const eager_footer bad =
        bad_footer_for(fault, static_cast<std::uint16_t>(c->next), c->capacity);
    put_post(*c, c->stride - eager_footer_size, eager_put_head(peers[dest].streamed),
             eager_put_word(bad.sentinel, bad.seq, bad.size));
    return true;
}

// ---- polling, retirement, loss, close ---------------------------------------------------

void layer::impl::put_start_polling() {
    if (put_poller_) return;
    put_poller_ = std::make_unique<put_poller>(*this);
    sched.add_poller(*put_poller_);
}

bool layer::impl::put_poll() {
    bool did = false;
    for (const std::uint32_t pe : eager.put_sources)
        did |= put_take(*peers[pe].put_in);
    put_retire_idle();
    return did;
}

// A put into our memory wakes nobody (only tcp's arrive as frames): while a channel written
// another way is open, the loop keeps polling. Idle channels retire, and then it may sleep.
bool layer::impl::put_try_sleep() const noexcept {
    for (const std::uint32_t pe : eager.put_sources) {
        const put_rx& c = *peers[pe].put_in;
        if (!c.wakes && !c.closing) return false;
    }
    return true;
}

void layer::impl::put_retire_idle() {
    const std::uint64_t now = eager_clock_tick(eager.put_sweep_polls);
    if (now == 0) return;
    eager.put_finished.clear();  // not inside a completion of theirs: the poller's own turn
    std::erase_if(eager.put_draining,
                  [](const std::unique_ptr<put_rx>& c) { return c->held == 0; });
    for (const std::uint32_t pe : eager.put_sources) {
        put_rx& c = *peers[pe].put_in;
        if (c.closing || !eager_unused(c.use, now)) continue;
        c.closing = true;
        ++eager.retired;
        put_tell(pe, net::eager_action::close, c.id);
    }
}

bool layer::impl::put_idle() const noexcept {
    for (const auto& p : peers)
        if (p.put_out && (p.put_out->in_flight != 0 || !p.put_out->behind.empty())) return false;
    return true;
}

void layer::impl::put_peer_lost(std::uint32_t pe) {
    peer& p = peers[pe];
    if (p.put_out) {
        // The provider completed its puts as lost already; what waited for them never goes.
        while (!p.put_out->behind.empty()) {
            send_completion* done = p.put_out->behind.front().done;
            p.put_out->behind.pop_front();
            done->sent(-EPIPE);
        }
        if (p.put_out->in_flight)
            retire_put_tx(std::move(p.put_out));  // a completion may still come
        else
            eager.put_finished.push_back(std::move(p.put_out));
    }
    if (p.put_in) {
        // What it put before it died is still delivered; slots handlers hold stay valid.
        while (put_take(*p.put_in)) {
        }
        put_rx_done(pe);
    }
}

void layer::impl::put_close_all() {
    if (put_poller_) {
        sched.remove_poller(*put_poller_);
        put_poller_.reset();
    }
    const auto retire_rx = [](std::unique_ptr<put_rx> c) {
        c->ctx = nullptr;
        c->reg.reset();  // before the provider and its registration cache go
        // A handler may free a slot after the layer is gone: the owner outlives its messages.
        if (c->held) retire_put_rx(std::move(c));
    };
    for (auto& p : peers) {
        if (p.put_out) {
            for (auto& h : p.put_out->behind)
                h.done->sent(-EPIPE);
            p.put_out->behind.clear();
            if (p.put_out->in_flight) retire_put_tx(std::move(p.put_out));
            p.put_out.reset();
        }
        if (p.put_in) retire_rx(std::move(p.put_in));
    }
    for (auto& c : eager.put_draining)
        retire_rx(std::move(c));
    eager.put_draining.clear();
    eager.put_finished.clear();
    eager.put_sources.clear();
}

}  // namespace coverse::rdma
