// Tests of coverse-run: the built launcher runs launcher_test_pe with 2 and 4 PEs, and the
// test checks its output (whole lines, prefixes, scan echo), its fault handling (abort,
// crash, exit code, kill -9, a PE that never registers, SIGINT) and that no PE outlives it.
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;
using namespace std::chrono_literals;

const std::string coverse_run = COVERSE_RUN_PATH;
const std::string test_pe = LAUNCHER_TEST_PE_PATH;

/// coverse-run started in its own process group with its stdout/stderr captured. The
/// destructor kills the whole group (the launcher and every PE it started), so nothing
/// survives a failed test.
class launched_job {
public:
    explicit launched_job(const std::vector<std::string>& args,
                          std::optional<std::string> input = std::nullopt,
                          const std::vector<std::string>& env = {}) {
        int out[2], err[2], in[2];
        EXPECT_EQ(::pipe2(out, O_CLOEXEC), 0);
        EXPECT_EQ(::pipe2(err, O_CLOEXEC), 0);
        EXPECT_EQ(::pipe2(in, O_CLOEXEC), 0);
        std::vector<std::string> argv_store = {coverse_run};
        argv_store.insert(argv_store.end(), args.begin(), args.end());
        std::vector<char*> argv;
        for (auto& a : argv_store)
            argv.push_back(a.data());
        argv.push_back(nullptr);
        char dir[] = "/tmp/coverse-launcher-test-XXXXXX";
        EXPECT_NE(::mkdtemp(dir), nullptr);
        _pid_dir = dir;
        std::vector<std::string> env_store = env;
        env_store.push_back("COVERSE_TEST_PID_DIR=" + _pid_dir);
        _pid = ::fork();
        if (_pid == 0) {
            ::setpgid(0, 0);
            ::dup2(in[0], STDIN_FILENO);
            ::dup2(out[1], STDOUT_FILENO);
            ::dup2(err[1], STDERR_FILENO);
            for (auto& e : env_store)
                ::putenv(e.data());
            ::execv(argv[0], argv.data());
            ::_exit(126);
        }
        ::setpgid(_pid, _pid);  // also here: no race with the kill in the destructor
        ::close(out[1]);
        ::close(err[1]);
        ::close(in[0]);
        _out = out[0];
        _err = err[0];
        if (input) {
            // Small inputs only: they fit in the pipe buffer.
            EXPECT_EQ(::write(in[1], input->data(), input->size()),
                      static_cast<ssize_t>(input->size()));
        }
        ::close(in[1]);
        _start = clock_type::now();
    }
    ~launched_job() {
        ::kill(-_pid, SIGKILL);
        if (!_exited) ::waitpid(_pid, nullptr, 0);
        if (_out >= 0) ::close(_out);
        if (_err >= 0) ::close(_err);
        std::error_code ignored;
        std::filesystem::remove_all(_pid_dir, ignored);
    }
    launched_job(const launched_job&) = delete;
    launched_job& operator=(const launched_job&) = delete;

