// The rdma layer of one PE: everything between the machine core and the wire. It owns the
// stream path to each peer (a shared-memory ring on this host, else the mesh connection),
// the provider that moves large messages to each peer (cma, tcp or verbs, chosen per peer),
// the rendezvous protocol, and the demultiplexing of its own frames. The machine core hands
// it messages with a typed completion and gets back one upcall per complete message, in the
// order each peer sent them, whatever path each took.
//
// Stages: prepare (providers, this PE's doorbell) -> attach (the mesh, before it connects:
// the layer sees every frame first) -> connect (the node table: who shares this host;
// CONNECT=eager sets up every peer now and waits, lazy each peer on first use) -> running
// -> drain (no rendezvous left in flight; the mesh's disconnect handshake serves what peers
// still started) -> close.
//
// Set-up with one peer (on the first send to it, or its offer, whichever comes first):
// create our ring for what it sends us (same host) -> offer it the provider to read us with
// (stage 1, on the connection, which the mesh dials on this first frame) -> its offer
// arrives: map its ring for us, answer with our verdict (stage 2) -> its verdict arrives:
// it mapped our ring, whose name goes -> ready: the sends that waited go, in order, and
// from then on every message takes the ring or the connection directly. Until ready nothing
// goes to that peer but the set-up frames and the layer's control frames (try_send_now
// refuses it, send() queues behind the set-up).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <coverse/net/mesh.hpp>
#include <coverse/rdma/protocols.hpp>
#include <coverse/rdma/provider.hpp>
#include <coverse/runtime/scheduler.hpp>
#include <coverse/runtime/scope.hpp>
#include <coverse/runtime/task.hpp>

namespace coverse::rdma {

/// The completion of one send: called once, when the caller's buffer may be reused or
/// freed (0), or when the send failed (-errno: -EPIPE for a peer that is gone).
class send_completion {
public:
    virtual void sent(int result) noexcept = 0;
    /// Called just before sent() when the message went into an eager channel (a short slot,
    /// or a persistent handle's long buffer) instead of the protocol its size picks.
    virtual void via_eager(bool long_buffer) noexcept { (void)long_buffer; }

protected:
    ~send_completion() = default;
};

/// What the layer hands up to the machine core.
class upcalls {
public:
    /// A complete message from `from` (message memory, now owned by the callee), in the
    /// order `from` sent it. `broadcast` with `root` for a spanning-tree broadcast.
    virtual void on_message(std::uint32_t from, void* msg, std::uint32_t size, bool broadcast,
                            std::uint32_t root) = 0;
    /// A message from `from` that could not be fetched (the peer died mid-rendezvous, it
    /// refused the memory it published): nothing is delivered for it, and later messages
    /// from that peer still come up in order. The text names both PEs, the size and the
    /// cause. The machine core stops the job; a test may go on.
    virtual void on_lost_message(std::uint32_t from, std::uint64_t size,
                                 const std::string& text) = 0;
    /// A failure that stops the job: the text names the PE, the phase and the cause.
    [[noreturn]] virtual void on_fatal(const std::string& text) = 0;
    /// A one-time note for the user (a provider fallback), printed through the launcher.
    virtual void on_notice(const std::string& text) = 0;
    /// The set-up with `pe` is done (stream path and providers chosen; path_to() says which).
    virtual void on_peer_ready(std::uint32_t pe) { (void)pe; }
    /// Messages try_send_now() had copied for `pe`'s connection could not be sent (`result`,
    /// -errno): the connection failed with them queued or being written (not when our own
    /// shutdown stopped it). The machine core stops the job as for any failed send to a
    /// lost PE.
    virtual void on_copies_lost(std::uint32_t pe, int result) {
        (void)pe;
        (void)result;
    }

protected:
    ~upcalls() = default;
};

/// A peer as the node table describes it.
struct peer_info {
    std::uint64_t machine_id = 0;  // same value: same host
};

struct layer_config {
    std::uint32_t rank = 0;
    std::uint32_t num_pes = 1;
    std::uint64_t job_key = 0;
    /// SMALL/MEDIUM_MESSAGE_BOUNDARY: up to medium a message is one stream frame.
    std::uint32_t small_boundary = 2048;
    std::uint32_t medium_boundary = 16384;
    /// MAX_MESSAGE: the largest rendezvous offer we accept from a peer.
    std::uint64_t max_message = 0x7FFF'FFFFu;
    /// SHM / SHM_RING_BYTES: same-host stream through shared-memory rings.
    bool shm = true;
    std::size_t shm_ring_bytes = 256 * 1024;
    /// RDMA_PROVIDER: force one provider for every peer (nullopt: choose per peer).
    std::optional<provider_kind> forced;
    /// RNDV_CHUNK: a rendezvous get is posted in pieces of at most this many bytes.
    std::size_t rndv_chunk = 4u << 20;
    /// RNDV_SPLIT: from this size a same-host rendezvous, and a one-sided put or get over
    /// cma, is copied by both PEs at once.
    std::size_t rndv_split = 256u << 10;
    /// The chunks a shared put or get is cut into (shared_put()), at least 2. Each PE keeps
    /// copying the same part of a buffer put again and again only with 2: 3 ran at
    /// 0.7-1.0x the facade at 1 MiB, 256 KiB chunks at 0.9-1.2x, halves at 1.2-1.5x
    /// (docs/perf.md, stop 27).
    std::size_t share_pieces = 2;
    /// RNDV_FETCHES: rendezvous fetched from one peer at once (the rest queue, in order).
    std::size_t rndv_fetches = 2;
    /// EAGER_PROTOCOL and friends: receivers open short channels to busy same-host senders.
    bool eager = true;
    std::uint64_t eager_interval_ns = 10'000'000;
    std::uint32_t eager_threshold = 1000;
    std::uint32_t eager_slots = 16;
    std::uint32_t eager_short_bytes = 16384;
    /// EAGER_SHORT_MINIMUM: a same-host message of at most this many bytes (header
    /// included) goes by the ring even while its receiver's short channel is open, and does
    /// not count toward opening one: up to 512 bytes the ring's record is as fast or faster
    /// than a slot (8 B one-way 0.36 against 0.39 µs; 1 KiB 0.77 against 0.57; docs/perf.md,
    /// stop 32). Persistent channels, and channels over a connection, take every size.
    std::uint32_t eager_short_minimum = 512;
    std::size_t eager_pollset = 32;
    /// EAGER_CREDIT_DELAY: freed slots owed to a sender over a connection go back in a
    /// credit frame after at most this long when nothing else carries them (0: only once
    /// half the slots are owed).
    std::uint64_t eager_credit_delay_ns = 200'000;
    /// EAGER_REMOTE: how the short channel of a peer over a connection is written: by
    /// one-sided put into the receiver's registered slots (put), by eager_data frames the
    /// receiver's reader places (frames), or put where the pair's provider is verbs (auto).
    enum class eager_remote_mode : std::uint8_t { automatic, put, frames };
    eager_remote_mode eager_remote = eager_remote_mode::automatic;
    /// Whether a channel over a connection whose slots are published with `k` is written by
    /// put (else by frames): EAGER_REMOTE=put, or verbs under auto.
    bool eager_by_put(provider_kind k) const noexcept {
        return eager_remote != eager_remote_mode::frames &&
               (eager_remote == eager_remote_mode::put || k == provider_kind::verbs);
    }
    /// EAGER_LONG_BUFFERS / EAGER_LONG_BUFFER_SIZE: a persistent handle's channel.
    std::uint32_t eager_long_buffers = 3;
    std::uint32_t eager_long_bytes = 1u << 20;
    /// CONNECT=lazy: each peer is set up on first use; false: connect() sets up all.
    bool lazy = false;

