// The rdma layer's state, shared by its units: layer.cpp (start-up, routing, demultiplexing,
// in-order delivery), shm_path.cpp (the same-host rings), rendezvous.cpp (publish/get),
// eager.cpp / eager_tcp.cpp / eager_put.cpp (eager channels).
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <coverse/alloc/chunk_owner.hpp>
#include <coverse/rdma/cma.hpp>
#include <coverse/rdma/eager.hpp>
#include <coverse/rdma/layer.hpp>
#include <coverse/rdma/shm_ring.hpp>
#include <coverse/rdma/tcp.hpp>
#include <coverse/runtime/event.hpp>
#include <coverse/runtime/semaphore.hpp>

namespace coverse::rdma {

/// A message that arrived while an earlier rendezvous from the same peer is still being
/// fetched (or that rendezvous itself, not ready yet).
struct held_message {
    void* msg = nullptr;
    std::uint32_t size = 0;
    bool broadcast = false;
    std::uint32_t root = 0;
    bool ready = false;
};

/// A send that waits for the set-up with its peer (layer.hpp), in order.
struct held_send {
    const std::byte* buf;
    std::uint32_t size;
    bool broadcast;
    std::uint32_t root;
    send_completion* done;
};

/// One record waiting for room in a full ring, in order.
struct ring_out {
    const std::byte* buf;
    std::uint32_t size;
    std::uint32_t offset;
    std::uint16_t flags;  // shm_flags, with the record type
    std::uint32_t tag;
    send_completion* done;
};

// ---- the receiver's side --------------------------------------------------------------

/// A short channel's use as the idle sweeps judge it (layer::impl::eager_unused): taking a
/// message only sets `used`, and the sweep dates it with its own clock read.
struct use_mark {
    bool used = false;          // took a message since the last sweep
    std::uint64_t seen_ns = 0;  // the sweep that last saw it used, or the channel's creation
};

struct eager_rx final : alloc::chunk_owner {
    eager_rx(std::uint32_t id, std::uint32_t from, eager_kind kind, eager_segment s)
        : id(id), from(from), kind(kind), seg(std::move(s)), slot_message(seg.slots(), 0) {}
    std::uint32_t id;
    std::uint32_t from;  // no_peer until a receiver-initiated channel's sender attached
    eager_kind kind;
    eager_segment seg;
    std::uint64_t delivered = 0;              // messages taken: the next is `delivered`
    std::uint32_t at = 0;                     // the slot whose footer tells of the next one
    std::uint32_t skips = 0;                  // skips passed looking for the next message
    std::vector<std::uint64_t> slot_message;  // per slot: k + 1 of the message it holds
    std::uint32_t held = 0;                   // slots handed to handlers and not freed yet
    bool closing = false;                     // we asked the sender to stop
    bool done = false;  // the sender stopped: no more polling; reaped once held == 0
    use_mark use;
    std::uint32_t handle = 0;  // the sender's persistent handle, if any

    /// A handler freed a slot's message: the slot is free, its credit back with the sender
    /// (one store to the segment's `freed`; `held` assumes the PE's own thread).
    void take_back(void* storage, std::size_t) noexcept override;
    const char* name() const noexcept override {
        return kind == eager_kind::short_slots ? "eager short slot" : "eager long buffer";
    }
};

// ---- the sender's side ----------------------------------------------------------------

struct eager_tx {
    eager_tx(std::uint32_t to, std::uint32_t id, eager_kind kind, eager_segment s)
        : to(to),
          id(id),
          kind(kind),
          seg(std::move(s)),
          marked(seg.slots(), 0),
          data(seg.slots(), 0),
          freed_seen(seg.slots(), 0) {}
    std::uint32_t to;
    std::uint32_t id;  // the receiver's channel id
    eager_kind kind;
    eager_segment seg;
    std::uint64_t written = 0;              // messages written: the next is `written`
    std::uint32_t at = 0;                   // the slot the next message goes to or skips
    std::uint32_t taken_hint = 0;           // the receiver's taken count its footers carried
    std::uint64_t delivered_seen = 0;       // the receiver's `delivered` as last read
    std::vector<std::uint64_t> marked;      // per slot: k + 1 its footer's mark names
    std::vector<std::uint64_t> data;        // per slot: k + 1 of the message written there
    std::vector<std::uint32_t> freed_seen;  // per slot: the receiver's `freed` as last read

