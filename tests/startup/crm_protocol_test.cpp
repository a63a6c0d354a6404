// Tests of coverse-crm at the protocol level: fake registrants on loopback talk to the real
// coverse-crm (started here on a free port, stopped by its PID) and check the numbering by
// node context, the cluster map, conflicts, timeouts, many jobs at once, registrants that die
// or send garbage, and a key that is used twice. Real programs under the CRM:
// crm_check.sh. The PE's side (crm_request_from) is tested at the end.
#include <coverse/net/startup.hpp>
#include <coverse/net/wire.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <coverse/net/frame_reader.hpp>
#include <coverse/runtime/settings.hpp>

namespace coverse::net {
namespace {

using namespace std::chrono_literals;

bool contains(const std::string& text, std::string_view part) {
    return text.find(part) != std::string::npos;
}

/// The real coverse-crm on a free loopback port, stopped (SIGTERM, then reaped) at the end.
class crm_process {
public:
    explicit crm_process(const std::string& timeout = "30") {
        char tmpl[] = "/tmp/coverse-crm-test.XXXXXX";
        _dir = ::mkdtemp(tmpl);
        const std::string port_file = _dir + "/port";
        _pid = ::fork();
        if (_pid == 0) {
            const std::string log = _dir + "/crm.log";
            std::freopen(log.c_str(), "w", stdout);
            ::execl(COVERSE_CRM_PATH, "coverse-crm", "--port", "0", "--port-file",
                    port_file.c_str(), "--timeout", timeout.c_str(), "--verbose", nullptr);
            std::_Exit(127);
        }
        for (int i = 0; i < 300 && _port == 0; ++i) {
            std::ifstream in(port_file);
            unsigned p = 0;
            if (in >> p) _port = static_cast<std::uint16_t>(p);
            if (_port == 0) std::this_thread::sleep_for(20ms);
        }
        if (_port == 0) ADD_FAILURE() << "coverse-crm wrote no port file";
    }
    ~crm_process() {
        ::kill(_pid, SIGTERM);
        int status = 0;
        ::waitpid(_pid, &status, 0);
        EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
            << "coverse-crm did not exit 0 on SIGTERM: " << status;
        std::system(("rm -rf " + _dir).c_str());
    }
    std::uint16_t port() const { return _port; }
    bool running() const { return ::kill(_pid, 0) == 0 && ::waitpid(_pid, nullptr, WNOHANG) == 0; }

private:
    std::string _dir;
    pid_t _pid = -1;
    std::uint16_t _port = 0;
};

int connect_to(std::uint16_t port) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
        ::close(fd);
        return -1;
    }
    return fd;
}

// A send that fails is not checked here: the CRM may refuse (and close) after the first of
// a registration's frames; what it answered is what the tests check.
void send_all(int fd, std::span<const std::byte> bytes) {
    while (!bytes.empty()) {
        const ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
        if (n <= 0) return;
        bytes = bytes.subspan(static_cast<std::size_t>(n));
    }
}

void send_frame(int fd, frame_type type, std::uint32_t source, std::span<const std::byte> payload) {
    frame_header h;
    h.type = type;
    h.source_pe = source;
    h.payload_length = static_cast<std::uint32_t>(payload.size());
    send_all(fd, encode_header(h));
    send_all(fd, payload);
}

struct registration {
    std::string key;
    std::uint32_t num_pes = 2;
    std::uint32_t cluster = 0;
    std::uint32_t context = 0;
    std::uint16_t data_port = 1000;
};

/// Connects and registers the way a PE does (hello, then register_node).
int register_with(std::uint16_t crm_port, const registration& r) {
    const int fd = connect_to(crm_port);
    EXPECT_GE(fd, 0);
    hello_payload hello;
    hello.job_key = job_key_of(r.key);
    hello.rank = r.cluster;
    hello.num_pes = r.num_pes;
    send_frame(fd, frame_type::hello, r.context, encode(hello));
    register_node_payload reg;
    reg.node = r.context;
    reg.data_port = r.data_port;
    reg.machine_id = 42;
    reg.job_key = hello.job_key;
    reg.ip = "127.0.0.1";
    send_frame(fd, frame_type::register_node, r.context, encode(reg));
    return fd;
}

struct reply {
    bool refused = false;
    std::string text;
    std::vector<std::uint16_t> ports;  // data port of each PE, in PE order
    std::vector<std::uint32_t> clusters;
    std::string problem;  // a protocol problem of the reply itself
};

