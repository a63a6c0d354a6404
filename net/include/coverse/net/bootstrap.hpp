// bootstrap: start-up through the launcher (coverse-run). The PE's side of the control
// connection (register, node table, print/error/scan, abort) and the launcher itself, which
// starts one process per PE on this host and relays their output. Protocol: docs/launcher.md.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <coverse/net/doctor.hpp>
#include <coverse/net/frame_reader.hpp>

namespace coverse::net {

/// A start-up failure: the message names the PE, the launcher's address, the phase, and
/// what to do.
class bootstrap_error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

/// Environment variables coverse-run sets in every PE.
inline constexpr const char* launcher_env = "COVERSE_LAUNCHER";  // host:port
inline constexpr const char* pe_env = "COVERSE_PE";              // this process's PE
inline constexpr const char* num_pes_env = "COVERSE_NUM_PES";    // the job's PE count
inline constexpr const char* job_key_env = "COVERSE_JOB_KEY";    // 16 hex digits
/// Set when the launcher pins each PE to one CPU (--bind, +setcpuaffinity): how many CPUs it
/// spreads the PEs over. A pinned PE sees one CPU in its own mask; this says whether PEs
/// share CPUs (more PEs than this: spinning PEs yield).
inline constexpr const char* bound_cpus_env = "COVERSE_BOUND_CPUS";

/// What coverse-run put into a PE's environment: COVERSE_LAUNCHER=host:port, COVERSE_PE,
/// COVERSE_NUM_PES, COVERSE_JOB_KEY (16 hex digits).
struct launch_info {
    std::string launcher_host;
    std::uint16_t launcher_port = 0;
    std::uint32_t pe = 0;
    std::uint32_t num_pes = 1;
    std::uint64_t job_key = 0;
};
/// nullopt when COVERSE_LAUNCHER is not set (the process was not started by a launcher).
/// Throws bootstrap_error naming the variable when one is malformed.
std::optional<launch_info> launch_info_from_env();

/// The names a job's PEs make in /dev/shm (rings, eager channels, doorbells) all begin with
/// this: "coverse-", the job key as 16 hex digits, "-".
std::string shm_name_prefix(std::uint64_t job_key);
/// Removes every entry of /dev/shm whose name begins with `prefix` (shared-memory objects and
/// FIFOs alike), which must be longer than "coverse-" and begin with it (else nothing is
/// removed). run_job removes its job's names on the launcher's host this way once every PE
/// has ended: a PE that died between making a name and handing it on could not.
void remove_shm_entries(std::string_view prefix) noexcept;

/// This host's machine id for register_node: a 64-bit hash of /etc/machine-id (or of the
/// host name where that file is missing). Equal ids mean "same host" (shared memory).
std::uint64_t local_machine_id();

struct node_entry {
    std::uint32_t pe = 0;
    std::string ip;  // e.g. "127.0.0.1"
    std::uint16_t data_port = 0;
    std::uint64_t machine_id = 0;
};

/// The PE's side of the control connection. Blocking calls on its own socket: control
/// traffic is rare and must work from any context (inside a handler, in CmiAbort).
///
/// Thread safety: calls may come from several threads; one lock orders writes (a frame's
/// bytes are never interleaved with another's), another serialises read_line and the
/// reads of register_node and abort.
class launcher_client {
public:
    /// Connects to the launcher (retrying until `timeout`); throws bootstrap_error naming
    /// the address and what to do.
    launcher_client(const launch_info& info, std::chrono::milliseconds timeout);
    /// Closes the connection; text printed before registration that never reached the
    /// launcher goes to this process's own stdout/stderr.
    ~launcher_client();
    launcher_client(const launcher_client&) = delete;
    launcher_client& operator=(const launcher_client&) = delete;
    /// Registers this PE and waits for the node table of every PE (index = PE). Throws
    /// bootstrap_error with the launcher's explanation (e.g. which PE never registered) or
    /// on timeout.
    std::vector<node_entry> register_node(std::uint16_t data_port, const std::string& ip,
                                          std::chrono::milliseconds timeout);
    /// Text for the launcher's stdout (print) / stderr (error). The launcher writes whole
    /// lines only; a partial line is held until its newline or until the PE's exit.
    /// Before register_node the text is held here and sent right behind the registration.
    /// If the connection is gone, the text goes to this process's own stdout/stderr.
    void print(std::string_view text);
    void error(std::string_view text);
    /// One line of the launcher's standard input (without the newline); nullopt at EOF.
    /// Throws bootstrap_error before register_node or when the connection is lost.
    std::optional<std::string> read_line();
    /// This PE aborts: the launcher prints "PE <n> aborted: <text>", stops every other
    /// process and exits with a non-zero status. Waits (briefly, ≤1 s) for the launcher's
    /// acknowledgement so the text is not lost. Never throws.
    void abort(int exit_code, std::string_view text) noexcept;
    int fd() const noexcept;

