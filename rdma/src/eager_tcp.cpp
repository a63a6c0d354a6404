// Eager short channels over a connection (a peer on another host, or any peer when the
// rings are off): the receiver's slots are ordinary memory of its own; an eager_data frame
// spends one of the sender's credits, and the connection's reader places its payload
// straight into a free slot, so the handler gets the slot without an allocation.
//
// Credits: the sender starts with the channel's slot count and spends one per eager_data
// frame; out of credits, it sends the message as a standard frame (never blocks, never
// overwrites a slot). A slot freed by its handler is a credit owed to the sender: it rides
// on the next frame of any kind to that PE, written into the header's credits field by the
// mesh's writer as it sends the frame (frame_hook::credits_for), or goes in an explicit
// credit frame once half the slots are owed, or when the credit timer fires. Control frames
// spend no credit, so returning credits can never wait for a credit. Order is the
// connection's: one TCP stream.
//
// Long channels (persistent handles) over a connection work the same way with the
// receiver's EAGER_LONG_BUFFERS buffers: an eager_data frame names its channel in the
// header's tag (0 is the short channel), and each freed buffer goes back at once in an
// eager_channel `credit` frame (long messages are few and large: a frame per buffer is
// cheap beside them, and a sender waiting for a buffer must not wait for a timer).
#include "layer_impl.hpp"

#include <cstdlib>
#include <cstring>

#include <coverse/alloc/message.hpp>
#include <coverse/runtime/trace.hpp>

