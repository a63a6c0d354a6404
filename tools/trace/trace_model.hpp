// trace_model: what coverse-trace knows about a run — the PEs' files merged on one clock,
// and the lifecycles rebuilt from them (handles, phases, credits, registrations, counters)
// — plus the analyses the commands print: summary, leaks, stalls and the Perfetto export.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <coverse/runtime/trace.hpp>

namespace coverse::trace_tool {

// ---- loading and merging ---------------------------------------------------------------

/// A file problem: which file, and the reader's message (it names the byte offset).
struct problem {
    std::string file;
    std::string message;
    bool file_unused = false;  // the header was unusable: none of the file's events are in
};

/// One PE's events on the merged clock: `ts_ns` of every event is rewritten to trace time,
/// nanoseconds since the earliest header's realtime reference among all PEs.
struct pe_trace {
    std::uint32_t pe = 0;
    std::string path;
    trace::file_header header{};
    trace::file_info info;
    std::vector<trace::event> events;
    std::int64_t steady_to_trace_ns = 0;  // add to a steady ns of this PE to get trace time
    std::uint64_t end_ns = 0;             // trace time of the PE's last event, flush or close
    /// The file holds less than its writer put in it: torn, cut short, or bad events.
    bool incomplete = false;

    std::uint64_t to_trace(std::uint64_t steady_ns) const noexcept;
    /// Events after the limit, behind the writer, or past a damaged spot are missing: what
    /// the PE did last is not all there.
    bool lost_tail() const noexcept {
        return incomplete || info.progress.dropped_limit > 0 || info.progress.dropped_behind > 0;
    }
};

struct trace_set {
    std::string dir;
    std::vector<pe_trace> pes;  // by PE number
    std::vector<problem> problems;
    std::uint64_t origin_realtime_ns = 0;  // wall-clock time of trace time 0

    bool damaged() const noexcept { return !problems.empty(); }
    const pe_trace* find(std::uint32_t pe) const noexcept;
};

/// Thrown when there is nothing to read: DIR missing, no coverse-trace.*.bin file in it,
/// or no file with a usable header. coverse-trace exits 3.
struct input_error : std::runtime_error {
    using std::runtime_error::runtime_error;
};

/// Reads every DIR/coverse-trace.*.bin and merges them (`merge`). Problems with single
/// files are collected, not thrown.
trace_set load_dir(const std::string& dir);

/// Aligns the PEs' clocks: a PE's steady timestamp t maps to wall time
/// t - steady_ref + realtime_ref (both references read together at the PE's start), and
/// trace time 0 is the earliest realtime reference. Duplicate PEs are problems (the later
/// file is not used).
trace_set merge(std::string dir, std::vector<std::pair<std::string, trace::file_contents>> files,
                std::vector<problem> problems = {});

// ---- lifecycles -------------------------------------------------------------------------

/// A handle's states, in the order the machine core moves through them.
enum class handle_state : std::uint8_t {
    allocated,
    published,
    get_posted,
    put_done,
    completed,
    released,
};
std::string state_name(handle_state s);

struct transition {
    handle_state state;
    std::uint64_t t;  // trace time it was entered
};

struct handle_life {
    std::uint32_t pe = 0;
    std::uint64_t id = 0;
    trace::handle_allocation alloc;
    std::vector<transition> states;  // states[0] is `allocated`
    std::uint64_t end = 0;           // released, or the PE's end when never released

