// ring_bench: coverse's shared-memory ring alone, the floor under coverse-shm's small messages
// (scripts/bench-perf.sh, column "ring"). Two processes, no runtime: each pinned to one CPU,
// a ring each way (rdma/shm_ring.hpp, the rings coverse's PEs use). The sender writes a whole
// Converse message (the 16-byte header and the payload) as one record; the receiver copies the
// record out, as a PE's ring drain does into a message of its own, and releases it. Nothing
// else: no allocation, queue, dispatch or handler. One JSON line per size with "impl":"ring",
// the fields of coverse-perf's pingpong: one-way µs (round trip / 2), median and mean
// ("p50_us", "lat_us"). No rate test: a bare consumer keeps up with its producer and polls the
// very line being written, so each record costs a transfer of that line, and a window goes
// slower than through coverse's PEs (9-13 M msg/s against 17 M, docs/perf.md); that is not a
// floor.
// Sizes above the ring's largest record (256 KiB here) are skipped with a note: coverse sends
// those by rendezvous, not through the ring.
// With --bare, no ring either: "impl":"line", the hardware's floor for the same exchange. Each
// way has one fixed place, line-aligned: the sender copies the message in after an 8-byte word
// and then stores the message's number in the word (release); the receiver waits for that number
// (acquire) and copies the message out. For a small message that is one cache line crossing the
// cores each way and nothing else, so any messaging layer between two processes takes at least
// this long, measured the same way (the same timing per round trip, the same median).
#include <coverse/rdma/shm_ring.hpp>

#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "floor_bench.hpp"

namespace {

using coverse::rdma::shm_record;
using coverse::rdma::shm_ring;
namespace shm_flags = coverse::rdma::shm_flags;

constexpr std::size_t ring_bytes = 1 << 20;  // each way; records up to a quarter of it

using floor_bench::header_bytes;
using floor_bench::now_us;
using floor_bench::options;
using floor_bench::plan;

void usage(FILE* f) {
    std::fputs(
        "Usage: ring_bench [options]\n"
        "coverse's shared-memory ring alone, between two processes pinned to two CPUs: the\n"
        "floor under coverse-shm's small-message latency. A ping-pong per size; one JSON line\n"
        "each, one-way µs (p50_us, lat_us) as coverse-perf's pingpong.\n"
        "  --sizes LIST   payload bytes, e.g. 8,1K,64K (the default); each message is the\n"
        "                 16-byte Converse header and the payload, at most 256 KiB in all\n"
        "                 (larger sizes are skipped with a note)\n",
        f);
    std::fputs(floor_bench::schedule_help, f);
    std::fputs(
        "  --bare         no ring: the message through one fixed place each way, its number\n"
        "                 stored last (\"impl\":\"line\"): the floor any layer stands on\n",
        f);
    std::fputs(floor_bench::closing_help, f);
    std::fputs(
        "Exit status: 0, 1 when the rings cannot be made or the other process stops, 2 for\n"
        "a bad argument.\n",
        f);
}

[[noreturn]] void fail(const char* why) {
    std::fprintf(stderr, "ring_bench: %s; giving up\n", why);
    std::_Exit(1);
}

// `peer` > 0: the first process's child; < 0: minus the second process's parent. The parent
// watches its child; the child, its parent (re-parented when it died). (A child reaped behind
// our back, SIGCHLD ignored, reads as ECHILD.)
void give_up_if_gone(pid_t peer) {
    bool gone = false;
    if (peer > 0) {
        const pid_t r = ::waitpid(peer, nullptr, WNOHANG);
        gone = r == peer || (r < 0 && errno == ECHILD);
    } else {
        gone = ::getppid() != -peer;
    }
    if (gone) fail("the other process stopped");
}

// One side of the exchange: writes into `out`, reads from `in`. A side whose peer stopped
// (it died, or never started) gives up instead of spinning forever: every 2^20 empty polls
// it asks whether the peer is still there.
class side {
public:
    side(shm_ring& out, shm_ring& in, pid_t peer) : _out(out), _in(in), _peer(peer) {}

