// The same-host stream path: every frame between two PEs on one host goes through a
// shared-memory ring (shm_ring.hpp) instead of the connection — messages, and the
// rendezvous's control frames (publish, get_done, the split put's request and answer).
//
// Stages: create (each PE makes its doorbell at start-up) -> per peer, with the pair's
// set-up (layer.hpp): the PE makes its ring for what that peer sends it before offering,
// maps the peer's ring and doorbell at the peer's offer, and unlinks its own ring's name at
// the peer's verdict (the peer mapped it before answering), so no ring name outlives its
// set-up; the doorbell's name goes once every peer is set up (CONNECT=eager) or at close
// (lazy: a peer may still come; coverse-run removes what a dead PE left) -> send (copy into
// the ring now if it fits, else queue and pump as the consumer frees room; a message larger
// than a chunk goes in several) -> poll (the scheduler's poller copies records out; whole
// messages go up in order) -> sleep (the poller announces it in each ring; a producer that
// sees it rings the doorbell, a FIFO the sleeping scheduler polls through io_uring) -> close.
#include "layer_impl.hpp"

#include <poll.h>
#include <sys/mman.h>

#include <cstdio>
#include <cstring>
#include <string_view>

#include <coverse/alloc/message.hpp>
#include <coverse/net/bootstrap.hpp>
#include <coverse/runtime/io.hpp>

