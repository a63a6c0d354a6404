// bootstrap_launcher: the launcher behind coverse-run (and a program's own +pN start): one
// process per PE on this host, their registrations and the node table, the relay of their
// print/error/scan traffic, and stopping the whole job when one PE fails.
//
// Stages: listen (127.0.0.1, ephemeral port) -> spawn (fork+exec each PE) -> registering
// (until every PE registered, or the registration timeout) -> running (node table sent,
// listener closed; relaying) -> stopping (a PE failed, a signal came, or the timeout:
// SIGTERM or the forwarded signal, SIGKILL after a grace) -> done (every PE reaped).
// One single-threaded poll() loop over non-blocking sockets; SIGCHLD and the signals to
// forward arrive through a signalfd, so a PE's death is seen as soon as the kernel reports it.
#include <coverse/net/bootstrap.hpp>
#include <coverse/net/interfaces.hpp>

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <memory>

#include "bootstrap_doctor.hpp"

extern char** environ;

namespace coverse::net {

namespace {

using clock = std::chrono::steady_clock;

/// How long a PE may take to exit after the launcher's SIGTERM (or forwarded signal).
constexpr auto stop_grace = std::chrono::milliseconds(200);
/// How long an aborting PE may take to exit on its own after the acknowledgement.
constexpr auto abort_grace = std::chrono::seconds(1);
/// A partial line longer than this is written out (with a newline) instead of held.
constexpr std::size_t max_held_line = 1u << 20;

const std::string launcher_tag = "coverse-run: ";

std::string seconds_text(clock::duration d) {
    char b[32];
    std::snprintf(b, sizeof b, "%.1f s",
                  std::chrono::duration_cast<std::chrono::duration<double>>(d).count());
    return b;
}

std::string elapsed_text(clock::duration d) {
    char b[32];
    std::snprintf(b, sizeof b, "%.3f s",
                  std::chrono::duration_cast<std::chrono::duration<double>>(d).count());
    return b;
}

std::string hex16(std::uint64_t v) {
    char b[20];
    std::snprintf(b, sizeof b, "%016" PRIx64, v);
    return b;
}

// Blocking write of all of `text`: our stdout/stderr are the job's output, a short write
// must not drop a line. EAGAIN (someone made the descriptor non-blocking) waits for room.
void write_all(int fd, std::string_view text) noexcept {
    while (!text.empty()) {
        const ssize_t n = ::write(fd, text.data(), text.size());
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN) {
                pollfd p{fd, POLLOUT, 0};
                ::poll(&p, 1, -1);
                continue;
            }
            return;  // stdout closed or full disk: nothing better to do than go on
        }
        text.remove_prefix(static_cast<std::size_t>(n));
    }
}

std::string signal_text(int sig) {
    const char* abbrev = ::sigabbrev_np(sig);
    std::string out = "signal " + std::to_string(sig);
    if (abbrev != nullptr) out += std::string(" (SIG") + abbrev + ")";
    return out;
}

// "exited with status 3", "was killed by signal 11 (SIGSEGV), core dumped".
std::string wait_text(int status) {
    if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
    if (WIFSIGNALED(status)) {
        std::string out = "was killed by " + signal_text(WTERMSIG(status));
        if (WCOREDUMP(status)) out += ", core dumped";
        return out;
    }
    return "ended with wait status " + std::to_string(status);
}

int exit_code_of(int status) {
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return 1;
}

// The file to execute for `program`: as given when it names a path; else the first
// executable of that name in PATH, then in the current directory (like mpirun, so
// `coverse-run -n 2 prog` finds ./prog). nullopt when there is none.
std::optional<std::string> find_program(const std::string& program) {
    if (program.find('/') != std::string::npos) return program;
    const char* path = std::getenv("PATH");
    std::string_view dirs = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
    for (;;) {
        const auto colon = dirs.find(':');
        const std::string_view dir = dirs.substr(0, colon);
        const std::string candidate =
            (dir.empty() ? std::string(".") : std::string(dir)) + "/" + program;
        if (::access(candidate.c_str(), X_OK) == 0) return candidate;
        if (colon == std::string_view::npos) break;
        dirs.remove_prefix(colon + 1);
    }
    if (::access(program.c_str(), X_OK) == 0) return "./" + program;
    return std::nullopt;
}

