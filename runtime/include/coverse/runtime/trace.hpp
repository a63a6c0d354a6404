// Trace points: an always-compiled, off-by-default recorder of fixed-size events (timestamp,
// PE, kind, object id, two integer arguments). With tracing off an emit is one predictable
// branch on a thread-local pointer; with it on, an emit appends to an in-memory chunk and a
// writer thread puts full chunks into `DIR/coverse-trace.<pe>.bin`. Format, kinds and the
// `coverse-trace` tool that reads the files: docs/trace.md.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace coverse::trace {

/// Every event kind, in one list (coverse-trace reads the same numbers; docs/trace.md
/// documents the arguments). Append only: a number, once shipped, keeps its meaning.
enum class kind : std::uint16_t {
    none = 0,
    task_spawned = 1,   // object: spawn record address
    task_failed = 2,    // object: spawn record address
    task_finished = 3,  // object: spawn record address
    // Handles. object: handle id (generation << 32 | table index), unique per PE per run.
    handle_allocated = 16,  // a: sequence << 32 | bytes; b: peer << 32 | direction << 8 | protocol
    handle_published = 17,
    handle_get_posted = 18,
    handle_put_done = 19,
    handle_completed = 20,  // send: the message left / was fetched; receive: handed to its handler
    handle_released = 21,   // send: the handle was dropped; receive: the handler returned
    phase_begin = 32,       // object: phase id (see `phase`); a: barrier epoch for phase 5
    phase_end = 33,         // object: phase id; a: as for phase_begin
    credit_spent = 48,      // object: peer PE; a: count; b: credit_protocol(p) or 0
    credit_returned = 49,   // object: peer PE; a: count; b: credit_protocol(p) or 0
    registration_added = 50,    // object: registration id (unique per PE); a: bytes
    registration_dropped = 51,  // object: registration id; a: bytes
    counter = 64,               // object: counter id; a: value (two's complement int64)
    user = 1000,                // first kind free for applications
};

/// Message protocols, in handle_allocated's `b` (low byte).
enum class protocol : std::uint8_t {
    inlined = 0,  // payload inside the frame
    stream = 1,
    rendezvous = 2,
    eager_short = 3,
    eager_long = 4,
};
inline constexpr unsigned protocol_count = 5;
/// "inline", "stream", "rendezvous", "eager short", "eager long"; "protocol N" otherwise.
std::string protocol_name(unsigned p);

enum class direction : std::uint8_t { send = 0, receive = 1 };

/// Start-up and collective phases (object of phase_begin / phase_end).
enum class phase : std::uint64_t {
    register_with_launcher = 1,
    mesh_connect = 2,
    startup_barrier = 3,
    shutdown_handshake = 4,
    barrier = 5,  // a: epoch
};
/// "register with launcher", "mesh connect", ... ; "phase N" for unknown ids.
std::string phase_name(std::uint64_t id);

/// What handle_allocated carries, packed into its `a` and `b` (see docs/trace.md).
/// `sequence` numbers the messages from a sender to one receiver (per ordered pair of PEs,
/// from 0, counted the same way on both sides): (sender, receiver, sequence) names the
/// flow from a send handle to its receive handle without a wire change.
struct handle_allocation {
    std::uint32_t sequence = 0;
    std::uint32_t bytes = 0;  // saturates at 2^32 - 1
    std::uint32_t peer = 0;   // receiver of a send, sender of a receive
    direction dir = direction::send;
    protocol proto = protocol::inlined;

    constexpr std::uint64_t a() const noexcept {
        return static_cast<std::uint64_t>(sequence) << 32 | bytes;
    }
    constexpr std::uint64_t b() const noexcept {
        return static_cast<std::uint64_t>(peer) << 32 |
               static_cast<std::uint64_t>(static_cast<std::uint8_t>(dir)) << 8 |
               static_cast<std::uint8_t>(proto);
    }
    static constexpr handle_allocation unpack(std::uint64_t a, std::uint64_t b) noexcept {
        return {static_cast<std::uint32_t>(a >> 32), static_cast<std::uint32_t>(a),
                static_cast<std::uint32_t>(b >> 32), static_cast<direction>((b >> 8) & 0xff),
                static_cast<protocol>(b & 0xff)};
    }
    static constexpr std::uint32_t saturate(std::uint64_t bytes) noexcept {
        return bytes > 0xffffffffu ? 0xffffffffu : static_cast<std::uint32_t>(bytes);
    }
};

