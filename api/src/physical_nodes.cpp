// physical_nodes: Charm++'s host topology calls (CmiNumPhysicalNodes, CmiPhysicalNodeID,
// CmiPhysicalRank, ...) answered from the node table's host identities. Physical nodes are
// numbered in the order of their lowest PE; within one, PEs keep their order. A PE or node
// number out of range answers -1 (0 PEs for the counts, an empty list). See docs/hosts.md.
#include <converse.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "pe_core.hpp"

namespace {

using coverse::detail::pe_core;

struct topology {
    std::vector<int> node_of;              // by PE
    std::vector<int> rank_of;              // by PE: its place among its node's PEs
    std::vector<std::vector<int>> pes_of;  // by node, ascending
};

// Built once per PE from the node table (fixed for the job). A process without a launcher
// (one PE) is one node.
const topology& current() {
    static topology t;
    static const pe_core* built_for = nullptr;
    const pe_core* c = pe_core::instance();
    if (c == built_for && !t.node_of.empty()) return t;
    built_for = c;
    t = topology{};
    std::vector<std::uint64_t> ids;
    if (c != nullptr) ids = c->host_ids();
    const std::size_t n = c != nullptr ? std::max<std::size_t>(c->num_pes(), 1) : 1;
    if (ids.size() != n) ids.assign(n, 0);
    std::vector<std::uint64_t> seen;
    for (std::size_t pe = 0; pe < n; ++pe) {
        const auto it = std::find(seen.begin(), seen.end(), ids[pe]);
        const int node = static_cast<int>(it - seen.begin());
        if (it == seen.end()) {
            seen.push_back(ids[pe]);
            t.pes_of.emplace_back();
        }
        t.node_of.push_back(node);
        t.rank_of.push_back(static_cast<int>(t.pes_of[node].size()));
        t.pes_of[node].push_back(static_cast<int>(pe));
    }
    return t;
}

bool valid_pe(const topology& t, int pe) {
    return pe >= 0 && static_cast<std::size_t>(pe) < t.node_of.size();
}
bool valid_node(const topology& t, int node) {
    return node >= 0 && static_cast<std::size_t>(node) < t.pes_of.size();
}

}  // namespace

extern "C" {

int CmiCpuTopologyEnabled(void) {
    return 1;  // the node table always carries each PE's host identity
}

int CmiNumPhysicalNodes(void) {
    return static_cast<int>(current().pes_of.size());
}

int CmiPhysicalNodeID(int pe) {
    const auto& t = current();
    return valid_pe(t, pe) ? t.node_of[pe] : -1;
}

int CmiNumPesOnPhysicalNode(int node) {
    const auto& t = current();
    return valid_node(t, node) ? static_cast<int>(t.pes_of[node].size()) : 0;
}

void CmiGetPesOnPhysicalNode(int node, int** pelist, int* num) {
    const auto& t = current();
    static int none = 0;
    if (!valid_node(t, node)) {
        if (pelist) *pelist = &none;
        if (num) *num = 0;
        return;
    }
    // The list stays owned here (as in Charm++): the caller must not free it.
    if (pelist) *pelist = const_cast<int*>(t.pes_of[node].data());
    if (num) *num = static_cast<int>(t.pes_of[node].size());
}

int CmiPhysicalRank(int pe) {
    const auto& t = current();
    return valid_pe(t, pe) ? t.rank_of[pe] : -1;
}

int CmiGetFirstPeOnPhysicalNode(int node) {
    const auto& t = current();
    return valid_node(t, node) ? t.pes_of[node].front() : -1;
}

int CmiPeOnSamePhysicalNode(int pe1, int pe2) {
    const auto& t = current();
    return valid_pe(t, pe1) && valid_pe(t, pe2) && t.node_of[pe1] == t.node_of[pe2];
}

}  // extern "C"
