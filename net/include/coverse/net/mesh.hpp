// mesh: the connection manager. Connects one job's PEs over a backend, either all pairs at
// start-up (CONNECT=eager: each PE dials every lower rank and accepts every higher one) or
// each pair on its first frame (CONNECT=lazy: frames queue behind the dial; when both PEs
// dial at once the lower rank's dial carries the pair and the other is declined), so each
// pair has exactly one connection. It checks every peer's hello (job key, protocol
// version, job size), keeps one ordered send queue and one reader per connection, detects
// dead peers, and runs the disconnect handshake so nothing in flight is lost at shutdown.
//
// Stages of a connection: (lazy: idle, no connection yet) -> connecting (dial with backoff
// / accept; lazy: frames queue) -> hello exchanged -> connected (reader and writer tasks
// run) -> disconnecting (our disconnect frame queued behind all data; waiting for the
// peer's) -> disconnected (both sides half-closed, EOF seen, socket closed). Any unexpected
// EOF, reset or invalid frame, or a dial that gives up -> error.
#pragma once

#include <chrono>
#include <coroutine>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <coverse/net/frame_reader.hpp>
#include <coverse/net/transport.hpp>
#include <coverse/net/wire.hpp>
#include <coverse/runtime/scope.hpp>
#include <coverse/runtime/task.hpp>

namespace coverse::net {

/// A set-up or peer failure, with a message naming the PE, its address, the phase and
/// what to do.
class mesh_error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

enum class connection_state { connecting, connected, disconnecting, disconnected, error, idle };
const char* to_string(connection_state s) noexcept;

/// When a job's connections are made (the CONNECT setting).
enum class connect_mode : std::uint8_t {
    eager,  ///< establish() connects every pair at start-up
    lazy,   ///< a pair connects on its first frame; establish() only starts accepting
};
const char* to_string(connect_mode m) noexcept;

/// The CONNECTION_TIMEOUT setting: 300 s unless the environment says otherwise. A value
/// that is not a positive number of seconds is an error naming the variable.
std::chrono::milliseconds connection_timeout_from_env();

/// The MAX_MESSAGE setting: the largest message a peer may ask this PE to allocate (a
/// rendezvous offer), default_max_message unless set. A value that is not a whole number of
/// bytes from 1 to 2147483647 is an error naming the variable.
std::uint64_t max_message_from_env();

/// The layer above the mesh (rdma/) sees every frame first, inside the connection's reader:
/// it may place a payload where it belongs (one-sided data lands in the requester's buffer,
/// no staging copy) and take frames for itself, so they never queue in the inbox. Frames of
/// one connection reach it in order.
class frame_hook {
public:
    /// Where the payload of this validated header from `pe` goes; null: allocate it.
    virtual std::byte* place(std::uint32_t pe, const frame_header& header) noexcept = 0;
    /// A complete frame from `pe`; true when the hook took it (it does not reach receive()).
    virtual bool take(std::uint32_t pe, frame& f) = 0;
    /// Credits to piggyback on a frame of `type` to `pe`, asked by the writer as it sends
    /// the frame (not when it was queued), so the count is as fresh as it can be. Only for
    /// frames the peer's hook sees (every type but hello and disconnect).
    virtual std::uint16_t credits_for(std::uint32_t pe, frame_type type) noexcept {
        (void)pe;
        (void)type;
        return 0;
    }

protected:
    ~frame_hook() = default;
};

struct mesh_config {
    std::uint32_t rank = 0;
    std::uint32_t num_pes = 1;
    std::uint64_t job_key = 0;
    /// peers[r] is where PE r listens; peers[rank] is ignored (we listen on our listener).
    std::vector<endpoint> peers;
    /// CONNECTION_TIMEOUT: set-up (and the disconnect handshake) give up after this long.
    /// Default 300 s, or ++set CONNECTION_TIMEOUT=..., COVERSE_CONNECTION_TIMEOUT,
    /// CONNECTION_TIMEOUT, CMI_VMI_CONNECTION_TIMEOUT (seconds).
    std::chrono::milliseconds connect_timeout = connection_timeout_from_env();
    std::chrono::milliseconds retry_initial{5};
    std::chrono::milliseconds retry_max{250};
    /// Frames with a longer payload are refused (sending: -EMSGSIZE; receiving: the peer's
    /// connection is closed with an error). Messages larger than a frame go by rendezvous.
    std::uint32_t max_payload = default_max_payload;
    /// Where received payloads are allocated (default new[]).
    payload_allocator payload_alloc;
    /// The protocol version our hello announces (tests change it to prove refusal).
    std::uint32_t protocol_version = protocol_revision;
    /// Appended to a set-up failure: how the peers' addresses were chosen (for a
    /// multi-host job, the NETWORK_INTERFACE setting).
    std::string address_note;
    /// A failed peer makes receive() throw once the inbox is drained (the job stops). False
    /// (ON_PEER_LOST=report): the other connections go on; on_peer_failure still reports it.
    bool peer_failure_ends_receive = true;
    /// CONNECT: eager here, so a mesh made by hand connects fully in establish(); the
    /// machine layer passes the setting (lazy by default).
    connect_mode connect = connect_mode::eager;
};

/// One connection as the hang report and ++verbose describe it.
struct link_info {
    std::uint32_t pe = 0;
    connection_state state = connection_state::idle;
    bool lazily = false;  ///< made on first use, after start-up (CONNECT=lazy)
    bool dialed = false;  ///< this PE dialed it (else it accepted the peer's dial)
    double up_at = -1;    ///< seconds after the mesh was made that it came up; -1: not yet
};

/// One frame received from a peer.
struct received {
    std::uint32_t from = 0;
    net::frame frame;
};

class mesh {
public:
    /// `listener` must already listen on the endpoint the other PEs were told (peers[rank]).
    mesh(backend& b, std::unique_ptr<listener> l, mesh_config cfg);
    /// The mesh must have been shut down (or never established): tasks still running
    /// would outlive it. Reported and fatal otherwise, like any unjoined scope.
    ~mesh();
    mesh(const mesh&) = delete;
    mesh& operator=(const mesh&) = delete;

