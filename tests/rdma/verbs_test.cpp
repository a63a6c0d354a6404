// The verbs provider: device discovery and its reason when there is none, the address blob a
// peer parses, and — on a machine with an active RDMA port — two providers in this process
// with loopback queue pairs connected to each other, getting and putting 1 MiB and 1 byte,
// and a get naming a key nobody registered. Without a device those cases skip, naming why.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <coverse/rdma/provider.hpp>
#include <coverse/rdma/verbs.hpp>
#include <coverse/runtime/scheduler.hpp>

namespace coverse::rdma {
namespace {

TEST(verbs_discovery, an_empty_list_says_why) {
    std::string why;
    const auto devices = list_verbs_devices(&why);
    if (devices.empty()) {
        EXPECT_NE(why.find("no RDMA device"), std::string::npos) << why;
        return;
    }
    for (const verbs_device& d : devices) {
        EXPECT_FALSE(d.name.empty());
        EXPECT_EQ(d.node_guid.size(), 16u) << d.name;
        for (const verbs_port& p : d.ports) {
            EXPECT_GE(p.number, 1u) << d.name;
            EXPECT_FALSE(p.state.empty()) << d.name;
        }
    }
}

TEST(verbs_discovery, no_provider_comes_with_a_reason) {
    scheduler sched;
    std::string why;
    auto p = make_verbs_provider(sched, 0, 2, &why);
    if (p) {
        EXPECT_EQ(p->kind(), provider_kind::verbs);
        EXPECT_TRUE(p->caps().local_registration);
        EXPECT_GT(p->caps().max_transfer, 0u);
        return;
    }
    EXPECT_FALSE(why.empty());
    std::string listed;
    if (list_verbs_devices(&listed).empty()) {
        EXPECT_NE(why.find("no RDMA device"), std::string::npos) << why;
    }
}

verbs_address sample_address() {
    verbs_address a;
    a.qpn = 0xAB'CDEF;
    a.psn = 0x12'3456;
    a.lid = 0xBEEF;
    a.port = 2;
    a.mtu = 5;
    a.link_layer = verbs_link_ethernet;
    a.rd_atomic = 16;
    for (std::size_t i = 0; i < a.gid.size(); ++i)
        a.gid[i] = static_cast<std::uint8_t>(0xF0 + i);
    return a;
}

TEST(verbs_address_blob, round_trips_every_field) {
    const verbs_address a = sample_address();
    const auto blob = encode_verbs_address(a);
    ASSERT_EQ(blob.size(), verbs_address_size);
    // Little-endian on the wire, whatever the host.
    EXPECT_EQ(blob[0], std::byte{0xEF});
    EXPECT_EQ(blob[2], std::byte{0xAB});
    EXPECT_EQ(blob[8], std::byte{0xEF});
    EXPECT_EQ(blob[9], std::byte{0xBE});
    std::string why;
    const auto back = decode_verbs_address(blob, &why);
    ASSERT_TRUE(back) << why;
    EXPECT_EQ(*back, a);
}

TEST(verbs_address_blob, rejects_wrong_sizes) {
    const auto blob = encode_verbs_address(sample_address());
    for (std::size_t n : {std::size_t{0}, std::size_t{16}, verbs_address_size - 1}) {
        std::string why;
        EXPECT_FALSE(decode_verbs_address(std::span(blob.data(), n), &why)) << n;
        EXPECT_NE(why.find(std::to_string(n) + " bytes (expected 32)"), std::string::npos) << why;
    }
    std::vector<std::byte> longer = blob;
    longer.push_back(std::byte{0});
    std::string why;
    EXPECT_FALSE(decode_verbs_address(longer, &why));
    EXPECT_NE(why.find("33 bytes"), std::string::npos) << why;
}

TEST(verbs_address_blob, rejects_impossible_fields) {
    const auto with = [](auto change) {
        verbs_address a = sample_address();
        change(a);
        std::string why;
        const bool ok = decode_verbs_address(encode_verbs_address(a), &why).has_value();
        return ok ? std::string() : why;
    };
    EXPECT_NE(with([](verbs_address& a) { a.qpn = 0x100'0000; }).find("24 bits"),
              std::string::npos);
    EXPECT_NE(with([](verbs_address& a) { a.psn = 0xFFFF'FFFF; }).find("24 bits"),
              std::string::npos);
    EXPECT_NE(with([](verbs_address& a) { a.mtu = 0; }).find("MTU"), std::string::npos);
    EXPECT_NE(with([](verbs_address& a) { a.mtu = 6; }).find("MTU"), std::string::npos);
    EXPECT_NE(with([](verbs_address& a) { a.link_layer = 3; }).find("link layer"),
              std::string::npos);
    EXPECT_NE(with([](verbs_address& a) { a.rd_atomic = 0; }).find("RDMA reads"),
              std::string::npos);
}

TEST(verbs_address_blob, random_bytes_never_crash_and_valid_ones_round_trip) {
    std::mt19937 rng(7);
    std::size_t accepted = 0;
    const auto valid = encode_verbs_address(sample_address());
    for (int i = 0; i < 20000; ++i) {
        // Odd rounds: random bytes of a random size; even: a valid blob with a few bytes hit.
        std::vector<std::byte> blob = valid;
        if (i % 2) {
            blob.resize(rng() % 64);
            for (auto& b : blob)
                b = static_cast<std::byte>(rng());
        } else {
            for (unsigned k = rng() % 3; k < 3; ++k)
                blob[rng() % blob.size()] = static_cast<std::byte>(rng());
        }
        std::string why;
        const auto a = decode_verbs_address(blob, &why);
        if (!a) {
            EXPECT_FALSE(why.empty());
            continue;
        }
        ++accepted;
        // Whatever it accepted re-encodes to the same bytes, but for the reserved pair.
        auto again = encode_verbs_address(*a);
        blob[14] = blob[15] = std::byte{0};
        EXPECT_EQ(again, blob);
    }
    EXPECT_GT(accepted, 0u);
}

// ---- with a device ----------------------------------------------------------------------

struct waiter final : op_completion {
    std::optional<op_result> result;
    void complete(op_result r) noexcept override { result = std::move(r); }
};

class verbs_loopback : public ::testing::Test {
protected:
    void SetUp() override {
        std::string why;
        a = make_verbs_provider(sched, 0, 2, &why);
        if (!a)
            GTEST_SKIP() << (why.starts_with("no RDMA device") ? why : "no RDMA device: " + why);
        b = make_verbs_provider(sched, 1, 2, &why);
        ASSERT_TRUE(b) << why;
        const auto blob_a = a->address_blob_for(1);
        const auto blob_b = b->address_blob_for(0);
        const auto ab = a->connect_peer(1, blob_b);
        ASSERT_FALSE(ab) << *ab;
        const auto ba = b->connect_peer(0, blob_a);
        ASSERT_FALSE(ba) << *ba;
    }
    void TearDown() override {
        b.reset();
        a.reset();
    }

    // Runs the loop until `w` completes; a hang is a failure, not a wait forever.
    op_result wait(waiter& w) {
        const auto give_up = clock::now() + std::chrono::seconds(30);
        sched.run_until([&] { return w.result.has_value() || clock::now() > give_up; });
        if (!w.result) return {op_status::failed, "no completion within 30 s"};
        return *w.result;
    }

    static std::vector<std::byte> pattern(std::size_t n, unsigned seed) {
        std::vector<std::byte> v(n);
        for (std::size_t i = 0; i < n; ++i)
            v[i] = static_cast<std::byte>((i * 131 + seed) & 0xFF);
        return v;
    }

    // A get reads b's `source` into a's `sink`; a put writes a's `source` into b's `sink`.
    void transfer(std::size_t n, bool put) {
        auto source = pattern(n, put ? 5 : 3);
        std::vector<std::byte> sink(n, std::byte{0});
        std::vector<std::byte>& remote = put ? sink : source;
        registered reg = b->expose(remote);
        const remote_memory at{reinterpret_cast<std::uintptr_t>(remote.data()), reg.get().key, n};
        waiter w;
        if (put)
            a->post_put(1, source, at, w);
        else
            a->post_get(1, sink, at, w);
        const op_result r = wait(w);
        ASSERT_TRUE(r.ok()) << r.detail;
        EXPECT_TRUE(sink == source) << "the bytes that arrived differ";
    }

    scheduler sched;
    std::unique_ptr<provider> a, b;
};

TEST_F(verbs_loopback, get_of_1_mib) {
    transfer(1u << 20, false);
}
TEST_F(verbs_loopback, get_of_1_byte) {
    transfer(1, false);
}
TEST_F(verbs_loopback, put_of_1_mib) {
    transfer(1u << 20, true);
}
TEST_F(verbs_loopback, put_of_1_byte) {
    transfer(1, true);
}

TEST_F(verbs_loopback, a_get_with_an_unregistered_key_names_the_opcode_and_status) {
    std::vector<std::byte> remote(4096, std::byte{1});
    std::vector<std::byte> local(4096);
    registered reg = b->expose(remote);
    waiter w;
    // A key the peer never handed out: flip the key's low byte (the NIC's own tag).
    const std::uint64_t bad_key = reg.get().key ^ 0x5Au;
    a->post_get(
        1, local,
        remote_memory{reinterpret_cast<std::uintptr_t>(remote.data()), bad_key, local.size()}, w);
    const op_result r = wait(w);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status, op_status::peer_lost) << r.detail;
    EXPECT_NE(r.detail.find("RDMA READ"), std::string::npos) << r.detail;
    EXPECT_NE(r.detail.find("PE 1"), std::string::npos) << r.detail;
    EXPECT_NE(r.detail.find("(status "), std::string::npos) << r.detail;
    // Later operations on that queue pair fail at once, naming the first cause.
    waiter again;
    a->post_get(
        1, local,
        remote_memory{reinterpret_cast<std::uintptr_t>(remote.data()), reg.get().key, local.size()},
        again);
    ASSERT_TRUE(again.result) << "a queue pair in ERR fails new operations synchronously";
    EXPECT_NE(again.result->detail.find("failed before"), std::string::npos)
        << again.result->detail;
}

TEST_F(verbs_loopback, after_peer_lost_operations_complete_as_peer_lost) {
    std::vector<std::byte> remote(64), local(64);
    registered reg = b->expose(remote);
    a->peer_lost(1);
    waiter w;
    a->post_get(
        1, local,
        remote_memory{reinterpret_cast<std::uintptr_t>(remote.data()), reg.get().key, local.size()},
        w);
    const op_result r = wait(w);
    EXPECT_EQ(r.status, op_status::peer_lost) << r.detail;
    EXPECT_NE(r.detail.find("PE 1"), std::string::npos) << r.detail;
}

TEST_F(verbs_loopback, an_unconnected_pe_fails_at_once) {
    std::vector<std::byte> local(8);
    waiter w;
    a->post_get(0, local, remote_memory{0, 0, local.size()}, w);  // ourselves: no queue pair
    ASSERT_TRUE(w.result);
    EXPECT_EQ(w.result->status, op_status::failed);
    EXPECT_NE(w.result->detail.find("no connected queue pair"), std::string::npos);
}

}  // namespace
}  // namespace coverse::rdma
