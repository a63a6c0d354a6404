// coverse-trace's command line: --help everywhere, usage errors exit 2, a DIR with nothing
// to read exits 3, damaged files are named with their byte offset and the rest is still
// reported (exit 4), and `coverse-trace DIR` is the summary.
#include "trace_test_support.hpp"

namespace coverse::test {
namespace {

using trace_tool::exit_damaged;
using trace_tool::exit_no_input;
using trace_tool::exit_usage;

class trace_cli_test : public trace_dir_test {
protected:
    void two_pes() { pingpong(dir, 3, trace::protocol::eager_long); }
};

TEST_F(trace_cli_test, help_for_the_tool_and_each_command) {
    for (const auto& args : std::vector<std::vector<std::string>>{{"--help"}, {"-h"}, {"help"}}) {
        const auto r = cli(args);
        EXPECT_EQ(r.status, 0);
        EXPECT_NE(r.out.find("usage: coverse-trace"), std::string::npos);
        EXPECT_NE(r.out.find("exit status"), std::string::npos);
    }
    for (const std::string cmd : {"summary", "export", "leaks", "stalls", "info"}) {
        for (const auto& args : std::vector<std::vector<std::string>>{
                 {cmd, "--help"}, {cmd, "some-dir", "-h"}, {"help", cmd}}) {
            const auto r = cli(args);
            EXPECT_EQ(r.status, 0) << cmd;
            EXPECT_NE(r.out.find("usage: coverse-trace " + cmd), std::string::npos) << r.out;
            EXPECT_TRUE(r.err.empty());
        }
    }
}

TEST_F(trace_cli_test, bad_arguments_are_usage_errors) {
    const std::vector<std::vector<std::string>> bad = {
        {},
        {"--bogus"},
        {"export"},
        {"export", "a", "b"},
        {"export", "a", "-o"},
        {"summary", "a", "--over", "10ms"},  // --over belongs to stalls
        {"stalls", "a", "--over", "10"},     // no unit
        {"stalls", "a", "--over", "fast"},
        {"stalls", "a", "--over"},
        {"leaks", "-x", "a"},
        {"help", "frobnicate"},
    };
    for (const auto& args : bad) {
        const auto r = cli(args);
        std::string joined;
        for (const auto& a : args)
            joined += a + " ";
        EXPECT_EQ(r.status, exit_usage) << joined;
        EXPECT_NE(r.err.find("usage: coverse-trace"), std::string::npos) << joined << r.err;
        EXPECT_TRUE(r.out.empty()) << joined;
    }
    EXPECT_NE(cli({"stalls", "a", "--over", "10"}).err.find("ns, us, ms or s"), std::string::npos);
}

TEST_F(trace_cli_test, a_dir_without_trace_files_is_a_clear_error) {
    std::ofstream(dir / "unrelated.txt") << "x";
    auto r = cli({"summary", dir.string()});
    EXPECT_EQ(r.status, exit_no_input);
    EXPECT_NE(r.err.find("no trace files (coverse-trace.<pe>.bin) in " + dir.string()),
              std::string::npos)
        << r.err;
    r = cli({"leaks", (dir / "missing").string()});
    EXPECT_EQ(r.status, exit_no_input);
    EXPECT_NE(r.err.find("does not exist"), std::string::npos) << r.err;
    r = cli({(dir / "unrelated.txt").string()});
    EXPECT_EQ(r.status, exit_no_input);
    EXPECT_NE(r.err.find("not a directory"), std::string::npos) << r.err;
}

TEST_F(trace_cli_test, the_bare_dir_is_the_summary) {
    two_pes();
    const auto a = cli({dir.string()});
    const auto b = cli({"summary", dir.string()});
    EXPECT_EQ(a.status, 0);
    EXPECT_EQ(a.out, b.out);
    EXPECT_NE(a.out.find("2 PEs"), std::string::npos) << a.out;
    EXPECT_NE(a.out.find("eager long"), std::string::npos) << a.out;
    EXPECT_NE(a.out.find("flows: 6 send/receive pairs matched"), std::string::npos) << a.out;
}

TEST_F(trace_cli_test, info_shows_each_pes_header_and_settings) {
    two_pes();
    const auto r = cli({"info", dir.string()});
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("PE 1: " + (dir / "coverse-trace.1.bin").string()), std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("backend io_uring, provider none, 2 PEs"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("    COVERSE_TEST=1"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("trace closed"), std::string::npos) << r.out;
}

TEST_F(trace_cli_test, a_corrupt_file_is_named_with_its_offset_and_the_rest_is_reported) {
    two_pes();
    {
        std::fstream f(dir / "coverse-trace.1.bin",
                       std::ios::in | std::ios::out | std::ios::binary);
        f.write("XXXX", 4);  // break the magic
    }
    auto r = cli({"summary", dir.string()});
    EXPECT_EQ(r.status, exit_damaged);
    EXPECT_NE(
        r.err.find((dir / "coverse-trace.1.bin").string() + " at byte 0: not a coverse trace"),
        std::string::npos)
        << r.err;
    EXPECT_NE(r.out.find("1 PE,"), std::string::npos) << "PE 0 is still summarised:\n" << r.out;
    // Leaks found in what could be read still decide the status.
    r = cli({"export", dir.string(), "-o", (dir / "t.json").string()});
    EXPECT_EQ(r.status, exit_damaged);
    EXPECT_TRUE(fs::exists(dir / "t.json"));
}

TEST_F(trace_cli_test, a_truncated_file_is_named_with_its_offset_and_its_events_are_used) {
    two_pes();
    const auto path = dir / "coverse-trace.0.bin";
    const auto header = trace::read_file(path.string()).header.header_size;
    // Cut after the 6 start-up phase events and its first send's allocation and completion.
    fs::resize_file(path, header + 8 * sizeof(trace::event) + 11);
    auto r = cli({"summary", dir.string()});
    EXPECT_EQ(r.status, exit_damaged);
    EXPECT_NE(r.err.find(path.string() + " at byte " + std::to_string(header + 8 * 40) +
                         ": file ends inside an event (11 of 40 bytes); the 8 events before it "
                         "are used"),
              std::string::npos)
        << r.err;
    EXPECT_NE(r.out.find("2 PEs"), std::string::npos) << r.out;
    // PE 0's first send looks unreleased, but its file was cut: not a certain leak.
    r = cli({"leaks", dir.string()});
    EXPECT_EQ(r.status, exit_damaged) << r.out;
    EXPECT_NE(r.out.find("uncertain"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("holds less than was recorded"), std::string::npos) << r.out;
}

TEST_F(trace_cli_test, export_to_stdout_or_an_unwritable_file) {
    two_pes();
    auto r = cli({"export", dir.string()});
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.out.rfind("{\"displayTimeUnit\":\"ns\",\"traceEvents\":[", 0), 0u);
    EXPECT_NO_THROW(json_parser(r.out).parse());
    r = cli({"export", "--output=-", dir.string()});
    EXPECT_EQ(r.status, 0);
    EXPECT_FALSE(r.out.empty());
    r = cli({"export", dir.string(), "-o", (dir / "no-such-dir" / "t.json").string()});
    EXPECT_EQ(r.status, exit_no_input);
    EXPECT_NE(r.err.find("cannot write"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace coverse::test
