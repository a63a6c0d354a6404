// The wire format: the fixed 24-byte little-endian frame header, the frame types, the
// fixed layouts of the control payloads, and their validating decoders. Every decoder
// returns a value (never throws) and reads only the span it is given.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace coverse::net {

// ---------------------------------------------------------------------------------------
// Header layout

/// "CVRS" in wire order (bytes 43 56 52 53). Read as a little-endian u32: 0x53525643.
inline constexpr std::uint32_t frame_magic = 0x5352'5643;
/// Version of the frame header format. Bumped only if the 24 bytes change meaning; new
/// fields are appended behind a flag instead (see frame_flags::extension).
inline constexpr std::uint8_t wire_version = 1;
/// Protocol revision advertised in the hello payload and at registration. Peers of
/// different revisions refuse each other at connection, naming both (mesh.cpp): run one
/// coverse release on every node. Revision 2: frame types 32-35 (eager channels over a
/// connection, written by put) and version 2 of the shared-memory eager segment (footers in
/// the slots).
inline constexpr std::uint32_t protocol_revision = 2;

/// Source PE used by the launcher (coverse-run) on its connections to the PEs.
inline constexpr std::uint32_t launcher_pe = 0xFFFF'FFFF;
/// Cap on one frame's payload: 64 MiB. Messages above MEDIUM_MESSAGE_BOUNDARY never travel
/// as one frame (rendezvous moves them), so this bounds frames, not messages.
inline constexpr std::uint32_t default_max_payload = 64u << 20;
/// Default cap on a message a peer may ask us to allocate (a publish offer's size): the
/// largest Converse message (an int), overridden by COVERSE_MAX_MESSAGE.
inline constexpr std::uint64_t default_max_message = 0x7FFF'FFFFu;

/// Where one header field sits in the 24 wire bytes.
struct wire_field {
    std::size_t offset;
    std::size_t size;
};

namespace header_field {
inline constexpr wire_field magic{0, 4};
inline constexpr wire_field version{4, 1};
inline constexpr wire_field type{5, 1};
inline constexpr wire_field flags{6, 2};
inline constexpr wire_field source_pe{8, 4};
inline constexpr wire_field payload_length{12, 4};
inline constexpr wire_field credits{16, 2};
inline constexpr wire_field reserved{18, 2};
inline constexpr wire_field tag{20, 4};
}  // namespace header_field

inline constexpr std::size_t header_size = 24;

// The layout is part of the protocol: fields are contiguous, in this order, and never move.
static_assert(header_field::magic.offset == 0);
static_assert(header_field::version.offset ==
              header_field::magic.offset + header_field::magic.size);
static_assert(header_field::type.offset ==
              header_field::version.offset + header_field::version.size);
static_assert(header_field::flags.offset == header_field::type.offset + header_field::type.size);
static_assert(header_field::source_pe.offset ==
              header_field::flags.offset + header_field::flags.size);
static_assert(header_field::payload_length.offset ==
              header_field::source_pe.offset + header_field::source_pe.size);
static_assert(header_field::credits.offset ==
              header_field::payload_length.offset + header_field::payload_length.size);
static_assert(header_field::reserved.offset ==
              header_field::credits.offset + header_field::credits.size);
static_assert(header_field::tag.offset ==
              header_field::reserved.offset + header_field::reserved.size);
static_assert(header_size == header_field::tag.offset + header_field::tag.size);
static_assert(header_size == 24, "the frame header is 24 bytes on the wire");
// Pinned absolute offsets, so a reorder above cannot slip through as still "contiguous".
static_assert(header_field::flags.offset == 6 && header_field::source_pe.offset == 8 &&
              header_field::payload_length.offset == 12 && header_field::credits.offset == 16 &&
              header_field::reserved.offset == 18 && header_field::tag.offset == 20);