/// Handle id as the machine core numbers handles: generation in the high half.
constexpr std::uint64_t handle_id(std::uint32_t generation, std::uint32_t index) noexcept {
    return static_cast<std::uint64_t>(generation) << 32 | index;
}
/// `b` of credit_spent / credit_returned attributing the credits to a protocol (0: none).
constexpr std::uint64_t credit_protocol(protocol p) noexcept {
    return static_cast<std::uint64_t>(static_cast<std::uint8_t>(p)) + 1;
}

/// One event on disk and in memory: 40 bytes, little-endian host layout.
struct event {
    std::uint64_t ts_ns;  // steady clock, ns
    std::uint32_t pe;
    std::uint16_t kind;
    std::uint16_t flags;  // 0; reserved
    std::uint64_t object;
    std::uint64_t a;
    std::uint64_t b;
};
static_assert(sizeof(event) == 40, "trace event layout is part of the file format");

/// Fixed file header: magic "CVTRACE\0", version, PE, event size, where the events start,
/// and the clock reference (steady and realtime read together) so a merger can align PEs'
/// clocks. Version 2 follows it with an info section of tagged records (see `info_tag`)
/// up to `header_size`; version 1 files have no info section (header_size reads as 0).
struct file_header {
    char magic[8];
    std::uint32_t version;
    std::uint32_t pe;
    std::uint32_t event_size;
    std::uint32_t header_size;  // bytes before the first event; a multiple of 8
    std::uint64_t steady_ref_ns;
    std::uint64_t realtime_ref_ns;
};
static_assert(sizeof(file_header) == 40, "trace header layout is part of the file format");
inline constexpr std::uint32_t file_version = 2;

/// One record of the info section: this header, then `length` payload bytes, then zero
/// padding to a multiple of 8. Unknown tags are skipped by readers.
struct info_record_header {
    std::uint16_t tag;
    std::uint16_t reserved;
    std::uint32_t length;
};
static_assert(sizeof(info_record_header) == 8);

enum class info_tag : std::uint16_t {
    end = 0,       // optional terminator
    pes = 1,       // u32 num_pes, u32 0
    backend = 2,   // text
    provider = 3,  // text
    config = 4,    // text, "NAME=VALUE\n..."
    limit = 5,     // limit_record
    progress = 6,  // progress_record, rewritten as the file grows and at close
    host = 7,      // text: host name
    process = 8,   // u32 pid, u32 0
};

enum class limit_mode : std::uint32_t {
    stop = 0,  // keep the first events, drop (and count) the rest
    ring = 1,  // keep the last events: the event area is a ring, oldest overwritten
};

struct limit_record {
    std::uint64_t limit_bytes;      // COVERSE_TRACE_LIMIT: bytes of events per PE
    std::uint64_t capacity_events;  // limit_bytes / 40
    std::uint32_t mode;             // limit_mode
    std::uint32_t chunk_events;     // events per in-memory chunk
};
static_assert(sizeof(limit_record) == 24);

enum class file_state : std::uint32_t {
    recording = 0,  // never flushed: the PE is running or died without a flush
    flushed = 1,    // flush() wrote everything buffered (e.g. CmiAbort); maybe more after
    closed = 2,     // the recorder was destroyed normally
};

struct progress_record {
    std::uint64_t events_written;       // events put in the file (ring: may exceed capacity)
    std::uint64_t dropped_limit;        // stop mode: events after the limit
    std::uint64_t dropped_overwritten;  // ring mode: events overwritten by newer ones
    std::uint64_t dropped_behind;       // the writer fell behind and no chunk was free
    std::uint64_t end_ns;               // steady ns of the last write, flush or close
    std::uint32_t state;                // file_state
    std::uint32_t reserved;
};
static_assert(sizeof(progress_record) == 48);

