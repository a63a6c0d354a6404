// Rendezvous (messages above MEDIUM_MESSAGE_BOUNDARY): the sender publishes its buffer, the
// receiver fetches it into the message its handler will get, and get-done frees the sender.
//
// Sender stages (rndv_out, a state machine: it only waits for frames):
//   register (the provider the receiver reads us with; the registration cache) -> publish
//   {address, key, size, id} on the ordered stream path -> [serve the split put: write the
//   tail the receiver asked for] -> get-done -> release (finish_send: the registration,
//   then the completion, exactly once; also when the peer is lost: -EPIPE).
// Receiver stages (receive_task, a coroutine):
//   wait for a turn (RNDV_FETCHES per peer at once, in publish order) -> allocate the
//   message (bounded by MAX_MESSAGE at the publish) -> [same host, both ways
//   cma, from RNDV_SPLIT bytes: ask the sender to put the tail, so both PEs' cores copy at
//   once] -> get the head in RNDV_CHUNK pieces -> [wait for the tail] -> get-done ->
//   deliver, in the peer's order (messages that arrived behind the publish waited).
// A failed get (the peer died, refused memory) is reported with the PE, the size and the
// cause (on_lost_message; the machine core stops the job); nothing is delivered half-filled.
#include <unistd.h>

#include <cstring>

#include <coverse/alloc/message.hpp>
#include <coverse/runtime/event.hpp>
#include <coverse/runtime/trace.hpp>
#include <coverse/runtime/wait_reason.hpp>

#include "layer_impl.hpp"

namespace coverse::rdma {

struct rndv_out {
    std::uint32_t id = 0;
    std::uint32_t dest = 0;
    const std::byte* buf = nullptr;
    std::uint32_t size = 0;
    send_completion* done = nullptr;
    registered reg;
};

struct rndv_in {
    std::uint32_t from = 0;
    net::publish_payload offer;
    held_message* slot = nullptr;
    bool split = false;
    event tail_done;
    op_result tail;
};

namespace {

std::uint64_t fetch_key(std::uint32_t from, std::uint32_t id) noexcept {
    return (std::uint64_t{from} << 32) | id;
}

}  // namespace

void layer::impl::rendezvous_send(std::uint32_t dest, const std::byte* buf, std::uint32_t size,
                                  bool broadcast, std::uint32_t root, send_completion* done) {
    peer& p = peers[dest];
    provider* prov = provider_of(p.publish_with);
    if (!prov) prov = tcp.get();
    auto* o = new rndv_out;
    o->dest = dest;
    o->buf = buf;
    o->size = size;
    o->done = done;
    try {
        o->reg = prov->expose(std::span<const std::byte>(buf, size));
    } catch (const std::exception& e) {
        delete o;
        up.on_fatal("PE " + std::to_string(cfg.rank) + ": a " + std::to_string(size) +
                    "-byte message to PE " + std::to_string(dest) +
                    " cannot be published: " + e.what());
    }
    while (next_id == 0 || outgoing.count(next_id))
        ++next_id;
    o->id = next_id++;
    outgoing.emplace(o->id, o);
    const net::publish_payload offer{
        static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(buf)), o->reg.get().key, size,
        o->id};
    // A path that is already down (the peer's loss was reported before) fails it at once.
    if (const int rc =
            stream_control(dest, net::frame_type::publish, broadcast, root, net::encode(offer)))
        finish_send(o, rc);
}

void layer::impl::finish_send(rndv_out* o, int result) {
    outgoing.erase(o->id);
    o->reg.reset();
    send_completion* done = o->done;
    delete o;
    done->sent(result);
}

void layer::impl::on_get_done(std::uint32_t from, const net::get_done_payload& d) {
    const auto it = outgoing.find(d.handle);
    if (it == outgoing.end() || it->second->dest != from) {
        up.on_notice("coverse: PE " + std::to_string(cfg.rank) + " ignored a get-done from PE " +
                     std::to_string(from) + " for rendezvous " + std::to_string(d.handle) +
                     ", which it never published to that PE\n");
        return;
    }
    finish_send(it->second, d.status == net::get_status::ok ? 0 : -EIO);
}

// The receiver asks us to write the tail of what we published, while it reads the head.
void layer::impl::on_split_request(std::uint32_t from, const net::rma_request_payload& r) {
    const auto it = outgoing.find(r.id);
    net::rma_complete_payload answer{r.id, net::rma_op::put, net::rma_status::refused};
    if (it != outgoing.end() && it->second->dest == from && r.size <= it->second->size && cma) {
        rndv_out& o = *it->second;
        sync_completion c;
        cma->post_put(from, std::span<const std::byte>(o.buf + (o.size - r.size), r.size),
                      remote_memory{r.address, r.key, r.size}, c);
        if (c.done && c.result.ok()) {
            answer.status = net::rma_status::ok;
            ++self._stats.split_copies;
            self._stats.bytes_by_put += r.size;
        }
    }
    stream_control(from, net::frame_type::rma_complete, false, 0, net::encode(answer));
}

void layer::impl::on_split_done(std::uint32_t from, const net::rma_complete_payload& c) {
    const auto it = fetching.find(fetch_key(from, c.id));
    if (it == fetching.end()) return;
    rndv_in& in = *it->second;
    if (c.status != net::rma_status::ok)
        in.tail = {op_status::refused,
                   "PE " + std::to_string(from) + " could not write the second part"};
    in.tail_done.set();
}

