// The exit vote (CONNECT=lazy): before its disconnect handshake a PE in ConverseExit agrees
// with every live PE that the job is over and that nothing is in flight among them, so no
// PE closes its listener while another may still dial it (a broadcast forwarded late).
// Without all-to-all: the counts travel up the spanning tree (fan-out 4) of the live PEs,
// the verdict down; with nobody lost it is the tree of CmiBarrier, whose pairs are
// connected already.
//
// Stages of one PE: drained (its own sends done) -> wave w: once every child in the view's
// tree reported wave w, it reports {wave, view, sent, received} of its subtree up (the
// messages it sent to and received from live PEs, the vote's own left out) -> the root
// decides: done when two waves in a row of one view count the same totals with sent ==
// received, else it starts wave w + 1 -> the verdict comes down -> done: the handshake.
//
// Why two equal waves: counts only grow, and wave w + 1 starts only after the root heard
// all of wave w, so between the two there is an instant when every PE's counts were those
// of both waves; sent == received then means nothing was in flight, and since every PE had
// entered ConverseExit (no handler runs there) nothing sends again.
//
// A PE lost meanwhile (ON_PEER_LOST=report) changes the view (how many PEs are lost and a
// hash of which): the tree is made again over the live PEs and counting starts over at
// wave 1; a report of another view waits until this PE's view is the same. Every PE learns
// of every loss (from its connection or the launcher), so the views meet.
#include "pe_core.hpp"

#include <algorithm>
#include <cstring>

#include <coverse/alloc/message.hpp>
#include <coverse/net/mesh.hpp>
#include <coverse/runtime/timer.hpp>