std::span<const std::byte> as_bytes(std::string_view s) noexcept {
    return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

/// Blocks SIGCHLD and the signals the launcher forwards, and delivers them through a
/// signalfd; restores the mask and SIGCHLD's disposition when the job is over.
class signal_guard {
public:
    static constexpr int forwarded[] = {SIGINT, SIGTERM, SIGHUP};

    signal_guard() {
        sigset_t set;
        ::sigemptyset(&set);
        ::sigaddset(&set, SIGCHLD);
        for (int s : forwarded)
            ::sigaddset(&set, s);
        ::sigaddset(&set, SIGQUIT);  // a hang report (doctor_channels), the job goes on
        ::pthread_sigmask(SIG_BLOCK, &set, &_old_mask);
        // With SIGCHLD ignored the kernel reaps children itself and we could not see
        // their status.
        ::sigaction(SIGCHLD, nullptr, &_old_chld);
        if (_old_chld.sa_handler == SIG_IGN) {
            struct sigaction dfl {};
            dfl.sa_handler = SIG_DFL;
            ::sigaction(SIGCHLD, &dfl, nullptr);
        }
        _fd = ::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
        if (_fd < 0) {
            const int e = errno;
            restore();
            throw bootstrap_error(launcher_tag + "signalfd failed: " + std::strerror(e));
        }
    }
    ~signal_guard() {
        ::close(_fd);
        restore();
    }
    signal_guard(const signal_guard&) = delete;
    signal_guard& operator=(const signal_guard&) = delete;

    int fd() const noexcept { return _fd; }
    /// The mask to give the PEs: the one the launcher's caller had.
    const sigset_t& old_mask() const noexcept { return _old_mask; }

private:
    void restore() noexcept {
        ::sigaction(SIGCHLD, &_old_chld, nullptr);
        ::pthread_sigmask(SIG_SETMASK, &_old_mask, nullptr);
    }
    int _fd = -1;
    sigset_t _old_mask{};
    struct sigaction _old_chld {};
};

struct connection {
    connection(int f, const decode_limits& limits, std::string p)
        : fd(f), reader(limits), peer(std::move(p)) {}
    int fd;
    frame_reader reader;
    std::string peer;                 // "127.0.0.1:51234"
    std::optional<std::uint32_t> pe;  // set by its registration
    std::vector<std::byte> out;       // frames queued to the PE
    std::size_t out_sent = 0;
    bool closing = false;  // close once `out` is sent (after a refusal)
    bool dead = false;     // closed; swept at the end of the loop iteration
};

struct pe_process {
    std::uint32_t pe = 0;
    pid_t pid = -1;
    bool running = false;        // started and not yet reaped
    bool ended = false;          // reaped for good (no retry follows), or never to start
    std::size_t host = 0;        // remote starts: index into launch_options::hosts
    std::uint32_t attempts = 0;  // remote starts made so far
    std::optional<clock::time_point> retry_at;  // remote: start again then
    bool registered = false;
    int wait_status = 0;
    std::optional<clock::time_point> kill_at;  // SIGKILL then, if still running
    std::optional<int> cpu;
    connection* conn = nullptr;
    node_entry entry;
    std::string out_partial;
    std::string err_partial;
};

struct scan_request {
    connection* conn;
    std::uint32_t tag;
};

enum class phase { registering, running, stopping };

class launcher {
public:
    explicit launcher(const launch_options& opts);
    ~launcher();
    launcher(const launcher&) = delete;
    launcher& operator=(const launcher&) = delete;

    int run();
    std::uint64_t job_key() const noexcept { return _job_key; }

private:
    void listen_for_registrations();
    /// Remote starts: starts PEs (and due retries) while fewer than fan_out are starting.
    void start_remote_pes();
    /// Remote starts with ssh: every host name must resolve before anything starts.
    void check_host_names() const;
    std::string host_name(const pe_process& p) const;
    std::vector<std::string> remote_argv(const pe_process& p, const std::string& program,
                                         const std::vector<std::string>& env) const;
    void choose_cpus();
    std::vector<std::string> base_environment() const;
    /// 0, or the errno of a failed exec (the child is then reaped already).
    int spawn(pe_process& p, const std::string& file, const std::vector<std::string>& base_env);

    int poll_timeout() const;
    void read_signals();
    void reap();
    void pump(connection& c, bool until_drained);
    void accept_all();
    void handle_frame(connection& c, frame f);
    void on_register(connection& c, const frame& f);
    void on_abort(connection& c, const frame& f);
    void relay(pe_process& p, bool to_stderr, std::string_view text);
    void flush_partials(pe_process& p);
    void emit_lines(int fd, const pe_process& p, std::string_view lines);
    void send(connection& c, frame_type type, std::uint32_t tag,
              std::span<const std::byte> payload);
    void refuse(connection& c, std::string_view why);
    void flush_out(connection& c);
    void close_connection(connection& c);
    void send_node_tables();
    void serve_scans();
    void read_stdin();
    void check_timers();
    void registration_timeout();
    /// Stops every running PE: `stop_signal` now (the aborting PE gets time to exit by
    /// itself), SIGKILL after the grace. Tells PEs still waiting for the node table why.
    void begin_stop(std::string_view why, std::optional<std::uint32_t> aborter = std::nullopt,
                    int stop_signal = SIGTERM);
    void fail(int status) { _status = std::max(_status, status); }
    /// ON_PEER_LOST=report: tells every other running PE that `dead` died. A PE hears of a
    /// death through its own connection only if it has one (CONNECT=lazy connects only the
    /// pairs that talk), so the launcher, which sees every death, says it to all.
    void tell_lost(const pe_process& dead, const std::string& how);
    void say(std::string_view text);      // "coverse-run: <text>" on stderr
    void verbose(std::string_view text);  // the same, with --verbose only
    std::string pe_name(const pe_process& p) const;
    std::string control_address() const;
    std::size_t running_count() const;

    const launch_options& _opts;
    std::uint32_t _n;
    std::uint64_t _job_key = 0;
    decode_limits _limits;
    signal_guard _signals;
    int _listen_fd = -1;
    std::string _listen_ip = "127.0.0.1";
    std::string _listen_why = "loopback: every PE runs on this host";
    std::uint16_t _port = 0;
    bool _remote = false;      // PEs start through the remote shell (++nodelist)
    bool _multi_host = false;  // a host other than this one: not loopback
    std::string _program;      // what the PEs run (remote: an absolute path)
    std::vector<std::string> _base_env;
    int _devnull = -1;
    std::size_t _bound_cpus = 0;  // CPUs the PEs are pinned over (0: not bound)
    std::vector<pe_process> _pes;
    std::vector<std::unique_ptr<connection>> _conns;
    std::deque<scan_request> _scans;
    std::string _stdin_buffer;
    bool _stdin_eof = false;
    phase _phase = phase::registering;
    clock::time_point _start;
    // --timings: when every PE was started, registered, and when the first one ended.
    std::optional<clock::time_point> _all_started, _all_registered, _first_ended;
    clock::time_point _register_deadline;
    std::size_t _registered = 0;
    int _status = 0;
    doctor_channels _doctor;
};

launcher::launcher(const launch_options& opts)
    : _opts(opts),
      _n(opts.num_pes),
      _limits{default_max_payload, opts.num_pes, false},
      _doctor(opts.report, opts.num_pes) {
    if (_opts.argv.empty() || _opts.argv[0].empty()) {
        throw bootstrap_error(launcher_tag + "no program to run");
    }
    if (_n == 0) throw bootstrap_error(launcher_tag + "the PE count must be 1 or more");
    // One control connection per PE, plus a few of our own.
    rlimit files{};
    if (::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur != RLIM_INFINITY &&
        files.rlim_cur < _n + 32ull) {
        files.rlim_cur = std::min<rlim_t>(files.rlim_max, _n + 32ull);
        ::setrlimit(RLIMIT_NOFILE, &files);
        if (files.rlim_cur < _n + 32ull) {
            throw bootstrap_error(launcher_tag + std::to_string(_n) +
                                  " PEs need one control connection each, over the open-file "
                                  "limit; raise it (ulimit -n) or start fewer PEs");
        }
    }
    while (_job_key == 0) {
        if (::getrandom(&_job_key, sizeof _job_key, 0) != sizeof _job_key) {
            _job_key = static_cast<std::uint64_t>(::getpid()) * 0x9E3779B97F4A7C15ull ^
                       static_cast<std::uint64_t>(clock::now().time_since_epoch().count());
        }
    }
    _pes.resize(_n);
    for (std::uint32_t i = 0; i < _n; ++i)
        _pes[i].pe = i;
    if (!_opts.hosts.empty()) {
        _remote = true;
        const auto placement = place_pes(_opts.hosts, _n, _opts.ppn);
        for (std::uint32_t i = 0; i < _n; ++i) {
            _pes[i].host = placement[i];
            if (!is_loopback_host(_opts.hosts[placement[i]].name)) _multi_host = true;
        }
        if (_opts.fan_out == 0)
            throw bootstrap_error(launcher_tag + "the fan-out must be 1 or more");
    }
    _devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
}

launcher::~launcher() {
    // Only reached with PEs still running when run() threw: leave nothing behind.
    for (pe_process& p : _pes) {
        if (!p.running) continue;
        ::kill(p.pid, SIGKILL);
        while (::waitpid(p.pid, nullptr, 0) < 0 && errno == EINTR) {
        }
    }
    for (auto& c : _conns) {
        if (!c->dead) ::close(c->fd);
    }
    if (_listen_fd >= 0) ::close(_listen_fd);
    if (_devnull >= 0) ::close(_devnull);
}

void launcher::say(std::string_view text) {
    std::string line = launcher_tag;
    line.append(text);
    line += '\n';
    write_all(STDERR_FILENO, line);
}

void launcher::verbose(std::string_view text) {
    if (_opts.verbose) say(text);
}

std::string launcher::pe_name(const pe_process& p) const {
    return "PE " + std::to_string(p.pe) + " of " + std::to_string(_n) + " (pid " +
           std::to_string(p.pid) + ")";
}

std::string launcher::control_address() const {
    return _listen_ip + ":" + std::to_string(_port);
}

std::size_t launcher::running_count() const {
    return static_cast<std::size_t>(
        std::count_if(_pes.begin(), _pes.end(), [](const pe_process& p) { return p.running; }));
}

void launcher::listen_for_registrations() {
    if (_multi_host) {
        // PEs on other hosts connect back to us: an address they reach, never loopback.
        interface_filter filter;
        try {
            filter = interface_filter_from_env();
        } catch (const std::invalid_argument& e) {
            throw bootstrap_error(launcher_tag + e.what());
        }
        const auto candidates = local_interfaces();
        const auto c = choose_address(filter, candidates);
        if (!c) {
            throw bootstrap_error(launcher_tag +
                                  "no address for the PEs on other hosts to reach: " +
                                  describe_no_address(filter, candidates));
        }
        _listen_ip = c->chosen.ip;
        _listen_why = c->chosen.name + ", " + c->why;
    }
    _listen_fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (_listen_fd < 0) {
        throw bootstrap_error(launcher_tag +
                              "cannot make the control socket: " + std::strerror(errno));
    }
    sockaddr_in a{};
    a.sin_family = AF_INET;
    ::inet_pton(AF_INET, _listen_ip.c_str(), &a.sin_addr);  // local jobs: loopback only
    a.sin_port = 0;
    socklen_t len = sizeof a;
    if (::bind(_listen_fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::listen(_listen_fd, SOMAXCONN) != 0 ||
        ::getsockname(_listen_fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
        throw bootstrap_error(
            launcher_tag + "cannot listen on " + _listen_ip + " (" + _listen_why +
            "): " + std::strerror(errno) +
            (_multi_host ? "; check NETWORK_INTERFACE" : "; is the loopback interface up?"));
    }
    _port = ntohs(a.sin_port);
}

void launcher::choose_cpus() {
    bool bind = _opts.bind;
    for (std::size_t i = 1; i < _opts.argv.size(); ++i) {
        if (_opts.argv[i] == "+setcpuaffinity") bind = true;
    }
    if (!bind) return;
    // The CPUs we may use ourselves (a cgroup or taskset may have narrowed them).
    cpu_set_t mine;
    CPU_ZERO(&mine);
    std::vector<int> cpus;
    if (::sched_getaffinity(0, sizeof mine, &mine) == 0) {
        for (int c = 0; c < CPU_SETSIZE; ++c) {
            if (CPU_ISSET(c, &mine)) cpus.push_back(c);
        }
    }
    if (cpus.empty()) {
        say(std::string("cannot read the CPU affinity mask (") + std::strerror(errno) +
            "); PEs are not bound");
        return;
    }
    for (pe_process& p : _pes)
        p.cpu = cpus[p.pe % cpus.size()];
    _bound_cpus = cpus.size();
}

std::vector<std::string> launcher::base_environment() const {
    std::vector<std::string> names = {launcher_env, pe_env,         num_pes_env,
                                      job_key_env,  bound_cpus_env, doctor::channel_env};
    for (const auto& [name, value] : _opts.extra_env)
        names.push_back(name);
    std::vector<std::string> env;
    for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
        const std::string_view entry = *e;
        const std::string_view name = entry.substr(0, entry.find('='));
        if (std::find(names.begin(), names.end(), name) == names.end()) env.emplace_back(entry);
    }
    env.push_back(std::string(launcher_env) + "=" + control_address());
    env.push_back(std::string(num_pes_env) + "=" + std::to_string(_n));
    env.push_back(std::string(job_key_env) + "=" + hex16(_job_key));
    for (const auto& [name, value] : _opts.extra_env)
        env.push_back(name + "=" + value);
    return env;
}

int launcher::spawn(pe_process& p, const std::string& file,
                    const std::vector<std::string>& base_env) {
    // Everything the child needs is built here: between fork and exec it only makes
    // async-signal-safe calls.
    std::vector<std::string> env = base_env;
    env.push_back(std::string(pe_env) + "=" + std::to_string(p.pe));
    if (p.cpu && !_remote)
        env.push_back(std::string(bound_cpus_env) + "=" + std::to_string(_bound_cpus));
    std::vector<std::string> args = _opts.argv;
    if (_remote) {
        // The remote shell runs here with our own environment; the PE's environment
        // travels inside the command line it runs there. No doctor channel crosses hosts.
        args = remote_argv(p, file, env);
        env.clear();
        for (char** e = environ; e != nullptr && *e != nullptr; ++e)
            env.emplace_back(*e);
    } else if (std::string e = _doctor.prepare(p.pe); !e.empty()) {
        env.push_back(std::move(e));
    }
    std::vector<char*> envp;
    for (auto& e : env)
        envp.push_back(e.data());
    envp.push_back(nullptr);
    std::vector<char*> argv;
    for (auto& a : args)
        argv.push_back(a.data());
    argv.push_back(nullptr);
    cpu_set_t cpu;
    CPU_ZERO(&cpu);
    if (p.cpu && !_remote) CPU_SET(*p.cpu, &cpu);
    std::string exec_file = file;
    if (_remote) {
        const auto shell = find_program(args[0]);
        if (!shell) return ENOENT;
        exec_file = *shell;
    }

    // The exec error, if any, comes back through a close-on-exec pipe: EOF means exec worked.
    int report[2];
    if (::pipe2(report, O_CLOEXEC) != 0) {
        throw bootstrap_error(launcher_tag + "pipe2 failed: " + std::strerror(errno));
    }
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid < 0) {
        const int e = errno;
        ::close(report[0]);
        ::close(report[1]);
        throw bootstrap_error(launcher_tag + "cannot start PE " + std::to_string(p.pe) +
                              ": fork failed: " + std::strerror(e) +
                              "; too many processes (ulimit -u) or too little memory?");
    }
    if (pid == 0) {
        // If the launcher dies, so does the PE: nothing is orphaned. The getppid check
        // covers a launcher that died before the prctl.
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (::getppid() != parent) ::_exit(127);
        ::pthread_sigmask(SIG_SETMASK, &_signals.old_mask(), nullptr);
        if (p.cpu && !_remote) ::sched_setaffinity(0, sizeof cpu, &cpu);
        // Standard input belongs to the launcher: PEs read it through scan requests.
        if (_devnull >= 0) ::dup2(_devnull, STDIN_FILENO);
        if (!_remote) _doctor.in_child(p.pe);
        ::execve(exec_file.c_str(), argv.data(), envp.data());
        const int e = errno;
        [[maybe_unused]] const auto ignored = ::write(report[1], &e, sizeof e);
        ::_exit(127);
    }
    ::close(report[1]);
    int exec_errno = 0;
    ssize_t n;
    while ((n = ::read(report[0], &exec_errno, sizeof exec_errno)) < 0 && errno == EINTR) {
    }
    ::close(report[0]);
    p.pid = pid;
    _doctor.started(p.pe, n == static_cast<ssize_t>(sizeof exec_errno) ? -1 : pid);
    if (n == static_cast<ssize_t>(sizeof exec_errno)) {
        while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
        }
        return exec_errno;
    }
    p.running = true;
    if (_remote) {
        verbose("PE " + std::to_string(p.pe) + " starting on host " + host_name(p) + " via '" +
                args[0] + "', pid " + std::to_string(pid) + " (attempt " +
                std::to_string(p.attempts) + " of " + std::to_string(_opts.start_attempts) + ")");
    } else {
        verbose("PE " + std::to_string(p.pe) + " started, pid " + std::to_string(pid) +
                (p.cpu ? ", bound to CPU " + std::to_string(*p.cpu) : std::string()));
    }
    return 0;
}