    /// Reads output until `done()` holds or `timeout` passes.
    bool wait_for(const std::function<bool()>& done, std::chrono::milliseconds timeout) {
        const auto deadline = clock_type::now() + timeout;
        while (!done()) {
            if (clock_type::now() >= deadline) return false;
            pump(10);
            poll_exit();
        }
        return true;
    }
    /// Waits for the launcher to exit and for its output to end (every PE closed it).
    bool wait_exit(std::chrono::milliseconds timeout) {
        const auto deadline = clock_type::now() + timeout;
        while (!_exited || _out >= 0 || _err >= 0) {
            if (clock_type::now() >= deadline) return false;
            pump(10);
            poll_exit();
        }
        return true;
    }
    /// The launcher's exit code (128+signal if it was killed); -1 while it runs.
    int status() const {
        if (!_exited) return -1;
        return WIFEXITED(_status) ? WEXITSTATUS(_status) : 128 + WTERMSIG(_status);
    }
    clock_type::time_point exit_time() const { return _exit_time; }
    clock_type::time_point start_time() const { return _start; }
    pid_t pid() const { return _pid; }
    const std::string& out() const { return _o; }
    const std::string& err() const { return _e; }
    std::string dump() const { return "--- stdout ---\n" + _o + "--- stderr ---\n" + _e; }
    /// The PIDs the PEs wrote at their start (a PE stopped before it got that far has none).
    std::vector<pid_t> pe_pids() const {
        std::vector<pid_t> pids;
        std::error_code ec;
        for (const auto& f : std::filesystem::directory_iterator(_pid_dir, ec)) {
            std::ifstream in(f.path());
            pid_t pid = 0;
            if (in >> pid) pids.push_back(pid);
        }
        return pids;
    }

private:
    void poll_exit() {
        if (_exited) return;
        if (::waitpid(_pid, &_status, WNOHANG) == _pid) {
            _exited = true;
            _exit_time = clock_type::now();
        }
    }
    void pump(int timeout_ms) {
        pollfd fds[2] = {{_out, POLLIN, 0}, {_err, POLLIN, 0}};
        if (::poll(fds, 2, timeout_ms) <= 0) return;
        for (int i = 0; i < 2; ++i) {
            if (fds[i].revents == 0) continue;
            int& fd = i == 0 ? _out : _err;
            char buf[65536];
            const ssize_t n = ::read(fd, buf, sizeof buf);
            if (n > 0) {
                (i == 0 ? _o : _e).append(buf, static_cast<std::size_t>(n));
            } else if (n == 0 || errno != EINTR) {
                ::close(fd);
                fd = -1;
            }
        }
    }

    pid_t _pid = -1;
    std::string _pid_dir;
    int _out = -1;
    int _err = -1;
    std::string _o, _e;
    bool _exited = false;
    int _status = 0;
    clock_type::time_point _start, _exit_time;
};

std::vector<std::string> lines_of(const std::string& text) {
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);)
        out.push_back(line);
    return out;
}

/// PIDs the PEs reported ("pid N", possibly prefixed).
std::vector<pid_t> pids_in(const std::string& out) {
    static const std::regex pid_line(R"(^(?:\[PE \d+\] )?pid (\d+)$)");
    std::vector<pid_t> pids;
    for (const auto& line : lines_of(out)) {
        std::smatch m;
        if (std::regex_match(line, m, pid_line)) pids.push_back(std::stoi(m[1]));
    }
    return pids;
}

bool contains(const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos;
}

/// Every PE the job started is gone: the launcher reaped it (no zombie) and it is not
/// running anywhere (no orphan). At least `min_pids` PEs must have recorded their PID.
void expect_no_process_left(const launched_job& job, std::size_t min_pids) {
    const auto pids = job.pe_pids();
    EXPECT_GE(pids.size(), min_pids) << job.dump();
    for (pid_t pid : pids) {
        errno = 0;
        EXPECT_EQ(::kill(pid, 0), -1) << "PE process " << pid << " still exists\n" << job.dump();
        EXPECT_EQ(errno, ESRCH) << "PE process " << pid;
    }
}

std::vector<std::string> pe_args(const std::vector<std::string>& launcher_args,
                                 const std::vector<std::string>& program_args) {
    std::vector<std::string> args = launcher_args;
    args.push_back(test_pe);
    args.insert(args.end(), program_args.begin(), program_args.end());
    return args;
}

class launcher_job : public ::testing::TestWithParam<int> {
protected:
    int n() const { return GetParam(); }
    std::string n_text() const { return std::to_string(GetParam()); }
    std::string last_pe() const { return std::to_string(GetParam() - 1); }
};

