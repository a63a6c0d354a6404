// The Asio stream backend on a scheduler without io_uring (where it is meant to run), and
// once on a scheduler with a ring. Every wait is bounded by with_timeout, so a bug fails
// the test instead of hanging it; every test ends by checking that no frame leaked.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <array>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <coverse/net/transport.hpp>
#include <coverse/runtime/runtime.hpp>

namespace coverse::net {
namespace {

using namespace std::chrono_literals;

std::span<const std::byte> bytes_of(std::string_view s) {
    return std::as_bytes(std::span(s.data(), s.size()));
}

std::chrono::nanoseconds thread_cpu_time() {
    timespec ts{};
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec);
}

/// A plain blocking socket connected to 127.0.0.1:port, for a peer on another thread.
int raw_connect(std::uint16_t port) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || ::connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0) {
        if (fd >= 0) ::close(fd);
        return -1;
    }
    return fd;
}

/// The byte at offset i of the large transfers: not periodic at any buffer size used
/// here, so a lost, repeated or reordered block shows.
std::vector<std::byte> pattern(std::size_t n) {
    std::vector<std::byte> v(n);
    for (std::size_t i = 0; i < n; ++i)
        v[i] = static_cast<std::byte>((i * 131) ^ (i >> 11) ^ (i >> 19));
    return v;
}

task<int> send_text(stream* s, std::string text) {
    const std::span<const std::byte> part = bytes_of(text);
    co_return co_await s->send_all(std::span(&part, 1));
}

struct received {
    std::string text;
    int last = 0;  // the result that ended the loop: 0 (end of stream) or -errno
};

/// Reads with a small buffer until `want` bytes arrived, the stream ended, or an error.
task<received> recv_text(stream* s, std::size_t want) {
    received r;
    std::array<std::byte, 7> buf{};
    while (r.text.size() < want) {
        const int n = co_await s->recv_some(buf);
        if (n <= 0) {
            r.last = n;
            break;
        }
        r.text.append(reinterpret_cast<const char*>(buf.data()), static_cast<std::size_t>(n));
    }
    co_return r;
}

task<received> recv_to_end(stream* s) {
    return recv_text(s, static_cast<std::size_t>(-1));
}

struct stream_pair {
    std::unique_ptr<stream> client, server;
    explicit operator bool() const noexcept { return client && server; }
};

/// Listens on port 0, connects and accepts: a connected pair on this scheduler.
task<stream_pair> connect_pair(backend* b) {
    auto l = b->listen({"127.0.0.1", 0});
    EXPECT_EQ(l.error, 0);
    if (!l) co_return stream_pair{};
    EXPECT_NE(l.value->local().port, 0);
    auto c = co_await b->connect(l.value->local());
    EXPECT_EQ(c.error, 0) << std::strerror(-c.error);
    auto s = co_await l.value->accept();
    EXPECT_EQ(s.error, 0) << std::strerror(-s.error);
    co_await l.value->close();
    co_return stream_pair{std::move(c.value), std::move(s.value)};
}

task<void> close_pair(stream_pair p) {
    if (p.client) co_await p.client->close();
    if (p.server) co_await p.server->close();
}

class asio_backend_test : public ::testing::Test {
protected:
    virtual bool with_ring() const { return false; }

    void SetUp() override {
        _frames_before = live_task_frames();
        scheduler_options o;
        o.spin = 20us;
        o.use_io_uring = with_ring();
        sched.emplace(o);
        if (with_ring() && !sched->io())
            GTEST_SKIP() << "io_uring unavailable: " << sched->io_unavailable_reason();
        std::string why;
        net = make_asio_backend(*sched, &why);
        ASSERT_TRUE(net) << why;
    }
    void TearDown() override {
        net.reset();
        sched.reset();
        EXPECT_EQ(live_task_frames(), _frames_before) << "coroutine frames leaked";
    }

    /// Runs a test body on the scheduler; a body that does not finish within `limit` is
    /// stopped (its socket operations are cancelled) and the test fails.
    void run(task<void> body, std::chrono::seconds limit = 60s) {
        const bool finished = sync_wait(with_timeout(std::move(body), limit));
        EXPECT_TRUE(finished) << "the test body did not finish within " << limit.count() << " s";
    }

    std::optional<scheduler> sched;
    std::unique_ptr<backend> net;

private:
    std::int64_t _frames_before = 0;
};

