// Shared puts and gets: a one-sided transfer over cma that the target's PE helps copy.
//
// A put or get copies on the initiator's core alone, while a same-host rendezvous from
// RNDV_SPLIT bytes has both PEs copy (rendezvous.cpp), so a 1 MiB put ran at 0.6-0.8x the
// facade's send. From RNDV_SPLIT bytes, when a ring leads to the target, the initiator
// opens the transfer in that ring's shared-put block (shm_put_share: the two addresses,
// put or get, the size, the chunk count and a claim word) and sends a notice on the ring.
// Then both PEs take chunks from the claim word until none is left, the initiator from the
// front, the target from the back (two halves by default: layer_config::share_pieces).
// For a put the initiator writes its chunks with process_vm_writev and the target reads
// its own from the initiator with process_vm_readv; for a get the initiator reads and the
// target writes into the initiator.
//
// Why it cannot hang or tear:
// - The initiator never waits for the target to start. A target that is busy, asleep or
//   behind on its ring claims nothing, and the initiator copies every chunk itself.
// - The initiator waits only for chunks the target has claimed. The target copies a
//   claimed chunk at once, counts it in consumer_done, and yields only between chunks. A
//   target that dies mid-chunk ends that wait as a lost peer.
// - The claim word's high half names the transfer (a serial per pair). A notice read after
//   its transfer ended finds another serial, or no chunk left, and claims nothing; the compare-and-
//   swap fails if the word moved since it was read. The target reads the addresses only
//   after a claim succeeded. The initiator reuses the block only once every chunk the
//   target claimed is counted done, so those addresses still belong to that transfer.
// - A chunk the target could not copy sets consumer_failed, and the initiator copies the
//   whole transfer again itself (the same bytes to the same place).
// One shared transfer per pair runs at a time (share_slot); the next waits its turn. With
// more PEs than cores nothing is shared (shares_onesided): a target would rarely be on a
// core to help, and one that lost its core mid-chunk would hold the transfer up.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <utility>

#include <coverse/runtime/wait_reason.hpp>

#include "layer_impl.hpp"