    /// Reads every setting above from the registry (rank, num_pes, job_key stay).
    static layer_config from_settings();
};

class layer final : private net::frame_hook {
public:
    layer(scheduler& sched, layer_config cfg, upcalls& up);
    ~layer();
    layer(const layer&) = delete;
    layer& operator=(const layer&) = delete;

    /// Makes the providers and this PE's doorbell (the rings come with each peer's set-up).
    /// A PE without shared memory says so and uses TCP both ways.
    void prepare();
    /// The connection mesh to every peer: installs the layer as its frame hook. Before
    /// the mesh's establish(), so no frame passes the layer by.
    void attach(net::mesh& mesh);
    /// Learns who shares this host. Eager (layer_config::lazy false): sets up every peer and
    /// blocks (nested progress) until each is ready. Lazy: returns; a peer is set up by the
    /// first send to it or by its offer.
    void connect(std::span<const peer_info> peers);
    /// Whether the set-up with `pe` is done (sends to it go straight to their path).
    bool ready(std::uint32_t pe) const noexcept;
    /// Starts the set-up with `pe` if it has not begun, and completes once it is done or the
    /// peer is lost: a one-sided transfer needs the provider the set-up picks. Cancellable.
    task<void> until_ready(std::uint32_t pe);

    /// Sends one message to `dest` (not this PE). The buffer stays valid until
    /// `done->sent()`; `done` may be called before send() returns.
    void send(std::uint32_t dest, const std::byte* buf, std::uint32_t size, bool broadcast,
              std::uint32_t root, send_completion* done);

