// The rendezvous protocol between two real processes, over every provider this machine has
// (cma, tcp; verbs where a device exists, else a skip that says why), with the registration
// cache and the memory pool on and off: sizes from MEDIUM+1 to 1 GiB arrive whole and in
// order among stream messages; many rendezvous in flight; a send completes only at
// get-done; a peer killed mid-rendezvous, as receiver and as sender, is reported naming it,
// with no hang and (under ASan) no leak.
#include <gtest/gtest.h>
#include <poll.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <coverse/alloc/message.hpp>
#include <coverse/rdma/verbs.hpp>

#include "coverse/test/scoped_env.hpp"
#include "rdma_pair.hpp"

namespace coverse::rdma::test {
namespace {

struct variant {
    provider_kind provider;
    bool rcache;
    bool pool;
};

std::string name_of(const testing::TestParamInfo<variant>& i) {
    return std::string(to_string(i.param.provider)) + (i.param.rcache ? "_rcache" : "_no_rcache") +
           (i.param.pool ? "_pool" : "_no_pool");
}

class rendezvous : public testing::TestWithParam<variant> {
protected:
    void SetUp() override {
        if (GetParam().provider == provider_kind::verbs) {
            std::string why;
            if (list_verbs_devices(&why).empty()) GTEST_SKIP() << "verbs: " << why;
            _opt.cfg.forced = provider_kind::verbs;
        }
        _opt.cfg.forced = GetParam().provider;
        // tcp between processes of one host: the stream goes over the connection as well,
        // as it would between two hosts.
        _opt.same_host = GetParam().provider != provider_kind::tcp;
    }
    pair_options _opt;
    coverse::test::scoped_env _rcache{"COVERSE_RCACHE", GetParam().rcache ? "1" : "0"};
    coverse::test::scoped_env _pool{"COVERSE_MEMORY_POOL", GetParam().pool ? "1" : "0"};
};

// Sends `sizes[k]` with seed k in order; returns 0 or the failing check.
int send_all(node& n, std::uint32_t to, const std::vector<std::size_t>& sizes) {
    return send_numbered(n, to, sizes);
}

// Receives sizes.size() messages from `from`, checking order, size and every byte.
int receive_all(node& n, std::uint32_t from, const std::vector<std::size_t>& sizes) {
    if (!n.wait_messages(sizes.size(), 120s)) {
        std::fprintf(stderr, "PE %u: %zu of %zu messages arrived\n", n.rank, n.inbox.size(),
                     sizes.size());
        return 20;
    }
    for (std::size_t k = 0; k < sizes.size(); ++k) {
        const arrived a = n.inbox.front();
        n.inbox.pop_front();
        const bool ok = a.from == from && a.size == sizes[k] && check(a.msg, a.size, k);
        alloc::msg_free(a.msg);
        if (!ok) {
            std::fprintf(stderr, "PE %u: message %zu (%zu bytes) arrived as %u bytes or wrong\n",
                         n.rank, k, sizes[k], a.size);
            return 21;
        }
    }
    return n.lost.empty() ? 0 : 22;
}

// Both PEs send each other the same mix at once: stream messages (8 B, 2 KiB + 1, exactly
// MEDIUM) between rendezvous ones (MEDIUM + 1 up to 4 MiB + 1), so each direction's order
// is checked across both paths while rendezvous run both ways.
TEST_P(rendezvous, every_size_arrives_whole_and_in_order_among_stream_messages) {
    const std::size_t medium = _opt.cfg.medium_boundary;
    const std::vector<std::size_t> sizes{8,       medium + 1, 2049,          medium, 64 << 10,  8,
                                         1 << 20, medium + 1, (4 << 20) + 1, 2049,   300 << 10, 8};
    const auto body = [&](node& n, const std::function<void()>&) {
        const std::uint32_t peer = 1 - n.rank;
        std::vector<recorded_send> done(sizes.size());
        std::vector<void*> bufs;
        for (std::size_t k = 0; k < sizes.size(); ++k) {
            void* m = alloc::msg_alloc(sizes[k]);
            fill(m, sizes[k], k);
            bufs.push_back(m);
            n.rdma->send(peer, static_cast<const std::byte*>(m),
                         static_cast<std::uint32_t>(sizes[k]), false, 0, &done[k]);
        }
        const int rc = receive_all(n, peer, sizes);
        if (!n.wait_for([&] {
                for (auto& d : done)
                    if (d.calls == 0) return false;
                return true;
            }))
            return 30;
        for (auto& d : done)
            if (d.calls != 1 || d.result != 0) return 31;
        for (void* m : bufs)
            alloc::msg_free(m);
        if (rc) return rc;
        // The provider both sides agreed on is the one this variant forced.
        return n.rdma->provider_for(peer) == GetParam().provider ? 0 : 32;
    };
    const auto r = run_pair(_opt, body, body);
    EXPECT_EQ(r.pe0, 0);
    EXPECT_EQ(r.pe1, 0);
}

// Sixty-four rendezvous of random sizes in flight at once from one PE to the other: the
// gets may finish in any order (chunked, split), the messages come up in send order.
TEST_P(rendezvous, many_concurrent_rendezvous_come_up_in_send_order) {
    std::mt19937 rng(7);
    std::vector<std::size_t> sizes;
    for (int k = 0; k < 64; ++k)
        sizes.push_back(_opt.cfg.medium_boundary + 1 + rng() % (3u << 20));
    const auto r = run_pair(
        _opt, [&](node& n, const std::function<void()>&) { return send_all(n, 1, sizes); },
        [&](node& n, const std::function<void()>&) { return receive_all(n, 0, sizes); });
    EXPECT_EQ(r.pe0, 0);
    EXPECT_EQ(r.pe1, 0);
}

INSTANTIATE_TEST_SUITE_P(providers, rendezvous,
                         testing::Values(variant{provider_kind::cma, true, true},
                                         variant{provider_kind::cma, false, true},
                                         variant{provider_kind::cma, true, false},
                                         variant{provider_kind::tcp, true, true},
                                         variant{provider_kind::tcp, false, true},
                                         variant{provider_kind::tcp, true, false},
                                         variant{provider_kind::verbs, true, true}),
                         name_of);

class rendezvous_provider : public testing::TestWithParam<provider_kind> {
protected:
    void SetUp() override {
        if (GetParam() == provider_kind::verbs) {
            std::string why;
            if (list_verbs_devices(&why).empty()) GTEST_SKIP() << "verbs: " << why;
        }
        _opt.cfg.forced = GetParam();
        _opt.same_host = GetParam() != provider_kind::tcp;
    }
    pair_options _opt;
};

// 256 MiB and 1 GiB: any size works on every path, up to memory (MAX_MESSAGE bounds what
// a peer may make us allocate, 2 GiB - 1 by default).
TEST_P(rendezvous_provider, quarter_and_whole_gibibyte_messages_arrive_whole) {
    const std::vector<std::size_t> sizes{std::size_t{256} << 20, std::size_t{1} << 30};
    const auto r = run_pair(
        _opt, [&](node& n, const std::function<void()>&) { return send_all(n, 1, sizes); },
        [&](node& n, const std::function<void()>&) { return receive_all(n, 0, sizes); });
    EXPECT_EQ(r.pe0, 0);
    EXPECT_EQ(r.pe1, 0);
}

// The handle of a large send stays live until get-done: PE 1 does not run its loop until
// PE 0 has seen its send still open for a while, so nothing can have fetched it yet. PE 0
// sends only once PE 1 has left its start-up (whose nested progress would serve the get:
// seen once under load, PE 0's send completed within its 200 ms). PE 1 stops running its
// loop only once PE 0 has finished its own start-up (`ready`): PE 0's may still need PE 1's
// answers, and under load PE 1 used to stop first, leaving both waiting until the 600 s
// limit. Each wait on a pipe is bounded.
TEST_P(rendezvous_provider, a_send_completes_only_at_get_done) {
    int go[2], up[2], ready[2];
    ASSERT_EQ(::pipe(go), 0);
    ASSERT_EQ(::pipe(up), 0);
    ASSERT_EQ(::pipe(ready), 0);
    // Waits up to 60 s for a byte on fd; false when none came (the other PE failed).
    const auto read_one = [](int fd) {
        pollfd p{fd, POLLIN, 0};
        char c;
        return ::poll(&p, 1, 60'000) == 1 && ::read(fd, &c, 1) == 1;
    };
    const auto r = run_pair(
        _opt,
        [&](node& n, const std::function<void()>&) {
            ::close(go[0]);
            ::close(up[1]);
            ::close(ready[0]);
            if (::write(ready[1], "r", 1) != 1) return 45;  // start-up done
            // Whatever happens here, PE 1 is let go when this body ends: a failure must fail
            // the test, never leave PE 1 blocked on the pipe (the parent holds its other end).
            struct release_pe1 {
                int fd;
                ~release_pe1() { [[maybe_unused]] auto w = ::write(fd, "g", 1); }
            } guard{go[1]};
            // Bounded: a PE 1 that died first never writes (the parent holds the pipe open).
            if (!read_one(up[0])) return 44;
            void* m = alloc::msg_alloc(1 << 20);
            fill(m, 1 << 20, 0);
            recorded_send done;
            n.rdma->send(1, static_cast<const std::byte*>(m), 1 << 20, false, 0, &done);
            n.wait_for([] { return false; }, 200ms);  // the loop runs; PE 1 does not
            if (done.calls != 0) return 40;
            if (n.rdma->idle()) return 41;
            [[maybe_unused]] auto w = ::write(go[1], "g", 1);
            guard.fd = -1;
            if (!n.wait_for([&] { return done.calls > 0; })) return 42;
            alloc::msg_free(m);
            return done.result == 0 && done.calls == 1 ? 0 : 43;
        },
        [&](node& n, const std::function<void()>&) {
            ::close(go[1]);
            ::close(up[0]);
            ::close(ready[1]);
            // The loop runs until PE 0 has finished its start-up.
            pollfd p0{ready[0], POLLIN, 0};
            if (!n.wait_for([&] { return ::poll(&p0, 1, 0) == 1; })) return 52;
            if (::write(up[1], "u", 1) != 1) return 51;
            if (!read_one(go[0])) return 50;
            return receive_all(n, 0, {1 << 20});
        });
    for (const int fd : {go[0], go[1], up[0], up[1], ready[0], ready[1]})
        ::close(fd);
    EXPECT_EQ(r.pe0, 0);
    EXPECT_EQ(r.pe1, 0);
}

// The receiver dies with a rendezvous published to it and not fetched: the sender's send
// completes with an error (-EPIPE) once the peer's loss is seen, and the sender then ends
// cleanly — no hang, and under ASan no leak.
TEST_P(rendezvous_provider, a_receiver_killed_mid_rendezvous_fails_the_send_naming_no_hang) {
    const auto r = run_pair(
        _opt,
        [&](node& n, const std::function<void()>&) {
            void* m = alloc::msg_alloc(4 << 20);
            fill(m, 4 << 20, 0);
            recorded_send done;
            n.rdma->send(1, static_cast<const std::byte*>(m), 4 << 20, false, 0, &done);
            if (!n.wait_for([&] { return done.calls > 0; }, 60s)) return 60;
            alloc::msg_free(m);
            if (done.result != -EPIPE) return 61;
            return n.failed_peers == std::vector<std::uint32_t>{1} ? 0 : 62;
        },
        [&](node&, const std::function<void()>&) {
            ::raise(SIGKILL);  // before its loop ever runs the get
            return 70;
        });
    EXPECT_EQ(r.pe0, 0);
    EXPECT_EQ(r.pe1, 128 + SIGKILL);
}

// The sender dies right after publishing (it is reaped before the receiver's loop runs):
// the receiver reports the lost message or the lost peer naming PE 0, delivers nothing
// half-filled, and ends cleanly.
TEST_P(rendezvous_provider, a_sender_killed_mid_rendezvous_is_reported_naming_it) {
    _opt.gate_pe1_on_pe0_exit = true;
    const auto r = run_pair(
        _opt,
        [&](node& n, const std::function<void()>&) {
            void* m = alloc::msg_alloc(64 << 20);
            fill(m, 64 << 20, 0);
            recorded_send done;
            n.rdma->send(1, static_cast<const std::byte*>(m), 64 << 20, false, 0, &done);
            n.wait_for([] { return false; }, 50ms);  // the publish leaves (the connection's writer)
            ::raise(SIGKILL);
            return 80;
        },
        [&](node& n, const std::function<void()>& gate) {
            gate();  // PE 0 is dead now
            if (!n.wait_for([&] { return !n.failed_peers.empty() || !n.lost.empty(); }, 60s))
                return 90;
            n.wait_for([&] { return n.rdma->idle(); }, 10s);
            for (const auto& a : n.inbox)
                if (a.size == (64u << 20) && !check(a.msg, a.size, 0)) return 91;
            for (const auto& text : n.lost)
                if (text.find("from PE 0") == std::string::npos) return 92;
            return 0;
        });
    EXPECT_EQ(r.pe0, 128 + SIGKILL);
    EXPECT_EQ(r.pe1, 0);
}

// A publish that reaches a PE already in its shutdown is still served: PE 1 goes straight
// into its disconnect handshake, PE 0 then publishes 4 MiB and completes only at get-done,
// which PE 1 still sends (it starts nothing new, but it answers).
TEST_P(rendezvous_provider, a_publish_that_arrives_during_shutdown_is_served) {
    const auto r = run_pair(
        _opt,
        [&](node& n, const std::function<void()>&) {
            void* m = alloc::msg_alloc(4 << 20);
            fill(m, 4 << 20, 0);
            recorded_send done;
            n.wait_for([] { return false; }, 20ms);  // PE 1 is in its handshake by now
            n.rdma->send(1, static_cast<const std::byte*>(m), 4 << 20, false, 0, &done);
            if (!n.wait_for([&] { return done.calls > 0; }, 30s)) return 100;
            alloc::msg_free(m);
            return done.result == 0 ? 0 : 101;
        },
        [&](node& n, const std::function<void()>&) {
            n.shut_down();  // returns once PE 0 has disconnected too
            const bool got = n.inbox.size() == 1 && n.inbox.front().size == (4u << 20) &&
                             check(n.inbox.front().msg, 4 << 20, 0);
            return got ? 0 : 102;
        });
    EXPECT_EQ(r.pe0, 0);
    EXPECT_EQ(r.pe1, 0);
}

INSTANTIATE_TEST_SUITE_P(providers, rendezvous_provider,
                         testing::Values(provider_kind::cma, provider_kind::tcp,
                                         provider_kind::verbs),
                         [](const testing::TestParamInfo<provider_kind>& i) {
                             return std::string(to_string(i.param));
                         });

}  // namespace
}  // namespace coverse::rdma::test
