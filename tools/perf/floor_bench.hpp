// floor_bench.hpp: what the two floor benchmarks share (ring_bench: the shared-memory ring and,
// --bare, one cache line; tcp_line: bare loopback TCP). Both are a ping-pong of whole messages
// between two processes pinned to two CPUs, with the same flags, the same schedule as
// coverse-perf's pingpong, the same JSON line per size and the same wait for the second
// process. Header-only: each tool is one file.
#pragma once

#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "perf_args.h"

namespace floor_bench {

constexpr long header_bytes = 16;  // CmiMsgHeaderSizeBytes
constexpr int max_sizes = 64;

/// The help lines of the flags every floor tool takes after --sizes, and its last ones.
inline constexpr const char* schedule_help =
    "  --iters N      measured round trips per size (default: coverse-perf's schedule,\n"
    "                 10000 up to 4 KiB, then fewer)\n"
    "  --warmup N     unmeasured round trips first (default: a tenth, at least 1)\n"
    "  --cpus A,B     pin the first process to CPU A and the second to B (0,1)\n"
    "  --quick        few round trips (a smoke test, the numbers are rough)\n";
inline constexpr const char* closing_help =
    "  --json         accepted for symmetry with coverse-perf (output is always JSON)\n"
    "  -h, --help     this text\n";

struct options {
    std::vector<long> sizes;
    long iters = 0, warmup = -1;  // 0 and -1: coverse-perf's schedule
    int cpus[2] = {0, 1};
    bool quick = false;
    bool bare = false;  // ring_bench --bare: no ring (tcp_line has no such flag)
};

/// 0: fine, 1: --help, 2: bad argument (the message in `err`). `--bare` is accepted only
/// when `takes_bare` (ring_bench); elsewhere it is an unknown argument.
inline int parse_options(int argc, char** argv, bool takes_bare, options& o, std::string& err) {
    char buf[256] = "";
    for (int i = 1; i < argc; ++i) {
        static const char* const with_value[] = {"--sizes", "--iters", "--warmup", "--cpus",
                                                 nullptr};
        char name[32];
        const char *a = nullptr, *v = nullptr;
        if (perf_next_flag(argc, argv, &i, with_value, name, &a, &v, buf, sizeof buf)) {
            err = buf;
            return 2;
        }
        const std::string flag = a;
        if (flag == "--help" || flag == "-h") return 1;
        if (flag == "--json") continue;
        if (flag == "--quick") {
            o.quick = true;
        } else if (takes_bare && flag == "--bare") {
            o.bare = true;
        } else if (flag == "--sizes") {
            o.sizes.clear();
            std::string list = v;
            for (std::size_t at = 0; at <= list.size();) {
                const std::size_t end = std::min(list.find(',', at), list.size());
                const std::string t = list.substr(at, end - at);
                long n = 0;
                if (static_cast<int>(o.sizes.size()) == max_sizes ||
                    !perf_parse_size(t.c_str(), 1L << 30, &n)) {
                    err = "--sizes: \"" + t + "\" is not a size from 1 B to 1G (or too many sizes)";
                    return 2;
                }
                o.sizes.push_back(n);
                at = end + 1;
            }
        } else if (flag == "--iters" || flag == "--warmup") {
            const long min = flag == "--warmup" ? 0 : 1;
            long n = 0;
            if (!perf_parse_long(v, min, 100000000, &n)) {
                err = flag + ": \"" + v + "\" is not a count from " + std::to_string(min) +
                      " to 100000000";
                return 2;
            }
            (flag == "--iters" ? o.iters : o.warmup) = n;
        } else if (flag == "--cpus") {
            long c0 = 0, c1 = 0;
            const char* comma = std::strchr(v, ',');
            const std::string first = comma ? std::string(v, comma) : std::string();
            if (!comma || !perf_parse_long(first.c_str(), 0, CPU_SETSIZE - 1, &c0) ||
                !perf_parse_long(comma + 1, 0, CPU_SETSIZE - 1, &c1)) {
                err = std::string("--cpus: \"") + v + "\" is not two CPU numbers A,B";
                return 2;
            }
            o.cpus[0] = static_cast<int>(c0);
            o.cpus[1] = static_cast<int>(c1);
        } else {
            err = std::string("unknown argument \"") + argv[i] + "\"";
            return 2;
        }
    }
    if (o.sizes.empty()) o.sizes = {8, 1024, 64 * 1024};
    return 0;
}

/// coverse-perf's pingpong schedule (perf_options.cpp, plan_for): 10000 round trips up to
/// 4 KiB, fewer above (at least 100); --quick: 50 and 5.
inline void plan(long bytes, const options& o, long& warmup, long& iters) {
    const long base = o.quick ? 50 : 10000, floor = o.quick ? 5 : 100;
    long n = bytes <= 4096 ? base : std::clamp(base * 4096 / bytes, floor, base);
    if (o.iters > 0) n = o.iters;
    iters = n;
    warmup = o.warmup >= 0 ? o.warmup : std::max(n / 10, 1L);
}

inline double now_us() {
    return std::chrono::duration<double, std::micro>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

/// The command line into `o`: -1 to go on; else the exit status (0 after --help, printed by
/// `usage` to stdout; 2 for a bad argument, said on stderr with the usage).
inline int command_line(const char* tool, int argc, char** argv, bool takes_bare,
                        void (*usage)(FILE*), options& o) {
    std::string err;
    const int rc = parse_options(argc, argv, takes_bare, o, err);
    if (rc == 1) {
        usage(stdout);
        return 0;
    }
    if (rc != 0) {
        std::fprintf(stderr, "%s: %s\n", tool, err.c_str());
        usage(stderr);
        return 2;
    }
    return -1;
}

/// One size's JSON line, the fields of coverse-perf's pingpong: one-way µs (round trip / 2),
/// the mean and the median of the round trips in `rtt` (sorted here).
inline void print_pingpong(const char* impl, long payload, std::vector<double>& rtt, long iters) {
    double sum = 0;
    for (const double t : rtt)
        sum += t;
    const double mean = sum / static_cast<double>(rtt.size());
    std::sort(rtt.begin(), rtt.end());
    const std::size_t n = rtt.size();
    const double median = n % 2 ? rtt[n / 2] : (rtt[n / 2 - 1] + rtt[n / 2]) / 2;
    std::printf(
        "{\"test\":\"pingpong\",\"impl\":\"%s\",\"bytes\":%ld,\"lat_us\":%.3f,"
        "\"p50_us\":%.3f,\"iters\":%ld,\"pes\":2}\n",
        impl, payload, mean / 2, median / 2, iters);
    std::fflush(stdout);
}

/// For the first process, before it forks the second: that one's exit status must say
/// whether it ended well, and with SIGCHLD ignored (a caller may leave it so) the kernel
/// would reap it unseen.
inline void keep_exit_status() {
    ::signal(SIGCHLD, SIG_DFL);
}

/// Waits, at most `limit_s`, for the second process; 0 when it ended well. One that does not
/// end is killed.
inline int wait_second(const char* tool, pid_t child, int limit_s = 10) {
    int status = 0;
    for (int slice = 0; slice < limit_s * 1000; ++slice) {
        const pid_t w = ::waitpid(child, &status, WNOHANG);
        if (w == child) {
            if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return 0;
            std::fprintf(stderr, "%s: the second process failed\n", tool);
            return 1;
        }
        if (w < 0 && errno != EINTR) {
            std::fprintf(stderr, "%s: waitpid: %s\n", tool, std::strerror(errno));
            return 1;
        }
        ::usleep(1000);
    }
    ::kill(child, SIGKILL);
    while (::waitpid(child, nullptr, 0) < 0 && errno == EINTR) {
    }
    std::fprintf(stderr, "%s: the second process did not exit within %d s; killed it\n", tool,
                 limit_s);
    return 1;
}

/// Pins this process to `cpu`; says so and runs unpinned when it cannot.
inline void pin(const char* tool, int cpu, const char* who) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0)
        std::fprintf(stderr, "%s: could not pin the %s to CPU %d (%s); running unpinned\n", tool,
                     who, cpu, std::strerror(errno));
}

}  // namespace floor_bench