    /// Eager: connects to every peer and exchanges hellos. Throws mesh_error naming the
    /// peer, its address and the cause: refused hello (job key, version, job size), no
    /// listener within connect_timeout, or PEs that never connected.
    /// Lazy: starts accepting and returns; a pair connects when either PE first sends to the
    /// other. A dial that cannot finish within connect_timeout fails that peer (as a dead
    /// one: on_peer_failure, queued frames -EPIPE) naming it, its address and the setting.
    task<void> establish();

    /// Queues a frame to `pe` behind everything sent to it before; completes when its
    /// bytes are in the kernel (the payload may then be reused). Returns 0 or -errno
    /// (-ENOTCONN when the connection is not up, -EINVAL for a bad PE). Frames of
    /// different sends are never interleaved. Not cancellable once queued. Lazy: the first
    /// frame to a PE dials it, and frames wait in order until the connection is up.
    task<int> send(std::uint32_t pe, frame_header header, std::span<const std::byte> payload);

    /// Called once when a posted frame's bytes are in the kernel (0) or failed (-errno).
    using sent_callback = void (*)(void* ctx, int result);
    /// send() without a coroutine per frame, for the machine layer's hot path: queues the
    /// frame exactly like send() and calls `on_sent(ctx, result)` from the writer when it
    /// is done. `payload` must stay valid until then. Returns 0, or -ENOTCONN / -EINVAL /
    /// -EMSGSIZE at once (and then never calls on_sent).
    int post(std::uint32_t pe, const frame_header& header, std::span<const std::byte> payload,
             sent_callback on_sent, void* ctx);
    /// Called when frames post_copy() took could not be sent (the connection to `pe`
    /// failed with them queued), once per failure; nothing is called when they went.
    using lost_callback = void (*)(void* ctx, std::uint32_t pe, int result);
    /// post() of a small frame by copy, for the machine layer's small-message fast path:
    /// the header and payload are copied behind the frames this call copied before for
    /// `pe` (up to 64 KiB, one queued entry, sent in one gather with them), so `payload`
    /// is free again on return and nothing is called back for it. The first such frame
    /// since the last flush() on a connection with nothing queued and its writer idle goes
    /// to the socket within the call (a reply leaves without waiting for its handler to
    /// return), unless that connection's last flush sent several frames; the ones after it
    /// wait for flush(), to leave together. Order with post() and
    /// send() holds: -EAGAIN when the copies cannot take it in order now (the entry is
    /// full, being written, or other frames are queued behind it): post() it instead.
    /// -ENOTCONN / -EINVAL / -ENOMEM as for post(). `on_lost(ctx, pe, result)` is kept
    /// for the connection (the last one given) and called if its copies fail.
    int post_copy(std::uint32_t pe, const frame_header& header, std::span<const std::byte> payload,
                  lost_callback on_lost, void* ctx) noexcept;
    /// Sends what post() queued since the last flush on connections whose writer is idle,
    /// now, one non-blocking gather per connection, instead of on the writers' next turn
    /// (they were woken anyway; what a socket does not take stays theirs). Callbacks of the
    /// frames that went run here. For a caller at the end of a unit of work — the machine
    /// core after each handler — so that its sends leave together, at once.
    void flush() noexcept {
        ++_flushes;  // post_copy() may send the next frame on each connection itself
        if (!_flush.empty()) flush_queued();  // the usual case after a handler: nothing
    }