    /// The receiver took every message written (read from its counter: the order gate's
    /// answer).
    bool drained() const noexcept {
        return seg.header().delivered.load(std::memory_order_acquire) == written ||
               seg.header().receiver_stopped.load(std::memory_order_acquire) != 0;
    }
    /// Likewise, first from the footers the receiver wrote to us (no read of its line): a
    /// hint, so a stale one only costs that read.
    bool drained_hinted() const noexcept {
        return taken_hint == static_cast<std::uint32_t>(written) || drained();
    }
    /// Whether the channel could take a message of `size` bytes: it fits a slot, it is not
    /// empty (no footer says an empty message), and the receiver still reads (after a bad
    /// footer it stopped: what goes in would never be taken).
    bool open_for(std::uint32_t size) const noexcept {
        return size != 0 && size <= seg.capacity() &&
               seg.header().receiver_stopped.load(std::memory_order_relaxed) == 0;
    }
    /// The slot message `written` goes to, with the skips up to it written (eager.cpp);
    /// nullopt when no slot is free and passed by the receiver: no credit.
    std::optional<std::uint32_t> claim_slot(std::uint64_t taken) noexcept;
    /// Publishes slot `s`'s footer for message `written`: `word`, then the mark with release.
    void write_footer(std::uint32_t s, std::uint64_t word, std::uint64_t taken) noexcept {
        seg.footer_word(s).store(word, std::memory_order_relaxed);
        seg.footer_mark(s).store(eager_mark(written, taken), std::memory_order_release);
        marked[s] = written + 1;
    }
    /// Message `written` went into slot `s`: the walk and the count go on past it.
    void wrote(std::uint32_t s) noexcept {
        at = (s + 1) % seg.slots();
        ++written;
    }
};

/// Credits a receiver owes one sender for slots its handlers freed, over a connection: they
/// go back on frames to that sender or in credit frames (eager_tcp.cpp), whether the sender
/// writes the slots by frames (tcp_rx) or by put (put_rx).
struct owed_credits {
    std::uint32_t from = 0;
    std::uint32_t slots = 0;
    std::uint32_t pending_credits = 0;  // freed, not yet returned
};

/// A short channel over a connection (eager_tcp.cpp): the receiver's slots are its own
/// memory; the reader places each eager_data frame into a free slot.
struct tcp_rx final : alloc::chunk_owner, owed_credits {
    tcp_rx(std::uint32_t from, std::uint32_t slots, std::uint32_t capacity);
    ~tcp_rx();
    std::uint32_t capacity, stride;
    std::uint32_t id = 0;      // 0: the peer's short channel; else a long channel (persistent)
    std::uint32_t handle = 0;  // a long channel's persistent handle at the sender
    std::byte* mem = nullptr;
    std::vector<std::uint32_t> free_slots;  // LIFO: the warmest slot first
    std::uint32_t held = 0;                 // placed or handed to handlers
    std::uint32_t placed_slot = 0;          // the slot place() gave the frame being read
    bool placed = false;
    std::uint64_t beyond_credits = 0;  // eager_data frames that found no free slot
    void* ctx = nullptr;  // the layer, told when credits are owed (null once it closed)
    void (*credit_due)(void* ctx, tcp_rx& c) noexcept = nullptr;
    void take_back(void* storage, std::size_t) noexcept override;
    const char* name() const noexcept override { return "eager slot (tcp)"; }
};

struct tcp_tx {
    std::uint32_t credits;
    std::uint32_t capacity;
    std::uint32_t channel = 0;  // the receiver's id for a long channel (eager_data's tag)
};

// ---- channels written by one-sided put (eager_put.cpp) ---------------------------------

/// The receiver's side: slots in memory registered with the provider the sender reaches us
/// by, which that sender writes by put (eager.hpp, "channels written by one-sided put").
struct put_rx final : alloc::chunk_owner, owed_credits {
    put_rx(std::uint32_t from, std::uint32_t id, std::uint32_t slots, std::uint32_t capacity);
    ~put_rx();
    put_rx(const put_rx&) = delete;
    put_rx& operator=(const put_rx&) = delete;
    std::uint32_t id, capacity, stride;
    std::byte* mem = nullptr;  // slots x stride, page-aligned
    std::size_t bytes = 0;
    provider* prov = nullptr;
    registered reg;              // the slots as the sender's provider names them
    bool wakes = false;          // a put arrives as frames, which wake a sleeping loop (tcp)
    std::uint32_t next = 0;      // messages taken: the next one is in slot next % slots
    std::uint32_t returned = 0;  // messages whose slot went back as a credit, in slot order
    std::uint32_t held = 0;      // slots handed to handlers and not freed yet
    bool closing = false;        // we asked the sender to stop (idle, or a bad footer)
    bool stopped = false;        // a bad footer: nothing more is taken from it
    bool done = false;           // the sender stopped (closed) or died: no more puts come
    use_mark use;
    std::uint64_t suspect = 0;  // a bad word seen once: bad only if the next look sees it again
    bool suspecting = false;
    // The layer, told of freed slots (null once it closed), and how (eager_put.cpp).
    void* ctx = nullptr;
    void (*credit_due)(void* ctx, put_rx& c) noexcept = nullptr;

