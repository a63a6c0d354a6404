// coverse-perf through the launcher: every test on 2 PEs (pingpong, bw, rate between PE 0 and
// PE 1) and the collectives on 4 PEs. Fields and values are checked, never timings: CI
// machines are noisy, so a number only has to be there and be positive.
#include <gtest/gtest.h>

#include <set>

#include "perf_test_support.hpp"

namespace {

using namespace coverse::perf_test;

const std::string perf = COVERSE_PERF_PATH;
const std::string launcher = COVERSE_RUN_PATH;

std::vector<json_object> json_lines(const run_result& r) {
    std::vector<json_object> out;
    for (const auto& line : lines_of(r.out)) {
        auto o = parse_flat_object(line);
        EXPECT_TRUE(o) << "not a flat JSON object: " << line;
        if (o) out.push_back(*o);
    }
    return out;
}

// The sizes each test reported, checking the fields every line of it must carry.
std::map<std::string, std::multiset<double>> check_lines(const std::vector<json_object>& lines,
                                                         int pes) {
    std::map<std::string, std::multiset<double>> seen;
    for (const auto& o : lines) {
        const std::string t = text(o, "test");
        EXPECT_EQ(text(o, "impl"), "coverse");
        EXPECT_EQ(number(o, "pes"), pes) << t;
        EXPECT_GT(number(o, "iters"), 0) << t;
        if (t == "pingpong") {
            EXPECT_GT(number(o, "lat_us"), 0);
            EXPECT_GT(number(o, "p50_us"), 0);
        } else if (t == "bw") {
            EXPECT_GT(number(o, "mbps"), 0);
            EXPECT_EQ(number(o, "window"), 64);
        } else if (t == "rate") {
            EXPECT_GT(number(o, "msgs_per_s"), 0);
            EXPECT_EQ(number(o, "window"), 64);
        } else if (t == "bcast" || t == "barrier") {
            EXPECT_GT(number(o, "lat_us"), 0) << t;
        } else {
            ADD_FAILURE() << "unknown test " << t;
        }
        seen[t].insert(t == "barrier" ? 0 : number(o, "bytes"));
    }
    return seen;
}

TEST(perf_two_pes, pingpong_bw_and_rate_report_every_size) {
    const auto r = run({launcher, "-n", "2", perf, "--quick", "--json", "--sizes", "8,65536"});
    ASSERT_EQ(r.status, 0) << r.out << r.err;
    auto seen = check_lines(json_lines(r), 2);
    EXPECT_EQ(seen["pingpong"], (std::multiset<double>{8, 65536}));
    EXPECT_EQ(seen["bw"], (std::multiset<double>{8, 65536}));
    EXPECT_EQ(seen["rate"], (std::multiset<double>{8}));
    // Every test fits 2 PEs, so the default list runs the collectives too.
    EXPECT_EQ(seen["bcast"], (std::multiset<double>{8, 65536}));
    EXPECT_EQ(seen["barrier"].size(), 1u);
    EXPECT_EQ(r.err.find("skipped"), std::string::npos) << r.err;
}

// --api coroutine: each of pingpong, bw and rate twice, the facade's line (impl coverse)
// then the coroutine API's (impl coverse-coro), with the ratio on stderr; 1 MiB bw goes by
// expose/put there. Same host and over TCP.
TEST(perf_two_pes, api_coroutine_reports_both_apis_side_by_side) {
    for (bool tcp : {false, true}) {
        std::vector<std::string> argv{
            launcher,  "-n",    "2",         perf,      "--quick",
            "--json",  "--api", "coroutine", "--tests", "pingpong,bw,rate",
            "--sizes", "8,1M"};
        if (tcp)
            for (const char* a : {"++set", "SHM=off", "++set", "RDMA_PROVIDER=tcp"})
                argv.push_back(a);
        const auto r = run(argv);
        ASSERT_EQ(r.status, 0) << r.out << r.err;
        std::map<std::string, std::multiset<double>> facade, coro;
        for (const auto& o : json_lines(r)) {
            const std::string t = text(o, "test");
            if (t == "pingpong") {
                EXPECT_GT(number(o, "lat_us"), 0);
            }
            if (t == "bw") {
                EXPECT_GT(number(o, "mbps"), 0);
            }
            if (t == "rate") {
                EXPECT_GT(number(o, "msgs_per_s"), 0);
            }
            (text(o, "impl") == "coverse-coro" ? coro : facade)[t].insert(number(o, "bytes"));
        }
        for (auto* m : {&facade, &coro}) {
            EXPECT_EQ((*m)["pingpong"], (std::multiset<double>{8, 1048576})) << tcp;
            EXPECT_EQ((*m)["bw"], (std::multiset<double>{8, 1048576})) << tcp;
            EXPECT_EQ((*m)["rate"], (std::multiset<double>{8})) << tcp;
        }
        EXPECT_NE(r.err.find("coroutine/converse bw 1048576 B"), std::string::npos) << r.err;
    }
}

// --onesided get: the coroutine API's 1 MiB bw goes by expose/get, and says so.
TEST(perf_two_pes, onesided_get_moves_the_coroutine_bandwidth_by_get) {
    const auto r = run({launcher, "-n", "2", perf, "--quick", "--json", "--api", "coroutine",
                        "--tests", "bw", "--sizes", "1M", "--onesided", "get"});
    ASSERT_EQ(r.status, 0) << r.out << r.err;
    std::size_t coro = 0;
    for (const auto& o : json_lines(r))
        if (text(o, "impl") == "coverse-coro") {
            EXPECT_GT(number(o, "mbps"), 0);
            ++coro;
        }
    EXPECT_EQ(coro, 1u) << r.out;
    EXPECT_NE(r.err.find("(expose/get vs rendezvous)"), std::string::npos) << r.err;
}

TEST(perf_four_pes, bcast_and_barrier) {
    const auto r =
        run({launcher, "-n", "4", perf, "--quick", "--json", "--tests", "bcast,barrier"});
    ASSERT_EQ(r.status, 0) << r.out << r.err;
    auto seen = check_lines(json_lines(r), 4);
    EXPECT_EQ(seen.size(), 2u);
    EXPECT_EQ(seen["bcast"], (std::multiset<double>{8}));
    EXPECT_EQ(seen["barrier"].size(), 1u);
}

TEST(perf_two_pes, help_and_bad_arguments_through_the_launcher) {
    const auto help = run({launcher, "-n", "2", perf, "--help"});
    EXPECT_EQ(help.status, 0) << help.err;
    EXPECT_NE(help.out.find("pingpong"), std::string::npos);
    const auto bad = run({launcher, "-n", "2", perf, "--bogus"});
    EXPECT_NE(bad.status, 0);
    EXPECT_NE(bad.err.find("unknown argument"), std::string::npos) << bad.err;
}

}  // namespace