std::string launcher::host_name(const pe_process& p) const {
    const nodelist_host& h = _opts.hosts[p.host];
    return "'" + h.name + "' (" + h.origin + ")";
}

namespace {
// One word for a POSIX shell: 'text', with each ' written as '\''.
std::string shell_quoted(std::string_view text) {
    std::string out = "'";
    for (char c : text) {
        if (c == '\'')
            out += "'\\''";
        else
            out += c;
    }
    return out + "'";
}

std::vector<std::string> split_words(std::string_view text) {
    std::vector<std::string> out;
    std::size_t i = 0;
    while (i < text.size()) {
        while (i < text.size() && text[i] == ' ')
            ++i;
        const std::size_t start = i;
        while (i < text.size() && text[i] != ' ')
            ++i;
        if (i > start) out.emplace_back(text.substr(start, i - start));
    }
    return out;
}

bool is_setting_variable(std::string_view entry) {
    return entry.starts_with("COVERSE_") || entry.starts_with("CMI_VMI_");
}
}  // namespace

// The remote shell's argv: the shell's words, the host, and one command line for the
// remote /bin/sh: cd to our directory, then exec the program with the PE's environment.
std::vector<std::string> launcher::remote_argv(const pe_process& p, const std::string& program,
                                               const std::vector<std::string>& env) const {
    const nodelist_host& h = _opts.hosts[p.host];
    std::vector<std::string> argv = split_words(h.shell.empty() ? _opts.remote_shell : h.shell);
    argv.push_back(h.name);
    char cwd[4096] = {};
    std::string line;
    if (::getcwd(cwd, sizeof cwd - 1) != nullptr) line = "cd " + shell_quoted(cwd) + " && ";
    line += "exec env";
    for (const auto& e : env) {
        const std::string_view name = std::string_view(e).substr(0, e.find('='));
        if (!is_setting_variable(e) || name == doctor::channel_env) continue;
        line += ' ';
        line += shell_quoted(e);
    }
    line += ' ';
    line += shell_quoted(program);
    for (std::size_t i = 1; i < _opts.argv.size(); ++i) {
        line += ' ';
        line += shell_quoted(_opts.argv[i]);
    }
    argv.push_back(std::move(line));
    return argv;
}