TEST_F(asio_backend_test, asio_names_itself) {
    EXPECT_EQ(net->name(), "asio");
    const std::string d = net->describe();
    EXPECT_NE(d.find("asio 1."), std::string::npos) << d;
    EXPECT_NE(d.find("sleeps in Asio's reactor"), std::string::npos) << d;
}

TEST_F(asio_backend_test, asio_is_chosen_on_a_scheduler_without_a_ring_and_says_so) {
    std::string why;
    auto asked = make_backend(*sched, backend_kind::asio, &why);
    ASSERT_TRUE(asked) << why;
    EXPECT_EQ(asked->name(), "asio");
    EXPECT_NE(why.find("asio"), std::string::npos) << why;
    auto automatic = make_backend(*sched, backend_kind::automatic, &why);
    ASSERT_TRUE(automatic) << why;
    EXPECT_EQ(automatic->name(), "asio");
    EXPECT_NE(why.find("asio"), std::string::npos) << why;
}

TEST_F(asio_backend_test, asio_exchanges_bytes_both_ways_over_port_0) {
    run([](backend* b) -> task<void> {
        auto l = b->listen({"127.0.0.1", 0});
        EXPECT_EQ(l.error, 0);
        if (!l) co_return;
        const endpoint at = l.value->local();
        EXPECT_EQ(at.host, "127.0.0.1");
        EXPECT_NE(at.port, 0);
        auto c = co_await b->connect(at);
        auto s = co_await l.value->accept();
        EXPECT_TRUE(c && s);
        if (!c || !s) co_return;
        EXPECT_EQ(c.value->peer_name(), at.to_string());
        EXPECT_EQ(s.value->peer_name().rfind("127.0.0.1:", 0), 0u) << s.value->peer_name();

        const int sent = co_await send_text(c.value.get(), "ping");
        EXPECT_EQ(sent, 0);
        const received ping = co_await recv_text(s.value.get(), 4);
        EXPECT_EQ(ping.text, "ping");
        const int answered = co_await send_text(s.value.get(), "pong from the server");
        EXPECT_EQ(answered, 0);
        const received pong = co_await recv_text(c.value.get(), 20);
        EXPECT_EQ(pong.text, "pong from the server");

        co_await c.value->close();
        co_await s.value->close();
        co_await l.value->close();
        co_await l.value->close();  // idempotent
        co_await c.value->close();
    }(net.get()));
}

TEST_F(asio_backend_test, asio_gather_skips_zero_length_parts) {
    run([](backend* b) -> task<void> {
        stream_pair p = co_await connect_pair(b);
        if (!p) co_return;
        const std::string_view a = "abc", d = "defgh";
        const std::span<const std::byte> parts[] = {
            {}, bytes_of(a), {}, {}, bytes_of(d), {},
        };
        const int sent = co_await p.client->send_all(parts);
        EXPECT_EQ(sent, 0);
        const std::span<const std::byte> nothing[] = {{}, {}};
        const int sent_nothing = co_await p.client->send_all(nothing);
        EXPECT_EQ(sent_nothing, 0);
        const int sent_none = co_await p.client->send_all({});
        EXPECT_EQ(sent_none, 0);
        p.client->shutdown_send();
        const received r = co_await recv_to_end(p.server.get());
        EXPECT_EQ(r.text, "abcdefgh");
        EXPECT_EQ(r.last, 0);
        co_await close_pair(std::move(p));
    }(net.get()));
}

TEST_F(asio_backend_test, asio_gather_of_many_parts_keeps_their_order) {
    run([](backend* b) -> task<void> {
        stream_pair p = co_await connect_pair(b);
        if (!p) co_return;
        // More parts than the inline gather holds, and more than one writev takes.
        std::string expected;
        std::vector<std::string> texts;
        for (int i = 0; i < 200; ++i)
            texts.push_back(i % 3 == 0 ? std::string() : std::to_string(i) + ",");
        std::vector<std::span<const std::byte>> parts;
        for (const auto& t : texts) {
            parts.push_back(bytes_of(t));
            expected += t;
        }
        const int sent = co_await p.client->send_all(parts);
        EXPECT_EQ(sent, 0);
        p.client->shutdown_send();
        const received r = co_await recv_to_end(p.server.get());
        EXPECT_EQ(r.text, expected);
        co_await close_pair(std::move(p));
    }(net.get()));
}