    std::byte* slot(std::uint32_t i) const noexcept { return mem + std::size_t{i} * stride; }
    /// Slots freed by handlers, in slot order from the oldest unreturned: credits owed now.
    void count_freed() noexcept;
    void take_back(void* storage, std::size_t) noexcept override;
    const char* name() const noexcept override { return "eager slot (put)"; }
};

struct put_tx;

/// One put into one slot: the message with its footer (or, where the provider may place a
/// put's bytes in any order, the message and then the footer apart). Immovable: the provider
/// points at it from post_put until complete().
struct put_op final : op_completion {
    put_tx* channel = nullptr;
    std::uint32_t slot = 0;
    enum : std::uint8_t { idle, message, footer } stage = idle;
    void complete(op_result r) noexcept override;
};

/// The sender's side: the receiver's slots, our credits for them, and a staging copy of each
/// slot in our own memory that each put reads from.
struct put_tx {
    put_tx(std::uint32_t to, const net::eager_put_open_payload& open, provider& prov);
    ~put_tx();
    put_tx(const put_tx&) = delete;
    put_tx& operator=(const put_tx&) = delete;
    // The layer, told of each put's completion (eager_put.cpp).
    void* ctx = nullptr;
    void (*put_done)(void* ctx, put_op& op, op_result r) noexcept = nullptr;
    std::uint32_t to, id, slots, capacity, stride;
    provider& prov;
    remote_memory remote;  // the receiver's slots
    bool footer_apart;     // !caps().put_in_order
    std::byte* staging = nullptr;
    std::size_t bytes = 0;
    std::unique_ptr<put_op[]> ops;  // one per slot
    std::uint32_t credits, next = 0, in_flight = 0;
    // Stream messages that wait for puts in flight to land (they must not overtake them),
    // and any message behind those, in send order.
    std::deque<held_send> behind;
    bool posting = false;    // inside post_put: a completion now only counts
    bool releasing = false;  // sending the front of `behind`
    bool closing = false;    // the receiver asked us to stop: closed goes once nothing flies
};

struct persistent_out {
    std::uint32_t dest;
    std::uint32_t max_bytes;
    std::unique_ptr<eager_tx> channel;  // null until the receiver opened it (or refused)
    bool refused = false;
    std::unique_ptr<tcp_tx> tcp;  // over a connection: the receiver's long buffers, our credits
};

struct peer {
    bool same_host = false;
    // Set-up (layer.cpp): our offer went out; ready once its offer and its verdict on ours
    // are both in; sendable once the sends that waited (`waiting`) have gone too.
    bool offer_sent = false;
    bool ready = false;
    bool sendable = false;
    bool lost = false;
    std::deque<held_send> waiting;
    std::optional<shm_ring> staged_ring;  // its ring for us, mapped at its offer: used once ready
    std::optional<shm_doorbell> staged_bell;
    std::unique_ptr<event> ready_event;  // until_ready() waits here (made on first wait)
    // The stream path: a ring when this host's peer mapped it, else the connection.
    std::optional<shm_ring> out_ring;  // the peer's ring for what we send it
    std::optional<shm_doorbell> out_bell;
    std::deque<ring_out> out_queue;
    std::optional<shm_ring> in_ring;  // ours, for what it sends us
    void* assembling = nullptr;       // a message arriving in several records
    /// ring_drain is taking this peer's channels before a flagged record it has peeked: a
    /// drain nested in a delivery (a handler's send that runs the loop) must not take the
    /// record too.
    bool taking_channels = false;
    std::uint32_t total = 0, filled = 0, tag = 0;
    std::uint16_t flags = 0;
    // One-sided: what we read the peer with, and what it reads us with (so we register
    // what we publish to it there).
    provider_kind get_with = provider_kind::tcp;
    provider_kind publish_with = provider_kind::tcp;
    bool offer_seen = false;
    bool verdict_known = false;
    // In-order delivery behind rendezvous still being fetched.
    std::deque<held_message> held;
    // RNDV_FETCHES: fetches from this peer that run at once; the rest wait their turn, so
    // a window of large messages recycles a few hot buffers instead of touching one each.
    std::unique_ptr<semaphore> fetch_slots;
    // Shared puts to this peer (shared_put.cpp): one at a time uses its ring's block.
    std::shared_ptr<semaphore> share_slot;
    std::uint32_t share_serial = 0;
    // Eager channels (eager.cpp). Sending: the short channel this peer opened for us, and
    // the path of our last message to it when that was a channel (the gate: the ring and
    // other channels wait until the receiver took everything on it).
    std::unique_ptr<eager_tx> eager_out;
    eager_tx* gate = nullptr;
    std::unique_ptr<eager_segment> gate_segment;  // a dropped gate channel, until drained
    std::uint64_t gate_drain = 0;
    // ring_polls at may_switch_to's last ask, or at the last message ring_write_now wrote:
    // a message after it in the same turn of the loop belongs to a burst (ring_burst_write).
    std::uint64_t caught_up_asked_at = ~std::uint64_t{0};
    // Receiving: the short channel we opened for this peer, and the busy-sender window.
    eager_rx* eager_in = nullptr;
    std::unique_ptr<tcp_rx> tcp_in;   // over the connection: our slots for this sender
    std::unique_ptr<tcp_tx> tcp_out;  // its slots for us: the credits we hold
    std::vector<std::unique_ptr<tcp_rx>> tcp_long;  // our long buffers for its persistent handles
    std::unique_ptr<put_rx> put_in;   // our slots this peer writes by put (eager_put.cpp)
    std::unique_ptr<put_tx> put_out;  // its slots we write by put
    // Messages on the connection, counted the same on both sides (stream_counts): a put's
    // footer names how many went before it, so the receiver delivers it in its place.
    std::uint32_t streamed = 0;      // frames carrying a message we posted to this peer
    std::uint32_t stream_taken = 0;  // such frames this peer sent us that we took
    bool eager_refused = false;
    // Persistent requests that came before the pair was set up here: where the buffers go
    // (shared memory or our own memory over the connection) follows the pair's paths, which
    // the requester already knows and we do not yet (on_persistent_request).
    std::vector<net::persistent_request_payload> early_requests;
    std::uint64_t window_start_ns = 0;
    std::uint32_t window_count = 0;
    bool eager_due = false;  // a busy window filled before the set-up completed
    // Short channels to this sender that retired without carrying a message, in a row, and
    // when a busy window may open the next one: a sender whose larger messages always
    // follow small ones on the ring never uses its channel (the order rule), and would
    // otherwise get a new one every retirement period (eager_retire_idle).
    std::uint8_t unused_channels = 0;
    std::uint64_t reopen_at_ns = 0;
};

/// Every eager channel of this PE (eager.cpp).
struct eager_state {
    eager_state();
    ~eager_state();
    std::vector<std::unique_ptr<eager_rx>> polled;                 // channels we receive on
    std::unordered_map<std::uint32_t, persistent_out> persistent;  // our handles, by id
    std::vector<std::uint32_t> current;  // CmiUsePersistentHandle's handles
    std::uint32_t next_id = 1, next_handle = 1;
    std::uint64_t next_sweep_ns = 0;
    // Each sweep's polls (eager_clock_tick): one count per poller, since a count both
    // advanced would give every 64th poll to whichever poller runs at those parities.
    std::uint32_t ring_sweep_polls = 0, put_sweep_polls = 0;
    std::uint64_t sends = 0, receives = 0, no_credit = 0, order_waits = 0, opened = 0, refused = 0,
                  bad_footers = 0, ring_after_channel = 0, retired = 0, replaced = 0;
    // Channels written by put (eager_put.cpp).
    std::vector<std::uint32_t> put_sources;             // peers whose put_in we poll
    std::vector<std::unique_ptr<put_rx>> put_draining;  // done, slots still held
    std::vector<std::unique_ptr<put_tx>> put_finished;  // closed; freed at the next poll
    std::uint64_t put_sends = 0, put_receives = 0, put_waits = 0;
};

struct rndv_out;
struct rndv_in;

/// A provider operation that completes before post_* returns (cma), or not yet.
struct sync_completion final : op_completion {
    op_result result;
    bool done = false;
    void complete(op_result r) noexcept override {
        result = std::move(r);
        done = true;
    }
};

/// The mesh's sent callback for a frame whose completion is a send_completion.
void mesh_sent(void* ctx, int result);

/// The footer a broken sender writes for `fault` in its slot of `capacity` bytes whose turn
/// is `seq` (layer::inject_bad_eager_footer, shared memory and put alike).
constexpr eager_footer bad_footer_for(layer::footer_fault fault, std::uint16_t seq,
                                      std::uint32_t capacity) noexcept {
    switch (fault) {
        case layer::footer_fault::unknown_sentinel:
            return {0x0BAD, seq, 8};
        case layer::footer_fault::size_beyond_slot:
            return {eager_sentinel::data, seq, capacity + 1};
        case layer::footer_fault::sequence_skipped:
            break;
    }
    return {eager_sentinel::data, static_cast<std::uint16_t>(seq + 1), 8};
}

/// Frames that carry a message: both sides count them per peer (peer::streamed and
/// stream_taken), in the one order the connection keeps.
constexpr bool stream_counts(net::frame_type t) noexcept {
    return t == net::frame_type::standard || t == net::frame_type::publish ||
           t == net::frame_type::eager_data;
}

/// "/coverse-KEY-": what starts every shared-memory name of job `key` (rings, eager channels,
/// doorbells).
std::string job_shm_prefix(std::uint64_t key);
/// "/coverse-KEY-PE-": what starts the shm_open name of every ring and eager channel that PE
/// `pe` of job `key` creates (and nothing else's), so what a crashed PE left can be found.
std::string pe_shm_prefix(std::uint64_t key, std::uint32_t pe);

struct layer::impl {
    impl(layer& self, scheduler& sched, layer_config cfg, upcalls& up);
    ~impl();

