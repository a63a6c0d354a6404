// Start-up ordering of the coroutine API (issue 15): every PE registers its stream at the top
// of the entry coroutine, with no barrier, and PE 0 sends at once. A message that reaches a
// PE before its entry coroutine ran to its first suspension must wait for it (as it waits
// for a Converse start function), not hit "handler 0, which is not registered here".
// Usage: coro_startup_ring_pe [laps] (default 1000). Any mismatch aborts the job.
#include <converse.h>

#include <coverse/coverse.hpp>

#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace {

std::uint32_t laps = 1000;

coverse::task<void> entry(coverse::machine& m) {
    auto& ring = m.register_stream();  // first thing, no barrier after it
    const std::uint32_t me = m.pe();
    const std::uint32_t n = m.num_pes();
    const std::uint32_t next = (me + 1) % n;
    std::uint64_t token = 0;
    if (me == 0)
        co_await m.send(next, ring.handler(),
                        std::as_bytes(std::span<const std::uint64_t, 1>(&token, 1)));
    for (std::uint32_t lap = 0; lap < laps; ++lap) {
        coverse::message got = co_await ring.next();
        if (got.payload().size() != sizeof token)
            CmiAbort("startup_ring: PE %u got %zu bytes, expected %zu", me, got.payload().size(),
                     sizeof token);
        std::memcpy(&token, got.payload().data(), sizeof token);
        // The token counts hops: on lap L, PE p > 0 gets L*n + p - 1 and PE 0 gets L*n + n - 1.
        const std::uint64_t want = static_cast<std::uint64_t>(lap) * n + (me == 0 ? n : me) - 1;
        if (token != want)
            CmiAbort("startup_ring: PE %u lap %u: token %llu, expected %llu", me, lap,
                     static_cast<unsigned long long>(token), static_cast<unsigned long long>(want));
        ++token;
        if (me != 0 || lap + 1 < laps)
            co_await m.send(next, ring.handler(),
                            std::as_bytes(std::span<const std::uint64_t, 1>(&token, 1)));
    }
    if (me == 0) CmiPrintf("startup_ring: %u PEs, %u laps ok\n", n, laps);
}

}  // namespace

int main(int argc, char** argv) {
    if (argc > 1 && argv[1][0] != '+') laps = static_cast<std::uint32_t>(std::atoi(argv[1]));
    return coverse::run(argc, argv, entry);
}