/// Frame types. The numbers are on the wire: append only, never renumber. 0 is never
/// valid, so a zero-filled buffer is not mistaken for a frame.
enum class frame_type : std::uint8_t {
    standard = 1,                // a Converse message (its own header carries the handler)
    barrier = 2,                 // barrier_payload
    persistent_request = 3,      // persistent_request_payload
    credit = 4,                  // credit_payload
    latency_vector_request = 5,  // empty; tag = request id
    latency_vector_reply =
        6,                // num_pes x u32 microseconds (0xFFFFFFFF = unknown); tag = request id
    cluster_mapping = 7,  // num_pes x u32 cluster id
    publish = 8,          // publish_payload (rendezvous offer)
    get_done = 9,         // get_done_payload
    hello = 10,           // hello_payload (connect)
    disconnect = 11,      // disconnect_payload
    abort = 12,           // abort_payload prefix + UTF-8 text
    print = 13,           // text for the launcher's stdout
    error = 14,           // text for the launcher's stderr
    scan = 15,            // prompt/format for the launcher; tag = request id
    scan_reply = 16,      // the line read by the launcher, with its '\n' (empty = end of
                          // input); tag = request id
    register_node = 17,   // register_node_payload prefix + IP text (PE -> launcher)
    node_table = 18,      // node_table prefix + records or refusal text (launcher -> PE)
    // One-sided memory emulated over a connection (rdma/'s tcp provider). Data frames carry
    // the request id in `tag` and arrive in order, so each lands right after the last.
    rma_get_request = 19,  // rma_request_payload: send me [address, address + size) of `key`
    rma_get_reply = 20,    // bytes of the get `tag` (the requester's id), in order
    rma_put_request = 21,  // rma_request_payload: the rma_put_data frames `id` go to address
    rma_put_data = 22,     // bytes of the put `tag` (the requester's id), in order
    rma_complete = 23,     // rma_complete_payload: a put landed, or a request was refused
    rdma_address = 24,     // rdma_address_payload prefix + the provider's address blob
    state_request = 25,    // state_request_payload (launcher -> PE, doctor channel); tag = id
    state_reply = 26,      // the PE's state, coverse/net/doctor.hpp (PE -> launcher); tag = id
    // Latency probing (api/src/latency.cpp): ping-pongs between PEs, then PE 0 sends every
    // PE the whole table before the cluster_mapping.
    latency_ping = 27,   // u64 the sender's own stamp, echoed back; tag = probe id
    latency_pong = 28,   // the ping's 8 bytes, unchanged; tag = the ping's probe id
    latency_table = 29,  // num_pes x num_pes u32 microseconds, row = from; tag = request id
    latency_vector_minimum = 30,  // num_pes x u32: the smallest sample (µs); tag = request id
    // Eager channels (rdma/eager.hpp). eager_channel also travels in ring records, whose type
    // field has 5 bits: it must stay below 32.
    eager_channel = 31,  // eager_channel_payload: an eager channel opens, closes or is refused
    eager_data = 32,     // a message for the receiver's eager slots over a connection (spends
                         // one of the sender's credits; the reader places it in a free slot)
    // Connections made on first use (CONNECT=lazy, net/mesh.hpp). Neither travels in rings.
    connect_declined = 33,  // empty, the answer to a hello: both PEs dialed at once and the
                            // lower rank's dial carries the pair; this connection closes
    peer_lost = 34,         // peer_lost_payload prefix + text (launcher -> PE): a PE of the
                            // job died; every PE hears it, connected to that PE or not
    // Eager short channels written by one-sided put (rdma/src/eager_put.cpp). Connections
    // only: a pair on rings uses shared-memory channels.
    eager_put_open = 35,  // eager_put_open_payload: a receiver's registered slots for the
                          // sender to put messages into; closed like any channel (eager_channel)
};
inline constexpr std::uint8_t first_frame_type = 1;
inline constexpr std::uint8_t last_frame_type = 35;