    layer& self;
    scheduler& sched;
    net::mesh* mesh = nullptr;
    layer_config cfg;
    upcalls& up;
    std::vector<peer> peers;
    bool closed = false;

    std::unique_ptr<cma_provider> cma;
    std::unique_ptr<tcp_provider> tcp;
    std::unique_ptr<provider> verbs;
    std::string verbs_why;
    std::uint32_t offers = 0, verdicts = 0, ready_peers = 0;
    /// While connect() waits (CONNECT=eager, `counting_setup`): the set-up frames (offers,
    /// verdicts) queued and not yet in the kernel, so connect() returns only when they have
    /// left (a PE that stops polling right after it would keep the verdict its peer waits for
    /// in its writer).
    std::size_t setup_controls = 0;
    bool counting_setup = false;
    // Who shares this host is known from connect() on; offers that came before it (a
    // faster peer set up with us first) wait here, in order.
    bool table_known = false;
    std::vector<std::pair<std::uint32_t, net::frame>> early_offers;
    std::size_t holding = 0;  // sends waiting in some peer's `waiting`
    std::string refusals;     // the one notice about a provider a peer could not use
    bool refusals_said = false;

    // ---- start-up (layer.cpp) -----------------------------------------------------------
    provider_kind offer_for(std::uint32_t p) const;
    provider* provider_of(provider_kind k) const noexcept;
    int post_address(std::uint32_t p, std::uint32_t stage, provider_kind kind,
                     std::span<const std::byte> blob);
    void on_address(std::uint32_t from, const net::frame& f);
    /// Our side of the set-up with `p` (layer.hpp): our ring for it, our offer. Once.
    void setup_start(std::uint32_t p);
    /// Ready once both halves are in: the waiting sends go, in order.
    void setup_check(std::uint32_t p);
    void hold(std::uint32_t dest, const std::byte* buf, std::uint32_t size, bool broadcast,
              std::uint32_t root, send_completion* done);
    void fail_waiting(std::uint32_t p, int result);

