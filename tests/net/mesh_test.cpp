// mesh: full-mesh set-up, ordered delivery of mixed sizes (in-process PEs on threads and
// across two processes), the hello checks, bad peers, dead peers and the disconnect
// handshake — for every backend this machine has.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <functional>
#include <latch>
#include <mutex>
#include <optional>
#include <thread>

#include <coverse/alloc/config.hpp>
#include <coverse/net/mesh.hpp>
#include <coverse/runtime/runtime.hpp>

namespace coverse::net::test {
namespace {

using namespace std::chrono_literals;

scheduler_options options_for(backend_kind kind) {
    scheduler_options o;
    o.spin = std::chrono::microseconds(50);
    o.use_io_uring = kind != backend_kind::asio;
    return o;
}

std::string kind_name(backend_kind k) {
    return k == backend_kind::asio ? "asio" : "io_uring";
}

// The payload of message `seq` from `from`: a size from a fixed mix and bytes that encode
// (from, seq, offset), so loss, reordering and corruption all show.
std::size_t size_of(std::uint32_t seq, std::size_t big) {
    if (big && seq % 50'000 == 25'000) return big;  // a few maximal messages
    switch (seq % 10) {
        case 0:
            return 0;
        case 1:
            return 1;
        case 2:
            return 24;
        case 3:
            return 2048;
        case 4:
            return 2049;
        case 5:
            return 16384;
        case 6:
            return 16385;
        case 7:
            return 100'000 + seq % 7;
        default:
            return seq % 300;
    }
}
// Byte i of message (from, seq) is (from * 131 + seq * 7 + i) & 0xff: a window into one
// ramp of bytes 0, 1, ..., 255, 0, ... So a message is filled by one copy and checked by
// one compare (a byte loop made this file's 100k-message cases 70 s each under ASan).
const std::byte* ramp_at(std::uint32_t from, std::uint32_t seq) {
    static const std::vector<std::byte> ramp = [] {
        std::vector<std::byte> r(default_max_payload + 256);
        for (std::size_t i = 0; i < r.size(); ++i)
            r[i] = static_cast<std::byte>(i & 0xff);
        return r;
    }();
    return ramp.data() + ((from * 131 + seq * 7) & 0xff);
}
void fill(std::vector<std::byte>& v, std::uint32_t from, std::uint32_t seq) {
    if (!v.empty()) std::memcpy(v.data(), ramp_at(from, seq), v.size());
}
bool check(std::span<const std::byte> v, std::uint32_t from, std::uint32_t seq) {
    return v.empty() || std::memcmp(v.data(), ramp_at(from, seq), v.size()) == 0;
}

struct pe_setup {
    std::unique_ptr<backend> b;
    std::unique_ptr<listener> l;
};

pe_setup make_pe(scheduler& s, backend_kind kind, std::string* why) {
    pe_setup p;
    p.b = make_backend(s, kind, why);
    if (!p.b) return p;
    auto l = p.b->listen(endpoint{"127.0.0.1", 0});
    if (l) p.l = std::move(l.value);
    return p;
}

/// Runs `n` PEs on threads, each with its own scheduler and mesh.
/// body(rank, mesh) -> task<void>; failures are collected per PE.
struct job_result {
    std::vector<std::string> errors;
    bool skipped = false;
    std::string skip_reason;
};
job_result run_job(std::uint32_t n, backend_kind kind,
                   std::function<task<void>(std::uint32_t, mesh&)> body,
                   std::function<void(mesh_config&)> tweak = {}) {
    job_result out;
    out.errors.resize(n);
    std::vector<endpoint> ports(n);
    std::latch listening(n);
    std::mutex mu;
    std::vector<std::thread> threads;
    for (std::uint32_t r = 0; r < n; ++r) {
        threads.emplace_back([&, r] {
            scheduler s(options_for(kind));
            std::string why;
            auto pe = make_pe(s, kind, &why);
            if (!pe.b || !pe.l) {
                std::lock_guard lock(mu);
                out.skipped = true;
                out.skip_reason = why.empty() ? "listen failed" : why;
                ports[r] = endpoint{"127.0.0.1", 1};
                listening.count_down();
                return;
            }
            ports[r] = pe.l->local();
            listening.count_down();
            listening.wait();
            if (out.skipped) return;
            mesh_config cfg;
            cfg.rank = r;
            cfg.num_pes = n;
            cfg.job_key = 0xC0FFEE;
            cfg.peers = ports;
            cfg.connect_timeout = 20s;
            if (tweak) tweak(cfg);
            mesh m(*pe.b, std::move(pe.l), cfg);
            try {
                sync_wait([](mesh* mp, std::uint32_t rank,
                             std::function<task<void>(std::uint32_t, mesh&)>* f) -> task<void> {
                    co_await mp->establish();
                    co_await (*f)(rank, *mp);
                    co_await mp->shutdown();
                }(&m, r, &body));
            } catch (const std::exception& e) {
                out.errors[r] = e.what();
                // Leave the mesh in a destroyable state whatever happened.
                try {
                    sync_wait(m.shutdown());
                } catch (const std::exception&) {
                }
            }
        });
    }
    for (auto& t : threads)
        t.join();
    return out;
}

class mesh_test : public ::testing::TestWithParam<backend_kind> {};

// Every PE sends `count` messages to every other PE; every PE checks what it receives.
task<void> all_to_all(std::uint32_t rank, mesh& m, std::uint32_t count, std::size_t big,
                      std::atomic<std::uint64_t>* received_total) {
    const std::uint32_t n = m.config().num_pes;
    auto sender = [](mesh* mp, std::uint32_t me, std::uint32_t to, std::uint32_t cnt,
                     std::size_t bg) -> task<void> {
        std::vector<std::byte> buf;
        for (std::uint32_t seq = 0; seq < cnt; ++seq) {
            buf.resize(size_of(seq, bg));
            fill(buf, me, seq);
            frame_header h;
            h.type = frame_type::standard;
            const int r = co_await mp->send(to, h, buf);
            if (r != 0) throw std::runtime_error("send failed: " + std::string(strerror(-r)));
        }
    };
    task_scope senders("senders");
    for (std::uint32_t to = 0; to < n; ++to)
        if (to != rank) senders.spawn(sender(&m, rank, to, count, big), "sender");
    std::vector<std::uint32_t> next(n, 0);
    std::uint64_t expected = static_cast<std::uint64_t>(count) * (n - 1), got = 0;
    std::string problem;
    while (got < expected) {
        auto r = co_await m.receive();
        if (!r) {
            problem = "inbox closed early";
            break;
        }
        const std::uint32_t from = r->from;
        const std::uint32_t seq = next[from]++;
        const auto bytes = r->frame.payload_bytes();
        if (bytes.size() != size_of(seq, big) || !check(bytes, from, seq)) {
            problem = "message " + std::to_string(seq) + " from PE " + std::to_string(from) +
                      " has size " + std::to_string(bytes.size()) + " or content wrong";
            break;
        }
        ++got;
    }
    co_await senders.join();
    received_total->fetch_add(got);
    if (!problem.empty()) throw std::runtime_error(problem);
}

TEST_P(mesh_test, four_pes_all_to_all_in_order) {
    std::atomic<std::uint64_t> total{0};
    auto res = run_job(4, GetParam(),
                       [&](std::uint32_t r, mesh& m) { return all_to_all(r, m, 2000, 0, &total); });
    if (res.skipped) GTEST_SKIP() << res.skip_reason;
    for (std::uint32_t r = 0; r < 4; ++r)
        EXPECT_EQ(res.errors[r], "") << "PE " << r;
    EXPECT_EQ(total.load(), 4u * 3u * 2000u);
}

// post() is send() without a coroutine per frame: frames posted and awaited to one peer
// stay in one order, every callback runs exactly once with 0, and a post to ourselves or to
// a PE out of range fails at once without a callback.
struct post_counter {
    int ok = 0;
    int failed = 0;
    static void on_sent(void* ctx, int result) {
        auto* c = static_cast<post_counter*>(ctx);
        (result == 0 ? c->ok : c->failed)++;
    }
};

task<void> post_and_receive(std::uint32_t r, mesh& m, int n) {
    const std::uint32_t peer = 1 - r;
    post_counter counter;
    std::vector<std::vector<std::byte>> payloads(static_cast<std::size_t>(n));
    frame_header h;
    for (int i = 0; i < n; ++i) {
        payloads[i].resize(static_cast<std::size_t>(i % 300));
        fill(payloads[i], r, static_cast<std::uint32_t>(i));
        h.tag = 0;
        if (i % 10 == 9) {  // every tenth frame awaited, between posted ones
            const int rc = co_await m.send(peer, h, payloads[i]);
            if (rc != 0) throw std::runtime_error("send failed: " + std::to_string(rc));
        } else if (m.post(peer, h, payloads[i], &post_counter::on_sent, &counter) != 0) {
            throw std::runtime_error("post failed");
        }
    }
    if (m.post(r, h, {}, &post_counter::on_sent, &counter) != -EINVAL)
        throw std::runtime_error("a post to ourselves must fail with -EINVAL");
    if (m.post(7, h, {}, &post_counter::on_sent, &counter) != -EINVAL)
        throw std::runtime_error("a post to PE 7 of 2 must fail with -EINVAL");
    for (int i = 0; i < n; ++i) {
        auto got = co_await m.receive();
        if (!got || got->from != peer)
            throw std::runtime_error("missing frame " + std::to_string(i));
        if (got->frame.header.payload_length != static_cast<std::uint32_t>(i % 300) ||
            !check(got->frame.payload_bytes(), peer, static_cast<std::uint32_t>(i)))
            throw std::runtime_error("frame " + std::to_string(i) + " out of order or corrupt");
    }
    while (counter.ok + counter.failed < n - n / 10)
        co_await yield();
    if (counter.ok != n - n / 10 || counter.failed != 0)
        throw std::runtime_error("callbacks: " + std::to_string(counter.ok) + " ok, " +
                                 std::to_string(counter.failed) + " failed");
}

TEST_P(mesh_test, posted_and_awaited_frames_keep_one_order_and_each_callback_runs_once) {
    auto res = run_job(2, GetParam(),
                       [](std::uint32_t r, mesh& m) { return post_and_receive(r, m, 5000); });
    if (res.skipped) GTEST_SKIP() << res.skip_reason;
    EXPECT_EQ(res.errors[0], "");
    EXPECT_EQ(res.errors[1], "");
}

// flush() sends what post() queued while the writer idled, at once (no writer turn: TCP's
// small-message latency, the machine core flushing when a handler returns), and a frame too
// big for the socket goes partly, the writer finishing it; order and content hold across
// both ways, and each callback runs once. Each PE does it to the other at once.
task<void> post_at_once(std::uint32_t r, mesh& m, backend_kind kind) {
    const std::uint32_t peer = 1 - r;
    post_counter counter;
    frame_header h;
    std::vector<std::byte> warm(8), small(8), big(std::size_t{8} << 20), tail(100);
    fill(warm, r, 0);
    fill(small, r, 1);
    fill(big, r, 2);
    fill(tail, r, 3);
    // The first frame connects (lazily) and starts the writer; once it went, the writer is
    // idle again.
    if (const int rc = co_await m.send(peer, h, warm); rc != 0)
        throw std::runtime_error("send failed: " + std::to_string(rc));
    for (int i = 0; i < 10; ++i)
        co_await yield();
    if (m.post(peer, h, small, &post_counter::on_sent, &counter) != 0)
        throw std::runtime_error("post failed");
    if (counter.ok != 0) throw std::runtime_error("a posted frame went before the flush");
    m.flush();
    // io_uring sends it within flush(); Asio's stream has no such send and leaves it to the
    // writer.
    if (kind != backend_kind::asio && counter.ok != 1)
        throw std::runtime_error("a small frame posted to an idle connection did not go at flush");
    if (m.post(peer, h, big, &post_counter::on_sent, &counter) != 0 ||
        m.post(peer, h, tail, &post_counter::on_sent, &counter) != 0)
        throw std::runtime_error("post failed");
    m.flush();
    const std::vector<std::byte>* expect[] = {&warm, &small, &big, &tail};
    for (std::uint32_t i = 0; i < 4; ++i) {
        auto got = co_await m.receive();
        if (!got || got->from != peer)
            throw std::runtime_error("missing frame " + std::to_string(i));
        if (got->frame.header.payload_length != expect[i]->size() ||
            !check(got->frame.payload_bytes(), peer, i))
            throw std::runtime_error("frame " + std::to_string(i) + " out of order or corrupt");
    }
    while (counter.ok + counter.failed < 3)
        co_await yield();
    if (counter.ok != 3 || counter.failed != 0)
        throw std::runtime_error("callbacks: " + std::to_string(counter.ok) + " ok, " +
                                 std::to_string(counter.failed) + " failed");
}

TEST_P(mesh_test, a_flush_sends_posted_frames_at_once_and_the_writer_ends_a_partial_one) {
    const backend_kind kind = GetParam();
    auto res =
        run_job(2, kind, [kind](std::uint32_t r, mesh& m) { return post_at_once(r, m, kind); });
    if (res.skipped) GTEST_SKIP() << res.skip_reason;
    EXPECT_EQ(res.errors[0], "");
    EXPECT_EQ(res.errors[1], "");
}

// The largest a TCP socket's kernel buffer grows to here (the third field of tcp_rmem or
// tcp_wmem), or 0 when it cannot be read.
std::size_t tcp_buffer_max(const char* which) {
    std::FILE* f = std::fopen(which, "r");
    if (!f) return 0;
    unsigned long long lo = 0, mid = 0, hi = 0;
    const int n = std::fscanf(f, "%llu %llu %llu", &lo, &mid, &hi);
    std::fclose(f);
    return n == 3 ? static_cast<std::size_t>(hi) : 0;
}

// A peer that stops reading: PE 0 posts more than the two sockets' buffers can hold and shuts
// down. The disconnect frame waits behind the posted ones, so the handshake cannot finish: its
// deadline (CONNECTION_TIMEOUT, 1 s here) stops the writer in the middle of a frame, the
// shutdown says so, the connection fails with a text naming this PE's shutdown as the cause,
// and every posted frame gets its callback once (sent, or failed with the connection).
TEST_P(mesh_test, a_shutdown_stopped_at_its_deadline_reports_it_and_completes_every_posted_frame) {
    // Twice what the kernel could buffer between the two sockets, in 1 MiB frames.
    const std::size_t buffered = tcp_buffer_max("/proc/sys/net/ipv4/tcp_rmem") +
                                 tcp_buffer_max("/proc/sys/net/ipv4/tcp_wmem");
    const int frames = static_cast<int>(
        std::clamp<std::size_t>(2 * buffered / (std::size_t{1} << 20) + 8, 48, 1024));
    static const std::vector<std::byte> payload(std::size_t{1} << 20);
    post_counter counter;
    std::atomic<bool> pe0_done{false};
    std::atomic<bool> shutdown_failed{false};
    auto res = run_job(
        2, GetParam(),
        [&](std::uint32_t r, mesh& m) -> task<void> {
            if (r == 1) {
                // Not reading: this thread runs nothing until PE 0 is done (at most 60 s,
                // so that a PE 0 that failed cannot hold the test).
                for (int i = 0; i < 6000 && !pe0_done.load(); ++i)
                    std::this_thread::sleep_for(10ms);
                co_return;
            }
            struct done_on_exit {
                std::atomic<bool>& done;
                ~done_on_exit() { done = true; }
            } guard{pe0_done};
            frame_header h;
            for (int i = 0; i < frames; ++i)
                if (m.post(1, h, payload, &post_counter::on_sent, &counter) != 0)
                    throw std::runtime_error("post " + std::to_string(i) + " failed");
            try {
                co_await m.shutdown();
            } catch (const mesh_error& e) {
                // It names the deadline and the peer the handshake was still waiting on.
                const std::string_view text = e.what();
                shutdown_failed =
                    text.find("did not finish within 1 s with PE 1 (") != std::string_view::npos;
                if (!shutdown_failed) ADD_FAILURE() << "shutdown: " << text;
            }
        },
        [](mesh_config& c) { c.connect_timeout = 1s; });
    if (res.skipped) GTEST_SKIP() << res.skip_reason;
    EXPECT_TRUE(shutdown_failed) << "PE 0's shutdown did not report its deadline and the peer";
    EXPECT_EQ(counter.ok + counter.failed, frames)
        << counter.ok << " frames sent, " << counter.failed << " failed: the rest had no callback";
    EXPECT_GT(counter.failed, 0) << "all " << frames << " frames went: the peer read after all";
}

TEST_P(mesh_test, hundred_thousand_mixed_messages_up_to_64_mib_in_order) {
    std::atomic<std::uint64_t> total{0};
    auto res = run_job(2, GetParam(), [&](std::uint32_t r, mesh& m) {
        return all_to_all(r, m, 100'000, default_max_payload, &total);
    });
    if (res.skipped) GTEST_SKIP() << res.skip_reason;
    EXPECT_EQ(res.errors[0], "");
    EXPECT_EQ(res.errors[1], "");
    EXPECT_EQ(total.load(), 200'000u);
}

TEST_P(mesh_test, a_wrong_job_key_is_refused_naming_both_keys) {
    auto res = run_job(
        2, GetParam(), [](std::uint32_t, mesh&) -> task<void> { co_return; },
        [](mesh_config& c) {
            if (c.rank == 1) c.job_key = 0xBAD;
            c.connect_timeout = 3s;
        });
    if (res.skipped) GTEST_SKIP() << res.skip_reason;
    EXPECT_NE(res.errors[1].find("another job"), std::string::npos) << res.errors[1];
    EXPECT_NE(res.errors[1].find("0x0000000000000bad"), std::string::npos) << res.errors[1];
    EXPECT_NE(res.errors[0].find("PE 1 (127.0.0.1:"), std::string::npos) << res.errors[0];
    EXPECT_NE(res.errors[0].find("it never connected"), std::string::npos) << res.errors[0];
}

TEST_P(mesh_test, a_wrong_protocol_version_is_refused) {
    auto res = run_job(
        2, GetParam(), [](std::uint32_t, mesh&) -> task<void> { co_return; },
        [](mesh_config& c) {
            if (c.rank == 1) c.protocol_version = protocol_revision + 1;
            c.connect_timeout = 3s;
        });
    if (res.skipped) GTEST_SKIP() << res.skip_reason;
    EXPECT_NE(res.errors[1].find("protocol version"), std::string::npos) << res.errors[1];
}

TEST_P(mesh_test, nobody_listening_times_out_naming_the_peer_and_address) {
    scheduler s(options_for(GetParam()));
    std::string why;
    auto pe = make_pe(s, GetParam(), &why);
    if (!pe.b) GTEST_SKIP() << why;
    // A port that was just free: listen, note it, close it.
    auto probe = pe.b->listen(endpoint{"127.0.0.1", 0});
    ASSERT_TRUE(probe);
    const endpoint dead = probe.value->local();
    sync_wait(probe.value->close());
    mesh_config cfg;
    cfg.rank = 1;
    cfg.num_pes = 2;
    cfg.peers = {dead, pe.l->local()};
    cfg.connect_timeout = 300ms;
    mesh m(*pe.b, std::move(pe.l), cfg);
    try {
        sync_wait(m.establish());
        ADD_FAILURE() << "establish must fail";
    } catch (const mesh_error& e) {
        const std::string w = e.what();
        EXPECT_NE(w.find("timed out"), std::string::npos) << w;
        EXPECT_NE(w.find("PE 0 (" + dead.to_string() + ")"), std::string::npos) << w;
        EXPECT_NE(w.find("CONNECTION_TIMEOUT"), std::string::npos) << w;
    }
    sync_wait(m.shutdown());
}

// A hand-made peer: dials PE 0, sends a valid hello, then whatever the test wants; it
// never reads past PE 0's hello, and closes (once `close_when` is set, if given).
task<void> fake_peer(backend* b, endpoint to, std::vector<std::byte> after_hello, bool close_after,
                     std::string* error, event* close_when = nullptr) {
    auto r = co_await b->connect(to);
    if (!r) {
        *error = "connect failed";
        co_return;
    }
    hello_payload hp;
    hp.job_key = 0xC0FFEE;
    hp.rank = 1;
    hp.num_pes = 2;
    frame_header h;
    h.type = frame_type::hello;
    h.source_pe = 1;
    h.payload_length = hello_payload::wire_size;
    auto head = encode_header(h);
    auto body = encode(hp);
    const std::span<const std::byte> parts[] = {head, body};
    co_await r.value->send_all(parts);
    std::array<std::byte, 64> answer{};
    co_await r.value->recv_some(answer);  // PE 0's hello
    const std::span<const std::byte> rest[] = {after_hello};
    co_await r.value->send_all(rest);
    if (close_when) co_await close_when->wait();
    if (close_after) co_await r.value->close();
}

// PE 0's side of a job of two whose PE 1 is fake_peer.
mesh_config fake_peer_job(endpoint pe0) {
    mesh_config cfg;
    cfg.rank = 0;
    cfg.num_pes = 2;
    cfg.job_key = 0xC0FFEE;
    cfg.peers = {pe0, endpoint{"127.0.0.1", 1}};
    cfg.connect_timeout = 5s;
    return cfg;
}

// `bytes` from a fake PE 1 after its hello; returns why PE 0's mesh failed it. The payloads
// PE 0 received before that go into `delivered`, when given.
std::string receive_error_with_fake_peer(backend_kind kind, std::vector<std::byte> bytes,
                                         bool* skipped, std::string* reason,
                                         std::vector<std::string>* delivered = nullptr) {
    scheduler s(options_for(kind));
    auto pe = make_pe(s, kind, reason);
    if (!pe.b) {
        *skipped = true;
        return {};
    }
    const mesh_config cfg = fake_peer_job(pe.l->local());
    backend* b = pe.b.get();
    const endpoint at = pe.l->local();
    mesh m(*b, std::move(pe.l), cfg);
    std::string error, fake_error;
    m.on_peer_failure([&](std::uint32_t, const std::string& why) { error = why; });
    sync_wait([](mesh* mp, backend* bp, endpoint to, std::vector<std::byte> after,
                 std::string* ferr, std::vector<std::string>* out) -> task<void> {
        task_scope peer("fake peer");
        peer.spawn(fake_peer(bp, to, std::move(after), true, ferr), "fake peer");
        co_await mp->establish();
        // receive() hands out what arrived, then throws the peer's failure.
        auto r = co_await with_timeout(
            [](mesh* m2, std::vector<std::string>* o) -> task<void> {
                try {
                    while (auto f = co_await m2->receive()) {
                        const auto p = f->frame.payload_bytes();
                        if (o) o->emplace_back(reinterpret_cast<const char*>(p.data()), p.size());
                    }
                } catch (const mesh_error&) {
                }
            }(mp, out),
            5s);
        (void)r;
        co_await peer.join();
    }(&m, b, at, std::move(bytes), &fake_error, delivered));
    sync_wait(m.shutdown());
    return error;
}

TEST_P(mesh_test, garbage_after_the_hello_closes_that_connection_with_a_clear_error) {
    bool skipped = false;
    std::string reason;
    std::vector<std::byte> garbage(64, std::byte{0x5a});
    auto err = receive_error_with_fake_peer(GetParam(), garbage, &skipped, &reason);
    if (skipped) GTEST_SKIP() << reason;
    EXPECT_NE(err.find("PE 1"), std::string::npos) << err;
    EXPECT_NE(err.find("magic"), std::string::npos) << err;
}

// Frames that arrive together with an invalid one: the ones before it are handed out, in
// order, and none after it. PE 1 sends four frames in one write, the third from
// `forged_source`.
std::vector<std::byte> frames_around_a_forged_one(std::uint32_t forged_source) {
    std::vector<std::byte> bytes;
    auto add = [&](std::uint32_t source, const std::string& text) {
        frame_header h;
        h.type = frame_type::standard;
        h.source_pe = source;
        h.payload_length = static_cast<std::uint32_t>(text.size());
        const auto head = encode_header(h);
        bytes.insert(bytes.end(), head.begin(), head.end());
        for (const char ch : text)
            bytes.push_back(static_cast<std::byte>(ch));
    };
    add(1, "first");
    add(1, "second");
    add(forged_source, "forged");
    add(1, "after");
    return bytes;
}

TEST_P(mesh_test, frames_before_an_invalid_one_in_the_same_arrival_are_delivered_none_after) {
    for (const std::uint32_t forged : {0u, 5u}) {  // PE 0 is us; PE 5 is not in the job
        bool skipped = false;
        std::string reason;
        std::vector<std::string> got;
        const std::string error = receive_error_with_fake_peer(
            GetParam(), frames_around_a_forged_one(forged), &skipped, &reason, &got);
        if (skipped) GTEST_SKIP() << reason;
        EXPECT_EQ(got, (std::vector<std::string>{"first", "second"})) << "forged PE " << forged;
        EXPECT_NE(
            error.find(forged == 0 ? "claims to come from PE 0" : "source PE 5 is out of range"),
            std::string::npos)
            << error;
    }
}

TEST_P(mesh_test, a_peer_closing_mid_frame_is_reported) {
    bool skipped = false;
    std::string reason;
    frame_header h;
    h.type = frame_type::standard;
    h.source_pe = 1;
    h.payload_length = 1000;
    auto head = encode_header(h);
    std::vector<std::byte> partial(head.begin(), head.end());
    partial.resize(partial.size() + 10, std::byte{1});
    auto err = receive_error_with_fake_peer(GetParam(), partial, &skipped, &reason);
    if (skipped) GTEST_SKIP() << reason;
    EXPECT_NE(err.find("middle of a frame"), std::string::npos) << err;
}

TEST_P(mesh_test, a_peer_that_dies_between_frames_is_reported_naming_it) {
    bool skipped = false;
    std::string reason;
    auto err = receive_error_with_fake_peer(GetParam(), {}, &skipped, &reason);
    if (skipped) GTEST_SKIP() << reason;
    EXPECT_NE(err.find("PE 1"), std::string::npos) << err;
    EXPECT_NE(err.find("outside the disconnect handshake"), std::string::npos) << err;
}

TEST_P(mesh_test, two_processes_exchange_100k_mixed_messages_and_shut_down_cleanly) {
    const backend_kind kind = GetParam();
    int port_pipe[2];
    ASSERT_EQ(::pipe(port_pipe), 0);
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        // PE 1: dials PE 0, sends 100,000 mixed messages (0 B to 64 MiB), receives as
        // many, shuts down.
        ::close(port_pipe[1]);
        std::uint16_t port = 0;
        if (::read(port_pipe[0], &port, sizeof port) != sizeof port) ::_exit(3);
        int code = 0;
        {
            scheduler s(options_for(kind));
            std::string why;
            auto pe = make_pe(s, kind, &why);
            if (!pe.b) ::_exit(4);
            mesh_config cfg;
            cfg.rank = 1;
            cfg.num_pes = 2;
            cfg.job_key = 7;
            cfg.peers = {endpoint{"127.0.0.1", port}, pe.l->local()};
            cfg.connect_timeout = 20s;
            mesh m(*pe.b, std::move(pe.l), cfg);
            std::atomic<std::uint64_t> total{0};
            try {
                sync_wait([](mesh* mp, std::atomic<std::uint64_t>* t) -> task<void> {
                    co_await mp->establish();
                    co_await all_to_all(1, *mp, 100'000, default_max_payload, t);
                    co_await mp->shutdown();
                }(&m, &total));
            } catch (const std::exception& e) {
                std::fprintf(stderr, "child PE 1: %s\n", e.what());
                code = 1;
            }
        }
        ::_exit(code);
    }
    ::close(port_pipe[0]);
    scheduler s(options_for(kind));
    std::string why;
    auto pe = make_pe(s, kind, &why);
    std::uint16_t port = pe.l ? pe.l->local().port : 0;
    [[maybe_unused]] auto w = ::write(port_pipe[1], &port, sizeof port);
    ::close(port_pipe[1]);
    if (!pe.b) {
        ::kill(child, SIGKILL);
        ::waitpid(child, nullptr, 0);
        GTEST_SKIP() << why;
    }
    mesh_config cfg;
    cfg.rank = 0;
    cfg.num_pes = 2;
    cfg.job_key = 7;
    cfg.peers = {pe.l->local(), endpoint{"127.0.0.1", 1}};
    cfg.connect_timeout = 20s;
    mesh m(*pe.b, std::move(pe.l), cfg);
    std::atomic<std::uint64_t> total{0};
    std::string error;
    try {
        sync_wait([](mesh* mp, std::atomic<std::uint64_t>* t) -> task<void> {
            co_await mp->establish();
            co_await all_to_all(0, *mp, 100'000, default_max_payload, t);
            co_await mp->shutdown();
        }(&m, &total));
    } catch (const std::exception& e) {
        error = e.what();
        ::kill(child, SIGKILL);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    EXPECT_EQ(error, "");
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
    EXPECT_EQ(total.load(), 100'000u);
    EXPECT_EQ(m.state(1), connection_state::disconnected);
}

// Cause: receive() ended only at the peer's end of stream, which the peer sends only
// after our own disconnect frame; a PE draining its inbox before calling shutdown() while
// its peer was already shutting down waited forever.
TEST_P(mesh_test, draining_receive_ends_when_the_peer_has_disconnected) {
    auto res = run_job(2, GetParam(), [](std::uint32_t rank, mesh& m) -> task<void> {
        if (rank == 1) {
            std::vector<std::byte> b(100, std::byte{7});
            for (int i = 0; i < 10; ++i) {
                frame_header h;
                if (co_await m.send(0, h, b) != 0) throw std::runtime_error("send failed");
            }
            co_return;  // run_job then calls shutdown()
        }
        int got = 0;
        auto drained = co_await with_timeout(
            [](mesh* mp, int* g) -> task<void> {
                while (co_await mp->receive())
                    ++*g;
            }(&m, &got),
            10s);
        if (!drained) throw std::runtime_error("receive() did not end after the peer's disconnect");
        if (got != 10) throw std::runtime_error("received " + std::to_string(got) + " of 10");
    });
    if (res.skipped) GTEST_SKIP() << res.skip_reason;
    EXPECT_EQ(res.errors[0], "");
    EXPECT_EQ(res.errors[1], "");
}

// ---- CONNECT=lazy ------------------------------------------------------------------------

void make_lazy(mesh_config& c) {
    c.connect = connect_mode::lazy;
}

// Every pair talks at once (each PE sends to all the others from the start), so most pairs
// dial from both ends at the same moment: each must still end with exactly one connection,
// dialed by exactly one of the two, and every frame must arrive in order.
TEST_P(mesh_test, lazy_all_to_all_keeps_order_with_one_connection_per_pair) {
    std::atomic<std::uint64_t> total{0};
    std::vector<std::vector<link_info>> links(4);
    auto res = run_job(
        4, GetParam(),
        [&](std::uint32_t r, mesh& m) -> task<void> {
            co_await all_to_all(r, m, 2000, 0, &total);
            links[r] = m.links();
        },
        make_lazy);
    if (res.skipped) GTEST_SKIP() << res.skip_reason;
    for (std::uint32_t r = 0; r < 4; ++r)
        EXPECT_EQ(res.errors[r], "") << "PE " << r;
    EXPECT_EQ(total.load(), 4u * 3u * 2000u);
    for (std::uint32_t a = 0; a < 4; ++a) {
        ASSERT_EQ(links[a].size(), 3u) << "PE " << a;
        for (const link_info& l : links[a]) {
            EXPECT_TRUE(l.lazily);
            EXPECT_EQ(l.state, connection_state::connected);
            // The other end of the same connection: one dialed it, the other accepted it.
            const auto& other = links[l.pe];
            const auto back = std::find_if(other.begin(), other.end(),
                                           [&](const link_info& o) { return o.pe == a; });
            ASSERT_NE(back, other.end());
            EXPECT_NE(l.dialed, back->dialed) << "PEs " << a << " and " << l.pe;
        }
    }
}

// A ring: each PE sends to the next only. Only neighbours connect; the other pairs stay idle.
TEST_P(mesh_test, lazy_a_ring_connects_only_the_pairs_that_talk) {
    std::vector<std::vector<link_info>> links(4);
    std::vector<connection_state> across(4);
    auto res = run_job(
        4, GetParam(),
        [&](std::uint32_t r, mesh& m) -> task<void> {
            std::vector<std::byte> buf;
            for (std::uint32_t seq = 0; seq < 200; ++seq) {
                buf.resize(size_of(seq, 0));
                fill(buf, r, seq);
                frame_header h;
                if (co_await m.send((r + 1) % 4, h, buf) != 0)
                    throw std::runtime_error("send failed");
            }
            for (std::uint32_t seq = 0; seq < 200; ++seq) {
                auto got = co_await m.receive();
                if (!got || got->from != (r + 3) % 4 ||
                    got->frame.header.payload_length != size_of(seq, 0) ||
                    !check(got->frame.payload_bytes(), got->from, seq))
                    throw std::runtime_error("frame " + std::to_string(seq) + " wrong");
            }
            links[r] = m.links();
            across[r] = m.state((r + 2) % 4);
        },
        make_lazy);
    if (res.skipped) GTEST_SKIP() << res.skip_reason;
    for (std::uint32_t r = 0; r < 4; ++r) {
        EXPECT_EQ(res.errors[r], "") << "PE " << r;
        ASSERT_EQ(links[r].size(), 2u) << "PE " << r;
        for (const link_info& l : links[r])
            EXPECT_TRUE(l.pe == (r + 1) % 4 || l.pe == (r + 3) % 4) << "PE " << r << "-" << l.pe;
        EXPECT_EQ(across[r], connection_state::idle) << "PE " << r;
    }
}

// Two meshes on one scheduler, so the order of events is fixed: both post in the same turn,
// both dials are under way when each side reads the other's hello. PE 0 declines PE 1's
// dial (connect_declined: its own, the lower rank's, carries the pair) and PE 1 adopts PE
// 0's, keeping the frames it had queued behind its own dial.
struct two_lazy_pes {
    scheduler s;
    pe_setup a, b;
    std::optional<mesh> m0, m1;
    std::string why;
    explicit two_lazy_pes(backend_kind kind, std::chrono::milliseconds timeout = 20s)
        : s(options_for(kind)) {
        a = make_pe(s, kind, &why);
        b = make_pe(s, kind, &why);
        if (!a.b || !b.b || !a.l || !b.l) return;
        mesh_config cfg;
        cfg.num_pes = 2;
        cfg.job_key = 0xC0FFEE;
        cfg.peers = {a.l->local(), b.l->local()};
        cfg.connect_timeout = timeout;
        cfg.connect = connect_mode::lazy;
        cfg.rank = 0;
        m0.emplace(*a.b, std::move(a.l), cfg);
        cfg.rank = 1;
        m1.emplace(*b.b, std::move(b.l), cfg);
    }
    bool ok() const { return m0 && m1; }
};

// Receives `n` frames from `from` and checks each (size and bytes of message `seq`).
task<void> expect_frames(mesh* m, std::uint32_t from, std::uint32_t n, std::string* problem) {
    for (std::uint32_t seq = 0; seq < n; ++seq) {
        auto got = co_await m->receive();
        if (!got || got->from != from || got->frame.header.payload_length != size_of(seq, 0) ||
            !check(got->frame.payload_bytes(), from, seq)) {
            *problem = "frame " + std::to_string(seq) + " from PE " + std::to_string(from) +
                       " missing, out of order or corrupt";
            co_return;
        }
    }
}

// Posts `n` numbered frames to `to`; the payloads live in `bufs` until the callbacks ran.
void post_frames(mesh& m, std::uint32_t me, std::uint32_t to, std::uint32_t n,
                 std::vector<std::vector<std::byte>>& bufs, post_counter& counter) {
    bufs.resize(n);
    for (std::uint32_t seq = 0; seq < n; ++seq) {
        bufs[seq].resize(size_of(seq, 0));
        fill(bufs[seq], me, seq);
        if (m.post(to, frame_header{}, bufs[seq], &post_counter::on_sent, &counter) != 0)
            throw std::runtime_error("post failed");
    }
}

TEST_P(mesh_test, lazy_simultaneous_dials_end_with_the_lower_ranks_connection) {
    two_lazy_pes j(GetParam());
    if (!j.ok()) GTEST_SKIP() << j.why;
    std::string p0, p1;
    std::vector<std::vector<std::byte>> b0, b1;
    post_counter c0, c1;
    sync_wait([](two_lazy_pes* t, std::string* e0, std::string* e1,
                 std::vector<std::vector<std::byte>>* q0, std::vector<std::vector<std::byte>>* q1,
                 post_counter* k0, post_counter* k1) -> task<void> {
        co_await t->m0->establish();
        co_await t->m1->establish();
        // The same turn: neither dial has reached the other side yet.
        post_frames(*t->m0, 0, 1, 3000, *q0, *k0);
        post_frames(*t->m1, 1, 0, 3000, *q1, *k1);
        if (t->m0->state(1) != connection_state::connecting ||
            t->m1->state(0) != connection_state::connecting)
            *e0 = "both PEs should be dialing";
        std::vector<task<void>> both;
        both.push_back(expect_frames(&*t->m1, 0, 3000, e1));
        both.push_back(expect_frames(&*t->m0, 1, 3000, e0));
        co_await when_all(std::move(both));
        std::vector<task<void>> down;
        down.push_back(t->m0->shutdown());
        down.push_back(t->m1->shutdown());
        co_await when_all(std::move(down));
    }(&j, &p0, &p1, &b0, &b1, &c0, &c1));
    EXPECT_EQ(p0, "");
    EXPECT_EQ(p1, "");
    EXPECT_EQ(c0.ok, 3000);
    EXPECT_EQ(c1.ok, 3000);
    const auto l0 = j.m0->links(), l1 = j.m1->links();
    ASSERT_EQ(l0.size(), 1u);
    ASSERT_EQ(l1.size(), 1u);
    EXPECT_TRUE(l0[0].dialed) << "PE 0's dial (the lower rank's) carries the pair";
    EXPECT_FALSE(l1[0].dialed) << "PE 1's own dial was declined";
    EXPECT_EQ(l0[0].state, connection_state::disconnected);
    EXPECT_EQ(l1[0].state, connection_state::disconnected);
}

// Frames posted and sent before the peer even accepts wait behind the dial, in order.
TEST_P(mesh_test, lazy_frames_queued_behind_the_dial_arrive_in_order) {
    two_lazy_pes j(GetParam());
    if (!j.ok()) GTEST_SKIP() << j.why;
    std::string problem;
    std::vector<std::vector<std::byte>> bufs;
    post_counter counter;
    sync_wait([](two_lazy_pes* t, std::string* e, std::vector<std::vector<std::byte>>* q,
                 post_counter* k) -> task<void> {
        co_await t->m0->establish();
        post_frames(*t->m0, 0, 1, 5000, *q, *k);
        // Nothing can have gone: PE 1 does not accept yet (its listener only queues the dial).
        co_await sleep_for(50ms);
        if (t->m0->state(1) != connection_state::connecting)
            *e = "PE 0 should still be dialing, it is " + std::string(to_string(t->m0->state(1)));
        if (k->ok + k->failed != 0) *e = "a frame completed before the connection was up";
        co_await t->m1->establish();
        co_await expect_frames(&*t->m1, 0, 5000, e);
        std::vector<task<void>> down;
        down.push_back(t->m0->shutdown());
        down.push_back(t->m1->shutdown());
        co_await when_all(std::move(down));
    }(&j, &problem, &bufs, &counter));
    EXPECT_EQ(problem, "");
    EXPECT_EQ(counter.ok, 5000);
    EXPECT_EQ(counter.failed, 0);
}

// A peer that accepts the TCP connection (the kernel does, for its listener) but never
// answers the hello, and one that does not listen at all: the dial gives up after
// CONNECTION_TIMEOUT, the failure names the PE, its address and the setting, queued frames
// fail, later ones are refused at once.
void expect_dial_gives_up(backend_kind kind, bool listening) {
    scheduler s(options_for(kind));
    std::string why;
    auto pe = make_pe(s, kind, &why);
    if (!pe.b) GTEST_SKIP() << why;
    auto silent = pe.b->listen(endpoint{"127.0.0.1", 0});  // never accepts
    ASSERT_TRUE(silent);
    const endpoint dead = silent.value->local();
    if (!listening) sync_wait(silent.value->close());
    mesh_config cfg;
    cfg.rank = 0;
    cfg.num_pes = 2;
    cfg.peers = {pe.l->local(), dead};
    cfg.connect_timeout = 300ms;
    cfg.connect = connect_mode::lazy;
    cfg.peer_failure_ends_receive = false;
    mesh m(*pe.b, std::move(pe.l), cfg);
    std::vector<std::string> failures;
    m.on_peer_failure([&](std::uint32_t p, const std::string& w) {
        failures.push_back("PE " + std::to_string(p) + ": " + w);
    });
    post_counter counter;
    std::vector<std::byte> payload(100, std::byte{1});
    int late = 0;
    sync_wait([](mesh* mp, post_counter* k, std::vector<std::byte>* b, int* l,
                 std::vector<std::string>* f) -> task<void> {
        co_await mp->establish();
        if (mp->post(1, frame_header{}, *b, &post_counter::on_sent, k) != 0)
            throw std::runtime_error("the first post must queue behind the dial");
        auto gave_up = co_await with_timeout(
            [](std::vector<std::string>* fs) -> task<void> {
                while (fs->empty())
                    co_await sleep_for(10ms);
            }(f),
            10s);
        if (!gave_up) throw std::runtime_error("the dial did not give up");
        *l = mp->post(1, frame_header{}, *b, &post_counter::on_sent, k);
        co_await mp->shutdown();
    }(&m, &counter, &payload, &late, &failures));
    if (listening) sync_wait(silent.value->close());
    ASSERT_EQ(failures.size(), 1u);
    const std::string& w = failures[0];
    EXPECT_NE(w.find("PE 1 (" + dead.to_string() + ")"), std::string::npos) << w;
    EXPECT_NE(w.find("CONNECTION_TIMEOUT"), std::string::npos) << w;
    EXPECT_NE(w.find("timed out after 0.3 s"), std::string::npos) << w;
    if (!listening) {
        EXPECT_NE(w.find("Connection refused"), std::string::npos) << w;
    }
    EXPECT_EQ(counter.failed, 1) << "the queued frame fails with the peer";
    EXPECT_EQ(counter.ok, 0);
    EXPECT_EQ(late, -ENOTCONN);
    EXPECT_EQ(m.state(1), connection_state::error);
}

TEST_P(mesh_test, lazy_a_peer_that_never_answers_fails_naming_it_its_address_and_the_timeout) {
    expect_dial_gives_up(GetParam(), true);
}

TEST_P(mesh_test, lazy_a_peer_nobody_listens_for_fails_naming_it_and_the_refusal) {
    expect_dial_gives_up(GetParam(), false);
}

// The launcher's word that a PE died: with no connection to it, it fails at once, and no
// dial is made afterwards.
TEST_P(mesh_test, lazy_a_peer_the_launcher_reports_dead_fails_without_a_dial) {
    two_lazy_pes j(GetParam());
    if (!j.ok()) GTEST_SKIP() << j.why;
    std::vector<std::string> failures;
    j.m0->on_peer_failure([&](std::uint32_t p, const std::string& w) {
        failures.push_back(std::to_string(p) + ": " + w);
    });
    int rc = 0;
    sync_wait([](two_lazy_pes* t, int* r) -> task<void> {
        co_await t->m0->establish();
        t->m0->peer_gone(1, "PE 1 of 2 (pid 7) was killed by signal 9 (SIGKILL)");
        *r = co_await t->m0->send(1, frame_header{}, {});
        co_await t->m0->shutdown();
        co_await t->m1->shutdown();
    }(&j, &rc));
    ASSERT_EQ(failures.size(), 1u);
    EXPECT_EQ(failures[0], "1: PE 1 of 2 (pid 7) was killed by signal 9 (SIGKILL)");
    EXPECT_EQ(rc, -ENOTCONN);
    EXPECT_EQ(j.m0->state(1), connection_state::error);
}

// post_copy() copies small frames, back to back, into one queued entry per connection: they
// keep one order with posted and awaited frames, the caller's buffer is free again at once,
// a full entry (four 16 KiB frames do not fit its 64 KiB) or one in the writer's hands says
// -EAGAIN (the caller posts instead), bad PEs fail at once, and nothing is called back for
// copies that went.
struct lost_counter {
    int calls = 0;
    std::uint32_t pe = ~0u;
    int result = 0;
    static void on_lost(void* ctx, std::uint32_t pe, int result) {
        auto* l = static_cast<lost_counter*>(ctx);
        ++l->calls;
        l->pe = pe;
        l->result = result;
    }
};

std::size_t copy_size(int i) {
    if (i % 500 == 250) return std::size_t{1} << 20;  // posted: a backlog the copies wait behind
    return i < 4 || i % 50 == 7 ? 16384 : static_cast<std::size_t>(i % 300);
}

task<void> copy_and_receive(std::uint32_t r, mesh& m, int n) {
    const std::uint32_t peer = 1 - r;
    post_counter counter;
    lost_counter lost;
    std::vector<std::vector<std::byte>> kept(static_cast<std::size_t>(n));
    std::vector<std::byte> scratch;
    int copied = 0, refused = 0, posted = 0;
    frame_header h;
    for (int i = 0; i < n; ++i) {
        const auto seq = static_cast<std::uint32_t>(i);
        if (i % 500 == 250) {  // a large posted frame: the writer and the socket stay busy
            kept[i].resize(copy_size(i));
            fill(kept[i], r, seq);
            if (m.post(peer, h, kept[i], &post_counter::on_sent, &counter) != 0)
                throw std::runtime_error("post failed");
            ++posted;
            continue;
        }
        if (i >= 4 && i % 13 == 12) {  // an awaited frame now and then
            kept[i].resize(copy_size(i));
            fill(kept[i], r, seq);
            if (const int rc = co_await m.send(peer, h, kept[i]); rc != 0)
                throw std::runtime_error("send failed: " + std::to_string(rc));
            continue;
        }
        scratch.resize(copy_size(i));
        fill(scratch, r, seq);
        const int rc = m.post_copy(peer, h, scratch, &lost_counter::on_lost, &lost);
        std::fill(scratch.begin(), scratch.end(), std::byte{0xee});  // copied: ours again
        if (i < 4 && rc != (i == 3 ? -EAGAIN : 0))
            throw std::runtime_error("16 KiB copy " + std::to_string(i) + " returned " +
                                     std::to_string(rc) + " (the fourth must not fit)");
        if (rc == 0) {
            ++copied;
        } else if (rc == -EAGAIN) {
            ++refused;
            kept[i].resize(copy_size(i));
            fill(kept[i], r, seq);
            if (m.post(peer, h, kept[i], &post_counter::on_sent, &counter) != 0)
                throw std::runtime_error("post failed");
            ++posted;
        } else {
            throw std::runtime_error("post_copy returned " + std::to_string(rc));
        }
        if (i < 4) continue;  // the first four go into one entry
        if (i % 97 == 0) m.flush();
        if (i % 31 == 0) co_await yield();  // the writer may take the entry meanwhile
    }
    if (m.post_copy(r, h, {}, &lost_counter::on_lost, &lost) != -EINVAL ||
        m.post_copy(7, h, {}, &lost_counter::on_lost, &lost) != -EINVAL)
        throw std::runtime_error("a copy to ourselves or to PE 7 of 2 must fail with -EINVAL");
    m.flush();
    for (int i = 0; i < n; ++i) {
        auto got = co_await m.receive();
        if (!got || got->from != peer)
            throw std::runtime_error("missing frame " + std::to_string(i));
        if (got->frame.header.payload_length != copy_size(i) ||
            !check(got->frame.payload_bytes(), peer, static_cast<std::uint32_t>(i)))
            throw std::runtime_error("frame " + std::to_string(i) + " out of order or corrupt");
    }
    while (counter.ok + counter.failed < posted)
        co_await yield();
    if (counter.ok != posted || counter.failed != 0 || lost.calls != 0)
        throw std::runtime_error("callbacks: " + std::to_string(counter.ok) + " ok, " +
                                 std::to_string(counter.failed) + " failed, " +
                                 std::to_string(lost.calls) + " copies lost");
    if (copied < n / 2 || refused < 1)
        throw std::runtime_error(std::to_string(copied) + " copied, " + std::to_string(refused) +
                                 " refused: the copies should take most frames");
}

TEST_P(mesh_test, copied_frames_keep_one_order_with_posted_ones_and_a_full_entry_refuses) {
    auto res = run_job(2, GetParam(),
                       [](std::uint32_t r, mesh& m) { return copy_and_receive(r, m, 3000); });
    if (res.skipped) GTEST_SKIP() << res.skip_reason;
    EXPECT_EQ(res.errors[0], "");
    EXPECT_EQ(res.errors[1], "");
}

// Copies queued behind a frame the peer never reads, when the peer goes: the lost callback
// runs once, naming the PE, with the error (the machine core stops the job there, as for a
// failed posted frame); copies that went before called nothing.
TEST_P(mesh_test, copies_a_dead_peer_never_took_are_reported_lost_once) {
    scheduler s(options_for(GetParam()));
    std::string why;
    auto pe = make_pe(s, GetParam(), &why);
    if (!pe.b) GTEST_SKIP() << why;
    const mesh_config cfg = fake_peer_job(pe.l->local());
    backend* b = pe.b.get();
    const endpoint at = pe.l->local();
    mesh m(*b, std::move(pe.l), cfg);
    std::string failure;
    m.on_peer_failure([&](std::uint32_t, const std::string& w) { failure = w; });
    lost_counter lost;
    post_counter counter;
    int before = -1, queued = -1;
    bool reported = false;
    // A frame larger than the socket buffers holds the writer; copies queue behind it. It
    // outlives the mesh: a writer may still read it until shutdown.
    std::vector<std::byte> big(std::size_t{48} << 20, std::byte{2});
    sync_wait([](mesh* mp, backend* bp, endpoint to, lost_counter* l, post_counter* pc,
                 const std::vector<std::byte>* large, int* early, int* late,
                 bool* seen) -> task<void> {
        event go;
        std::string peer_error;
        task_scope peer("fake peer");
        // A peer that says hello, never reads, and closes when told.
        peer.spawn(fake_peer(bp, to, {}, true, &peer_error, &go), "fake peer");
        co_await mp->establish();
        frame_header h;
        std::vector<std::byte> small(100, std::byte{1});
        // Copies that go: nothing is called. The awaited frame behind them completes once
        // they are in the kernel too.
        *early = mp->post_copy(1, h, small, &lost_counter::on_lost, l);
        if (co_await mp->send(1, h, small) != 0) throw std::runtime_error("send");
        if (mp->post(1, h, *large, &post_counter::on_sent, pc) != 0)
            throw std::runtime_error("post");
        mp->flush();
        for (int i = 0; i < 20; ++i)
            co_await yield();
        *late = mp->post_copy(1, h, small, &lost_counter::on_lost, l);
        if (*late == 0) (void)mp->post_copy(1, h, small, &lost_counter::on_lost, l);
        go.set();
        for (int i = 0; i < 5000 && (l->calls == 0 || pc->ok + pc->failed == 0); ++i)
            co_await sleep_for(1ms);
        *seen = true;
        co_await peer.join();
    }(&m, b, at, &lost, &counter, &big, &before, &queued, &reported));
    try {
        sync_wait(m.shutdown());
    } catch (const mesh_error&) {
    }
    ASSERT_TRUE(reported);
    EXPECT_EQ(before, 0);
    EXPECT_EQ(queued, 0);
    EXPECT_EQ(lost.calls, 1);
    EXPECT_EQ(lost.pe, 1u);
    EXPECT_LT(lost.result, 0);
    EXPECT_EQ(counter.failed, 1);
    EXPECT_NE(failure.find("PE 1"), std::string::npos) << failure;
}

// A connection's copies sent in part by a flush (PE 1 does not read at first, so PE 0's
// socket fills), then appended to, their buffer moved as it grows, before the rest goes:
// every frame arrives whole and in order. Frames of ~16 KiB, every 17th empty.
std::size_t partial_copy_size(int i) {
    return i % 17 == 0 ? 0 : static_cast<std::size_t>(16384 - (i * 37) % 64);
}

task<void> copies_sent_in_part(std::uint32_t r, mesh& m, int n) {
    frame_header h;
    if (r == 1) {
        std::this_thread::sleep_for(400ms);  // not reading: PE 0's flushes send in part
        for (int i = 0; i < n; ++i) {
            auto got = co_await m.receive();
            if (!got) throw std::runtime_error("frame " + std::to_string(i) + " never came");
            if (got->frame.header.payload_length != partial_copy_size(i) ||
                !check(got->frame.payload_bytes(), 0, static_cast<std::uint32_t>(i)))
                throw std::runtime_error("frame " + std::to_string(i) + " arrived altered (" +
                                         std::to_string(got->frame.header.payload_length) +
                                         " bytes)");
        }
        co_return;
    }
    lost_counter lost;
    std::vector<std::byte> scratch;
    for (int i = 0; i < n;) {
        scratch.resize(partial_copy_size(i));
        fill(scratch, 0, static_cast<std::uint32_t>(i));
        const int rc = m.post_copy(1, h, scratch, &lost_counter::on_lost, &lost);
        if (rc == 0) {
            ++i;
            m.flush();
            continue;
        }
        if (rc != -EAGAIN) throw std::runtime_error("post_copy returned " + std::to_string(rc));
        co_await yield();  // the writer has the entry: let it send
    }
    m.flush();
    co_await sleep_for(200ms);
}

TEST_P(mesh_test, copies_sent_in_part_then_appended_to_arrive_whole_and_in_order) {
    auto res = run_job(2, GetParam(),
                       [](std::uint32_t r, mesh& m) { return copies_sent_in_part(r, m, 3000); });
    if (res.skipped) GTEST_SKIP() << res.skip_reason;
    EXPECT_EQ(res.errors[0], "");
    EXPECT_EQ(res.errors[1], "");
}

// post_copy() sends the first frame since the last flush() on an idle connection itself
// (mesh::send_copies_now): PE 1 has it while PE 0's loop stands still. The frames after it
// wait for flush(), to leave together; after a flush that sent several frames, the next one
// waits for flush() too (a burst's first frame sent alone would cost the receiver a second
// arrival), until a flush sends a lone frame again. Asio's stream has no send at once: there
// every frame waits for the loop.
task<void> copies_sent_at_once(std::uint32_t r, mesh& m, backend_kind kind,
                               std::atomic<int>* arrived) {
    constexpr int frames = 8;
    frame_header h;
    if (r == 1) {
        if (co_await m.send(0, h, {}) != 0) throw std::runtime_error("PE 1's ready frame");
        for (int i = 0; i < frames; ++i) {
            auto got = co_await m.receive();
            if (!got || !check(got->frame.payload_bytes(), 0, static_cast<std::uint32_t>(i)))
                throw std::runtime_error("frame " + std::to_string(i) + " missing or out of order");
            arrived->store(i + 1);
        }
        co_return;
    }
    // Its loop has turned since the connection came up: the writer idles.
    if (!co_await m.receive()) throw std::runtime_error("PE 1's ready frame never came");
    const bool at_once = kind != backend_kind::asio;
    // PE 0's loop stands still meanwhile: only what a call sent itself can arrive. A frame
    // that should not have left is given 50 ms to show that it did.
    const auto arrivals = [arrived](int want) {
        if (want <= arrived->load()) {
            std::this_thread::sleep_for(50ms);
            return arrived->load();
        }
        const auto end = std::chrono::steady_clock::now() + 10s;
        while (arrived->load() < want && std::chrono::steady_clock::now() < end)
            std::this_thread::sleep_for(1ms);
        return arrived->load();
    };
    lost_counter lost;
    std::vector<std::byte> word(8);
    int next = 0;
    const auto copy = [&] {
        fill(word, 0, static_cast<std::uint32_t>(next++));
        if (const int rc = m.post_copy(1, h, word, &lost_counter::on_lost, &lost); rc != 0)
            throw std::runtime_error("post_copy returned " + std::to_string(rc));
    };
    const auto expect = [&](int want, const char* what) {
        const int got = arrivals(want);
        if (got != want)
            throw std::runtime_error(std::string(what) + ": " + std::to_string(got) +
                                     " frames arrived, expected " + std::to_string(want));
    };
    copy();  // 0: a lone frame on an idle connection
    expect(at_once ? 1 : 0, "the first frame, with the loop standing still");
    copy();  // 1: the second since the last flush waits for the next
    expect(at_once ? 1 : 0, "the second frame before flush()");
    m.flush();
    expect(at_once ? 2 : 0, "after flush()");
    copy();  // 2: at once again; 3 and 4 leave together at flush(), a burst
    copy();
    copy();
    expect(at_once ? 3 : 0, "a burst's first frame");
    m.flush();
    expect(at_once ? 5 : 0, "a burst's rest after flush()");
    copy();  // 5: after a burst, waits for flush()
    expect(at_once ? 5 : 0, "the frame after a burst, before flush()");
    m.flush();
    expect(at_once ? 6 : 0, "the frame after a burst, after flush()");
    copy();  // 6: a flush of one frame ends the burst: at once again
    expect(at_once ? 7 : 0, "the frame after a lone flushed one");
    copy();
    m.flush();
    while (arrived->load() < frames)
        co_await sleep_for(1ms);  // the loop turns: Asio's writer sends them all
    if (lost.calls != 0) throw std::runtime_error("copies reported lost");
}

TEST_P(mesh_test, a_lone_copied_frame_leaves_at_once_and_a_burst_waits_for_flush) {
    const backend_kind kind = GetParam();
    std::atomic<int> arrived{0};
    auto res = run_job(2, kind, [kind, &arrived](std::uint32_t r, mesh& m) {
        return copies_sent_at_once(r, m, kind, &arrived);
    });
    if (res.skipped) GTEST_SKIP() << res.skip_reason;
    EXPECT_EQ(res.errors[0], "");
    EXPECT_EQ(res.errors[1], "");
    EXPECT_EQ(arrived.load(), 8);
}

// Credits the layer above hands out for a frame as it leaves (frame_hook::credits_for) ride
// in the header of copied frames too: every credit handed out by PE 0 arrives at PE 1.
struct crediting_hook final : frame_hook {
    std::atomic<unsigned> handed{0}, seen{0};
    std::byte* place(std::uint32_t, const frame_header&) noexcept override { return nullptr; }
    bool take(std::uint32_t, frame& f) override {
        seen += f.header.credits;
        return false;  // to the inbox
    }
    std::uint16_t credits_for(std::uint32_t, frame_type) noexcept override {
        ++handed;
        return 1;
    }
};

TEST_P(mesh_test, credits_stamped_on_copied_frames_reach_the_peer) {
    crediting_hook hooks[2];
    auto res = run_job(2, GetParam(), [&hooks](std::uint32_t r, mesh& m) -> task<void> {
        m.set_frame_hook(&hooks[r]);
        frame_header h;
        const std::byte word[8] = {};
        if (r == 1) {
            if (co_await m.send(0, h, word) != 0) throw std::runtime_error("PE 1's ready frame");
            for (int got = 0; got < 101; ++got)
                if (!co_await m.receive()) throw std::runtime_error("a frame never came");
            co_return;
        }
        if (!co_await m.receive()) throw std::runtime_error("PE 1's ready frame never came");
        lost_counter lost;
        for (int i = 0; i < 100; ++i) {
            if (const int rc = m.post_copy(1, h, word, &lost_counter::on_lost, &lost); rc != 0)
                throw std::runtime_error("post_copy returned " + std::to_string(rc));
            if (i % 3 == 2) m.flush();  // one frame or several per entry
        }
        if (co_await m.send(1, h, word) != 0) throw std::runtime_error("the last frame");
    });
    if (res.skipped) GTEST_SKIP() << res.skip_reason;
    EXPECT_EQ(res.errors[0], "");
    EXPECT_EQ(res.errors[1], "");
    // Asked once per leaving entry (a copies entry's frames share its first header): at
    // least one per flush of three copies.
    EXPECT_GE(hooks[0].handed.load(), 34u);
    EXPECT_EQ(hooks[1].seen.load(), hooks[0].handed.load())
        << "credits handed out for frames to PE 1 that did not arrive with them";
}

INSTANTIATE_TEST_SUITE_P(backends, mesh_test,
                         ::testing::Values(backend_kind::io_uring, backend_kind::asio),
                         [](const auto& info) { return kind_name(info.param); });

}  // namespace
}  // namespace coverse::net::test

namespace coverse::net::test {
namespace {
TEST(mesh_config_test, connection_timeout_comes_from_the_environment) {
    ::unsetenv("COVERSE_CONNECTION_TIMEOUT");
    ::unsetenv("CMI_VMI_CONNECTION_TIMEOUT");
    ::unsetenv("CONNECTION_TIMEOUT");
    EXPECT_EQ(connection_timeout_from_env(), std::chrono::seconds(300));
    ::setenv("CMI_VMI_CONNECTION_TIMEOUT", "12", 1);
    EXPECT_EQ(connection_timeout_from_env(), std::chrono::seconds(12));
    ::setenv("COVERSE_CONNECTION_TIMEOUT", "0.5", 1);  // the coverse spelling wins
    EXPECT_EQ(connection_timeout_from_env(), std::chrono::milliseconds(500));
    ::setenv("COVERSE_CONNECTION_TIMEOUT", "soon", 1);
    try {
        (void)connection_timeout_from_env();
        ADD_FAILURE() << "a malformed timeout must be refused";
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("COVERSE_CONNECTION_TIMEOUT=soon"), std::string::npos);
    }
    ::unsetenv("COVERSE_CONNECTION_TIMEOUT");
    ::unsetenv("CMI_VMI_CONNECTION_TIMEOUT");
}

// The error texts told users to set COVERSE_MAX_MESSAGE, but nothing read it: mesh_config
// always used the 64 MiB default. MAX_MESSAGE now bounds rendezvous offers (what a peer may
// ask us to allocate); a frame stays bounded by default_max_payload.
TEST(mesh_config_test, max_message_comes_from_the_settings) {
    ::unsetenv("COVERSE_MAX_MESSAGE");
    ::unsetenv("CMI_VMI_MAX_MESSAGE");
    ::unsetenv("MAX_MESSAGE");
    EXPECT_EQ(max_message_from_env(), default_max_message);
    EXPECT_EQ(mesh_config{}.max_payload, default_max_payload);
    ::setenv("COVERSE_MAX_MESSAGE", "1024", 1);
    EXPECT_EQ(max_message_from_env(), 1024u);
    EXPECT_EQ(mesh_config{}.max_payload, default_max_payload);  // a frame's bound stays
    alloc::set_command_line_setting("MAX_MESSAGE", "2048");     // ++set wins over the environment
    EXPECT_EQ(max_message_from_env(), 2048u);
    alloc::clear_command_line_settings();
    // One size parser for every size setting: MAX_MESSAGE takes K/M/G like TRACE_LIMIT (it
    // refused "64M" while TRACE_LIMIT took it).
    ::setenv("COVERSE_MAX_MESSAGE", "64M", 1);
    EXPECT_EQ(max_message_from_env(), 64u << 20);
    ::setenv("COVERSE_MAX_MESSAGE", "512KiB", 1);
    EXPECT_EQ(max_message_from_env(), 512u << 10);
    for (const char* bad : {"0", "2147483648", "4G", "64X", "M"}) {
        ::setenv("COVERSE_MAX_MESSAGE", bad, 1);
        try {
            (void)max_message_from_env();
            ADD_FAILURE() << bad << " must be refused";
        } catch (const std::invalid_argument& e) {
            EXPECT_NE(std::string(e.what()).find(std::string("COVERSE_MAX_MESSAGE=") + bad),
                      std::string::npos)
                << e.what();
        }
    }
    ::unsetenv("COVERSE_MAX_MESSAGE");
}
}  // namespace
}  // namespace coverse::net::test
