// latency: CmiProbeLatencies, the collective that measures every PE's latency to every other
// PE and builds the cluster map. Stages of one probe round (every PE calls it):
//   ping    each PE ping-pongs every peer over its connection (latency_ping / latency_pong;
//           a warm-up round, then probe_samples rounds over all peers; a PE answers pings
//           at any time, from its receive loop) and keeps the median round trip / 2 in µs
//           for each peer: its latency vector;
//   collect PE 0 asks every PE for its vector (latency_vector_request); a PE answers
//           (latency_vector_reply, the medians, then latency_vector_minimum, each pair's
//           smallest sample) once its own pings are done, so an early request waits;
//   map     PE 0 has the whole table, computes the clusters (compute_clusters with
//           WAN_LATENCY, over the smallest samples) and sends every PE the table (latency_table),
//           then the map (cluster_mapping); a PE's probe ends when the map arrives.
// A malformed or unexpected frame is reported with the PE that sent it and dropped; a peer
// that dies ends the job like any lost peer. See docs/hosts.md.
#include <algorithm>
#include <chrono>
#include <cstring>

#include <coverse/net/wire.hpp>
#include <coverse/runtime/settings.hpp>
#include <coverse/runtime/sync_wait.hpp>
#include <coverse/runtime/wait_reason.hpp>

#include "grid.hpp"
#include "pe_core.hpp"

namespace coverse::detail {

namespace {

constexpr int probe_samples = 9;

std::uint64_t now_ns() {
    return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                          std::chrono::steady_clock::now().time_since_epoch())
                                          .count());
}

std::vector<std::byte> u32_bytes(const std::vector<std::uint32_t>& v) {
    std::vector<std::byte> out(v.size() * 4);
    for (std::size_t i = 0; i < v.size(); ++i)
        for (int b = 0; b < 4; ++b)
            out[i * 4 + b] = static_cast<std::byte>((v[i] >> (8 * b)) & 0xFF);
    return out;
}

std::vector<std::uint32_t> u32_values(std::span<const std::byte> bytes) {
    std::vector<std::uint32_t> out(bytes.size() / 4);
    for (std::size_t i = 0; i < out.size(); ++i) {
        std::uint32_t v = 0;
        for (int b = 0; b < 4; ++b)
            v |= static_cast<std::uint32_t>(bytes[i * 4 + b]) << (8 * b);
        out[i] = v;
    }
    return out;
}

}  // namespace

void pe_core::post_control(std::uint32_t pe, net::frame_type type, std::uint32_t tag,
                           std::vector<std::byte> payload) {
    auto* bytes = new std::vector<std::byte>(std::move(payload));
    net::frame_header h;
    h.type = type;
    h.source_pe = _pe;
    h.tag = tag;
    h.payload_length = static_cast<std::uint32_t>(bytes->size());
    const int rc = _mesh->post(
        pe, h, *bytes, [](void* ctx, int) { delete static_cast<std::vector<std::byte>*>(ctx); },
        bytes);
    if (rc < 0) {
        delete bytes;
        peer_lost("PE " + std::to_string(_pe) + ": latency probe: cannot send a '" +
                  std::string(net::frame_type_name(type)) + "' frame to PE " + std::to_string(pe) +
                  ": " + std::strerror(-rc));
    }
}

void pe_core::probe_latencies() {
    _latency.reset(_num_pes);
    ++_probe.round;
    _probe.own_done = false;
    _probe.table_in = false;
    _probe.map_in = false;
    if (_num_pes == 1 || !_mesh) {
        _latency.table[0] = 0;
        _latency.cluster[0] = 0;
        return;
    }
    sync_wait(probe_round());
}

