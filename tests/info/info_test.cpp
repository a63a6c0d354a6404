// coverse-info end to end: runs the built tool with an environment made from scratch and checks
// what it prints — every source of a setting in -c, warnings for unknown variables, --json
// that parses, and the exit statuses of a good, a malformed and a bad command line.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <boost/property_tree/json_parser.hpp>
#include <boost/property_tree/ptree.hpp>

namespace {

struct run_result {
    int status = -1;  // exit status, or -1 when it did not exit normally
    std::string out, err;
};

std::string slurp(const std::string& path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// Runs coverse-info with exactly `env` (plus the sanitizer options the test itself got, so an
// ASan build reports the same way) and captures both streams.
run_result run_info(std::vector<std::string> args, std::vector<std::string> env) {
    for (const char* keep : {"ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS"})
        if (const char* v = std::getenv(keep)) env.push_back(std::string(keep) + "=" + v);
    args.insert(args.begin(), COVERSE_INFO_PATH);
    std::vector<char*> argv, envp;
    for (std::string& a : args)
        argv.push_back(a.data());
    argv.push_back(nullptr);
    for (std::string& e : env)
        envp.push_back(e.data());
    envp.push_back(nullptr);

    char out_path[] = "/tmp/coverse-info-out.XXXXXX";
    char err_path[] = "/tmp/coverse-info-err.XXXXXX";
    const int out_fd = ::mkstemp(out_path);
    const int err_fd = ::mkstemp(err_path);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, out_fd, STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&actions, err_fd, STDERR_FILENO);
    pid_t pid = 0;
    run_result r;
    const int rc =
        ::posix_spawn(&pid, COVERSE_INFO_PATH, &actions, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    if (rc == 0) {
        int status = 0;
        ::waitpid(pid, &status, 0);
        r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    } else {
        ADD_FAILURE() << "cannot start " << COVERSE_INFO_PATH;
    }
    ::close(out_fd);
    ::close(err_fd);
    r.out = slurp(out_path);
    r.err = slurp(err_path);
    ::unlink(out_path);
    ::unlink(err_path);
    return r;
}

// The words of the -c table row of `name` (its name, value, type, from, ...); empty if absent.
std::vector<std::string> row(const std::string& out, const std::string& name) {
    std::istringstream lines(out);
    for (std::string line; std::getline(lines, line);) {
        if (line.rfind(name + " ", 0) != 0) continue;
        std::istringstream words(line);
        std::vector<std::string> out_words;
        for (std::string w; words >> w;)
            out_words.push_back(w);
        return out_words;
    }
    return {};
}

bool has(const std::string& text, const std::string& fragment) {
    return text.find(fragment) != std::string::npos;
}

TEST(coverse_info, config_shows_defaults) {
    const run_result r = run_info({"-c"}, {});
    ASSERT_EQ(r.status, 0) << r.err;
    const auto words = row(r.out, "MAXIMUM_HANDLES");
    ASSERT_GE(words.size(), 4u) << r.out;
    EXPECT_EQ(words[1], "10000");
    EXPECT_EQ(words[2], "count");
    EXPECT_EQ(words[3], "default");
    EXPECT_TRUE(has(r.out, "live send/receive handles per PE")) << "the meaning is shown";
    EXPECT_FALSE(has(r.out, "warnings:")) << r.out;
    // Every registered setting has a row, DESIGN.md's and the ones the code reads.
    for (const char* name :
         {"SMALL_MESSAGE_BOUNDARY", "EAGER_LONG_BUFFER_SIZE", "MEMORY_POOL", "CONNECTION_TIMEOUT",
          "BROADCAST_TREE", "TRACE", "NET_BACKEND", "SPIN_US", "RECV_MULTISHOT"})
        EXPECT_FALSE(row(r.out, name).empty()) << name;
}

TEST(coverse_info, config_shows_the_environment_variable_that_set_a_value) {
    const run_result r = run_info({"-c"}, {"CMI_VMI_MAXIMUM_HANDLES=5"});
    ASSERT_EQ(r.status, 0) << r.err;
    const auto words = row(r.out, "MAXIMUM_HANDLES");
    ASSERT_GE(words.size(), 5u) << r.out;
    EXPECT_EQ(words[1], "5");
    EXPECT_EQ(words[3], "environment");
    EXPECT_EQ(words[4], "(CMI_VMI_MAXIMUM_HANDLES)");
}

TEST(coverse_info, command_line_overrides_every_environment_spelling) {
    const run_result r = run_info({"-c", "++set", "MAXIMUM_HANDLES=9"},
                                  {"CMI_VMI_MAXIMUM_HANDLES=5", "COVERSE_MAXIMUM_HANDLES=7"});
    ASSERT_EQ(r.status, 0) << r.err;
    const auto words = row(r.out, "MAXIMUM_HANDLES");
    ASSERT_GE(words.size(), 6u) << r.out;
    EXPECT_EQ(words[1], "9");
    EXPECT_EQ(words[3], "command");
    EXPECT_TRUE(has(r.out, "command line (++set MAXIMUM_HANDLES)")) << r.out;
    // The spellings it beat are reported as ignored.
    EXPECT_TRUE(has(r.out, "CMI_VMI_MAXIMUM_HANDLES=5 is ignored")) << r.out;
    EXPECT_TRUE(has(r.out, "COVERSE_MAXIMUM_HANDLES=7 is ignored")) << r.out;
}

TEST(coverse_info, unknown_variables_warn) {
    const run_result r =
        run_info({"-c"}, {"COVERSE_BOGUS=1", "COVERSE_MAX_HANDLES=3", "MAXIMUM_HANDLES=4"});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_TRUE(has(r.out, "warnings:")) << r.out;
    EXPECT_TRUE(has(r.out, "COVERSE_BOGUS is set but coverse has no setting BOGUS")) << r.out;
    EXPECT_TRUE(has(r.out, "did you mean COVERSE_MAXIMUM_HANDLES?")) << r.out;
    EXPECT_EQ(row(r.out, "MAXIMUM_HANDLES")[1], "10000") << "a bare name is not a setting";
}

TEST(coverse_info, a_malformed_value_is_reported_and_exits_1) {
    const run_result r = run_info({"-c"}, {"COVERSE_MAXIMUM_HANDLES=lots"});
    EXPECT_EQ(r.status, 1) << r.err;
    EXPECT_TRUE(has(r.out, "COVERSE_MAXIMUM_HANDLES='lots' is not a valid MAXIMUM_HANDLES"))
        << r.out;
}

TEST(coverse_info, json_parses_and_carries_the_same_facts) {
    const run_result r = run_info({"--json", "++set=EAGER_PROTOCOL=on"},
                                  {"CMI_VMI_MAXIMUM_HANDLES=5", "COVERSE_BOGUS=1"});
    ASSERT_EQ(r.status, 0) << r.err;
    boost::property_tree::ptree doc;
    std::istringstream in(r.out);
    try {
        boost::property_tree::read_json(in, doc);
    } catch (const std::exception& e) {
        FAIL() << "not JSON: " << e.what() << "\n" << r.out;
    }
    EXPECT_EQ(doc.get<std::string>("settings.MAXIMUM_HANDLES.value"), "5");
    EXPECT_EQ(doc.get<std::string>("settings.MAXIMUM_HANDLES.source"), "environment");
    EXPECT_EQ(doc.get<std::string>("settings.MAXIMUM_HANDLES.variable"), "CMI_VMI_MAXIMUM_HANDLES");
    EXPECT_EQ(doc.get<std::string>("settings.MAXIMUM_HANDLES.default"), "10000");
    EXPECT_EQ(doc.get<std::string>("settings.EAGER_PROTOCOL.source"), "command line");
    EXPECT_EQ(doc.get<std::string>("settings.CONNECTION_TIMEOUT.source"), "default");
    EXPECT_FALSE(doc.get<std::string>("version").empty());
    EXPECT_TRUE(doc.get_child_optional("io_uring.available"));
    EXPECT_TRUE(doc.get_child_optional("net.why"));
    EXPECT_TRUE(doc.get_child_optional("rdma.devices"));
    EXPECT_GE(doc.get<int>("cores.online"), 1);
    bool warned = false;
    for (const auto& w : doc.get_child("warnings"))
        warned |= has(w.second.get_value<std::string>(), "COVERSE_BOGUS");
    EXPECT_TRUE(warned) << r.out;
}

TEST(coverse_info, overview_names_every_part) {
    const run_result r = run_info({}, {});
    ASSERT_EQ(r.status, 0) << r.err;
    for (const char* part : {"coverse ", "io_uring ", "net ", "RDMA devices ", "cores "})
        EXPECT_TRUE(has(r.out, std::string("\n") + part) || r.out.rfind(part, 0) == 0)
            << part << "\n"
            << r.out;
}

// The line of the overview that starts with `prefix` after the first column's padding.
std::string line_of(const std::string& out, const std::string& prefix) {
    std::istringstream lines(out);
    for (std::string line; std::getline(lines, line);) {
        const auto at = line.find_first_not_of(' ');
        if (at != std::string::npos && line.compare(at, prefix.size(), prefix) == 0) return line;
    }
    return {};
}

TEST(coverse_info, overview_prints_the_protocol_table_for_each_kind_of_peer) {
    const run_result r = run_info({}, {});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_TRUE(has(line_of(r.out, "protocols "), "RDMA_PROVIDER=auto")) << r.out;
    const std::string same = line_of(r.out, "same host:");
    EXPECT_TRUE(has(same, "stream/inline/shm 0..2048 B")) << r.out;
    EXPECT_TRUE(has(same, "stream/buffered/shm 2049..16384 B")) << r.out;
    EXPECT_TRUE(has(same, "rndv/get/cma 16385..262143 B")) << r.out;
    EXPECT_TRUE(has(same, "rndv/get+put/cma 262144 B..")) << "from RNDV_SPLIT\n" << r.out;
    EXPECT_TRUE(has(line_of(r.out, "other host, no verbs:"), "rndv/get/tcp 16385 B..")) << r.out;
    // The verbs row is there exactly when the verbs provider can serve on this machine.
    const std::string verbs = line_of(r.out, "verbs ");
    ASSERT_FALSE(verbs.empty()) << r.out;
    const bool usable = has(verbs, "verbs         usable: ");
    EXPECT_TRUE(usable || has(verbs, "verbs         not usable: ")) << verbs;
    EXPECT_EQ(has(line_of(r.out, "other host, verbs:"), "rndv/get/verbs 16385 B.."), usable)
        << r.out;
}

TEST(coverse_info, protocol_boundaries_come_from_the_settings) {
    const run_result r = run_info({"++set", "SMALL_MESSAGE_BOUNDARY=1024", "++set", "RNDV_SPLIT=0"},
                                  {"COVERSE_MEDIUM_MESSAGE_BOUNDARY=8192"});
    ASSERT_EQ(r.status, 0) << r.err;
    const std::string same = line_of(r.out, "same host:");
    EXPECT_TRUE(has(same, "stream/inline/shm 0..1024 B")) << r.out;
    EXPECT_TRUE(has(same, "stream/buffered/shm 1025..8192 B")) << r.out;
    EXPECT_TRUE(has(same, "rndv/get/cma 8193 B..")) << "RNDV_SPLIT=0: no split\n" << r.out;
    EXPECT_TRUE(has(line_of(r.out, "other host, no verbs:"), "rndv/get/tcp 8193 B..")) << r.out;
}

// The eager short channel is a row of its own beside each table, named by how its slots are
// written: shared memory on this host, frames over a connection (put where EAGER_REMOTE says,
// or verbs), and gone with EAGER_PROTOCOL=off.
TEST(coverse_info, the_eager_channel_is_printed_beside_each_table) {
    const run_result r = run_info({"++set", "EAGER_SHORT_SLOTS=4"}, {});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_TRUE(
        has(line_of(r.out, "same host:"), "; eager/short/shm 513..16384 B once busy (4 slots;"))
        << r.out;
    EXPECT_TRUE(has(line_of(r.out, "other host, no verbs:"), "; eager/short/frames/tcp 0..16384 B"))
        << r.out;
    const run_result put = run_info({"++set", "EAGER_REMOTE=put"}, {});
    ASSERT_EQ(put.status, 0) << put.err;
    EXPECT_TRUE(has(line_of(put.out, "other host, no verbs:"), "; eager/short/put/tcp 0..16384 B"))
        << put.out;
    const run_result off = run_info({"++set", "EAGER_PROTOCOL=off"}, {});
    ASSERT_EQ(off.status, 0) << off.err;
    EXPECT_FALSE(has(off.out, "eager/short")) << off.out;
}

TEST(coverse_info, a_forced_provider_says_where_it_was_forced) {
    const run_result r = run_info({"++set", "RDMA_PROVIDER=tcp", "++set", "SHM=off"}, {});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_TRUE(has(line_of(r.out, "protocols "),
                    "RDMA_PROVIDER=tcp (command line (++set RDMA_PROVIDER)): every peer uses it"))
        << r.out;
    // SHM=off: the same-host stream goes over the connection too.
    EXPECT_TRUE(has(line_of(r.out, "same host:"), "stream/inline/tcp 0..2048 B")) << r.out;
    EXPECT_TRUE(has(line_of(r.out, "same host:"), "rndv/get/tcp 16385 B..")) << r.out;

    const run_result cma = run_info({}, {"COVERSE_RDMA_PROVIDER=cma"});
    ASSERT_EQ(cma.status, 0) << cma.err;
    EXPECT_TRUE(has(line_of(cma.out, "other host:"), "same-host peers only")) << cma.out;
}

TEST(coverse_info, json_carries_the_verbs_provider_and_the_protocols) {
    const run_result r = run_info({"--json"}, {});
    ASSERT_EQ(r.status, 0) << r.err;
    boost::property_tree::ptree doc;
    std::istringstream in(r.out);
    boost::property_tree::read_json(in, doc);
    const bool usable = doc.get<bool>("rdma.verbs.usable");
    EXPECT_EQ(doc.get<std::string>("rdma.verbs.why").empty(), usable) << "why, when it is not";
    EXPECT_TRUE(has(doc.get<std::string>("rdma.provider"), "RDMA_PROVIDER=auto"));
    std::vector<std::string> peers;
    for (const auto& row : doc.get_child("rdma.protocols"))
        peers.push_back(row.second.get<std::string>("peer"));
    ASSERT_GE(peers.size(), 2u) << r.out;
    EXPECT_EQ(peers.front(), "same host");
    EXPECT_EQ(peers.back(), "other host, no verbs");
    EXPECT_EQ(peers.size(), usable ? 3u : 2u) << r.out;
    EXPECT_TRUE(doc.get_child_optional("rdma.ports"));
}

TEST(coverse_info, overview_says_why_asio_when_asked_for) {
    const run_result r = run_info({"++set", "NET_BACKEND=asio"}, {});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_TRUE(has(r.out, "net backend: asio")) << r.out;
    EXPECT_TRUE(has(r.out, "asked for by ++set NET_BACKEND=asio")) << r.out;
}

TEST(coverse_info, a_bad_flag_prints_usage_on_stderr_and_exits_2) {
    const run_result r = run_info({"--bogus"}, {});
    EXPECT_EQ(r.status, 2);
    EXPECT_TRUE(has(r.err, "unknown argument '--bogus'")) << r.err;
    EXPECT_TRUE(has(r.err, "usage: coverse-info")) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
}

TEST(coverse_info, an_unknown_set_exits_2_naming_it) {
    const run_result r = run_info({"++set", "MAXIMUM_HANDLE=5"}, {});
    EXPECT_EQ(r.status, 2);
    EXPECT_TRUE(has(r.err, "MAXIMUM_HANDLE")) << r.err;
    EXPECT_TRUE(has(r.err, "coverse-info -c")) << r.err;
}

// docs/settings.md is the users' list: a setting added to the registry must appear there.
TEST(coverse_info, the_settings_page_names_every_setting) {
    const std::string page = slurp(COVERSE_SETTINGS_DOC);
    ASSERT_FALSE(page.empty()) << "cannot read " << COVERSE_SETTINGS_DOC;
    const run_result r = run_info({"--json"}, {});
    ASSERT_EQ(r.status, 0) << r.err;
    boost::property_tree::ptree doc;
    std::istringstream in(r.out);
    boost::property_tree::read_json(in, doc);
    std::size_t settings = 0;
    for (const auto& [name, entry] : doc.get_child("settings")) {
        ++settings;
        EXPECT_TRUE(has(page, "| `" + name + "` |")) << name << " has no row in docs/settings.md";
    }
    EXPECT_GT(settings, 30u);
}

TEST(coverse_info, help_goes_to_stdout_and_exits_0) {
    const run_result r = run_info({"--help"}, {});
    EXPECT_EQ(r.status, 0);
    EXPECT_TRUE(has(r.out, "usage: coverse-info")) << r.out;
}

}  // namespace