void launcher::check_host_names() const {
    for (const nodelist_host& h : _opts.hosts) {
        const auto words = split_words(h.shell.empty() ? _opts.remote_shell : h.shell);
        if (words.empty()) {
            throw bootstrap_error(launcher_tag + "the remote shell for host '" + h.name + "' (" +
                                  h.origin + ") is empty; give ++remote-shell CMD");
        }
        // Only ssh takes DNS names; another remote shell may name hosts its own way.
        const std::string_view shell = words[0];
        if (shell != "ssh" && !shell.ends_with("/ssh")) continue;
        addrinfo hints{};
        hints.ai_family = AF_INET;
        hints.ai_socktype = SOCK_STREAM;
        addrinfo* found = nullptr;
        const int rc = ::getaddrinfo(h.name.c_str(), nullptr, &hints, &found);
        if (found != nullptr) ::freeaddrinfo(found);
        if (rc != 0) {
            throw bootstrap_error(launcher_tag + "the nodelist " + h.origin + " names host '" +
                                  h.name + "', which does not resolve (" + ::gai_strerror(rc) +
                                  "); correct the name, add it to /etc/hosts, or give "
                                  "++remote-shell for hosts that are not DNS names");
        }
    }
}

void launcher::start_remote_pes() {
    if (!_remote || _phase == phase::stopping) return;
    const auto now = clock::now();
    std::size_t starting = static_cast<std::size_t>(std::count_if(
        _pes.begin(), _pes.end(), [](const pe_process& p) { return p.running && !p.registered; }));
    for (pe_process& p : _pes) {
        if (starting >= _opts.fan_out) return;
        if (p.running || p.ended || p.registered) continue;
        if (p.retry_at && now < *p.retry_at) continue;
        p.retry_at.reset();
        ++p.attempts;
        if (const int e = spawn(p, _program, _base_env); e != 0) {
            const auto words = split_words(
                _opts.hosts[p.host].shell.empty() ? _opts.remote_shell : _opts.hosts[p.host].shell);
            say("cannot run the remote shell '" + (words.empty() ? std::string() : words[0]) +
                "' for PE " + std::to_string(p.pe) + " on host " + host_name(p) + ": " +
                std::strerror(e) + "; install it or give ++remote-shell CMD");
            p.ended = true;
            fail(127);
            begin_stop("the remote shell could not be started");
            return;
        }
        ++starting;
    }
}

