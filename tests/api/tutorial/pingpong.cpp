// Tutorial 1 (docs/coroutines.md): ping-pong. Even PEs ping the next odd PE, which sends
// each message straight back (the same buffer, moved: no copy); a PE without a partner
// plays both sides, as two tasks.
#include <coverse/coverse.hpp>

#include <cstdio>

namespace {

constexpr int rounds = 1000;

coverse::task<void> pong(coverse::machine& m, coverse::message_stream& pings,
                         coverse::message_stream& pongs, std::uint32_t partner) {
    for (int i = 0; i < rounds; ++i) {
        coverse::message ball = co_await pings.next();
        ball.as_span<int>()[0] += 1;  // in place, in the received buffer
        co_await m.send(partner, pongs.handler(), std::move(ball));
    }
}

coverse::task<void> entry(coverse::machine& m) {
    auto& pings = m.register_stream();
    auto& pongs = m.register_stream();
    const std::uint32_t me = m.pe();
    const std::uint32_t partner = (me ^ 1u) < m.num_pes() ? (me ^ 1u) : me;
    if (me % 2 == 1 || partner == me) m.spawn(pong(m, pings, pongs, partner), "pong");
    if (me % 2 == 1) co_return;  // the pong task runs on; coverse::run waits for it

    for (int i = 0; i < rounds; ++i) {
        co_await m.send_value(partner, pings.handler(), 2 * i);
        const int back = co_await pongs.next<int>();
        if (back != 2 * i + 1) throw std::runtime_error("ping-pong: wrong ball");
    }
    std::printf("PE %u: %d round trips with PE %u\n", me, rounds, partner);
}

}  // namespace

int main(int argc, char** argv) {
    return coverse::run(argc, argv, entry);
}
