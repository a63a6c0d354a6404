// coverse-perf on one PE, no launcher: its command line (--help, bad arguments exit 2) and
// the tests that fit one PE (bcast, barrier), their JSON lines checked field by field.
#include <gtest/gtest.h>

#include "perf_test_support.hpp"

namespace {

using namespace coverse::perf_test;

const std::string perf = COVERSE_PERF_PATH;

// Every stdout line as a JSON object; a line that is not one fails the test.
std::vector<json_object> json_lines(const run_result& r) {
    std::vector<json_object> out;
    for (const auto& line : lines_of(r.out)) {
        auto o = parse_flat_object(line);
        EXPECT_TRUE(o) << "not a flat JSON object: " << line;
        if (o) out.push_back(*o);
    }
    return out;
}

TEST(perf_cli, help_exits_0_and_names_every_test) {
    for (const char* flag : {"--help", "-h"}) {
        const auto r = run({perf, flag});
        EXPECT_EQ(r.status, 0) << flag << "\n" << r.err;
        for (const char* test : {"pingpong", "bw", "rate", "bcast", "barrier"})
            EXPECT_NE(r.out.find(test), std::string::npos) << flag << " does not mention " << test;
        for (const char* option :
             {"--tests", "--sizes", "--iters", "--quick", "--json", "--api", "--onesided"})
            EXPECT_NE(r.out.find(option), std::string::npos) << option;
    }
}

TEST(perf_cli, bad_arguments_print_usage_on_stderr_and_exit_2) {
    const std::vector<std::vector<std::string>> bad = {
        {"--bogus"},      {"extra"},        {"--tests", "pingpong,nope"}, {"--sizes", "8,x"},
        {"--sizes", "0"}, {"--iters", "0"}, {"--iters", "ten"},           {"--window", "-1"},
        {"--window"},     {"--json=yes"},   {"--warmup", "-2"},           {"--api", "mpi"},
        {"--api"},        {"--onesided"},   {"--onesided", "both"},
    };
    for (const auto& args : bad) {
        std::vector<std::string> argv{perf};
        argv.insert(argv.end(), args.begin(), args.end());
        const auto r = run(argv);
        std::string shown;
        for (const auto& a : args)
            shown += a + " ";
        EXPECT_EQ(r.status, 2) << shown;
        EXPECT_NE(r.err.find("Usage:"), std::string::npos) << shown << "\n" << r.err;
        EXPECT_EQ(r.out, "") << shown;
    }
}

TEST(perf_one_pe, quick_json_runs_bcast_and_barrier) {
    const auto r = run({perf, "--quick", "--json"});
    ASSERT_EQ(r.status, 0) << r.err;
    const auto lines = json_lines(r);
    bool barrier = false, bcast = false;
    for (const auto& o : lines) {
        EXPECT_EQ(text(o, "impl"), "coverse");
        EXPECT_EQ(number(o, "pes"), 1);
        EXPECT_GT(number(o, "iters"), 0);
        const double lat = number(o, "lat_us");
        EXPECT_TRUE(lat >= 0) << "lat_us missing or negative";  // ~0 on one PE
        const std::string t = text(o, "test");
        if (t == "barrier") {
            barrier = true;
            EXPECT_EQ(o.count("bytes"), 0u) << "a barrier carries no payload";
        } else if (t == "bcast") {
            bcast = true;
            EXPECT_EQ(number(o, "bytes"), 8);
        } else {
            ADD_FAILURE() << "test " << t << " should be skipped on one PE";
        }
    }
    EXPECT_TRUE(barrier);
    EXPECT_TRUE(bcast);
    // The 2-PE tests are skipped with a note on stderr, keeping stdout pure JSON.
    for (const char* t : {"pingpong", "bw", "rate"})
        EXPECT_NE(r.err.find(std::string(t) + ": skipped"), std::string::npos) << r.err;
}

TEST(perf_one_pe, two_pe_tests_asked_for_are_skipped_not_failed) {
    const auto r = run({perf, "--quick", "--json", "--tests", "pingpong,bw,rate"});
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.out, "");
    EXPECT_NE(r.err.find("needs 2 PEs"), std::string::npos) << r.err;
}

TEST(perf_one_pe, sizes_and_iters_shape_the_runs) {
    const auto r = run(
        {perf, "--json", "--tests", "bcast", "--sizes", "8,1K", "--iters", "7", "--warmup", "0"});
    ASSERT_EQ(r.status, 0) << r.err;
    const auto lines = json_lines(r);
    ASSERT_EQ(lines.size(), 2u) << r.out;
    EXPECT_EQ(number(lines[0], "bytes"), 8);
    EXPECT_EQ(number(lines[1], "bytes"), 1024);
    for (const auto& o : lines) {
        EXPECT_EQ(text(o, "test"), "bcast");
        EXPECT_EQ(number(o, "iters"), 7);
    }
}

TEST(perf_one_pe, table_is_the_default_output) {
    const auto r = run({perf, "--quick"});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("p50 µs"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("barrier"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("pingpong: skipped"), std::string::npos) << r.out;
    for (const auto& line : lines_of(r.out))
        EXPECT_NE(line.front(), '{') << "JSON in table output: " << line;
}

}  // namespace