task<void> send_pattern(stream* s, const std::vector<std::byte>* data, std::size_t chunk) {
    for (std::size_t off = 0; off < data->size(); off += chunk) {
        const std::span<const std::byte> all(data->data() + off,
                                             std::min(chunk, data->size() - off));
        // Uneven parts with an empty one between them, as a header and a payload.
        const std::size_t head = std::min<std::size_t>(all.size(), 24);
        const std::span<const std::byte> parts[] = {all.first(head), {}, all.subspan(head)};
        const int r = co_await s->send_all(parts);
        EXPECT_EQ(r, 0) << "at offset " << off;
        if (r != 0) co_return;
    }
    s->shutdown_send();
}

task<void> receive_pattern(stream* s, const std::vector<std::byte>* data, std::size_t* got) {
    std::array<std::byte, 1000> buf{};
    std::size_t total = 0;
    bool same = true;
    for (;;) {
        const int n = co_await s->recv_some(buf);
        if (n <= 0) {
            EXPECT_EQ(n, 0) << std::strerror(-n);
            break;
        }
        const auto len = static_cast<std::size_t>(n);
        if (same && (total + len > data->size() ||
                     std::memcmp(buf.data(), data->data() + total, len) != 0)) {
            same = false;
            ADD_FAILURE() << "received bytes differ from the sent ones at offset " << total;
        }
        total += len;
    }
    *got = total;
}

TEST_F(asio_backend_test, asio_64_mib_arrive_complete_and_in_order_through_small_reads) {
    const std::vector<std::byte> data = pattern(64u << 20);
    std::size_t got = 0;
    run(
        [](backend* b, const std::vector<std::byte>* d, std::size_t* n) -> task<void> {
            stream_pair p = co_await connect_pair(b);
            if (!p) co_return;
            co_await when_all(send_pattern(p.client.get(), d, 1u << 20),
                              receive_pattern(p.server.get(), d, n));
            co_await close_pair(std::move(p));
        }(net.get(), &data, &got),
        200s);
    EXPECT_EQ(got, data.size());
}

TEST_F(asio_backend_test, asio_eof_after_shutdown_send_and_the_other_direction_still_works) {
    run([](backend* b) -> task<void> {
        stream_pair p = co_await connect_pair(b);
        if (!p) co_return;
        const int sent = co_await send_text(p.client.get(), "bye");
        EXPECT_EQ(sent, 0);
        p.client->shutdown_send();
        const received r = co_await recv_to_end(p.server.get());
        EXPECT_EQ(r.text, "bye");
        EXPECT_EQ(r.last, 0);
        const int eof_again = co_await p.server->recv_some(std::span<std::byte>());
        EXPECT_EQ(eof_again, 0);
        // Half-closed: the server can still answer.
        const int acked = co_await send_text(p.server.get(), "ack");
        EXPECT_EQ(acked, 0);
        const received ack = co_await recv_text(p.client.get(), 3);
        EXPECT_EQ(ack.text, "ack");
        co_await close_pair(std::move(p));
    }(net.get()));
}

TEST_F(asio_backend_test, asio_sender_sees_epipe_or_econnreset_when_the_peer_closes_mid_transfer) {
    const std::vector<std::byte> data = pattern(64u << 20);
    run([](backend* b, const std::vector<std::byte>* d) -> task<void> {
        stream_pair p = co_await connect_pair(b);
        if (!p) co_return;
        // The server reads a little and closes with bytes unread: the kernel resets.
        auto reader = [](stream_pair* q) -> task<void> {
            std::array<std::byte, 4096> buf{};
            std::size_t total = 0;
            while (total < (64u << 10)) {
                const int n = co_await q->server->recv_some(buf);
                if (n <= 0) break;
                total += static_cast<std::size_t>(n);
            }
            co_await q->server->close();
            q->server.reset();
        };
        const std::span<const std::byte> part(*d);
        auto [sent, unit] = co_await when_all(p.client->send_all(std::span(&part, 1)), reader(&p));
        (void)unit;
        EXPECT_TRUE(sent == -EPIPE || sent == -ECONNRESET) << sent << " " << std::strerror(-sent);
        std::array<std::byte, 64> buf{};
        const int after = co_await p.client->recv_some(buf);
        EXPECT_TRUE(after == 0 || after == -ECONNRESET) << after;
        co_await close_pair(std::move(p));
    }(net.get(), &data));
}