// Many lines from every PE at once, some cut mid-line over several prints: every line
// arrives whole, prefixed with its PE, in that PE's order; unterminated tails are flushed.
TEST_P(launcher_job, output_lines_are_whole_prefixed_and_in_order) {
    constexpr int lines = 1200;
    launched_job job(pe_args({"-n", n_text(), "--prefix"}, {"print", std::to_string(lines)}));
    ASSERT_TRUE(job.wait_exit(30s)) << job.dump();
    EXPECT_EQ(job.status(), 0) << job.dump();

    static const std::regex line_re(R"(^\[PE (\d+)\] PE (\d+) line (\d+) ([a-z]+)$)");
    std::map<int, int> next_line;
    std::set<int> tails;
    for (const auto& line : lines_of(job.out())) {
        std::smatch m;
        if (std::regex_match(line, m, line_re)) {
            const int pe = std::stoi(m[1]);
            ASSERT_EQ(std::stoi(m[2]), pe) << line;
            ASSERT_EQ(std::stoi(m[3]), next_line[pe]) << "out of order or interleaved: " << line;
            ASSERT_EQ(m[4].str(), std::string(40 + pe * 7, static_cast<char>('a' + pe))) << line;
            ++next_line[pe];
        } else if (line.starts_with("[PE ") && line.ends_with(" tail")) {
            tails.insert(std::stoi(line.substr(4)));
            EXPECT_EQ(line, "[PE " + line.substr(4, line.find(']') - 4) + "] PE " +
                                line.substr(4, line.find(']') - 4) + " tail");
        } else {
            ASSERT_TRUE(std::regex_match(line, std::regex(R"(^\[PE \d+\] pid \d+$)")))
                << "unexpected line: '" << line << "'";
        }
    }
    for (int pe = 0; pe < n(); ++pe) {
        EXPECT_EQ(next_line[pe], lines) << "PE " << pe;
        EXPECT_TRUE(tails.contains(pe)) << "PE " << pe << "'s unterminated last line";
    }
    int errors = 0;
    for (const auto& line : lines_of(job.err())) {
        ASSERT_TRUE(std::regex_match(line, std::regex(R"(^\[PE \d+\] PE \d+ err \d+$)")))
            << "unexpected stderr line: '" << line << "'";
        ++errors;
    }
    EXPECT_EQ(errors, n() * (lines / 50));
    expect_no_process_left(job, static_cast<std::size_t>(n()));
}

// Scan requests from every PE are queued in order and each gets one line of the
// launcher's stdin; a last line without newline still counts; then every PE sees EOF.
TEST_P(launcher_job, scan_echoes_stdin_lines_then_eof) {
    launched_job job(pe_args({"+p" + n_text()}, {"echo"}),
                     std::string("alpha\nbeta\n\ngamma delta\nno-newline"));
    ASSERT_TRUE(job.wait_exit(20s)) << job.dump();
    EXPECT_EQ(job.status(), 0) << job.dump();
    std::multiset<std::string> echoed;
    int eofs = 0;
    for (const auto& line : lines_of(job.out())) {
        if (line.starts_with("echo ")) echoed.insert(line.substr(5));
        if (line == "EOF") ++eofs;
    }
    EXPECT_EQ(echoed,
              (std::multiset<std::string>{"alpha", "beta", "", "gamma delta", "no-newline"}))
        << job.dump();
    EXPECT_EQ(eofs, n()) << job.dump();
    expect_no_process_left(job, static_cast<std::size_t>(n()));
}

TEST_P(launcher_job, abort_prints_the_message_and_stops_every_pe) {
    launched_job job(pe_args({"+p", n_text()}, {"abort", last_pe(), "5"}));
    ASSERT_TRUE(job.wait_exit(20s)) << job.dump();
    EXPECT_EQ(job.status(), 5) << job.dump();
    EXPECT_TRUE(
        contains(job.err(), "PE " + last_pe() + " aborted: test abort from PE " + last_pe() + "\n"))
        << job.dump();
    expect_no_process_left(job, static_cast<std::size_t>(n()));
}

