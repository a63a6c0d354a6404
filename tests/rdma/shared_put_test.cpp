// Shared puts and gets (rdma/src/shared_put.cpp) between two real processes: a put or get
// from RNDV_SPLIT bytes over cma is copied by both PEs (the target claims chunks from the
// ring's shared-put block) and lands whole at any size and alignment, alone or several at
// once; a target that is not running its loop does not hold it up; a chunk the target fails
// to copy is copied again by the initiator; with more PEs than cores nothing is shared.
// Over tcp a put or get stays one provider operation. Where a check needs
// the target to take part, the initiator waits for its first claim
// (layer::hold_shared_transfers_for_target), so no check depends on the machine's timing.
#include <gtest/gtest.h>
#include <poll.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include <coverse/alloc/message.hpp>
#include <coverse/rdma/onesided.hpp>

#include "rdma_pair.hpp"

namespace coverse::rdma::test {
namespace {

struct target_info {
    std::uint64_t address, key, length;
};
enum : std::uint64_t { op_check, op_fill, op_stats, op_fail_next };
struct check_request {
    std::uint64_t seed, offset, size;  // size 0: the end
    std::uint64_t op = op_check;       // check or fill [offset, offset + size) with seed
};
struct check_reply {
    std::uint64_t ok, helped, failed;
};

constexpr std::size_t region_bytes = (8u << 20) + 8192;

template <class T>
int send_pod(node& n, std::uint32_t to, const T& v) {
    recorded_send done;
    n.rdma->send(to, reinterpret_cast<const std::byte*>(&v), sizeof v, false, 0, &done);
    if (!n.wait_for([&] { return done.calls > 0; })) return 60;
    return done.result == 0 ? 0 : 61;
}

template <class T>
std::optional<T> next_pod(node& n) {
    // Not longer than the peer lives: a PE whose peer failed a check ends at once.
    if (!n.wait_for([&] { return !n.inbox.empty() || !n.failed_peers.empty(); }) || n.inbox.empty())
        return std::nullopt;
    const arrived a = n.inbox.front();
    n.inbox.pop_front();
    std::optional<T> out;
    if (a.size == sizeof(T)) {
        T v;
        std::memcpy(&v, a.msg, sizeof v);
        out = v;
    }
    alloc::msg_free(a.msg);
    return out;
}

// A put or get as the coroutine API makes it: shared when layer::shares_onesided says so,
// else one provider operation.
task<op_result> put_task(layer& l, provider& p, std::uint32_t pe, std::span<const std::byte> local,
                         remote_memory remote) {
    if (l.shares_onesided(p, pe, local.size())) co_return co_await l.shared_put(pe, local, remote);
    co_return co_await rdma::put(p, pe, local, remote);
}
task<op_result> get_task(layer& l, provider& p, std::uint32_t pe, std::span<std::byte> local,
                         remote_memory remote) {
    if (l.shares_onesided(p, pe, local.size())) co_return co_await l.shared_get(pe, local, remote);
    co_return co_await rdma::get(p, pe, local, remote);
}

// Starts put_task (get_task) with the peer on the node's loop; `out` holds its result.
void spawn_transfer(node& n, provider& p, bool is_get, std::span<std::byte> local,
                    remote_memory remote, std::shared_ptr<std::optional<op_result>> out) {
    n.sched.spawn(
        [](layer& l, provider& p, std::uint32_t pe, bool is_get, std::span<std::byte> local,
           remote_memory remote, std::shared_ptr<std::optional<op_result>> out) -> task<void> {
            // Two statements: `is_get ? co_await ... : co_await ...` frees an invalid pointer
            // under GCC 12 (the same as api/src/coro_onesided.cpp says).
            if (is_get)
                *out = co_await get_task(l, p, pe, local, remote);
            else
                *out = co_await put_task(l, p, pe, local, remote);
        }(*n.rdma, p, 1 - n.rank, is_get, local, remote, std::move(out)),
        is_get ? "test get" : "test put");
}

// Runs one transfer on the node's loop until it completes.
op_result transfer_now(node& n, bool is_get, std::span<std::byte> local, remote_memory remote) {
    provider* p = provider_to(*n.rdma, 1 - n.rank);
    if (!p) return {op_status::failed, "no provider reaches the peer"};
    // Shared with the task: a transfer that outlives the wait (a failure) writes nothing freed.
    auto out = std::make_shared<std::optional<op_result>>();
    spawn_transfer(n, *p, is_get, local, remote, out);
    if (!n.wait_for([&] { return out->has_value(); }))
        return {op_status::failed, "never completed"};
    return **out;
}

// Three transfers of 1 MiB + 1 at once, buffer k at k * (1 MiB + 1) of the target's
// region: they take turns on the block. 0, or 1 (one never completed) or 2 (one failed).
constexpr std::size_t each_of_three = (1u << 20) + 1;
int three_at_once(node& n, const target_info& t, bool is_get,
                  std::vector<std::vector<std::byte>>& bufs) {
    std::vector<std::shared_ptr<std::optional<op_result>>> results;
    for (std::size_t k = 0; k < 3; ++k) {
        results.push_back(std::make_shared<std::optional<op_result>>());
        spawn_transfer(n, *provider_to(*n.rdma, 1), is_get, bufs[k],
                       remote_memory{t.address + k * each_of_three, t.key, each_of_three},
                       results.back());
    }
    if (!n.wait_for([&] {
            return std::all_of(results.begin(), results.end(),
                               [](const auto& x) { return x->has_value(); });
        }))
        return 1;
    for (const auto& x : results)
        if (!(*x)->ok()) return 2;
    return 0;
}

// The target: exposes its region, then answers each check until the end; returns 0 or a code.
int serve_target(node& n, const std::function<void()>& before_checks = {}) {
    std::vector<std::byte> region(region_bytes);
    provider* p = provider_to(*n.rdma, 0);
    if (!p) return 70;
    registered reg = p->expose(std::span<const std::byte>(region));
    if (int rc = send_pod(n, 0,
                          target_info{reinterpret_cast<std::uintptr_t>(region.data()),
                                      reg.get().key, region.size()}))
        return rc;
    if (before_checks) before_checks();
    for (;;) {
        const auto c = next_pod<check_request>(n);
        if (!c) return 71;
        if (c->size == 0) return 0;
        if (c->offset + c->size > region.size()) return 72;
        bool ok = true;
        if (c->op == op_fill)
            fill(region.data() + c->offset, c->size, c->seed);
        else if (c->op == op_fail_next)
            n.rdma->fail_next_shared_chunk();
        else if (c->op == op_check)
            ok = check(region.data() + c->offset, c->size, c->seed);
        if (!ok)
            std::fprintf(stderr, "PE 1: the put of %llu bytes at %llu (seed %llu) is wrong\n",
                         static_cast<unsigned long long>(c->size),
                         static_cast<unsigned long long>(c->offset),
                         static_cast<unsigned long long>(c->seed));
        const auto& st = n.rdma->stats();
        if (int rc =
                send_pod(n, 0, check_reply{ok ? 1u : 0u, st.shared_chunks, st.shared_failures}))
            return rc;
    }
}

// One put of `size` bytes at `offset` with `seed`, then the target's verdict.
std::optional<check_reply> put_and_check(node& n, const target_info& t, std::vector<std::byte>& src,
                                         std::uint64_t seed, std::uint64_t offset,
                                         std::uint64_t size) {
    fill(src.data(), size, seed);
    const op_result r = transfer_now(n, false, std::span<std::byte>(src.data(), size),
                                     remote_memory{t.address + offset, t.key, size});
    if (!r.ok()) {
        std::fprintf(stderr, "PE 0: put of %llu bytes: %s\n", static_cast<unsigned long long>(size),
                     r.detail.c_str());
        return std::nullopt;
    }
    if (send_pod(n, 1, check_request{seed, offset, size})) return std::nullopt;
    return next_pod<check_reply>(n);
}

// The target fills `size` bytes at `offset` with `seed`; one get of them, checked here; then
// the target's counters (ok: the bytes got are right).
std::optional<check_reply> get_and_check(node& n, const target_info& t, std::vector<std::byte>& dst,
                                         std::uint64_t seed, std::uint64_t offset,
                                         std::uint64_t size) {
    if (send_pod(n, 1, check_request{seed, offset, size, op_fill})) return std::nullopt;
    if (!next_pod<check_reply>(n)) return std::nullopt;
    std::memset(dst.data(), 0, size);
    const op_result r = transfer_now(n, true, std::span<std::byte>(dst.data(), size),
                                     remote_memory{t.address + offset, t.key, size});
    if (!r.ok()) {
        std::fprintf(stderr, "PE 0: get of %llu bytes: %s\n", static_cast<unsigned long long>(size),
                     r.detail.c_str());
        return std::nullopt;
    }
    if (send_pod(n, 1, check_request{0, 0, 1, op_stats})) return std::nullopt;
    auto v = next_pod<check_reply>(n);
    if (v) v->ok = check(dst.data(), size, seed) ? 1 : 0;
    if (v && !v->ok)
        std::fprintf(stderr, "PE 0: the get of %llu bytes at %llu (seed %llu) is wrong\n",
                     static_cast<unsigned long long>(size), static_cast<unsigned long long>(offset),
                     static_cast<unsigned long long>(seed));
    return v;
}

std::optional<check_reply> transfer_and_check(node& n, const target_info& t, bool is_get,
                                              std::vector<std::byte>& buf, std::uint64_t seed,
                                              std::uint64_t offset, std::uint64_t size) {
    return is_get ? get_and_check(n, t, buf, seed, offset, size)
                  : put_and_check(n, t, buf, seed, offset, size);
}

// Sizes around RNDV_SPLIT and odd sizes at odd offsets, each checked: 0, 11 (no verdict)
// or 12 (wrong bytes).
int sizes_land_whole(node& n, const target_info& t, bool is_get, std::size_t split,
                     std::vector<std::byte>& buf) {
    struct one {
        std::uint64_t offset, size;
    };
    const one cases[] = {{0, split - 1},         {0, split},
                         {1, (1u << 20) + 3},    {4095, 2 * split + 1},
                         {1, (4u << 20) + 4097}, {8192, 8u << 20}};
    std::uint64_t seed = 1;
    for (const one& c : cases) {
        const auto v = transfer_and_check(n, t, is_get, buf, seed++, c.offset, c.size);
        if (!v) return 11;
        if (!v->ok) return 12;
    }
    return 0;
}

// Eight 1 MiB transfers, each waiting for the target's first claim (a test hook: whether a
// target that polls gets there before the initiator is done is up to the machine's load).
// The chunks the target copied over the last 7, or nullopt when one failed.
std::optional<std::uint64_t> chunks_the_target_copied(node& n, const target_info& t, bool is_get,
                                                      std::vector<std::byte>& buf) {
    n.rdma->hold_shared_transfers_for_target(10s);
    std::uint64_t helped_before = 0, helped = 0;
    for (int k = 0; k < 8; ++k) {
        const auto v = transfer_and_check(n, t, is_get, buf, 1000 + k, 0, 1u << 20);
        if (!v || !v->ok) return std::nullopt;
        if (k == 0) helped_before = v->helped;
        helped = v->helped;
    }
    return helped - helped_before;
}

class shared_put : public testing::TestWithParam<provider_kind> {
protected:
    void SetUp() override {
        _opt.cfg.forced = GetParam();
        _opt.same_host = GetParam() != provider_kind::tcp;
    }
    pair_options _opt;
};

// Sizes around RNDV_SPLIT, odd sizes at odd offsets, three puts at once; then 1 MiB puts,
// of which over cma the target copies a chunk of each (over tcp nothing is shared).
TEST_P(shared_put, puts_land_whole_and_over_cma_the_target_copies_part) {
    const bool cma = GetParam() == provider_kind::cma;
    const std::size_t split = _opt.cfg.rndv_split;
    const auto r = run_pair(
        _opt,
        [&](node& n, const std::function<void()>&) {
            const auto t = next_pod<target_info>(n);
            if (!t) return 10;
            std::vector<std::byte> src(region_bytes);
            if (const int rc = sizes_land_whole(n, *t, false, split, src)) return rc;
            std::vector<std::vector<std::byte>> bufs(3, std::vector<std::byte>(each_of_three));
            for (std::size_t k = 0; k < 3; ++k)
                fill(bufs[k].data(), each_of_three, 100 + k);
            if (const int rc = three_at_once(n, *t, false, bufs)) return 12 + rc;  // 13, 14
            for (std::size_t k = 0; k < 3; ++k) {
                if (send_pod(n, 1, check_request{100 + k, k * each_of_three, each_of_three}))
                    return 15;
                const auto v = next_pod<check_reply>(n);
                if (!v || !v->ok) return 16;
            }
            const auto helped = chunks_the_target_copied(n, *t, false, src);
            if (!helped) return 17;
            const std::uint64_t shared = n.rdma->stats().shared_puts;
            if (send_pod(n, 1, check_request{0, 0, 0})) return 18;
            if (cma) {
                if (shared == 0) return 19;
                if (*helped < 7) return 20;  // the target took no chunk of some put
            } else if (shared != 0 || *helped != 0) {
                return 21;  // over tcp a put is one provider put
            }
            return 0;
        },
        [&](node& n, const std::function<void()>&) { return serve_target(n); });
    EXPECT_EQ(r.pe0, 0);
    EXPECT_EQ(r.pe1, 0);
}

// Gets as the puts above: the target fills, PE 0 gets and checks; over cma the target
// writes part of each (a chunk of each of the last 7, when PE 0 waits for its claim).
TEST_P(shared_put, gets_land_whole_and_over_cma_the_target_copies_part) {
    const bool cma = GetParam() == provider_kind::cma;
    const std::size_t split = _opt.cfg.rndv_split;
    const auto r = run_pair(
        _opt,
        [&](node& n, const std::function<void()>&) {
            const auto t = next_pod<target_info>(n);
            if (!t) return 10;
            std::vector<std::byte> dst(region_bytes);
            if (const int rc = sizes_land_whole(n, *t, true, split, dst)) return rc;
            for (std::size_t k = 0; k < 3; ++k) {
                if (send_pod(n, 1,
                             check_request{300 + k, k * each_of_three, each_of_three, op_fill}))
                    return 22;
                if (!next_pod<check_reply>(n)) return 23;
            }
            std::vector<std::vector<std::byte>> bufs(3, std::vector<std::byte>(each_of_three));
            if (const int rc = three_at_once(n, *t, true, bufs)) return 23 + rc;  // 24, 25
            for (std::size_t k = 0; k < 3; ++k)
                if (!check(bufs[k].data(), each_of_three, 300 + k)) return 25;
            const auto helped = chunks_the_target_copied(n, *t, true, dst);
            if (!helped) return 13;
            // A chunk the target fails to write: PE 0 gets the whole of it again.
            if (cma) {
                if (send_pod(n, 1, check_request{0, 0, 1, op_fail_next})) return 14;
                if (!next_pod<check_reply>(n)) return 15;
                const auto v = get_and_check(n, *t, dst, 2000, 0, 1u << 20);
                if (!v || !v->ok) return 16;
                if (v->failed != 1) return 17;
            }
            const std::uint64_t shared = n.rdma->stats().shared_gets;
            if (send_pod(n, 1, check_request{0, 0, 0})) return 18;
            if (cma) {
                if (shared == 0) return 19;
                if (*helped < 7) return 20;
            } else if (shared != 0 || *helped != 0) {
                return 21;
            }
            return 0;
        },
        [&](node& n, const std::function<void()>&) { return serve_target(n); });
    EXPECT_EQ(r.pe0, 0);
    EXPECT_EQ(r.pe1, 0);
}

INSTANTIATE_TEST_SUITE_P(providers, shared_put,
                         testing::Values(provider_kind::cma, provider_kind::tcp),
                         [](const testing::TestParamInfo<provider_kind>& i) {
                             return std::string(to_string(i.param));
                         });

// PE 1 stops running its loop (blocked on a pipe) before PE 0 puts: the put, and a get
// after it, complete all the same (PE 0 copies every chunk) and move the right bytes; then,
// PE 1 in its loop again, the next put is shared as usual.
TEST(shared_put_cma, a_put_and_a_get_complete_while_the_target_is_outside_its_loop) {
    int go[2], up[2];
    ASSERT_EQ(::pipe(go), 0);
    ASSERT_EQ(::pipe(up), 0);
    pair_options opt;
    opt.cfg.forced = provider_kind::cma;
    const auto r = run_pair(
        opt,
        [&](node& n, const std::function<void()>&) {
            ::close(go[0]);
            ::close(up[1]);
            struct release_pe1 {
                int fd;
                ~release_pe1() {
                    if (fd >= 0) [[maybe_unused]]
                        auto w = ::write(fd, "g", 1);
                }
            } guard{go[1]};
            const auto t = next_pod<target_info>(n);
            if (!t) return 30;
            pollfd blocked{up[0], POLLIN, 0};
            char c;
            if (::poll(&blocked, 1, 60'000) != 1 || ::read(up[0], &c, 1) != 1) return 31;
            std::vector<std::byte> src(4u << 20);
            fill(src.data(), src.size(), 7);
            const op_result put =
                transfer_now(n, false, src, remote_memory{t->address, t->key, src.size()});
            if (!put.ok()) return 32;
            if (n.rdma->stats().shared_puts != 1) return 33;
            // A get while PE 1 is still blocked: it brings back what the put wrote.
            std::vector<std::byte> back(src.size());
            const op_result get =
                transfer_now(n, true, back, remote_memory{t->address, t->key, back.size()});
            if (!get.ok() || !check(back.data(), back.size(), 7)) return 39;
            if (n.rdma->stats().shared_gets != 1) return 40;
            [[maybe_unused]] auto w = ::write(go[1], "g", 1);
            guard.fd = -1;
            if (send_pod(n, 1, check_request{7, 0, src.size()})) return 34;
            const auto v = next_pod<check_reply>(n);
            if (!v || !v->ok) return 35;
            // PE 1 runs its loop again: the next put is shared as usual.
            n.rdma->hold_shared_transfers_for_target(10s);
            const auto again = put_and_check(n, *t, src, 8, 0, src.size());
            if (!again || !again->ok) return 36;
            if (again->helped == 0) return 37;
            return send_pod(n, 1, check_request{0, 0, 0}) ? 38 : 0;
        },
        [&](node& n, const std::function<void()>&) {
            ::close(go[1]);
            ::close(up[0]);
            return serve_target(n, [&] {
                // Bounded: a PE 0 that died never writes (the parent holds the pipe open).
                char c;
                pollfd go_on{go[0], POLLIN, 0};
                if (::write(up[1], "u", 1) == 1 && ::poll(&go_on, 1, 60'000) == 1) [[maybe_unused]]
                    auto rd = ::read(go[0], &c, 1);
            });
        });
    for (int fd : {go[0], go[1], up[0], up[1]})
        ::close(fd);
    EXPECT_EQ(r.pe0, 0);
    EXPECT_EQ(r.pe1, 0);
}

// With more PEs than cores (the schedulers' yield_while_spinning) nothing is shared: puts and
// gets are one provider operation each, and land whole.
TEST(shared_put_cma, nothing_is_shared_with_more_pes_than_cores) {
    pair_options opt;
    opt.cfg.forced = provider_kind::cma;
    opt.yield_while_spinning = true;
    const auto r = run_pair(
        opt,
        [&](node& n, const std::function<void()>&) {
            const auto t = next_pod<target_info>(n);
            if (!t) return 50;
            provider* p = provider_to(*n.rdma, 1);
            if (!p || n.rdma->shares_onesided(*p, 1, 1u << 20)) return 51;
            std::vector<std::byte> buf(1u << 20);
            const auto v = put_and_check(n, *t, buf, 3000, 0, buf.size());
            if (!v || !v->ok) return 52;
            const auto w = get_and_check(n, *t, buf, 3001, 0, buf.size());
            if (!w || !w->ok) return 53;
            const auto& st = n.rdma->stats();
            if (st.shared_puts != 0 || st.shared_gets != 0 || w->helped != 0) return 54;
            return send_pod(n, 1, check_request{0, 0, 0}) ? 55 : 0;
        },
        [&](node& n, const std::function<void()>&) { return serve_target(n); });
    EXPECT_EQ(r.pe0, 0);
    EXPECT_EQ(r.pe1, 0);
}

// The target fails the first chunk it takes (fault injection): the initiator sees it and
// copies that put again itself, so the put still lands whole.
TEST(shared_put_cma, a_chunk_the_target_fails_is_copied_again_by_the_initiator) {
    pair_options opt;
    opt.cfg.forced = provider_kind::cma;
    const auto r = run_pair(
        opt,
        [&](node& n, const std::function<void()>&) {
            const auto t = next_pod<target_info>(n);
            if (!t) return 40;
            n.rdma->hold_shared_transfers_for_target(10s);  // the target claims a chunk of each
            std::vector<std::byte> src(1u << 20);
            const auto v = put_and_check(n, *t, src, 2000, 0, src.size());
            if (!v) return 41;
            if (!v->ok) return 42;
            if (v->failed != 1) return 44;
            // The next put is shared again, the target's chunk copied by the target.
            const auto w = put_and_check(n, *t, src, 2001, 0, src.size());
            if (!w || !w->ok) return 45;
            if (w->helped == 0 || w->failed != 1) return 46;
            return send_pod(n, 1, check_request{0, 0, 0}) ? 43 : 0;
        },
        [&](node& n, const std::function<void()>&) {
            n.rdma->fail_next_shared_chunk();
            return serve_target(n);
        });
    EXPECT_EQ(r.pe0, 0);
    EXPECT_EQ(r.pe1, 0);
}

}  // namespace
}  // namespace coverse::rdma::test