    /// The next received frame, in order per peer; nullopt once every peer has
    /// disconnected and everything received was handed out. Throws mesh_error once a peer
    /// failed (after handing out what arrived before the failure).
    task<std::optional<received>> receive();
    /// A received frame if one is queued now.
    std::optional<received> try_receive();

    /// The disconnect handshake with every connected peer: our disconnect frame goes out
    /// behind all queued data, we wait for the peer's (everything it sent arrives first),
    /// both sides half-close, then close. Frames received meanwhile stay in the inbox.
    /// Between our disconnect and the peer's, post() and send() still work: our disconnect
    /// says we start nothing new, yet we still answer what the peer started (get-done,
    /// one-sided replies), since it may only finish its sends once we have.
    /// Throws mesh_error naming peers that did not complete it within connect_timeout.
    task<void> shutdown();

    /// Called once for each peer that fails (EOF or reset outside the handshake, an
    /// invalid frame). The default prints the message to stderr; receive() then throws.
    void on_peer_failure(std::function<void(std::uint32_t pe, const std::string& why)> fn) {
        _on_failure = std::move(fn);
    }

    /// Installs the hook every frame passes first (see frame_hook); before establish().
    void set_frame_hook(frame_hook* hook) noexcept { _hook = hook; }

    /// The launcher says `pe` died (its process ended). With no connection to it, it fails
    /// now (on_peer_failure with `why`); a dial in progress stops; an open connection first
    /// hands out what the PE sent before it died, then ends (at the latest after 2 s).
    void peer_gone(std::uint32_t pe, const std::string& why);

    connection_state state(std::uint32_t pe) const;
    /// Every connection made or being made, by PE.
    std::vector<link_info> links() const;
    const mesh_config& config() const noexcept { return _cfg; }
    /// "PE 3 (127.0.0.1:40123)"
    std::string peer_name(std::uint32_t pe) const;

private:
    struct connection;
    struct done_flag {
        bool done = false;
        std::coroutine_handle<> waiter;
        void set() noexcept;
        auto wait() noexcept;
    };
    struct outgoing {
        std::array<std::byte, header_size> header{};
        std::span<const std::byte> payload;
        std::size_t sent = 0;  // bytes of header + payload post() already sent itself
        int result = 0;
        done_flag done;
        sent_callback on_sent = nullptr;  // set: a posted frame, owned by the mesh
        void* ctx = nullptr;
        connection* copies_of = nullptr;  // set: the connection's entry of post_copy()
    };
    /// Completes a frame once: wakes its sender, or calls back and recycles a posted one.
    void complete(outgoing* o, int result);
    std::vector<std::unique_ptr<outgoing>> _spare;  // recycled posted frames