TEST_P(launcher_job, crash_is_reported_with_its_signal) {
    launched_job job(pe_args({"-n", n_text()}, {"crash", "1"}));
    ASSERT_TRUE(job.wait_exit(20s)) << job.dump();
    EXPECT_EQ(job.status(), 128 + SIGSEGV) << job.dump();
    EXPECT_TRUE(std::regex_search(
        job.err(), std::regex("coverse-run: PE 1 of " + n_text() +
                              R"( \(pid \d+\) was killed by signal 11 \(SIGSEGV\))")))
        << job.dump();
    expect_no_process_left(job, static_cast<std::size_t>(n()));
}

TEST_P(launcher_job, nonzero_exit_is_reported_with_its_code) {
    launched_job job(pe_args({"-n" + n_text()}, {"exit", last_pe(), "3"}));
    ASSERT_TRUE(job.wait_exit(20s)) << job.dump();
    EXPECT_EQ(job.status(), 3) << job.dump();
    EXPECT_TRUE(
        std::regex_search(job.err(), std::regex("coverse-run: PE " + last_pe() + " of " + n_text() +
                                                R"( \(pid \d+\) exited with status 3)")))
        << job.dump();
    expect_no_process_left(job, static_cast<std::size_t>(n()));
}

// kill -9 of one PE: the launcher notices within a second (SIGCHLD through its signalfd),
// names the PE and the signal, stops the others and exits non-zero.
TEST_P(launcher_job, kill_9_of_one_pe_stops_the_job_within_a_second) {
    launched_job job(pe_args({"-n", n_text(), "--prefix"}, {"hang"}));
    ASSERT_TRUE(job.wait_for([&] { return pids_in(job.out()).size() == std::size_t(n()); }, 20s))
        << job.dump();
    pid_t victim = -1;
    for (const auto& line : lines_of(job.out())) {
        if (line.starts_with("[PE 1] pid ")) victim = std::stoi(line.substr(11));
    }
    ASSERT_GT(victim, 0) << job.dump();
    const auto killed_at = clock_type::now();
    ASSERT_EQ(::kill(victim, SIGKILL), 0);
    ASSERT_TRUE(job.wait_exit(10s)) << job.dump();
    EXPECT_LT(job.exit_time() - killed_at, 1s) << job.dump();
    EXPECT_EQ(job.status(), 128 + SIGKILL) << job.dump();
    EXPECT_TRUE(std::regex_search(job.err(), std::regex("coverse-run: PE 1 of " + n_text() +
                                                        R"( \(pid \d+\) was killed by signal 9 )"
                                                        R"(\(SIGKILL\))")))
        << job.dump();
    expect_no_process_left(job, static_cast<std::size_t>(n()));
}

TEST_P(launcher_job, pe_that_never_registers_is_named_after_the_timeout) {
    launched_job job(pe_args({"-n", n_text(), "--timeout", "1"}, {"never-register", "1"}));
    ASSERT_TRUE(job.wait_exit(20s)) << job.dump();
    EXPECT_EQ(job.status(), 1) << job.dump();
    EXPECT_TRUE(contains(job.err(), "coverse-run: PE 1 of " + n_text() +
                                        " did not register within 1.0 s (waiting for its "
                                        "registration on 127.0.0.1:"))
        << job.dump();
    EXPECT_TRUE(contains(job.err(),
                         "is the program a coverse/Converse program? raise --timeout "
                         "(CONNECTION_TIMEOUT when it is not given) if it starts "
                         "slowly\n"))
        << job.dump();
    const auto took = job.exit_time() - job.start_time();
    EXPECT_GE(took, 1s);
    EXPECT_LT(took, 5s);
    // The PEs that did register learnt why from the launcher's refusal (or were stopped).
    expect_no_process_left(job, static_cast<std::size_t>(n()));
}

// A program that is not a coverse program at all: every PE is missing.
TEST(launcher, non_coverse_program_times_out_naming_every_pe) {
    launched_job job({"-n", "3", "--timeout", "0.5", "sleep", "30"});
    ASSERT_TRUE(job.wait_exit(20s)) << job.dump();
    EXPECT_EQ(job.status(), 1) << job.dump();
    EXPECT_TRUE(contains(job.err(), "coverse-run: PE 0 of 3 did not register within 0.5 s"))
        << job.dump();
    EXPECT_TRUE(contains(job.err(), "coverse-run: PEs 1 and 2 did not register either\n"))
        << job.dump();
    EXPECT_LT(job.exit_time() - job.start_time(), 5s);
}