TEST_F(asio_backend_test, asio_receiver_sees_end_or_econnreset_when_the_peer_closes_mid_transfer) {
    run([](backend* b) -> task<void> {
        stream_pair p = co_await connect_pair(b);
        if (!p) co_return;
        // Bytes the server never reads, so its close resets the connection.
        const int junk = co_await send_text(p.client.get(), "never read");
        EXPECT_EQ(junk, 0);
        const std::vector<std::byte> data = pattern(256u << 10);
        const std::span<const std::byte> part(data);
        const int sent = co_await p.server->send_all(std::span(&part, 1));
        EXPECT_EQ(sent, 0);
        co_await p.server->close();
        p.server.reset();
        const received r = co_await recv_to_end(p.client.get());
        EXPECT_TRUE(r.last == 0 || r.last == -ECONNRESET) << r.last;
        EXPECT_LE(r.text.size(), data.size());
        co_await close_pair(std::move(p));
    }(net.get()));
}

TEST_F(asio_backend_test, asio_connect_to_a_closed_port_is_refused) {
    run([](backend* b) -> task<void> {
        auto l = b->listen({"127.0.0.1", 0});
        EXPECT_EQ(l.error, 0);
        if (!l) co_return;
        const endpoint at = l.value->local();
        co_await l.value->close();
        l.value.reset();
        auto c = co_await b->connect(at);
        EXPECT_EQ(c.error, -ECONNREFUSED) << std::strerror(-c.error);
        EXPECT_FALSE(c.value);
        // GCC 12 note: a class-type prvalue argument (`connect({"host", 1})`) of a coroutine
        // called inside co_await is relocated bitwise and destroyed twice; pass named
        // objects (or std::move of one) to coroutines.
        const endpoint nowhere{"not an address", 1};
        auto bad = co_await b->connect(nowhere);
        EXPECT_EQ(bad.error, -EINVAL);
    }(net.get()));
}

TEST_F(asio_backend_test, asio_listening_on_a_busy_port_is_an_error_value) {
    auto first = net->listen({"127.0.0.1", 0});
    ASSERT_TRUE(first);
    auto second = net->listen(first.value->local());
    EXPECT_EQ(second.error, -EADDRINUSE);
    run([](listener* l) -> task<void> { co_await l->close(); }(first.value.get()));
}

TEST_F(asio_backend_test, asio_timeout_cancels_a_pending_recv_and_loses_no_byte) {
    run([](backend* b) -> task<void> {
        stream_pair p = co_await connect_pair(b);
        if (!p) co_return;
        std::array<std::byte, 16> buf{};
        const auto r = co_await with_timeout(p.server->recv_some(buf), 50ms);
        EXPECT_TRUE(r.has_value());
        EXPECT_EQ(r.value_or(0), -ECANCELED);
        // The stream is still usable, and the next byte goes to the next receive.
        const int sent = co_await send_text(p.client.get(), "x");
        EXPECT_EQ(sent, 0);
        const received x = co_await recv_text(p.server.get(), 1);
        EXPECT_EQ(x.text, "x");
        co_await close_pair(std::move(p));
    }(net.get()));
}

TEST_F(asio_backend_test, asio_timeout_cancels_a_pending_accept) {
    run([](backend* b) -> task<void> {
        auto l = b->listen({"127.0.0.1", 0});
        if (!l) co_return;
        const auto r = co_await with_timeout(l.value->accept(), 50ms);
        EXPECT_TRUE(r.has_value());
        if (r) {
            EXPECT_EQ(r->error, -ECANCELED);
            EXPECT_FALSE(r->value);
        }
        // The listener still accepts afterwards.
        auto c = co_await b->connect(l.value->local());
        auto s = co_await l.value->accept();
        EXPECT_EQ(c.error, 0);
        EXPECT_EQ(s.error, 0);
        co_await l.value->close();
        stream_pair p{std::move(c.value), std::move(s.value)};  // named: see the GCC 12 note
        co_await close_pair(std::move(p));
    }(net.get()));
}

task<void> receive_after(stream* s, std::chrono::milliseconds delay, std::size_t* got) {
    co_await sleep_for(delay);
    std::array<std::byte, 65536> buf{};
    for (;;) {
        const int n = co_await s->recv_some(buf);
        if (n <= 0) break;
        *got += static_cast<std::size_t>(n);
    }
}

