// settings: the registry of every coverse setting, and resolving, checking and parsing their
// values. The lookup itself (command-line overrides, then the two environment spellings) is
// alloc::env_setting, so code below runtime sees the same precedence.
#include <coverse/runtime/settings.hpp>

#include <unistd.h>  // environ

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <utility>

#include <coverse/alloc/config.hpp>

namespace coverse::settings {

namespace {

using vt = value_type;
constexpr std::uint64_t KiB = 1024;
constexpr std::uint64_t MiB = 1024 * KiB;

constexpr std::array<std::string_view, 4> net_backends{"auto", "uring", "io_uring", "asio"};
constexpr std::array<std::string_view, 2> trace_modes{"stop", "ring"};
constexpr std::array<std::string_view, 4> rdma_providers{"auto", "cma", "tcp", "verbs"};
constexpr std::array<std::string_view, 2> peer_lost_policies{"abort", "report"};
constexpr std::array<std::string_view, 2> connect_modes{"lazy", "eager"};
constexpr std::array<std::string_view, 3> eager_remote_modes{"auto", "put", "frames"};

// Grouped by layer, bottom up; within a layer, DESIGN.md's order where it has one. A setting
// is never removed (old job scripts set it): retire it by saying so in its meaning.
constexpr setting_info registry[] = {
    // ---- alloc ---------------------------------------------------------------------------
    {.name = "MEMORY_POOL",
     .type = vt::switch_,
     .default_value = "on",
     .meaning = "bucket pool for message memory up to 16 KiB; off: every message from malloc",
     .layer = "alloc"},
    {.name = "MEMORY_POOL_PREALLOCATE",
     .type = vt::count,
     .default_value = "128",
     .meaning = "entries each pool bucket allocates when a thread's pool is created",
     .layer = "alloc"},
    {.name = "MEMORY_POOL_GROW",
     .type = vt::count,
     .default_value = "128",
     .meaning = "entries a pool bucket adds when it runs empty",
     .layer = "alloc",
     .minimum = 1},
    {.name = "LEAK_REPORT",
     .type = vt::switch_,
     .default_value = "off",
     .meaning = "record each message's allocation site and print what is still live at exit",
     .layer = "alloc"},
    {.name = "LARGE_CACHE",
     .type = vt::bytes,
     .default_value = "268435456",
     .meaning = "bytes of freed large messages kept for reuse (no fresh pages per message); "
                "0 or off: none",
     .layer = "alloc",
     .off_is_zero = true},
    {.name = "RCACHE",
     .type = vt::switch_,
     .default_value = "on",
     .meaning = "registration cache; off: register every buffer anew, deregister on release",
     .layer = "alloc"},
    {.name = "RCACHE_MAX_ENTRIES",
     .type = vt::count,
     .default_value = "4096",
     .meaning = "registration cache entries past which unused ones are evicted (LRU)",
     .layer = "alloc",
     .minimum = 1},
    {.name = "RCACHE_MAX_BYTES",
     .type = vt::bytes,
     .default_value = "1073741824",
     .meaning = "registered bytes past which unused cache entries are evicted (LRU)",
     .layer = "alloc",
     .minimum = 1},

    // ---- runtime -------------------------------------------------------------------------
    {.name = "SPIN_US",
     .type = vt::microseconds,
     .default_value = "200",
     .meaning = "how long an idle scheduler keeps polling before it blocks",
     .layer = "runtime"},
    {.name = "SPIN_PAUSE",
     .type = vt::count,
     .default_value = "1",
     .meaning = "pause instructions a spinning scheduler runs after each poll that found "
                "nothing (0: none; x86 pause, Arm yield, no effect elsewhere): a peer "
                "writing into a ring this PE polls then keeps its cache line between its "
                "stores",
     .layer = "runtime",
     .maximum = 64},
    {.name = "KERNEL_POLL_EVERY",
     .type = vt::count,
     .default_value = "16",
     .meaning = "while every peer's messages come by shared memory, a spinning scheduler "
                "enters the kernel for io_uring completions on every N-th idle poll only "
                "(1: every poll)",
     .layer = "runtime",
     .minimum = 1},
    {.name = "TASK_QUOTA",
     .type = vt::count,
     .default_value = "64",
     .meaning = "ready tasks run per loop iteration before the pollers (0 counts as 1)",
     .layer = "runtime"},
    {.name = "IO_URING",
     .type = vt::switch_,
     .default_value = "on",
     .meaning = "give each scheduler an io_uring ring; off: block in poll(2), net uses Asio",
     .layer = "runtime"},
    {
        .name = "TRACE",
        .type = vt::string,
        .default_value = "",
        .meaning = "directory each PE writes coverse-trace.<pe>.bin into; empty: no tracing",
        .layer = "runtime",
    },
    {
        .name = "TRACE_LIMIT",
        .type = vt::bytes,
        .default_value = "268435456",
        .meaning = "most trace bytes one PE writes (TRACE_MODE says what then); at least 40",
        .layer = "runtime",
        .minimum = 40,
    },
    {
        .name = "TRACE_MODE",
        .type = vt::choice,
        .default_value = "stop",
        .meaning = "at TRACE_LIMIT: stop recording, or ring (keep the newest events)",
        .layer = "runtime",
        .choices = trace_modes,
    },

    // ---- runtime/machine: the machine core ----------------------------------------------
    {
        .name = "MAXIMUM_HANDLES",
        .type = vt::count,
        .default_value = "10000",
        .meaning = "live send/receive handles per PE; past it senders wait, never crash",
        .layer = "api (machine core)",
        .minimum = 1,
    },
    {
        .name = "SEND_QUEUE_BYTES",
        .type = vt::bytes,
        .default_value = "4194304",
        .meaning = "bytes of copied or handed-over messages a PE's sends may hold; past it a "
                   "send waits for earlier ones to go (back-pressure)",
        .layer = "api (machine core)",
        .minimum = 1,
    },
    {
        .name = "BROADCAST_TREE",
        .type = vt::switch_,
        .default_value = "on",
        .meaning = "broadcast along a spanning tree of fan-out 4; off: the root sends to every PE",
        .layer = "api (machine core)",
    },
    {
        .name = "ON_PEER_LOST",
        .type = vt::choice,
        .default_value = "abort",
        .meaning = "a PE that dies: abort stops the job naming it; report keeps the others "
                   "running and completes coroutine API operations that need it with "
                   "coverse::peer_lost",
        .layer = "api (machine core)",
        .choices = peer_lost_policies,
    },
    {
        .name = "SHM",
        .type = vt::switch_,
        .default_value = "on",
        .meaning = "PEs on one host exchange messages through shared-memory rings; off: TCP",
        .layer = "api (machine core)",
    },
    {
        .name = "SHM_RING_BYTES",
        .type = vt::bytes,
        .default_value = "262144",
        .meaning = "bytes of each same-host ring (one per ordered pair of PEs; power of two)",
        .layer = "api (machine core)",
        .minimum = 65536,
    },
    {
        .name = "CTH_STACK_SIZE",
        .type = vt::bytes,
        .default_value = "262144",
        .meaning = "stack of each Cth thread made with size 0 (a guard page sits below it)",
        .layer = "api (machine core)",
        .minimum = 16384,
    },
    {
        .name = "LONG_IDLE_TIME",
        .type = vt::seconds,
        .default_value = "10",
        .meaning = "idle time after which CcdPROCESSOR_LONG_IDLE is raised (once per idle spell)",
        .layer = "api (machine core)",
    },
    {.name = "WAN_LATENCY",
     .type = vt::microseconds,
     .default_value = "1000",
     .meaning = "latency above which two PEs are in different clusters",
     .layer = "api (machine core)"},
    {.name = "PROBE_CLUSTERS",
     .type = vt::switch_,
     .default_value = "off",
     .meaning = "probe latencies at start-up and build the cluster map",
     .layer = "api (machine core)"},
    {.name = "GRID_QUEUE",
     .type = vt::switch_,
     .default_value = "off",
     .meaning = "messages for registered border objects jump the scheduler queue",
     .layer = "api (machine core)"},
    {.name = "GRID_QUEUE_MAXIMUM",
     .type = vt::count,
     .default_value = "100",
     .meaning = "most border objects the grid queue accepts",
     .layer = "api (machine core)"},
    {.name = "GRID_QUEUE_INTERVAL",
     .type = vt::count,
     .default_value = "0",
     .meaning = "messages after which a Charm++ array element re-judges itself a border object",
     .layer = "api (machine core)"},
    {.name = "GRID_QUEUE_THRESHOLD",
     .type = vt::count,
     .default_value = "0",
     .meaning = "cross-cluster messages within an interval that make an element a border object",
     .layer = "api (machine core)"},

    // ---- net -----------------------------------------------------------------------------
    {.name = "NET_BACKEND",
     .type = vt::choice,
     .default_value = "auto",
     .meaning = "stream backend: auto (io_uring, else Asio), uring/io_uring, or asio",
     .layer = "net",
     .choices = net_backends},
    {.name = "CONNECT",
     .type = vt::choice,
     .default_value = "lazy",
     .meaning = "when two PEs connect: lazy on their first message (the connection, the "
                "same-host ring and the one-sided set-up of that pair), eager every pair at "
                "start-up (start-up then grows with the square of the PE count)",
     .layer = "net",
     .choices = connect_modes},
    {.name = "CONNECTION_TIMEOUT",
     .type = vt::seconds,
     .default_value = "300",
     .meaning = "connection set-up and the disconnect handshake give up after this long",
     .layer = "net",
     .minimum = 1},
    {.name = "NETWORK_INTERFACE",
     .type = vt::string,
     .default_value = "",
     .meaning = "multi-host jobs: interfaces to listen on (names, globs, CIDR; ^ excludes)",
     .layer = "net"},
    {.name = "HOST_ID",
     .type = vt::string,
     .default_value = "",
     .meaning = "this process's host identity (same value: same host, shared memory)",
     .layer = "net"},
    {.name = "MAX_MESSAGE",
     .type = vt::bytes,
     .default_value = "2147483647",
     .meaning = "largest message a peer may ask this PE to allocate (a rendezvous offer)",
     .layer = "net",
     .minimum = 1,
     .maximum = 0x7FFF'FFFF},
    {.name = "ZC_THRESHOLD",
     .type = vt::bytes,
     .default_value = "0",
     .meaning = "io_uring: zero-copy send from this many bytes up; 0 or off: never",
     .layer = "net",
     .off_is_zero = true},
    {.name = "RECV_MULTISHOT",
     .type = vt::switch_,
     .default_value = "off",
     .meaning = "io_uring: one multishot receive per stream into a provided-buffer ring",
     .layer = "net"},
    {.name = "RECV_SPIN",
     .type = vt::switch_,
     .default_value = "on",
     .meaning = "io_uring: while the loop spins, read sockets with recv instead of the ring",
     .layer = "net"},
    {.name = "RECV_BUFFERS",
     .type = vt::count,
     .default_value = "32",
     .meaning = "io_uring multishot: buffers in each stream's ring (a power of two)",
     .layer = "net",
     .minimum = 1,
     .maximum = 32768},
    {.name = "RECV_BUFFER_SIZE",
     .type = vt::bytes,
     .default_value = "32768",
     .meaning = "io_uring multishot: bytes per ring buffer",
     .layer = "net",
     .minimum = 1,
     .maximum = 16 * MiB},
    // Start-up through the resource manager (coverse-crm); docs/startup.md.
    {.name = "CRM",
     .type = vt::string,
     .default_value = "",
     .meaning = "HOST:PORT of a coverse-crm to register with (as ++crm); empty: none",
     .layer = "net"},
    {.name = "CRM_KEY",
     .type = vt::string,
     .default_value = "",
     .meaning = "the job key every process of one CRM job registers under (as ++key)",
     .layer = "net"},
    {.name = "CRM_CLUSTER",
     .type = vt::count,
     .default_value = "0",
     .meaning = "the cluster this process registers with the CRM (as ++cluster)",
     .layer = "net"},
    {.name = "CRM_NODE_CONTEXT",
     .type = vt::count,
     .default_value = "0",
     .meaning = "CRM: PEs are numbered by node context, ties in order of arrival",
     .layer = "net"},
    {.name = "CRM_PORT",
     .type = vt::count,
     .default_value = "7777",
     .meaning = "the port coverse-crm listens on, and the CRM's port when ++crm gives none",
     .layer = "net",
     .minimum = 0,
     .maximum = 65535},
    {.name = "CRM_TIMEOUT",
     .type = vt::seconds,
     .default_value = "60",
     .meaning = "coverse-crm: a job whose processes have not all registered by then fails",
     .layer = "net",
     .minimum = 1},

    // ---- rdma: protocols by size, eager channels ----------------------------------------
    {
        .name = "SMALL_MESSAGE_BOUNDARY",
        .type = vt::bytes,
        .default_value = "2048",
        .meaning = "messages up to this size go out in one inline stream send",
        .layer = "rdma",
    },
    {.name = "MEDIUM_MESSAGE_BOUNDARY",
     .type = vt::bytes,
     .default_value = "16384",
     .meaning = "messages up to this size are a buffered stream send; above: rendezvous",
     .layer = "rdma"},
    {.name = "RDMA_PROVIDER",
     .type = vt::choice,
     .default_value = "auto",
     .meaning = "one-sided provider for every peer: auto (same host cma, else verbs, else tcp), "
                "cma, tcp or verbs",
     .layer = "rdma",
     .choices = rdma_providers},
    {.name = "RNDV_CHUNK",
     .type = vt::bytes,
     .default_value = "4194304",
     .meaning = "a rendezvous get is posted in pieces of at most this many bytes",
     .layer = "rdma",
     .minimum = 4096},
    {.name = "RNDV_FETCHES",
     .type = vt::count,
     .default_value = "2",
     .meaning = "rendezvous fetched from one peer at once; the rest wait their turn in order",
     .layer = "rdma",
     .minimum = 1,
     .maximum = 1024},
    {.name = "RNDV_SPLIT",
     .type = vt::bytes,
     .default_value = "262144",
     .meaning = "same host: from this size the sender copies the second half while the "
                "receiver gets the first, and the target of a one-sided put or get copies "
                "part of it; 0 or off: the receiver (the put's or get's initiator) copies all",
     .layer = "rdma",
     .off_is_zero = true},
    {.name = "EAGER_PROTOCOL",
     .type = vt::switch_,
     .default_value = "on",
     .meaning = "receivers open eager channels to busy same-host senders",
     .layer = "rdma"},
    {.name = "EAGER_INTERVAL",
     .type = vt::microseconds,
     .default_value = "10000",
     .meaning = "window in which EAGER_THRESHOLD messages make a sender busy",
     .layer = "rdma"},
    {.name = "EAGER_THRESHOLD",
     .type = vt::count,
     .default_value = "1000",
     .meaning = "messages within EAGER_INTERVAL that earn a sender an eager channel",
     .layer = "rdma"},
    {.name = "EAGER_SHORT_SLOTS",
     .type = vt::count,
     .default_value = "16",
     .meaning = "slots (credits) per sender in a receiver's short channel",
     .layer = "rdma",
     .minimum = 1},
    {.name = "EAGER_SHORT_MESSAGE_BOUNDARY",
     .type = vt::bytes,
     .default_value = "16384",
     .meaning = "largest message that fits a short-channel slot",
     .layer = "rdma"},
    {.name = "EAGER_SHORT_MINIMUM",
     .type = vt::bytes,
     .default_value = "512",
     .meaning = "same-host messages up to this size go by the ring, not a short channel",
     .layer = "rdma"},
    {.name = "EAGER_SHORT_POLLSET_SIZE_MAXIMUM",
     .type = vt::count,
     .default_value = "32",
     .meaning = "most senders whose short channels a receiver polls",
     .layer = "rdma"},
    {.name = "EAGER_CREDIT_DELAY",
     .type = vt::microseconds,
     .default_value = "200",
     .meaning = "over a connection: freed slots go back to their sender in a credit frame "
                "after at most this long when no other frame carried them; 0: only once "
                "half the slots are owed",
     .layer = "rdma"},
    {.name = "EAGER_GATE_WAIT",
     .type = vt::microseconds,
     .default_value = "20",
     .meaning = "retired 2026-12-05, read by nothing: a same-host send behind messages still "
                "in a short channel no longer waits for the receiver to take them (its ring "
                "record tells the receiver to take them first)",
     .layer = "rdma"},
    {.name = "EAGER_REMOTE",
     .type = vt::choice,
     .default_value = "auto",
     .meaning = "peers over a connection (another host, or SHM=off): a short channel's messages "
                "go by one-sided put into the receiver's registered slots (put) or as frames "
                "its reader places (frames); auto: put where the pair's provider is verbs",
     .layer = "rdma",
     .choices = eager_remote_modes},
    {.name = "EAGER_LONG_BUFFERS",
     .type = vt::count,
     .default_value = "3",
     .meaning = "long buffers a receiver publishes per persistent-handle sender",
     .layer = "rdma"},
    {.name = "EAGER_LONG_BUFFER_SIZE",
     .type = vt::bytes,
     .default_value = "1048576",
     .meaning = "bytes per eager long buffer",
     .layer = "rdma",
     .minimum = 1},
};

// COVERSE_* variables that coverse's own scripts read (scripts/fuzz.sh): not settings, so
// they do not warn. A tool that passes a variable of its own adds it here.
// The launcher's variables for its PEs (net/bootstrap.hpp) are not settings either.
constexpr std::string_view script_variables[] = {
    "FUZZ_CXX", "FUZZ_BUILD_DIR", "FUZZ_SKIP_EXIT", "LAUNCHER", "PE",
    "NUM_PES",  "JOB_KEY",        "TEST_PID_DIR",   "VERBOSE",  "BOUND_CPUS"};

constexpr std::string_view env_prefixes[] = {"COVERSE_", "CMI_VMI_"};

std::string upper(std::string_view s) {
    std::string out(s);
    for (char& c : out)
        c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return out;
}

// Edit distance with adjacent transpositions (a swapped pair is one typo, not two).
std::size_t distance(std::string_view a, std::string_view b) {
    std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
    for (std::size_t i = 0; i <= a.size(); ++i)
        d[i][0] = i;
    for (std::size_t j = 0; j <= b.size(); ++j)
        d[0][j] = j;
    for (std::size_t i = 1; i <= a.size(); ++i) {
        for (std::size_t j = 1; j <= b.size(); ++j) {
            const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
            d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
                d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
        }
    }
    return d[a.size()][b.size()];
}

// The value as a number (count as written, bytes in bytes, seconds and microseconds in µs),
// within the setting's range; nullopt otherwise. Sizes and durations go through alloc's one
// parser for each, so every size takes K/M/G and every duration a unit.
std::optional<std::uint64_t> parse_number(const setting_info& s, std::string_view text) {
    std::optional<std::uint64_t> n;
    if (s.off_is_zero && text == "off") {
        n = 0;
    } else if (s.type == vt::seconds) {
        n = alloc::parse_duration_us(text, 1'000'000);
    } else if (s.type == vt::microseconds) {
        n = alloc::parse_duration_us(text, 1);
    } else if (s.type == vt::bytes) {
        n = alloc::parse_size(text);
    } else if (auto c = alloc::parse_count(text)) {
        n = *c;
    }
    if (!n || *n < s.minimum || *n > s.maximum) return std::nullopt;
    return n;
}

std::string range_text(const setting_info& s, std::string_view unit) {
    std::string what = "a whole number";
    if (!unit.empty()) (what += " of ") += unit;
    const bool bounded = s.maximum != std::numeric_limits<std::uint64_t>::max();
    if (bounded) {
        what += " from " + std::to_string(s.minimum) + " to " + std::to_string(s.maximum);
    } else if (s.minimum > 0) {
        what += " of at least " + std::to_string(s.minimum);
    }
    if (s.off_is_zero) what += ", or off (0)";
    return what;
}

[[noreturn]] void wrong_type(std::string_view reader, const setting_info& s) {
    throw std::logic_error("coverse: settings::" + std::string(reader) + "(\"" +
                           std::string(s.name) + "\"): " + std::string(s.name) + " is a " +
                           std::string(to_string(s.type)) + " setting");
}

// The effective value of `s`, checked: a runtime_error naming the variable when malformed.
resolved checked(const setting_info& s) {
    resolved r = resolve(s.name);
    if (r.from == source::default_value) return r;
    if (auto problem = check(s, r.value)) {
        std::string msg = "coverse: " + r.variable + "='" + r.value + "' is not a valid " +
                          std::string(s.name) + ": " + *problem;
        if (!s.default_value.empty())
            msg += " (the default is " + std::string(s.default_value) + ")";
        throw std::runtime_error(msg);
    }
    return r;
}

std::string unknown_name_text(std::string_view name) {
    std::string msg = "coverse has no setting " + std::string(name);
    if (auto close = suggest(name); !close.empty())
        msg += " (did you mean " + std::string(close) + "?)";
    return msg + "; `coverse-info -c` lists every setting";
}

}  // namespace

std::string_view to_string(value_type type) noexcept {
    switch (type) {
        case vt::switch_:
            return "switch";
        case vt::count:
            return "count";
        case vt::bytes:
            return "bytes";
        case vt::seconds:
            return "seconds";
        case vt::microseconds:
            return "microseconds";
        case vt::string:
            return "string";
        case vt::choice:
            return "choice";
    }
    return "?";
}

std::string_view to_string(source from) noexcept {
    switch (from) {
        case source::command_line:
            return "command line";
        case source::environment:
            return "environment";
        case source::default_value:
            return "default";
    }
    return "?";
}

std::span<const setting_info> all() noexcept {
    return registry;
}

const setting_info* find(std::string_view name) noexcept {
    for (const setting_info& s : registry)
        if (s.name == name) return &s;
    return nullptr;
}

const setting_info& info(std::string_view name) {
    if (const setting_info* s = find(name)) return *s;
    throw std::invalid_argument("coverse: " + unknown_name_text(name));
}

std::string_view suggest(std::string_view name) {
    std::string wanted = upper(name);
    for (std::string_view prefix : env_prefixes)
        if (wanted.starts_with(prefix)) wanted.erase(0, prefix.size());
    std::string_view best;
    std::size_t best_distance = std::numeric_limits<std::size_t>::max();
    for (const setting_info& s : registry) {
        const std::size_t d = distance(wanted, s.name);
        const std::size_t shorter = std::min(wanted.size(), s.name.size());
        const bool contained = shorter >= 4 && (s.name.find(wanted) != std::string_view::npos ||
                                                wanted.find(s.name) != std::string::npos);
        const bool close = d <= std::max<std::size_t>(2, (wanted.size() + 2) / 3);
        if ((close || contained) && d < best_distance) {
            best = s.name;
            best_distance = d;
        }
    }
    return best;
}

resolved resolve(std::string_view name) {
    const setting_info& s = info(name);
    resolved r;
    r.name = std::string(s.name);
    if (auto found = alloc::env_setting(s.name)) {
        r.value = std::move(found->value);
        r.from = found->command_line ? source::command_line : source::environment;
        r.variable = std::move(found->variable);
    } else {
        r.value = std::string(s.default_value);
    }
    for (std::string_view prefix : env_prefixes) {
        const std::string variable = std::string(prefix) + r.name;
        const char* value = std::getenv(variable.c_str());
        if (value && *value && variable != r.variable) r.shadowed.push_back(variable + "=" + value);
    }
    return r;
}

std::string expected_form(const setting_info& s) {
    switch (s.type) {
        case vt::switch_:
            return "1/0, on/off, true/false or yes/no";
        case vt::count:
            return range_text(s, "");
        case vt::bytes:
            return range_text(s, "bytes") + " (K, M, G suffixes allowed: 64M)";
        case vt::microseconds:
            return range_text(s, "microseconds") + " (or with a unit: 500us, 2ms, 0.5s)";
        case vt::seconds:
            return s.minimum > 0 ? "a number of seconds above 0 (decimals or a unit allowed: 0.5, "
                                   "500ms, 2min)"
                                 : "a number of seconds (decimals or a unit allowed: 0.5, 500ms, "
                                   "2min)";
        case vt::string:
            return "any text";
        case vt::choice: {
            std::string out = "one of ";
            for (std::size_t i = 0; i < s.choices.size(); ++i) {
                if (i > 0) out += i + 1 == s.choices.size() ? " or " : ", ";
                out += s.choices[i];
            }
            return out;
        }
    }
    return "?";
}

std::optional<std::string> check(const setting_info& s, std::string_view value) {
    bool ok = true;
    switch (s.type) {
        case vt::switch_:
            ok = alloc::parse_switch(value).has_value();
            break;
        case vt::count:
        case vt::bytes:
        case vt::microseconds:
        case vt::seconds:
            ok = parse_number(s, value).has_value();
            break;
        case vt::string:
            break;
        case vt::choice:
            ok = std::find(s.choices.begin(), s.choices.end(), value) != s.choices.end();
            break;
    }
    if (ok) return std::nullopt;
    return "expected " + expected_form(s);
}

std::size_t count(std::string_view name) {
    const setting_info& s = info(name);
    if (s.type != vt::count && s.type != vt::bytes) wrong_type("count", s);
    return static_cast<std::size_t>(*parse_number(s, checked(s).value));
}

bool enabled(std::string_view name) {
    const setting_info& s = info(name);
    if (s.type != vt::switch_) wrong_type("enabled", s);
    return *alloc::parse_switch(checked(s).value);
}

std::chrono::microseconds duration(std::string_view name) {
    const setting_info& s = info(name);
    if (s.type != vt::seconds && s.type != vt::microseconds) wrong_type("duration", s);
    const std::uint64_t us = *parse_number(s, checked(s).value);
    return std::chrono::microseconds(static_cast<std::chrono::microseconds::rep>(
        std::min<std::uint64_t>(us, std::numeric_limits<std::int64_t>::max())));
}

std::string text(std::string_view name) {
    const setting_info& s = info(name);
    if (s.type != vt::string && s.type != vt::choice) wrong_type("text", s);
    return checked(s).value;
}

void consume_command_line(int& argc, char** argv) {
    constexpr std::string_view flag = "++set";
    constexpr std::string_view example = "e.g. ++set MAXIMUM_HANDLES=20000";
    std::vector<std::pair<std::string, std::string>> found;
    std::vector<bool> drop(static_cast<std::size_t>(argc), false);
    for (int i = 1; i < argc; ++i) {
        const std::string_view arg = argv[i];
        std::string_view assignment;
        if (arg == flag) {
            if (i + 1 >= argc)
                throw std::invalid_argument("coverse: ++set needs NAME=VALUE after it, " +
                                            std::string(example));
            drop[static_cast<std::size_t>(i)] = true;
            assignment = argv[++i];
        } else if (arg.starts_with(flag) && arg.size() > flag.size() && arg[flag.size()] == '=') {
            assignment = arg.substr(flag.size() + 1);
        } else {
            continue;
        }
        drop[static_cast<std::size_t>(i)] = true;
        const std::size_t eq = assignment.find('=');
        if (eq == std::string_view::npos || eq == 0)
            throw std::invalid_argument("coverse: ++set " + std::string(assignment) +
                                        ": expected NAME=VALUE, " + std::string(example));
        const std::string_view name = assignment.substr(0, eq);
        const std::string_view value = assignment.substr(eq + 1);
        const setting_info* s = find(name);
        if (!s)
            throw std::invalid_argument("coverse: ++set " + std::string(assignment) + ": " +
                                        unknown_name_text(name));
        if (auto problem = check(*s, value))
            throw std::invalid_argument("coverse: ++set " + std::string(assignment) + ": " +
                                        *problem);
        found.emplace_back(name, value);
    }
    // Everything checked: only now record and remove, so a bad argument changes nothing.
    for (const auto& [name, value] : found)
        alloc::set_command_line_setting(name, value);
    int kept = 1;
    for (int i = 1; i < argc; ++i)
        if (!drop[static_cast<std::size_t>(i)]) argv[kept++] = argv[i];
    argv[kept] = nullptr;
    argc = kept;
}

void clear_command_line() {
    alloc::clear_command_line_settings();
}

std::vector<std::string> unknown_environment_warnings() {
    std::vector<std::string> out;
    for (char** e = environ; e && *e; ++e) {
        const std::string_view entry = *e;
        const std::string_view variable = entry.substr(0, entry.find('='));
        for (std::string_view prefix : env_prefixes) {
            if (!variable.starts_with(prefix)) continue;
            const std::string_view name = variable.substr(prefix.size());
            if (find(name)) break;
            if (prefix == "COVERSE_" &&
                std::find(std::begin(script_variables), std::end(script_variables), name) !=
                    std::end(script_variables))
                break;
            std::string msg = "coverse: " + std::string(variable) +
                              " is set but coverse has no setting " + std::string(name);
            if (auto close = suggest(name); !close.empty())
                msg += "; did you mean " + std::string(prefix) + std::string(close) + "?";
            out.push_back(msg + " (`coverse-info -c` lists every setting)");
            break;
        }
    }
    std::sort(out.begin(), out.end());
    return out;
}

}  // namespace coverse::settings