int launcher::run() {
    if (_remote) check_host_names();
    listen_for_registrations();
    if (!_remote) choose_cpus();
    _start = clock::now();
    {
        std::string cmd;
        for (const auto& a : _opts.argv)
            cmd += (cmd.empty() ? "" : " ") + a;
        verbose("starting " + std::to_string(_n) + " PE" + (_n == 1 ? "" : "s") + ": " + cmd +
                " (control socket " + control_address() + ", " + _listen_why + ", job key " +
                hex16(_job_key) + ", registration timeout " + seconds_text(_opts.register_timeout) +
                ")");
    }
    _base_env = base_environment();
    const auto file = find_program(_opts.argv[0]);
    if (!file) {
        say("cannot run '" + _opts.argv[0] + "': no such program in PATH or the current directory");
        return 127;
    }
    _program = *file;
    if (_remote && !_program.starts_with("/")) {
        // The remote hosts see the same file system (as with charmrun): an absolute path.
        char cwd[4096] = {};
        if (::getcwd(cwd, sizeof cwd - 1) != nullptr) _program = std::string(cwd) + "/" + _program;
    }
    _register_deadline = clock::now() + _opts.register_timeout;
    if (_remote) {
        start_remote_pes();
    } else {
        for (pe_process& p : _pes) {
            if (const int e = spawn(p, _program, _base_env); e != 0) {
                say("cannot run '" + _opts.argv[0] + "' for PE " + std::to_string(p.pe) + ": " +
                    std::strerror(e));
                fail(127);
                begin_stop("the program could not be started");
                break;
            }
        }
        _register_deadline = clock::now() + _opts.register_timeout;
        _all_started = clock::now();
    }

    std::vector<pollfd> fds;
    std::vector<connection*> polled;
    auto unfinished = [&] {
        if (running_count() > 0) return true;
        if (!_remote || _phase == phase::stopping) return false;
        return std::any_of(_pes.begin(), _pes.end(),
                           [](const pe_process& p) { return !p.ended && !p.registered; });
    };
    while (unfinished()) {
        fds.clear();
        polled.clear();
        fds.push_back({_signals.fd(), POLLIN, 0});
        const bool want_stdin = !_scans.empty() && !_stdin_eof;
        fds.push_back({want_stdin ? STDIN_FILENO : -1, POLLIN, 0});
        fds.push_back({_listen_fd, POLLIN, 0});
        for (auto& c : _conns) {
            const short events = static_cast<short>(POLLIN | (c->out.empty() ? 0 : POLLOUT));
            fds.push_back({c->fd, events, 0});
            polled.push_back(c.get());
        }
        const std::size_t doctor_fds = fds.size();
        _doctor.add_fds(fds);
        const int r = ::poll(fds.data(), fds.size(), poll_timeout());
        if (r < 0 && errno != EINTR) {
            throw bootstrap_error(launcher_tag + "poll failed: " + std::strerror(errno));
        }
        if (r > 0) {
            if (fds[2].revents != 0) accept_all();
            for (std::size_t i = 0; i < polled.size(); ++i) {
                const short ev = fds[3 + i].revents;
                if (ev == 0 || polled[i]->dead) continue;
                if ((ev & POLLOUT) != 0) flush_out(*polled[i]);
                if ((ev & (POLLIN | POLLHUP | POLLERR)) != 0 && !polled[i]->dead) {
                    pump(*polled[i], false);
                }
            }
            _doctor.on_ready(std::span(fds).subspan(doctor_fds), clock::now());
            if (fds[1].revents != 0) read_stdin();
            if (fds[0].revents != 0) read_signals();
        }
        serve_scans();
        check_timers();
        start_remote_pes();
        std::erase_if(_conns, [](const auto& c) { return c->dead; });
    }
    verbose("all PEs have ended; exit status " + std::to_string(_status));
    if (_opts.timings) {
        const auto at = [&](const std::optional<clock::time_point>& t) {
            return t ? elapsed_text(*t - _start) : std::string("never");
        };
        say("timings: " + std::to_string(_n) + " PEs started by " +
            (_remote ? std::string("(remote starts, not timed)") : at(_all_started)) +
            ", registered by " + at(_all_registered) + "; the first ended at " + at(_first_ended) +
            ", the last at " + elapsed_text(clock::now() - _start));
    }
    return _status;
}

int launcher::poll_timeout() const {
    std::optional<clock::time_point> next;
    if (_phase == phase::registering) next = _register_deadline;
    for (const pe_process& p : _pes) {
        if (p.running && p.kill_at && (!next || *p.kill_at < *next)) next = p.kill_at;
        if (!p.running && p.retry_at && (!next || *p.retry_at < *next)) next = p.retry_at;
    }
    if (const auto d = _doctor.next_deadline(); d && (!next || *d < *next)) next = d;
    if (!next) return -1;
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(*next - clock::now());
    return static_cast<int>(std::clamp<long long>(left.count(), 0, 1 << 30));
}

void launcher::read_signals() {
    signalfd_siginfo info[16];
    bool child = false;
    for (;;) {
        const ssize_t n = ::read(_signals.fd(), info, sizeof info);
        if (n <= 0) break;
        for (std::size_t i = 0; i < static_cast<std::size_t>(n) / sizeof info[0]; ++i) {
            const int sig = static_cast<int>(info[i].ssi_signo);
            if (sig == SIGCHLD) {
                child = true;
                continue;
            }
            if (sig == SIGQUIT) {
                _doctor.request_report("SIGQUIT to coverse-run", clock::now());
                continue;
            }
            if (_phase != phase::stopping) {
                const std::string why = "coverse-run got " + signal_text(sig);
                say("got " + signal_text(sig) + "; passing it on to the PEs");
                fail(128 + sig);
                begin_stop(why, std::nullopt, sig);
            } else {
                // A second signal: no more grace.
                for (pe_process& p : _pes) {
                    if (p.running) ::kill(p.pid, SIGKILL);
                }
            }
        }
    }
    if (child) reap();
}

void launcher::reap() {
    std::vector<pe_process*> ended;
    for (pe_process& p : _pes) {
        if (!p.running) continue;
        const pid_t r = ::waitpid(p.pid, &p.wait_status, WNOHANG);
        if (r == p.pid || (r < 0 && errno == ECHILD)) {
            if (r < 0) p.wait_status = 0xFF00;  // reaped elsewhere: report it as "status 255"
            p.running = false;
            if (!_first_ended) _first_ended = clock::now();
            _doctor.ended(p.pe);
            ended.push_back(&p);
        }
    }
    if (ended.empty()) return;
    // A dead process's bytes are all in our sockets (or the accept queue) by now: read
    // them first, so its registration, last lines and abort come before its exit.
    accept_all();
    for (auto& c : _conns) {
        if (!c->dead) pump(*c, true);
    }
    bool failed = false;
    std::string why;
    for (pe_process* p : ended) {
        if (p->conn != nullptr) close_connection(*p->conn);
        flush_partials(*p);
        const bool clean = WIFEXITED(p->wait_status) && WEXITSTATUS(p->wait_status) == 0;
        const bool unreachable = WIFEXITED(p->wait_status) && WEXITSTATUS(p->wait_status) == 255;
        if (_remote && !p->registered && unreachable && _phase == phase::registering &&
            p->attempts < _opts.start_attempts) {
            // ssh's 255: it could not reach the host (or the wrapper said so). Try again
            // after a backoff that doubles; the PE itself never ran.
            const auto wait =
                _opts.start_backoff * (1u << std::min<std::uint32_t>(p->attempts - 1, 10));
            p->retry_at = clock::now() + wait;
            say("the remote shell for PE " + std::to_string(p->pe) + " on host " + host_name(*p) +
                " exited with status 255; trying again in " + elapsed_text(wait) + " (attempt " +
                std::to_string(p->attempts + 1) + " of " + std::to_string(_opts.start_attempts) +
                ")");
            continue;
        }
        p->ended = true;
        if (_phase == phase::stopping) {
            verbose(pe_name(*p) + " " + wait_text(p->wait_status));
            continue;
        }
        if (!p->registered && _remote) {
            why = pe_name(*p) + " on host " + host_name(*p) + " " + wait_text(p->wait_status) +
                  " before registering with the launcher on " + control_address();
            say(why +
                (unreachable
                     ? " after " + std::to_string(p->attempts) + " attempt" +
                           (p->attempts == 1 ? "" : "s") +
                           ": the remote shell could not reach the host. Check the host name, "
                           "that '" +
                           _opts.remote_shell + " " + _opts.hosts[p->host].name +
                           " true' works without a password, or give ++remote-shell CMD"
                     : "; does the program exist at the same path there, and can that host "
                       "reach " +
                           control_address() + " (NETWORK_INTERFACE)?"));
            fail(clean ? 1 : exit_code_of(p->wait_status));
            failed = true;
        } else if (!p->registered) {
            why = pe_name(*p) + " " + wait_text(p->wait_status) +
                  " before registering with the launcher on " + control_address();
            say(why + "; is the program a coverse/Converse program?");
            fail(clean ? 1 : exit_code_of(p->wait_status));
            failed = true;
        } else if (!clean && !_opts.stop_on_pe_failure && running_count() > 0) {
            say(pe_name(*p) + " " + wait_text(p->wait_status) +
                "; ON_PEER_LOST=report: the other PEs go on");
            fail(exit_code_of(p->wait_status));
            tell_lost(*p, pe_name(*p) + " " + wait_text(p->wait_status));
        } else if (!clean) {
            why = pe_name(*p) + " " + wait_text(p->wait_status);
            say(why);
            fail(exit_code_of(p->wait_status));
            failed = true;
        } else {
            verbose(pe_name(*p) + " exited with status 0");
        }
    }
    if (failed) begin_stop(why);
}