    /// The small-message fast path: copies a message of at most MEDIUM bytes (not a
    /// broadcast) into `dest`'s eager slot or ring, or for a peer on the connection into
    /// the frames it holds copied (mesh::post_copy, sent when the caller flushes), right
    /// now and returns true — the send is then complete, the buffer free, and no
    /// completion is called. False (nothing done) when it cannot go at once: earlier
    /// messages still queued for it, a full ring, a connection whose copies are being
    /// written, a persistent handle or put channel in use; the caller then sends it with
    /// send(), in order behind whatever went before.
    bool try_send_now(std::uint32_t dest, const std::byte* buf, std::uint32_t size) noexcept;

    /// True when no rendezvous runs (either direction) and no stream send is queued.
    bool idle() const noexcept;
    /// Nested progress until idle() (shutdown: finish every rendezvous first).
    void drain();
    /// Unmaps rings, stops the layer's tasks, releases providers. After the mesh shut down.
    void close();
    /// Removes this PE's shared-memory names (doorbell, rings into it, eager channels it
    /// made) without closing anything: for a PE about to exit at once (CmiAbort, a failed
    /// PE). With `whole_job`, every
    /// name of this job in /dev/shm, the other PEs' on this host too: the job is ending, and
    /// a resource manager may stop them with SIGKILL, which leaves theirs behind (Slurm
    /// after a PMIx_Abort). Mappings and open descriptors stay valid.
    void unlink_names(bool whole_job = false) noexcept;

    /// A peer died: fail what is in flight with it (the machine core decides what follows).
    void peer_lost(std::uint32_t pe);

    // ---- persistent handles (eager long channels; eager.cpp) -------------------------------
    /// Asks `dest` for a long channel of `max_bytes` messages; returns the handle at once
    /// (sends on it go the usual ways until the receiver opened the channel, or for good if
    /// it refused: no resources, another host, a send to self).
    std::uint32_t persistent_create(std::uint32_t dest, std::uint32_t max_bytes);
    /// Receiver-initiated: a long channel any one sender may attach to. {0, 0} when this PE
    /// has no resources for one.
    struct persistent_offer {
        std::uint32_t channel = 0;
        std::uint32_t capacity = 0;
    };
    persistent_offer persistent_create_receiver(std::uint32_t max_bytes);
    /// The sender's side of a receiver-initiated channel: attaches and returns a handle.
    std::uint32_t persistent_register_receive(std::uint32_t receiver, std::uint32_t channel,
                                              std::uint32_t capacity);
    /// The handles the following sends use (CmiUsePersistentHandle); empty: none.
    void persistent_use(std::span<const std::uint32_t> handles);
    void persistent_destroy(std::uint32_t handle);
    enum class persistent_state { unknown, pending, open, refused };
    persistent_state persistent_status(std::uint32_t handle) const noexcept;

    struct eager_counters {
        std::uint64_t sends = 0, receives = 0;
        std::uint64_t no_credit = 0;  // a channel had no free slot: the stream path took it
        /// A message to a peer with a channel stayed on the ring, which still carried
        /// earlier ones (a burst's messages count without asking the channel for a slot).
        std::uint64_t order_waits = 0;
        /// A message went by the ring right behind messages in a channel that the receiver
        /// had not taken yet (its record flagged after_channel: the receiver takes them first).
        std::uint64_t ring_after_channel = 0;
        std::uint64_t opened = 0, refused = 0, bad_footers = 0;
        std::uint64_t retired = 0;  // short channels closed because they went unused
        /// Short channels a receiver opened while we still wrote to its previous one (only
        /// a broken receiver does): each replaced the old as a close would.
        std::uint64_t replaced = 0;
        std::size_t polled = 0, writing = 0;  // channels open now, each way
        std::uint64_t credit_frames = 0;      // explicit credit returns (connections)
        std::uint64_t credits_back = 0;       // credits our receivers returned (connections)
        // Channels written by one-sided put (EAGER_REMOTE): messages put, taken from slots,
        // and stream messages that waited for earlier puts to land first.
        std::uint64_t put_sends = 0, put_receives = 0, put_waits = 0;
    };
    eager_counters eager_stats() const noexcept;
    /// What inject_bad_eager_footer writes.
    enum class footer_fault : std::uint8_t {
        unknown_sentinel,  // a sentinel that is none of the four
        size_beyond_slot,  // a data footer larger than its slot
        sequence_skipped,  // a data footer whose sequence number is one past the expected
    };
    /// Fault injection for tests: writes a footer no correct sender writes into a free slot
    /// of our short channel to `dest` (shared memory, or by put), as a broken peer would.
    /// False when there is no channel or every slot is taken (try again later).
    bool inject_bad_eager_footer(std::uint32_t dest,
                                 footer_fault fault = footer_fault::unknown_sentinel);
    /// Fault injection for tests: opens another short channel (shared memory) for `from`
    /// while the one it writes to is open, without closing that one, as a broken receiver
    /// would; the old one is still polled. False when `from` has no such channel here or a
    /// new one cannot be made.
    bool inject_replacing_short_open(std::uint32_t from);