TEST_F(asio_backend_test, asio_a_stopped_recv_leaves_the_concurrent_send_running) {
    // Cancelling one direction must not abort the other (socket.cancel() would).
    const std::vector<std::byte> data = pattern(16u << 20);
    std::size_t got = 0;
    run([](backend* b, const std::vector<std::byte>* d, std::size_t* n) -> task<void> {
        stream_pair p = co_await connect_pair(b);
        if (!p) co_return;
        auto client = [](stream* c, const std::vector<std::byte>* bytes) -> task<void> {
            const std::span<const std::byte> part(*bytes);
            std::array<std::byte, 16> buf{};
            auto [sent, received] = co_await when_all(c->send_all(std::span(&part, 1)),
                                                      with_timeout(c->recv_some(buf), 50ms));
            EXPECT_EQ(sent, 0) << std::strerror(-sent);
            EXPECT_TRUE(received.has_value());
            EXPECT_EQ(received.value_or(0), -ECANCELED);
            c->shutdown_send();
        };
        co_await when_all(client(p.client.get(), d), receive_after(p.server.get(), 200ms, n));
        co_await close_pair(std::move(p));
    }(net.get(), &data, &got));
    EXPECT_EQ(got, data.size());
}

TEST_F(asio_backend_test, asio_close_cancels_what_is_in_flight) {
    run([](backend* b) -> task<void> {
        stream_pair p = co_await connect_pair(b);
        if (!p) co_return;
        auto receiver = [](stream* s) -> task<int> {
            std::array<std::byte, 16> buf{};
            co_return co_await s->recv_some(buf);
        };
        auto closer = [](stream* s) -> task<void> {
            co_await sleep_for(20ms);
            co_await s->close();
        };
        auto [r, unit] = co_await when_all(receiver(p.server.get()), closer(p.server.get()));
        (void)unit;
        EXPECT_EQ(r, -ECANCELED);
        std::array<std::byte, 16> buf{};
        const int after = co_await p.server->recv_some(buf);
        EXPECT_EQ(after, -EBADF);
        co_await close_pair(std::move(p));
    }(net.get()));
}

TEST_F(asio_backend_test, asio_destroying_a_stream_resumes_its_waiting_receive) {
    run([](backend* b) -> task<void> {
        stream_pair p = co_await connect_pair(b);
        if (!p) co_return;
        auto receiver = [](stream* s) -> task<int> {
            std::array<std::byte, 16> buf{};
            co_return co_await s->recv_some(buf);
        };
        auto dropper = [](std::unique_ptr<stream>* s) -> task<void> {
            co_await sleep_for(20ms);
            s->reset();
        };
        auto [r, unit] = co_await when_all(receiver(p.server.get()), dropper(&p.server));
        (void)unit;
        EXPECT_EQ(r, -ECANCELED);
        co_await close_pair(std::move(p));
    }(net.get()));
}

TEST_F(asio_backend_test, asio_dropping_a_frame_suspended_in_a_recv_is_safe) {
    run([](backend* b) -> task<void> {
        stream_pair p = co_await connect_pair(b);
        if (!p) co_return;
        std::array<std::byte, 16> buf{};
        {
            task<int> t = p.server->recv_some(buf);
            t.handle().resume();  // runs until it waits inside Asio's read
            EXPECT_FALSE(t.handle().done());
        }  // destroyed in flight: cancelled, reaped, never resumed (ASan would see it)
        const int sent = co_await send_text(p.client.get(), "z");
        EXPECT_EQ(sent, 0);
        const received z = co_await recv_text(p.server.get(), 1);
        EXPECT_EQ(z.text, "z");
        co_await close_pair(std::move(p));
    }(net.get()));
}

TEST_F(asio_backend_test, asio_cross_thread_post_wakes_a_scheduler_blocked_in_asio) {
    event ev;
    const auto blocks_before = sched->stats().blocks;
    scheduler* s = &*sched;
    std::thread poster([s, &ev] {
        std::this_thread::sleep_for(100ms);
        s->post([&ev] { ev.set(); });
    });
    const auto start = clock::now();
    run([](backend* b, event* e) -> task<void> {
        // A pending accept keeps a socket operation in Asio's reactor meanwhile.
        auto l = b->listen({"127.0.0.1", 0});
        if (!l) co_return;
        auto waiter = [](event* x) -> task<void> { co_await x->wait(); };
        const auto first = co_await when_any(l.value->accept(), with_timeout(waiter(e), 10s));
        EXPECT_EQ(first.index, 1u) << "the post, not a connection, ends the wait";
        if (first.index == 1) {
            EXPECT_TRUE(std::get<1>(first.value)) << "timed out";
        }
        co_await l.value->close();
    }(net.get(), &ev));
    poster.join();
    EXPECT_LT(clock::now() - start, 5s) << "the post did not wake the blocked scheduler";
    EXPECT_GT(sched->stats().blocks, blocks_before) << "the scheduler never blocked";
}

