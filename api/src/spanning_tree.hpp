// The one spanning tree of the machine core (fan-out 4), used by broadcasts (rooted at the
// sender), the tree barrier and reductions (rooted at PE 0), and CmiSpanTree*.
#pragma once

#include <array>
#include <cstdint>

namespace coverse::detail {

struct spanning_tree {
    static constexpr std::uint32_t fan_out = 4;
    struct children_list {
        std::array<std::uint32_t, fan_out> pe{};
        std::uint32_t count = 0;
        const std::uint32_t* begin() const noexcept { return pe.data(); }
        const std::uint32_t* end() const noexcept { return pe.data() + count; }
        bool empty() const noexcept { return count == 0; }
    };

    /// The children of `of` in the tree over `num_pes` PEs rooted at `root`.
    static children_list children(std::uint32_t root, std::uint32_t of,
                                  std::uint32_t num_pes) noexcept {
        children_list out;
        const std::uint64_t rel = (std::uint64_t{of} + num_pes - root) % num_pes;
        for (std::uint32_t k = 1; k <= fan_out; ++k) {
            const std::uint64_t c = rel * fan_out + k;
            if (c >= num_pes) break;
            out.pe[out.count++] = static_cast<std::uint32_t>((c + root) % num_pes);
        }
        return out;
    }
    /// The parent of `of` in the tree rooted at `root`; -1 for the root.
    static int parent(std::uint32_t root, std::uint32_t of, std::uint32_t num_pes) noexcept {
        const std::uint64_t rel = (std::uint64_t{of} + num_pes - root) % num_pes;
        if (rel == 0) return -1;
        return static_cast<int>(((rel - 1) / fan_out + root) % num_pes);
    }
};

}  // namespace coverse::detail
