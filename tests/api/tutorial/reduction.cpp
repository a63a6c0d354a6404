// Tutorial 4 (docs/coroutines.md): a parallel reduction of a user type. Every PE
// summarises its share of a data set (count, sum, min, max); allreduce combines the
// summaries on the spanning tree and every PE gets the whole; reduce gives it to one root.
#include <coverse/coverse.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <stdexcept>

namespace {

struct summary {
    std::uint64_t count = 0;
    std::int64_t sum = 0;
    std::int64_t min = std::numeric_limits<std::int64_t>::max();
    std::int64_t max = std::numeric_limits<std::int64_t>::min();

    void add(std::int64_t x) {
        ++count;
        sum += x;
        min = std::min(min, x);
        max = std::max(max, x);
    }
};

summary combine(summary a, summary b) {
    return {a.count + b.count, a.sum + b.sum, std::min(a.min, b.min), std::max(a.max, b.max)};
}

std::int64_t sample(std::uint64_t i) {
    return static_cast<std::int64_t>((i * 7919) % 1000) - 500;
}

constexpr std::uint64_t samples = 100000;

coverse::task<void> entry(coverse::machine& m) {
    const std::uint32_t me = m.pe(), n = m.num_pes();
    summary mine;
    for (std::uint64_t i = me; i < samples; i += n)
        mine.add(sample(i));

    const summary all = co_await m.allreduce(mine, combine);
    const std::uint32_t root = n - 1;
    const std::optional<summary> at_root = co_await m.reduce(mine, combine, root);

    summary serial;
    for (std::uint64_t i = 0; i < samples; ++i)
        serial.add(sample(i));
    auto same = [&](const summary& s) {
        return s.count == serial.count && s.sum == serial.sum && s.min == serial.min &&
               s.max == serial.max;
    };
    if (!same(all)) throw std::runtime_error("reduction: allreduce differs from the serial sum");
    if ((me == root) != at_root.has_value() || (at_root && !same(*at_root)))
        throw std::runtime_error("reduction: reduce's result at the root is wrong");
    if (me == 0)
        std::printf("reduction: %llu samples, sum %lld, min %lld, max %lld\n",
                    static_cast<unsigned long long>(all.count), static_cast<long long>(all.sum),
                    static_cast<long long>(all.min), static_cast<long long>(all.max));
}

}  // namespace

int main(int argc, char** argv) {
    return coverse::run(argc, argv, entry);
}