namespace coverse::rdma {

namespace {

// The claim word: the transfer's serial (bits 32..63) and the chunks nobody claimed yet,
// [front, back): front in bits 0..15, back in bits 16..31.
constexpr std::uint64_t max_chunks = 0xFFFF;
constexpr std::uint32_t front_of(std::uint64_t w) noexcept {
    return static_cast<std::uint32_t>(w & 0xFFFF);
}
constexpr std::uint32_t back_of(std::uint64_t w) noexcept {
    return static_cast<std::uint32_t>((w >> 16) & 0xFFFF);
}
constexpr std::uint64_t claim_word(std::uint32_t serial, std::uint32_t front,
                                   std::uint32_t back) noexcept {
    return (std::uint64_t{serial} << 32) | (std::uint64_t{back} << 16) | front;
}

// Frees the turn when the put ends, also if the layer closed meanwhile (the semaphore
// outlives the peer table).
struct turn_guard {
    std::shared_ptr<semaphore> turn;
    ~turn_guard() { turn->release(); }
};

}  // namespace

bool layer::shares_onesided(const provider& p, std::uint32_t pe, std::size_t size) const noexcept {
    const impl& m = *_impl;
    // More PEs than cores: the target would rarely be on a core to help, and one that
    // claimed a chunk and lost its core would hold the transfer up for a time slice.
    return &p == m.cma.get() && !m.closed && pe < m.peers.size() && m.peers[pe].out_ring &&
           !m.peers[pe].lost && m.cfg.rndv_split > 0 && size >= m.cfg.rndv_split &&
           !m.sched.options().yield_while_spinning;
}

task<op_result> layer::shared_put(std::uint32_t pe, std::span<const std::byte> local,
                                  remote_memory remote) {
    // A put only reads `local`; the shared path takes a mutable span for both directions.
    return _impl->shared_transfer(
        pe, false, std::span<std::byte>(const_cast<std::byte*>(local.data()), local.size()),
        remote);
}

task<op_result> layer::shared_get(std::uint32_t pe, std::span<std::byte> local,
                                  remote_memory remote) {
    return _impl->shared_transfer(pe, true, local, remote);
}

void layer::hold_shared_transfers_for_target(std::chrono::nanoseconds limit) noexcept {
    _impl->share_hold_ns = static_cast<std::uint64_t>(std::max<std::int64_t>(0, limit.count()));
}

void layer::fail_next_shared_chunk() noexcept {
    _impl->fail_share_chunk = true;
}

task<op_result> layer::impl::shared_transfer(std::uint32_t pe, bool is_get,
                                             std::span<std::byte> local, remote_memory remote) {
    const char* const what = is_get ? "get" : "put";
    if (!peers[pe].share_slot) peers[pe].share_slot = std::make_shared<semaphore>(1);
    const std::shared_ptr<semaphore> turn = peers[pe].share_slot;
    co_await waiting_for(
        {wait_kind::other, pe, remote.address, "shared put or get: the one before it to this PE"},
        turn->acquire());
    const turn_guard guard{turn};
    if (closed) co_return op_result{op_status::failed, "the rdma layer closed"};
    if (peers[pe].lost || !peers[pe].out_ring)
        co_return op_result{op_status::peer_lost, "PE " + std::to_string(pe) + " is gone"};

    const std::uint64_t size = local.size();
    // share_pieces page-rounded chunks (the last may be shorter, and a small put may
    // need fewer), more when a chunk would exceed RNDV_CHUNK (the target copies a chunk in
    // one call, its loop waiting meanwhile), between 2 and max_chunks.
    const std::uint64_t pieces = std::clamp<std::uint64_t>(
        std::max<std::uint64_t>(cfg.share_pieces, (size + cfg.rndv_chunk - 1) / cfg.rndv_chunk), 2,
        max_chunks);
    const std::uint64_t chunk = ((size + pieces - 1) / pieces + 4095) & ~std::uint64_t{4095};
    const auto chunks = static_cast<std::uint32_t>((size + chunk - 1) / chunk);
    peer& p = peers[pe];
    if (++p.share_serial == 0) ++p.share_serial;  // 0 would name a block never opened
    const std::uint32_t serial = p.share_serial;
    {
        shm_put_share& sh = p.out_ring->put_share();
        sh.consumer_done.store(0, std::memory_order_relaxed);
        sh.consumer_failed.store(0, std::memory_order_relaxed);
        sh.is_get.store(is_get ? 1 : 0, std::memory_order_relaxed);
        sh.initiator_memory.store(reinterpret_cast<std::uintptr_t>(local.data()),
                                  std::memory_order_relaxed);
        sh.target_memory.store(remote.address, std::memory_order_relaxed);
        sh.size.store(size, std::memory_order_relaxed);
        sh.chunk.store(chunk, std::memory_order_relaxed);
        sh.chunks.store(chunks, std::memory_order_relaxed);
        sh.claim.store(claim_word(serial, 0, chunks), std::memory_order_release);
    }
    ++(is_get ? self._stats.shared_gets : self._stats.shared_puts);
    // A path that is down sends no notice: then the target claims nothing, and we copy all.
    (void)stream_control(pe, net::frame_type::rma_get_request, false, serial, {});

    if (share_hold_ns > 0) {  // tests: give the target its chance first
        const auto until =
            std::chrono::steady_clock::now() + std::chrono::nanoseconds(share_hold_ns);
        while (!closed && !peers[pe].lost && peers[pe].out_ring &&
               back_of(peers[pe].out_ring->put_share().claim.load(std::memory_order_acquire)) ==
                   chunks &&
               std::chrono::steady_clock::now() < until)
            co_await yield();
        if (closed || peers[pe].lost || !peers[pe].out_ring) {
            abandon_shared(pe, serial, chunks);
            co_return op_result{closed ? op_status::failed : op_status::peer_lost,
                                closed ? std::string("the rdma layer closed")
                                       : "PE " + std::to_string(pe) + " is gone"};
        }
    }

    // This PE claims from the front, the target from the back: each PE copies the same
    // part of a buffer put again and again, so its lines stay in that core's cache. With
    // two halves (the default) each PE copies one, unless the other has not started by
    // the time it is done with its own.
    op_result r;
    std::uint32_t ours = 0;  // chunks this PE claimed; the target claimed the rest
    for (;;) {
        shm_put_share& sh = peers[pe].out_ring->put_share();
        std::uint64_t w = sh.claim.load(std::memory_order_acquire);
        while (front_of(w) < back_of(w) &&
               !sh.claim.compare_exchange_weak(w, w + 1, std::memory_order_acq_rel,
                                               std::memory_order_acquire))
            ;
        if (front_of(w) >= back_of(w)) break;
        const std::uint32_t i = front_of(w);
        ++ours;
        const std::uint64_t off = std::uint64_t{i} * chunk;
        const std::uint64_t n = std::min(chunk, size - off);
        sync_completion c;
        const remote_memory part{remote.address + off, remote.key, n};
        if (is_get)
            cma->post_get(pe, local.subspan(off, n), part, c);
        else
            cma->post_put(pe, local.subspan(off, n), part, c);
        if (!c.result.ok()) {
            r = c.result;
            // Claim what is left, so the target stops too.
            std::uint64_t x = sh.claim.load(std::memory_order_acquire);
            while (front_of(x) < back_of(x) &&
                   !sh.claim.compare_exchange_weak(x, claim_word(serial, back_of(x), back_of(x)),
                                                   std::memory_order_acq_rel))
                ;
            if (front_of(x) < back_of(x)) ours += back_of(x) - front_of(x);
            break;
        }
    }
    // A target process that is gone copies nothing any more: no need to wait for it.
    if (r.status == op_status::peer_lost) co_return r;
    // `local` is ours again only when the target finished every chunk it claimed.
    const std::uint32_t theirs = chunks - ours;
    bool helper_failed = false;
    for (;;) {
        if (closed) {
            abandon_shared(pe, serial, chunks);
            r = {op_status::failed, std::string("the rdma layer closed during a shared ") + what};
            break;
        }
        if (peers[pe].lost || !peers[pe].out_ring) {
            abandon_shared(pe, serial, chunks);
            r = {op_status::peer_lost,
                 "PE " + std::to_string(pe) + " died during a shared " + std::string(what)};
            break;
        }
        shm_put_share& sh = peers[pe].out_ring->put_share();
        if (sh.consumer_done.load(std::memory_order_acquire) >= theirs) {
            helper_failed = sh.consumer_failed.load(std::memory_order_relaxed) != 0;
            break;
        }
        co_await yield();
    }
    if (r.ok() && helper_failed) {
        // The target could not copy a chunk it took: this PE copies the whole of it itself.
        sync_completion c;
        const remote_memory all{remote.address, remote.key, size};
        if (is_get)
            cma->post_get(pe, local, all, c);
        else
            cma->post_put(pe, local, all, c);
        r = c.result;
    }
    co_return r;
}

// A transfer that ends early (the layer closing, the peer lost) returns only once the target
// is done with `local`: it claims what is left, so the target takes no more, and spins for
// the chunks the target took (one system call each, on the other core; a get's target
// writes into `local`). A target stopped in the middle of one is given up on after a
// second, and a ring already unmapped leaves nothing to ask.
void layer::impl::abandon_shared(std::uint32_t pe, std::uint32_t serial,
                                 std::uint32_t chunks) noexcept {
    if (pe >= peers.size() || !peers[pe].out_ring) return;
    shm_put_share& sh = peers[pe].out_ring->put_share();
    std::uint64_t w = sh.claim.load(std::memory_order_acquire);
    while (front_of(w) < back_of(w) &&
           !sh.claim.compare_exchange_weak(w, claim_word(serial, back_of(w), back_of(w)),
                                           std::memory_order_acq_rel, std::memory_order_acquire))
        ;
    const std::uint32_t taken = chunks - back_of(w);  // the target claims from the back
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    while (sh.consumer_done.load(std::memory_order_acquire) < taken &&
           std::chrono::steady_clock::now() < until)
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#else
        ;
#endif
}

void layer::impl::on_put_share(std::uint32_t from, std::uint32_t serial) {
    // Only a peer we read with cma: another provider cannot copy its chunks, and each
    // failed chunk would cost the initiator the whole put again.
    if (closed || !cma || !peers[from].in_ring || peers[from].lost ||
        peers[from].get_with != provider_kind::cma)
        return;
    tasks.spawn(help_transfer(this, from, serial), "shared put or get: the target's chunks", sched);
}

task<void> layer::impl::help_transfer(impl* self, std::uint32_t from, std::uint32_t serial) {
    std::uint64_t initiator = 0, target = 0, size = 0, chunk = 0;
    std::uint32_t chunks = 0;
    bool is_get = false, known = false;
    for (;;) {
        if (self->closed) co_return;
        peer& p = self->peers[from];
        if (p.lost || !p.in_ring) co_return;
        shm_put_share& sh = p.in_ring->put_share();
        std::uint64_t w = sh.claim.load(std::memory_order_acquire);
        if ((w >> 32) != serial) co_return;  // that put ended; another may have begun
        if (front_of(w) >= back_of(w)) co_return;
        // From the back (see shared_transfer).
        if (!sh.claim.compare_exchange_strong(w, w - (std::uint64_t{1} << 16),
                                              std::memory_order_acq_rel, std::memory_order_acquire))
            continue;
        // Claimed: the transfer stays open (its block unchanged) until we count this chunk
        // done.
        if (!known) {
            is_get = sh.is_get.load(std::memory_order_relaxed) != 0;
            initiator = sh.initiator_memory.load(std::memory_order_relaxed);
            target = sh.target_memory.load(std::memory_order_relaxed);
            size = sh.size.load(std::memory_order_relaxed);
            chunk = sh.chunk.load(std::memory_order_relaxed);
            chunks = sh.chunks.load(std::memory_order_relaxed);
            known = true;
        }
        const std::uint64_t i = back_of(w) - 1;
        const std::uint64_t off = i * chunk;
        bool ok = chunk > 0 && i < chunks && off < size && (size - 1) / chunk < chunks;
        if (ok && std::exchange(self->fail_share_chunk, false)) ok = false;  // nothing copied
        if (ok) {
            const std::uint64_t n = std::min(chunk, size - off);
            // Our own memory and the initiator's, through the kernel: a bad address fails
            // the call (EFAULT), it does not fault here. A put's chunk is read from the
            // initiator into our memory; a get's is written from ours into the initiator.
            const std::span<std::byte> mine(reinterpret_cast<std::byte*>(target + off), n);
            const remote_memory theirs{initiator + off, 0, n};
            sync_completion c;
            if (is_get)
                self->cma->post_put(from, mine, theirs, c);
            else
                self->cma->post_get(from, mine, theirs, c);
            ok = c.result.ok();
            if (ok) {
                ++self->self._stats.shared_chunks;
                self->self._stats.shared_bytes += n;
            }
        }
        if (!ok) {
            sh.consumer_failed.store(1, std::memory_order_relaxed);
            ++self->self._stats.shared_failures;
        }
        sh.consumer_done.fetch_add(1, std::memory_order_release);
        if (!ok) co_return;  // the initiator copies it all again
        co_await yield();
    }
}

}  // namespace coverse::rdma
