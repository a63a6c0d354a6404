// The same-host path of the machine core: every frame between two PEs on one host goes
// through a shared-memory ring (net/shm_ring.hpp) instead of the TCP mesh.
//
// Stages: create (each PE makes one ring per peer for what that peer sends it, and its
// doorbell, before registering with the launcher) -> connect (after the mesh is up, each PE
// maps the rings it writes to and its peers' doorbells; a barrier; then every name is
// unlinked, so nothing is left in /dev/shm) -> send (copy into the ring now if it fits,
// else queue and pump as the consumer frees room; a message larger than a chunk goes in
// several) -> poll (the scheduler's poller copies records out, whole messages go to
// accept_message) -> sleep (the poller announces it in each ring; a producer that sees it
// rings the doorbell, a FIFO the sleeping scheduler polls through io_uring) -> close.
// Control frames (barrier, disconnect) stay on the mesh.
#include "pe_core.hpp"

#include <poll.h>

#include <cinttypes>
#include <cstdio>
#include <cstring>

#include <coverse/alloc/message.hpp>
#include <coverse/runtime/io.hpp>
#include <coverse/runtime/settings.hpp>
#include <coverse/runtime/sync_wait.hpp>

namespace coverse::detail {

namespace {

std::string job_tag(std::uint64_t key) {
    char b[24];
    std::snprintf(b, sizeof b, "%016" PRIx64, key);
    return b;
}

// The ring that carries frames from `from` to `to`; created by `to`.
std::string ring_name(std::uint64_t key, std::uint32_t to, std::uint32_t from) {
    return "/coverse-" + job_tag(key) + "-" + std::to_string(to) + "-from-" + std::to_string(from);
}

std::string bell_path(std::uint64_t key, std::uint32_t pe) {
    return "/dev/shm/coverse-" + job_tag(key) + "-" + std::to_string(pe) + ".bell";
}

}  // namespace

void pe_core::shm_create(const net::launch_info& info) {
    // Every PE decides the same way (same settings, same kernel), so all of them take part
    // in the start-up barrier of shm_connect.
    _shm_wanted = _num_pes > 1 && settings::enabled("SHM") && _sched->io() != nullptr;
    if (!_shm_wanted) return;
    const std::size_t capacity = settings::count("SHM_RING_BYTES");
    try {
        _shm_in.resize(_num_pes);
        _shm_out.resize(_num_pes);
        for (std::uint32_t p = 0; p < _num_pes; ++p)
            if (p != _pe)
                _shm_in[p].ring.emplace(
                    net::shm_ring::create(ring_name(info.job_key, _pe, p), capacity));
        _shm_bell.emplace(net::shm_doorbell::create(bell_path(info.job_key, _pe)));
    } catch (const std::exception& e) {
        // No shared memory here (no /dev/shm, a small container /dev/shm): this PE's
        // peers find no ring for it and send over TCP; it sends over TCP too.
        print("coverse: PE " + std::to_string(_pe) + ": " + e.what() +
                  "; messages to and from this PE use TCP\n",
              true);
        _shm_in.clear();
        _shm_out.clear();
        _shm_bell.reset();
    }
}

void pe_core::shm_connect(const net::launch_info& info, const std::vector<net::node_entry>& table) {
    if (!_shm_wanted) return;
    if (!_shm_in.empty()) {
        const std::uint64_t here = table[_pe].machine_id;
        for (std::uint32_t p = 0; p < _num_pes; ++p) {
            if (p == _pe) continue;
            if (table[p].machine_id != here) {
                _shm_in[p].ring.reset();  // another host: that pair stays on TCP
                continue;
            }
            try {
                auto ring = net::shm_ring::open(ring_name(info.job_key, p, _pe));
                auto bell = net::shm_doorbell::open(bell_path(info.job_key, p));
                _shm_out[p].ring.emplace(std::move(ring));
                _shm_out[p].bell.emplace(std::move(bell));
            } catch (const std::exception&) {
                // That PE has no shared memory (it said so): this direction stays on TCP.
            }
        }
        _shm_poller = std::make_unique<shm_poller>(*this);
        _sched->add_poller(*_shm_poller);
        _shm_tasks = std::make_unique<task_scope>("shm doorbell");
        _shm_tasks->spawn(shm_bell_task(this), "shm doorbell", *_sched);
    }
    // Everyone has mapped what it needs: the names can go (the mappings stay).
    sync_wait(barrier(false));
    for (auto& in : _shm_in)
        if (in.ring) in.ring->unlink();
    if (_shm_bell) _shm_bell->unlink();
}

task<void> pe_core::shm_bell_task(pe_core* self) {
    // Keeps a poll on the doorbell in io_uring, so a scheduler that sleeps wakes when a
    // producer rings it.
    for (;;) {
        try {
            const int r = co_await poll_fd(self->_shm_bell->fd(), POLLIN);
            if (r < 0) co_return;
        } catch (const cancelled_error&) {
            co_return;
        }
        self->_shm_bell->drain();
    }
}

void pe_core::shm_send(std::uint32_t dest, const std::byte* buf, std::uint32_t size,
                       std::uint16_t flags, std::uint32_t tag, void* ctx) {
    auto& out = _shm_out[dest];
    if (out.queue.empty() && size <= out.ring->max_chunk() &&
        out.ring->try_write(std::span<const std::byte>(buf, size), size,
                            flags | net::shm_flags::first, tag)) {
        if (out.ring->take_sleeper()) out.bell->ring();
        frame_sent(ctx, 0);  // in the ring: the buffer may be reused
        return;
    }
    out.queue.push_back(shm_out_msg{buf, size, 0, flags, tag, ctx});
    ++_shm_queued;
    shm_pump(dest);
}

namespace {
// One chunk of a queued message into its ring, if there is room.
bool shm_pump_one(net::shm_ring& ring, const std::byte* buf, std::uint32_t size,
                  std::uint32_t& offset, std::uint16_t flags, std::uint32_t tag) {
    const std::uint32_t chunk =
        static_cast<std::uint32_t>(std::min<std::size_t>(size - offset, ring.max_chunk()));
    if (!ring.try_write(
            std::span<const std::byte>(buf + offset, chunk), size,
            static_cast<std::uint16_t>(flags | (offset == 0 ? net::shm_flags::first : 0)), tag))
        return false;
    offset += chunk;
    return true;
}
}  // namespace

bool pe_core::shm_pump(std::uint32_t dest) {
    auto& out = _shm_out[dest];
    bool wrote = false;
    while (!out.queue.empty()) {
        auto& m = out.queue.front();
        if (!shm_pump_one(*out.ring, m.buf, m.size, m.offset, m.flags, m.tag)) break;
        wrote = true;
        if (m.offset < m.size && m.size > 0) continue;
        void* ctx = m.ctx;
        out.queue.pop_front();
        --_shm_queued;
        frame_sent(ctx, 0);
    }
    if (wrote && out.ring->take_sleeper()) out.bell->ring();
    return wrote;
}

bool pe_core::shm_poll() {
    bool did = false;
    if (_shm_queued)
        for (std::uint32_t p = 0; p < _shm_out.size(); ++p)
            if (!_shm_out[p].queue.empty()) did |= shm_pump(p);
    for (std::uint32_t p = 0; p < _shm_in.size(); ++p) {
        auto& in = _shm_in[p];
        if (!in.ring) continue;
        // A bounded batch per ring, so one busy sender cannot hold the loop.
        for (int n = 0; n < 256; ++n) {
            auto rec = in.ring->peek();
            if (!rec) {
                if (in.ring->corrupt())
                    fatal("PE " + std::to_string(_pe) + ": the shared-memory ring from PE " +
                          std::to_string(p) + " holds an impossible record (corrupt memory?)");
                break;
            }
            did = true;
            if (rec->flags & net::shm_flags::first) {
                in.assembling = alloc::msg_alloc(std::max<std::uint32_t>(rec->total, 1));
                if (!in.assembling)
                    fatal("out of memory receiving " + std::to_string(rec->total) + " bytes");
                in.total = rec->total;
                in.filled = 0;
                in.flags = rec->flags;
                in.tag = rec->tag;
            }
            if (!in.assembling || in.filled + rec->chunk.size() > in.total)
                fatal("PE " + std::to_string(_pe) + ": the shared-memory ring from PE " +
                      std::to_string(p) + " is corrupt (a chunk without its message)");
            std::memcpy(static_cast<std::byte*>(in.assembling) + in.filled, rec->chunk.data(),
                        rec->chunk.size());
            in.filled += static_cast<std::uint32_t>(rec->chunk.size());
            in.ring->consume();
            if (in.filled < in.total) continue;
            void* msg = std::exchange(in.assembling, nullptr);
            accept_message(p, msg, in.total, (in.flags & net::shm_flags::broadcast) != 0, in.tag);
        }
    }
    return did;
}

bool pe_core::shm_try_sleep() {
    if (_shm_queued) return false;  // still pumping into a full ring: keep polling
    for (std::size_t i = 0; i < _shm_in.size(); ++i) {
        if (!_shm_in[i].ring) continue;
        if (!_shm_in[i].ring->prepare_sleep()) {
            for (std::size_t j = 0; j < i; ++j)
                if (_shm_in[j].ring) _shm_in[j].ring->cancel_sleep();
            return false;
        }
    }
    return true;
}

void pe_core::shm_wake() {
    for (auto& in : _shm_in)
        if (in.ring) in.ring->cancel_sleep();
}

void pe_core::shm_close() {
    if (_shm_tasks) {
        _shm_tasks->request_stop();
        sync_wait(_shm_tasks->join());
        _shm_tasks.reset();
    }
    if (_shm_poller) {
        _sched->remove_poller(*_shm_poller);
        _shm_poller.reset();
    }
    for (auto& in : _shm_in)
        if (in.assembling) alloc::msg_free(std::exchange(in.assembling, nullptr));
    _shm_out.clear();
    _shm_in.clear();
    _shm_bell.reset();
}

}  // namespace coverse::detail
