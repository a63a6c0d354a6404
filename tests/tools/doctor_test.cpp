// Tests of the hang report: coverse-run runs doctor_hang_pe's hangs (a barrier one PE never
// enters, two PEs waiting for each other's reply, a handler that never returns) with
// --report-stuck-after, and a healthy job with SIGQUIT. Each report must name the right
// PEs and waits; a stuck job must then be stopped (status 124) with no PE left behind.
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

const std::string coverse_run = COVERSE_RUN_PATH;
const std::string hang_pe = DOCTOR_HANG_PE_PATH;

std::string slurp(const fs::path& p) {
    std::ifstream in(p);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

/// One coverse-run, its stdout and stderr in files of a scratch directory. The destructor
/// stops the launcher and every PE it started, each by its own PID.
class job {
public:
    explicit job(const std::vector<std::string>& args) {
        char dir[] = "/tmp/coverse-doctor-test-XXXXXX";
        EXPECT_NE(::mkdtemp(dir), nullptr);
        _dir = dir;
        fs::create_directory(_dir / "pids");
        std::vector<std::string> store = {coverse_run};
        store.insert(store.end(), args.begin(), args.end());
        for (auto& a : store)
            if (a.starts_with("@")) a = (_dir / a.substr(1)).string();  // @name: a scratch file
        std::vector<char*> argv;
        for (auto& a : store)
            argv.push_back(a.data());
        argv.push_back(nullptr);
        std::string pid_env = "COVERSE_TEST_PID_DIR=" + (_dir / "pids").string();
        std::string stop_env = "DOCTOR_TEST_STOP=" + (_dir / "stop").string();
        const std::string out = (_dir / "stdout").string(), err = (_dir / "stderr").string();
        _pid = ::fork();
        if (_pid == 0) {
            const int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
            const int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
            ::dup2(o, STDOUT_FILENO);
            ::dup2(e, STDERR_FILENO);
            ::putenv(pid_env.data());
            ::putenv(stop_env.data());
            ::execv(argv[0], argv.data());
            ::_exit(126);
        }
    }
    ~job() {
        if (_status < 0) {
            ::kill(_pid, SIGKILL);
            ::waitpid(_pid, nullptr, 0);
        }
        for (pid_t p : pe_pids())
            if (alive(p)) ::kill(p, SIGKILL);
        std::error_code ignored;
        fs::remove_all(_dir, ignored);
    }
    job(const job&) = delete;
    job& operator=(const job&) = delete;

    /// The launcher's exit status, or -1 if it did not exit within `limit`.
    int wait_exit(std::chrono::milliseconds limit) {
        const auto end = std::chrono::steady_clock::now() + limit;
        while (_status < 0 && std::chrono::steady_clock::now() < end) {
            int st = 0;
            if (::waitpid(_pid, &st, WNOHANG) == _pid)
                _status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
            else
                std::this_thread::sleep_for(10ms);
        }
        return _status;
    }
    /// Waits until `pred(text of scratch file name)` holds; false after `limit`.
    template <class Pred>
    bool wait_file(const std::string& name, Pred pred, std::chrono::milliseconds limit) {
        const auto end = std::chrono::steady_clock::now() + limit;
        while (!pred(file(name))) {
            if (std::chrono::steady_clock::now() >= end) return false;
            std::this_thread::sleep_for(20ms);
        }
        return true;
    }
    std::string file(const std::string& name) const { return slurp(_dir / name); }
    fs::path path(const std::string& name) const { return _dir / name; }
    pid_t pid() const { return _pid; }
    std::vector<pid_t> pe_pids() const {
        std::vector<pid_t> out;
        std::error_code ec;
        for (const auto& f : fs::directory_iterator(_dir / "pids", ec)) {
            std::ifstream in(f.path());
            pid_t p = 0;
            if (in >> p) out.push_back(p);
        }
        return out;
    }
    static bool alive(pid_t p) {
        // A zombie has ended too: only a process that can still run counts.
        std::ifstream stat("/proc/" + std::to_string(p) + "/stat");
        std::string pid, comm, state;
        return stat >> pid >> comm >> state && state != "Z";
    }
    std::string dump() const {
        return "--- stderr ---\n" + file("stderr") + "--- report ---\n" + file("report");
    }

private:
    fs::path _dir;
    pid_t _pid = -1;
    int _status = -1;
};

void expect_no_pe_left(const job& j, std::size_t pes) {
    const auto pids = j.pe_pids();
    EXPECT_EQ(pids.size(), pes) << "every PE wrote its pid before hanging";
    for (pid_t p : pids)
        EXPECT_FALSE(job::alive(p)) << "PE process " << p << " outlived the job";
}

bool contains(const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos;
}

// Its scheduler is busy, so its responder thread answers for it: the handler and how long.
void expect_pe1_named_in_its_endless_handler(const std::string& report) {
    EXPECT_TRUE(
        std::regex_search(report, std::regex("PE 1: 1 PE ends up waiting on it; it is in handler "
                                             "[0-9]+ \\(doctor_spin_forever\\) for [0-9.]+ s")))
        << report;
}

TEST(doctor, a_barrier_one_pe_never_enters_names_that_pe_and_stops_the_job) {
    job j({"-n", "4", "--report-stuck-after", "1s", "--report-to", "@report", "--dot", "@dot",
           hang_pe, "barrier"});
    ASSERT_EQ(j.wait_exit(60s), 124) << j.dump();
    const std::string r = j.file("report");
    EXPECT_TRUE(contains(r, "PE 3: 3 PEs end up waiting on it")) << r;
    EXPECT_TRUE(contains(r, "cycles: none")) << r;
    EXPECT_TRUE(std::regex_search(r, std::regex("barrier epoch [0-9]+: entered by PEs 0-2; "
                                                "not entered by PE 3")))
        << r;
    // PE 0 (the root) waits for its child PE 3; PEs 1 and 2 for the root's release.
    EXPECT_TRUE(std::regex_search(
        r, std::regex("waits for barrier epoch [0-9]+ on PE 3 \\(tree barrier: arrival of a "
                      "child; children arrived: PEs 1, 2\\)")))
        << r;
    EXPECT_TRUE(std::regex_search(r, std::regex("waits for barrier epoch [0-9]+ on PE 0"))) << r;
    const std::string err = j.file("stderr");
    EXPECT_TRUE(contains(err, "the job was stuck")) << err;
    EXPECT_TRUE(contains(err, "the others wait on PE 3")) << err;
    const std::string dot = j.file("dot");
    EXPECT_TRUE(contains(dot, "pe0 -> pe3")) << dot;
    EXPECT_TRUE(contains(dot, "pe1 -> pe0")) << dot;
    expect_no_pe_left(j, 4);
}

TEST(doctor, two_pes_waiting_for_each_others_reply_form_a_cycle) {
    job j({"-n", "2", "--report-stuck-after", "1s", "--json", "--report-to", "@report", hang_pe,
           "reply-cycle"});
    ASSERT_EQ(j.wait_exit(60s), 124) << j.dump();
    const std::string r = j.file("report");
    EXPECT_TRUE(contains(r, "\"cycles\":[[0,1]]")) << r;
    EXPECT_TRUE(contains(r, "\"text\":\"PE 0 waits for a reply from PE 1\"")) << r;
    EXPECT_TRUE(contains(r, "\"text\":\"PE 1 waits for a reply from PE 0\"")) << r;
    EXPECT_TRUE(contains(j.file("stderr"), "the wait-for graph has a cycle")) << j.dump();
    expect_no_pe_left(j, 2);
}

TEST(doctor, a_pe_in_an_endless_handler_still_answers_and_is_named) {
    job j({"-n", "2", "--report-stuck-after", "1s", "--report-to", "@report", hang_pe,
           "endless-handler"});
    ASSERT_EQ(j.wait_exit(60s), 124) << j.dump();
    const std::string r = j.file("report");
    expect_pe1_named_in_its_endless_handler(r);
    EXPECT_TRUE(contains(r, "its scheduler did not take the state request")) << r;
    EXPECT_TRUE(contains(r, "waits for a reply from PE 1 (the answer to its request)")) << r;
    EXPECT_TRUE(contains(r, "cycles: none")) << r;
    expect_no_pe_left(j, 2);
}

TEST(doctor, a_rendezvous_the_receiver_never_fetches_waits_for_its_get_done) {
    job j({"-n", "2", "--report-stuck-after", "1s", "--report-to", "@report", hang_pe,
           "rndv-unfetched"});
    ASSERT_EQ(j.wait_exit(60s), 124) << j.dump();
    const std::string r = j.file("report");
    EXPECT_TRUE(
        std::regex_search(r, std::regex("waits for get-done from PE 1 \\(handle [0-9]+\\)")))
        << r;
    EXPECT_TRUE(contains(r, "rndv/get 1")) << r;
    expect_pe1_named_in_its_endless_handler(r);
    expect_no_pe_left(j, 2);
}

TEST(doctor, sigquit_reports_a_healthy_job_with_no_cycle_and_lets_it_go_on) {
    job j({"-n", "2", "--report-to", "@report", hang_pe, "healthy"});
    // Both PEs past their start-up barrier, a collective of messages: caught in it, each
    // waits for the other's message (a passing cycle; under CONNECT=lazy its first messages
    // also wait for the pair's connection).
    const auto end = std::chrono::steady_clock::now() + 30s;
    auto past = [&] {
        return fs::exists(j.path("past_barrier_pe0")) && fs::exists(j.path("past_barrier_pe1"));
    };
    while (!past() && std::chrono::steady_clock::now() < end)
        std::this_thread::sleep_for(20ms);
    ASSERT_TRUE(past()) << j.dump();
    ASSERT_EQ(j.pe_pids().size(), 2u) << j.dump();
    ASSERT_EQ(::kill(j.pid(), SIGQUIT), 0);
    ASSERT_TRUE(j.wait_file(
        "report", [](const std::string& t) { return contains(t, "PE 1 (pid"); }, 30s))
        << j.dump();
    const std::string r = j.file("report");
    EXPECT_TRUE(contains(r, "SIGQUIT")) << r;
    EXPECT_TRUE(contains(r, "cycles: none")) << r;
    // A healthy job may be caught in a passing wait (a message in flight): only a cycle
    // would be a hang.
    EXPECT_FALSE(contains(r, "no answer")) << r;
    std::ofstream(j.path("stop")) << "stop\n";
    EXPECT_EQ(j.wait_exit(60s), 0) << "the job went on after the report\n" << j.dump();
    expect_no_pe_left(j, 2);
}

// The stuck clock ran from the launcher's start, so a PE still in exec or ASan's start-up
// after --report-stuck-after (seen in CI: a 4-PE ASan job at load, every PE "up 0.0 s,
// progress 0") was reported as a hang and the job stopped.
TEST(doctor, a_pe_that_starts_late_is_not_reported_as_stuck) {
    job j(
        {"-n", "3", "--report-stuck-after", "1s", "--report-to", "@report", hang_pe, "slow-start"});
    EXPECT_EQ(j.wait_exit(60s), 0) << j.dump();
    EXPECT_FALSE(contains(j.file("stderr"), "stuck")) << j.dump();
    EXPECT_EQ(j.file("report"), "") << j.dump();
    expect_no_pe_left(j, 3);
}

// The responder thread takes a file table of its own (api/src/doctor.cpp, keep_only): a
// shared one costs the PE thread a file reference per socket call. Its copy must not keep
// the PE's sockets open, or a peer would not see a connection the PE closes end.
TEST(doctor, the_responder_keeps_only_its_own_descriptors) {
    // What keep_only needs, asked on a thread of this process (the table it unshares is
    // that thread's own): without it the responder's table stays shared, as documented.
    int refused = 0;
    std::thread([&refused] {
        if (::close_range(~0U, ~0U, 0) != 0)
            refused = errno;
        else if (::unshare(CLONE_FILES) != 0)
            refused = errno;
    }).join();
    if (refused != 0)
        GTEST_SKIP() << "close_range or unshare(CLONE_FILES) is refused here ("
                     << std::strerror(refused) << "): the responder keeps the shared table";
    job j({"-n", "2", hang_pe, "responder-files"});
    EXPECT_EQ(j.wait_exit(60s), 0) << j.dump();
    expect_no_pe_left(j, 2);
}

TEST(doctor, a_bad_duration_is_a_usage_error_naming_the_flag) {
    job j({"--report-stuck-after", "abc", hang_pe, "healthy"});
    EXPECT_EQ(j.wait_exit(30s), 2);
    const std::string err = j.file("stderr");
    EXPECT_TRUE(contains(err, "--report-stuck-after needs a duration")) << err;
    EXPECT_TRUE(contains(err, "'abc'")) << err;
}

TEST(doctor, help_documents_the_report_flags) {
    job j({"--help"});
    EXPECT_EQ(j.wait_exit(30s), 0);
    const std::string out = j.file("stdout");
    for (const char* flag : {"--report-stuck-after", "--json", "--report-to", "--dot", "SIGQUIT"})
        EXPECT_TRUE(contains(out, flag)) << flag << "\n" << out;
}

}  // namespace
