// Collectives of the machine core on the spanning tree (fan-out 4): the tree barrier,
// CmiBarrierZero, and reductions of messages and structs.
#include "pe_core.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>

#include <coverse/alloc/config.hpp>
#include <coverse/alloc/message.hpp>
#include <coverse/runtime/settings.hpp>
#include <coverse/runtime/sync_wait.hpp>
#include <coverse/runtime/timer.hpp>

namespace coverse::detail {

// ---------------------------------------------------------------------------------------
// Barrier: arrivals go to PE 0, which releases everyone. Out of band: no handler runs
// while a PE waits, arriving messages stay queued.

// The ordinary barrier: a spanning tree (fan-out 4, root PE 0) of internal messages over
// the same paths as user messages (the shared-memory rings on one host). Arrivals go up
// once a PE's whole subtree arrived; the release comes down. The messages are taken out
// at arrival (accept_message), never queued for a handler, so the barrier stays below the
// message queue.
task<void> pe_core::tree_barrier() {
    const std::uint32_t epoch = ++_barrier_epoch;
    trace::emit(trace::kind::phase_begin, 5, epoch);
    int children[4];
    const int n = span_children(static_cast<int>(_pe), children);
    while (_tree_arrivals[epoch] < static_cast<std::uint32_t>(n)) {
        // One wait per child not arrived yet: an edge to each in the hang report's graph.
        std::optional<wait_scope> missing[4];
        for (int i = 0; i < n; ++i)
            if (!(_tree_arrived[epoch] & (1u << i)))
                missing[i].emplace(wait_reason{wait_kind::barrier,
                                               static_cast<std::uint32_t>(children[i]), epoch,
                                               "tree barrier: arrival of a child"});
        co_await _barrier_waiters.wait();
    }
    _tree_arrivals.erase(epoch);
    _tree_arrived.erase(epoch);
    if (_pe != 0) {
        const auto parent = static_cast<std::uint32_t>(span_parent(static_cast<int>(_pe)));
        send_barrier_message(parent, internal_handler::barrier_arrive, epoch);
        while (_barrier_released < epoch)
            co_await waiting_for({wait_kind::barrier, parent, epoch, "tree barrier: release"},
                                 _barrier_waiters.wait());
    }
    for (int i = 0; i < n; ++i)
        send_barrier_message(static_cast<std::uint32_t>(children[i]),
                             internal_handler::barrier_release, epoch);
    trace::emit(trace::kind::phase_end, 5, epoch);
}

void pe_core::send_barrier_message(std::uint32_t to, internal_handler which, std::uint32_t epoch) {
    const int size = static_cast<int>(CmiMsgHeaderSizeBytes + sizeof epoch);
    void* m = alloc::msg_alloc(static_cast<std::size_t>(size));
    if (!m) fatal("out of memory in a barrier");
    CmiInitMsgHeader(m, size);
    header_of(m)->handler = static_cast<std::uint32_t>(which);
    std::memcpy(static_cast<std::byte*>(m) + CmiMsgHeaderSizeBytes, &epoch, sizeof epoch);
    send(static_cast<int>(to), size, m, ownership::take, "CmiBarrier");
}

// Barrier messages are consumed where they arrive; returns whether `msg` was one.
bool pe_core::take_barrier_message(void* msg, std::uint32_t from) {
    const std::uint32_t h = header_of(msg)->handler;
    if (h != static_cast<std::uint32_t>(internal_handler::barrier_arrive) &&
        h != static_cast<std::uint32_t>(internal_handler::barrier_release))
        return false;
    std::uint32_t epoch = 0;
    if (alloc::msg_size(msg) >= CmiMsgHeaderSizeBytes + sizeof epoch)
        std::memcpy(&epoch, static_cast<std::byte*>(msg) + CmiMsgHeaderSizeBytes, sizeof epoch);
    if (h == static_cast<std::uint32_t>(internal_handler::barrier_arrive)) {
        ++_tree_arrivals[epoch];
        int children[4];
        const int n = span_children(static_cast<int>(_pe), children);
        for (int i = 0; i < n; ++i)
            if (static_cast<std::uint32_t>(children[i]) == from) _tree_arrived[epoch] |= 1u << i;
    } else
        _barrier_released = std::max(_barrier_released, epoch);
    _barrier_waiters.notify_all();
    return true;
}

// CmiBarrierZero: every PE reports to PE 0 over the mesh (a barrier frame); only PE 0
// waits for all of them.
task<void> pe_core::barrier(bool zero_only) {
    if (_num_pes == 1) co_return;
    if (!zero_only) {
        co_await tree_barrier();
        co_return;
    }
    // Zero barriers count epochs of their own (the top bit marks them).
    const std::uint32_t epoch = 0x8000'0000u | ++_zero_epoch;
    trace::emit(trace::kind::phase_begin, 5, epoch);
    if (_pe != 0) {
        const auto payload = net::encode(net::barrier_payload{epoch, net::barrier_phase::arrive});
        net::frame_header h;
        h.type = net::frame_type::barrier;
        h.source_pe = _pe;
        h.payload_length = static_cast<std::uint32_t>(payload.size());
        const int rc = co_await _mesh->send(0, h, payload);
        if (rc < 0) peer_lost("PE " + std::to_string(_pe) + ": barrier: PE 0 is gone");
    } else {
        while (_barrier_arrivals[epoch] < _num_pes - 1)
            co_await waiting_for({wait_kind::barrier, no_peer, epoch, "CmiBarrierZero at PE 0"},
                                 _barrier_waiters.wait());
        _barrier_arrivals.erase(epoch);
    }
    trace::emit(trace::kind::phase_end, 5, epoch);
}

void pe_core::on_barrier_frame(std::uint32_t from, const net::frame& f) {
    net::decode_limits lim;
    lim.num_pes = _num_pes;
    auto d = net::decode_barrier(f.payload_bytes(), lim);
    if (!d.ok()) {
        print("coverse: PE " + std::to_string(_pe) + ": bad barrier frame from PE " +
                  std::to_string(from) + "\n",
              true);
        return;
    }
    // Only CmiBarrierZero uses barrier frames (arrivals at PE 0); CmiBarrier's tree travels
    // as internal messages (take_barrier_message).
    if (d.value.phase != net::barrier_phase::arrive || _pe != 0) {
        print("coverse: PE " + std::to_string(_pe) + ": unexpected barrier frame from PE " +
                  std::to_string(from) + "\n",
              true);
        return;
    }
    _activity.heard_from(from);
    ++_barrier_arrivals[d.value.epoch];
    _barrier_waiters.notify_all();
}

// ---------------------------------------------------------------------------------------
// Reductions over the spanning tree rooted at PE 0 (fan-out 4). A contribution travels as
// a message for the internal reduce handler: {u32 sequence, u32 is_struct} then the
// child's merged message (header included) or its packed struct.

namespace {
struct reduce_prefix {
    std::uint32_t seq;
    std::uint32_t is_struct;
};
constexpr std::size_t reduce_data_offset = CmiMsgHeaderSizeBytes + sizeof(reduce_prefix);
}  // namespace

int pe_core::span_children(int pe, int* out) const noexcept {
    const auto c = spanning_tree::children(0, static_cast<std::uint32_t>(pe), _num_pes);
    if (out)
        for (std::uint32_t k = 0; k < c.count; ++k)
            out[k] = static_cast<int>(c.pe[k]);
    return static_cast<int>(c.count);
}

pe_core::reduction& pe_core::reduction_for(std::uint32_t seq) {
    return _reductions[seq];
}

void pe_core::reduce(void* msg, int size, CmiReduceMergeFn merge) {
    const std::uint32_t seq = _reduce_seq++;
    auto& r = reduction_for(seq);
    r.local_in = true;
    r.local = msg;
    r.local_size = size;
    r.merge = merge;
    reduce_progress(seq);
}

void pe_core::reduce_struct(void* data, CmiReducePupFn pup, CmiReduceMergeFn merge, CmiHandler dest,
                            CmiReduceDeleteFn del) {
    const std::uint32_t seq = _reduce_seq++;
    auto& r = reduction_for(seq);
    r.local_in = true;
    r.is_struct = true;
    r.local = data;
    r.merge = merge;
    r.pup = pup;
    r.dest = dest;
    r.del = del;
    reduce_progress(seq);
}

void pe_core::reduce_contribution(void* msg) {
    reduce_prefix pre;
    std::memcpy(&pre, static_cast<std::byte*>(msg) + CmiMsgHeaderSizeBytes, sizeof pre);
    const int bytes = alloc::msg_size(msg) > reduce_data_offset
                          ? static_cast<int>(alloc::msg_size(msg) - reduce_data_offset)
                          : 0;
    // The remote part becomes a message (or packed data) of its own, as merge expects.
    void* part = alloc::msg_alloc(static_cast<std::size_t>(std::max(bytes, 1)));
    if (!part) fatal("out of memory in a reduction");
    std::memcpy(part, static_cast<std::byte*>(msg) + reduce_data_offset,
                static_cast<std::size_t>(bytes));
    alloc::msg_free(msg);
    reduction_for(pre.seq).remote.push_back(part);
    reduce_progress(pre.seq);
}

void pe_core::reduce_progress(std::uint32_t seq) {
    auto it = _reductions.find(seq);
    if (it == _reductions.end()) return;
    auto& r = it->second;
    const int children = span_children(static_cast<int>(_pe), nullptr);
    if (!r.local_in || static_cast<int>(r.remote.size()) < children) return;

    int size = r.is_struct ? 0 : r.local_size;
    void* merged = r.merge
                       ? r.merge(&size, r.local, r.remote.data(), static_cast<int>(r.remote.size()))
                       : r.local;
    for (void* m : r.remote)
        alloc::msg_free(m);
    reduction done = std::move(r);
    _reductions.erase(it);

    if (_pe == 0) {
        if (!done.is_struct) {
            _net_queue.push_back(merged);  // to the handler set in the message
        } else {
            // The struct result goes to `dest` from the scheduler loop, like a message.
            void* note = alloc::msg_alloc(CmiMsgHeaderSizeBytes + 2 * sizeof(void*));
            if (!note) fatal("out of memory in a reduction");
            CmiInitMsgHeader(note, CmiMsgHeaderSizeBytes);
            header_of(note)->handler =
                static_cast<std::uint32_t>(internal_handler::reduce_struct_result);
            void* fields[2] = {reinterpret_cast<void*>(done.dest), merged};
            std::memcpy(static_cast<std::byte*>(note) + CmiMsgHeaderSizeBytes, fields,
                        sizeof fields);
            _net_queue.push_back(note);
        }
        return;
    }
    // Pack what goes to the parent.
    std::size_t bytes = 0;
    if (done.is_struct) {
        pup_cursor sizing{0};
        if (done.pup) done.pup(reinterpret_cast<pup_er>(&sizing), merged);
        bytes = sizing.size;
    } else {
        bytes = static_cast<std::size_t>(size);
    }
    void* out = alloc::msg_alloc(reduce_data_offset + bytes);
    if (!out) fatal("out of memory in a reduction");
    CmiInitMsgHeader(out, static_cast<int>(reduce_data_offset + bytes));
    header_of(out)->handler = static_cast<std::uint32_t>(internal_handler::reduce_contribution);
    const reduce_prefix pre{seq, done.is_struct ? 1u : 0u};
    std::memcpy(static_cast<std::byte*>(out) + CmiMsgHeaderSizeBytes, &pre, sizeof pre);
    if (done.is_struct) {
        pup_cursor packing{1, 0, static_cast<std::byte*>(out) + reduce_data_offset};
        if (done.pup) done.pup(reinterpret_cast<pup_er>(&packing), merged);
        if (done.del) done.del(merged);
    } else {
        std::memcpy(static_cast<std::byte*>(out) + reduce_data_offset, merged, bytes);
        alloc::msg_free(merged);
    }
    send(span_parent(static_cast<int>(_pe)), static_cast<int>(reduce_data_offset + bytes), out,
         ownership::take, "CmiReduce");
}

}  // namespace coverse::detail