/// What a PE says about itself in its file header.
struct session_info {
    std::uint32_t pe = 0;
    std::uint32_t num_pes = 1;
    std::string backend;   // "io_uring", "asio"
    std::string provider;  // rdma provider or "none"
    std::string config;    // "NAME=VALUE\n..." effective settings, free text
};

/// Where and how much to record.
struct record_options {
    std::string dir;
    std::uint64_t limit_bytes = 256ull << 20;  // of events, per PE
    limit_mode mode = limit_mode::stop;
    std::size_t chunk_events = 2048;  // 80 KiB chunks
    std::size_t max_chunks = 32;      // in memory at once; beyond: dropped_behind

    /// nullopt when COVERSE_TRACE is unset or empty. Reads COVERSE_TRACE (the directory),
    /// COVERSE_TRACE_LIMIT (bytes; suffix K, M, G for KiB, MiB, GiB) and
    /// COVERSE_TRACE_MODE (stop | ring). Throws std::invalid_argument naming the variable
    /// and the accepted values for a bad one.
    static std::optional<record_options> from_env();
};

/// A PE's recorder: owns the file, the in-memory chunks and the writer thread. Events go
/// in through `write` (normally via `emit`, once installed) on one thread — the PE's;
/// `flush`, `hand_off` and the destructor must run on that thread too (from another
/// thread `flush` writes only what was already handed off). Not async-signal-safe.
class sink {
public:
    /// Creates `opts.dir` if needed and opens `dir/coverse-trace.<pe>.bin` (truncating
    /// it), writes the header, starts the writer thread. Throws std::system_error (a
    /// std::runtime_error) naming the directory or file when it cannot.
    sink(const session_info& info, const record_options& opts);
    /// Shorthand for tests and tools: default limits, no backend/provider/config.
    sink(const std::string& dir, std::uint32_t pe, std::size_t chunk_events = 2048);
    ~sink();  // flushes, stops the writer, marks the file closed
    sink(const sink&) = delete;
    sink& operator=(const sink&) = delete;

    /// Appends one event: a clock read, a 40-byte store and one compare. Only when the
    /// chunk is full does it hand it to the writer (a mutex and a condition-variable
    /// notify) and take a free one.
    void write(kind k, std::uint64_t object, std::uint64_t a, std::uint64_t b) noexcept {
        *_cursor = event{now_ns(), _pe, static_cast<std::uint16_t>(k), 0, object, a, b};
        if (++_cursor == _end) [[unlikely]]
            overflow();
    }

    /// Hands what is buffered to the writer and waits until it is in the file (page cache).
    /// For CmiAbort and exit paths; safe to call more than once.
    void flush() noexcept;
    /// Hands a partly filled chunk to the writer without waiting (the PE is going idle).
    void hand_off() noexcept;
    /// hand_off() if the current chunk holds events older than `age`.
    void hand_off_if_older(std::chrono::nanoseconds age) noexcept;

    const std::string& path() const noexcept { return _path; }
    std::uint32_t pe() const noexcept { return _pe; }
    /// Events recorded so far, buffered or in the file (ring mode: overwritten ones too).
    std::uint64_t recorded() const noexcept;
    /// Events lost so far: after the limit (stop), overwritten (ring), or writer behind.
    std::uint64_t dropped() const noexcept;
    /// Kept for old callers: same as recorded().
    std::uint64_t written() const noexcept { return recorded(); }

    static std::uint64_t now_ns() noexcept {
        return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                              std::chrono::steady_clock::now().time_since_epoch())
                                              .count());
    }

private:
    struct state;              // chunks, the file, the writer thread (trace.cpp)
    void overflow() noexcept;  // the chunk (or the scratch slot) just filled
    bool acquire_chunk(bool dropping) noexcept;
    void to_scratch() noexcept {
        _cursor = &_scratch;
        _end = &_scratch + 1;
    }

    // Without a chunk (none yet, limit reached, writer behind) events land in _scratch,
    // whose "fullness" sends every one of them to overflow(): it places or drops them.
    event _scratch{};
    event* _cursor = &_scratch;
    event* _end = &_scratch + 1;
    std::uint32_t _pe;
    std::string _path;
    std::unique_ptr<state> _s;
};