/// Reads the CRM's answer (node table and cluster map, or a refusal) and closes `fd`.
reply read_reply(int fd, std::uint32_t num_pes) {
    reply r;
    frame_reader reader(decode_limits{default_max_payload, num_pes, true});
    std::vector<frame> frames;
    std::byte buf[4096];
    while (frames.size() < 2) {
        if (reader.has_frame()) {
            frames.push_back(reader.take_frame());
            if (frames.size() == 1 && frames[0].header.type == frame_type::node_table) {
                auto t = decode_node_table(frames[0].payload_bytes(),
                                           decode_limits{default_max_payload, num_pes, true});
                if (t.ok() && t.value.status == node_table_status::refused) break;
            }
            continue;
        }
        pollfd p{fd, POLLIN, 0};
        if (::poll(&p, 1, 30000) != 1) {
            r.problem = "no reply within 30 s";
            break;
        }
        const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
        if (n <= 0) {
            r.problem =
                "the CRM closed the connection after " + std::to_string(frames.size()) + " frames";
            break;
        }
        std::span<const std::byte> chunk(buf, static_cast<std::size_t>(n));
        while (!chunk.empty() && !reader.failed()) {
            chunk = chunk.subspan(reader.feed(chunk));
            if (reader.has_frame()) frames.push_back(reader.take_frame());
        }
        if (reader.failed()) {
            r.problem = describe(reader.error(), "the CRM");
            break;
        }
        if (frames.size() == 1 && frames[0].header.type == frame_type::node_table) {
            auto t = decode_node_table(frames[0].payload_bytes(),
                                       decode_limits{default_max_payload, num_pes, true});
            if (t.ok() && t.value.status == node_table_status::refused) break;
        }
    }
    ::close(fd);
    if (frames.empty()) return r;
    if (frames[0].header.type != frame_type::node_table) {
        r.problem = "first frame is not a node table";
        return r;
    }
    auto t = decode_node_table(frames[0].payload_bytes(),
                               decode_limits{default_max_payload, num_pes, true});
    if (!t.ok()) {
        r.problem = describe(t.error, "the CRM");
        return r;
    }
    if (t.value.status == node_table_status::refused) {
        r.refused = true;
        r.text = std::string(t.value.text);
        return r;
    }
    for (const node_record& rec : node_records(t.value))
        r.ports.push_back(rec.data_port);
    if (frames.size() < 2 || frames[1].header.type != frame_type::cluster_mapping) {
        r.problem = "no cluster map after the node table";
        return r;
    }
    for (std::uint32_t i = 0; i < num_pes; ++i) {
        std::uint32_t v = 0;
        std::memcpy(&v, frames[1].payload.get() + 4 * i, 4);  // little-endian host
        r.clusters.push_back(v);
    }
    return r;
}

TEST(crm, numbers_pes_by_node_context_and_sends_the_cluster_map) {
    crm_process crm;
    // Contexts 2, 0, 1 arrive in this order; clusters 1, 0, 1.
    const int a = register_with(crm.port(), {"ctx", 3, 1, 2, 1001});
    const int b = register_with(crm.port(), {"ctx", 3, 0, 0, 1002});
    const int c = register_with(crm.port(), {"ctx", 3, 1, 1, 1003});
    for (const int fd : {a, b, c}) {
        const reply r = read_reply(fd, 3);
        ASSERT_TRUE(r.problem.empty()) << r.problem;
        ASSERT_FALSE(r.refused) << r.text;
        EXPECT_EQ(r.ports, (std::vector<std::uint16_t>{1002, 1003, 1001}));
        EXPECT_EQ(r.clusters, (std::vector<std::uint32_t>{0, 1, 1}));
    }
    // Equal contexts: in order of arrival.
    const int d = register_with(crm.port(), {"arrival", 2, 0, 0, 2001});
    const reply first_half = [&] {
        // d is accepted before e connects, so it arrived first.
        const int e = register_with(crm.port(), {"arrival", 2, 0, 0, 2002});
        const reply re = read_reply(e, 2);
        EXPECT_EQ(re.ports, (std::vector<std::uint16_t>{2001, 2002})) << re.problem << re.text;
        return read_reply(d, 2);
    }();
    EXPECT_EQ(first_half.ports, (std::vector<std::uint16_t>{2001, 2002}));
}

TEST(crm, a_conflicting_pe_count_is_an_error_sent_to_both) {
    crm_process crm;
    const int small = register_with(crm.port(), {"conflict", 2, 0, 0, 3001});
    const int big = register_with(crm.port(), {"conflict", 3, 0, 0, 3002});
    for (const int fd : {small, big}) {
        const reply r = read_reply(fd, 3);
        ASSERT_TRUE(r.problem.empty()) << r.problem;
        ASSERT_TRUE(r.refused);
        EXPECT_TRUE(contains(r.text, "PE count conflict")) << r.text;
        EXPECT_TRUE(contains(r.text, "2 PEs") && contains(r.text, "3 PEs")) << r.text;
        EXPECT_TRUE(contains(r.text, "same +pN")) << r.text;
    }
    // The key is free again: a consistent job under it runs.
    const int x = register_with(crm.port(), {"conflict", 2, 0, 0, 3003});
    const int y = register_with(crm.port(), {"conflict", 2, 0, 1, 3004});
    for (const int fd : {x, y})
        EXPECT_EQ(read_reply(fd, 2).ports, (std::vector<std::uint16_t>{3003, 3004}));
}