/// Lower-case name of a type ("get_done"), or "unknown".
[[nodiscard]] std::string_view frame_type_name(frame_type type) noexcept;

/// Header flag bits. A bit not allowed for the frame's type is rejected as reserved.
namespace frame_flags {
/// standard and publish: the frame is part of a spanning-tree broadcast; `tag` is the root PE.
inline constexpr std::uint16_t broadcast = 0x0001;
/// Reserved for a later revision: a header extension leads the payload. Rejected by
/// revision 1 decoders, so it can only be sent to peers whose hello advertises support.
inline constexpr std::uint16_t extension = 0x8000;
}  // namespace frame_flags

/// Flag bits a frame of `type` may carry in this revision.
[[nodiscard]] std::uint16_t allowed_flags(frame_type type) noexcept;
/// Whether the header's `tag` means something for `type` (otherwise it must be 0).
[[nodiscard]] bool uses_tag(frame_type type) noexcept;

/// A decoded header, in host form. Magic, version and reserved are not stored: encode
/// writes the constants, decode checks them.
struct frame_header {
    frame_type type = frame_type::standard;
    std::uint16_t flags = 0;
    std::uint32_t source_pe = 0;
    std::uint32_t payload_length = 0;
    std::uint16_t credits = 0;  // eager credits returned to the receiver of this frame
    std::uint32_t tag = 0;      // broadcast root or request id, per type (see frame_type)

    friend bool operator==(const frame_header&, const frame_header&) = default;
};

/// Writes `header` in wire order into exactly header_size bytes.
void encode_header(const frame_header& header, std::span<std::byte, header_size> out) noexcept;
[[nodiscard]] std::array<std::byte, header_size> encode_header(const frame_header& header) noexcept;

// ---------------------------------------------------------------------------------------
// Decoding results

/// What the decoder configured for one connection accepts.
struct decode_limits {
    std::uint32_t max_payload = default_max_payload;  // one frame's payload
    std::uint32_t num_pes = 1;                        // valid source PEs are [0, num_pes)
    bool accept_launcher = false;                     // also accept source launcher_pe
    std::uint64_t max_message = default_max_message;  // publish sizes (COVERSE_MAX_MESSAGE)
};

enum class decode_status : std::uint8_t {
    ok = 0,
    truncated,                    // fewer bytes than the header or payload layout needs
    bad_magic,                    // not a coverse stream, or the stream lost sync
    unsupported_version,          // header version this build does not speak
    unknown_type,                 // frame type number not in frame_type
    reserved_bits_set,            // a flag, reserved field or unused tag is not zero
    source_pe_out_of_range,       // source PE outside [0, num_pes)
    payload_too_long,             // payload length over decode_limits::max_payload
    payload_length_mismatch,      // a control payload whose length does not fit its type
    broadcast_root_out_of_range,  // broadcast root (tag) outside [0, num_pes)
    invalid_field,                // a control payload field outside its valid values
    payload_allocation_failed,    // the reader could not allocate a validated payload
};

/// Short name of a status ("payload_too_long").
[[nodiscard]] std::string_view decode_status_name(decode_status status) noexcept;

/// A decode failure with what is needed to explain it. Trivially copyable, no allocation:
/// `field` always points at a string literal.
struct decode_error {
    decode_status status = decode_status::ok;
    frame_type type{};        // the frame's type, when known
    std::string_view field;   // e.g. "payload_length", "hello.rank"
    std::uint64_t value = 0;  // the offending value
    std::uint64_t limit = 0;  // the bound or expected value it was checked against

    [[nodiscard]] bool ok() const noexcept { return status == decode_status::ok; }
    explicit operator bool() const noexcept { return !ok(); }
};

/// One line for a log and an error report:
/// "frame from <peer>: <what was wrong>; <what to do>; closing the connection".
/// `peer` names the other side, e.g. "PE 3 (127.0.0.1:40123)".
[[nodiscard]] std::string describe(const decode_error& error, std::string_view peer);

