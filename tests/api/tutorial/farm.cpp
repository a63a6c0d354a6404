// Tutorial 5 (docs/coroutines.md): a task farm that survives a lost worker. PE 0 hands out
// work items, one at a time, to the other PEs; a worker squares its item and sends the
// result back. Run with ++set ON_PEER_LOST=report, a worker that dies ends PE 0's wait with
// coverse::peer_lost naming it: its item goes back to the pool and the others finish the
// work. Given the argument "crash", the last PE dies at its third item to show it. At the
// end every PE counts its items in an allreduce under a deadline; after a loss that
// collective cannot finish and reports the lost PE as a value (catch_lost).
#include <coverse/coverse.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

using namespace std::chrono_literals;

namespace {

constexpr int items_total = 100;
bool crash = false;  // the last PE dies at its third item

struct result {
    std::int32_t item;
    std::int64_t square;
};

coverse::task<int> worker(coverse::machine& m, coverse::message_stream& items,
                          coverse::message_stream& results) {
    int done = 0;
    for (;;) {
        std::optional<coverse::message> msg;
        try {
            // A manager silent for a minute is given up (the receive is cancelled).
            msg = co_await items.next(60s);
        } catch (const coverse::peer_lost& e) {
            // A stream has no fixed sender: any PE's loss ends the wait. Only the
            // manager's matters here; for another PE's, wait again.
            if (e.pe() != 0) continue;
            std::printf("PE %u: lost the manager\n", m.pe());
            break;
        }
        if (!msg) throw std::runtime_error("no work item from PE 0 within 60 s");
        const int item = msg->as<int>();
        if (item < 0) break;                                                 // no more work
        if (crash && m.pe() == m.num_pes() - 1 && done == 2) std::_Exit(1);  // "crashes"
        co_await m.send_value(0, results.handler(), result{item, std::int64_t{item} * item});
        ++done;
    }
    co_return done;
}

// PE 0's view of the farm.
struct farm {
    std::deque<int> todo;   // items nobody has
    std::vector<int> busy;  // the item each worker has, or -1
    int working = 0;        // workers with an item
    std::int64_t sum = 0;
    int done = 0;

    void give_back(std::uint32_t pe) {  // a lost worker's item goes back to the pool
        if (busy[pe] < 0) return;
        todo.push_front(busy[pe]);
        busy[pe] = -1;
        --working;
    }
};

// Hands the next item, if any, to worker `pe`; a worker found lost gives it back.
coverse::task<void> hand_out(coverse::machine& m, coverse::message_stream& items, std::uint32_t pe,
                             farm& f) {
    if (f.todo.empty() || m.is_lost(pe)) co_return;
    f.busy[pe] = f.todo.front();
    f.todo.pop_front();
    ++f.working;
    auto sent = co_await coverse::catch_lost(m.send_value(pe, items.handler(), f.busy[pe]));
    if (std::holds_alternative<coverse::peer_lost>(sent)) f.give_back(pe);
}

coverse::task<int> manager(coverse::machine& m, coverse::message_stream& items,
                           coverse::message_stream& results) {
    farm f;
    for (int i = 0; i < items_total; ++i)
        f.todo.push_back(i);
    f.busy.assign(m.num_pes(), -1);
    for (std::uint32_t pe = 1; pe < m.num_pes(); ++pe)
        co_await hand_out(m, items, pe, f);

    while (f.done < items_total) {
        // A worker lost while we were not waiting for results: its item goes back.
        for (std::uint32_t pe = 1; pe < m.num_pes(); ++pe)
            if (m.is_lost(pe)) f.give_back(pe);
        if (f.working == 0) {  // no worker left (or none at all): PE 0 does the rest itself
            const int item = f.todo.front();
            f.todo.pop_front();
            f.sum += std::int64_t{item} * item;
            ++f.done;
            continue;
        }
        try {
            const result r = co_await results.next<result>();
            const auto from = static_cast<std::uint32_t>(
                std::find(f.busy.begin(), f.busy.end(), r.item) - f.busy.begin());
            if (from >= f.busy.size()) throw std::runtime_error("a result for no item given out");
            f.busy[from] = -1;
            --f.working;
            f.sum += r.square;
            ++f.done;
            co_await hand_out(m, items, from, f);
        } catch (const coverse::peer_lost& e) {
            std::printf("farm: PE %u was lost; its item goes to another worker\n", e.pe());
            f.give_back(e.pe());
        }
    }
    for (std::uint32_t pe = 1; pe < m.num_pes(); ++pe)  // no more work
        (void)co_await coverse::catch_lost(m.send_value(pe, items.handler(), -1));

    std::int64_t expected = 0;
    for (std::int64_t i = 0; i < items_total; ++i)
        expected += i * i;
    if (f.sum != expected)
        throw std::runtime_error("the farm's sum is " + std::to_string(f.sum) + ", not " +
                                 std::to_string(expected));
    std::printf("farm: %d items done, sum of squares %lld\n", f.done,
                static_cast<long long>(f.sum));
    co_return 0;
}

coverse::task<void> entry(coverse::machine& m) {
    auto& items = m.register_stream();
    auto& results = m.register_stream();
    const int mine =
        m.pe() == 0 ? co_await manager(m, items, results) : co_await worker(m, items, results);

    // Every PE's count, with a deadline: a collective can be cancelled like a receive.
    auto counted = co_await coverse::catch_lost(
        coverse::with_timeout(m.allreduce(mine, std::plus<int>{}), 30s));
    if (auto* lost = std::get_if<coverse::peer_lost>(&counted)) {
        std::printf("PE %u: the count is incomplete: PE %u was lost\n", m.pe(), lost->pe());
    } else {
        const auto& total = std::get<0>(counted);
        if (!total) throw std::runtime_error("the count did not finish within 30 s");
        if (m.pe() == 0)
            std::printf("farm: workers did %d of the items on %u PEs\n", *total, m.num_pes());
    }
}

}  // namespace

int main(int argc, char** argv) {
    crash = argc > 1 && std::strcmp(argv[1], "crash") == 0;
    return coverse::run(argc, argv, entry);
}