namespace detail {
inline thread_local sink* current_sink = nullptr;
}

/// Installs `s` as this thread's sink (null turns tracing off); returns the previous one.
inline sink* install(sink* s) noexcept {
    sink* old = detail::current_sink;
    detail::current_sink = s;
    return old;
}
inline bool enabled() noexcept {
    return detail::current_sink != nullptr;
}

/// The trace point. Costs one well-predicted branch while tracing is off.
inline void emit(kind k, std::uint64_t object, std::uint64_t a = 0, std::uint64_t b = 0) noexcept {
    if (sink* s = detail::current_sink) [[unlikely]]
        s->write(k, object, a, b);
}
inline void emit_handle_allocated(std::uint64_t handle, const handle_allocation& h) noexcept {
    if (sink* s = detail::current_sink) [[unlikely]]
        s->write(kind::handle_allocated, handle, h.a(), h.b());
}

/// A PE's recording: opens DIR/coverse-trace.<pe>.bin (creating DIR), installs itself as
/// the constructing thread's sink, and in its destructor (on that same thread) uninstalls,
/// flushes and closes. While it lives, a normal `exit()` also flushes it.
class session {
public:
    session(const session_info& info, const record_options& opts);
    ~session();
    session(const session&) = delete;
    session& operator=(const session&) = delete;

    /// Writes what is buffered; safe to call from CmiAbort (on the PE's thread).
    void flush() noexcept { _sink.flush(); }
    std::uint64_t dropped() const noexcept { return _sink.dropped(); }
    std::uint64_t recorded() const noexcept { return _sink.recorded(); }
    const std::string& path() const noexcept { return _sink.path(); }
    /// The recorder, e.g. for a trace::flush_poller (trace_poller.hpp).
    trace::sink& recorder() noexcept { return _sink; }

private:
    trace::sink _sink;
    trace::sink* _previous;
};

/// nullptr when COVERSE_TRACE is not set. Limits: COVERSE_TRACE_LIMIT (bytes per PE, e.g.
/// 64M, default 256 MiB), COVERSE_TRACE_MODE=ring|stop (default stop). Throws
/// std::runtime_error naming DIR when it cannot be created or written, and
/// std::invalid_argument for a bad setting.
std::unique_ptr<session> start_from_env(const session_info& info);

/// The info section of a file, decoded (defaults where a record is missing).
struct file_info {
    std::uint32_t num_pes = 0;  // 0: unknown
    std::string backend, provider, config, host;
    std::uint32_t pid = 0;
    bool has_limit = false;
    limit_record limit{};
    bool has_progress = false;
    progress_record progress{};

    file_state state() const noexcept {
        return has_progress ? static_cast<file_state>(progress.state) : file_state::recording;
    }
    std::uint64_t dropped() const noexcept {
        return progress.dropped_limit + progress.dropped_overwritten + progress.dropped_behind;
    }
};

/// Reads a trace file back (for tools and tests), oldest event first. Throws
/// std::runtime_error naming the file and the byte offset when the header cannot be used
/// (too short, bad magic, unknown version or event size, header_size out of bounds). Past
/// the header, nothing throws: a bad info record or event is reported in `error` (file and
/// offset of the first, how many events were skipped) and everything else is kept; a torn
/// last event is left out and counted in `truncated_bytes`, its offset in
/// `truncated_offset`.
struct file_contents {
    file_header header;
    file_info info;
    std::vector<event> events;
    std::uint64_t truncated_bytes = 0;
    std::uint64_t truncated_offset = 0;
    std::string error;  // "" or "<path> at byte N: what"
};
file_contents read_file(const std::string& path);

/// "coverse-trace.<pe>.bin"
std::string file_name(std::uint32_t pe);

}  // namespace coverse::trace