template <class T>
struct decoded {
    T value{};
    decode_error error;
    [[nodiscard]] bool ok() const noexcept { return error.ok(); }
};

/// Validates and decodes a header from the first header_size bytes of `bytes`. Checks, in
/// order: magic, version, type, flags, reserved, source PE, payload length against the
/// maximum and against the type's layout, tag. Nothing in the result is trusted unless ok().
[[nodiscard]] decoded<frame_header> decode_header(std::span<const std::byte> bytes,
                                                  const decode_limits& limits) noexcept;

/// How long a payload of `type` must be.
enum class payload_length_kind : std::uint8_t { any, exact, at_least };
struct payload_rule {
    payload_length_kind kind = payload_length_kind::any;
    std::uint64_t length = 0;
};
[[nodiscard]] payload_rule payload_rule_for(frame_type type, const decode_limits& limits) noexcept;

/// Validates a complete payload against its (already validated) header: for control types
/// the payload must decode; data types (standard, print, error, scan, scan_reply and the
/// vectors) pass. frame_reader calls this before yielding a frame.
[[nodiscard]] decode_error validate_payload(const frame_header& header,
                                            std::span<const std::byte> payload,
                                            const decode_limits& limits) noexcept;

// ---------------------------------------------------------------------------------------
// Control payloads. Each has a fixed little-endian layout (offsets in the comments), an
// encoder and a validating decoder. Reserved fields are written as 0 and must read as 0.

/// hello (connect): the first frame on every PE-to-PE connection, both directions.
struct hello_payload {
    std::uint64_t job_key = 0;                           // @0  u64: refuses other jobs' PEs
    std::uint32_t rank = 0;                              // @8  u32: the sender's PE (= source PE)
    std::uint32_t num_pes = 0;                           // @12 u32: the sender's job size
    std::uint32_t protocol_version = protocol_revision;  // @16 u32
                                                         // @20 u32 reserved
    static constexpr std::size_t wire_size = 24;
    friend bool operator==(const hello_payload&, const hello_payload&) = default;
};

/// publish: a rendezvous offer; the receiver gets [address, address + size) with `key`.
struct publish_payload {
    std::uint64_t address = 0;  // @0  u64: remote virtual address (provider-specific)
    std::uint64_t key = 0;      // @8  u64: remote key (verbs rkey, cma pid, tcp cookie)
    std::uint64_t size = 0;     // @16 u64: bytes, 1..max_payload
    std::uint32_t handle = 0;   // @24 u32: sender's handle id, echoed in get_done
                                // @28 u32 reserved
    static constexpr std::size_t wire_size = 32;
    friend bool operator==(const publish_payload&, const publish_payload&) = default;
};

/// rma_get_request / rma_put_request: one emulated one-sided operation on the target's
/// registered memory. Same layout as publish.
struct rma_request_payload {
    std::uint64_t address = 0;  // @0  u64: the target's virtual address
    std::uint64_t key = 0;      // @8  u64: the target's registration key (checked there)
    std::uint64_t size = 0;     // @16 u64: bytes, >= 1
    std::uint32_t id = 0;       // @24 u32: the requester's id; data frames carry it in `tag`
                                // @28 u32 reserved
    static constexpr std::size_t wire_size = 32;
    friend bool operator==(const rma_request_payload&, const rma_request_payload&) = default;
};

enum class rma_op : std::uint32_t { get = 1, put = 2 };
enum class rma_status : std::uint32_t { ok = 0, refused = 1 };

/// rma_complete: the target's word on a request: a put's bytes are in place (ok), or the
/// request named memory the target has not registered (refused; no data follows).
struct rma_complete_payload {
    std::uint32_t id = 0;                // @0  u32: the request's id
    rma_op op = rma_op::get;             // @4  u32
    rma_status status = rma_status::ok;  // @8  u32
                                         // @12 u32 reserved
    static constexpr std::size_t wire_size = 16;
    friend bool operator==(const rma_complete_payload&, const rma_complete_payload&) = default;
};

