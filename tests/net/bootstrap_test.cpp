// Tests of the PE's side of the bootstrap: the launch environment, +pN parsing, and
// launcher_client against a scripted fake launcher on loopback (registration and node
// table, refusal, held text, scan, abort acknowledgement, timeouts). The real launcher is
// tested through coverse-run in tests/tools/.
#include <coverse/net/bootstrap.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace coverse::net {
namespace {

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

bool contains(const std::string& text, std::string_view part) {
    return text.find(part) != std::string::npos;
}

/// Sets the launch variables for one test and clears them afterwards.
class launch_env {
public:
    launch_env(const char* launcher, const char* pe, const char* num_pes, const char* key) {
        set(launcher_env, launcher);
        set(pe_env, pe);
        set(num_pes_env, num_pes);
        set(job_key_env, key);
    }
    ~launch_env() {
        for (const char* v : {launcher_env, pe_env, num_pes_env, job_key_env})
            ::unsetenv(v);
    }

private:
    static void set(const char* name, const char* value) {
        if (value) {
            ::setenv(name, value, 1);
        } else {
            ::unsetenv(name);
        }
    }
};

std::string error_of(const std::function<void()>& fn) {
    try {
        fn();
    } catch (const bootstrap_error& e) {
        return e.what();
    }
    return "(no error)";
}

TEST(launch_info, absent_when_not_started_by_a_launcher) {
    const launch_env env(nullptr, "0", "1", "0000000000000001");
    EXPECT_FALSE(launch_info_from_env());
}

TEST(launch_info, reads_every_variable) {
    const launch_env env("127.0.0.1:40211", "2", "4", "00000000deadBEEF");
    const auto info = launch_info_from_env();
    ASSERT_TRUE(info);
    EXPECT_EQ(info->launcher_host, "127.0.0.1");
    EXPECT_EQ(info->launcher_port, 40211);
    EXPECT_EQ(info->pe, 2u);
    EXPECT_EQ(info->num_pes, 4u);
    EXPECT_EQ(info->job_key, 0xdeadbeefull);
    const launch_env v6("[::1]:7", "0", "1", "ffffffffffffffff");
    EXPECT_EQ(launch_info_from_env()->launcher_host, "::1");
}

TEST(launch_info, malformed_variables_are_named) {
    struct test_case {
        const char *launcher, *pe, *num_pes, *key;
        std::string_view expected;
    };
    const test_case cases[] = {
        {"localhost", "0", "1", "0000000000000001",
         "COVERSE_LAUNCHER='localhost' is not host:port"},
        {"h:0", "0", "1", "0000000000000001", "port of 1..65535"},
        {"h:70000", "0", "1", "0000000000000001", "COVERSE_LAUNCHER='h:70000'"},
        {"::1:80", "0", "1", "0000000000000001", "IPv6 address goes in brackets"},
        {"h:1", "4", "4", "0000000000000001", "COVERSE_PE='4' is not a PE number below 4"},
        {"h:1", "x", "4", "0000000000000001", "COVERSE_PE='x'"},
        {"h:1", nullptr, "4", "0000000000000001", "COVERSE_LAUNCHER is set but COVERSE_PE is not"},
        {"h:1", "0", "0", "0000000000000001", "COVERSE_NUM_PES='0' is not a PE count"},
        {"h:1", "0", "1", "1234", "COVERSE_JOB_KEY='1234' is not 16 hex digits"},
        {"h:1", "0", "1", "000000000000000g", "COVERSE_JOB_KEY="},
    };
    for (const auto& c : cases) {
        const launch_env env(c.launcher, c.pe, c.num_pes, c.key);
        const std::string e = error_of([] { (void)launch_info_from_env(); });
        EXPECT_TRUE(contains(e, c.expected)) << e;
        EXPECT_TRUE(e.starts_with("coverse: ")) << e;
    }
}

TEST(pe_count_args, charmrun_spellings) {
    using v = std::vector<std::string>;
    EXPECT_EQ(pe_count_in_args(v{"a", "+p4"}), 4u);
    EXPECT_EQ(pe_count_in_args(v{"+p", "3", "x"}), 3u);
    EXPECT_EQ(pe_count_in_args(v{"+p2", "+p", "5"}), 5u);  // the last one wins
    EXPECT_FALSE(pe_count_in_args(v{"+ppn", "2", "+pemap", "0-3", "p4"}));
    EXPECT_TRUE(contains(error_of([] { (void)pe_count_in_args({"+p"}); }), "'+p' needs"));
    EXPECT_TRUE(contains(error_of([] { (void)pe_count_in_args({"+p", "x"}); }), "'+p' needs"));
    EXPECT_TRUE(contains(error_of([] { (void)pe_count_in_args({"+p0"}); }), "'+p0' is not"));
    EXPECT_TRUE(contains(error_of([] { (void)pe_count_in_args({"+p4x"}); }), "'+p4x' is not"));
}

// ---------------------------------------------------------------------------------------
// A scripted launcher: one accepted connection, blocking reads and writes.

class fake_launcher {
public:
    fake_launcher() {
        _listen = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t len = sizeof a;
        EXPECT_EQ(::bind(_listen, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
        EXPECT_EQ(::listen(_listen, 4), 0);
        EXPECT_EQ(::getsockname(_listen, reinterpret_cast<sockaddr*>(&a), &len), 0);
        _port = ntohs(a.sin_port);
    }
    ~fake_launcher() {
        join();
        if (_conn >= 0) ::close(_conn);
        ::close(_listen);
    }
    launch_info info(std::uint32_t pe = 1, std::uint32_t num_pes = 2) const {
        return launch_info{"127.0.0.1", _port, pe, num_pes, 0xC0FFEE};
    }
    /// Runs `script` on a thread once a PE has connected.
    void run(std::function<void(fake_launcher&)> script) {
        _thread = std::thread([this, script = std::move(script)] {
            _conn = ::accept4(_listen, nullptr, nullptr, SOCK_CLOEXEC);
            const int one = 1;  // header and payload go in two sends
            ::setsockopt(_conn, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            script(*this);
        });
    }
    /// The next frame from the PE (PE frames: source < num_pes).
    frame next() {
        frame_reader& r = _reader;
        for (;;) {
            if (_used < _buffer.size()) {
                _used += r.feed(std::span(_buffer).subspan(_used));
            }
            if (r.has_frame()) return r.take_frame();
            EXPECT_FALSE(r.failed()) << describe(r.error(), "the PE");
            _buffer.resize(4096);
            _used = 0;
            const ssize_t n = ::recv(_conn, _buffer.data(), _buffer.size(), 0);
            _buffer.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
            if (n <= 0) return frame{};  // type standard, empty: the connection ended
        }
    }
    void send(frame_type type, std::uint32_t tag, std::span<const std::byte> payload) {
        frame_header h;
        h.type = type;
        h.source_pe = launcher_pe;
        h.payload_length = static_cast<std::uint32_t>(payload.size());
        h.tag = tag;
        const auto header = encode_header(h);
        EXPECT_EQ(::send(_conn, header.data(), header.size(), MSG_NOSIGNAL), 24);
        if (!payload.empty()) {
            EXPECT_EQ(::send(_conn, payload.data(), payload.size(), MSG_NOSIGNAL),
                      static_cast<ssize_t>(payload.size()));
        }
    }
    void send_text(frame_type type, std::uint32_t tag, std::string_view text) {
        send(type, tag, {reinterpret_cast<const std::byte*>(text.data()), text.size()});
    }
    /// Waits for the script to finish.
    void join() {
        if (_thread.joinable()) _thread.join();
    }
    void close_connection() {
        ::close(_conn);
        _conn = -1;
    }
    std::uint16_t port() const { return _port; }

private:
    int _listen = -1;
    int _conn = -1;
    std::uint16_t _port = 0;
    std::thread _thread;
    frame_reader _reader{decode_limits{default_max_payload, 2, false}};
    std::vector<std::byte> _buffer;
    std::size_t _used = 0;
};

std::string text_of(const frame& f) {
    return std::string(reinterpret_cast<const char*>(f.payload.get()), f.header.payload_length);
}

TEST(launcher_client, registers_and_gets_the_node_table_with_held_text_behind_it) {
    fake_launcher l;
    std::string held;
    l.run([&](fake_launcher& f) {
        const frame reg = f.next();
        ASSERT_EQ(reg.header.type, frame_type::register_node);
        EXPECT_EQ(reg.header.source_pe, 1u);
        const auto p = decode_register_node(reg.payload_bytes(), {default_max_payload, 2, false});
        ASSERT_TRUE(p.ok());
        EXPECT_EQ(p.value.node, 1u);
        EXPECT_EQ(p.value.pe_count, 1u);
        EXPECT_EQ(p.value.data_port, 5001);
        EXPECT_EQ(p.value.job_key, 0xC0FFEEu);
        EXPECT_EQ(p.value.machine_id, local_machine_id());
        EXPECT_EQ(p.value.ip, "127.0.0.1");
        // Text printed before the registration arrives right behind it, per stream.
        const frame out = f.next();
        EXPECT_EQ(out.header.type, frame_type::print);
        held = text_of(out);
        EXPECT_EQ(f.next().header.type, frame_type::error);
        const std::vector<node_record> table = {{7, 0, 1, 5000, "127.0.0.1"},
                                                {7, 1, 1, 5001, "127.0.0.1"}};
        f.send(frame_type::node_table, 0, encode_node_table(table));
        const frame after = f.next();
        EXPECT_EQ(after.header.type, frame_type::print);
        EXPECT_EQ(text_of(after), "after\n");
    });
    launcher_client c(l.info(), 5s);
    EXPECT_GE(c.fd(), 0);
    c.print("before ");
    c.print("registering\n");
    c.error("err\n");
    const auto nodes = c.register_node(5001, "127.0.0.1", 5s);
    ASSERT_EQ(nodes.size(), 2u);
    EXPECT_EQ(nodes[0].pe, 0u);
    EXPECT_EQ(nodes[0].data_port, 5000);
    EXPECT_EQ(nodes[1].pe, 1u);
    EXPECT_EQ(nodes[1].ip, "127.0.0.1");
    EXPECT_EQ(nodes[1].machine_id, 7u);
    c.print("after\n");
    l.join();
    EXPECT_EQ(held, "before registering\n");
}

TEST(launcher_client, refusal_is_thrown_with_the_launchers_reason) {
    fake_launcher l;
    l.run([](fake_launcher& f) {
        EXPECT_EQ(f.next().header.type, frame_type::register_node);
        f.send(frame_type::node_table, 0,
               encode_node_table_refusal("PE 0 of 2 did not register within 1.0 s"));
    });
    launcher_client c(l.info(), 5s);
    const std::string e = error_of([&] { (void)c.register_node(5001, "127.0.0.1", 5s); });
    EXPECT_TRUE(contains(e, "coverse: PE 1: the launcher (127.0.0.1:" + std::to_string(l.port()) +
                                ") refused our registration: PE 0 of 2 did not register "
                                "within 1.0 s"))
        << e;
}

TEST(launcher_client, no_node_table_is_a_timeout_and_eof_is_named) {
    {
        fake_launcher l;
        l.run([](fake_launcher& f) { EXPECT_EQ(f.next().header.type, frame_type::register_node); });
        launcher_client c(l.info(), 5s);
        const auto start = clock_type::now();
        const std::string e = error_of([&] { (void)c.register_node(5001, "127.0.0.1", 200ms); });
        EXPECT_GE(clock_type::now() - start, 200ms);
        EXPECT_TRUE(contains(e, "sent no node table within 0.2 s of our registration")) << e;
        EXPECT_TRUE(contains(e, "CONNECTION_TIMEOUT")) << e;
    }
    {
        fake_launcher l;
        l.run([](fake_launcher& f) {
            EXPECT_EQ(f.next().header.type, frame_type::register_node);
            f.close_connection();
        });
        launcher_client c(l.info(), 5s);
        const std::string e = error_of([&] { (void)c.register_node(5001, "127.0.0.1", 5s); });
        EXPECT_TRUE(contains(e, "the connection was closed while waiting for the node table")) << e;
    }
}

TEST(launcher_client, bad_registration_arguments_are_reported_locally) {
    fake_launcher l;
    l.run([](fake_launcher&) {});
    launcher_client c(l.info(), 5s);
    const std::string e = error_of([&] { (void)c.register_node(0, "127.0.0.1", 1s); });
    EXPECT_TRUE(contains(e, "cannot register")) << e;
    EXPECT_TRUE(contains(e, "register_node.data_port")) << e;
}

TEST(launcher_client, read_line_gets_lines_then_eof) {
    fake_launcher l;
    l.run([](fake_launcher& f) {
        EXPECT_EQ(f.next().header.type, frame_type::register_node);
        f.send(frame_type::node_table, 0,
               encode_node_table(std::vector<node_record>{{1, 0, 2, 80, "h"}}));
        for (std::string_view reply : {"first line\n", "last", ""}) {
            const frame scan = f.next();
            EXPECT_EQ(scan.header.type, frame_type::scan);
            EXPECT_NE(scan.header.tag, 0u);
            f.send_text(frame_type::scan_reply, scan.header.tag, reply);
        }
    });
    launcher_client c(l.info(), 5s);
    const std::string early = error_of([&] { (void)c.read_line(); });
    EXPECT_TRUE(contains(early, "read_line before register_node")) << early;
    ASSERT_EQ(c.register_node(80, "h", 5s).size(), 2u);
    EXPECT_EQ(c.read_line(), "first line");
    EXPECT_EQ(c.read_line(), "last");
    EXPECT_EQ(c.read_line(), std::nullopt);
}

// The launcher's peer_lost notices (ON_PEER_LOST=report, CONNECT=lazy) come whenever a PE
// dies: take_notices() reads them without blocking, and a notice among other frames (before
// the node table, before a scan reply) neither breaks nor is lost to the call that waits.
TEST(launcher_client, peer_lost_notices_come_between_other_frames_and_are_taken_once) {
    fake_launcher l;
    l.run([](fake_launcher& f) {
        EXPECT_EQ(f.next().header.type, frame_type::register_node);
        f.send(frame_type::peer_lost, 0, encode(peer_lost_payload{0, "PE 0 died first"}));
        f.send(frame_type::node_table, 0,
               encode_node_table(std::vector<node_record>{{1, 0, 2, 80, "h"}}));
        const frame scan = f.next();
        EXPECT_EQ(scan.header.type, frame_type::scan);
        f.send(frame_type::peer_lost, 0, encode(peer_lost_payload{1, "PE 1 of 2 was killed"}));
        f.send_text(frame_type::scan_reply, scan.header.tag, "a line\n");
        EXPECT_EQ(f.next().header.type, frame_type::print);  // the PE took the notice
        f.send(frame_type::peer_lost, 0, encode(peer_lost_payload{1, "again"}));
        EXPECT_EQ(f.next().header.type, frame_type::print);
    });
    launcher_client c(l.info(), 5s);
    ASSERT_EQ(c.register_node(80, "h", 5s).size(), 2u);
    auto first = c.take_notices();  // the one that came before the node table
    ASSERT_EQ(first.size(), 1u);
    EXPECT_EQ(first[0].pe, 0u);
    EXPECT_EQ(first[0].text, "PE 0 died first");
    EXPECT_EQ(c.read_line(), "a line");
    auto second = c.take_notices();
    ASSERT_EQ(second.size(), 1u);
    EXPECT_EQ(second[0].pe, 1u);
    EXPECT_EQ(second[0].text, "PE 1 of 2 was killed");
    EXPECT_TRUE(c.take_notices().empty()) << "each notice is taken once";
    c.print("took it\n");
    // One that arrives later is read without blocking once it is there.
    std::vector<launcher_client::notice> later;
    for (int i = 0; i < 500 && later.empty(); ++i) {
        later = c.take_notices();
        if (later.empty()) std::this_thread::sleep_for(10ms);
    }
    ASSERT_EQ(later.size(), 1u);
    EXPECT_EQ(later[0].text, "again");
    EXPECT_FALSE(c.closed());
    c.print("done\n");
}

TEST(launcher_client, abort_waits_for_the_acknowledgement_at_most_a_second) {
    {
        fake_launcher l;
        l.run([](fake_launcher& f) {
            const frame a = f.next();
            ASSERT_EQ(a.header.type, frame_type::abort);
            const auto p = decode_abort(a.payload_bytes(), {default_max_payload, 2, false});
            ASSERT_TRUE(p.ok());
            EXPECT_EQ(p.value.exit_code, 9);
            EXPECT_EQ(p.value.origin_pe, 1u);
            EXPECT_EQ(p.value.text, "out of cheese");
            std::this_thread::sleep_for(50ms);  // the ack is what the PE waits for
            f.send(frame_type::abort, 0, encode(abort_payload{9, 1, ""}));
        });
        launcher_client c(l.info(), 5s);
        const auto start = clock_type::now();
        c.abort(9, "out of cheese");  // allowed before the registration
        const auto took = clock_type::now() - start;
        EXPECT_GE(took, 50ms);
        EXPECT_LT(took, 900ms);
    }
    {
        fake_launcher l;  // reads the abort, never answers
        l.run([](fake_launcher& f) {
            EXPECT_EQ(f.next().header.type, frame_type::abort);
            std::this_thread::sleep_for(1500ms);
        });
        launcher_client c(l.info(), 5s);
        const auto start = clock_type::now();
        c.abort(1, "x");
        const auto took = clock_type::now() - start;
        EXPECT_GE(took, 900ms);
        EXPECT_LT(took, 1400ms);
    }
}

TEST(launcher_client, connect_failure_names_the_address_and_the_fix) {
    // A port nobody listens on: bind one, then close it.
    std::uint16_t port = 0;
    {
        fake_launcher l;
        port = l.port();
    }
    const launch_info info{"127.0.0.1", port, 3, 4, 1};
    const auto start = clock_type::now();
    const std::string e = error_of([&] { launcher_client c(info, 200ms); });
    EXPECT_GE(clock_type::now() - start, 200ms);
    EXPECT_TRUE(contains(e, "coverse: PE 3: could not connect to the launcher at 127.0.0.1:" +
                                std::to_string(port) + " within 0.2 s (Connection refused)"))
        << e;
    EXPECT_TRUE(contains(e, "is coverse-run still running?")) << e;
    EXPECT_TRUE(contains(e, "CONNECTION_TIMEOUT")) << e;
}

}  // namespace
}  // namespace coverse::net