TEST_F(asio_backend_test, asio_a_blocked_scheduler_wakes_for_socket_data_without_spinning) {
    // A second backend on the same scheduler shares the first one's event loop: only one
    // poller blocks for the scheduler, and it must see this backend's sockets too.
    std::string why;
    auto second = make_asio_backend(*sched, &why);
    ASSERT_TRUE(second) << why;
    auto l = second->listen({"127.0.0.1", 0});
    ASSERT_TRUE(l);
    const std::uint16_t port = l.value->local().port;
    std::thread peer([port] {
        const int fd = raw_connect(port);
        if (fd < 0) return;
        std::this_thread::sleep_for(300ms);
        [[maybe_unused]] ssize_t n = ::write(fd, "hi", 2);
        std::this_thread::sleep_for(100ms);
        ::close(fd);
    });
    struct measured {
        std::string text;
        clock::duration wall{};
        std::chrono::nanoseconds cpu{};
        std::uint64_t blocks = 0;
    } m;
    run([](listener* lst, scheduler* s, measured* out) -> task<void> {
        auto a = co_await lst->accept();
        EXPECT_EQ(a.error, 0);
        if (!a) co_return;
        const auto blocks0 = s->stats().blocks;
        const auto cpu0 = thread_cpu_time();
        const auto t0 = clock::now();
        const auto r = co_await with_timeout(recv_text(a.value.get(), 2), 10s);
        out->wall = clock::now() - t0;
        out->cpu = thread_cpu_time() - cpu0;
        out->blocks = s->stats().blocks - blocks0;
        if (r) out->text = r->text;
        co_await a.value->close();
        co_await lst->close();
    }(l.value.get(), &*sched, &m));
    peer.join();
    EXPECT_EQ(m.text, "hi");
    EXPECT_LT(m.wall, 5s) << "socket data did not wake the blocked scheduler";
    EXPECT_GE(m.blocks, 1u) << "the scheduler never blocked";
    EXPECT_LT(m.blocks, 1000u) << "the scheduler blocked and woke again and again (spinning)";
    EXPECT_LT(m.cpu, m.wall / 2) << "the wait burnt CPU: " << m.cpu.count() << " ns";
}

class asio_backend_with_ring_test : public asio_backend_test {
protected:
    bool with_ring() const override { return true; }
};

TEST_F(asio_backend_with_ring_test, asio_still_progresses_when_the_scheduler_has_a_ring) {
    const std::string d = net->describe();
    EXPECT_NE(d.find("io_uring ring"), std::string::npos) << d;
    auto l = net->listen({"127.0.0.1", 0});
    ASSERT_TRUE(l);
    const std::uint16_t port = l.value->local().port;
    std::thread peer([port] {
        const int fd = raw_connect(port);
        if (fd < 0) return;
        std::this_thread::sleep_for(100ms);  // long past the spin: the loop would sleep
        [[maybe_unused]] ssize_t n = ::write(fd, "late", 4);
        char buf[8];
        [[maybe_unused]] ssize_t m = ::read(fd, buf, sizeof buf);  // waits for "ok"
        ::close(fd);
    });
    const auto start = clock::now();
    run([](listener* lst) -> task<void> {
        auto a = co_await lst->accept();
        EXPECT_EQ(a.error, 0);
        if (!a) co_return;
        const auto r = co_await with_timeout(recv_text(a.value.get(), 4), 10s);
        EXPECT_TRUE(r && r->text == "late");
        const int sent = co_await send_text(a.value.get(), "ok");
        EXPECT_EQ(sent, 0);
        co_await a.value->close();
        co_await lst->close();
    }(l.value.get()));
    peer.join();
    EXPECT_LT(clock::now() - start, 5s);
    run([](backend* b) -> task<void> {
        stream_pair p = co_await connect_pair(b);
        if (!p) co_return;
        const int sent = co_await send_text(p.client.get(), "through asio");
        EXPECT_EQ(sent, 0);
        const received r = co_await recv_text(p.server.get(), 12);
        EXPECT_EQ(r.text, "through asio");
        co_await close_pair(std::move(p));
    }(net.get()));
}

}  // namespace
}  // namespace coverse::net
