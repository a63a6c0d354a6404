// The hang report's data and analysis (coverse/net/doctor.hpp): state replies round-trip
// and every cut or corrupted one is refused; the wait-for graph finds cycles and names the
// PEs that everyone ends up waiting on; the renderings say so.
#include <coverse/net/doctor.hpp>

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace coverse::net::doctor {
namespace {

pe_state sample_state() {
    pe_state s;
    s.pe = 2;
    s.pid = 4242;
    s.full = true;
    s.uptime = 12.5;
    s.progress = 99;
    s.in_handler = true;
    s.handler = 7;
    s.handler_name = "spin(void*)";
    s.handler_seconds = 3.25;
    s.ready_tasks = 1;
    s.network_queue = 2;
    s.scheduler_queue = 3;
    s.deliveries = 4;
    s.timers = 5;
    s.handles_in_use = 3;
    s.handles_user_held = 1;
    s.handles_total = 10000;
    s.handles = {{"stream", 2}, {"stream/inline", 1}};
    s.barrier_epoch = 4;
    s.waits = {{wait_kind::credits, 1, 0, "eager/short", 1},
               {wait_kind::get_done, 0, 17, "rndv/get", 2}};
    s.peers = {{0, 10, 0.5}, {1, 0, -1}};
    s.note = "a note";
    s.connect = "lazy";
    s.links = {{0, "connected", true, true, 0.25}, {1, "connecting", true, false, -1}};
    return s;
}

// A PE's answer with the given waits (peer, kind).
pe_answer waiting(std::uint32_t pe, std::vector<std::pair<std::uint32_t, wait_kind>> on) {
    pe_answer a;
    a.pe = pe;
    a.pid = 1000 + pe;
    pe_state s;
    s.pe = pe;
    s.full = true;
    for (auto [peer, kind] : on)
        s.waits.push_back(wait_entry{kind, peer, 1, "", 1});
    a.state = s;
    return a;
}

TEST(doctor_state, round_trips) {
    const pe_state s = sample_state();
    std::string why;
    const auto d = decode_state(encode(s), &why);
    ASSERT_TRUE(d) << why;
    EXPECT_EQ(*d, s);
}

TEST(doctor_state, every_truncation_and_a_trailing_byte_are_refused) {
    const auto bytes = encode(sample_state());
    for (std::size_t n = 0; n < bytes.size(); ++n) {
        std::string why;
        EXPECT_FALSE(decode_state(std::span(bytes).first(n), &why)) << n;
        EXPECT_FALSE(why.empty()) << n;
    }
    auto longer = bytes;
    longer.push_back(std::byte{0});
    std::string why;
    EXPECT_FALSE(decode_state(longer, &why));
    EXPECT_NE(why.find("after the state reply"), std::string::npos) << why;
}

TEST(doctor_state, a_huge_count_is_refused_without_allocating_it) {
    pe_state s;
    auto bytes = encode(s);
    // The handles count sits after the fixed fields; any count beyond the bytes left fails.
    const std::size_t at = 1 + 4 + 8 + 1 + 8 + 8 + 1 + 4 + 4 + 8 + 5 * 8 + 3 * 4;
    ASSERT_LT(at + 4, bytes.size());
    for (int i = 0; i < 4; ++i)
        bytes[at + i] = std::byte{0xFF};
    std::string why;
    EXPECT_FALSE(decode_state(bytes, &why));
}

TEST(doctor_state, another_version_is_refused_with_what_to_do) {
    auto bytes = encode(sample_state());
    bytes[0] = std::byte{9};
    std::string why;
    EXPECT_FALSE(decode_state(bytes, &why));
    EXPECT_NE(why.find("same coverse release"), std::string::npos) << why;
}

TEST(doctor_graph, a_two_pe_cycle_is_found_and_described) {
    const auto r = analyze("test", 3,
                           {waiting(0, {{1, wait_kind::credits}}),
                            waiting(1, {{0, wait_kind::get_done}}), waiting(2, {})});
    ASSERT_EQ(r.cycles.size(), 1u);
    EXPECT_EQ(r.cycles[0], (std::vector<std::uint32_t>{0, 1}));
    const std::string text = render_text(r);
    EXPECT_NE(text.find("cycle: PE 0 waits for eager credits from PE 1, PE 1 waits for get-done "
                        "from PE 0 (handle 1)"),
              std::string::npos)
        << text;
    const std::string dot = render_dot(r);
    EXPECT_NE(dot.find("pe0 -> pe1 [label=\"credits\", color=red"), std::string::npos) << dot;
}

TEST(doctor_graph, a_three_pe_cycle_starts_at_its_smallest_pe) {
    const auto r =
        analyze("test", 4,
                {waiting(2, {{3, wait_kind::reply}}), waiting(3, {{1, wait_kind::reply}}),
                 waiting(1, {{2, wait_kind::reply}}), waiting(0, {{1, wait_kind::reply}})});
    ASSERT_EQ(r.cycles.size(), 1u);
    EXPECT_EQ(r.cycles[0], (std::vector<std::uint32_t>{1, 2, 3}));
    // PE 0 waits into the cycle: each member is waited on by the other two and PE 0.
    ASSERT_EQ(r.blamed.size(), 3u);
    for (const blame& b : r.blamed)
        EXPECT_EQ(b.waiting, 3u) << b.pe;
}

TEST(doctor_graph, the_end_of_a_chain_is_named_first) {
    // 1 -> 0 -> 3, 2 -> 0: everyone ends up on PE 3, which waits for nobody.
    const auto r =
        analyze("test", 4,
                {waiting(0, {{3, wait_kind::barrier}}), waiting(1, {{0, wait_kind::barrier}}),
                 waiting(2, {{0, wait_kind::barrier}}), waiting(3, {})});
    EXPECT_TRUE(r.cycles.empty());
    ASSERT_FALSE(r.blamed.empty());
    EXPECT_EQ(r.blamed[0].pe, 3u);
    EXPECT_EQ(r.blamed[0].waiting, 3u);
    const std::string text = render_text(r);
    EXPECT_NE(text.find("cycles: none"), std::string::npos) << text;
    EXPECT_LT(text.find("PE 3: 3 PEs end up waiting on it"), text.find("PE 0 (pid")) << text;
}

TEST(doctor_graph, a_healthy_job_has_no_cycle_and_nobody_to_blame) {
    const auto r = analyze("SIGQUIT", 2, {waiting(0, {}), waiting(1, {})});
    EXPECT_TRUE(r.cycles.empty());
    EXPECT_TRUE(r.blamed.empty());
    EXPECT_TRUE(r.edges.empty());
    const std::string json = render_json(r);
    EXPECT_NE(json.find("\"cycles\":[]"), std::string::npos) << json;
    EXPECT_NE(json.find("\"blamed\":[]"), std::string::npos) << json;
}

TEST(doctor_graph, a_pe_that_did_not_answer_is_named_with_why) {
    pe_answer gone;
    gone.pe = 1;
    gone.pid = 77;
    gone.missing = "exited";
    const auto r = analyze("test", 2, {waiting(0, {{1, wait_kind::reply}}), gone});
    ASSERT_EQ(r.blamed.size(), 1u);
    EXPECT_EQ(r.blamed[0].pe, 1u);
    const std::string text = render_text(r);
    EXPECT_NE(text.find("PE 1: 1 PE ends up waiting on it; it did not answer: exited"),
              std::string::npos)
        << text;
}

TEST(doctor_graph, waits_without_a_peer_or_on_itself_make_no_edge) {
    const auto r = analyze(
        "test", 2,
        {waiting(0, {{no_peer, wait_kind::handle_slot}, {0, wait_kind::reply}}), waiting(1, {})});
    EXPECT_TRUE(r.edges.empty());
}

TEST(doctor_render, pe_lists_compress_runs) {
    EXPECT_EQ(pe_list({3}), "PE 3");
    EXPECT_EQ(pe_list({0, 1}), "PEs 0, 1");
    EXPECT_EQ(pe_list({0, 1, 2, 3, 5, 7, 8, 9}), "PEs 0-3, 5, 7-9");
    EXPECT_EQ(pe_list({}), "no PE");
}

// CONNECT=lazy: which peers a PE is connected to, who dialed, when; an exit vote's wait is an
// edge to the PE whose word is due.
TEST(doctor_render, connections_say_who_dialed_on_first_use_and_who_is_not_connected) {
    pe_answer a = waiting(2, {{0, wait_kind::exit_vote}});
    a.state->peers = {{0, 1, 0.1}, {1, 0, -1}, {3, 0, -1}};
    a.state->connect = "lazy";
    a.state->links = {{0, "connected", true, true, 0.25}, {1, "connecting", true, false, -1}};
    const auto r = analyze("test", 4, {a});
    const std::string text = render_text(r);
    EXPECT_NE(text.find("  connections (CONNECT=lazy): PE 0 dialed on first use at 0.2"),
              std::string::npos)
        << text;
    EXPECT_NE(text.find(", PE 1 connecting (accepted); 1 PE not connected\n"), std::string::npos)
        << text;
    EXPECT_NE(text.find("waits for the exit vote from PE 0"), std::string::npos) << text;
    ASSERT_EQ(r.edges.size(), 1u);
    EXPECT_EQ(r.edges[0].kind, wait_kind::exit_vote);
    const std::string json = render_json(r);
    EXPECT_NE(json.find("\"connect\":\"lazy\",\"links\":[{\"pe\":0,\"state\":\"connected\","
                        "\"lazily\":true,\"dialed\":true,\"up_at\":0.250}"),
              std::string::npos)
        << json;
    // Past 8 connections the ones that are up are counted, not listed.
    for (std::uint32_t p = 4; p < 14; ++p)
        a.state->links.push_back({p, "connected", true, false, 1});
    const std::string many = render_text(analyze("test", 14, {a}));
    EXPECT_NE(many.find("connections (CONNECT=lazy): 11 up (1 dialed, 10 accepted, 11 on first "
                        "use), PE 1 connecting (accepted)"),
              std::string::npos)
        << many;
}

TEST(doctor_render, json_escapes_what_a_pe_sent) {
    pe_answer a = waiting(0, {});
    a.state->note = "quote \" backslash \\ newline \n";
    const std::string json = render_json(analyze("test", 1, {a}));
    EXPECT_NE(json.find("quote \\\" backslash \\\\ newline \\n"), std::string::npos) << json;
}

}  // namespace
}  // namespace coverse::net::doctor