    /// What the launcher says on its own: a PE of the job died (ON_PEER_LOST=report).
    struct notice {
        std::uint32_t pe = 0;
        std::string text;  // how it ended, e.g. "PE 3 of 4 (pid 812) was killed by signal 9"
    };
    /// The notices that arrived, reading what the socket holds without blocking (call it
    /// when fd() is readable, from the PE thread). Other frames read here wait for
    /// read_line. Empty, reading nothing, while another thread holds the read side.
    std::vector<notice> take_notices();
    /// The launcher closed the connection (seen by take_notices or a read).
    bool closed() const noexcept { return _eof; }

    const launch_info& info() const noexcept { return _info; }
    /// "the launcher (127.0.0.1:40211)"
    std::string launcher_name() const;

private:
    /// Sends one frame; false when the connection is gone. Caller holds _write_lock.
    bool send_frame(frame_type type, std::uint32_t tag, std::span<const std::byte> payload);
    void send_text(frame_type type, std::string_view text);
    /// Next frame from the launcher, or nullopt at the deadline. Caller holds _read_lock.
    /// Throws bootstrap_error on EOF, a socket error or an invalid frame; `waiting_for`
    /// says what we were waiting for.
    std::optional<frame> receive(std::chrono::steady_clock::time_point deadline,
                                 std::string_view waiting_for);
    /// The next whole frame among the bytes already read (notices set aside). Caller holds
    /// _read_lock. Throws bootstrap_error on an invalid frame.
    std::optional<frame> buffered_frame();

    launch_info _info;
    int _fd = -1;
    std::timed_mutex _write_lock;  // orders frames; guards _registered, _broken, _held_*
    bool _registered = false;
    bool _broken = false;  // a send failed: later text goes to our own stdout/stderr
    std::string _held_out;
    std::string _held_err;
    std::timed_mutex _read_lock;  // guards _reader, _inbox, _next_scan
    frame_reader _reader;
    std::vector<std::byte> _inbox;  // received bytes not yet fed to _reader
    std::size_t _inbox_used = 0;
    std::uint32_t _next_scan = 1;
    std::vector<frame> _pending;   // frames take_notices read that someone else waits for
    std::vector<notice> _notices;  // peer_lost notices not yet taken
    bool _eof = false;
};

/// One host of a charmrun nodelist (`host NAME [++cpus N] [++shell CMD]`).
struct nodelist_host {
    std::string name;
    std::uint32_t cpus = 1;  // slots: PEs placed here per round
    std::string shell;       // ++shell: this host's remote shell ("" = the job's)
    std::string origin;      // "nodes.txt:3", for error texts
};

/// Reads a charmrun nodelist: lines `group NAME [++shell CMD]` and `host NAME [++cpus N]
/// [++shell CMD]`; blank lines and `#` comments are skipped; hosts before any `group` line
/// belong to group main. Returns the hosts of `group` in file order. Throws bootstrap_error
/// naming the file, the line and the fix (unreadable file, unknown keyword or option, a bad
/// count, no host in the group).
std::vector<nodelist_host> read_nodelist(const std::string& path,
                                         const std::string& group = "main");

/// Where each PE runs: PE i takes the i-th slot, cycling over the hosts; a host has `ppn`
/// slots when ppn is given, else its ++cpus. Index = PE, value = index into `hosts`.
std::vector<std::size_t> place_pes(const std::vector<nodelist_host>& hosts, std::uint32_t num_pes,
                                   std::optional<std::uint32_t> ppn);

/// The launcher itself (coverse-run, and a program started directly with +pN which
/// launches itself the same way).
struct launch_options {
    std::uint32_t num_pes = 1;
    std::vector<std::string> argv;  // program and its arguments (argv[0] = program path)
    bool prefix = false;            // tag each output line with "[PE i] "
    bool bind = false;              // pin PE i to core i mod (cores available)
    /// Default CONNECTION_TIMEOUT (coverse-run passes net::connection_timeout_from_env()).
    std::chrono::milliseconds register_timeout{300000};
    bool verbose = false;
    /// --timings: at the end, one line with the phases of the job's life as the launcher
    /// saw them (every PE started, every PE registered, the first and the last exit).
    bool timings = false;
    std::vector<std::pair<std::string, std::string>> extra_env;  // set in every PE
    /// The setting the registration-timeout error tells the user to raise.
    std::string timeout_setting = "CONNECTION_TIMEOUT";
    /// Hang reports: on SIGQUIT always; with stuck_after, also when the job stops moving.
    doctor::report_options report;

