// Typed collectives of the coroutine API (coverse.hpp) on the machine's spanning tree
// (spanning_tree.hpp, fan-out 4, rooted where the call says). The templates turn values
// into bytes; here one engine moves bytes: up the tree (reduce, gather: each PE waits for
// its children's partial results in child order, merges, sends to its parent) and down it
// (broadcast: each PE waits for its parent's, forwards to its children).
//
// Every PE numbers its collectives in call order (one number per call: allreduce's reduce
// and broadcast are steps 0 and 1 of it); a collective's messages go to the internal
// handler coro_collective as {sequence, step, sending PE, bytes} and wait in an inbox keyed
// by (sequence, step, sender) until the task of that collective takes them, so a fast PE's
// next collective cannot be confused with the current one.
//
// A collective that ends early (cancelled, or a PE lost under ON_PEER_LOST=report) is
// abandoned: the messages it did not take are dropped now and when they arrive later. As
// the number was used on every PE that called it, the next collective is not shifted.
#include <coverse/coverse.hpp>

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include <coverse/alloc/message.hpp>

#include "pe_core.hpp"
#include "spanning_tree.hpp"

namespace coverse {

namespace {
struct collective_header {
    std::uint32_t seq;
    std::uint32_t step;
    std::uint32_t from;
    std::uint32_t reserved;  // keeps the data 16-byte aligned after the Converse header
};
constexpr std::uint64_t inbox_key(std::uint32_t seq, std::uint32_t step,
                                  std::uint32_t from) noexcept {
    return (std::uint64_t{seq} << 32) | (std::uint64_t{step & 1} << 31) | from;
}
std::span<const std::byte> collective_data(const message& m) {
    const auto p = m.payload();
    return p.subspan(sizeof(collective_header));
}
}  // namespace

void machine::collective_size_mismatch(std::size_t got, std::size_t want) {
    throw std::length_error("coverse collective: got " + std::to_string(got) +
                            " bytes where a whole number of " + std::to_string(want) +
                            "-byte values was expected; call the same collectives with the "
                            "same types in the same order on every PE");
}

void machine::on_collective(void* msg) {
    collective_header h{};
    if (static_cast<std::size_t>(CmiSize(msg)) < CmiMsgHeaderSizeBytes + sizeof h) {
        CmiFree(msg);
        _core->abort_job("coverse: PE " + std::to_string(pe()) +
                         " got a collective message too short for its header");
    }
    std::memcpy(&h, static_cast<std::byte*>(msg) + CmiMsgHeaderSizeBytes, sizeof h);
    if (_abandoned_collectives.contains(h.seq)) {  // its task gave up on it: never taken
        CmiFree(msg);
        return;
    }
    auto [it, fresh] = _collective_inbox.emplace(inbox_key(h.seq, h.step, h.from), msg);
    if (!fresh) {
        CmiFree(msg);
        _core->abort_job("coverse: PE " + std::to_string(pe()) + " got collective " +
                         std::to_string(h.seq) + " from PE " + std::to_string(h.from) +
                         " twice; every PE must call the same collectives in the same order");
    }
    _collective_arrived.set();
    _collective_arrived.reset();  // set() woke the current waiters; later ones wait again
}

void machine::abandon_collective(std::uint32_t seq) {
    _abandoned_collectives.insert(seq);
    for (auto it = _collective_inbox.begin(); it != _collective_inbox.end();) {
        if (static_cast<std::uint32_t>(it->first >> 32) == seq) {
            alloc::msg_free(it->second);
            it = _collective_inbox.erase(it);
        } else {
            ++it;
        }
    }
}

task<message> machine::collective_message(collective_id id, std::uint32_t from) {
    for (;;) {
        // What a PE sent before it died is still used.
        auto it = _collective_inbox.find(inbox_key(id.seq, id.step, from));
        if (it != _collective_inbox.end()) {
            message m(it->second);
            _collective_inbox.erase(it);
            co_return m;
        }
        // The tree needs every PE: with one lost, this collective cannot finish anywhere.
        if (const auto lost = _core->first_lost())
            throw peer_lost(*lost, "collective " + std::to_string(id.seq) + " waits for PE " +
                                       std::to_string(from));
        co_await waiting_for({wait_kind::message, from, id.seq, "a collective's message"},
                             _collective_arrived.wait());
    }
}

task<void> machine::send_collective(std::uint32_t to, collective_id id,
                                    std::span<const std::byte> data) {
    message m = message::allocate(static_cast<int>(detail::internal_handler::coro_collective),
                                  sizeof(collective_header) + data.size());
    const collective_header h{id.seq, id.step, pe(), 0};
    std::memcpy(m.payload().data(), &h, sizeof h);
    if (!data.empty()) std::memcpy(m.payload().data() + sizeof h, data.data(), data.size());
    co_await send(to, std::move(m));
}

task<std::vector<std::byte>> machine::reduce_bytes(std::vector<std::byte> mine, merge_fn merge,
                                                   const void* op, std::uint32_t root,
                                                   collective_id id) {
    check_pe(root, "reduce");
    try {
        if (const auto lost = _core->first_lost())
            throw peer_lost(*lost, "collective " + std::to_string(id.seq));
        for (std::uint32_t child : detail::spanning_tree::children(root, pe(), num_pes())) {
            message m = co_await collective_message(id, child);
            merge(mine, collective_data(m), op);
        }
        const int parent = detail::spanning_tree::parent(root, pe(), num_pes());
        if (parent < 0) co_return mine;
        co_await send_collective(static_cast<std::uint32_t>(parent), id, mine);
    } catch (...) {
        abandon_collective(id.seq);
        throw;
    }
    co_return std::vector<std::byte>{};
}

task<std::vector<std::byte>> machine::broadcast_bytes(std::vector<std::byte> data,
                                                      std::uint32_t root, collective_id id) {
    check_pe(root, "broadcast");
    try {
        if (const auto lost = _core->first_lost())
            throw peer_lost(*lost, "collective " + std::to_string(id.seq));
        const int parent = detail::spanning_tree::parent(root, pe(), num_pes());
        if (parent >= 0) {
            message m = co_await collective_message(id, static_cast<std::uint32_t>(parent));
            const auto d = collective_data(m);
            data.assign(d.begin(), d.end());
        }
        for (std::uint32_t child : detail::spanning_tree::children(root, pe(), num_pes()))
            co_await send_collective(child, id, data);
    } catch (...) {
        abandon_collective(id.seq);
        throw;
    }
    co_return data;
}

namespace {
// gather's partial results: records of {PE, value}, concatenated.
void append_records(std::vector<std::byte>& acc, std::span<const std::byte> in, const void*) {
    acc.insert(acc.end(), in.begin(), in.end());
}
}  // namespace

task<std::vector<std::byte>> machine::gather_bytes(std::vector<std::byte> mine, std::uint32_t root,
                                                   collective_id id) {
    const std::size_t width = mine.size();
    const std::size_t record = sizeof(std::uint32_t) + width;
    std::vector<std::byte> own(record);
    const std::uint32_t me = pe();
    std::memcpy(own.data(), &me, sizeof me);
    if (width) std::memcpy(own.data() + sizeof me, mine.data(), width);
    std::vector<std::byte> all =
        co_await reduce_bytes(std::move(own), &append_records, nullptr, root, id);
    if (pe() != root) co_return std::vector<std::byte>{};
    if (all.size() != record * num_pes()) collective_size_mismatch(all.size(), record);
    // Records arrive in tree order; the result is in PE order.
    std::vector<std::byte> out(width * num_pes());
    std::vector<bool> seen(num_pes(), false);
    for (std::size_t off = 0; off < all.size(); off += record) {
        std::uint32_t from = 0;
        std::memcpy(&from, all.data() + off, sizeof from);
        if (from >= num_pes() || seen[from]) collective_size_mismatch(all.size(), record);
        seen[from] = true;
        if (width) std::memcpy(out.data() + from * width, all.data() + off + sizeof from, width);
    }
    co_return out;
}

}  // namespace coverse
