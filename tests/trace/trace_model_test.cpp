// coverse-trace's analyses: clocks aligned from the headers, lifecycles rebuilt, flows
// matched by (sender, receiver, sequence), nearest-rank percentiles, leaks (and the exit
// status they cause), stalls with their duration units.
#include "trace_test_support.hpp"

namespace coverse::test {
namespace {

using trace::protocol;
using trace_tool::handle_state;

constexpr std::uint64_t us = 1000, ms = 1000 * 1000;

trace::handle_allocation send_to(std::uint32_t peer, std::uint32_t seq, std::uint32_t bytes,
                                 protocol p) {
    return {seq, bytes, peer, trace::direction::send, p};
}
trace::handle_allocation receive_from(std::uint32_t peer, std::uint32_t seq, std::uint32_t bytes,
                                      protocol p) {
    return {seq, bytes, peer, trace::direction::receive, p};
}

class trace_model_test : public trace_dir_test {};

TEST_F(trace_model_test, merge_aligns_pe_clocks_from_their_headers) {
    // Two PEs whose steady clocks have unrelated origins; PE 1 started 2 us after PE 0.
    raw_file pe0, pe1;
    pe0.pe = 0;
    pe0.steady_ref = 1 * ms;
    pe1.pe = 1;
    pe1.steady_ref = 5'000'000 * ms;
    pe1.realtime_ref = pe0.realtime_ref + 2 * us;
    const auto a = send_to(1, 0, 8, protocol::inlined);
    const auto b = receive_from(0, 0, 8, protocol::inlined);
    pe0.add(1 * us, kind::handle_allocated, 1, a.a(), a.b());
    pe1.add(500, kind::handle_allocated, 1, b.a(), b.b());
    pe0.write(dir);
    pe1.write(dir);

    const auto set = trace_tool::load_dir(dir.string());
    ASSERT_EQ(set.pes.size(), 2u);
    EXPECT_TRUE(set.problems.empty());
    EXPECT_EQ(set.origin_realtime_ns, pe0.realtime_ref);
    EXPECT_EQ(set.pes[0].events[0].ts_ns, 1 * us);
    EXPECT_EQ(set.pes[1].events[0].ts_ns, 2 * us + 500) << "PE 1's event lands after PE 0's";
    EXPECT_EQ(set.pes[1].info.backend, "io_uring");
    const auto m = trace_tool::analyse(set);
    std::size_t unmatched = 9;
    const auto flows = trace_tool::match_flows(m, &unmatched);
    ASSERT_EQ(flows.size(), 1u);
    EXPECT_EQ(unmatched, 0u);
    EXPECT_EQ(m.handles[flows[0].send].pe, 0u);
    EXPECT_EQ(m.handles[flows[0].receive].pe, 1u);
}

TEST_F(trace_model_test, percentiles_are_nearest_rank) {
    std::vector<std::uint64_t> v;
    for (std::uint64_t i = 100; i >= 1; --i)
        v.push_back(i);
    auto s = trace_tool::percentiles(v);
    EXPECT_EQ(s.n, 100u);
    EXPECT_EQ(s.p50, 50u);
    EXPECT_EQ(s.p99, 99u);
    EXPECT_EQ(s.max, 100u);
    s = trace_tool::percentiles({7});
    EXPECT_EQ(s.p50, 7u);
    EXPECT_EQ(s.p99, 7u);
    v.clear();
    for (std::uint64_t i = 1; i <= 1000; ++i)
        v.push_back(i);
    s = trace_tool::percentiles(v);
    EXPECT_EQ(s.p50, 500u);
    EXPECT_EQ(s.p99, 990u);
    EXPECT_EQ(s.max, 1000u);
    s = trace_tool::percentiles({});
    EXPECT_EQ(s.n, 0u);
    EXPECT_EQ(s.max, 0u);
}

TEST_F(trace_model_test, summary_counts_protocols_latencies_bytes_and_credits) {
    raw_file pe0;
    // 100 eager-short sends with latencies 1..100 us, 10 bytes each; 2 rendezvous sends,
    // one never completed; credits and a registration.
    std::uint64_t t = 0;
    for (std::uint32_t i = 1; i <= 100; ++i, t += 200 * us) {
        const auto h = send_to(1, i - 1, 10, protocol::eager_short);
        pe0.add(t, kind::handle_allocated, i, h.a(), h.b());
        pe0.add(t + 1, kind::credit_spent, 1, 1, trace::credit_protocol(protocol::eager_short));
        pe0.add(t + i * us, kind::handle_completed, i);
        pe0.add(t + i * us + 1, kind::handle_released, i);
    }
    const auto r1 = send_to(1, 100, 1 << 20, protocol::rendezvous);
    pe0.add(t, kind::registration_added, 77, 1 << 20);
    pe0.add(t + 1, kind::handle_allocated, 500, r1.a(), r1.b());
    pe0.add(t + 2, kind::handle_published, 500);
    pe0.add(t + 3 * ms, kind::handle_completed, 500);
    pe0.add(t + 3 * ms + 1, kind::handle_released, 500);
    pe0.add(t + 3 * ms + 2, kind::registration_dropped, 77, 1 << 20);
    const auto r2 = send_to(1, 101, 4096, protocol::rendezvous);
    pe0.add(t + 4 * ms, kind::handle_allocated, 501, r2.a(), r2.b());
    pe0.add(t + 5 * ms, kind::credit_returned, 1, 98,
            trace::credit_protocol(protocol::eager_short));
    pe0.add(t + 5 * ms, kind::credit_returned, 1, 2, 0);
    pe0.write(dir);

    const auto set = trace_tool::load_dir(dir.string());
    const auto m = trace_tool::analyse(set);
    const auto s = trace_tool::summarize(m);
    ASSERT_EQ(s.rows.size(), 2u);
    const auto& rdv = s.rows[0];  // rendezvous (2) sorts before eager short (3)
    EXPECT_EQ(rdv.proto, 2u);
    EXPECT_EQ(rdv.handles, 2u);
    EXPECT_EQ(rdv.completed, 1u);
    EXPECT_EQ(rdv.released, 1u);
    EXPECT_EQ(rdv.latency.max, 3 * ms - 1);
    EXPECT_EQ(rdv.bytes, (1u << 20) + 4096u);
    const auto& eager = s.rows[1];
    EXPECT_EQ(eager.proto, 3u);
    EXPECT_EQ(eager.dir, trace::direction::send);
    EXPECT_EQ(eager.handles, 100u);
    EXPECT_EQ(eager.completed, 100u);
    EXPECT_EQ(eager.latency.p50, 50 * us);
    EXPECT_EQ(eager.latency.p99, 99 * us);
    EXPECT_EQ(eager.latency.max, 100 * us);
    EXPECT_EQ(eager.bytes, 1000u);
    ASSERT_EQ(s.credits.size(), 2u);
    EXPECT_EQ(s.credits[0].attribution, 0u);
    EXPECT_EQ(s.credits[0].returned, 2u);
    EXPECT_EQ(s.credits[1].spent, 100u);
    EXPECT_EQ(s.credits[1].returned, 98u);
    ASSERT_EQ(s.credit_pairs.size(), 1u);
    EXPECT_EQ(s.credit_pairs[0].spent, 100u);
    EXPECT_EQ(s.credit_pairs[0].returned, 100u);
    EXPECT_EQ(s.registrations, 1u);
    EXPECT_EQ(s.registrations_dropped, 1u);
    EXPECT_EQ(s.unmatched, 102u) << "no receiver file: every send lacks its other end";

    std::ostringstream out;
    trace_tool::print_summary(set, m, s, out);
    const std::string text = out.str();
    EXPECT_NE(text.find("eager short"), std::string::npos) << text;
    EXPECT_NE(text.find("50.0 us"), std::string::npos) << text;
    EXPECT_NE(text.find("99.0 us"), std::string::npos) << text;
    EXPECT_NE(text.find("rendezvous"), std::string::npos) << text;
    EXPECT_NE(text.find("registrations: 1 added (1.0 MiB), 1 dropped"), std::string::npos) << text;

    const auto r = cli({"summary", dir.string()});
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.out, text);
}

TEST_F(trace_model_test, a_deliberately_unreleased_handle_is_a_leak) {
    pingpong(dir, 5, protocol::eager_short, /*leak_last=*/true);
    const auto set = trace_tool::load_dir(dir.string());
    const auto m = trace_tool::analyse(set);
    const auto leaks = trace_tool::find_leaks(set, m);
    ASSERT_EQ(leaks.size(), 1u);
    EXPECT_EQ(leaks[0].what, trace_tool::leak::what_t::handle);
    EXPECT_EQ(leaks[0].pe, 1u);
    EXPECT_EQ(leaks[0].last_state, "completed");
    EXPECT_TRUE(leaks[0].certain);
    EXPECT_NE(leaks[0].description.find("receive eager short from PE 0 #4"), std::string::npos)
        << leaks[0].description;

    const auto r = cli({"leaks", dir.string()});
    EXPECT_EQ(r.status, trace_tool::exit_found) << r.out << r.err;
    EXPECT_NE(r.out.find("1 found"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("PE 1"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("last state completed at"), std::string::npos) << r.out;
}

TEST_F(trace_model_test, a_clean_run_has_no_leaks_and_exits_0) {
    pingpong(dir, 5, protocol::inlined);
    const auto r = cli({"leaks", dir.string()});
    EXPECT_EQ(r.status, 0) << r.out << r.err;
    EXPECT_NE(r.out.find(": none"), std::string::npos) << r.out;
    EXPECT_TRUE(r.err.empty()) << r.err;
}

TEST_F(trace_model_test, registrations_and_credits_never_given_back_are_leaks) {
    raw_file pe0;
    pe0.add(10, kind::registration_added, 1, 4096);
    pe0.add(20, kind::registration_added, 2, 8192);
    pe0.add(30, kind::registration_dropped, 1, 4096);
    pe0.add(40, kind::credit_spent, 3, 3, 0);
    pe0.add(50, kind::credit_returned, 3, 1, 0);
    pe0.add(60, kind::credit_spent, 2, 1, 0);
    pe0.add(70, kind::credit_returned, 2, 1, 0);
    pe0.write(dir);
    const auto set = trace_tool::load_dir(dir.string());
    const auto leaks = trace_tool::find_leaks(set, trace_tool::analyse(set));
    ASSERT_EQ(leaks.size(), 2u);
    EXPECT_EQ(leaks[0].what, trace_tool::leak::what_t::registration);
    EXPECT_NE(leaks[0].description.find("registration 2 (8.0 KiB)"), std::string::npos);
    EXPECT_EQ(leaks[0].since, 20u);
    EXPECT_EQ(leaks[1].what, trace_tool::leak::what_t::credits);
    EXPECT_NE(leaks[1].description.find("to PE 3: 3 spent, 1 returned, 2 outstanding"),
              std::string::npos)
        << leaks[1].description;
    EXPECT_EQ(cli({"leaks", dir.string()}).status, trace_tool::exit_found);
}

TEST_F(trace_model_test, open_handles_of_a_pe_that_lost_its_tail_are_uncertain) {
    auto o = opts_for(dir);
    // Stop mode, room for 6 phase events, 4 rounds of 6 handle events and 2 more: each
    // PE's 5th round stops with a handle allocated and completed, never released.
    o.limit_bytes = 32 * sizeof(trace::event);
    ::testing::internal::CaptureStderr();
    pingpong(dir, 20, protocol::stream, false, o);
    ::testing::internal::GetCapturedStderr();
    const auto set = trace_tool::load_dir(dir.string());
    EXPECT_TRUE(set.pes[0].lost_tail());
    const auto leaks = trace_tool::find_leaks(set, trace_tool::analyse(set));
    ASSERT_FALSE(leaks.empty());
    for (const auto& l : leaks)
        EXPECT_FALSE(l.certain) << l.description;
    const auto r = cli({"leaks", dir.string()});
    EXPECT_EQ(r.status, 0) << r.out;
    EXPECT_NE(r.out.find("uncertain"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("reached its trace limit"), std::string::npos) << r.out;
}

TEST_F(trace_model_test, stalls_are_states_held_longer_than_the_bound) {
    raw_file pe0;
    const auto a = send_to(1, 0, 100, protocol::rendezvous);
    pe0.add(0, kind::handle_allocated, 1, a.a(), a.b());
    pe0.add(1 * ms, kind::handle_published, 1);
    pe0.add(20 * ms, kind::handle_completed, 1);
    pe0.add(21 * ms, kind::handle_released, 1);
    const auto b = send_to(1, 1, 100, protocol::eager_long);
    pe0.add(5 * ms, kind::handle_allocated, 2, b.a(), b.b());
    pe0.add(30 * ms, kind::user, 0);  // the PE's trace goes on to 30 ms
    pe0.write(dir);
    const auto set = trace_tool::load_dir(dir.string());
    const auto m = trace_tool::analyse(set);
    const auto stalls = trace_tool::find_stalls(set, m, 10 * ms);
    ASSERT_EQ(stalls.size(), 2u);
    EXPECT_EQ(m.handles[stalls[0].handle].id, 2u) << "longest first";
    EXPECT_EQ(stalls[0].state, handle_state::allocated);
    EXPECT_EQ(stalls[0].duration, 25 * ms);
    EXPECT_TRUE(stalls[0].open);
    EXPECT_EQ(m.handles[stalls[1].handle].id, 1u);
    EXPECT_EQ(stalls[1].state, handle_state::published);
    EXPECT_EQ(stalls[1].entered, 1 * ms);
    EXPECT_EQ(stalls[1].duration, 19 * ms);
    EXPECT_FALSE(stalls[1].open);

    auto r = cli({"stalls", dir.string(), "--over", "10ms"});
    EXPECT_EQ(r.status, trace_tool::exit_found);
    EXPECT_NE(r.out.find("published for 19.00 ms from 1.000 ms"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("still in it"), std::string::npos) << r.out;
    EXPECT_EQ(cli({"stalls", "--over=20000us", dir.string()}).status, trace_tool::exit_found);
    r = cli({"stalls", dir.string(), "--over", "0.03s"});
    EXPECT_EQ(r.status, 0) << r.out;
    EXPECT_NE(r.out.find("none (2 handles checked)"), std::string::npos) << r.out;
}

TEST_F(trace_model_test, durations_parse_with_units_only) {
    using trace_tool::parse_duration;
    EXPECT_EQ(parse_duration("10ms"), 10 * ms);
    EXPECT_EQ(parse_duration("250us"), 250 * us);
    EXPECT_EQ(parse_duration("250\xc2\xb5s"), 250 * us);
    EXPECT_EQ(parse_duration("1.5s"), 1500 * ms);
    EXPECT_EQ(parse_duration("0.5ms"), 500 * us);
    EXPECT_EQ(parse_duration("800ns"), 800u);
    for (const char* bad : {"10", "ms", "", "10 ms", "-1ms", "1.2.3ms", "10m", "1e3us"})
        EXPECT_FALSE(parse_duration(bad)) << bad;
}

TEST_F(trace_model_test, flows_pair_in_order_when_a_sequence_repeats) {
    raw_file pe0, pe1;
    pe1.pe = 1;
    std::uint64_t id = 1;
    for (int round = 0; round < 2; ++round)  // sequence 0 twice (a wrap), then 1
        for (std::uint32_t seq : {0u, 1u}) {
            const auto s = send_to(1, seq, 8, protocol::inlined);
            const auto r = receive_from(0, seq, 8, protocol::inlined);
            pe0.add(id * 10, kind::handle_allocated, id, s.a(), s.b());
            pe1.add(id * 10 + 5, kind::handle_allocated, id, r.a(), r.b());
            ++id;
        }
    const auto extra = send_to(1, 7, 8, protocol::inlined);  // never received
    pe0.add(1000, kind::handle_allocated, 99, extra.a(), extra.b());
    pe0.add(1001, kind::handle_released, 12345);  // no allocation: an orphan
    pe0.write(dir);
    pe1.write(dir);
    const auto set = trace_tool::load_dir(dir.string());
    const auto m = trace_tool::analyse(set);
    EXPECT_EQ(m.orphan_events, 1u);
    std::size_t unmatched = 0;
    const auto flows = trace_tool::match_flows(m, &unmatched);
    ASSERT_EQ(flows.size(), 4u);
    EXPECT_EQ(unmatched, 1u);
    for (const auto& f : flows)
        EXPECT_EQ(m.handles[f.send].id, m.handles[f.receive].id) << "k-th send to k-th receive";
}

}  // namespace
}  // namespace coverse::test