    task<void> establish_all();
    task<void> accept_all(std::size_t expected);
    task<void> dial(std::uint32_t pe);
    // Lazy connections.
    connection* make_connection(std::uint32_t pe);
    /// The connection frames to `pe` go on; lazy: made (and its dial started) on first use.
    connection* route(std::uint32_t pe);
    task<void> accept_loop();
    task<void> accept_lazily(std::unique_ptr<stream> s);
    task<void> dial_lazily(connection* c);
    task<void> dial_steps(connection* c);
    task<bool> dial_once(connection* c);
    task<void> fail_unless_ended(connection* c, std::string why);
    void start(connection* c);
    /// "PE 3 (127.0.0.1:40123): we could not connect to it (last attempt: ...)"
    std::string unreached(std::uint32_t pe) const;
    task<io_result<frame>> read_hello(stream& s, frame_reader& reader, std::vector<frame>& early);
    task<void> refuse(stream& s, const std::string& why);
    void attach(connection* c, std::unique_ptr<stream> s, frame_reader reader,
                std::vector<frame> early);
    std::optional<std::string> check_hello(const frame& f, std::uint32_t expected_pe) const;
    /// One frame on a stream that has no writer yet (hello, refusal).
    task<int> send_frame(stream& s, frame_type type, std::span<const std::byte> payload);
    std::optional<std::string> hello_problem(const io_result<frame>& hello,
                                             const frame_reader& reader, const std::string& who,
                                             std::uint32_t expected_pe) const;
    /// Queues a frame on a connection's writer and waits until it is in the kernel.
    task<int> transmit(connection* c, frame_header header, std::span<const std::byte> payload);
    std::array<std::byte, hello_payload::wire_size> hello_bytes() const;

    task<void> writer(connection* c);
    /// Writes the eager credits owed to the peer into a frame's header as it leaves.
    void stamp_credits(const connection* c, outgoing* o) noexcept;
    /// Appends what is left to send of a frame (header, payload) to a gather; its bytes.
    static std::size_t add_parts(const outgoing* o, std::vector<std::span<const std::byte>>& parts);
    /// A post_copy() entry none of which went yet, as one buffer: its header copied into
    /// the room before its payload.
    static std::span<const std::byte> whole_copies(const outgoing* o) noexcept;
    /// post_copy()'s send at once; true when the whole frame went.
    bool send_copies_now(connection* c) noexcept;
    void flush_queued() noexcept;
    /// A frame was queued on `c` (post, post_copy): registers it for flush() while its
    /// writer idles, and wakes the writer.
    void queued(connection* c) noexcept;
    void encode_ours(const frame_header& header, std::size_t payload_length,
                     std::span<std::byte, header_size> out) const noexcept;
    std::vector<connection*> _flush;  // connections post() queued on while their writer idled
    std::uint64_t _flushes = 0;       // flush() calls: post_copy's direct sends, one per each
    std::vector<std::span<const std::byte>> _flush_parts;
    task<void> reader(connection* c);
    void deliver(connection* c, frame f);
    static bool take_bytes(void* connection, std::span<const std::byte> bytes);
    void fail(connection* c, const std::string& why);
    void wake_receiver() noexcept;
    task<void> disconnect(connection* c);

    backend& _backend;
    std::unique_ptr<listener> _listener;
    mesh_config _cfg;
    decode_limits _limits;
    std::vector<std::unique_ptr<connection>> _conns;  // by PE; null for ourselves
    std::vector<int> _dial_errors;  // by PE: the last failed connect (-errno), for the report
    std::string _establish_error;   // first set-up failure
    std::chrono::steady_clock::time_point _made = std::chrono::steady_clock::now();
    bool _accepting = false;  // lazy: the listener takes dials and route() dials, until shutdown
    task_scope _tasks{"mesh"};

    static std::byte* place_payload(void* connection, const frame_header& h) noexcept;
    bool writable(const connection* c) const noexcept;
    frame_hook* _hook = nullptr;

    std::deque<received> _inbox;
    std::coroutine_handle<> _receiver;
    std::string _failure;  // first peer failure, rethrown by receive()
    std::function<void(std::uint32_t, const std::string&)> _on_failure;
};

}  // namespace coverse::net