namespace coverse::rdma {

tcp_rx::tcp_rx(std::uint32_t f, std::uint32_t n, std::uint32_t cap)
    : owed_credits{f, n},
      capacity(cap),
      stride(static_cast<std::uint32_t>((alloc::message_header_size + cap + 63) / 64 * 64)) {
    mem = static_cast<std::byte*>(std::aligned_alloc(64, std::size_t{stride} * slots));
    if (mem)
        for (std::uint32_t i = slots; i-- > 0;)
            free_slots.push_back(i);
}

tcp_rx::~tcp_rx() {
    std::free(mem);
}

void tcp_rx::take_back(void* storage, std::size_t) noexcept {
    const auto off = static_cast<std::size_t>(static_cast<std::byte*>(storage) - mem);
    free_slots.push_back(static_cast<std::uint32_t>(off / stride));
    --held;
    ++pending_credits;
    if (trace::enabled())
        trace::emit(trace::kind::credit_returned, from, 1,
                    trace::credit_protocol(trace::protocol::eager_short));
    if (ctx) credit_due(ctx, *this);
}

// The receiver: a busy sender over a connection gets slots.
void layer::impl::tcp_eager_open(std::uint32_t from) {
    peer& p = peers[from];
    auto c = std::make_unique<tcp_rx>(from, cfg.eager_slots, cfg.eager_short_bytes);
    if (!c->mem) {
        up.on_notice("coverse: PE " + std::to_string(cfg.rank) + ": no memory for " +
                     std::to_string(cfg.eager_slots) + " eager slots for PE " +
                     std::to_string(from) + "; its messages go by the stream path\n");
        p.eager_refused = true;
        return;
    }
    c->ctx = this;
    c->credit_due = [](void* m, tcp_rx& r) noexcept {
        static_cast<impl*>(m)->tcp_return_credits(r);
    };
    if (tcp_announce(from, eager_kind::short_slots, 1, 0, *c) < 0) return;
    p.tcp_in = std::move(c);
    ++eager.opened;
}

bool layer::impl::tcp_eager_send(std::uint32_t dest, const std::byte* buf, std::uint32_t size,
                                 send_completion* done) {
    tcp_tx* lc = eager.current.empty() ? nullptr : tcp_persistent_for(dest, size);
    tcp_tx* sc = peers[dest].tcp_out.get();
    if (!lc && (!sc || size > sc->capacity)) return false;
    tcp_tx& c = lc ? *lc : *sc;
    if (c.credits == 0) {
        tcp_credit_missing();
        return false;  // the stream path carries it, in order behind the eager frames
    }
    net::frame_header h;
    h.type = net::frame_type::eager_data;
    h.tag = c.channel;
    done->via_eager(lc != nullptr);
    const int rc = mesh->post(dest, h, std::span<const std::byte>(buf, size), &mesh_sent, done);
    if (rc < 0) {
        done->sent(rc);
        return true;
    }
    ++peers[dest].streamed;  // a message on the connection (stream_counts)
    tcp_credit_spent(dest, c, lc != nullptr);
    return true;
}

// An eager_data frame to `dest` took one of channel `c`'s slots (tcp_eager_send, or
// try_send_now's copy).
void layer::impl::tcp_credit_spent(std::uint32_t dest, tcp_tx& c, bool long_channel) noexcept {
    --c.credits;
    ++tcp_eager_sends;
    ++eager.sends;
    if (trace::enabled())
        trace::emit(trace::kind::credit_spent, dest, 1,
                    trace::credit_protocol(long_channel ? trace::protocol::eager_long
                                                        : trace::protocol::eager_short));
}

// A message its channel would hold found no credit: the stream path carries it.
void layer::impl::tcp_credit_missing() noexcept {
    ++tcp_no_credit;
    ++eager.no_credit;
}

// A current persistent handle's long channel to `dest` that holds `size` (null: none; its
// lack of credits is the caller's to see).
tcp_tx* layer::impl::tcp_persistent_for(std::uint32_t dest, std::uint32_t size) noexcept {
    for (std::uint32_t h : eager.current) {
        auto it = eager.persistent.find(h);
        if (it != eager.persistent.end() && it->second.dest == dest && it->second.tcp &&
            size <= it->second.tcp->capacity)
            return it->second.tcp.get();
    }
    return nullptr;
}

tcp_rx* layer::impl::tcp_channel_of(std::uint32_t pe, std::uint32_t id) noexcept {
    if (id == 0) return peers[pe].tcp_in.get();
    for (auto& c : peers[pe].tcp_long)
        if (c->id == id) return c.get();
    return nullptr;
}

std::byte* layer::impl::tcp_eager_place(std::uint32_t pe, const net::frame_header& h) noexcept {
    tcp_rx* c = tcp_channel_of(pe, h.tag);
    if (!c || c->free_slots.empty() || h.payload_length == 0 || h.payload_length > c->capacity)
        return nullptr;  // take() reports a sender past its credits
    c->placed_slot = c->free_slots.back();
    c->free_slots.pop_back();
    c->placed = true;
    ++c->held;
    return c->mem + std::size_t{c->placed_slot} * c->stride + alloc::message_header_size;
}

void layer::impl::tcp_eager_take(std::uint32_t pe, net::frame& f) {
    tcp_rx* c = tcp_channel_of(pe, f.header.tag);
    const std::uint32_t size = f.header.payload_length;
    const bool placed = f.payload.get_deleter().release == &net::keep_placed_payload;
    if (!placed || !c || !c->placed) {
        // No slot for it: the sender spent a credit it did not have (or we never opened a
        // channel). The message is still whole: deliver it like a standard frame.
        if (c) ++c->beyond_credits;
        if (c && c->beyond_credits == 1)
            up.on_notice("coverse: PE " + std::to_string(cfg.rank) + ": PE " + std::to_string(pe) +
                         " sent an eager message with no credit left (a bug in that PE); it is "
                         "delivered by copy\n");
        void* msg = f.payload.release();
        if (!msg) msg = alloc::msg_alloc(1);
        if (!msg) up.on_fatal("out of memory receiving a message");
        deliver(pe, msg, size, false, 0);
        return;
    }
    c->placed = false;
    (void)f.payload.release();  // our slot, not the reader's
    void* msg = alloc::place_message(c->mem + std::size_t{c->placed_slot} * c->stride, size, *c,
                                     c->id ? "eager long buffer (tcp)" : "eager slot (tcp)");
    ++tcp_eager_receives;
    ++eager.receives;
    deliver(pe, msg, size, false, 0);
}

// Freed slots owed to the sender (written by frames or by put, eager_put.cpp): in an explicit
// credit frame once half the slots are owed (the writer piggybacks them on any earlier frame
// to that PE), else when the credit timer fires — a sender that sent fewer than half the
// slots and then stopped gets them back too.
void layer::impl::tcp_return_credits(owed_credits& c) noexcept {
    if (closed || c.pending_credits == 0) return;
    if (c.pending_credits >= std::max<std::uint32_t>(1, c.slots / 2)) {
        tcp_send_credits(c);
        return;
    }
    if (cfg.eager_credit_delay_ns == 0 || credit_timer.armed()) return;
    credit_timer.fire = &on_credit_timer;
    credit_timer.context = this;
    credit_timer.deadline = clock::now() + std::chrono::nanoseconds(cfg.eager_credit_delay_ns);
    sched.add_timer(credit_timer);
}

void layer::impl::tcp_send_credits(owed_credits& c) noexcept {
    net::credit_payload cp;
    cp.count = c.pending_credits;
    c.pending_credits = 0;
    const auto bytes = net::encode(cp);
    ++credit_frames;
    if (stream_control(c.from, net::frame_type::credit, false, 0, bytes) < 0)
        c.pending_credits += cp.count;  // the connection is gone: nobody to return them to
}

// Credits still owed when the timer fires went back on no frame since they were freed.
void layer::impl::on_credit_timer(timer_node* t) noexcept {
    auto& m = *static_cast<impl*>(t->context);
    if (m.closed) return;
    for (auto& p : m.peers) {
        if (p.tcp_in && p.tcp_in->pending_credits > 0) m.tcp_send_credits(*p.tcp_in);
        if (p.put_in && p.put_in->pending_credits > 0) m.tcp_send_credits(*p.put_in);
    }
}

std::uint16_t layer::impl::tcp_credits_for(std::uint32_t pe) noexcept {
    if (pe >= peers.size()) return 0;
    owed_credits* c = peers[pe].tcp_in ? static_cast<owed_credits*>(peers[pe].tcp_in.get())
                                       : peers[pe].put_in.get();
    if (!c || c->pending_credits == 0) return 0;
    const auto n = static_cast<std::uint16_t>(std::min<std::uint32_t>(c->pending_credits, 0xFFFF));
    c->pending_credits -= n;
    return n;
}

void layer::impl::tcp_credits_back(std::uint32_t pe, std::uint32_t n) noexcept {
    peer& p = peers[pe];
    std::uint32_t* credits = p.tcp_out   ? &p.tcp_out->credits
                             : p.put_out ? &p.put_out->credits
                                         : nullptr;
    if (!credits) return;
    *credits += n;
    credits_back += n;
    if (trace::enabled())
        trace::emit(trace::kind::credit_returned, pe, n,
                    trace::credit_protocol(trace::protocol::eager_short));
}

// Tells the sender of a connection channel's slots (open): 0, or -errno (no path to it).
int layer::impl::tcp_announce(std::uint32_t to, eager_kind kind, std::uint32_t channel,
                              std::uint32_t handle, const tcp_rx& c) {
    net::eager_channel_payload open;
    open.action = net::eager_action::open;
    open.kind = static_cast<std::uint32_t>(kind);
    open.channel = channel;
    open.handle = handle;
    open.slots = c.slots;
    open.capacity = c.capacity;
    const auto bytes = net::encode(open);
    return stream_control(to, net::frame_type::eager_channel, false, 0, bytes);
}

// ---- long channels over a connection (persistent handles) -------------------------------

// The receiver: a persistent request from a peer with no rings between us gets
// EAGER_LONG_BUFFERS buffers of our own memory. False: no buffers (the caller refuses).
bool layer::impl::tcp_long_open(std::uint32_t from, const net::persistent_request_payload& r) {
    if (!mesh || cfg.eager_long_buffers == 0 || r.max_size == 0) return false;
    const auto cap =
        static_cast<std::uint32_t>(std::min<std::uint64_t>(r.max_size, cfg.eager_long_bytes));
    auto c = std::make_unique<tcp_rx>(from, cfg.eager_long_buffers, cap);
    if (!c->mem) return false;
    c->id = eager.next_id++;
    c->handle = r.handle;
    c->ctx = this;
    c->credit_due = [](void* m, tcp_rx& rx) noexcept {
        static_cast<impl*>(m)->tcp_long_return(rx);
    };
    if (tcp_announce(from, eager_kind::long_buffers, c->id, r.handle, *c) < 0) return false;
    peers[from].tcp_long.push_back(std::move(c));
    ++eager.opened;
    return true;
}

void layer::impl::tcp_long_return(tcp_rx& c) noexcept {
    if (closed || c.pending_credits == 0) return;
    net::eager_channel_payload cr;
    cr.action = net::eager_action::credit;
    cr.kind = static_cast<std::uint32_t>(eager_kind::long_buffers);
    cr.channel = c.id;
    cr.handle = c.handle;
    cr.slots = c.pending_credits;
    c.pending_credits = 0;
    const auto bytes = net::encode(cr);
    ++credit_frames;
    if (stream_control(c.from, net::frame_type::eager_channel, false, 0, bytes) < 0)
        c.pending_credits += cr.slots;  // the connection is gone: nobody to return them to
}

// The sender: the receiver opened long buffers for our persistent handle.
void layer::impl::tcp_long_opened(std::uint32_t from, const net::eager_channel_payload& f) {
    auto it = eager.persistent.find(f.handle);
    if (it == eager.persistent.end() || it->second.dest != from) {
        // Destroyed meanwhile: tell the receiver the buffers are not needed.
        net::eager_channel_payload d = f;
        d.action = net::eager_action::destroy;
        const auto bytes = net::encode(d);
        (void)stream_control(from, net::frame_type::eager_channel, false, 0, bytes);
        return;
    }
    it->second.tcp = std::make_unique<tcp_tx>(tcp_tx{f.slots, f.capacity, f.channel});
    it->second.refused = false;
}

void layer::impl::tcp_long_credit(std::uint32_t from, const net::eager_channel_payload& f) {
    for (auto& [h, po] : eager.persistent)
        if (po.dest == from && po.tcp && po.tcp->channel == f.channel) {
            po.tcp->credits += f.slots;
            credits_back += f.slots;
            if (trace::enabled())
                trace::emit(trace::kind::credit_returned, from, f.slots,
                            trace::credit_protocol(trace::protocol::eager_long));
            return;
        }
}

// The receiver: the sender destroyed the handle behind long channel `channel` (true: it was
// one of ours over the connection). Buffers a handler still holds outlive the channel.
bool layer::impl::tcp_long_destroyed(std::uint32_t from, std::uint32_t channel) {
    auto& v = peers[from].tcp_long;
    for (auto it = v.begin(); it != v.end(); ++it) {
        if ((*it)->id != channel) continue;
        (*it)->ctx = nullptr;  // no credits back for a destroyed handle
        if ((*it)->held) retire_tcp_rx(std::move(*it));
        v.erase(it);
        return true;
    }
    return false;
}

}  // namespace coverse::rdma
