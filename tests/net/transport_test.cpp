// Tests of the stream transport, run over every backend (io_uring with plain and with
// multishot receive, Asio): connection set-up, ordered and complete delivery of gathers and
// big transfers, EOF and peer loss, refused connects, cancellation by stop request and by
// close(), and frames dropped mid-request; then what only multishot receive has (a full
// buffer ring, stops that leave the request armed, close and destruction while armed).
// A backend or mode this machine (or this build) lacks is skipped with its reason.
#include <coverse/net/transport.hpp>

#include <gtest/gtest.h>
#include <coverse/test/scoped_env.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <coverse/runtime/runtime.hpp>

namespace coverse::net {
namespace {

using namespace std::chrono_literals;

// Every test body runs under this bound: a transport bug fails the test, never hangs it.
constexpr auto test_limit = 60s;

using stream_ptr = std::unique_ptr<stream>;
using stream_pair = std::pair<stream_ptr, stream_ptr>;

// ASSERT_* cannot be used inside a coroutine (it expands to `return`): throw instead.
void require(bool ok, const std::string& what) {
    if (!ok) throw std::runtime_error(what);
}

std::string err(int e) {
    return std::to_string(e) + " (" + std::strerror(e < 0 ? -e : e) + ")";
}

std::byte pattern_at(std::size_t i) {
    return static_cast<std::byte>(((i * 2654435761u) >> 13) ^ (i >> 16));
}

std::vector<std::byte> pattern(std::size_t n, std::size_t offset = 0) {
    std::vector<std::byte> v(n);
    for (std::size_t i = 0; i < n; ++i)
        v[i] = pattern_at(offset + i);
    return v;
}

std::span<const std::byte> bytes_of(const std::string& s) {
    return std::as_bytes(std::span<const char>(s.data(), s.size()));
}

task<int> send_one(stream* s, std::span<const std::byte> data) {
    const std::span<const std::byte> parts[] = {data};
    co_return co_await s->send_all(parts);
}

task<int> send_text(stream* s, std::string text) {
    co_return co_await send_one(s, bytes_of(text));
}

// Reads exactly `n` bytes (or throws naming what came instead).
task<std::vector<std::byte>> recv_exactly(stream* s, std::size_t n, std::size_t chunk = 65536) {
    std::vector<std::byte> out(n);
    std::size_t got = 0;
    while (got < n) {
        const std::size_t want = std::min(chunk, n - got);
        const int r = co_await s->recv_some(std::span<std::byte>(out.data() + got, want));
        require(r > 0, "recv_some after " + std::to_string(got) + " of " + std::to_string(n) +
                           " bytes returned " + err(r));
        got += static_cast<std::size_t>(r);
    }
    co_return out;
}

std::string text_of(std::span<const std::byte> b) {
    return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

task<std::string> recv_text(stream* s, std::size_t n) {
    auto b = co_await recv_exactly(s, n);
    co_return text_of(b);
}

// A listener on port 0, one connect and one accept, run concurrently.
task<stream_pair> connected_pair(backend* net) {
    auto l = net->listen(endpoint{"127.0.0.1", 0});
    require(l.error == 0 && l.value, "listen: " + err(l.error));
    require(l.value->local().port != 0, "listen on port 0 reported port 0");
    auto [accepted, connected] =
        co_await when_all(l.value->accept(), net->connect(l.value->local()));
    co_await l.value->close();
    require(accepted.error == 0, "accept: " + err(accepted.error));
    require(connected.error == 0, "connect: " + err(connected.error));
    co_return stream_pair{std::move(connected.value), std::move(accepted.value)};
}

task<void> close_both(stream_pair& p) {
    co_await p.first->close();
    co_await p.second->close();
}

using coverse::test::scoped_env;

// A backend and, for io_uring, its receive mode (COVERSE_RECV_MULTISHOT and
// COVERSE_RECV_SPIN, set for the whole test so that a backend re-made inside it keeps the
// mode).
struct transport_param {
    backend_kind kind;
    const char* multishot;  // "0", "1", or null: not an io_uring setting
    const char* spin;       // the same for RECV_SPIN
    const char* name;
};

const transport_param io_uring_plain{backend_kind::io_uring, "0", "0", "io_uring"};
const transport_param io_uring_spin{backend_kind::io_uring, "0", "1", "io_uring_spin"};
const transport_param io_uring_multishot{backend_kind::io_uring, "1", "0", "io_uring_multishot"};
const transport_param asio_param{backend_kind::asio, nullptr, nullptr, "asio"};

class transport_test : public ::testing::TestWithParam<transport_param> {
protected:
    void SetUp() override {
        _frames_before = live_task_frames();
        if (GetParam().multishot) _mode.emplace("COVERSE_RECV_MULTISHOT", GetParam().multishot);
        if (GetParam().spin) _spin_mode.emplace("COVERSE_RECV_SPIN", GetParam().spin);
        scheduler_options o;
        o.spin = loop_spin();
        // The Asio backend serves schedulers without a ring; the ring is SINGLE_ISSUER, so
        // it is created here, on the thread that uses it.
        o.use_io_uring = GetParam().kind != backend_kind::asio;
        sched.emplace(o);
        if (multishot() && sched->io() && !sched->io()->features().buf_ring)
            GTEST_SKIP() << "this kernel cannot register provided-buffer rings, which "
                            "multishot receive needs ("
                         << sched->io()->describe() << ")";
        make();
        if (!IsSkipped() && GetParam().kind == backend_kind::io_uring) {
            const bool on = net->describe().find("recv_multishot=on") != std::string::npos;
            EXPECT_EQ(on, multishot()) << net->describe();
            const bool spins = net->describe().find("recv_spin=on") != std::string::npos;
            EXPECT_EQ(spins, recv_spin()) << net->describe();
        }
    }
    // How long the loop spins before it sleeps (the spinning receive's budget too).
    virtual std::chrono::microseconds loop_spin() const { return 20us; }
    void TearDown() override {
        net.reset();
        sched.reset();
        EXPECT_EQ(live_task_frames(), _frames_before) << "coroutine frames leaked";
    }
    // (Re)makes the backend, e.g. after changing its environment settings.
    void make() {
        std::string why;
        net = make_backend(*sched, GetParam().kind, &why);
        if (!net) GTEST_SKIP() << why;
    }
    bool multishot() const { return GetParam().multishot && GetParam().multishot[0] == '1'; }
    bool recv_spin() const { return GetParam().spin && GetParam().spin[0] == '1'; }
    // Runs a test body on the scheduler, bounded.
    void run(task<void> body) {
        const bool finished = sync_wait(with_timeout(std::move(body), test_limit));
        EXPECT_TRUE(finished) << "the test body did not finish within its time limit";
    }

    std::optional<scheduler> sched;
    std::unique_ptr<backend> net;

private:
    std::int64_t _frames_before = 0;
    std::optional<scoped_env> _mode;
    std::optional<scoped_env> _spin_mode;
};

std::string param_name(const ::testing::TestParamInfo<transport_param>& info) {
    return info.param.name;
}

INSTANTIATE_TEST_SUITE_P(backends, transport_test,
                         ::testing::Values(io_uring_plain, io_uring_spin, io_uring_multishot,
                                           asio_param),
                         param_name);

TEST_P(transport_test, names_and_describes_itself) {
    EXPECT_EQ(net->name(), GetParam().kind == backend_kind::io_uring ? "io_uring" : "asio");
    EXPECT_FALSE(net->describe().empty());
}

task<void> exchange_body(backend* net) {
    auto p = co_await connected_pair(net);
    EXPECT_EQ(p.first->peer_name().rfind("127.0.0.1:", 0), 0u) << p.first->peer_name();
    EXPECT_EQ(p.second->peer_name().rfind("127.0.0.1:", 0), 0u) << p.second->peer_name();
    EXPECT_NE(p.first->peer_name(), "127.0.0.1:0");
    require(co_await send_text(p.first.get(), "ping") == 0, "send ping");
    EXPECT_EQ(co_await recv_text(p.second.get(), 4), "ping");
    require(co_await send_text(p.second.get(), "pong!") == 0, "send pong");
    EXPECT_EQ(co_await recv_text(p.first.get(), 5), "pong!");
    co_await close_both(p);
}

TEST_P(transport_test, listen_on_port_zero_connect_and_exchange_both_ways) {
    run(exchange_body(net.get()));
}

task<void> gather_body(backend* net) {
    auto p = co_await connected_pair(net);
    const std::string a = "header:", b = "x", c = "tail";
    const auto big = pattern(100'000);
    // Empty parts at the start, in the middle and at the end; more parts than fit inline.
    std::vector<std::span<const std::byte>> parts = {
        {}, bytes_of(a), {},          {},          bytes_of(b), big,
        {}, bytes_of(c), bytes_of(a), bytes_of(b), bytes_of(c), {}};
    std::vector<std::byte> want;
    for (auto s : parts)
        want.insert(want.end(), s.begin(), s.end());
    auto [sent, got] = co_await when_all(p.first->send_all(parts),
                                         recv_exactly(p.second.get(), want.size(), 1000));
    EXPECT_EQ(sent, 0) << err(sent);
    EXPECT_TRUE(got == want) << "the gather arrived altered or out of order";
    // All-empty gather: nothing to send, success.
    const std::span<const std::byte> empties[] = {{}, {}};
    EXPECT_EQ(co_await p.first->send_all(empties), 0);
    EXPECT_EQ(co_await p.first->send_all({}), 0);
    co_await close_both(p);
}

TEST_P(transport_test, send_all_of_a_gather_with_empty_parts_arrives_in_order) {
    run(gather_body(net.get()));
}

// Receives `n` bytes in chunks of awkward sizes and checks each byte against the pattern;
// with `pause_every`, sleeps a little each time that many more bytes have come in (so that a
// multishot receive's buffer ring runs dry again and again).
task<std::size_t> recv_pattern(stream* s, std::size_t n, std::size_t pause_every = 0) {
    std::vector<std::byte> buf(4093);
    std::size_t got = 0, bad = static_cast<std::size_t>(-1);
    std::size_t next_pause = pause_every;
    unsigned turn = 0;
    while (got < n) {
        if (pause_every && got >= next_pause) {
            co_await sleep_for(5ms);
            next_pause += pause_every;
        }
        const std::size_t want = std::min<std::size_t>(1 + (turn++ * 977) % buf.size(), n - got);
        const int r = co_await s->recv_some(std::span<std::byte>(buf.data(), want));
        require(r > 0, "recv_some after " + std::to_string(got) + " bytes returned " + err(r));
        for (int i = 0; i < r && bad == static_cast<std::size_t>(-1); ++i)
            if (buf[static_cast<std::size_t>(i)] != pattern_at(got + static_cast<std::size_t>(i)))
                bad = got + static_cast<std::size_t>(i);
        got += static_cast<std::size_t>(r);
    }
    require(bad == static_cast<std::size_t>(-1), "byte " + std::to_string(bad) + " is wrong");
    co_return got;
}

task<void> big_transfer_body(backend* net, std::size_t total) {
    auto p = co_await connected_pair(net);
    const auto data = pattern(total);
    // Three parts of uneven size, so slices and part boundaries fall mid-receive.
    const std::size_t cut1 = total / 3 + 7, cut2 = total - 12345;
    const std::span<const std::byte> all(data);
    const std::span<const std::byte> parts[] = {all.subspan(0, cut1),
                                                all.subspan(cut1, cut2 - cut1), all.subspan(cut2)};
    auto [sent, got] =
        co_await when_all(p.first->send_all(parts), recv_pattern(p.second.get(), total));
    EXPECT_EQ(sent, 0) << err(sent);
    EXPECT_EQ(got, total);
    co_await close_both(p);
}

TEST_P(transport_test, a_64_mib_transfer_arrives_complete_and_in_order_through_small_reads) {
    run(big_transfer_body(net.get(), 64u << 20));
}

TEST_P(transport_test, a_big_transfer_with_zero_copy_send_forced_on) {
    // COVERSE_ZC_THRESHOLD=1: every send of this backend is a zero-copy send (where the
    // kernel has it); its buffers must live until the notification CQE.
    scoped_env zc("COVERSE_ZC_THRESHOLD", "1");
    make();
    if (IsSkipped()) return;
    if (GetParam().kind == backend_kind::io_uring && sched->io()->features().send_zc) {
        EXPECT_NE(net->describe().find("zc_threshold=1 "), std::string::npos) << net->describe();
    }
    run(big_transfer_body(net.get(), 16u << 20));
    run(gather_body(net.get()));
}

task<void> many_small_body(backend* net) {
    auto p = co_await connected_pair(net);
    constexpr std::uint32_t count = 20'000;
    auto sender = [](stream* s) -> task<int> {
        for (std::uint32_t i = 0; i < count; ++i) {
            std::byte msg[8];
            std::memcpy(msg, &i, 4);
            const std::uint32_t check = ~i;
            std::memcpy(msg + 4, &check, 4);
            const int r = co_await send_one(s, msg);
            if (r != 0) co_return r;
        }
        co_return 0;
    };
    auto [sent, got] = co_await when_all(sender(p.first.get()),
                                         recv_exactly(p.second.get(), std::size_t{count} * 8));
    EXPECT_EQ(sent, 0) << err(sent);
    for (std::uint32_t i = 0; i < count; ++i) {
        std::uint32_t v = 0, check = 0;
        std::memcpy(&v, got.data() + i * 8, 4);
        std::memcpy(&check, got.data() + i * 8 + 4, 4);
        if (v != i || check != ~i) {
            ADD_FAILURE() << "message " << i << " arrived as " << v;
            break;
        }
    }
    co_await close_both(p);
}

TEST_P(transport_test, many_small_sends_arrive_in_order) {
    run(many_small_body(net.get()));
}

task<void> eof_body(backend* net) {
    auto p = co_await connected_pair(net);
    require(co_await send_text(p.first.get(), "bye") == 0, "send bye");
    p.first->shutdown_send();
    EXPECT_EQ(co_await recv_text(p.second.get(), 3), "bye");
    std::byte b[16];
    // Results go to named locals: GCC 12 mishandles co_await inside gtest's macros.
    const int first_eof = co_await p.second->recv_some(b);
    EXPECT_EQ(first_eof, 0) << "end of stream after shutdown_send";
    const int second_eof = co_await p.second->recv_some(b);
    EXPECT_EQ(second_eof, 0) << "end of stream stays";
    // Half-close: the other direction still works.
    require(co_await send_text(p.second.get(), "still here") == 0, "send back");
    EXPECT_EQ(co_await recv_text(p.first.get(), 10), "still here");
    co_await close_both(p);
}

TEST_P(transport_test, recv_returns_zero_at_eof_after_shutdown_send) {
    run(eof_body(net.get()));
}

// Asio 1.22's epoll reactor counts a stream read or send that moves no bytes (end of
// stream, or an error) as "exhausted" and defers the next one to an edge-triggered event
// that, once the end or the reset has been reported, never comes: a second recv_some after
// EOF hung. Every call here is bounded by a short limit, so a hang fails fast and by name.
task<std::optional<int>> bounded_recv(stream* s, std::span<std::byte> buf) {
    co_return co_await with_timeout(s->recv_some(buf), 5s);
}

task<std::optional<int>> bounded_send(stream* s, std::string text) {
    co_return co_await with_timeout(send_text(s, std::move(text)), 5s);
}

// A call that hit the limit is stopped: it returns -ECANCELED, or nothing at all.
bool prompt(const std::optional<int>& r) {
    return r && *r != -ECANCELED;
}

std::string show(const std::optional<int>& r) {
    return prompt(r) ? err(*r) : "no result within the limit";
}

task<void> eof_repeats_body(backend* net) {
    auto p = co_await connected_pair(net);
    std::byte b[16];
    // The end of stream arrives while a read waits for it (the reactor completes it) ...
    auto half_close = [](stream* s) -> task<void> {
        co_await sleep_for(5ms);
        s->shutdown_send();
    };
    auto [waited, none] =
        co_await when_all(bounded_recv(p.second.get(), b), half_close(p.first.get()));
    EXPECT_EQ(waited, std::optional<int>(0)) << show(waited);
    for (int i = 0; i < 3; ++i) {
        const std::optional<int> again = co_await bounded_recv(p.second.get(), b);
        EXPECT_EQ(again, std::optional<int>(0)) << "read " << i + 2 << ": " << show(again);
    }
    // ... and is already there when the reads start (the first one completes at once).
    p.second->shutdown_send();
    co_await sleep_for(5ms);
    for (int i = 0; i < 3; ++i) {
        const std::optional<int> r = co_await bounded_recv(p.first.get(), b);
        EXPECT_EQ(r, std::optional<int>(0)) << "read " << i + 1 << ": " << show(r);
    }
    co_await close_both(p);
}

TEST_P(transport_test, every_recv_after_eof_returns_zero_at_once) {
    run(eof_repeats_body(net.get()));
}

task<void> reset_repeats_body(backend* net) {
    auto p = co_await connected_pair(net);
    require(co_await send_text(p.first.get(), "unread") == 0, "send unread");
    co_await sleep_for(5ms);
    co_await p.second->close();  // unread data: the kernel resets the connection
    co_await sleep_for(20ms);
    std::byte b[16];
    for (int i = 0; i < 3; ++i) {
        const std::optional<int> r = co_await bounded_recv(p.first.get(), b);
        EXPECT_TRUE(prompt(r) && *r <= 0) << "read " << i + 1 << ": " << show(r);
    }
    for (int i = 0; i < 3; ++i) {
        const std::optional<int> r = co_await bounded_send(p.first.get(), "late");
        EXPECT_TRUE(prompt(r) && *r < 0) << "send " << i + 1 << ": " << show(r);
    }
    co_await p.first->close();
}

TEST_P(transport_test, every_recv_and_send_after_a_reset_returns_at_once) {
    run(reset_repeats_body(net.get()));
}

task<void> reader_closes_body(backend* net) {
    auto p = co_await connected_pair(net);
    const auto data = pattern(64u << 20);  // far more than the socket buffers hold
    auto reader_quits = [](stream* s) -> task<void> {
        std::vector<std::byte> buf(1000);
        [[maybe_unused]] int r = co_await s->recv_some(buf);
        co_await s->close();  // unread data: the kernel resets the connection
    };
    auto [sent, none] =
        co_await when_all(send_one(p.first.get(), data), reader_quits(p.second.get()));
    EXPECT_TRUE(sent == -ECONNRESET || sent == -EPIPE) << "sender got " << err(sent);
    co_await close_both(p);
}

TEST_P(transport_test, sender_gets_reset_or_pipe_when_the_reader_closes_mid_transfer) {
    run(reader_closes_body(net.get()));
}

task<void> writer_closes_body(backend* net) {
    auto p = co_await connected_pair(net);
    const auto data = pattern(4u << 20);
    auto writer_quits = [](stream* s, std::span<const std::byte> d) -> task<void> {
        // Part of the data, then close with a send still in flight.
        co_await when_all(
            [](stream* s2, std::span<const std::byte> d2) -> task<void> {
                [[maybe_unused]] int r = co_await send_one(s2, d2);
            }(s, d),
            [](stream* s2) -> task<void> {
                co_await sleep_for(5ms);
                co_await s2->close();
            }(s));
    };
    auto reader = [](stream* s) -> task<int> {
        std::vector<std::byte> buf(65536);
        for (;;) {
            co_await sleep_for(1ms);  // slow reader: the writer's send is still going on
            const int r = co_await s->recv_some(buf);
            if (r <= 0) co_return r;
        }
    };
    auto [none, last] =
        co_await when_all(writer_quits(p.first.get(), data), reader(p.second.get()));
    EXPECT_TRUE(last == 0 || last == -ECONNRESET) << "reader ended with " << err(last);
    co_await close_both(p);
}

TEST_P(transport_test, reader_gets_eof_or_reset_when_the_writer_closes_mid_transfer) {
    run(writer_closes_body(net.get()));
}

task<void> refused_body(backend* net) {
    // A port that was just free: listen on 0, note the port, close.
    auto l = net->listen(endpoint{"127.0.0.1", 0});
    require(l.error == 0, "listen: " + err(l.error));
    const endpoint to = l.value->local();
    co_await l.value->close();
    auto c = co_await net->connect(to);
    EXPECT_EQ(c.error, -ECONNREFUSED) << err(c.error);
    EXPECT_EQ(c.value, nullptr);
}

TEST_P(transport_test, connect_to_a_port_nobody_listens_on_is_refused) {
    run(refused_body(net.get()));
}

task<void> stop_recv_body(backend* net) {
    auto p = co_await connected_pair(net);
    std::vector<std::byte> buf(64);
    auto r = co_await with_timeout(p.second->recv_some(buf), 20ms);  // nobody sends
    EXPECT_TRUE(r.has_value() && *r == -ECANCELED) << (r ? err(*r) : "no result");
    // The cancelled receive took nothing: the stream still works.
    require(co_await send_text(p.first.get(), "after") == 0, "send after cancel");
    EXPECT_EQ(co_await recv_text(p.second.get(), 5), "after");
    co_await close_both(p);
}

TEST_P(transport_test, a_stop_request_cancels_a_pending_recv) {
    run(stop_recv_body(net.get()));
}

task<void> stop_accept_body(backend* net) {
    auto l = net->listen(endpoint{"127.0.0.1", 0});
    require(l.error == 0, "listen: " + err(l.error));
    auto a = co_await with_timeout(l.value->accept(), 20ms);  // nobody connects
    EXPECT_TRUE(a.has_value() && a->error == -ECANCELED) << (a ? err(a->error) : "no result");
    // Still listening after a cancelled accept.
    auto [accepted, connected] =
        co_await when_all(l.value->accept(), net->connect(l.value->local()));
    EXPECT_EQ(accepted.error, 0) << err(accepted.error);
    EXPECT_EQ(connected.error, 0) << err(connected.error);
    if (accepted.value) co_await accepted.value->close();
    if (connected.value) co_await connected.value->close();
    co_await l.value->close();
}

TEST_P(transport_test, a_stop_request_cancels_a_pending_accept) {
    run(stop_accept_body(net.get()));
}

task<void> close_recv_body(backend* net) {
    auto p = co_await connected_pair(net);
    std::vector<std::byte> buf(64);
    auto closer = [](stream* s) -> task<void> {
        co_await sleep_for(5ms);
        co_await s->close();
        co_await s->close();  // idempotent
    };
    auto [r, none] = co_await when_all(p.second->recv_some(buf), closer(p.second.get()));
    EXPECT_EQ(r, -ECANCELED) << err(r);
    EXPECT_LT(co_await p.second->recv_some(buf), 0) << "a closed stream receives nothing";
    EXPECT_LT(co_await send_text(p.second.get(), "x"), 0) << "a closed stream sends nothing";
    // The peer sees the close as the end of the stream.
    EXPECT_EQ(co_await p.first->recv_some(buf), 0);
    co_await close_both(p);
}

TEST_P(transport_test, close_with_a_recv_in_flight_completes_it_and_closes) {
    run(close_recv_body(net.get()));
}

task<void> close_accept_body(backend* net) {
    auto l = net->listen(endpoint{"127.0.0.1", 0});
    require(l.error == 0, "listen: " + err(l.error));
    auto closer = [](listener* ls) -> task<void> {
        co_await sleep_for(5ms);
        co_await ls->close();
    };
    auto [a, none] = co_await when_all(l.value->accept(), closer(l.value.get()));
    EXPECT_EQ(a.error, -ECANCELED) << err(a.error);
    co_await l.value->close();  // idempotent
}

TEST_P(transport_test, closing_a_listener_cancels_its_pending_accept) {
    run(close_accept_body(net.get()));
}

// After an abandoned receive: bytes sent later still arrive whole; then both ends close.
task<void> later_bytes_still_arrive(stream_pair& p) {
    require(co_await send_text(p.first.get(), "later") == 0, "send later");
    EXPECT_EQ(co_await recv_text(p.second.get(), 5), "later");
    co_await close_both(p);
}

// A recv whose frame is destroyed while the request is in flight (what happens when an
// exception unwinds the task that owned it): the backend cancels and waits for the kernel
// before the frame's memory goes, and the data that arrives later is not lost.
TEST_P(transport_test, a_recv_frame_destroyed_mid_request_lets_go_of_its_buffer) {
    auto p = sync_wait(connected_pair(net.get()));
    {
        auto buf = std::make_unique<std::vector<std::byte>>(64);
        auto t = p.second->recv_some(*buf);
        t.handle().resume();  // runs up to the pending receive
        ASSERT_FALSE(t.handle().done());
        t = {};  // destroys the frame with the request in flight
    }
    if (sched->io()) {
        // The stream's multishot receive is the stream's, not the frame's: it stays armed.
        EXPECT_LE(sched->io()->in_flight(), multishot() ? 2u : 1u)
            << "only the scheduler's own wake-up read (and the stream's multishot receive)";
    }
    run(later_bytes_still_arrive(p));
}

// The same after the loop ran for a while: a spinning receive has handed over to the ring
// by then (the loop's spin is 20 µs), and the frame that goes must take its request along.
TEST_P(transport_test, a_recv_frame_destroyed_after_the_loop_ran_lets_go_of_its_buffer) {
    auto p = sync_wait(connected_pair(net.get()));
    const std::uint64_t before = sched->io() ? sched->io()->in_flight() : 0;
    {
        auto buf = std::make_unique<std::vector<std::byte>>(64);
        auto t = p.second->recv_some(*buf);
        t.handle().resume();
        ASSERT_FALSE(t.handle().done());
        // The loop spins, then sleeps: the receive is in the ring.
        sync_wait([]() -> task<void> { co_await sleep_for(5ms); }());
        ASSERT_FALSE(t.handle().done()) << "nothing was sent, yet the receive ended";
        t = {};
    }
    if (sched->io() && !multishot()) {
        EXPECT_LE(sched->io()->in_flight(), before + 1) << "only the loop's own wake-up read";
    }
    run(later_bytes_still_arrive(p));
}

// ---- recv_each: bytes handed to a sink as they come --------------------------------------

// Keeps what it is given and asks for more until it holds `want` bytes; counts arrivals.
struct collecting_sink {
    explicit collecting_sink(std::size_t w) : want(w) {}
    std::vector<std::byte> got;
    std::size_t want;
    unsigned calls = 0;
    std::uint64_t resumed_first = 0, resumed_last = 0;  // the loop's resumptions, at calls
    static bool take(void* self, std::span<const std::byte> bytes) {
        auto* s = static_cast<collecting_sink*>(self);
        s->resumed_last = scheduler::current()->stats().resumed;
        if (s->calls++ == 0) s->resumed_first = s->resumed_last;
        s->got.insert(s->got.end(), bytes.begin(), bytes.end());
        return s->got.size() < s->want;
    }
    recv_sink sink() { return recv_sink{&take, this}; }
};

// Pieces sent back to back and after pauses (with the loop's 20 µs spin, a 2 ms pause puts
// the receive in the ring) all reach the sink, in order and whole. Once the sink has what
// it wants the receive returns 1, and the bytes after that are still the stream's.
task<void> recv_each_body(backend* net, reactor* ring, bool pauses) {
    auto p = co_await connected_pair(net);
    constexpr std::size_t first = 20'000, total = 30'000;
    const auto data = pattern(total);
    const std::uint64_t in_ring = ring ? ring->in_flight() : 0;
    auto sender = [](stream* s, const std::vector<std::byte>* d, bool pause) -> task<int> {
        std::size_t at = 0;
        for (const std::size_t len : {1u, 23u, 1000u, 4000u, 7u, 9000u, 5969u, 10'000u}) {
            if (pause && (at == 24 || at == 5031)) co_await sleep_for(2ms);
            if (const int r = co_await send_one(s, std::span(*d).subspan(at, len)); r != 0)
                co_return r;
            at += len;
        }
        co_return 0;
    };
    collecting_sink sink(first);
    std::vector<std::byte> buf(4096);  // a 9000-byte piece takes several arrivals
    auto [n, sent] = co_await when_all(p.second->recv_each(buf, sink.sink()),
                                       sender(p.first.get(), &data, pauses));
    EXPECT_EQ(n, 1) << "the sink asked to stop: " << err(n);
    EXPECT_EQ(sent, 0) << err(sent);
    EXPECT_GE(sink.got.size(), first);
    EXPECT_GT(sink.calls, 1u) << "one receive, several arrivals";
    if (ring && !pauses) {
        EXPECT_EQ(ring->in_flight(), in_ring) << "a spinning receive put a request in the ring";
        // Handed over from the poll: the receiving task is not resumed for each arrival.
        EXPECT_LT(sink.resumed_last - sink.resumed_first, sink.calls - 1)
            << sink.calls << " arrivals";
    }
    auto rest = co_await recv_exactly(p.second.get(), total - sink.got.size());
    sink.got.insert(sink.got.end(), rest.begin(), rest.end());
    EXPECT_TRUE(sink.got == data) << "bytes through the sink arrived altered or out of order";
    co_await close_both(p);
}

TEST_P(transport_test, recv_each_hands_every_arrival_to_its_sink_in_order) {
    run(recv_each_body(net.get(), sched->io(), true));
}

// A sink that throws ends the receive; the exception reaches its awaiter, and the stream
// goes on.
task<void> recv_each_throw_body(backend* net) {
    auto p = co_await connected_pair(net);
    auto thrower = [](void*, std::span<const std::byte>) -> bool {
        throw std::runtime_error("the sink could not take it");
    };
    require(co_await send_text(p.first.get(), "first") == 0, "send first");
    std::vector<std::byte> buf(64);
    std::string caught;
    try {
        (void)co_await p.second->recv_each(buf, recv_sink{thrower, nullptr});
    } catch (const std::runtime_error& e) {
        caught = e.what();
    }
    EXPECT_EQ(caught, "the sink could not take it");
    co_await later_bytes_still_arrive(p);
}

TEST_P(transport_test, an_exception_from_a_sink_reaches_the_receive_awaiter) {
    run(recv_each_throw_body(net.get()));
}

// The peer's end of stream ends the receive with 0, after the sink had the bytes before it.
task<void> recv_each_eof_body(backend* net) {
    auto p = co_await connected_pair(net);
    require(co_await send_text(p.first.get(), "last") == 0, "send last");
    p.first->shutdown_send();
    collecting_sink sink(100);
    std::vector<std::byte> buf(64);
    EXPECT_EQ(co_await p.second->recv_each(buf, sink.sink()), 0);
    EXPECT_EQ(text_of(sink.got), "last");
    co_await close_both(p);
}

TEST_P(transport_test, recv_each_returns_zero_at_the_end_of_the_stream) {
    run(recv_each_eof_body(net.get()));
}

// close() and a stop request end a waiting recv_each with -ECANCELED; the sink saw nothing.
task<void> recv_each_cancel_body(backend* net) {
    auto p = co_await connected_pair(net);
    collecting_sink sink(100);
    std::vector<std::byte> buf(64);
    auto stopped = co_await with_timeout(p.second->recv_each(buf, sink.sink()), 20ms);
    EXPECT_TRUE(stopped.has_value() && *stopped == -ECANCELED)
        << (stopped ? err(*stopped) : "no result");
    require(co_await send_text(p.first.get(), "after") == 0, "send after");
    EXPECT_EQ(co_await recv_text(p.second.get(), 5), "after");
    auto closer = [](stream* s) -> task<void> {
        co_await sleep_for(5ms);
        co_await s->close();
    };
    auto [r, none] =
        co_await when_all(p.second->recv_each(buf, sink.sink()), closer(p.second.get()));
    EXPECT_EQ(r, -ECANCELED) << err(r);
    EXPECT_EQ(sink.calls, 0u);
    co_await close_both(p);
}

TEST_P(transport_test, close_or_a_stop_request_cancels_a_recv_each) {
    run(recv_each_cancel_body(net.get()));
}

// A stop request ends a recv_each while the peer keeps sending: the bytes do not keep it
// going. The flood goes on until the receive has returned and its end closed (or for 5 s,
// which fails).
task<void> recv_each_stop_under_flood_body(backend* net) {
    auto p = co_await connected_pair(net);
    bool received_done = false, flood_ran_out = false;
    auto flood = [](stream* s, const bool* done, bool* ran_out) -> task<int> {
        const std::vector<std::byte> piece(512, std::byte{1});
        const auto end = coverse::clock::now() + 5s;
        while (!*done) {
            if (coverse::clock::now() >= end) {
                *ran_out = true;
                break;
            }
            // The receiver closes its end once its receive returned: a send then fails.
            if (const int r = co_await send_one(s, piece); r != 0) co_return *done ? 0 : r;
        }
        co_return 0;
    };
    collecting_sink sink(std::numeric_limits<std::size_t>::max());
    std::vector<std::byte> buf(4096);
    auto receiver = [](stream* s, std::vector<std::byte>* b, collecting_sink* k,
                       bool* done) -> task<int> {
        auto r = co_await with_timeout(s->recv_each(*b, k->sink()), 10ms);
        *done = true;
        co_await s->close();  // a send the flood has waiting on a full socket fails now
        co_return r ? *r : 1;
    };
    auto [r, sent] = co_await when_all(receiver(p.second.get(), &buf, &sink, &received_done),
                                       flood(p.first.get(), &received_done, &flood_ran_out));
    EXPECT_EQ(r, -ECANCELED) << err(r);
    EXPECT_EQ(sent, 0) << err(sent);
    EXPECT_FALSE(flood_ran_out) << "the receive went on for as long as bytes came ("
                                << sink.got.size() << " bytes)";
    co_await close_both(p);
}

TEST_P(transport_test, a_stop_request_ends_a_recv_each_while_bytes_keep_coming) {
    run(recv_each_stop_under_flood_body(net.get()));
}

// A sink that runs a nested loop (as a PE that stops the job does, relaying its reason) is
// not called again from it, and no byte is lost or reordered.
struct nesting_sink {
    collecting_sink inner{11};
    int depth = 0, max_depth = 0;
    static bool take(void* self, std::span<const std::byte> bytes) {
        auto* s = static_cast<nesting_sink*>(self);
        s->max_depth = std::max(s->max_depth, ++s->depth);
        if (s->inner.calls == 0)  // 2 ms of a nested loop; the loop's timer ends it
            sync_wait([]() -> task<void> { co_await sleep_for(2ms); }());
        const bool more = collecting_sink::take(&s->inner, bytes);
        --s->depth;
        return more;
    }
};

task<void> recv_each_nested_loop_body(backend* net) {
    auto p = co_await connected_pair(net);
    require(co_await send_text(p.first.get(), "one") == 0, "send one");
    require(co_await send_text(p.first.get(), "two") == 0, "send two");
    nesting_sink sink;
    std::vector<std::byte> buf(3);  // an arrival per 3 bytes: more wait during the nested loop
    auto more = [](stream* s) -> task<int> { co_return co_await send_text(s, "three"); };
    auto [r, sent] = co_await when_all(
        p.second->recv_each(buf, recv_sink{&nesting_sink::take, &sink}), more(p.first.get()));
    EXPECT_EQ(r, 1) << err(r);
    EXPECT_EQ(sent, 0) << err(sent);
    EXPECT_EQ(sink.max_depth, 1) << "the sink was called again from its own nested loop";
    EXPECT_EQ(text_of(sink.inner.got), "onetwothree");
    co_await close_both(p);
}

TEST_P(transport_test, a_sink_running_a_nested_loop_is_not_called_again_from_it) {
    run(recv_each_nested_loop_body(net.get()));
}

TEST_P(transport_test, a_recv_each_without_a_take_function_is_refused) {
    auto p = sync_wait(connected_pair(net.get()));
    std::vector<std::byte> buf(8);
    EXPECT_THROW((void)sync_wait(p.second->recv_each(buf, recv_sink{})), std::invalid_argument);
    run(close_both(p));
}

// ---- spinning receive only --------------------------------------------------------------

// The loop spins for 10 s before it sleeps, so a receive stays in its spinning stage (a
// poller reading the socket with recv) for as long as each test waits.
class spin_test : public transport_test {
protected:
    std::chrono::microseconds loop_spin() const override { return 10s; }
};

INSTANTIATE_TEST_SUITE_P(io_uring, spin_test, ::testing::Values(io_uring_spin), param_name);

// While it spins, the receive has no request in the ring: the bytes come through its own
// recv. With RECV_SPIN=0 the same wait holds one ring receive.
task<void> spin_reads_itself_body(backend* net, reactor* ring) {
    auto p = co_await connected_pair(net);
    const std::uint64_t before = ring->in_flight();
    auto late_sender = [](stream* s, reactor* r, std::uint64_t base) -> task<int> {
        co_await sleep_for(5ms);
        EXPECT_EQ(r->in_flight(), base) << "a spinning receive put a request in the ring";
        co_return co_await send_text(s, "spun");
    };
    auto [got, sent] =
        co_await when_all(recv_text(p.second.get(), 4), late_sender(p.first.get(), ring, before));
    EXPECT_EQ(got, "spun");
    EXPECT_EQ(sent, 0) << err(sent);
    co_await close_both(p);
}

TEST_P(spin_test, a_spinning_receive_reads_the_socket_without_a_ring_request) {
    ASSERT_NE(sched->io(), nullptr);
    run(spin_reads_itself_body(net.get(), sched->io()));
}

TEST_P(spin_test, a_bad_setting_is_a_clear_error_naming_it) {
    for (const char* bad : {"maybe", "2"}) {
        scoped_env mode("COVERSE_RECV_SPIN", bad);
        try {
            (void)make_backend(*sched, backend_kind::io_uring, nullptr);
            ADD_FAILURE() << "COVERSE_RECV_SPIN=" << bad << " was accepted";
        } catch (const std::invalid_argument& e) {
            const std::string what = e.what();
            EXPECT_NE(what.find(std::string("COVERSE_RECV_SPIN=") + bad), std::string::npos)
                << what;
            EXPECT_NE(what.find("is not a switch"), std::string::npos) << what;
        }
    }
    scoped_env off("COVERSE_RECV_SPIN", "off");
    auto plain = make_backend(*sched, backend_kind::io_uring, nullptr);
    ASSERT_NE(plain, nullptr);
    EXPECT_NE(plain->describe().find("recv_spin=off"), std::string::npos) << plain->describe();
}

TEST_P(spin_test, a_stop_request_cancels_a_spinning_receive) {
    run(stop_recv_body(net.get()));
}

TEST_P(spin_test, close_cancels_a_spinning_receive) {
    run(close_recv_body(net.get()));
}

TEST_P(spin_test, a_frame_destroyed_while_spinning_unhooks_its_receive) {
    auto p = sync_wait(connected_pair(net.get()));
    {
        std::vector<std::byte> buf(64);
        auto t = p.second->recv_some(buf);
        t.handle().resume();  // up to the spinning receive, now one of the loop's pollers
        ASSERT_FALSE(t.handle().done());
        t = {};  // a poller left behind would read into `buf` after it is gone
    }
    run(later_bytes_still_arrive(p));
}

// While the loop spins, every arrival goes to the sink from the poll: no ring request, and
// one receive serves them all.
TEST_P(spin_test, recv_each_hands_arrivals_to_its_sink_while_spinning) {
    run(recv_each_body(net.get(), sched->io(), false));
}

TEST_P(spin_test, close_or_a_stop_request_cancels_a_spinning_recv_each) {
    run(recv_each_cancel_body(net.get()));
}

TEST_P(spin_test, a_stop_request_ends_a_spinning_recv_each_while_bytes_keep_coming) {
    run(recv_each_stop_under_flood_body(net.get()));
}

TEST_P(spin_test, a_spinning_sink_running_a_nested_loop_is_not_called_again_from_it) {
    run(recv_each_nested_loop_body(net.get()));
}

// More receivers than spin at once (4): the rest wait in the ring, and all get their bytes.
task<void> many_spinners_body(backend* net) {
    constexpr int pairs = 7;
    std::vector<stream_pair> ps;
    for (int i = 0; i < pairs; ++i)
        ps.push_back(co_await connected_pair(net));
    auto receiver = [](stream* s, std::string want) -> task<void> {
        EXPECT_EQ(co_await recv_text(s, want.size()), want);
    };
    auto senders = [](std::vector<stream_pair>* v) -> task<void> {
        co_await sleep_for(5ms);
        for (std::size_t i = 0; i < v->size(); ++i)
            require(co_await send_text((*v)[i].first.get(), "pair" + std::to_string(i)) == 0,
                    "send to pair " + std::to_string(i));
    };
    task_scope scope("receivers");
    for (int i = 0; i < pairs; ++i)
        scope.spawn(receiver(ps[i].second.get(), "pair" + std::to_string(i)),
                    "receiver " + std::to_string(i));
    co_await senders(&ps);
    co_await scope.join();
    for (auto& p : ps)
        co_await close_both(p);
}

TEST_P(spin_test, more_receivers_than_spin_at_once_all_receive) {
    run(many_spinners_body(net.get()));
}

// With the loop's usual short spin, a receive that waits longer hands over to the ring when
// the loop wants to sleep: the loop sleeps (it could not while a receive spun) and the
// bytes still arrive, through the ring.
task<void> spin_then_sleep_body(backend* net, scheduler* sched) {
    auto p = co_await connected_pair(net);
    const auto blocks_before = sched->stats().blocks;
    auto late_sender = [](stream* s) -> task<int> {
        co_await sleep_for(50ms);
        co_return co_await send_text(s, "slept");
    };
    auto [got, sent] = co_await when_all(recv_text(p.second.get(), 5), late_sender(p.first.get()));
    EXPECT_EQ(got, "slept");
    EXPECT_EQ(sent, 0) << err(sent);
    EXPECT_GT(sched->stats().blocks, blocks_before)
        << "the loop never slept while a receive waited";
    co_await close_both(p);
}

TEST_P(transport_test, a_receive_waiting_past_the_spin_lets_the_loop_sleep) {
    run(spin_then_sleep_body(net.get(), &*sched));
}

// ---- multishot receive only ------------------------------------------------------------

class multishot_test : public transport_test {};

INSTANTIATE_TEST_SUITE_P(io_uring, multishot_test, ::testing::Values(io_uring_multishot),
                         param_name);

// The first receive registers the ring and arms the request; afterwards the kernel moves
// whatever arrives into the ring whether or not anyone waits.
task<void> arm(stream_pair& p) {
    require(co_await send_text(p.first.get(), "go") == 0, "send go");
    require(co_await recv_text(p.second.get(), 2) == "go", "receive go");
}

// The writer sends far more than the stream's buffer ring holds while the reader sleeps and
// then reads in small pieces with pauses: the ring runs dry over and over (-ENOBUFS ends the
// multishot request each time) and the request must be re-armed once recv_some has handed
// buffers back. A request that is not re-armed hangs the test; one re-armed twice, or
// buffers handed back too early, show up as wrong or missing bytes.
task<void> ring_overflow_body(backend* net, std::size_t total) {
    auto p = co_await connected_pair(net);
    co_await arm(p);
    auto late_reader = [](stream* s, std::size_t n) -> task<std::size_t> {
        co_await sleep_for(30ms);
        co_return co_await recv_pattern(s, n, 256 * 1024);
    };
    const auto data = pattern(total);
    auto [sent, got] =
        co_await when_all(send_one(p.first.get(), data), late_reader(p.second.get(), total));
    EXPECT_EQ(sent, 0) << err(sent);
    EXPECT_EQ(got, total);
    co_await close_both(p);
}

TEST_P(multishot_test, more_data_than_the_buffer_ring_holds_arrives_complete_and_in_order) {
    struct ring_shape {
        const char* count;
        const char* size;
    };
    // One buffer (the smallest ring), a few pages, and buffers smaller than a page that
    // recv_some's 1..4093-byte reads straddle.
    for (ring_shape shape :
         {ring_shape{"1", "4096"}, ring_shape{"4", "4096"}, ring_shape{"8", "1000"}}) {
        SCOPED_TRACE(std::string(shape.count) + " x " + shape.size);
        scoped_env count("COVERSE_RECV_BUFFERS", shape.count);
        scoped_env size("COVERSE_RECV_BUFFER_SIZE", shape.size);
        make();
        const std::string want = std::string(shape.count) + " x " + shape.size + " B";
        EXPECT_NE(net->describe().find(want), std::string::npos) << net->describe();
        run(ring_overflow_body(net.get(), 4u << 20));
    }
}

// A stop ends the waiting recv_some only: the stream's multishot request stays armed, what
// arrives while nobody waits is queued, and the next recv_some gets it, in order.
task<void> stop_then_data_body(backend* net) {
    auto p = co_await connected_pair(net);
    co_await arm(p);
    std::vector<std::byte> buf(64);
    for (int round = 0; round < 3; ++round) {
        auto r = co_await with_timeout(p.second->recv_some(buf), 10ms);  // nobody sends
        EXPECT_TRUE(r.has_value() && *r == -ECANCELED) << (r ? err(*r) : "no result");
    }
    for (const char* word : {"one", "two", "three"})
        require(co_await send_text(p.first.get(), word) == 0, "send after the stops");
    co_await sleep_for(10ms);  // all three are in the ring before anyone asks
    EXPECT_EQ(co_await recv_text(p.second.get(), 11), "onetwothree");
    // A stop that comes while data is queued changes nothing: the data is returned.
    require(co_await send_text(p.first.get(), "late") == 0, "send late");
    co_await sleep_for(10ms);
    auto r = co_await with_timeout(p.second->recv_some(buf), 10ms);
    EXPECT_TRUE(r.has_value() && *r == 4) << (r ? err(*r) : "no result");
    co_await close_both(p);
}

TEST_P(multishot_test, a_stop_leaves_the_request_armed_and_later_data_is_delivered) {
    run(stop_then_data_body(net.get()));
}

// End of stream and errors come after the data that was queued before them, in order, and
// the end of stream stays.
task<void> end_after_data_body(backend* net) {
    auto p = co_await connected_pair(net);
    co_await arm(p);
    require(co_await send_text(p.first.get(), "abc") == 0, "send abc");
    p.first->shutdown_send();
    co_await sleep_for(10ms);  // data and EOF are both completed before the reader asks
    std::byte b[2];
    const int first = co_await p.second->recv_some(b);
    EXPECT_EQ(first, 2);
    const int second = co_await p.second->recv_some(b);
    EXPECT_EQ(second, 1);
    EXPECT_EQ(b[0], std::byte{'c'});
    const int eof = co_await p.second->recv_some(b);
    EXPECT_EQ(eof, 0);
    const int eof_again = co_await p.second->recv_some(b);
    EXPECT_EQ(eof_again, 0);
    co_await close_both(p);
}

TEST_P(multishot_test, eof_comes_after_the_queued_data) {
    run(end_after_data_body(net.get()));
}

task<void> reset_after_data_body(backend* net) {
    auto p = co_await connected_pair(net);
    co_await arm(p);
    // first leaves "unread" unread, so its close resets the connection (RST) right after
    // "data" went out.
    require(co_await send_text(p.second.get(), "unread") == 0, "send unread");
    require(co_await send_text(p.first.get(), "data") == 0, "send data");
    co_await sleep_for(10ms);
    co_await p.first->close();
    co_await sleep_for(10ms);
    EXPECT_EQ(co_await recv_text(p.second.get(), 4), "data");
    std::byte b[16];
    const int end = co_await p.second->recv_some(b);
    EXPECT_EQ(end, -ECONNRESET) << err(end);
    co_await close_both(p);
}

TEST_P(multishot_test, a_reset_comes_after_the_queued_data) {
    run(reset_after_data_body(net.get()));
}

// close() with the request armed and data queued: it cancels the request, waits for its
// final completion and only then unregisters the ring and frees it (ASan watches).
task<void> close_armed_body(backend* net, reactor* io) {
    auto p = co_await connected_pair(net);
    co_await arm(p);
    require(co_await send_text(p.first.get(), "hello world") == 0, "send hello");
    EXPECT_EQ(co_await recv_text(p.second.get(), 5), "hello");  // " world" stays queued
    const auto more = pattern(100'000);
    require(co_await send_one(p.first.get(), more) == 0, "send more");
    co_await sleep_for(10ms);
    co_await p.second->close();
    std::byte b[16];
    const int after = co_await p.second->recv_some(b);
    EXPECT_LT(after, 0) << "a closed stream receives nothing";
    co_await p.first->close();
    EXPECT_LE(io->in_flight(), 1u) << "close() reaped the multishot request";
}

TEST_P(multishot_test, close_with_the_request_armed_and_data_queued) {
    run(close_armed_body(net.get(), sched->io()));
}

// A stream destroyed without close(), with the request armed and a recv_some waiting (a bug
// of the caller, but the kernel must not write into freed buffers): the destructor cancels
// and reaps, and the waiting task resumes with -ECANCELED without touching the stream.
task<void> destroy_armed_body(backend* net, reactor* io) {
    auto p = co_await connected_pair(net);
    co_await arm(p);
    auto destroyer = [](stream_ptr* s) -> task<void> {
        co_await sleep_for(5ms);
        s->reset();
    };
    std::vector<std::byte> buf(64);
    auto [r, none] = co_await when_all(p.second->recv_some(buf), destroyer(&p.second));
    EXPECT_EQ(r, -ECANCELED) << err(r);
    EXPECT_LE(io->in_flight(), 1u) << "the destructor reaped the multishot request";
    co_await p.first->close();
}

TEST_P(multishot_test, destroying_a_stream_with_the_request_armed_reaps_it) {
    run(destroy_armed_body(net.get(), sched->io()));
}

TEST_P(multishot_test, a_bad_setting_is_a_clear_error) {
    for (const char* bad : {"maybe", "2", "-1"}) {
        scoped_env mode("COVERSE_RECV_MULTISHOT", bad);
        std::string why;
        EXPECT_THROW(make_backend(*sched, backend_kind::io_uring, &why), std::invalid_argument)
            << bad;
    }
    for (const char* bad : {"3", "0", "65536", "x"}) {
        scoped_env count("COVERSE_RECV_BUFFERS", bad);
        std::string why;
        EXPECT_THROW(make_backend(*sched, backend_kind::io_uring, &why), std::invalid_argument)
            << bad;
    }
    scoped_env size("COVERSE_RECV_BUFFER_SIZE", "0");
    std::string why;
    EXPECT_THROW(make_backend(*sched, backend_kind::io_uring, &why), std::invalid_argument);
}

}  // namespace
}  // namespace coverse::net