void launcher::tell_lost(const pe_process& dead, const std::string& how) {
    const auto payload = encode(peer_lost_payload{dead.pe, how});
    for (pe_process& q : _pes)
        if (q.running && q.registered && q.conn != nullptr && &q != &dead)
            send(*q.conn, frame_type::peer_lost, 0, payload);
}

void launcher::accept_all() {
    if (_listen_fd < 0) return;
    for (;;) {
        sockaddr_in a{};
        socklen_t len = sizeof a;
        const int fd = ::accept4(_listen_fd, reinterpret_cast<sockaddr*>(&a), &len,
                                 SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            return;  // EAGAIN; or out of descriptors, retried at the next readiness
        }
        const int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        char ip[INET_ADDRSTRLEN] = "?";
        ::inet_ntop(AF_INET, &a.sin_addr, ip, sizeof ip);
        _conns.push_back(std::make_unique<connection>(
            fd, _limits, std::string(ip) + ":" + std::to_string(ntohs(a.sin_port))));
    }
}

void launcher::pump(connection& c, bool until_drained) {
    std::byte buf[64 * 1024];
    // Bounded, so one chatty PE cannot starve the others; draining (after a PE's exit)
    // reads everything a dead process can have left (socket buffers are far smaller).
    const int max_rounds = until_drained ? 4096 : 16;
    for (int rounds = 0; rounds < max_rounds && !c.dead; ++rounds) {
        const ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN) return;
            close_connection(c);  // reset: the process's exit tells the rest
            return;
        }
        if (n == 0) {
            if (!c.reader.at_frame_boundary() && c.pe) {
                verbose("PE " + std::to_string(*c.pe) +
                        " closed its control connection in the middle of a frame");
            }
            close_connection(c);
            return;
        }
        c.reader.feed_all(std::span(buf, static_cast<std::size_t>(n)), [&](frame&& f) {
            if (!c.dead) handle_frame(c, std::move(f));
        });
        if (c.reader.failed() && !c.dead) {
            const std::string who =
                c.pe ? pe_name(_pes[*c.pe]) : "an unregistered connection from " + c.peer;
            const std::string text = describe(c.reader.error(), who);
            if (c.pe && _phase != phase::stopping) {
                say(text);
                fail(1);
                close_connection(c);
                begin_stop(text);
            } else {
                verbose(text);
                close_connection(c);
            }
            return;
        }
    }
}

void launcher::handle_frame(connection& c, frame f) {
    const frame_type type = f.header.type;
    if (!c.pe) {
        if (type == frame_type::register_node) return on_register(c, f);
        if (type == frame_type::abort) return on_abort(c, f);
        verbose("refusing " + c.peer + ": its first frame was '" +
                std::string(frame_type_name(type)) + "', not 'register_node'");
        return refuse(c, "the first frame on a control connection must be 'register_node', not '" +
                             std::string(frame_type_name(type)) + "'");
    }
    pe_process& p = _pes[*c.pe];
    const auto payload = f.payload_bytes();
    const std::string_view text(reinterpret_cast<const char*>(payload.data()), payload.size());
    switch (type) {
        case frame_type::print:
            return relay(p, false, text);
        case frame_type::error:
            return relay(p, true, text);
        case frame_type::scan:
            _scans.push_back({&c, f.header.tag});
            return serve_scans();
        case frame_type::abort:
            return on_abort(c, f);
        default: {
            if (_phase == phase::stopping) return;
            const std::string why =
                pe_name(p) + " sent a '" + std::string(frame_type_name(type)) +
                "' frame on its control connection, which after the registration carries only "
                "print, error, scan and abort; does the PE run the same coverse release?";
            say(why);
            fail(1);
            begin_stop(why);
        }
    }
}

void launcher::on_register(connection& c, const frame& f) {
    // frame_reader validated the payload (and that node == source PE).
    const auto reg = decode_register_node(f.payload_bytes(), _limits).value;
    const std::uint32_t pe = reg.node;
    if (reg.job_key != _job_key) {
        verbose("refusing a registration as PE " + std::to_string(pe) + " from " + c.peer +
                ": job key " + hex16(reg.job_key) + ", ours is " + hex16(_job_key));
        return refuse(c, "this launcher runs job key " + hex16(_job_key) +
                             " but the registration carries job key " + hex16(reg.job_key) +
                             ": the process belongs to another job (check COVERSE_LAUNCHER "
                             "and COVERSE_JOB_KEY)");
    }
    if (_phase != phase::registering) {
        return refuse(c, _phase == phase::running ? "every PE of the job has registered already"
                                                  : "the job is stopping");
    }
    pe_process& p = _pes[pe];
    std::string problem;
    if (p.registered) {
        problem = "PE " + std::to_string(pe) + " registered twice (from " + c.peer +
                  "); each PE must register once";
    } else if (reg.pe_count != 1) {
        problem = "PE " + std::to_string(pe) + " registered " + std::to_string(reg.pe_count) +
                  " PEs in one process; coverse-run starts one process per PE";
    }
    if (!problem.empty()) {
        say(problem);
        fail(1);
        refuse(c, problem);
        return begin_stop(problem);
    }
    c.pe = pe;
    p.conn = &c;
    p.registered = true;
    p.entry = node_entry{pe, std::string(reg.ip), reg.data_port, reg.machine_id};
    ++_registered;
    verbose("PE " + std::to_string(pe) + " registered from " + c.peer + ": data address " +
            p.entry.ip + ":" + std::to_string(reg.data_port) + ", machine id " +
            hex16(reg.machine_id));
    if (_registered == _n) send_node_tables();
}

void launcher::send_node_tables() {
    std::vector<node_record> records;
    records.reserve(_n);
    for (const pe_process& p : _pes) {
        records.push_back(node_record{p.entry.machine_id, p.pe, 1, p.entry.data_port, p.entry.ip});
    }
    const auto table = encode_node_table(records);
    for (pe_process& p : _pes) {
        if (p.conn != nullptr) send(*p.conn, frame_type::node_table, 0, table);
    }
    _phase = phase::running;
    _all_registered = clock::now();
    // No more registrations: free the port.
    ::close(_listen_fd);
    _listen_fd = -1;
    verbose("all " + std::to_string(_n) + " PEs registered after " +
            elapsed_text(clock::now() - _start) + "; node table sent");
}

