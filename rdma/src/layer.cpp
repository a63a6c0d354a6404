// The rdma layer (see layer.hpp): per-peer set-up (eager at start-up or lazy on first use),
// stream paths, provider choice, the demultiplexing of the layer's frames from both paths,
// and the in-order upcall. The rendezvous protocol
// itself is in rendezvous.cpp, the same-host ring path in shm_path.cpp.
#include "layer_impl.hpp"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <utility>

#include <coverse/alloc/message.hpp>
#include <coverse/rdma/cma.hpp>
#include <coverse/rdma/tcp.hpp>
#include <coverse/rdma/verbs.hpp>
#include <coverse/runtime/settings.hpp>

namespace coverse::rdma {

layer_config layer_config::from_settings() {
    layer_config c;
    const auto clamp32 = [](std::size_t v) {
        return static_cast<std::uint32_t>(std::min<std::size_t>(v, 0xFFFF'FFFFu));
    };
    c.small_boundary = clamp32(settings::count("SMALL_MESSAGE_BOUNDARY"));
    // A stream frame is at most a frame's payload: larger messages always go by rendezvous.
    c.medium_boundary = std::min<std::uint32_t>(clamp32(settings::count("MEDIUM_MESSAGE_BOUNDARY")),
                                                net::default_max_payload);
    c.small_boundary = std::min(c.small_boundary, c.medium_boundary);
    c.max_message = net::max_message_from_env();
    c.shm = settings::enabled("SHM");
    c.shm_ring_bytes = settings::count("SHM_RING_BYTES");
    const std::string forced = settings::text("RDMA_PROVIDER");
    if (forced != "auto") c.forced = provider_from_string(forced);
    c.rndv_chunk = std::max<std::size_t>(4096, settings::count("RNDV_CHUNK"));
    c.rndv_split = settings::count("RNDV_SPLIT");
    c.rndv_fetches = std::max<std::size_t>(1, settings::count("RNDV_FETCHES"));
    c.eager = settings::enabled("EAGER_PROTOCOL");
    c.eager_interval_ns = static_cast<std::uint64_t>(
        std::chrono::nanoseconds(settings::duration("EAGER_INTERVAL")).count());
    c.eager_threshold = clamp32(std::max<std::size_t>(1, settings::count("EAGER_THRESHOLD")));
    c.eager_slots = clamp32(std::clamp<std::size_t>(settings::count("EAGER_SHORT_SLOTS"), 1,
                                                    eager_segment::most_slots));
    c.eager_short_bytes = std::min<std::uint32_t>(
        clamp32(std::max<std::size_t>(1, settings::count("EAGER_SHORT_MESSAGE_BOUNDARY"))),
        eager_segment::largest_capacity);
    // At most the slot's size: beyond it no message would take a short channel on this
    // host, yet busy senders would still earn channels (say EAGER_PROTOCOL=off for that).
    c.eager_short_minimum = std::min<std::uint32_t>(clamp32(settings::count("EAGER_SHORT_MINIMUM")),
                                                    c.eager_short_bytes);
    c.eager_pollset = settings::count("EAGER_SHORT_POLLSET_SIZE_MAXIMUM");
    c.eager_credit_delay_ns = static_cast<std::uint64_t>(
        std::chrono::nanoseconds(settings::duration("EAGER_CREDIT_DELAY")).count());
    const std::string remote = settings::text("EAGER_REMOTE");
    c.eager_remote = remote == "put"      ? layer_config::eager_remote_mode::put
                     : remote == "frames" ? layer_config::eager_remote_mode::frames
                                          : layer_config::eager_remote_mode::automatic;
    c.eager_long_buffers = clamp32(
        std::min<std::size_t>(settings::count("EAGER_LONG_BUFFERS"), eager_segment::most_slots));
    c.eager_long_bytes = std::min<std::uint32_t>(clamp32(settings::count("EAGER_LONG_BUFFER_SIZE")),
                                                 eager_segment::largest_capacity);
    c.lazy = settings::text("CONNECT") == "lazy";
    return c;
}

layer::impl::impl(layer& s, scheduler& sc, layer_config c, upcalls& u)
    : self(s), sched(sc), cfg(std::move(c)), up(u), peers(cfg.num_pes) {
    for (auto& p : peers)
        p.fetch_slots = std::make_unique<semaphore>(cfg.rndv_fetches);
}

layer::impl::~impl() = default;

layer::layer(scheduler& sched, layer_config cfg, upcalls& up)
    : _impl(std::make_unique<impl>(*this, sched, std::move(cfg), up)) {}

void layer::attach(net::mesh& mesh) {
    impl& m = *_impl;
    m.mesh = &mesh;
    mesh.set_frame_hook(this);
    m.tcp = std::make_unique<tcp_provider>(mesh, m.cfg.rndv_chunk);
}

layer::~layer() {
    close();
}

// ---------------------------------------------------------------------------------------
// Start-up

void layer::prepare() {
    impl& m = *_impl;
    m.cma = std::make_unique<cma_provider>(m.cfg.num_pes);
    const bool want_verbs = !m.cfg.forced || *m.cfg.forced == provider_kind::verbs;
    if (want_verbs && m.cfg.num_pes > 1) {
        m.verbs = make_verbs_provider(m.sched, m.cfg.rank, m.cfg.num_pes, &m.verbs_why);
        if (m.cfg.forced == provider_kind::verbs && !m.verbs)
            m.up.on_fatal("PE " + std::to_string(m.cfg.rank) +
                          ": RDMA_PROVIDER=verbs, but verbs cannot serve: " + m.verbs_why +
                          "; use RDMA_PROVIDER=auto, cma or tcp");
    }
    m.shm_create();
}

void layer::connect(std::span<const peer_info> peers) {
    impl& m = *_impl;
    if (peers.size() != m.cfg.num_pes)
        m.up.on_fatal("rdma: a node table of " + std::to_string(peers.size()) +
                      " entries for a job of " + std::to_string(m.cfg.num_pes) + " PEs");
    const bool eager = m.cfg.num_pes > 1 && m.mesh && !m.cfg.lazy;
    m.counting_setup = eager;
    const std::uint64_t here = peers[m.cfg.rank].machine_id;
    for (std::uint32_t p = 0; p < m.cfg.num_pes; ++p)
        m.peers[p].same_host = peers[p].machine_id == here;
    m.shm_start();
    m.table_known = true;
    for (auto& [from, f] : std::exchange(m.early_offers, {}))
        m.on_address(from, f);
    for (std::uint32_t p = 0; p < m.cfg.num_pes; ++p)
        if (!m.peers[p].waiting.empty()) m.setup_start(p);
    if (!eager) return;
    // Eager: every pair now; the set-up of each is the one a first send starts (lazy).
    for (std::uint32_t p = 0; p < m.cfg.num_pes; ++p)
        if (p != m.cfg.rank) m.setup_start(p);
    // Until every peer is ready or lost: a peer that dies during the set-up (its loss came
    // through peer_lost) is not waited for, its loss is the caller's to report (a peer
    // killed right after its own set-up left this PE waiting here for ever). And until the
    // frames this PE queued meanwhile are in the kernel (or failed with their peer): the
    // last verdict that makes a peer ready may still be in the writer when this side is
    // ready, and a PE that then computes without polling held its peer here (seen in CI:
    // rendezvous_provider.a_sender_killed_mid_rendezvous_is_reported_naming_it, whose PE 1
    // blocks on a pipe right after its set-up).
    m.sched.run_until([&] {
        if (m.setup_controls != 0) return false;
        if (m.ready_peers == m.cfg.num_pes - 1) return true;
        for (std::uint32_t p = 0; p < m.cfg.num_pes; ++p)
            if (p != m.cfg.rank && !m.peers[p].ready && !m.peers[p].lost) return false;
        return true;
    });
    m.counting_setup = false;
    // Every peer has mapped our doorbell (with our ring, before its verdict).
    if (m.bell) m.bell->unlink();
}

bool layer::ready(std::uint32_t pe) const noexcept {
    const impl& m = *_impl;
    return pe < m.peers.size() && m.peers[pe].sendable;
}

task<void> layer::until_ready(std::uint32_t pe) {
    impl& m = *_impl;
    if (pe >= m.peers.size() || pe == m.cfg.rank) co_return;
    peer& q = m.peers[pe];
    if (q.sendable || q.lost) co_return;
    if (!q.ready_event) q.ready_event = std::make_unique<event>();
    m.setup_start(pe);
    co_await q.ready_event->wait();
}

void layer::impl::setup_start(std::uint32_t p) {
    peer& q = peers[p];
    if (q.offer_sent || q.lost || closed || !table_known) return;
    q.offer_sent = true;
    // Our ring exists before the offer that tells the peer to map it.
    shm_ring_for(p);
    // Stage 1: the provider we would like it to read us with. The first frame to it: under
    // CONNECT=lazy the mesh dials it now, and whatever waits for the set-up waits for that.
    const provider_kind offer = offer_for(p);
    provider* prov = provider_of(offer);
    const std::vector<std::byte> blob = prov ? prov->address_blob_for(p) : std::vector<std::byte>{};
    if (const int rc = post_address(p, 1, offer, blob); rc < 0) fail_waiting(p, rc);
    shm_update_rings_only();
}

void layer::impl::setup_check(std::uint32_t p) {
    peer& q = peers[p];
    if (q.ready || !q.offer_seen || !q.verdict_known) return;
    q.ready = true;
    ++ready_peers;
    if (q.staged_ring) {
        q.out_ring = std::move(q.staged_ring);
        q.out_bell = std::move(q.staged_bell);
        q.staged_ring.reset();
        q.staged_bell.reset();
    }
    // What waited goes first, in order; a send made meanwhile (a completion that sends
    // again) queues behind it, since the peer is not sendable until the queue is empty.
    while (!q.waiting.empty()) {
        const held_send h = q.waiting.front();
        q.waiting.pop_front();
        --holding;
        self.send_direct(p, h.buf, h.size, h.broadcast, h.root, h.done);
    }
    q.sendable = true;
    for (const auto& r : std::exchange(q.early_requests, {}))
        on_persistent_request(p, r);
    if (q.eager_due) eager_open_short(p);
    if (q.ready_event) q.ready_event->set();
    shm_update_rings_only();
    if (!refusals.empty() && !refusals_said) {
        refusals_said = true;
        up.on_notice(refusals);
    }
    up.on_peer_ready(p);
}

void layer::impl::hold(std::uint32_t dest, const std::byte* buf, std::uint32_t size, bool broadcast,
                       std::uint32_t root, send_completion* done) {
    peer& q = peers[dest];
    if (q.lost) {
        done->sent(-EPIPE);
        return;
    }
    q.waiting.push_back(held_send{buf, size, broadcast, root, done});
    ++holding;
    setup_start(dest);
}

void layer::impl::fail_waiting(std::uint32_t p, int result) {
    peer& q = peers[p];
    while (!q.waiting.empty()) {
        send_completion* done = q.waiting.front().done;
        q.waiting.pop_front();
        --holding;
        done->sent(result);
    }
}

provider_kind layer::impl::offer_for(std::uint32_t p) const {
    if (cfg.forced) return *cfg.forced;
    if (peers[p].same_host && cma) return provider_kind::cma;
    if (verbs) return provider_kind::verbs;
    return provider_kind::tcp;
}

provider* layer::impl::provider_of(provider_kind k) const noexcept {
    switch (k) {
        case provider_kind::cma:
            return cma.get();
        case provider_kind::tcp:
            return tcp.get();
        case provider_kind::verbs:
            return verbs.get();
    }
    return nullptr;
}

int layer::impl::post_address(std::uint32_t p, std::uint32_t stage, provider_kind kind,
                              std::span<const std::byte> blob) {
    // The frame's bytes, owned until the writer is done with them; counted while connect()
    // waits for its set-up frames to leave.
    struct address_frame {
        std::vector<std::byte> bytes;
        std::size_t* queued = nullptr;
    };
    std::size_t* const queued = counting_setup ? &setup_controls : nullptr;
    auto* frame = new address_frame{
        net::encode(net::rdma_address_payload{stage, static_cast<std::uint32_t>(kind), blob}),
        queued};
    net::frame_header h;
    h.type = net::frame_type::rdma_address;
    if (queued) ++*queued;  // counted before the writer can see it
    const int rc = mesh->post(
        p, h, frame->bytes,
        [](void* ctx, int) {
            auto* a = static_cast<address_frame*>(ctx);
            if (a->queued) --*a->queued;
            delete a;
        },
        frame);
    if (rc < 0) {
        if (queued) --*queued;
        delete frame;
        // A peer the mesh failed: lost already (the mesh's failure callback runs peer_lost
        // before a post to it can fail), and its loss is being reported, so connect() does
        // not wait for it and the job goes on as ON_PEER_LOST says. Lazy: a connection may
        // also be failed or closing without a loss (dialing, shutdown); its sends fail.
        if (!cfg.lazy && !peers[p].lost)
            up.on_fatal("PE " + std::to_string(cfg.rank) + ": could not send PE " +
                        std::to_string(p) + " its one-sided address: " + std::strerror(-rc));
    }
    return rc;
}

// A peer's offer (stage 1) or verdict (stage 2), in the reader.
void layer::impl::on_address(std::uint32_t from, const net::frame& f) {
    const auto d = net::decode_rdma_address(f.payload_bytes());
    if (!d.ok()) return;  // validated by the reader
    const auto kind = static_cast<provider_kind>(d.value.provider);
    peer& p = peers[from];
    if (d.value.stage == 2) {
        if (p.verdict_known) return;
        p.publish_with = kind;
        p.verdict_known = true;
        ++verdicts;
        // It mapped our ring before it answered: the name can go.
        if (p.in_ring) p.in_ring->unlink();
        setup_check(from);
        return;
    }
    if (p.offer_seen) return;
    // Its offer may come first (it sent to us before we sent to it): our half starts now,
    // our ring before anything that tells it to map it.
    setup_start(from);
    shm_map_peer(from);
    // The ring poll reads our new ring from now on. Not where the ring is made: that may be
    // inside the poll's own loop over its rings (a message it delivers sends to a new
    // peer); the peer writes into it only after our verdict below.
    refresh_ring_sources();
    // Read the peer with what it offered if we can; else tcp, which always works.
    provider_kind use = provider_kind::tcp;
    if (kind != provider_kind::tcp) {
        provider* prov = provider_of(kind);
        std::optional<std::string> why;
        if (!prov)
            why = kind == provider_kind::verbs ? "this PE has no verbs device (" + verbs_why + ")"
                                               : std::string("this PE has no cma provider");
        else
            why = prov->connect_peer(from, d.value.blob);
        if (!why) {
            use = kind;
        } else if (!cfg.forced) {
            // Said once per PE, naming the first peer: the cause is the same for all.
            if (refusals.empty() && !refusals_said)
                refusals = "coverse: PE " + std::to_string(cfg.rank) + " cannot use " +
                           std::string(to_string(kind)) + " with PE " + std::to_string(from) +
                           ": " + *why + "; large messages between them use tcp\n";
        } else {
            up.on_fatal("PE " + std::to_string(cfg.rank) +
                        ": RDMA_PROVIDER=" + std::string(to_string(kind)) + " cannot reach PE " +
                        std::to_string(from) + ": " + *why);
        }
    }
    p.get_with = use;
    p.offer_seen = true;
    ++offers;
    (void)post_address(from, 2, use, {});
    setup_check(from);
}

// ---------------------------------------------------------------------------------------
// Sending

void mesh_sent(void* ctx, int result) {
    static_cast<send_completion*>(ctx)->sent(result);
}

void layer::send(std::uint32_t dest, const std::byte* buf, std::uint32_t size, bool broadcast,
                 std::uint32_t root, send_completion* done) {
    impl& m = *_impl;
    if (!m.peers[dest].sendable) [[unlikely]] {  // the set-up with it is not done: wait for it
        m.hold(dest, buf, size, broadcast, root, done);
        return;
    }
    send_direct(dest, buf, size, broadcast, root, done);
}

void layer::send_direct(std::uint32_t dest, const std::byte* buf, std::uint32_t size,
                        bool broadcast, std::uint32_t root, send_completion* done) {
    impl& m = *_impl;
    // Into its put channel, or behind the puts still landing there (eager_put.cpp).
    if (m.peers[dest].put_out && m.put_send(dest, buf, size, broadcast, root, done)) return;
    if (!broadcast && !m.peers[dest].out_ring &&
        (m.peers[dest].tcp_out || !m.eager.current.empty()) &&
        m.tcp_eager_send(dest, buf, size, done))
        return;
    if (!broadcast && m.peers[dest].out_ring &&
        (m.peers[dest].eager_out || !m.eager.current.empty()) &&
        m.eager_send(dest, buf, size, done))
        return;
    if (size <= m.cfg.medium_boundary) {
        ++_stats.stream_sends;
        m.stream_send(dest, net::frame_type::standard, broadcast, root,
                      std::span<const std::byte>(buf, size), done);
        return;
    }
    ++_stats.rendezvous_sends;
    m.rendezvous_send(dest, buf, size, broadcast, root, done);
}

bool layer::try_send_now(std::uint32_t dest, const std::byte* buf, std::uint32_t size) noexcept {
    impl& m = *_impl;
    peer& p = m.peers[dest];
    if (!p.sendable) [[unlikely]]
        return false;  // sends wait for the set-up
    if (!p.out_ring) return copy_to_connection(dest, buf, size);
    if (m.ring_burst_write(dest, buf, size)) {
        ++_stats.stream_sends;
        ++_stats.burst_sends;
        return true;
    }
    if ((p.eager_out || !m.eager.current.empty()) && m.eager_send(dest, buf, size, nullptr))
        return true;
    if (size > m.cfg.medium_boundary) return false;
    const std::span<const std::byte> bytes(buf, size);
    if (!m.ring_write_now(dest, net::frame_type::standard, false, 0, bytes)) return false;
    ++_stats.stream_sends;
    return true;
}

// try_send_now to a peer on the connection: what send_direct() would post, copied into the
// connection's entry of copies instead (no completion, no handle; the frames go when the
// machine core flushes the mesh after the handler, as posted ones do). An eager slot frame
// while the peer's short channel has a credit, else a stream frame. Persistent handles
// and put channels take send(): they have more to decide.
bool layer::copy_to_connection(std::uint32_t dest, const std::byte* buf,
                               std::uint32_t size) noexcept {
    impl& m = *_impl;
    peer& p = m.peers[dest];
    if (p.put_out || !m.eager.current.empty()) return false;
    tcp_tx* sc = p.tcp_out.get();
    const bool slot = sc && size <= sc->capacity && sc->credits > 0;
    if (!slot && size > m.cfg.medium_boundary) return false;  // a rendezvous
    net::frame_header h;
    h.type = slot ? net::frame_type::eager_data : net::frame_type::standard;
    h.tag = slot ? sc->channel : 0;
    if (m.mesh->post_copy(dest, h, std::span<const std::byte>(buf, size), &impl::copies_lost, &m) <
        0)
        return false;
    ++p.streamed;  // a message on the connection (stream_counts)
    ++_stats.copied_sends;
    if (slot) {
        ++_stats.copied_slot_sends;
        m.tcp_credit_spent(dest, *sc, false);
    } else {
        if (sc && size <= sc->capacity) m.tcp_credit_missing();  // as tcp_eager_send counts it
        ++_stats.stream_sends;
    }
    return true;
}

void layer::impl::copies_lost(void* ctx, std::uint32_t pe, int result) {
    static_cast<impl*>(ctx)->up.on_copies_lost(pe, result);
}

// One frame on the stream path to `dest`: its ring when it is on this host and mapped,
// else the connection. Every frame to one PE takes the same path, so they stay in order.
void layer::impl::stream_send(std::uint32_t dest, net::frame_type type, bool broadcast,
                              std::uint32_t root, std::span<const std::byte> bytes,
                              send_completion* done) {
    peer& p = peers[dest];
    if (p.out_ring) {
        ring_send(dest, type, broadcast, root, bytes, done);
        return;
    }
    net::frame_header h;
    h.type = type;
    h.flags = broadcast ? net::frame_flags::broadcast : 0;
    h.tag = broadcast ? root : 0;
    if (stream_counts(type)) ++p.streamed;  // a put's footer names its place among these
    const int rc = mesh->post(dest, h, bytes, &mesh_sent, done);
    if (rc < 0) done->sent(rc);
}

namespace {
// A control frame's bytes, owned until its path is done with them.
struct owned_control final : send_completion {
    std::array<std::byte, 32> bytes{};
    std::size_t size = 0;
    int* result = nullptr;  // set while stream_control() waits to hear a failure at once
    void sent(int r) noexcept override {
        if (result) *result = r;
        delete this;
    }
};
}  // namespace

int layer::impl::stream_control(std::uint32_t dest, net::frame_type type, bool broadcast,
                                std::uint32_t root, std::span<const std::byte> payload) {
    auto* c = new owned_control;
    c->size = payload.size();
    if (!payload.empty()) std::memcpy(c->bytes.data(), payload.data(), payload.size());
    int result = 1;  // 1: not completed during stream_send (c is still alive, queued)
    c->result = &result;
    stream_send(dest, type, broadcast, root, std::span<const std::byte>(c->bytes.data(), c->size),
                c);
    if (result == 1) {
        c->result = nullptr;  // it completes later, when nobody waits here any more
        return 0;
    }
    return result < 0 ? result : 0;
}

// ---------------------------------------------------------------------------------------
// Receiving: both paths end here, in each peer's order

void layer::impl::deliver(std::uint32_t from, void* msg, std::uint32_t size, bool broadcast,
                          std::uint32_t root) {
    peer& p = peers[from];
    if (p.held.empty()) {
        up.on_message(from, msg, size, broadcast, root);
        return;
    }
    // A rendezvous from this peer is still being fetched: later messages wait behind it.
    p.held.push_back(held_message{msg, size, broadcast, root, true});
}

void layer::impl::release_held(std::uint32_t from) {
    peer& p = peers[from];
    while (!p.held.empty() && p.held.front().ready) {
        const held_message h = p.held.front();
        p.held.pop_front();
        if (h.msg) up.on_message(from, h.msg, h.size, h.broadcast, h.root);
    }
}

// A frame of the layer's own from either path (ring records are decoded into the same
// shape). Returns false for frames that are not the layer's.
bool layer::impl::on_frame(std::uint32_t from, net::frame_type type, std::uint16_t flags,
                           std::uint32_t tag, std::span<const std::byte> payload) {
    const bool broadcast = (flags & net::frame_flags::broadcast) != 0;
    switch (type) {
        case net::frame_type::publish: {
            net::decode_limits lim;
            lim.num_pes = cfg.num_pes;
            lim.max_message = cfg.max_message;
            const auto d = net::decode_publish(payload, lim);
            if (!d.ok()) {
                const bool too_big = d.error.field == "publish.size" && d.error.value > 0;
                up.on_fatal(
                    "PE " + std::to_string(cfg.rank) + " refused a message from PE " +
                    std::to_string(from) +
                    (too_big ? " of " + std::to_string(d.error.value) +
                                   " bytes: over MAX_MESSAGE (" + std::to_string(cfg.max_message) +
                                   " bytes) on this PE; raise MAX_MESSAGE on every PE"
                             : ": " + net::describe(d.error, "PE " + std::to_string(from))));
            }
            rendezvous_receive(from, d.value, broadcast, tag);
            return true;
        }
        case net::frame_type::get_done: {
            const auto d = net::decode_get_done(payload, {});
            if (d.ok()) on_get_done(from, d.value);
            return true;
        }
        case net::frame_type::rma_put_request: {  // on the ring: a split rendezvous
            const auto d = net::decode_rma_request(payload, type);
            if (d.ok()) on_split_request(from, d.value);
            return true;
        }
        case net::frame_type::rma_complete: {  // on the ring: the split part is in place
            const auto d = net::decode_rma_complete(payload);
            if (d.ok()) on_split_done(from, d.value);
            return true;
        }
        case net::frame_type::rma_get_request:  // on the ring: help copy a shared put
            if (payload.empty()) on_put_share(from, tag);
            return true;
        case net::frame_type::eager_channel: {
            const auto d = net::decode_eager_channel(payload);
            if (d.ok()) on_eager_channel(from, d.value);
            return true;
        }
        case net::frame_type::persistent_request: {
            net::decode_limits lim;
            lim.num_pes = cfg.num_pes;
            const auto d = net::decode_persistent_request(payload, lim);
            if (d.ok()) on_persistent_request(from, d.value);
            return true;
        }
        default:
            return false;
    }
}

std::byte* layer::place(std::uint32_t pe, const net::frame_header& h) noexcept {
    impl& m = *_impl;
    if (!m.tcp) return nullptr;
    if (h.type == net::frame_type::eager_data) return m.tcp_eager_place(pe, h);
    if (h.type == net::frame_type::rma_get_reply || h.type == net::frame_type::rma_put_data)
        return m.tcp->place(pe, h);
    return nullptr;
}

std::uint16_t layer::credits_for(std::uint32_t pe, net::frame_type) noexcept {
    return _impl->tcp_credits_for(pe);
}

bool layer::take(std::uint32_t pe, net::frame& f) {
    impl& m = *_impl;
    const auto& h = f.header;
    if (h.credits) m.tcp_credits_back(pe, h.credits);     // eager credits riding on any frame
    if (stream_counts(h.type)) m.put_stream_message(pe);  // what it put before this goes first
    switch (h.type) {
        case net::frame_type::eager_data:
            m.tcp_eager_take(pe, f);
            return true;
        case net::frame_type::credit: {
            const auto d = net::decode_credit(f.payload_bytes(), {});
            if (d.ok()) m.tcp_credits_back(pe, d.value.count);
            return true;
        }
        case net::frame_type::eager_put_open: {
            const auto d = net::decode_eager_put_open(f.payload_bytes());
            if (d.ok()) m.on_put_open(pe, d.value);
            return true;
        }
        case net::frame_type::standard: {
            if (m.cfg.eager && !m.peers[pe].tcp_in && !m.peers[pe].out_ring)
                m.eager_note_stream_message(pe);
            const std::uint32_t size = h.payload_length;
            void* msg = f.payload.release();
            if (!msg) {  // an empty frame: still a message (the core reports it as too short)
                msg = alloc::msg_alloc(1);
                if (!msg) m.up.on_fatal("out of memory receiving a message");
            }
            m.deliver(pe, msg, size, (h.flags & net::frame_flags::broadcast) != 0, h.tag);
            return true;
        }
        case net::frame_type::rma_get_request:
        case net::frame_type::rma_get_reply:
        case net::frame_type::rma_put_request:
        case net::frame_type::rma_put_data:
        case net::frame_type::rma_complete:
            if (m.tcp) m.tcp->take(pe, f);
            return true;
        case net::frame_type::rdma_address:
            if (!m.table_known)
                m.early_offers.emplace_back(pe, std::move(f));
            else
                m.on_address(pe, f);
            return true;
        case net::frame_type::publish:
        case net::frame_type::get_done:
        case net::frame_type::eager_channel:
        case net::frame_type::persistent_request:
            return m.on_frame(pe, h.type, h.flags, h.tag, f.payload_bytes());
        default:
            return false;
    }
}

// ---------------------------------------------------------------------------------------
// State, shutdown

bool layer::idle() const noexcept {
    const impl& m = *_impl;
    return m.outgoing.empty() && m.incoming == 0 && m.ring_queued == 0 && m.holding == 0 &&
           m.put_idle();
}

void layer::drain() {
    _impl->sched.run_until([&] { return idle(); });
}

void layer::peer_lost(std::uint32_t pe) {
    impl& m = *_impl;
    if (m.tcp) m.tcp->peer_lost(pe);
    if (m.cma) m.cma->peer_lost(pe);
    if (m.verbs) m.verbs->peer_lost(pe);
    m.peers[pe].lost = true;
    m.fail_waiting(pe, -EPIPE);
    if (m.peers[pe].ready_event) m.peers[pe].ready_event->set();
    m.fail_rendezvous_with(pe);
    m.eager_peer_lost(pe);
    // Messages queued for its full ring never go: they complete as failed, or drain() (and
    // the senders waiting on them) would wait for a reader that is gone.
    auto& queue = m.peers[pe].out_queue;
    while (!queue.empty()) {
        send_completion* done = queue.front().done;
        queue.pop_front();
        --m.ring_queued;
        done->sent(-EPIPE);
    }
}

void layer::close() {
    impl& m = *_impl;
    if (m.closed) return;
    m.closed = true;
    if (m.mesh) m.mesh->set_frame_hook(nullptr);
    m.tasks.request_stop();
    if (m.tasks.live()) m.sched.run_until([&] { return m.tasks.live() == 0; });
    if (m.credit_timer.armed()) m.sched.cancel_timer(m.credit_timer);
    m.eager_close();
    m.shm_close();
    for (auto& p : m.peers)
        for (auto& h : p.held)
            if (h.msg) alloc::msg_free(h.msg);
    m.peers.clear();
    m.verbs.reset();
    m.tcp.reset();
    m.cma.reset();
    m.mesh = nullptr;
}

provider_kind layer::provider_for(std::uint32_t pe) const noexcept {
    const impl& m = *_impl;
    return pe < m.peers.size() ? m.peers[pe].get_with : provider_kind::tcp;
}

// The eager channel a busy `pe` would get from us, as table_for describes the rest.
std::string layer::impl::eager_for(std::uint32_t pe) const {
    const peer& p = peers[pe];
    const bool ring = p.ready ? p.out_ring.has_value() : p.same_host && shm_wanted && !shm_failed;
    const provider_kind publish = p.ready ? p.publish_with : offer_for(pe);
    return describe_eager(ring ? stream_path::shm_ring : stream_path::connection, publish,
                          cfg.eager_by_put(publish), cfg.eager_short_bytes, cfg.eager_short_minimum,
                          cfg.eager_slots, cfg.eager_threshold, cfg.eager_interval_ns);
}

const protocol_table& layer::impl::table_for(std::uint32_t pe) const noexcept {
    const peer& p = peers[pe];
    // Before the set-up with it (CONNECT=lazy): what it will get if it answers as we would.
    const bool ring = p.ready ? p.out_ring.has_value() : p.same_host && shm_wanted && !shm_failed;
    const provider_kind get = p.ready ? p.get_with : offer_for(pe);
    const provider_kind publish = p.ready ? p.publish_with : offer_for(pe);
    const bool split =
        get == provider_kind::cma && publish == provider_kind::cma && ring && cfg.rndv_split > 0;
    const auto path = ring ? stream_path::shm_ring : stream_path::connection;
    auto& slot =
        tables[static_cast<std::size_t>(path)][static_cast<std::size_t>(get)][split ? 1 : 0];
    if (!slot)
        slot = make_protocol_table(path, get, cfg.small_boundary, cfg.medium_boundary,
                                   split ? cfg.rndv_split : 0);
    return *slot;
}

std::string layer::provider_summary() const {
    const impl& m = *_impl;
    if (m.cfg.forced)
        return "forced: " + std::string(to_string(*m.cfg.forced)) + " (RDMA_PROVIDER)";
    std::string out = "auto: same host cma, other hosts ";
    out += m.verbs ? "verbs" : "tcp";
    if (!m.verbs && !m.verbs_why.empty()) out += " (verbs: " + m.verbs_why + ")";
    return out;
}

std::string layer::path_to(std::uint32_t pe) const {
    const impl& m = *_impl;
    if (pe >= m.peers.size() || pe == m.cfg.rank) return "this PE";
    const peer& p = m.peers[pe];
    if (!p.ready) return std::string(p.same_host ? "same host" : "other host") + ", not set up yet";
    return std::string(p.same_host ? "same host" : "other host") + ", stream by " +
           (p.out_ring ? "shm ring" : "connection") + ", one-sided by " +
           std::string(to_string(p.get_with));
}

std::string layer::describe() const {
    const impl& m = *_impl;
    std::string out;
    std::vector<std::string> seen;
    for (std::uint32_t pe = 0; pe < m.peers.size(); ++pe) {
        if (pe == m.cfg.rank) continue;
        std::string line =
            (m.peers[pe].same_host ? "same host: " : "other host: ") + m.table_for(pe).describe();
        if (m.cfg.eager) line += "; " + m.eager_for(pe);
        if (std::find(seen.begin(), seen.end(), line) != seen.end()) continue;
        seen.push_back(line);
        out += line + "\n";
    }
    if (!m.verbs && !m.verbs_why.empty()) out += "verbs: " + m.verbs_why + "; using cma/tcp\n";
    return out;
}

}  // namespace coverse::rdma
