// Tutorial 2 (docs/coroutines.md): a token travels around the ring of PEs, lap after lap.
// Streams are registered first thing and PE 0 sends at once: messages that arrive before
// a PE's entry ran wait for it.
#include <coverse/coverse.hpp>

#include <cstdint>
#include <cstdio>
#include <stdexcept>

namespace {

constexpr std::uint32_t laps = 100;

coverse::task<void> entry(coverse::machine& m) {
    auto& ring = m.register_stream();
    const std::uint32_t me = m.pe(), n = m.num_pes();
    const std::uint32_t next = (me + 1) % n;

    if (me == 0) co_await m.send_value(next, ring.handler(), std::uint64_t{0});
    for (std::uint32_t lap = 0; lap < laps; ++lap) {
        std::uint64_t hops = co_await ring.next<std::uint64_t>();
        // PE p > 0 sees lap * n + p - 1 hops, PE 0 sees lap * n + n - 1.
        if (hops != std::uint64_t{lap} * n + (me == 0 ? n : me) - 1)
            throw std::runtime_error("ring: the token skipped a PE");
        if (me != 0 || lap + 1 < laps) co_await m.send_value(next, ring.handler(), hops + 1);
    }
    if (me == 0) std::printf("ring: %u laps over %u PEs\n", laps, n);
}

}  // namespace

int main(int argc, char** argv) {
    return coverse::run(argc, argv, entry);
}