void launcher::on_abort(connection& c, const frame& f) {
    const auto a = decode_abort(f.payload_bytes(), _limits).value;
    const std::uint32_t pe = c.pe ? *c.pe : f.header.source_pe;
    std::string_view text = a.text;
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r'))
        text.remove_suffix(1);
    pe_process& p = _pes[pe];
    // The PE's earlier output first, then the reason it stopped.
    flush_partials(p);
    std::string line = "PE " + std::to_string(pe) + " aborted: ";
    line.append(text);
    line += '\n';
    write_all(STDERR_FILENO, line);
    // The acknowledgement: an abort frame back, sent only after the text is written.
    send(c, frame_type::abort, 0, encode(abort_payload{a.exit_code, pe, ""}));
    if (_phase == phase::stopping) return;
    const int code = a.exit_code & 0xFF;
    fail(code == 0 ? 1 : code);
    begin_stop("PE " + std::to_string(pe) + " aborted: " + std::string(text), pe);
}

void launcher::relay(pe_process& p, bool to_stderr, std::string_view text) {
    std::string& partial = to_stderr ? p.err_partial : p.out_partial;
    const int fd = to_stderr ? STDERR_FILENO : STDOUT_FILENO;
    const auto last = text.rfind('\n');
    if (last == std::string_view::npos) {
        partial.append(text);
        if (partial.size() > max_held_line) {
            partial += '\n';
            emit_lines(fd, p, partial);
            partial.clear();
        }
        return;
    }
    // Whole lines go out now; the tail waits for its newline (or the PE's end).
    if (partial.empty()) {
        emit_lines(fd, p, text.substr(0, last + 1));
    } else {
        partial.append(text.substr(0, last + 1));
        emit_lines(fd, p, partial);
        partial.clear();
    }
    partial.append(text.substr(last + 1));
}

void launcher::flush_partials(pe_process& p) {
    for (auto [partial, fd] :
         {std::pair{&p.out_partial, STDOUT_FILENO}, std::pair{&p.err_partial, STDERR_FILENO}}) {
        if (partial->empty()) continue;
        *partial += '\n';
        emit_lines(fd, p, *partial);
        partial->clear();
    }
}

// `lines` ends with '\n'. One write per batch: our own lines never interleave, and a reader
// of a pipe sees whole lines.
void launcher::emit_lines(int fd, const pe_process& p, std::string_view lines) {
    if (!_opts.prefix) return write_all(fd, lines);
    const std::string tag = "[PE " + std::to_string(p.pe) + "] ";
    std::string out;
    out.reserve(lines.size() + tag.size() * 4);
    while (!lines.empty()) {
        const auto nl = lines.find('\n');
        out += tag;
        out.append(lines.substr(0, nl + 1));
        lines.remove_prefix(nl + 1);
    }
    write_all(fd, out);
}

void launcher::send(connection& c, frame_type type, std::uint32_t tag,
                    std::span<const std::byte> payload) {
    if (c.dead) return;
    frame_header h;
    h.type = type;
    h.source_pe = launcher_pe;
    h.payload_length = static_cast<std::uint32_t>(payload.size());
    h.tag = tag;
    const auto header = encode_header(h);
    c.out.insert(c.out.end(), header.begin(), header.end());
    c.out.insert(c.out.end(), payload.begin(), payload.end());
    flush_out(c);
}

void launcher::refuse(connection& c, std::string_view why) {
    send(c, frame_type::node_table, 0, encode_node_table_refusal(why));
    c.closing = true;
    if (!c.dead && c.out.empty()) close_connection(c);
}

void launcher::flush_out(connection& c) {
    while (!c.dead && c.out_sent < c.out.size()) {
        const ssize_t n = ::send(c.fd, c.out.data() + c.out_sent, c.out.size() - c.out_sent,
                                 MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN) return;  // POLLOUT brings us back
            c.out.clear();                // the PE is gone; its exit reports it
            c.out_sent = 0;
            return;
        }
        c.out_sent += static_cast<std::size_t>(n);
    }
    c.out.clear();
    c.out_sent = 0;
    if (c.closing && !c.dead) close_connection(c);
}

void launcher::close_connection(connection& c) {
    if (c.dead) return;
    c.dead = true;
    ::close(c.fd);
    std::erase_if(_scans, [&](const scan_request& s) { return s.conn == &c; });
    if (c.pe) {
        pe_process& p = _pes[*c.pe];
        if (p.conn == &c) p.conn = nullptr;
        flush_partials(p);  // the PE's end: its unterminated lines go out now
    }
}

void launcher::read_stdin() {
    char buf[64 * 1024];
    const ssize_t n = ::read(STDIN_FILENO, buf, sizeof buf);
    if (n > 0) {
        _stdin_buffer.append(buf, static_cast<std::size_t>(n));
    } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
        _stdin_eof = true;  // EOF, or no usable stdin (closed, a directory, ...)
    }
}

void launcher::serve_scans() {
    while (!_scans.empty()) {
        std::string reply;
        const auto nl = _stdin_buffer.find('\n');
        if (nl != std::string::npos) {
            reply = _stdin_buffer.substr(0, nl + 1);
            _stdin_buffer.erase(0, nl + 1);
        } else if (_stdin_eof) {
            // A last line without its newline, then empty replies: end of input.
            reply.swap(_stdin_buffer);
        } else {
            return;  // wait for more input
        }
        const scan_request s = _scans.front();
        _scans.pop_front();
        send(*s.conn, frame_type::scan_reply, s.tag, as_bytes(reply));
    }
}

void launcher::check_timers() {
    const auto now = clock::now();
    if (auto why = _doctor.tick(now); why && _phase != phase::stopping) {
        say(*why);
        fail(doctor::stuck_exit_status);
        begin_stop(*why);
    }
    if (_phase == phase::registering && now >= _register_deadline) registration_timeout();
    for (pe_process& p : _pes) {
        if (p.running && p.kill_at && now >= *p.kill_at) {
            ::kill(p.pid, SIGKILL);
            p.kill_at.reset();
        }
    }
}

void launcher::registration_timeout() {
    std::vector<std::uint32_t> missing;
    for (const pe_process& p : _pes) {
        if (!p.registered) missing.push_back(p.pe);
    }
    if (missing.empty()) return;
    // The first missing PE in full; the others (if any) on a second line.
    std::string why = "PE " + std::to_string(missing[0]) + " of " + std::to_string(_n) +
                      " did not register within " + seconds_text(_opts.register_timeout) +
                      " (waiting for its registration on " + control_address() +
                      "); is the program a coverse/Converse program? raise " +
                      _opts.timeout_setting + " if it starts slowly";
    say(why);
    if (missing.size() > 1) {
        std::string others = missing.size() == 2 ? "PE " : "PEs ";
        const std::size_t shown = std::min<std::size_t>(missing.size(), 9);
        for (std::size_t i = 1; i < shown; ++i) {
            if (i > 1) others += (i + 1 == missing.size()) ? " and " : ", ";
            others += std::to_string(missing[i]);
        }
        if (shown < missing.size()) {
            others += ", ... (" + std::to_string(missing.size()) + " in all)";
        }
        others += " did not register either";
        say(others);
        why += "; " + others;
    }
    fail(1);
    begin_stop(why);
}