/// rdma_address: start-up of the one-sided layer between two PEs. Stage 1 offers the
/// provider the sender would like the peer to read it with, and that provider's address
/// (cma: pid and probe; verbs: queue pair); stage 2 answers with the provider the sender
/// will read the peer with (so the peer registers what it publishes with that one).
struct rdma_address_payload {
    std::uint32_t stage = 1;                     // @0 u32: 1 offer, 2 verdict
    std::uint32_t provider = 0;                  // @4 u32: 1 cma, 2 tcp, 3 verbs
    std::span<const std::byte> blob;             // @8 .. end: the provider's address
    static constexpr std::size_t wire_size = 8;  // the fixed prefix
};

enum class get_status : std::uint32_t { ok = 0, failed = 1 };

/// get_done: the receiver finished (or gave up on) the get of a published buffer.
struct get_done_payload {
    std::uint32_t handle = 0;            // @0 u32: the publish's handle id
    get_status status = get_status::ok;  // @4 u32
    static constexpr std::size_t wire_size = 8;
    friend bool operator==(const get_done_payload&, const get_done_payload&) = default;
};

/// credit: explicit return of eager credits when there is no traffic to piggyback on.
struct credit_payload {
    std::uint32_t count = 0;  // @0 u32: >= 1 (the header's credits field adds to it)
    static constexpr std::size_t wire_size = 4;
    friend bool operator==(const credit_payload&, const credit_payload&) = default;
};

enum class barrier_phase : std::uint32_t { arrive = 1, release = 2 };

/// barrier: arrive goes up to PE 0, release comes back down.
struct barrier_payload {
    std::uint32_t epoch = 0;                      // @0 u32: which barrier
    barrier_phase phase = barrier_phase::arrive;  // @4 u32
    static constexpr std::size_t wire_size = 8;
    friend bool operator==(const barrier_payload&, const barrier_payload&) = default;
};

/// persistent request: CmiCreatePersistent(pe, max_size) asking the receiver for channels.
struct persistent_request_payload {
    std::uint64_t max_size = 0;  // @0 u64: largest message, 1..max_payload
    std::uint32_t handle = 0;    // @8 u32: sender's persistent handle id
                                 // @12 u32 reserved
    static constexpr std::size_t wire_size = 16;
    friend bool operator==(const persistent_request_payload&,
                           const persistent_request_payload&) = default;
};

enum class eager_action : std::uint32_t {
    open = 1,     // receiver -> sender: write into the segment named by (receiver, sender, id)
    close = 2,    // receiver -> sender: stop writing (an idle channel retires, or a destroy)
    closed = 3,   // sender -> receiver: no more writes; everything written came before this
    refuse = 4,   // receiver -> sender: no channel for this persistent request (send as usual)
    destroy = 5,  // sender -> receiver: the persistent handle is destroyed
    credit = 6,   // receiver -> sender: `slots` buffers of a long channel over a connection
                  // were freed (a short channel's credits ride in the frame header instead)
};

/// eager_channel: set-up and tear-down of one eager channel (rdma/eager.hpp). It travels on
/// the stream path, so it is ordered with the messages around it.
struct eager_channel_payload {
    eager_action action = eager_action::open;  // @0  u32
    std::uint32_t kind = 1;                    // @4  u32: 1 short slots, 2 long buffers
    std::uint32_t channel = 0;                 // @8  u32: the receiver's channel id (>= 1)
    std::uint32_t handle = 0;                  // @12 u32: the sender's persistent handle (0: none)
    std::uint32_t slots = 0;                   // @16 u32: open: 1..1024; credit: count >= 1
    std::uint32_t capacity = 0;                // @20 u32: open: message bytes per slot, >= 1
                                               // @24 u64 reserved
    static constexpr std::size_t wire_size = 32;
    friend bool operator==(const eager_channel_payload&, const eager_channel_payload&) = default;
};