    // ---- routing and delivery (layer.cpp) -------------------------------------------------
    void stream_send(std::uint32_t dest, net::frame_type type, bool broadcast, std::uint32_t root,
                     std::span<const std::byte> bytes, send_completion* done);
    /// A small control payload (publish, get_done, ...) the layer owns until it is sent.
    /// Returns 0, or -errno when the path to `dest` is down (nothing was queued).
    int stream_control(std::uint32_t dest, net::frame_type type, bool broadcast, std::uint32_t root,
                       std::span<const std::byte> payload);
    void deliver(std::uint32_t from, void* msg, std::uint32_t size, bool broadcast,
                 std::uint32_t root);
    void release_held(std::uint32_t from);
    bool on_frame(std::uint32_t from, net::frame_type type, std::uint16_t flags, std::uint32_t tag,
                  std::span<const std::byte> payload);
    mutable std::array<std::array<std::array<std::optional<protocol_table>, 2>, 4>, 2> tables;
    const protocol_table& table_for(std::uint32_t pe) const noexcept;
    std::string eager_for(std::uint32_t pe) const;

    // ---- the same-host rings (shm_path.cpp) -----------------------------------------------
    void shm_create();
    void remove_stale_names();  // after replacing a crashed job's doorbell of this PE
    /// The poller and the doorbell's task (after the node table).
    void shm_start();
    /// Our ring for what `p` sends us (same host); a failure is said once, `p` uses TCP.
    void shm_ring_for(std::uint32_t p);
    /// `p`'s ring for what we send it, mapped at its offer (kept staged until ready).
    void shm_map_peer(std::uint32_t p);
    /// Spinning enters the kernel less while every peer set up so far is on rings.
    void shm_update_rings_only();
    void shm_close();
    void ring_send(std::uint32_t dest, net::frame_type type, bool broadcast, std::uint32_t root,
                   std::span<const std::byte> bytes, send_completion* done);
    /// One record into `dest`'s ring now, if order allows (nothing queued, the gate open)
    /// and it fits; else false and nothing done.
    bool ring_write_now(std::uint32_t dest, net::frame_type type, bool broadcast,
                        std::uint32_t root, std::span<const std::byte> bytes) noexcept;
    /// A message in the middle of a burst on `dest`'s ring straight into it, when the loop
    /// has not turned since its consumer was last seen behind (so no channel would take it);
    /// else false and nothing done.
    bool ring_burst_write(std::uint32_t dest, const std::byte* buf, std::uint32_t size) noexcept;
    bool ring_pump(std::uint32_t dest);
    bool ring_poll();
    /// A whole message from `p`'s ring went up: the busy-sender window counts it.
    void note_ring_message(std::uint32_t p, std::uint32_t size);
    /// Whether a same-host short channel is for a message of `size` bytes (header included):
    /// over EAGER_SHORT_MINIMUM, below which the ring is as fast, and within a slot. Such
    /// messages take its slots (eager_send), are counted as one it could have taken
    /// (ring_burst_write), and earn a channel (note_ring_message).
    bool short_channel_size(std::uint32_t size) const noexcept {
        return size > cfg.eager_short_minimum && size <= cfg.eager_short_bytes;
    }
    bool ring_try_sleep();
    void ring_wake();
    static task<void> bell_task(impl* self);
    class ring_poller final : public poller {
    public:
        explicit ring_poller(impl& m) : _m(m) {}
        bool poll() override { return _m.ring_poll(); }
        bool try_sleep() override { return _m.ring_try_sleep(); }
        void wake() override { _m.ring_wake(); }