namespace coverse::detail {

namespace {

// The body of a vote message, after the Converse header.
struct vote_body {
    std::uint32_t wave;
    std::uint32_t lost;  // the view: how many PEs are lost
    std::uint32_t hash;  // and which (FNV-1a of their numbers)
    std::uint32_t done;  // verdicts: 1 done, 0 the next wave
    std::uint64_t sent;  // reports: the subtree's counts
    std::uint64_t received;
};
constexpr std::size_t vote_size = CmiMsgHeaderSizeBytes + sizeof(vote_body);

}  // namespace

std::pair<std::uint64_t, std::uint64_t> pe_core::vote_counts() const {
    std::uint64_t sent = 0, received = 0;
    for (std::uint32_t p = 0; p < _num_pes; ++p) {
        if (p == _pe || is_lost(p)) continue;
        sent += _send_seq[p] - _vote_out[p];
        received += _recv_seq[p] - _vote_in[p];
    }
    return {sent, received};
}

void pe_core::vote_send(std::uint32_t to, internal_handler which, std::uint32_t wave, bool done,
                        std::uint64_t sent, std::uint64_t received) {
    void* m = alloc::msg_alloc(vote_size);
    if (!m) fatal("out of memory in the exit vote");
    CmiInitMsgHeader(m, static_cast<int>(vote_size));
    header_of(m)->handler = static_cast<std::uint32_t>(which);
    const vote_body b{wave, _vote.lost, _vote.hash, done ? 1u : 0u, sent, received};
    std::memcpy(static_cast<std::byte*>(m) + CmiMsgHeaderSizeBytes, &b, sizeof b);
    ++_vote_out[to];
    // As the coroutine API's own messages: under ON_PEER_LOST=report a PE that died with it
    // in flight drops it instead of stopping the job (the vote's view then moves on).
    send_for_api(to, m);
}

void pe_core::vote_step() {
    exit_vote_state& v = _vote;
    if (!v.active || v.done) return;
    // The order losses were learned in differs between PEs; the set does not.
    std::vector<std::uint32_t> lost(_lost_order.begin(), _lost_order.end());
    std::sort(lost.begin(), lost.end());
    std::uint32_t hash = 2166136261u;
    for (std::uint32_t p : lost)
        hash = (hash ^ p) * 16777619u;
    const auto count = static_cast<std::uint32_t>(lost.size());
    if (count != v.lost || hash != v.hash) {
        v.lost = count;
        v.hash = hash;
        v.wave = 1;
        v.reported = false;
        v.previous.reset();
        // The tree of the live PEs: the i-th live PE's children are the (4i+1)-th to
        // (4i+4)-th, as spanning_tree numbers all of them.
        std::vector<std::uint32_t> live;
        for (std::uint32_t p = 0; p < _num_pes; ++p)
            if (!is_lost(p)) live.push_back(p);
        const auto me =
            static_cast<std::size_t>(std::find(live.begin(), live.end(), _pe) - live.begin());
        v.parent = me == 0 ? -1 : static_cast<int>(live[(me - 1) / spanning_tree::fan_out]);
        v.children.clear();
        for (std::size_t k = 1; k <= spanning_tree::fan_out; ++k)
            if (me * spanning_tree::fan_out + k < live.size())
                v.children.push_back(live[me * spanning_tree::fan_out + k]);
    }
    while (!v.reported && !v.done) {
        auto [sent, received] = vote_counts();
        std::size_t have = 0;
        for (const auto& r : v.reports)
            if (r.wave == v.wave && r.lost == v.lost && r.hash == v.hash &&
                std::find(v.children.begin(), v.children.end(), r.from) != v.children.end()) {
                sent += r.sent;
                received += r.received;
                ++have;
            }
        if (have < v.children.size()) return;  // a child has not reported this wave yet
        std::erase_if(v.reports, [&](const auto& r) {
            return r.lost != v.lost || r.hash != v.hash || r.wave <= v.wave;
        });
        if (v.parent >= 0) {
            vote_send(static_cast<std::uint32_t>(v.parent), internal_handler::exit_report, v.wave,
                      false, sent, received);
            v.reported = true;
            return;
        }
        const std::pair<std::uint64_t, std::uint64_t> totals{sent, received};
        if (sent == received && v.previous == totals) {
            v.done = true;
            for (std::uint32_t c : v.children)
                vote_send(c, internal_handler::exit_verdict, v.wave, true, 0, 0);
            return;
        }
        v.previous = totals;
        ++v.wave;
        for (std::uint32_t c : v.children)
            vote_send(c, internal_handler::exit_verdict, v.wave, false, 0, 0);
    }
}

// Vote messages are consumed where they arrive, like the barrier's; returns whether `msg`
// was one.
bool pe_core::take_exit_message(void* msg, std::uint32_t from) {
    const std::uint32_t h = header_of(msg)->handler;
    if (h != static_cast<std::uint32_t>(internal_handler::exit_report) &&
        h != static_cast<std::uint32_t>(internal_handler::exit_verdict))
        return false;
    ++_vote_in[from];
    vote_body b{};
    if (alloc::msg_size(msg) < vote_size) return true;  // a peer's bug: ignored
    std::memcpy(&b, static_cast<const std::byte*>(msg) + CmiMsgHeaderSizeBytes, sizeof b);
    exit_vote_state& v = _vote;
    if (h == static_cast<std::uint32_t>(internal_handler::exit_report)) {
        v.reports.push_back({from, b.wave, b.lost, b.hash, b.sent, b.received});
    } else if (b.done) {
        // Done in another view can only mean a PE died after it had voted for the last
        // wave: the others agreed without waiting for it. Pass it on down our tree.
        if (v.active && !v.done) {
            v.done = true;
            for (std::uint32_t c : v.children)
                vote_send(c, internal_handler::exit_verdict, b.wave, true, 0, 0);
        }
    } else if (v.active && b.lost == v.lost && b.hash == v.hash && b.wave > v.wave) {
        v.wave = b.wave;
        v.reported = false;
        for (std::uint32_t c : v.children)
            vote_send(c, internal_handler::exit_verdict, v.wave, false, 0, 0);
    }
    vote_step();
    return true;
}

void pe_core::exit_vote() {
    exit_vote_state& v = _vote;
    v.active = true;
    vote_step();
    if (v.done) return;
    // The children whose report of this wave is due (the hang report names the first).
    auto missing = [&] {
        std::vector<std::uint32_t> out;
        for (std::uint32_t c : v.children) {
            const bool in = std::any_of(v.reports.begin(), v.reports.end(), [&](const auto& r) {
                return r.from == c && r.wave == v.wave && r.lost == v.lost && r.hash == v.hash;
            });
            if (!in) out.push_back(c);
        }
        return out;
    };
    auto due = [&]() -> wait_reason {
        const auto m = missing();
        const std::uint32_t who = !m.empty()      ? m.front()
                                  : v.parent >= 0 ? static_cast<std::uint32_t>(v.parent)
                                                  : no_peer;
        return {wait_kind::exit_vote, who, v.wave,
                !m.empty() ? "ConverseExit: a child's count; every live PE must call ConverseExit"
                           : "ConverseExit: the verdict"};
    };
    wait_scope waiting(due());
    // CONNECTION_TIMEOUT, like the disconnect handshake whose first half it is.
    _sched->run_until(
        [&] {
            waiting.update(due());
            return v.done;
        },
        net::connection_timeout_from_env());
    if (v.done) return;
    const std::vector<std::uint32_t> late = missing();
    std::string who;
    if (!late.empty())
        who = "no report of wave " + std::to_string(v.wave) + " from " +
              net::doctor::pe_list(late) +
              " (one of them, or a PE below them in the tree, has not called ConverseExit)";
    else if (v.parent >= 0)
        who = "no verdict from PE " + std::to_string(v.parent) + " (some other PE has not called " +
              "ConverseExit)";
    else
        who = "messages still in flight among the PEs";
    print("coverse: PE " + std::to_string(_pe) + ": the exit vote did not finish within " +
              "CONNECTION_TIMEOUT: " + who + "; closing anyway, messages to this PE may be lost\n",
          true);
}

}  // namespace coverse::detail