/// eager_put_open: a receiver gives one sender a short channel the sender writes by one-sided
/// put: `slots` slots of `capacity` message bytes each, in memory the receiver registered with
/// the provider that sender reaches it by. Slot i starts at address + i x the slot stride
/// (rdma/eager.hpp, eager_slot_stride(capacity)); its close and closed travel as
/// eager_channel frames naming the same channel.
struct eager_put_open_payload {
    std::uint32_t channel = 0;   // @0  u32: the receiver's channel id (>= 1)
    std::uint32_t slots = 0;     // @4  u32: 1..1024
    std::uint32_t capacity = 0;  // @8  u32: message bytes per slot, 1..2^30
                                 // @12 u32 reserved
    std::uint64_t address = 0;   // @16 u64: the first slot's address at the receiver, != 0
    std::uint64_t key = 0;       // @24 u64: the registration's key (verbs rkey, cma pid, tcp id)
    static constexpr std::size_t wire_size = 32;
    friend bool operator==(const eager_put_open_payload&, const eager_put_open_payload&) = default;
};

enum class disconnect_reason : std::uint32_t { shutdown = 1, error = 2, timeout = 3 };

/// disconnect: the shutdown handshake; the sender has nothing more in flight.
struct disconnect_payload {
    disconnect_reason reason = disconnect_reason::shutdown;  // @0 u32
    static constexpr std::size_t wire_size = 4;
    friend bool operator==(const disconnect_payload&, const disconnect_payload&) = default;
};

/// abort: CmiAbort; an 8-byte prefix, then the message text (the rest of the payload).
struct abort_payload {
    std::int32_t exit_code = 1;                  // @0 i32 (two's complement)
    std::uint32_t origin_pe = 0;                 // @4 u32: PE that called CmiAbort, or launcher_pe
    std::string_view text;                       // @8 .. end: not NUL-terminated; views the payload
    static constexpr std::size_t wire_size = 8;  // the fixed prefix
    friend bool operator==(const abort_payload&, const abort_payload&) = default;
};

/// register_node: a PE's registration with the launcher; the first frame it sends on its
/// control connection. Fixed 32-byte prefix, then the IP text (the rest of the payload).
struct register_node_payload {
    std::uint32_t node = 0;       // @0  u32: node number (its first PE); = the header's source PE
    std::uint32_t pe_count = 1;   // @4  u32: PEs in this process, >= 1, node + pe_count <= num_pes
    std::uint16_t data_port = 0;  // @8  u16: where the PE accepts mesh connections, != 0
                                  // @10 u16 reserved
    std::uint32_t protocol_version = protocol_revision;  // @12 u32: >= 1
    std::uint64_t machine_id = 0;                        // @16 u64: same value = same host
    std::uint64_t job_key = 0;  // @24 u64: COVERSE_JOB_KEY; the launcher refuses other jobs
    std::string_view ip;        // @32 .. end: 1..255 printable ASCII bytes; views the payload
    static constexpr std::size_t wire_size = 32;  // the fixed prefix
    friend bool operator==(const register_node_payload&, const register_node_payload&) = default;
};

/// Longest IP text (an address or host name) in register_node and node_table.
inline constexpr std::size_t max_ip_text = 255;

enum class node_table_status : std::uint32_t { ok = 0, refused = 1 };

/// One node of a node table (in the table's order, node numbers contiguous from 0).
struct node_record {
    std::uint64_t machine_id = 0;                 // @0  u64
    std::uint32_t node = 0;                       // @8  u32: first PE of the node
    std::uint32_t pe_count = 1;                   // @12 u32: >= 1
    std::uint16_t data_port = 0;                  // @16 u16: != 0
                                                  // @18 u16 ip_length, 1..max_ip_text
    std::string_view ip;                          // @20 .. @20 + ip_length
    static constexpr std::size_t wire_size = 20;  // the fixed part of one record
    friend bool operator==(const node_record&, const node_record&) = default;
};