    private:
        impl& _m;
    };
    std::optional<shm_doorbell> bell;
    std::unique_ptr<ring_poller> poller_;
    std::size_t ring_queued = 0;   // records waiting in any out_queue
    std::uint64_t ring_polls = 0;  // ring_poll calls so far: a sender's "has the loop turned?"
    /// The peers whose ring into this PE is mapped (in_ring), which ring_poll reads; call
    /// refresh_ring_sources() after any in_ring is made or dropped.
    std::vector<std::uint32_t> ring_sources;
    void refresh_ring_sources();
    bool ring_drain(std::uint32_t p);  // the records from p's ring, a bounded batch
    bool shm_wanted = false;
    bool shm_failed = false;
    bool ring_failure_said = false;
    bool heavy_fence_failure_said = false;  // ring_try_sleep: said once

    // ---- eager channels (eager.cpp) ------------------------------------------------------
    eager_state eager;
    /// Into an eager channel to `dest` now, if it has one with a free slot and order allows;
    /// `done` (null from try_send_now) hears via_eager and sent(0).
    bool eager_send(std::uint32_t dest, const std::byte* buf, std::uint32_t size,
                    send_completion* done);
    bool gate_drained(std::uint32_t dest) noexcept;
    bool may_switch_to(std::uint32_t dest, const eager_tx* path) noexcept;
    bool eager_poll();
    /// Up to `limit` messages from channel c; with `only_from`, a receiver-initiated channel
    /// is attached only if that PE is its sender.
    bool eager_take(eager_rx& c, int limit, std::uint32_t only_from);
    /// Every message published in `from`'s channels to us (a ring record flagged
    /// after_channel comes after them).
    void eager_take_from(std::uint32_t from);
    bool eager_pending() const noexcept;
    void eager_bad_footer(eager_rx& c, std::uint32_t slot, const eager_footer_error& e);
    /// The notice for a bad footer in `from`'s channel (shared memory or put).
    void note_bad_footer(std::uint32_t from, std::uint32_t slot, const eager_footer_error& e);
    void eager_note_stream_message(std::uint32_t from);
    /// Opens a short channel for `from`'s messages (shared memory, put or frames), unless
    /// one is open, it was refused, or the pollset is full.
    void eager_open_short(std::uint32_t from);
    eager_rx* eager_create(std::uint32_t from, eager_kind kind, std::uint32_t slots,
                           std::uint32_t capacity);
    void eager_announce(eager_rx& c, std::uint32_t handle);
    eager_rx* eager_find_rx(std::uint32_t from, std::uint32_t id) noexcept;
    void eager_retire_idle();
    /// The idle sweeps' clock: the time on every 64th of a poller's polls (`polls`, its
    /// count), else 0. eager_unused, at such a time: whether a channel took no message for
    /// longer than a channel stays open unused.
    static std::uint64_t eager_clock_tick(std::uint32_t& polls) noexcept;
    bool eager_unused(use_mark& use, std::uint64_t now) const noexcept;
    /// How long a short channel stays open unused: 10 EAGER_INTERVALs, at least 100 ms.
    std::uint64_t eager_idle_period_ns() const noexcept;
    static std::uint64_t coarse_now_ns() noexcept;
    void on_eager_channel(std::uint32_t from, const net::eager_channel_payload& f);
    void on_persistent_request(std::uint32_t from, const net::persistent_request_payload& r);
    void eager_persistent_refused(std::uint32_t handle);
    void eager_drop_tx(std::uint32_t dest, eager_tx* c);
    void eager_peer_lost(std::uint32_t pe);
    void eager_close();
    // over a connection (eager_tcp.cpp)
    /// mesh::post_copy's lost_callback: up.on_copies_lost.
    static void copies_lost(void* ctx, std::uint32_t pe, int result);
    bool tcp_eager_send(std::uint32_t dest, const std::byte* buf, std::uint32_t size,
                        send_completion* done);
    void tcp_credit_spent(std::uint32_t dest, tcp_tx& c, bool long_channel) noexcept;
    void tcp_credit_missing() noexcept;
    void tcp_eager_open(std::uint32_t from);
    int tcp_announce(std::uint32_t to, eager_kind kind, std::uint32_t channel, std::uint32_t handle,
                     const tcp_rx& c);
    bool tcp_long_open(std::uint32_t from, const net::persistent_request_payload& r);
    void tcp_long_opened(std::uint32_t from, const net::eager_channel_payload& f);
    void tcp_long_credit(std::uint32_t from, const net::eager_channel_payload& f);
    bool tcp_long_destroyed(std::uint32_t from, std::uint32_t channel);
    tcp_rx* tcp_channel_of(std::uint32_t pe, std::uint32_t id) noexcept;
    tcp_tx* tcp_persistent_for(std::uint32_t dest, std::uint32_t size) noexcept;
    static void retire_tcp_rx(std::unique_ptr<tcp_rx> c);
    void tcp_long_return(tcp_rx& c) noexcept;
    // written by one-sided put (eager_put.cpp)
    bool put_wanted(std::uint32_t from) const noexcept;
    bool put_open(std::uint32_t from);
    void on_put_open(std::uint32_t from, const net::eager_put_open_payload& f);
    /// Into `dest`'s put channel now, or queued behind puts still landing; false: the caller
    /// sends it by its usual path (counted there).
    bool put_send(std::uint32_t dest, const std::byte* buf, std::uint32_t size, bool broadcast,
                  std::uint32_t root, send_completion* done);
    void put_post(put_tx& c, std::uint32_t offset, std::uint64_t head, std::uint64_t word);
    void put_done(put_op& op, op_result r) noexcept;
    void put_settle(put_tx& c);
    bool put_inject_bad_footer(std::uint32_t dest, footer_fault fault);
    bool put_take(put_rx& c);
    /// A frame carrying a message from `from` arrived: the puts it sent before it go first.
    void put_stream_message(std::uint32_t from);
    void put_bad_footer(put_rx& c, std::uint32_t slot, const eager_footer_error& e);
    bool put_close(std::uint32_t from, std::uint32_t channel);
    bool put_closed(std::uint32_t from, std::uint32_t channel);
    void put_rx_done(std::uint32_t from);
    void put_tell(std::uint32_t to, net::eager_action action, std::uint32_t channel);
    void put_start_polling();
    bool put_poll();
    bool put_try_sleep() const noexcept;
    void put_retire_idle();
    bool put_idle() const noexcept;
    void put_peer_lost(std::uint32_t pe);
    void put_close_all();
    static void retire_put_rx(std::unique_ptr<put_rx> c);
    static void retire_put_tx(std::unique_ptr<put_tx> c);
    class put_poller final : public poller {
    public:
        explicit put_poller(impl& m) : _m(m) {}
        bool poll() override { return _m.put_poll(); }
        bool try_sleep() override { return _m.put_try_sleep(); }