    void send(const std::byte* bytes, std::size_t size) {
        const std::span<const std::byte> chunk(bytes, size);
        const auto total = static_cast<std::uint32_t>(size);
        for (std::uint64_t n = 1; !_out.try_write(chunk, total, shm_flags::message, 0); ++n)
            if ((n & 0xFFFFF) == 0) give_up_if_gone(_peer);
    }
    // Copies the next record out into `into` (as a ring drain does) and releases it.
    std::size_t receive(std::byte* into) {
        std::optional<shm_record> r;
        for (std::uint64_t n = 1; !(r = _in.peek()); ++n) {
            if (_in.corrupt()) fail("the ring holds an impossible record");
            if ((n & 0xFFFFF) == 0) give_up_if_gone(_peer);
        }
        std::memcpy(into, r->chunk.data(), r->chunk.size());
        _in.consume();
        return r->chunk.size();
    }

private:
    shm_ring& _out;
    shm_ring& _in;
    pid_t _peer;  // > 0: the child's pid; < 0: minus the parent's
};

// The --bare exchange: one place each way in memory both processes map, a word and the
// message after it. The word holds the number of the last message put there.
class bare_side {
public:
    // The number and the size share the message's first line, as a ring record's mark does.
    struct place {
        alignas(64) std::atomic<std::uint64_t> number;
        std::uint64_t size;
        std::byte bytes[ring_bytes / 4];
    };
    static_assert(std::atomic<std::uint64_t>::is_always_lock_free,
                  "the number is shared between two processes");
    bare_side(place& out, place& in, pid_t peer) : _out(out), _in(in), _peer(peer) {}

    void send(const std::byte* bytes, std::size_t size) {
        std::memcpy(_out.bytes, bytes, size);
        _out.size = size;
        _out.number.store(++_sent, std::memory_order_release);
    }
    std::size_t receive(std::byte* into) {
        ++_received;
        for (std::uint64_t n = 1; _in.number.load(std::memory_order_acquire) != _received; ++n)
            if ((n & 0xFFFFF) == 0) give_up_if_gone(_peer);
        const std::size_t size = _in.size;
        if (size > sizeof _in.bytes) fail("the other process wrote an impossible size");
        std::memcpy(into, _in.bytes, size);
        return size;
    }

private:
    place& _out;
    place& _in;
    pid_t _peer;
    std::uint64_t _sent = 0, _received = 0;
};

// The first process: a ping-pong per size, printed as it ends. The second answers (echo()).
template <class Side>
void drive(Side& s, const options& o, const std::vector<long>& sizes) {
    std::vector<std::byte> msg(ring_bytes / 4, std::byte{0x5a}), back(ring_bytes / 4);
    for (const long payload : sizes) {
        const auto size = static_cast<std::size_t>(header_bytes + payload);
        long warmup = 0, iters = 0;
        plan(payload, o, warmup, iters);
        std::vector<double> rtt;
        rtt.reserve(static_cast<std::size_t>(iters));
        for (long k = -warmup; k < iters; ++k) {
            const double t0 = now_us();
            s.send(msg.data(), size);
            if (s.receive(back.data()) != size) {
                std::fprintf(stderr, "ring_bench: the answer has the wrong size\n");
                std::_Exit(1);
            }
            if (k >= 0) rtt.push_back(now_us() - t0);
        }
        floor_bench::print_pingpong(o.bare ? "line" : "ring", payload, rtt, iters);
    }
    s.send(msg.data(), 1);  // the end: a record of one byte, which no ping-pong sends
}

// Answers drive(): each message with itself.
template <class Side>
void echo(Side& s, const options& o, const std::vector<long>& sizes) {
    std::vector<std::byte> buf(ring_bytes / 4);
    for (const long payload : sizes) {
        long warmup = 0, iters = 0;
        plan(payload, o, warmup, iters);
        for (long k = -warmup; k < iters; ++k) {
            const std::size_t got = s.receive(buf.data());
            s.send(buf.data(), got);
        }
    }
    (void)s.receive(buf.data());  // drive()'s end
}

// Starts the second process and plays the exchange: `make(first, peer)` makes the side of
// the first process (first == true) or of the second, `peer` what that side's give_up_if_gone
// watches. Both pin themselves first.
template <class Make>
int play(const options& o, const std::vector<long>& sizes, Make make) {
    floor_bench::keep_exit_status();
    std::fflush(stdout);
    const pid_t parent = ::getpid();
    const pid_t child = ::fork();
    if (child < 0) {
        std::fprintf(stderr, "ring_bench: fork: %s\n", std::strerror(errno));
        return 1;
    }
    if (child == 0) {
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // and give_up_if_gone, if the parent died already
        floor_bench::pin("ring_bench", o.cpus[1], "second process");
        auto s = make(false, -parent);
        echo(s, o, sizes);
        std::_Exit(0);
    }
    floor_bench::pin("ring_bench", o.cpus[0], "first process");
    auto s = make(true, child);
    drive(s, o, sizes);
    return floor_bench::wait_second("ring_bench", child);
}

// --bare: the same ping-pong through two fixed places in memory both processes map.
int run_bare(const options& o, const std::vector<long>& sizes) {
    using place = bare_side::place;
    void* mem = ::mmap(nullptr, 2 * sizeof(place), PROT_READ | PROT_WRITE,
                       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) {
        std::fprintf(stderr, "ring_bench: mmap of %zu B: %s\n", 2 * sizeof(place),
                     std::strerror(errno));
        return 1;
    }
    // Zeroed here, by the first process before the fork: the places' pages are made now,
    // not by the exchange's first messages. Of the ways measured that is among the fastest
    // (1 KiB 0.47-0.56 us far apart against 0.59-0.61 for pages first touched by the
    // exchange, docs/perf.md stop 33), as a floor should be.
    auto* to_second = new (mem) place{};
    auto* to_first = new (static_cast<std::byte*>(mem) + sizeof(place)) place{};
    return play(o, sizes, [&](bool first, pid_t peer) {
        return first ? bare_side(*to_second, *to_first, peer)
                     : bare_side(*to_first, *to_second, peer);
    });
}

}  // namespace