    bool released() const noexcept { return states.back().state == handle_state::released; }
    std::uint64_t start() const noexcept { return states.front().t; }
    std::optional<std::uint64_t> completed_at() const noexcept;
    bool is_send() const noexcept { return alloc.dir == trace::direction::send; }
    /// "send eager short to PE 1 #4 (0x0000000100000002)"
    std::string describe() const;
};

struct phase_span {
    std::uint32_t pe = 0;
    std::uint64_t id = 0;
    std::uint64_t arg = 0;  // barrier epoch
    std::uint64_t begin = 0, end = 0;
    bool ended = false;  // false: no phase_end before the PE's trace ended
};

struct credit_change {
    std::uint32_t pe = 0, peer = 0;
    bool spent = true;  // false: returned
    std::uint64_t count = 0;
    std::uint64_t attribution = 0;  // trace::credit_protocol(p), 0 when not attributed
    std::uint64_t t = 0;
};

struct registration_life {
    std::uint32_t pe = 0;
    std::uint64_t id = 0, bytes = 0;
    std::uint64_t added = 0;
    std::optional<std::uint64_t> dropped;
};

struct counter_sample {
    std::uint32_t pe = 0;
    std::uint64_t id = 0;
    std::int64_t value = 0;
    std::uint64_t t = 0;
};

struct model {
    std::vector<handle_life> handles;  // by PE, then allocation time
    std::vector<phase_span> phases;
    std::vector<credit_change> credits;
    std::vector<registration_life> registrations;
    std::vector<counter_sample> counters;
    /// Handle events whose allocation is not in the trace (a ring overwrote it, or the
    /// emitter skipped it): not attached to any handle.
    std::uint64_t orphan_events = 0;
    /// A handle id allocated again before its release: the earlier life is kept unreleased.
    std::uint64_t reused_ids = 0;
};
model analyse(const trace_set& set);

/// A send handle and the receive handle it became on its receiver: same (sender,
/// receiver, sequence), matched in order when a sequence number repeats.
struct flow {
    std::size_t send;     // index into model::handles
    std::size_t receive;  // index into model::handles
};
std::vector<flow> match_flows(const model& m, std::size_t* unmatched = nullptr);

// ---- analyses ---------------------------------------------------------------------------

/// Nearest-rank percentiles: p50 is the smallest sample with at least half the samples at
/// or below it; p99 likewise for 99 %. All zero when `samples` is empty.
struct latency_stats {
    std::size_t n = 0;
    std::uint64_t p50 = 0, p99 = 0, max = 0;
};
latency_stats percentiles(std::vector<std::uint64_t> samples);

struct protocol_row {
    unsigned proto = 0;
    trace::direction dir = trace::direction::send;
    std::size_t handles = 0, completed = 0, released = 0;
    latency_stats latency;  // allocation to completion, completed handles only
    std::uint64_t bytes = 0;
};
struct credit_row {
    std::uint64_t attribution = 0;  // 0: not attributed, else protocol + 1
    std::uint64_t spent = 0, returned = 0;
};
struct credit_pair {
    std::uint32_t pe = 0, peer = 0;
    std::uint64_t spent = 0, returned = 0;
    std::uint64_t last_t = 0;
};
struct summary {
    std::vector<protocol_row> rows;  // only protocols/directions that occur
    std::vector<credit_row> credits;
    std::vector<credit_pair> credit_pairs;
    std::size_t registrations = 0, registrations_dropped = 0;
    std::uint64_t registered_bytes = 0;
    std::size_t flows = 0, unmatched = 0;
};
summary summarize(const model& m);
void print_summary(const trace_set& set, const model& m, const summary& s, std::ostream& out);

/// Per-PE file overview: header, settings, counts, clock offset.
void print_info(const trace_set& set, std::ostream& out);

struct leak {
    enum class what_t { handle, registration, credits } what;
    std::uint32_t pe = 0;
    std::string description;  // what it is (protocol, peer, bytes)
    std::string last_state;   // where it stopped
    std::uint64_t since = 0;  // trace time it got there
    /// false: the PE's trace lost its tail (limit reached in stop mode, writer behind), so
    /// the release may simply not have been recorded. Not counted for the exit status.
    bool certain = true;
};
std::vector<leak> find_leaks(const trace_set& set, const model& m);
/// Prints the leaks; returns how many are certain.
std::size_t print_leaks(const trace_set& set, const std::vector<leak>& leaks, std::ostream& out);

struct stall {
    std::size_t handle = 0;  // index into model::handles
    handle_state state{};
    std::uint64_t entered = 0, duration = 0;
    bool open = false;  // still in that state when the PE's trace ended
};
/// States held longer than `bound_ns` (strictly), longest first.
std::vector<stall> find_stalls(const trace_set& set, const model& m, std::uint64_t bound_ns);
void print_stalls(const model& m, const std::vector<stall>& stalls, std::uint64_t bound_ns,
                  std::ostream& out);

/// Trace Event Format JSON for the Perfetto UI (and chrome://tracing). Layout in
/// docs/trace.md: one process per PE (pid = PE + 1), a "phases" thread, and handle lanes.
struct export_stats {
    std::size_t slices = 0, flows = 0, unmatched = 0, counters = 0, lanes = 0;
};
export_stats export_json(const trace_set& set, const model& m, std::ostream& out);

// ---- formatting -------------------------------------------------------------------------

/// "850 ns", "12.3 us", "4.56 ms", "1.23 s"
std::string format_duration(std::uint64_t ns);
/// "10ms", "250us", "1.5s", "800ns" (also "µs") to ns; nullopt for anything else.
std::optional<std::uint64_t> parse_duration(const std::string& text);

}  // namespace coverse::trace_tool