    private:
        impl& _m;
    };
    std::unique_ptr<put_poller> put_poller_;
    std::byte* tcp_eager_place(std::uint32_t pe, const net::frame_header& h) noexcept;
    void tcp_eager_take(std::uint32_t pe, net::frame& f);
    void tcp_credits_back(std::uint32_t pe, std::uint32_t n) noexcept;
    void tcp_return_credits(owed_credits& c) noexcept;
    std::uint16_t tcp_credits_for(std::uint32_t pe) noexcept;
    void tcp_send_credits(owed_credits& c) noexcept;
    static void on_credit_timer(timer_node* t) noexcept;
    // Armed while a connection channel owes credits that no frame has carried yet: a sender
    // whose traffic stopped short of half the slots still gets them back (eager_tcp.cpp).
    timer_node credit_timer;
    std::uint64_t tcp_eager_sends = 0, tcp_eager_receives = 0, tcp_no_credit = 0, credit_frames = 0,
                  credits_back = 0;

    // ---- rendezvous (rendezvous.cpp) --------------------------------------------------------
    void rendezvous_send(std::uint32_t dest, const std::byte* buf, std::uint32_t size,
                         bool broadcast, std::uint32_t root, send_completion* done);
    void rendezvous_receive(std::uint32_t from, const net::publish_payload& offer, bool broadcast,
                            std::uint32_t root);
    void on_get_done(std::uint32_t from, const net::get_done_payload& d);
    void on_split_request(std::uint32_t from, const net::rma_request_payload& r);
    void on_split_done(std::uint32_t from, const net::rma_complete_payload& c);
    void fail_rendezvous_with(std::uint32_t pe);
    void finish_send(rndv_out* o, int result);
    static task<void> receive_task(impl* self, rndv_in* in);
    std::unordered_map<std::uint32_t, rndv_out*> outgoing;  // our publishes, by id
    std::uint32_t next_id = 1;
    std::unordered_map<std::uint64_t, rndv_in*> fetching;  // (from << 32 | id) -> receive
    std::size_t incoming = 0;                              // receives not finished yet

    // ---- shared puts and gets (shared_put.cpp) ----------------------------------------------
    task<op_result> shared_transfer(std::uint32_t pe, bool is_get, std::span<std::byte> local,
                                    remote_memory remote);
    /// The notice of a shared put or get `serial` from `from` (its ring's block): help.
    void on_put_share(std::uint32_t from, std::uint32_t serial);
    static task<void> help_transfer(impl* self, std::uint32_t from, std::uint32_t serial);
    void abandon_shared(std::uint32_t pe, std::uint32_t serial, std::uint32_t chunks) noexcept;
    bool fail_share_chunk = false;    // fail_next_shared_chunk()
    std::uint64_t share_hold_ns = 0;  // hold_shared_transfers_for_target()
    bool eager_polls_held = false;    // hold_eager_polls_until_a_ring_record_follows()

    task_scope tasks{"rdma layer"};
};

}  // namespace coverse::rdma