/// peer_lost: the launcher tells every PE that one PE died (ON_PEER_LOST=report): under
/// CONNECT=lazy a PE hears of a death through its own connection only if it has one.
struct peer_lost_payload {
    std::uint32_t pe = 0;                        // @0 u32: the PE that died, < num_pes
                                                 // @4 u32 reserved
    std::string_view text;                       // @8 .. end: how it ended; views the payload
    static constexpr std::size_t wire_size = 8;  // the fixed prefix
    friend bool operator==(const peer_lost_payload&, const peer_lost_payload&) = default;
};

enum class state_want : std::uint32_t { progress = 1, full = 2 };

/// state_request: the launcher asks a PE for its state (the hang report, docs/doctor.md).
struct state_request_payload {
    state_want want = state_want::progress;  // @0 u32: 1 progress counters only, 2 everything
    static constexpr std::size_t wire_size = 4;
    friend bool operator==(const state_request_payload&, const state_request_payload&) = default;
};

/// node_table: the launcher's answer to register_node. An 8-byte prefix
///   @0 u32 status (node_table_status), @4 u32 count
/// then, for ok, `count` node records covering PEs [0, num_pes) in order; for refused,
/// count 0 and the launcher's explanation as text (the rest of the payload).
struct node_table_payload {
    node_table_status status = node_table_status::ok;
    std::uint32_t count = 0;
    std::string_view text;               // refused: why; views the payload
    std::span<const std::byte> records;  // ok: the `count` records, validated; see node_records
    static constexpr std::size_t wire_size = 8;  // the fixed prefix
};

[[nodiscard]] std::array<std::byte, hello_payload::wire_size> encode(
    const hello_payload& p) noexcept;
[[nodiscard]] std::array<std::byte, publish_payload::wire_size> encode(
    const publish_payload& p) noexcept;
[[nodiscard]] std::array<std::byte, get_done_payload::wire_size> encode(
    const get_done_payload& p) noexcept;
[[nodiscard]] std::array<std::byte, rma_request_payload::wire_size> encode(
    const rma_request_payload& p) noexcept;
[[nodiscard]] std::array<std::byte, rma_complete_payload::wire_size> encode(
    const rma_complete_payload& p) noexcept;
[[nodiscard]] std::array<std::byte, credit_payload::wire_size> encode(
    const credit_payload& p) noexcept;
[[nodiscard]] std::array<std::byte, barrier_payload::wire_size> encode(
    const barrier_payload& p) noexcept;
[[nodiscard]] std::array<std::byte, persistent_request_payload::wire_size> encode(
    const persistent_request_payload& p) noexcept;
[[nodiscard]] std::array<std::byte, disconnect_payload::wire_size> encode(
    const disconnect_payload& p) noexcept;
[[nodiscard]] std::array<std::byte, state_request_payload::wire_size> encode(
    const state_request_payload& p) noexcept;
/// Prefix and text together (abort is rare; one allocation is fine).
[[nodiscard]] std::vector<std::byte> encode(const abort_payload& p);
/// Prefix and IP text together.
[[nodiscard]] std::vector<std::byte> encode(const register_node_payload& p);
/// Prefix and text together.
[[nodiscard]] std::vector<std::byte> encode(const peer_lost_payload& p);
/// Prefix and blob together.
[[nodiscard]] std::vector<std::byte> encode(const rdma_address_payload& p);
/// A node table with these records (status ok). Records are written as given; the
/// decoder checks they are contiguous from node 0.
[[nodiscard]] std::vector<std::byte> encode_node_table(std::span<const node_record> records);
/// A refusal (status refused, count 0) carrying the launcher's explanation.
[[nodiscard]] std::vector<std::byte> encode_node_table_refusal(std::string_view why);