TEST_P(launcher_job, sigint_to_the_launcher_stops_every_pe) {
    launched_job job(pe_args({"-n", n_text()}, {"hang"}));
    ASSERT_TRUE(job.wait_for([&] { return pids_in(job.out()).size() == std::size_t(n()); }, 20s))
        << job.dump();
    ASSERT_EQ(::kill(job.pid(), SIGINT), 0);
    ASSERT_TRUE(job.wait_exit(10s)) << job.dump();
    EXPECT_EQ(job.status(), 128 + SIGINT) << job.dump();
    EXPECT_TRUE(contains(job.err(), "coverse-run: got signal 2 (SIGINT)")) << job.dump();
    expect_no_process_left(job, static_cast<std::size_t>(n()));
}

INSTANTIATE_TEST_SUITE_P(pes, launcher_job, ::testing::Values(2, 4),
                         [](const auto& info) { return std::to_string(info.param) + "_pes"; });

// ---------------------------------------------------------------------------------------

TEST(launcher, pe_exiting_before_registering_is_reported) {
    launched_job job(pe_args({"-n", "2"}, {"early-exit", "1"}));
    ASSERT_TRUE(job.wait_exit(20s)) << job.dump();
    EXPECT_NE(job.status(), 0);
    EXPECT_TRUE(
        std::regex_search(job.err(), std::regex(R"(coverse-run: PE 1 of 2 \(pid \d+\) exited with )"
                                                R"(status 0 before registering)")))
        << job.dump();
    expect_no_process_left(job, 1);
}

// +pN among the program's arguments sets the PE count and is passed on; --set appends
// "++set NAME=VALUE"; the launch environment reaches every PE.
TEST(launcher, program_arguments_pass_through) {
    launched_job job({test_pe, "args", "+p2", "--set", "x=1"},  // all program arguments
                     std::nullopt, {"COVERSE_TEST_EXTRA=from-test"});
    ASSERT_TRUE(job.wait_exit(20s)) << job.dump();
    EXPECT_EQ(job.status(), 0) << job.dump();
    const auto out = lines_of(job.out());
    EXPECT_EQ(std::count(out.begin(), out.end(), "num_pes 2"), 2) << job.dump();
    EXPECT_EQ(std::count(out.begin(), out.end(), "arg 2 +p2"), 2) << job.dump();
    EXPECT_EQ(std::count(out.begin(), out.end(), "arg 3 --set"), 2) << job.dump();
    EXPECT_EQ(std::count(out.begin(), out.end(), "env COVERSE_TEST_EXTRA from-test"), 2);

    launched_job set({"-n", "1", "--set", "MEMORY_POOL=0", test_pe, "args", "+p", "1"});
    ASSERT_TRUE(set.wait_exit(20s)) << set.dump();
    EXPECT_EQ(set.status(), 0) << set.dump();
    EXPECT_TRUE(contains(set.out(), "arg 2 +p\narg 3 1\narg 4 ++set\narg 5 MEMORY_POOL=0\n"))
        << set.dump();
    EXPECT_TRUE(std::regex_search(set.out(), std::regex("env COVERSE_JOB_KEY [0-9a-f]{16}\n")))
        << set.dump();
}

