// doctor: the hang report. One PE's state as the report sees it (what its tasks wait for,
// its queues and handles, how long since it heard from each peer, the handler it runs), its
// encoding in state_reply frames, and the job-wide analysis: the wait-for graph across
// PEs, its cycles and the PEs everyone ends up waiting on, as text, JSON or DOT.
// How to read a report: docs/doctor.md.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <coverse/runtime/wait_reason.hpp>

namespace coverse::net::doctor {

/// Environment variable naming the PE's end of its doctor channel (a socket inherited
/// from coverse-run), over which the launcher asks for the PE's state.
inline constexpr const char* channel_env = "COVERSE_DOCTOR_FD";

/// Exit status of coverse-run when it stopped a job it found stuck.
inline constexpr int stuck_exit_status = 124;

enum class report_format : std::uint8_t { text, json };

/// What coverse-run does with reports (--report-stuck-after, --json, --report-to, --dot).
struct report_options {
    /// Report and stop once no PE has made progress (received a message or run a
    /// handler) for this long. Unset: never.
    std::optional<std::chrono::milliseconds> stuck_after;
    report_format format = report_format::text;
    std::string report_file;  ///< append reports here instead of stderr
    std::string dot_file;     ///< write the wait-for graph of each report here (DOT)
};

struct wait_entry {
    wait_kind kind = wait_kind::other;
    std::uint32_t peer = no_peer;
    std::uint64_t id = 0;
    std::string detail;
    std::uint32_t count = 1;  ///< identical waits, folded into one entry
    friend bool operator==(const wait_entry&, const wait_entry&) = default;
};

struct peer_entry {
    std::uint32_t pe = 0;
    std::uint64_t messages = 0;  ///< received from it so far
    double heard_ago = -1;       ///< seconds since the last one; negative: never
    friend bool operator==(const peer_entry&, const peer_entry&) = default;
};

/// One connection of a PE (its mesh's link_info, as text for the report).
struct link_entry {
    std::uint32_t pe = 0;
    std::string state;    ///< "connected", "connecting", "error", ...
    bool lazily = false;  ///< made on first use (CONNECT=lazy)
    bool dialed = false;  ///< this PE dialed it (else it accepted)
    double up_at = -1;    ///< seconds after the PE's mesh was made; negative: not up
    friend bool operator==(const link_entry&, const link_entry&) = default;
};

struct handle_count {
    std::string protocol;  ///< "inline", "stream", later "rndv/get", "eager/short", ...
    std::uint32_t count = 0;
    friend bool operator==(const handle_count&, const handle_count&) = default;
};

/// One PE's answer to a state request.
struct pe_state {
    std::uint32_t pe = 0;
    std::int64_t pid = 0;
    /// true: its scheduler answered, so waits, queues and handles are filled in; false:
    /// only the responder thread did (the scheduler is busy), or only progress was asked.
    bool full = false;
    double uptime = 0;           ///< seconds since the PE started
    std::uint64_t progress = 0;  ///< messages received plus handlers run, so far
    bool in_handler = false;
    std::int32_t handler = -1;
    std::string handler_name;    ///< symbol of the handler function, when known
    double handler_seconds = 0;  ///< how long the running handler has run (±0.1 s)
    std::uint64_t ready_tasks = 0, network_queue = 0, scheduler_queue = 0, deliveries = 0,
                  timers = 0;
    std::uint32_t handles_in_use = 0, handles_user_held = 0, handles_total = 0;
    std::vector<handle_count> handles;  ///< in use, by protocol
    std::uint32_t barrier_epoch = 0;    ///< barriers this PE has begun
    std::vector<wait_entry> waits;
    std::vector<peer_entry> peers;  ///< every other PE
    std::string note;
    std::string connect;            ///< the CONNECT setting, "lazy" or "eager" ("" no mesh)
    std::vector<link_entry> links;  ///< its connections (made or being made)
    friend bool operator==(const pe_state&, const pe_state&) = default;
};

/// The state_reply payload. Little-endian, a version byte first; strings are length-prefixed.
std::vector<std::byte> encode(const pe_state& s);
/// Validates every length and count against the span (never reads past it); nullopt with
/// `why` set when the bytes are not a state this build can read.
std::optional<pe_state> decode_state(std::span<const std::byte> bytes, std::string* why);

/// What the launcher got from one PE.
struct pe_answer {
    std::uint32_t pe = 0;
    std::int64_t pid = 0;
    std::optional<pe_state> state;
    std::string missing;  ///< no state: why ("exited", "did not answer within 2.0 s")
};

/// One edge of the wait-for graph: `from` waits for `to`.
struct wait_edge {
    std::uint32_t from = 0, to = 0;
    wait_kind kind = wait_kind::other;
    std::uint64_t id = 0;
    std::string detail;
};

struct blame {
    std::uint32_t pe = 0;
    std::uint32_t waiting = 0;  ///< PEs that end up waiting on it, directly or through others
};

struct report {
    std::string reason;  ///< "stuck: no PE made progress for 30.0 s", "SIGQUIT"
    std::uint32_t num_pes = 0;
    std::vector<pe_answer> pes;
    std::vector<wait_edge> edges;
    std::vector<std::vector<std::uint32_t>> cycles;  ///< each from its smallest PE, in order
    std::vector<blame> blamed;                       ///< most waited-on first
    std::string barrier;  ///< "barrier epoch 1: entered by PEs 0-2; not by PE 3", or ""
};

/// Builds the graph (an edge per wait with a peer), finds its cycles (one per strongly
/// connected component), and ranks the PEs that waiting PEs end up on (the members of
/// the sink components they reach).
report analyze(std::string reason, std::uint32_t num_pes, std::vector<pe_answer> answers);

std::string render_text(const report& r);
std::string render_json(const report& r);
/// The wait-for graph: a node per PE (blamed ones filled), an edge per wait, labelled
/// with its kind; cycle edges in red.
std::string render_dot(const report& r);

/// "PE 3", "PEs 0, 1", "PEs 0-7, 9".
std::string pe_list(const std::vector<std::uint32_t>& pes);

/// "PE 0 waits for credits from PE 1" style phrase for one edge.
std::string describe(const wait_edge& e);

}  // namespace coverse::net::doctor