// Decoders check the exact length (at least the prefix, for abort), reserved fields and
// each field's range; `limits` supplies num_pes and max_payload for the range checks.
[[nodiscard]] decoded<hello_payload> decode_hello(std::span<const std::byte> bytes,
                                                  const decode_limits& limits) noexcept;
[[nodiscard]] decoded<publish_payload> decode_publish(std::span<const std::byte> bytes,
                                                      const decode_limits& limits) noexcept;
[[nodiscard]] decoded<get_done_payload> decode_get_done(std::span<const std::byte> bytes,
                                                        const decode_limits& limits) noexcept;
/// `type` is rma_get_request or rma_put_request (for the error's frame type).
[[nodiscard]] decoded<rma_request_payload> decode_rma_request(std::span<const std::byte> bytes,
                                                              frame_type type) noexcept;
[[nodiscard]] decoded<rma_complete_payload> decode_rma_complete(
    std::span<const std::byte> bytes) noexcept;
/// Checks stage 1..2 and provider 1..3; the blob views `bytes`.
[[nodiscard]] decoded<rdma_address_payload> decode_rdma_address(
    std::span<const std::byte> bytes) noexcept;
[[nodiscard]] decoded<credit_payload> decode_credit(std::span<const std::byte> bytes,
                                                    const decode_limits& limits) noexcept;
[[nodiscard]] decoded<barrier_payload> decode_barrier(std::span<const std::byte> bytes,
                                                      const decode_limits& limits) noexcept;
[[nodiscard]] std::array<std::byte, eager_channel_payload::wire_size> encode(
    const eager_channel_payload& p) noexcept;
[[nodiscard]] decoded<eager_channel_payload> decode_eager_channel(
    std::span<const std::byte> bytes) noexcept;
[[nodiscard]] std::array<std::byte, eager_put_open_payload::wire_size> encode(
    const eager_put_open_payload& p) noexcept;
/// Checks channel >= 1, slots 1..1024, capacity 1..2^30, address != 0 and reserved.
[[nodiscard]] decoded<eager_put_open_payload> decode_eager_put_open(
    std::span<const std::byte> bytes) noexcept;
[[nodiscard]] decoded<persistent_request_payload> decode_persistent_request(
    std::span<const std::byte> bytes, const decode_limits& limits) noexcept;
[[nodiscard]] decoded<disconnect_payload> decode_disconnect(std::span<const std::byte> bytes,
                                                            const decode_limits& limits) noexcept;
[[nodiscard]] decoded<state_request_payload> decode_state_request(
    std::span<const std::byte> bytes, const decode_limits& limits) noexcept;
[[nodiscard]] decoded<abort_payload> decode_abort(std::span<const std::byte> bytes,
                                                  const decode_limits& limits) noexcept;
/// Checks pe < num_pes and reserved; the text views `bytes`.
[[nodiscard]] decoded<peer_lost_payload> decode_peer_lost(std::span<const std::byte> bytes,
                                                          const decode_limits& limits) noexcept;
/// Checks reserved, protocol_version >= 1, node < num_pes, 1 <= pe_count <= num_pes - node,
/// data_port != 0, and the IP text.
[[nodiscard]] decoded<register_node_payload> decode_register_node(
    std::span<const std::byte> bytes, const decode_limits& limits) noexcept;
/// Checks the status, and for ok every record (count 1..num_pes, nodes contiguous from 0,
/// pe_count >= 1, PE counts summing to num_pes, data_port != 0, IP text) and that the
/// records fill the payload exactly; for refused, count 0.
[[nodiscard]] decoded<node_table_payload> decode_node_table(std::span<const std::byte> bytes,
                                                            const decode_limits& limits) noexcept;
/// The records of a node table that decode_node_table accepted (status ok); each record's
/// ip views the payload.
[[nodiscard]] std::vector<node_record> node_records(const node_table_payload& table);

}  // namespace coverse::net