void layer::impl::rendezvous_receive(std::uint32_t from, const net::publish_payload& offer,
                                     bool broadcast, std::uint32_t root) {
    peer& p = peers[from];
    // Everything that arrives from this peer after the publish waits behind it.
    p.held.push_back(
        held_message{nullptr, static_cast<std::uint32_t>(offer.size), broadcast, root, false});
    auto* in = new rndv_in;
    in->from = from;
    in->offer = offer;
    in->slot = &p.held.back();
    ++incoming;
    ++self._stats.rendezvous_receives;
    tasks.spawn(receive_task(this, in), "rendezvous receive", sched);
}

task<void> layer::impl::receive_task(impl* self, rndv_in* in) {
    const std::uint32_t from = in->from;
    const net::publish_payload offer = in->offer;
    const std::uint64_t size = offer.size;
    // Wait for our turn among this peer's fetches (FIFO: in publish order).
    // (Only a closing layer cancels this wait, and it closes once nothing is in flight.)
    semaphore& turn = *self->peers[from].fetch_slots;
    co_await waiting_for({wait_kind::other, from, offer.handle,
                          "rndv/get: its turn behind this peer's earlier fetches"},
                         turn.acquire());
    void* msg = alloc::msg_alloc(static_cast<std::size_t>(size));
    if (!msg)
        self->up.on_fatal("PE " + std::to_string(self->cfg.rank) + ": out of memory for a " +
                          std::to_string(size) + "-byte message from PE " + std::to_string(from) +
                          " (MAX_MESSAGE bounds what a peer may send)");
    auto* dst = static_cast<std::byte*>(msg);
    peer& p = self->peers[from];
    provider* prov = self->provider_of(p.get_with);
    if (!prov) prov = self->tcp.get();
    std::uint64_t head = size;
    in->split = p.get_with == provider_kind::cma && p.publish_with == provider_kind::cma &&
                p.out_ring && self->cfg.rndv_split > 0 && size >= self->cfg.rndv_split;
    if (in->split) {
        head = (size / 2) & ~std::uint64_t{4095};
        self->fetching.emplace(fetch_key(from, offer.handle), in);
        const net::rma_request_payload ask{
            static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(dst + head)),
            static_cast<std::uint64_t>(::getpid()), size - head, offer.handle};
        if (self->stream_control(from, net::frame_type::rma_put_request, false, 0,
                                 net::encode(ask)) < 0) {
            in->tail = {op_status::peer_lost,
                        "the path to PE " + std::to_string(from) + " is down"};
            in->tail_done.set();
        }
    }
    op_result r;
    for (std::uint64_t off = 0; off < head && r.ok();) {
        const std::uint64_t n = std::min<std::uint64_t>(self->cfg.rndv_chunk, head - off);
        r = co_await waiting_for(
            {wait_kind::other, from, offer.handle, "rndv/get: the data of a get"},
            get(*prov, from, std::span<std::byte>(dst + off, n),
                remote_memory{offer.address + off, offer.key, n}));
        off += n;
        if (off < head && r.ok()) co_await yield();  // let the loop serve others meanwhile
    }
    self->self._stats.bytes_by_get += head;
    if (in->split) {
        try {
            co_await waiting_for({wait_kind::other, from, offer.handle,
                                  "rndv/get+put: the sender's half (RNDV_SPLIT)"},
                                 in->tail_done.wait());
        } catch (const cancelled_error&) {
            in->tail = {op_status::failed, "the layer closed while waiting"};
        }
        self->fetching.erase(fetch_key(from, offer.handle));
        if (r.ok() && !in->tail.ok()) r = in->tail;
    }
    const net::get_done_payload done{offer.handle,
                                     r.ok() ? net::get_status::ok : net::get_status::failed};
    if (r.status != op_status::peer_lost)
        self->stream_control(from, net::frame_type::get_done, false, 0, net::encode(done));
    turn.release();  // the next fetch from this peer may start
    if (!r.ok()) {   // one place releases the message of a failed receive
        alloc::msg_free(msg);
        msg = nullptr;
    }
    in->slot->msg = msg;  // null: skipped by release_held, the order of the rest is kept
    in->slot->ready = true;
    --self->incoming;
    delete in;
    if (!r.ok())
        self->up.on_lost_message(from, size,
                                 "PE " + std::to_string(self->cfg.rank) + " could not fetch a " +
                                     std::to_string(size) + "-byte message from PE " +
                                     std::to_string(from) + " (" +
                                     std::string(to_string(prov->kind())) + "): " + r.detail);
    self->release_held(from);
}

void layer::impl::fail_rendezvous_with(std::uint32_t pe) {
    std::vector<rndv_out*> lost;
    for (auto& [id, o] : outgoing)
        if (o->dest == pe) lost.push_back(o);
    for (rndv_out* o : lost)
        finish_send(o, -EPIPE);
    for (auto& [key, in] : fetching)
        if (in->from == pe && !in->tail_done.is_set()) {
            in->tail = {op_status::peer_lost, "PE " + std::to_string(pe) + " is gone"};
            in->tail_done.set();
        }
}

}  // namespace coverse::rdma
