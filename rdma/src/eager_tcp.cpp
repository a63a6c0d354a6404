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
// credit frame once half the slots are owed. Control frames spend no credit, so returning
// credits can never wait for a credit. Order is the connection's: one TCP stream.
#include "layer_impl.hpp"

#include <cstdlib>
#include <cstring>

#include <coverse/alloc/message.hpp>
#include <coverse/runtime/trace.hpp>

namespace coverse::rdma {

tcp_rx::tcp_rx(std::uint32_t f, std::uint32_t n, std::uint32_t cap)
    : from(f),
      slots(n),
      capacity(cap),
      stride(static_cast<std::uint32_t>((eager_segment::slot_header + cap + 63) / 64 * 64)) {
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
    net::eager_channel_payload open;
    open.action = net::eager_action::open;
    open.kind = static_cast<std::uint32_t>(eager_kind::short_slots);
    open.channel = 1;
    open.slots = c->slots;
    open.capacity = c->capacity;
    const auto bytes = net::encode(open);
    if (stream_control(from, net::frame_type::eager_channel, false, 0, bytes) < 0) return;
    p.tcp_in = std::move(c);
    ++eager.opened;
}

bool layer::impl::tcp_eager_send(std::uint32_t dest, const std::byte* buf, std::uint32_t size,
                                 send_completion* done) {
    tcp_tx& c = *peers[dest].tcp_out;
    if (size > c.capacity) return false;
    if (c.credits == 0) {
        ++tcp_no_credit;
        ++eager.no_credit;
        return false;  // the stream path carries it, in order behind the eager frames
    }
    net::frame_header h;
    h.type = net::frame_type::eager_data;
    done->via_eager(false);
    const int rc = mesh->post(dest, h, std::span<const std::byte>(buf, size), &mesh_sent, done);
    if (rc < 0) {
        done->sent(rc);
        return true;
    }
    --c.credits;
    ++tcp_eager_sends;
    ++eager.sends;
    if (trace::enabled())
        trace::emit(trace::kind::credit_spent, dest, 1,
                    trace::credit_protocol(trace::protocol::eager_short));
    return true;
}

std::byte* layer::impl::tcp_eager_place(std::uint32_t pe, const net::frame_header& h) noexcept {
    tcp_rx* c = peers[pe].tcp_in.get();
    if (!c || c->free_slots.empty() || h.payload_length == 0 || h.payload_length > c->capacity)
        return nullptr;  // take() reports a sender past its credits
    c->placed_slot = c->free_slots.back();
    c->free_slots.pop_back();
    c->placed = true;
    ++c->held;
    return c->mem + std::size_t{c->placed_slot} * c->stride + eager_segment::slot_header;
}

void layer::impl::tcp_eager_take(std::uint32_t pe, net::frame& f) {
    tcp_rx* c = peers[pe].tcp_in.get();
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
                                     "eager slot (tcp)");
    ++tcp_eager_receives;
    ++eager.receives;
    deliver(pe, msg, size, false, 0);
}

// Freed slots owed to the sender: in an explicit credit frame once half the slots are owed
// (the writer piggybacks them on any earlier frame to that PE).
void layer::impl::tcp_return_credits(tcp_rx& c) noexcept {
    if (closed || c.pending_credits < std::max<std::uint32_t>(1, c.slots / 2)) return;
    net::credit_payload cp;
    cp.count = c.pending_credits;
    c.pending_credits = 0;
    const auto bytes = net::encode(cp);
    ++credit_frames;
    if (stream_control(c.from, net::frame_type::credit, false, 0, bytes) < 0)
        c.pending_credits += cp.count;  // the connection is gone: nobody to return them to
}

std::uint16_t layer::impl::tcp_credits_for(std::uint32_t pe) noexcept {
    if (pe >= peers.size()) return 0;
    tcp_rx* c = peers[pe].tcp_in.get();
    if (!c || c->pending_credits == 0) return 0;
    const auto n = static_cast<std::uint16_t>(std::min<std::uint32_t>(c->pending_credits, 0xFFFF));
    c->pending_credits -= n;
    return n;
}

void layer::impl::tcp_credits_back(std::uint32_t pe, std::uint32_t n) noexcept {
    tcp_tx* c = peers[pe].tcp_out.get();
    if (!c) return;
    c->credits += n;
    if (trace::enabled())
        trace::emit(trace::kind::credit_returned, pe, n,
                    trace::credit_protocol(trace::protocol::eager_short));
}

}  // namespace coverse::rdma