TEST(crm, a_job_that_never_fills_times_out_saying_how_many_came) {
    crm_process crm("1");
    const int a = register_with(crm.port(), {"short", 4, 0, 0, 4001});
    const int b = register_with(crm.port(), {"short", 4, 0, 1, 4002});
    for (const int fd : {a, b}) {
        const reply r = read_reply(fd, 4);
        ASSERT_TRUE(r.problem.empty()) << r.problem;
        ASSERT_TRUE(r.refused);
        EXPECT_TRUE(contains(r.text, "only 2 of the 4 PEs")) << r.text;
        EXPECT_TRUE(contains(r.text, "CRM_TIMEOUT")) << r.text;
    }
}

TEST(crm, many_jobs_at_once) {
    crm_process crm;
    constexpr int jobs = 16;
    constexpr std::uint32_t pes = 3;
    std::vector<int> fds;
    // Interleaved: every job's first process, then every job's second, ...
    for (std::uint32_t i = 0; i < pes; ++i)
        for (int j = 0; j < jobs; ++j)
            fds.push_back(register_with(
                crm.port(), {"many" + std::to_string(j), pes, i, i,
                             static_cast<std::uint16_t>(5000 + 10 * j + static_cast<int>(i))}));
    for (std::uint32_t i = 0; i < pes; ++i)
        for (int j = 0; j < jobs; ++j) {
            const reply r = read_reply(fds[i * jobs + j], pes);
            ASSERT_TRUE(r.problem.empty()) << r.problem;
            ASSERT_FALSE(r.refused) << r.text;
            const auto base = static_cast<std::uint16_t>(5000 + 10 * j);
            EXPECT_EQ(r.ports,
                      (std::vector<std::uint16_t>{base, static_cast<std::uint16_t>(base + 1),
                                                  static_cast<std::uint16_t>(base + 2)}));
            EXPECT_EQ(r.clusters, (std::vector<std::uint32_t>{0, 1, 2}));
        }
}

TEST(crm, a_registrant_dying_midway_does_not_wedge_the_others) {
    crm_process crm;
    // One registers and dies; one sends half a header and then nothing.
    ::close(register_with(crm.port(), {"dying", 2, 0, 0, 6001}));
    const int half = connect_to(crm.port());
    ASSERT_GE(half, 0);
    const auto header = encode_header(frame_header{frame_type::hello, 0, 0, 24, 0, 0});
    send_all(half, std::span(header).first(10));
    // Another job goes through meanwhile.
    const int o1 = register_with(crm.port(), {"other", 2, 0, 0, 6101});
    const int o2 = register_with(crm.port(), {"other", 2, 0, 1, 6102});
    EXPECT_EQ(read_reply(o1, 2).ports, (std::vector<std::uint16_t>{6101, 6102}));
    EXPECT_EQ(read_reply(o2, 2).ports, (std::vector<std::uint16_t>{6101, 6102}));
    // The dead one's job waits for a replacement and fills with the two that come now.
    const int z1 = register_with(crm.port(), {"dying", 2, 0, 0, 6002});
    const int z2 = register_with(crm.port(), {"dying", 2, 0, 1, 6003});
    EXPECT_EQ(read_reply(z1, 2).ports, (std::vector<std::uint16_t>{6002, 6003}));
    EXPECT_EQ(read_reply(z2, 2).ports, (std::vector<std::uint16_t>{6002, 6003}));
    ::close(half);
    EXPECT_TRUE(crm.running());
}

TEST(crm, garbage_and_bad_registrations_are_refused_with_the_cause) {
    crm_process crm;
    const int junk = connect_to(crm.port());
    ASSERT_GE(junk, 0);
    const std::string text(24, 'x');
    send_all(junk, std::as_bytes(std::span(text)));
    const reply j = read_reply(junk, 1);
    ASSERT_TRUE(j.refused) << j.problem;
    EXPECT_TRUE(contains(j.text, "magic")) << j.text;

    const reply zero = read_reply(register_with(crm.port(), {"zero", 0, 0, 0, 7001}), 1);
    ASSERT_TRUE(zero.refused) << zero.problem;
    EXPECT_TRUE(contains(zero.text, "PE count of 0")) << zero.text;

    const int wrong = connect_to(crm.port());
    send_frame(wrong, frame_type::print, 0, std::as_bytes(std::span(text)));
    const reply w = read_reply(wrong, 1);
    ASSERT_TRUE(w.refused) << w.problem;
    EXPECT_TRUE(contains(w.text, "not hello")) << w.text;

    const int a = register_with(crm.port(), {"after", 2, 0, 0, 7002});
    const int b = register_with(crm.port(), {"after", 2, 0, 1, 7003});
    EXPECT_EQ(read_reply(a, 2).ports, (std::vector<std::uint16_t>{7002, 7003}));
    EXPECT_EQ(read_reply(b, 2).ports, (std::vector<std::uint16_t>{7002, 7003}));
}