task<void> pe_core::probe_round() {
    const std::uint32_t round = _probe.round;
    std::vector<std::uint32_t> own(_num_pes, latency_map::unknown);
    own[_pe] = 0;
    // Rounds over all peers rather than all samples of one peer at once: a burst of
    // scheduling noise (a loaded machine) then spoils one sample of several peers, not
    // every sample of one. Round 0 warms the path up (first-use costs) and is not counted.
    std::vector<std::vector<std::uint32_t>> samples(_num_pes);
    for (int k = 0; k <= probe_samples; ++k) {
        for (std::uint32_t p = 0; p < _num_pes; ++p) {
            if (p == _pe) continue;
            const std::uint64_t stamp = now_ns();
            _probe.waiting_pong = stamp;
            _probe.pong_from = p;
            _probe.pong_in = false;
            std::vector<std::byte> payload(8);
            for (int b = 0; b < 8; ++b)
                payload[b] = static_cast<std::byte>((stamp >> (8 * b)) & 0xFF);
            post_control(p, net::frame_type::latency_ping, round, std::move(payload));
            while (!_probe.pong_in)
                co_await waiting_for({wait_kind::reply, p, round, "latency probe: a pong"},
                                     _probe_waiters.wait());
            if (k > 0)
                samples[p].push_back(static_cast<std::uint32_t>(
                    std::min<std::uint64_t>((now_ns() - stamp + 1999) / 2000, 0xFFFF'FFFEu)));
        }
    }
    std::vector<std::uint32_t> own_min(own);
    for (std::uint32_t p = 0; p < _num_pes; ++p) {
        if (p == _pe) continue;
        own[p] = std::max<std::uint32_t>(median_of(samples[p]), 1);
        own_min[p] =
            std::max<std::uint32_t>(*std::min_element(samples[p].begin(), samples[p].end()), 1);
    }
    for (std::uint32_t p = 0; p < _num_pes; ++p)
        _latency.table[static_cast<std::size_t>(_pe) * _num_pes + p] = own[p];
    _probe.own = own;
    _probe.own_min = own_min;
    _probe.own_done = true;

    if (_pe == 0) {
        _probe.replies = 1;
        _probe.minimums_in = 1;
        _probe.minimums.assign(static_cast<std::size_t>(_num_pes) * _num_pes, latency_map::unknown);
        std::copy(own_min.begin(), own_min.end(), _probe.minimums.begin());
        for (std::uint32_t p = 1; p < _num_pes; ++p)
            post_control(p, net::frame_type::latency_vector_request, round, {});
        while (_probe.replies < _num_pes || _probe.minimums_in < _num_pes)
            co_await waiting_for({wait_kind::reply, no_peer, round, "latency probe: vectors"},
                                 _probe_waiters.wait());
        const auto wan = static_cast<std::uint32_t>(
            std::min<long long>(settings::duration("WAN_LATENCY").count(), 0xFFFF'FFFEll));
        // Clusters from each pair's smallest sample: a router's delay is a floor no sample
        // goes below, while a loaded machine's scheduling only adds to some samples.
        _latency.cluster = compute_clusters(_probe.minimums, _num_pes, wan);
        std::vector<std::uint32_t> map(_latency.cluster.begin(), _latency.cluster.end());
        const auto table = u32_bytes(_latency.table);
        const auto mapping = u32_bytes(map);
        for (std::uint32_t p = 1; p < _num_pes; ++p) {
            post_control(p, net::frame_type::latency_table, round, table);
            post_control(p, net::frame_type::cluster_mapping, 0, mapping);
        }
        co_return;
    }
    // A request that came before our pings were done is answered now.
    if (_probe.request_pending) {
        _probe.request_pending = false;
        post_control(0, net::frame_type::latency_vector_reply, round, u32_bytes(own));
        post_control(0, net::frame_type::latency_vector_minimum, round, u32_bytes(own_min));
    }
    while (!_probe.map_in)
        co_await waiting_for({wait_kind::reply, 0, round, "latency probe: the cluster map"},
                             _probe_waiters.wait());
}

void pe_core::on_latency_frame(std::uint32_t from, const net::frame& f) {
    const auto payload = f.payload_bytes();
    const std::uint32_t tag = f.header.tag;
    auto unexpected = [&](const char* why) {
        print("coverse: PE " + std::to_string(_pe) + " dropped a '" +
                  std::string(net::frame_type_name(f.header.type)) + "' frame from PE " +
                  std::to_string(from) + ": " + why + "\n",
              true);
    };
    switch (f.header.type) {
        case net::frame_type::latency_ping:
            // Answered at once, whatever we are doing: the peer's round trip measures the
            // path, not our schedule.
            post_control(from, net::frame_type::latency_pong, tag,
                         std::vector<std::byte>(payload.begin(), payload.end()));
            return;
        case net::frame_type::latency_pong: {
            std::uint64_t stamp = 0;
            for (int b = 0; b < 8; ++b)
                stamp |= static_cast<std::uint64_t>(payload[b]) << (8 * b);
            if (tag != _probe.round || from != _probe.pong_from || stamp != _probe.waiting_pong)
                return unexpected("no ping of this PE is waiting for it");
            _probe.pong_in = true;
            break;
        }
        case net::frame_type::latency_vector_request:
            if (from != 0) return unexpected("only PE 0 collects latency vectors");
            if (tag != _probe.round || !_probe.own_done) {
                // Our pings of this round are still running (PE 0 finished first).
                _probe.request_pending = true;
                return;
            }
            post_control(0, net::frame_type::latency_vector_reply, tag, u32_bytes(_probe.own));
            post_control(0, net::frame_type::latency_vector_minimum, tag,
                         u32_bytes(_probe.own_min));
            return;
        case net::frame_type::latency_vector_reply: {
            if (_pe != 0 || tag != _probe.round) return unexpected("no probe asked for it");
            const auto v = u32_values(payload);
            for (std::uint32_t p = 0; p < _num_pes; ++p)
                _latency.table[static_cast<std::size_t>(from) * _num_pes + p] = v[p];
            ++_probe.replies;
            break;
        }
        case net::frame_type::latency_vector_minimum: {
            if (_pe != 0 || tag != _probe.round) return unexpected("no probe asked for it");
            const auto v = u32_values(payload);
            for (std::uint32_t p = 0; p < _num_pes; ++p)
                _probe.minimums[static_cast<std::size_t>(from) * _num_pes + p] = v[p];
            ++_probe.minimums_in;
            break;
        }
        case net::frame_type::latency_table:
            if (from != 0 || tag != _probe.round) return unexpected("no probe waits for it");
            _latency.table = u32_values(payload);
            _probe.table_in = true;
            break;
        case net::frame_type::cluster_mapping: {
            if (from != 0 || !_probe.table_in) return unexpected("no probe waits for it");
            const auto v = u32_values(payload);
            for (std::uint32_t p = 0; p < _num_pes; ++p)
                _latency.cluster[p] = v[p] < _num_pes ? static_cast<int>(v[p]) : -1;
            _probe.map_in = true;
            break;
        }
        default:
            return;
    }
    _probe_waiters.notify_all();
}

}  // namespace coverse::detail

extern "C" void CmiProbeLatencies(void) {
    auto* c = coverse::detail::pe_core::instance();
    if (c) c->probe_latencies();
}
