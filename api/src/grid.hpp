// grid: the seed's grid features — what latency probing learned (the latency table and the
// cluster map, latency.cpp) and the grid queue's table of border objects (grid.cpp), which
// lets messages from another cluster to a registered object jump the scheduler queue.
// How they work and the envelope layout the grid queue reads: docs/hosts.md.
#pragma once

#include <climits>
#include <cstdint>
#include <string>
#include <vector>

namespace coverse::detail {

/// The latency table and cluster map of one PE. Before a probe everything is unknown;
/// after one, every PE holds PE 0's whole table and the map.
struct latency_map {
    static constexpr std::uint32_t unknown = 0xFFFF'FFFFu;
    std::uint32_t num_pes = 0;
    std::vector<std::uint32_t> table;  // num_pes x num_pes, µs, row = the measuring PE
    std::vector<int> cluster;          // by PE, -1 unknown

    void reset(std::uint32_t n);
    /// µs from p1 to p2 as p1 measured it; LONG_MAX where unknown or out of range.
    long latency(int p1, int p2) const noexcept;
    /// -1 where unknown or out of range.
    int cluster_of(int pe) const noexcept;
};

/// Clusters: PEs whose latency (the smaller of the two directions) is at most `wan_us`
/// are in one cluster, closed transitively; a pair with an unknown latency is not joined.
/// Cluster numbers follow each cluster's lowest PE (PE 0 is in cluster 0).
std::vector<int> compute_clusters(const std::vector<std::uint32_t>& table, std::uint32_t n,
                                  std::uint32_t wan_us);

/// The median of `samples` (the lower middle one for an even count); 0 for none.
std::uint32_t median_of(std::vector<std::uint32_t> samples);

/// The grid queue's object table: array objects named (group id, index of 1 to 3 ints).
class grid_queue {
public:
    /// Reads GRID_QUEUE, GRID_QUEUE_MAXIMUM, _INTERVAL and _THRESHOLD.
    void configure();
    bool enabled() const noexcept { return _enabled; }
    int interval() const noexcept { return _interval; }
    int threshold() const noexcept { return _threshold; }
    std::size_t maximum() const noexcept { return _maximum; }

    /// false when the table already holds GRID_QUEUE_MAXIMUM objects (the caller reports
    /// it once) or the index has a bad length; registering an object twice is one entry.
    bool add(int gid, int num_ints, int i1, int i2, int i3);
    void remove(int gid, int num_ints, int i1, int i2, int i3);
    void clear() noexcept { _objects.clear(); }
    bool contains(int gid, int num_ints, int i1, int i2, int i3) const noexcept;
    /// The object a Charm++-style message names (layout in docs/hosts.md), if registered.
    bool contains_message(const void* msg, std::size_t size) const noexcept;
    std::size_t size() const noexcept { return _objects.size(); }

    bool full_reported = false;  // GRID_QUEUE_MAXIMUM was reported once

private:
    struct object {
        int gid, num_ints, index[3];
        bool operator==(const object&) const = default;
    };
    static object make(int gid, int num_ints, int i1, int i2, int i3) noexcept;
    bool _enabled = false;
    std::size_t _maximum = 100;
    int _interval = 0;
    int _threshold = 0;
    std::vector<object> _objects;
};

}  // namespace coverse::detail