namespace coverse::rdma {

std::string job_shm_prefix(std::uint64_t key) {
    std::string name(1, '/');  // a POSIX shared-memory name
    return name.append(net::shm_name_prefix(key));
}

std::string pe_shm_prefix(std::uint64_t key, std::uint32_t pe) {
    return job_shm_prefix(key) + std::to_string(pe) + "-";
}

namespace {

// The ring that carries frames from `from` to `to`; created by `to`.
std::string ring_name(std::uint64_t key, std::uint32_t to, std::uint32_t from) {
    return pe_shm_prefix(key, to) + "from-" + std::to_string(from);
}

std::string bell_path(std::uint64_t key, std::uint32_t pe) {
    return "/dev/shm" + job_shm_prefix(key) + std::to_string(pe) + ".bell";
}

bool is_message(std::uint8_t type) noexcept {
    return type == 0 || type == static_cast<std::uint8_t>(net::frame_type::standard);
}

static_assert(shm_flags::message ==
              shm_flags::with_type(shm_flags::first,
                                   static_cast<std::uint8_t>(net::frame_type::standard)));

}  // namespace

void layer::impl::shm_create() {
    // Every PE decides the same way (same settings, same kernel).
    shm_wanted = cfg.num_pes > 1 && cfg.shm && sched.io() != nullptr;
    if (!shm_wanted) return;
    try {
        bell.emplace(shm_doorbell::create(bell_path(cfg.job_key, cfg.rank)));
        if (bell->replaced_stale()) remove_stale_names();
    } catch (const std::exception& e) {
        // No shared memory here (no /dev/shm, a small container /dev/shm): this PE's peers
        // find no ring for it and send over TCP; it sends over TCP too.
        up.on_notice("coverse: PE " + std::to_string(cfg.rank) + ": " + e.what() +
                     "; messages to and from this PE use TCP\n");
        shm_failed = true;
    }
}

void layer::impl::remove_stale_names() {
    // We hold this PE's doorbell of this job key, so no running process is this PE of this
    // job: every ring and eager channel named for it was left by a crashed one.
    net::remove_shm_entries(std::string_view(pe_shm_prefix(cfg.job_key, cfg.rank)).substr(1));
}

void layer::impl::shm_start() {
    if (!shm_wanted || shm_failed) return;
    poller_ = std::make_unique<ring_poller>(*this);
    sched.add_poller(*poller_);
    tasks.spawn(bell_task(this), "shm doorbell", sched);
}

void layer::impl::shm_ring_for(std::uint32_t p) {
    if (!shm_wanted || shm_failed || !peers[p].same_host || peers[p].in_ring) return;
    try {
        peers[p].in_ring.emplace(
            shm_ring::create(ring_name(cfg.job_key, cfg.rank, p), cfg.shm_ring_bytes));
    } catch (const std::exception& e) {
        // /dev/shm is full or gone: that peer finds no ring and sends over TCP.
        if (!ring_failure_said)
            up.on_notice("coverse: PE " + std::to_string(cfg.rank) + ": " + e.what() +
                         "; messages from PE " + std::to_string(p) +
                         " (and any other peer this happens with) use TCP\n");
        ring_failure_said = true;
    }
}

void layer::impl::shm_map_peer(std::uint32_t p) {
    peer& q = peers[p];
    if (!shm_wanted || shm_failed || !q.same_host || q.staged_ring || q.out_ring) return;
    try {
        auto ring = shm_ring::open(ring_name(cfg.job_key, p, cfg.rank));
        auto b = shm_doorbell::open(bell_path(cfg.job_key, p));
        q.staged_ring.emplace(std::move(ring));
        q.staged_bell.emplace(std::move(b));
    } catch (const std::exception&) {
        // That PE has no shared memory (it said so): this direction uses the connection.
    }
}

void layer::impl::shm_update_rings_only() {
    // Every peer set up so far sends and receives through rings, and none is being set up:
    // the connections carry only rare control frames, so the spinning loop need not enter
    // the kernel on every turn.
    bool rings_only = ready_peers > 0 && poller_ != nullptr;
    for (std::uint32_t p = 0; p < peers.size() && rings_only; ++p) {
        const peer& q = peers[p];
        if (p == cfg.rank || (!q.offer_sent && !q.ready)) continue;
        rings_only = q.ready && q.out_ring && q.in_ring;
    }
    sched.set_shared_memory_only(rings_only);
}

task<void> layer::impl::bell_task(impl* self) {
    // Keeps a poll on the doorbell in io_uring, so a scheduler that sleeps wakes when a
    // producer rings it.
    for (;;) {
        try {
            const int r = co_await poll_fd(self->bell->fd(), POLLIN);
            if (r < 0) co_return;
        } catch (const cancelled_error&) {
            co_return;
        }
        self->bell->drain();
    }
}

bool layer::impl::ring_write_now(std::uint32_t dest, net::frame_type type, bool broadcast,
                                 std::uint32_t root, std::span<const std::byte> bytes) noexcept {
    peer& p = peers[dest];
    const auto size = static_cast<std::uint32_t>(bytes.size());
    const std::uint16_t flags =
        shm_flags::with_type(broadcast ? shm_flags::broadcast : 0, static_cast<std::uint8_t>(type));
    if (!p.out_queue.empty() || size > p.out_ring->max_chunk() || !may_switch_to(dest, nullptr) ||
        !p.out_ring->try_write(bytes, size, flags | shm_flags::first, root))
        return false;
    // The next message to this peer in the same turn of the loop (by try_send_now) takes
    // the burst path, which asks for lines ahead, with no short channel open too (that
    // path was reached only through eager_send's ask: with EAGER_PROTOCOL=off the 8 B rate
    // was 9-14 M msg/s, now 18-20 M). So does a larger message behind a small one: it stays
    // on the ring (the consumer is behind), as after any ring write in the same turn.
    p.caught_up_asked_at = ring_polls;
    if (p.out_ring->take_sleeper()) p.out_bell->ring();
    return true;
}

bool layer::impl::ring_burst_write(std::uint32_t dest, const std::byte* buf,
                                   std::uint32_t size) noexcept {
    peer& p = peers[dest];
    // What eager_send and ring_write_now would find, in the order that fails soonest in a
    // ping-pong: may_switch_to keeps a burst on the ring while its consumer is behind, and
    // within one turn of the loop it asks only the position last read (which this one
    // does not move). Asking the channel first cost a burst ~130 instructions per message.
    if (p.caught_up_asked_at != ring_polls || p.gate || p.gate_segment || !p.out_queue.empty() ||
        !eager.current.empty() || size > cfg.medium_boundary || size > p.out_ring->max_chunk() ||
        p.out_ring->consumer_caught_up_if(false))
        return false;
    if (!p.out_ring->try_write(std::span<const std::byte>(buf, size), size, shm_flags::message, 0))
        return false;
    p.out_ring->write_ahead();
    // Counted as eager_send would for a channel that could take it (it is not asked for a
    // slot here: a burst stays on the ring whatever the channel holds).
    if (p.eager_out && short_channel_size(size) && p.eager_out->open_for(size)) ++eager.order_waits;
    if (p.out_ring->take_sleeper()) p.out_bell->ring();
    return true;
}

void layer::impl::ring_send(std::uint32_t dest, net::frame_type type, bool broadcast,
                            std::uint32_t root, std::span<const std::byte> bytes,
                            send_completion* done) {
    if (ring_write_now(dest, type, broadcast, root, bytes)) {
        done->sent(0);  // in the ring: the buffer may be reused
        return;
    }
    peer& p = peers[dest];
    const auto size = static_cast<std::uint32_t>(bytes.size());
    const std::uint16_t flags =
        shm_flags::with_type(broadcast ? shm_flags::broadcast : 0, static_cast<std::uint8_t>(type));
    p.out_queue.push_back(ring_out{bytes.data(), size, 0, flags, root, done});
    ++ring_queued;
    ring_pump(dest);
}

namespace {
// One chunk of a queued message into its ring, if there is room.
bool pump_one(shm_ring& ring, ring_out& m) {
    const auto chunk =
        static_cast<std::uint32_t>(std::min<std::size_t>(m.size - m.offset, ring.max_chunk()));
    const auto flags = static_cast<std::uint16_t>(m.flags | (m.offset == 0 ? shm_flags::first : 0));
    if (!ring.try_write(std::span<const std::byte>(m.buf + m.offset, chunk), m.size, flags, m.tag))
        return false;
    m.offset += chunk;
    return true;
}
}  // namespace

bool layer::impl::ring_pump(std::uint32_t dest) {
    peer& p = peers[dest];
    bool wrote = false;
    // Behind messages on an eager channel: the first record is flagged (the receiver takes
    // them first), or, behind a channel that is closing, it waits for them (eager.cpp).
    if (!p.out_queue.empty() && !may_switch_to(dest, nullptr)) return false;
    while (!p.out_queue.empty()) {
        ring_out& m = p.out_queue.front();
        if (!pump_one(*p.out_ring, m)) break;
        wrote = true;
        if (m.offset < m.size && m.size > 0) continue;
        send_completion* done = m.done;
        p.out_queue.pop_front();
        --ring_queued;
        done->sent(0);
    }
    if (wrote && p.out_ring->take_sleeper()) p.out_bell->ring();
    return wrote;
}

bool layer::impl::ring_poll() {
    // Asked on every turn of a spinning loop: an idle pass is one inline load per ring.
    ++ring_polls;
    bool did = false;
    if (!eager.polled.empty() && !eager_polls_held) {
        // Taken before the sweep: after the loop was away (a long handler, a sleep), what
        // came meanwhile marks its channel used, and the sweep does not retire it.
        did |= eager_poll();
        eager_retire_idle();
    }
    if (ring_queued) [[unlikely]]
        for (std::uint32_t p = 0; p < peers.size(); ++p)
            if (!peers[p].out_queue.empty()) did |= ring_pump(p);
    for (const std::uint32_t p : ring_sources)
        if (peers[p].in_ring->readable()) did |= ring_drain(p);
    return did;
}

void layer::impl::refresh_ring_sources() {
    ring_sources.clear();
    for (std::uint32_t p = 0; p < peers.size(); ++p)
        if (peers[p].in_ring) ring_sources.push_back(p);
}

void layer::impl::note_ring_message(std::uint32_t p, std::uint32_t size) {
    peer& in = peers[p];
    // Messages a short channel would not carry earn none.
    if (!cfg.eager || in.eager_in || !short_channel_size(size)) return;
    // Counted inline; the busy-sender window is judged at its first and its THRESHOLD-th
    // message.
    if (in.window_count != 0 && in.window_count + 1 < cfg.eager_threshold)
        ++in.window_count;
    else
        eager_note_stream_message(p);
}

bool layer::impl::ring_drain(std::uint32_t p) {
    peer& in = peers[p];
    if (in.taking_channels) [[unlikely]]
        return false;
    bool did = false;
    // A bounded batch per ring, so one busy sender cannot hold the loop.
    for (int n = 0; n < 256; ++n) {
        auto rec = in.in_ring->peek();
        if (!rec) {
            if (in.in_ring->corrupt())
                up.on_fatal("PE " + std::to_string(cfg.rank) + ": the shared-memory ring from PE " +
                            std::to_string(p) + " holds an impossible record (corrupt memory?)");
            break;
        }
        did = true;
        if (rec->flags & shm_flags::after_channel) [[unlikely]] {
            // Behind messages in a channel from the same sender (eager.cpp): those first,
            // and before the record is consumed (else the sender, seeing the ring caught
            // up, could write a channel again, and that message would come first).
            in.taking_channels = true;
            eager_take_from(p);
            in.taking_channels = false;
            eager_polls_held = false;
            rec->flags = static_cast<std::uint16_t>(rec->flags & ~shm_flags::after_channel);
        }
        // The common record: a whole point-to-point message in one chunk.
        if (rec->flags == shm_flags::message && rec->total == rec->chunk.size() && !in.assembling)
            [[likely]] {
            void* msg = alloc::msg_alloc(std::max<std::uint32_t>(rec->total, 1));
            if (!msg)
                up.on_fatal("out of memory receiving " + std::to_string(rec->total) + " bytes");
            std::memcpy(msg, rec->chunk.data(), rec->chunk.size());
            const std::uint32_t total = rec->total, tag = rec->tag;
            in.in_ring->consume();
            deliver(p, msg, total, false, tag);
            note_ring_message(p, total);
            continue;
        }
        const std::uint8_t type = shm_flags::type_of(rec->flags);
        const bool broadcast = (rec->flags & shm_flags::broadcast) != 0;
        if (!is_message(type)) {
            // A control frame of the rendezvous: one record, decoded in place.
            if (!(rec->flags & shm_flags::first) || rec->total != rec->chunk.size() ||
                !on_frame(p, static_cast<net::frame_type>(type),
                          broadcast ? net::frame_flags::broadcast : 0, rec->tag, rec->chunk))
                up.on_fatal("PE " + std::to_string(cfg.rank) + ": the shared-memory ring from PE " +
                            std::to_string(p) + " holds a record of unknown type " +
                            std::to_string(type));
            in.in_ring->consume();
            continue;
        }
        if (rec->flags & shm_flags::first) {
            in.assembling = alloc::msg_alloc(std::max<std::uint32_t>(rec->total, 1));
            if (!in.assembling)
                up.on_fatal("out of memory receiving " + std::to_string(rec->total) + " bytes");
            in.total = rec->total;
            in.filled = 0;
            in.flags = rec->flags;
            in.tag = rec->tag;
        }
        if (!in.assembling || in.filled + rec->chunk.size() > in.total)
            up.on_fatal("PE " + std::to_string(cfg.rank) + ": the shared-memory ring from PE " +
                        std::to_string(p) + " is corrupt (a chunk without its message)");
        std::memcpy(static_cast<std::byte*>(in.assembling) + in.filled, rec->chunk.data(),
                    rec->chunk.size());
        in.filled += static_cast<std::uint32_t>(rec->chunk.size());
        in.in_ring->consume();
        if (in.filled < in.total) continue;
        void* msg = std::exchange(in.assembling, nullptr);
        const std::uint32_t total = in.total;
        deliver(p, msg, total, (in.flags & shm_flags::broadcast) != 0, in.tag);
        note_ring_message(p, total);
    }
    return did;
}

bool layer::impl::ring_try_sleep() {
    if (ring_queued) return false;  // still pumping into a full ring: keep polling
    if (eager_pending()) return false;
    // Announce in every ring, fence once (the heavy fence where the producers rely on it,
    // shm_ring.hpp; a system call, so once for all rings), then look at each ring again.
    bool heavy = false;
    for (auto& p : peers)
        if (p.in_ring) {
            p.in_ring->announce_sleep();
            heavy |= p.in_ring->heavy_sleep_fence();
        }
    if (!shm_sleep_fence_now(heavy)) {
        // Our producers do not fence, so without it a record could go unseen: keep polling.
        if (!heavy_fence_failure_said)
            up.on_notice("coverse: PE " + std::to_string(cfg.rank) +
                         ": the membarrier system call failed; this PE keeps polling "
                         "its shared-memory rings where it would sleep (it tries again at "
                         "each idle turn and says this once)\n");
        heavy_fence_failure_said = true;
        ring_wake();
        return false;
    }
    for (auto& p : peers)
        if (p.in_ring && !p.in_ring->sleep_allowed()) {
            ring_wake();
            return false;
        }
    // An eager writer checks the same ring's sleep flag after its footer (eager_send): the
    // flag is up and fenced now, so a message written before it is seen here.
    if (eager_pending()) {
        ring_wake();
        return false;
    }
    return true;
}

void layer::impl::ring_wake() {
    for (auto& p : peers)
        if (p.in_ring) p.in_ring->cancel_sleep();
}

void layer::unlink_names(bool whole_job) noexcept {
    impl& m = *_impl;
    for (auto& p : m.peers)
        if (p.in_ring) p.in_ring->unlink();
    if (m.bell) m.bell->unlink();
    if (!m.shm_wanted) return;
    if (!whole_job) {
        // Its own names: rings into it and eager channels it made ("coverse-KEY-PE-...").
        net::remove_shm_entries(
            std::string_view(pe_shm_prefix(m.cfg.job_key, m.cfg.rank)).substr(1));
        return;
    }
    // Rings, eager channels ("coverse-KEY-PE-...") and doorbells ("coverse-KEY-PE.bell") of
    // every PE of this job: all start "coverse-KEY-".
    net::remove_shm_entries(net::shm_name_prefix(m.cfg.job_key));
}

void layer::impl::shm_close() {
    sched.set_shared_memory_only(false);
    if (poller_) {
        sched.remove_poller(*poller_);
        poller_.reset();
    }
    for (auto& p : peers) {
        if (p.assembling) alloc::msg_free(std::exchange(p.assembling, nullptr));
        p.out_ring.reset();
        p.out_bell.reset();
        p.staged_ring.reset();
        p.staged_bell.reset();
        p.in_ring.reset();
    }
    ring_sources.clear();
    bell.reset();
}

}  // namespace coverse::rdma