    /// ++nodelist: the hosts to start PEs on, each through `remote_shell` (split at
    /// spaces; the host name and one shell command line follow it). Empty: every PE is
    /// forked on this host. A job naming a host other than localhost/127.x listens for
    /// registrations on the address NETWORK_INTERFACE picks, not on loopback.
    std::vector<nodelist_host> hosts;
    std::string nodelist_file;  // for error texts
    std::string remote_shell = "ssh";
    std::optional<std::uint32_t> ppn;
    /// Remote starts: at most this many PEs starting (started, not yet registered) at once.
    /// 10: a default sshd drops unauthenticated connections beyond MaxStartups 10:30:100.
    std::uint32_t fan_out = 10;
    /// Remote starts: a remote shell that exits with 255 (ssh's "could not connect") before
    /// its PE registered is run again, up to this many attempts in all, after a backoff
    /// that doubles from start_backoff.
    std::uint32_t start_attempts = 3;
    std::chrono::milliseconds start_backoff{250};
    /// ON_PEER_LOST: a registered PE that fails stops the job (abort, the default); false
    /// (report): the launcher says so and the others go on, each told by its own
    /// connections. The job's status still counts the failed PE's.
    bool stop_on_pe_failure = true;
};

/// Runs the job to the end and returns the launcher's exit status: 0 when every PE
/// exited 0, otherwise the worst child status (exit code, or 128+signal for a killed PE).
///
/// Precisely: the largest status among the PEs that failed on their own before the
/// launcher began stopping the job (an abort counts as its exit code, or 1 if that is 0);
/// PEs the launcher then stopped do not count. A failure of the launcher's own (a PE that
/// never registered, a protocol error) is 1 unless a PE's status is larger; a program that
/// cannot be executed is 127; SIGINT/SIGTERM/SIGHUP to the launcher give 128+signal.
/// Throws bootstrap_error before any PE starts (bad options, no socket) or if fork fails
/// (PEs already started are killed and reaped first). Blocks SIGCHLD,
/// SIGINT, SIGTERM and SIGHUP in the calling thread while it runs (call it from a
/// single-threaded process, or with those signals blocked in every other thread).
int run_job(const launch_options& opts);

/// The PE count a charmrun-style argument list asks for: "+pN" or "+p N" (the last one
/// wins); nullopt when there is none. Throws bootstrap_error for "+p" without a count of
/// 1 or more. Other "+p..." options ("+ppn", "+pemap") are not PE counts.
std::optional<std::uint32_t> pe_count_in_args(const std::vector<std::string>& args);

}  // namespace coverse::net