    /// True when a one-sided put or get of `size` bytes with `pe` over `p` (the provider
    /// that reaches `pe`) is shared: from RNDV_SPLIT bytes over cma, with a ring to `pe`,
    /// and yield_while_spinning off (set when the job has more PEs than the cores this PE
    /// may run on).
    bool shares_onesided(const provider& p, std::uint32_t pe, std::size_t size) const noexcept;
    /// A shared put of `local` into `pe`'s `remote` memory, or get of it into `local` (when
    /// shares_onesided() said so): cut into share_pieces chunks (more above RNDV_CHUNK
    /// each) that both PEs claim from the ring's shared-put block, so both cores copy; a
    /// target that is not in its loop claims nothing and this PE copies it all. Completes
    /// when every byte is in place.
    task<op_result> shared_put(std::uint32_t pe, std::span<const std::byte> local,
                               remote_memory remote);
    task<op_result> shared_get(std::uint32_t pe, std::span<std::byte> local, remote_memory remote);

    /// Fault injection for tests: the next chunk this PE copies for a peer's shared put or
    /// get fails, as a failed process_vm_readv would (the initiator then copies it all).
    void fail_next_shared_chunk() noexcept;
    /// For tests: each shared put or get from this PE waits up to `limit` for the target's
    /// first claim before it claims its own chunks (0, the default: it does not wait).
    void hold_shared_transfers_for_target(std::chrono::nanoseconds limit) noexcept;
    /// For tests: the loop does not poll this PE's eager channels until a ring record
    /// flagged after_channel has come, as if its last poll of them had come just before a
    /// sender's burst, so that the ring shows the burst first.
    void hold_eager_polls_until_a_ring_record_follows() noexcept;

    /// The provider that moves large messages to `pe` (after connect()).
    provider_kind provider_for(std::uint32_t pe) const noexcept;
    /// The provider of `kind`, or null (onesided.cpp; users call rdma::provider_of).
    provider* provider_for_onesided(provider_kind kind) noexcept;
    /// One line per kind of peer: "same host: stream/inline <= 2048 B, ..., rndv/get/cma".
    std::string describe() const;
    /// How providers are chosen, for the trace header: "auto: same host cma, other hosts
    /// tcp (verbs: no RDMA device)" or "forced: tcp (RDMA_PROVIDER)".
    std::string provider_summary() const;
    /// The path to one peer, for ++verbose and the multi-host tests: "same host, stream by
    /// shm ring, one-sided by cma" or "other host, stream by connection, one-sided by tcp".
    std::string path_to(std::uint32_t pe) const;

    /// Counters, for tests and coverse-info.
    struct counters {
        std::uint64_t stream_sends = 0;
        /// Of those, sends by try_send_now that took the ring's burst path (lines asked for
        /// ahead): a message behind another to the same peer in one turn of the loop.
        std::uint64_t burst_sends = 0;
        /// Sends by try_send_now to a peer on the connection (copied, mesh::post_copy),
        /// eager slot frames among them.
        std::uint64_t copied_sends = 0;
        std::uint64_t copied_slot_sends = 0;  // of those, eager_data (a slot's credit spent)
        std::uint64_t rendezvous_sends = 0;
        std::uint64_t rendezvous_receives = 0;
        std::uint64_t split_copies = 0;  // rendezvous copied by both PEs at once
        std::uint64_t bytes_by_get = 0;
        std::uint64_t bytes_by_put = 0;
        std::uint64_t shared_puts = 0;    // our puts that offered the target a share
        std::uint64_t shared_gets = 0;    // our gets that did
        std::uint64_t shared_chunks = 0;  // chunks of a peer's put or get this PE copied for it
        std::uint64_t shared_bytes = 0;
        std::uint64_t shared_failures = 0;  // such chunks that failed (the initiator redid them)
    };
    const counters& stats() const noexcept { return _stats; }

private:
    struct impl;
    std::unique_ptr<impl> _impl;
    counters _stats;

    /// try_send_now to a peer on the connection.
    bool copy_to_connection(std::uint32_t dest, const std::byte* buf, std::uint32_t size) noexcept;
    /// send() to a peer whose set-up is done: the path by size and peer.
    void send_direct(std::uint32_t dest, const std::byte* buf, std::uint32_t size, bool broadcast,
                     std::uint32_t root, send_completion* done);

    std::byte* place(std::uint32_t pe, const net::frame_header& header) noexcept override;
    bool take(std::uint32_t pe, net::frame& f) override;
    std::uint16_t credits_for(std::uint32_t pe, net::frame_type type) noexcept override;
};

}  // namespace coverse::rdma