void launcher::begin_stop(std::string_view why, std::optional<std::uint32_t> aborter,
                          int stop_signal) {
    if (_phase == phase::stopping) return;
    const bool was_registering = _phase == phase::registering;
    _phase = phase::stopping;
    if (_listen_fd >= 0) {
        ::close(_listen_fd);
        _listen_fd = -1;
    }
    // PEs blocked in register_node learn why instead of just being killed.
    if (was_registering) {
        const std::string text = "the job is stopping: " + std::string(why);
        for (pe_process& p : _pes) {
            if (p.conn != nullptr) refuse(*p.conn, text);
        }
    }
    const auto now = clock::now();
    std::size_t others = 0;
    for (pe_process& p : _pes) {
        if (!p.running) {
            p.ended = true;  // a remote start not made (or its retry) never comes
            continue;
        }
        if (aborter && p.pe == *aborter) {
            p.kill_at = now + abort_grace;
            continue;
        }
        ::kill(p.pid, stop_signal);
        p.kill_at = now + stop_grace;
        ++others;
    }
    if (others > 0) {
        say("stopping the " + std::to_string(others) + " PE" + (others == 1 ? "" : "s") +
            " still running");
    }
}

}  // namespace

std::string shm_name_prefix(std::uint64_t job_key) {
    return "coverse-" + hex16(job_key) + "-";
}

void remove_shm_entries(std::string_view prefix) noexcept {
    // Only coverse's own names, and never all of them at once: an empty or short prefix
    // (a caller's bug) would remove other programs' shared memory.
    constexpr std::string_view ours = "coverse-";
    if (prefix.size() <= ours.size() || !prefix.starts_with(ours)) return;
    DIR* d = ::opendir("/dev/shm");
    if (!d) return;
    while (const dirent* e = ::readdir(d))
        if (std::string_view(e->d_name).starts_with(prefix)) ::unlinkat(::dirfd(d), e->d_name, 0);
    ::closedir(d);
}

int run_job(const launch_options& opts) {
    launcher l(opts);
    const int status = l.run();
    // PEs on one host share memory through /dev/shm/coverse-<job key>-* (rings, eager
    // channels, doorbells; rdma/). They unlink them once connected; a job that died before
    // that (an abort or a kill during start-up, a PE killed while it offered a channel)
    // leaves them, so the launcher removes what is left.
    remove_shm_entries(shm_name_prefix(l.job_key()));
    return status;
}

std::vector<nodelist_host> read_nodelist(const std::string& path, const std::string& group) {
    std::ifstream in(path);
    if (!in) {
        throw bootstrap_error("coverse: cannot read the nodelist '" + path +
                              "': " + std::strerror(errno) +
                              "; give ++nodelist a file of 'group main' and 'host NAME' lines");
    }
    std::vector<nodelist_host> hosts;
    std::string current = "main";
    std::string group_shell;
    std::string line;
    for (int number = 1; std::getline(in, line); ++number) {
        const std::string origin = path + ":" + std::to_string(number);
        auto bad = [&](const std::string& why) {
            throw bootstrap_error("coverse: nodelist " + origin + ": " + why +
                                  "; lines are 'group NAME [++shell CMD]' and 'host NAME "
                                  "[++cpus N] [++shell CMD]' (charmrun's format)");
        };
        if (const auto hash = line.find('#'); hash != std::string::npos) line.erase(hash);
        std::vector<std::string> words;
        for (std::size_t i = 0; i < line.size();) {
            while (i < line.size() && std::isspace(static_cast<unsigned char>(line[i])))
                ++i;
            const std::size_t start = i;
            while (i < line.size() && !std::isspace(static_cast<unsigned char>(line[i])))
                ++i;
            if (i > start) words.push_back(line.substr(start, i - start));
        }
        if (words.empty()) continue;
        if (words[0] != "group" && words[0] != "host") bad("unknown keyword '" + words[0] + "'");
        if (words.size() < 2) bad("'" + words[0] + "' needs a name");
        std::uint32_t cpus = 1;
        std::string shell;
        for (std::size_t i = 2; i < words.size(); ++i) {
            const std::string& opt = words[i];
            if (opt == "++cpus" && words[0] == "host") {
                if (i + 1 >= words.size()) bad("++cpus needs a count");
                const std::string& v = words[++i];
                std::uint32_t n = 0;
                const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
                if (ec != std::errc{} || end != v.data() + v.size() || n == 0 || n > 65536)
                    bad("++cpus needs a count of 1 to 65536, not '" + v + "'");
                cpus = n;
            } else if (opt == "++shell") {
                // The rest of the line is the command (it may have arguments of its own).
                for (++i; i < words.size(); ++i)
                    shell += (shell.empty() ? "" : " ") + words[i];
                if (shell.empty()) bad("++shell needs a command");
            } else {
                bad("option '" + opt + "' is not supported by coverse-run");
            }
        }
        if (words[0] == "group") {
            current = words[1];
            group_shell = shell;
            continue;
        }
        if (current != group) continue;
        hosts.push_back(nodelist_host{words[1], cpus, shell.empty() ? group_shell : shell, origin});
    }
    if (hosts.empty()) {
        throw bootstrap_error("coverse: the nodelist '" + path + "' has no host in group '" +
                              group + "'; add lines 'group " + group + "' and 'host NAME'");
    }
    return hosts;
}

std::vector<std::size_t> place_pes(const std::vector<nodelist_host>& hosts, std::uint32_t num_pes,
                                   std::optional<std::uint32_t> ppn) {
    std::vector<std::size_t> slots;
    for (std::size_t h = 0; h < hosts.size(); ++h)
        for (std::uint32_t i = 0; i < (ppn ? *ppn : hosts[h].cpus); ++i)
            slots.push_back(h);
    std::vector<std::size_t> out;
    out.reserve(num_pes);
    for (std::uint32_t pe = 0; pe < num_pes && !slots.empty(); ++pe)
        out.push_back(slots[pe % slots.size()]);
    return out;
}

std::optional<std::uint32_t> pe_count_in_args(const std::vector<std::string>& args) {
    std::optional<std::uint32_t> count;
    auto parse = [](std::string_view digits) -> std::optional<std::uint32_t> {
        std::uint32_t v = 0;
        const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
        if (digits.empty() || ec != std::errc{} || end != digits.data() + digits.size() || v == 0) {
            return std::nullopt;
        }
        return v;
    };
    for (std::size_t i = 0; i < args.size(); ++i) {
        const std::string_view a = args[i];
        if (a == "+p") {
            const auto v = i + 1 < args.size() ? parse(args[i + 1]) : std::nullopt;
            if (!v) {
                throw bootstrap_error(
                    "coverse: '+p' needs a PE count of 1 or more after it "
                    "(e.g. +p 4 or +p4)");
            }
            count = v;
            ++i;
        } else if (a.size() > 2 && a.starts_with("+p") && a[2] >= '0' && a[2] <= '9') {
            const auto v = parse(a.substr(2));
            if (!v) {
                throw bootstrap_error("coverse: '" + std::string(a) +
                                      "' is not a PE count of 1 or more (e.g. +p4)");
            }
            count = v;
        }
    }
    return count;
}

}  // namespace coverse::net
