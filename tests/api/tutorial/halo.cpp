// Tutorial 3 (docs/coroutines.md): a 1-D halo exchange with one-sided puts. Each PE owns
// `cells` values of a periodic line and smooths them, step after step, with its
// neighbours' edge values. It exposes its array once; every PE learns every region with
// allgather; each step puts its edge values into the neighbours' ghost cells and sends a
// note behind each put, one stream per side (each carries one neighbour's notes, in order).
// The ghost cells alternate by step parity, so a neighbour already one step ahead writes
// the other pair. The result is checked against the same smoothing
// done serially.
#include <coverse/coverse.hpp>

#include <cstdio>
#include <stdexcept>
#include <vector>

namespace {

constexpr std::size_t cells = 64;
constexpr int steps = 50;

double initial(std::size_t global_index) {
    return static_cast<double>((global_index * 37) % 11);
}

// Layout: [left ghost even, left ghost odd, cells..., right ghost even, right ghost odd].
constexpr std::size_t first = 2, last = first + cells - 1;
std::size_t left_ghost(int step) {
    return step % 2;
}
std::size_t right_ghost(int step) {
    return last + 1 + step % 2;
}

coverse::task<void> entry(coverse::machine& m) {
    auto& from_left = m.register_stream();   // notes of puts into my left ghosts
    auto& from_right = m.register_stream();  // notes of puts into my right ghosts
    const std::uint32_t me = m.pe(), n = m.num_pes();
    const std::uint32_t left = (me + n - 1) % n, right = (me + 1) % n;

    std::vector<double> u(cells + 4, 0.0);
    for (std::size_t i = 0; i < cells; ++i)
        u[first + i] = initial(me * cells + i);
    coverse::exposed_region mine = co_await m.expose(std::as_writable_bytes(std::span(u)));
    const std::vector<coverse::remote_region> regions = co_await m.allgather(mine.descriptor());

    auto slot = [](const coverse::remote_region& r, std::size_t index) {
        return r.slice(index * sizeof(double), sizeof(double));
    };
    for (int step = 0; step < steps; ++step) {
        // My first cell goes to my left neighbour's right ghost, my last cell to my right
        // neighbour's left ghost; the note behind each put says it is there.
        co_await m.put_notify(left, std::as_bytes(std::span(&u[first], 1)),
                              slot(regions[left], right_ghost(step)),
                              coverse::message::allocate(from_right.handler(), 0));
        co_await m.put_notify(right, std::as_bytes(std::span(&u[last], 1)),
                              slot(regions[right], left_ghost(step)),
                              coverse::message::allocate(from_left.handler(), 0));
        (void)co_await from_left.next();  // both ghosts of this step are in place
        (void)co_await from_right.next();
        std::vector<double> next(u);
        for (std::size_t i = first; i <= last; ++i) {
            const double l = i == first ? u[left_ghost(step)] : u[i - 1];
            const double r = i == last ? u[right_ghost(step)] : u[i + 1];
            next[i] = (l + u[i] + r) / 3.0;
        }
        for (std::size_t i = first; i <= last; ++i)
            u[i] = next[i];
    }

    // The same smoothing of the whole line on one PE, in the same order of operations.
    const std::size_t total = cells * n;
    std::vector<double> line(total);
    for (std::size_t i = 0; i < total; ++i)
        line[i] = initial(i);
    for (int step = 0; step < steps; ++step) {
        std::vector<double> next(total);
        for (std::size_t i = 0; i < total; ++i)
            next[i] = (line[(i + total - 1) % total] + line[i] + line[(i + 1) % total]) / 3.0;
        line.swap(next);
    }
    for (std::size_t i = 0; i < cells; ++i)
        if (u[first + i] != line[me * cells + i])
            throw std::runtime_error("halo: cell " + std::to_string(me * cells + i) +
                                     " differs from the serial result");
    co_await m.barrier();  // nobody puts into `u` any more: its region may go
    if (me == 0) std::printf("halo: %d steps over %u PEs match the serial result\n", steps, n);
}

}  // namespace

int main(int argc, char** argv) {
    return coverse::run(argc, argv, entry);
}