TEST(launcher, bind_pins_pe_i_to_cpu_i_mod_cpus) {
    cpu_set_t mine;
    CPU_ZERO(&mine);
    ASSERT_EQ(::sched_getaffinity(0, sizeof mine, &mine), 0);
    std::vector<int> cpus;
    for (int c = 0; c < CPU_SETSIZE; ++c) {
        if (CPU_ISSET(c, &mine)) cpus.push_back(c);
    }
    for (const auto& how :
         {std::vector<std::string>{"--bind", "--prefix", "-n", "3", test_pe, "args"},
          std::vector<std::string>{"--prefix", "-n", "3", test_pe, "args", "+setcpuaffinity"}}) {
        launched_job job(how);
        ASSERT_TRUE(job.wait_exit(20s)) << job.dump();
        EXPECT_EQ(job.status(), 0) << job.dump();
        for (int pe = 0; pe < 3; ++pe) {
            const std::string expected = "[PE " + std::to_string(pe) + "] cpus " +
                                         std::to_string(cpus[pe % cpus.size()]) + "\n";
            EXPECT_TRUE(contains(job.out(), expected)) << expected << job.dump();
        }
    }
}

TEST(launcher, usage_errors_exit_2) {
    for (const auto& args :
         {std::vector<std::string>{"--bogus", test_pe}, std::vector<std::string>{"-n", "2"},
          std::vector<std::string>{"-n", "zero", test_pe}, std::vector<std::string>{"+p0", test_pe},
          std::vector<std::string>{"--timeout", "-1", test_pe},
          std::vector<std::string>{"--set", "novalue", test_pe},
          std::vector<std::string>{"-n", "2", test_pe, "+p3"}}) {
        launched_job job(args);
        ASSERT_TRUE(job.wait_exit(10s)) << job.dump();
        EXPECT_EQ(job.status(), 2) << args[0] << "\n" << job.dump();
        EXPECT_TRUE(job.err().starts_with("coverse-run: ")) << job.dump();
        EXPECT_TRUE(contains(job.err(), "Usage: coverse-run")) << job.dump();
        EXPECT_TRUE(job.out().empty()) << job.dump();
    }
    launched_job bogus({"--bogus", test_pe});
    ASSERT_TRUE(bogus.wait_exit(10s));
    EXPECT_TRUE(bogus.err().starts_with("coverse-run: unknown option '--bogus'")) << bogus.dump();
}

TEST(launcher, help_and_version) {
    launched_job help({"--help"});
    ASSERT_TRUE(help.wait_exit(10s));
    EXPECT_EQ(help.status(), 0);
    for (const char* flag : {"Usage: coverse-run", "-n N", "+pN", "+p N", "++local", "++verbose",
                             "-v", "--prefix", "--bind", "--timeout SECONDS", "--set NAME=VALUE",
                             "--help", "-h", "--version", "+setcpuaffinity"}) {
        EXPECT_TRUE(contains(help.out(), flag)) << flag << "\n" << help.dump();
    }
    launched_job version({"--version"});
    ASSERT_TRUE(version.wait_exit(10s));
    EXPECT_EQ(version.status(), 0);
    EXPECT_TRUE(version.out().starts_with("coverse-run (coverse) ")) << version.dump();
}

TEST(launcher, program_that_cannot_run_exits_127) {
    launched_job job({"-n", "2", "++local", "/nonexistent/coverse-program"});
    ASSERT_TRUE(job.wait_exit(10s)) << job.dump();
    EXPECT_EQ(job.status(), 127) << job.dump();
    EXPECT_TRUE(contains(job.err(),
                         "coverse-run: cannot run '/nonexistent/coverse-program' for "
                         "PE 0: No such file or directory"))
        << job.dump();
}

TEST(launcher, verbose_reports_the_start_up) {
    launched_job job({"++verbose", "-n", "2", test_pe, "args"});
    ASSERT_TRUE(job.wait_exit(20s)) << job.dump();
    EXPECT_EQ(job.status(), 0) << job.dump();
    for (const char* part : {"coverse-run: starting 2 PEs: ", "coverse-run: PE 1 started, pid ",
                             "coverse-run: PE 0 registered from 127.0.0.1:",
                             "coverse-run: all 2 PEs registered after ", "exited with status 0"}) {
        EXPECT_TRUE(contains(job.err(), part)) << part << "\n" << job.dump();
    }
}

}  // namespace
