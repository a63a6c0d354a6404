// grid: the cluster computation, the latency table's queries and the grid queue's object
// table, with their Converse calls (CmiGetLatency, CmiGetCluster, CmiGridQueue*). The
// probing protocol itself is latency.cpp; where grid messages jump the queue, dispatch.cpp.
#include "grid.hpp"

#include <converse.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <numeric>

#include <coverse/alloc/message.hpp>
#include <coverse/runtime/settings.hpp>

#include "pe_core.hpp"

namespace coverse::detail {

void latency_map::reset(std::uint32_t n) {
    num_pes = n;
    table.assign(static_cast<std::size_t>(n) * n, unknown);
    cluster.assign(n, -1);
}

long latency_map::latency(int p1, int p2) const noexcept {
    if (p1 < 0 || p2 < 0 || static_cast<std::uint32_t>(p1) >= num_pes ||
        static_cast<std::uint32_t>(p2) >= num_pes)
        return LONG_MAX;
    const std::uint32_t v = table[static_cast<std::size_t>(p1) * num_pes + p2];
    return v == unknown ? LONG_MAX : static_cast<long>(v);
}

int latency_map::cluster_of(int pe) const noexcept {
    if (pe < 0 || static_cast<std::uint32_t>(pe) >= num_pes) return -1;
    return cluster[pe];
}

std::vector<int> compute_clusters(const std::vector<std::uint32_t>& table, std::uint32_t n,
                                  std::uint32_t wan_us) {
    // Union-find over the pairs within wan_us: the transitive closure of "near".
    std::vector<std::uint32_t> parent(n);
    std::iota(parent.begin(), parent.end(), 0u);
    auto root = [&](std::uint32_t x) {
        while (parent[x] != x)
            x = parent[x] = parent[parent[x]];
        return x;
    };
    for (std::uint32_t i = 0; i < n; ++i)
        for (std::uint32_t j = i + 1; j < n; ++j) {
            const std::uint32_t a = table[static_cast<std::size_t>(i) * n + j];
            const std::uint32_t b = table[static_cast<std::size_t>(j) * n + i];
            const std::uint32_t d = std::min(a, b);  // one noisy direction does not split
            if (d == latency_map::unknown || d > wan_us) continue;
            const std::uint32_t ri = root(i), rj = root(j);
            parent[std::max(ri, rj)] = std::min(ri, rj);  // the lowest PE stays the root
        }
    std::vector<int> out(n, -1);
    std::vector<int> number(n, -1);
    int next = 0;
    for (std::uint32_t i = 0; i < n; ++i) {
        const std::uint32_t r = root(i);
        if (number[r] < 0) number[r] = next++;
        out[i] = number[r];
    }
    return out;
}

std::uint32_t median_of(std::vector<std::uint32_t> samples) {
    if (samples.empty()) return 0;
    const auto mid = samples.begin() + static_cast<std::ptrdiff_t>((samples.size() - 1) / 2);
    std::nth_element(samples.begin(), mid, samples.end());
    return *mid;
}

void grid_queue::configure() {
    _enabled = settings::enabled("GRID_QUEUE");
    _maximum = settings::count("GRID_QUEUE_MAXIMUM");
    _interval =
        static_cast<int>(std::min<std::size_t>(settings::count("GRID_QUEUE_INTERVAL"), INT_MAX));
    _threshold =
        static_cast<int>(std::min<std::size_t>(settings::count("GRID_QUEUE_THRESHOLD"), INT_MAX));
}

grid_queue::object grid_queue::make(int gid, int num_ints, int i1, int i2, int i3) noexcept {
    // Only the first num_ints index ints name the object; the rest are ignored.
    object o{gid, num_ints, {i1, num_ints > 1 ? i2 : 0, num_ints > 2 ? i3 : 0}};
    return o;
}

bool grid_queue::add(int gid, int num_ints, int i1, int i2, int i3) {
    if (num_ints < 1 || num_ints > 3) return false;
    const object o = make(gid, num_ints, i1, i2, i3);
    if (std::find(_objects.begin(), _objects.end(), o) != _objects.end()) return true;
    if (_objects.size() >= _maximum) return false;
    _objects.push_back(o);
    return true;
}

void grid_queue::remove(int gid, int num_ints, int i1, int i2, int i3) {
    std::erase(_objects, make(gid, num_ints, i1, i2, i3));
}

bool grid_queue::contains(int gid, int num_ints, int i1, int i2, int i3) const noexcept {
    if (num_ints < 1 || num_ints > 3) return false;
    return std::find(_objects.begin(), _objects.end(), make(gid, num_ints, i1, i2, i3)) !=
           _objects.end();
}

bool grid_queue::contains_message(const void* msg, std::size_t size) const noexcept {
    if (_objects.empty() || size < CmiMsgHeaderSizeBytes + sizeof(CmiGridObjectHeader))
        return false;
    CmiGridObjectHeader h;
    std::memcpy(&h, static_cast<const char*>(msg) + CmiMsgHeaderSizeBytes, sizeof h);
    return contains(h.gid, h.nInts, h.index[0], h.index[1], h.index[2]);
}

}  // namespace coverse::detail

namespace {

using coverse::detail::pe_core;

coverse::detail::grid_queue* queue() {
    pe_core* c = pe_core::instance();
    return c ? &c->grid() : nullptr;
}

}  // namespace

extern "C" {

long CmiGetLatency(int pe1, int pe2) {
    pe_core* c = pe_core::instance();
    return c ? c->latencies().latency(pe1, pe2) : LONG_MAX;
}

int CmiGetCluster(int pe) {
    pe_core* c = pe_core::instance();
    return c ? c->latencies().cluster_of(pe) : -1;
}

void CmiGridQueueRegister(int gid, int nInts, int index1, int index2, int index3) {
    auto* q = queue();
    if (!q) return;
    if (q->add(gid, nInts, index1, index2, index3)) return;
    if (nInts < 1 || nInts > 3) {
        std::fprintf(stderr,
                     "coverse: PE %d: CmiGridQueueRegister(gid %d): an index of %d ints; the "
                     "grid queue names objects by 1 to 3 ints\n",
                     CmiMyPe(), gid, nInts);
    } else if (!q->full_reported) {
        q->full_reported = true;
        std::fprintf(stderr,
                     "coverse: PE %d: the grid queue holds %zu objects already "
                     "(GRID_QUEUE_MAXIMUM); object (gid %d) and later ones are not prioritised; "
                     "raise GRID_QUEUE_MAXIMUM or deregister objects\n",
                     CmiMyPe(), q->maximum(), gid);
    }
}

void CmiGridQueueDeregister(int gid, int nInts, int index1, int index2, int index3) {
    if (auto* q = queue()) q->remove(gid, nInts, index1, index2, index3);
}

void CmiGridQueueDeregisterAll(void) {
    if (auto* q = queue()) q->clear();
}

int CmiGridQueueLookup(int gid, int nInts, int index1, int index2, int index3) {
    auto* q = queue();
    return q && q->contains(gid, nInts, index1, index2, index3) ? 1 : 0;
}

int CmiGridQueueLookupMsg(char* msg) {
    auto* q = queue();
    if (!q || !msg) return 0;
    return q->contains_message(msg, coverse::alloc::msg_size(msg)) ? 1 : 0;
}

int CmiGridQueueGetInterval(void) {
    auto* q = queue();
    return q ? q->interval() : 0;
}

int CmiGridQueueGetThreshold(void) {
    auto* q = queue();
    return q ? q->threshold() : 0;
}

}  // extern "C"