int main(int argc, char** argv) {
    options o;
    if (const int rc = floor_bench::command_line("ring_bench", argc, argv, true, usage, o); rc >= 0)
        return rc;
    std::vector<long> sizes;
    for (const long payload : o.sizes) {
        if (header_bytes + payload > static_cast<long>(ring_bytes / 4))
            std::fprintf(stderr,
                         "ring_bench: %ld B is skipped: with the header it is over the ring's "
                         "largest record (%zu B); coverse sends it by rendezvous\n",
                         payload, ring_bytes / 4);
        else
            sizes.push_back(payload);
    }

    if (o.bare) return run_bare(o, sizes);

    // Both rings and both producer mappings are made before the fork, and the names removed:
    // each process uses its own copy of the objects it needs, and nothing is left in /dev/shm
    // however the run ends.
    const std::string base = "/coverse-ring-bench-" + std::to_string(::getpid());
    std::optional<shm_ring> to_second, to_first, write_to_second, write_to_first;
    try {
        to_second.emplace(shm_ring::create(base + "-a", ring_bytes));
        to_first.emplace(shm_ring::create(base + "-b", ring_bytes));
        write_to_second.emplace(shm_ring::open(base + "-a"));
        write_to_first.emplace(shm_ring::open(base + "-b"));
    } catch (const std::exception& e) {
        std::fprintf(stderr, "ring_bench: %s\n", e.what());
        if (to_second) to_second->unlink();
        if (to_first) to_first->unlink();
        return 1;
    }
    to_second->unlink();
    to_first->unlink();
    return play(o, sizes, [&](bool first, pid_t peer) {
        return first ? side(*write_to_second, *to_first, peer)
                     : side(*write_to_first, *to_second, peer);
    });
}