TEST(crm, a_key_that_started_a_job_is_not_accepted_again) {
    crm_process crm;
    const int a = register_with(crm.port(), {"once", 2, 0, 0, 8001});
    const int b = register_with(crm.port(), {"once", 2, 0, 1, 8002});
    EXPECT_FALSE(read_reply(a, 2).refused);
    EXPECT_FALSE(read_reply(b, 2).refused);
    const reply again = read_reply(register_with(crm.port(), {"once", 2, 0, 0, 8003}), 2);
    ASSERT_TRUE(again.refused) << again.problem;
    EXPECT_TRUE(contains(again.text, "already started a job of 2 PEs")) << again.text;
    EXPECT_TRUE(contains(again.text, "its own ++key")) << again.text;
}

// ---- the PE's side: flags and settings -----------------------------------------------------

std::string request_error(std::vector<std::string> args, std::uint32_t pes) {
    std::vector<char*> argv;
    for (auto& a : args)
        argv.push_back(a.data());
    argv.push_back(nullptr);
    int argc = static_cast<int>(args.size());
    try {
        (void)crm_request_from(argc, argv.data(), pes);
    } catch (const bootstrap_error& e) {
        return e.what();
    }
    return "";
}

TEST(crm_request, flags_are_taken_out_of_argv) {
    std::vector<std::string> args{"prog",  "-laps", "3",         "++crm", "10.0.0.1:9000",
                                  "++key", "k1",    "++cluster", "1",     "++node-context",
                                  "2",     "x"};
    std::vector<char*> argv;
    for (auto& a : args)
        argv.push_back(a.data());
    argv.push_back(nullptr);
    int argc = static_cast<int>(args.size());
    const auto r = crm_request_from(argc, argv.data(), 4);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->host, "10.0.0.1");
    EXPECT_EQ(r->port, 9000);
    EXPECT_EQ(r->key, "k1");
    EXPECT_EQ(r->num_pes, 4u);
    EXPECT_EQ(r->cluster, 1u);
    EXPECT_EQ(r->node_context, 2u);
    ASSERT_EQ(argc, 4);
    EXPECT_STREQ(argv[1], "-laps");
    EXPECT_STREQ(argv[3], "x");
    EXPECT_EQ(argv[4], nullptr);
}

TEST(crm_request, none_without_an_address_and_errors_for_missing_parts) {
    std::vector<std::string> plain{"prog", "-laps", "3"};
    std::vector<char*> argv{plain[0].data(), plain[1].data(), plain[2].data(), nullptr};
    int argc = 3;
    EXPECT_FALSE(crm_request_from(argc, argv.data(), 2));
    EXPECT_TRUE(contains(request_error({"p", "++crm", "h:1"}, 2), "++key K"));
    EXPECT_TRUE(contains(request_error({"p", "++crm", "h:1", "++key", "k"}, 0), "+pN"));
    EXPECT_TRUE(contains(request_error({"p", "++crm", "h:0", "++key", "k"}, 2), "HOST:PORT"));
    EXPECT_TRUE(contains(request_error({"p", "++crm", "h:1", "++key", "k", "++cluster", "2"}, 2),
                         "from 0 to 1"));
    EXPECT_TRUE(contains(request_error({"p", "++crm"}, 2), "needs a value"));
}

TEST(crm_request, a_dead_port_is_an_error_naming_the_address) {
    // A port nobody listens on: bind one, note it, close it.
    const int s = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    ASSERT_EQ(::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
    const std::uint16_t port = ntohs(a.sin_port);
    ::close(s);
    crm_request r{"127.0.0.1", port, "k", 2, 0, 0};
    std::string error;
    try {
        (void)crm_connect(r);
    } catch (const bootstrap_error& e) {
        error = e.what();
    }
    EXPECT_TRUE(contains(error, "cannot reach the CRM at 127.0.0.1:" + std::to_string(port)))
        << error;
    EXPECT_TRUE(contains(error, "start coverse-crm there")) << error;
}

}  // namespace
}  // namespace coverse::net
