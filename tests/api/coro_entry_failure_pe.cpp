// The program fails on one PE while the others wait on it (issue 15: an escaped exception is
// reported, the job never hangs). Run by expect_pe_failure.sh through coverse-run.
//
// Usage: coro_entry_failure_pe entry|task|exit|exit0
//   entry  the last PE's entry task throws once every PE is past the start barrier
//   task   the last PE spawns a task that throws, and its entry then waits on a stream
//          no one sends to
//   exit   the last PE's entry task calls std::exit(3) there instead (the process's exit
//          handlers run inside the task: the job must stop with status 3, not wait for the
//          task to end, which it never does)
//   exit0  every PE takes a message from the one before it (the receive resumed from its
//          stream's handler, not by the loop), leaves a task of its own waiting and calls
//          std::exit(0): the job ends with status 0 (exit(0) is ConverseExit's end), with
//          no PE waiting for the task that called exit() or aborting over the waiting one
// Every other PE waits for a message from the last PE that never comes. With the default
// ON_PEER_LOST the job must stop, naming the PE and the exception; with report each of them
// must learn of the failed PE's loss (its receive throws peer_lost, or is_lost says so
// before it waits) and finish. Before the fix, a failed entry sent
// its PE into the exit vote and the job hung.
#include <converse.h>

#include <coverse/coverse.hpp>

#include <chrono>
#include <cstdio>
#include <optional>
#include <stdexcept>
#include <string>

namespace {

constexpr const char* expect_program = "coro_entry_failure";

}  // namespace

#include "pe_expect.hpp"

using namespace std::chrono_literals;

namespace {

std::string scenario;

coverse::task<void> wait_on(coverse::message_stream& s) {
    (void)co_await s.next();  // nobody sends on it
}

coverse::task<void> give_up(std::uint32_t pe) {
    throw std::runtime_error("PE " + std::to_string(pe) + " gave up");
    co_return;
}

coverse::task<void> entry(coverse::machine& m) {
    coverse::message_stream& s = m.register_stream();
    coverse::message_stream& quiet = m.register_stream();
    EXPECT(scenario == "entry" || scenario == "task" || scenario == "exit" || scenario == "exit0",
           "unknown scenario '%s'", scenario.c_str());
    if (scenario == "exit0") {
        const std::uint32_t n = m.num_pes();
        co_await m.send_value((m.pe() + 1) % n, s.handler(), static_cast<int>(m.pe()));
        const coverse::message got = co_await s.next();
        const int before = static_cast<int>((m.pe() + n - 1) % n);
        EXPECT(got.as<int>() == before, "the message is not from PE %d", before);
        m.spawn(wait_on(quiet), "waiting task");
        std::printf("PE %u calls exit(0) from its entry task\n", m.pe());
        std::fflush(stdout);
        std::exit(0);
    }
    co_await m.barrier();
    const std::uint32_t failing = m.num_pes() - 1;
    // The others tell the failing PE they are past the barrier: a collective still in
    // progress on a PE fails with any PE's loss (docs/coroutines.md), which is not tested here.
    if (m.pe() == failing) {
        for (std::uint32_t p = 0; p < failing; ++p)
            (void)co_await s.next();
        // Its last words, sent just before it fails: under ON_PEER_LOST=report they must
        // arrive (a failed PE gives its sends a while before it exits).
        for (std::uint32_t p = 0; p < failing; ++p)
            co_await m.send_value(p, s.handler(), 7);
    } else {
        co_await m.send_value(failing, s.handler(), 1);
    }
    if (m.pe() == failing) {
        if (scenario == "exit") {
            std::fflush(stdout);
            std::exit(3);
        }
        if (scenario == "entry") co_await give_up(m.pe());
        m.spawn(give_up(m.pe()), "giving-up task");
        (void)co_await s.next();  // nobody sends: only the failure ends this PE
        EXPECT(false, "a message came from nowhere");
    }
    // Its last words come first, also when its loss is known already (queued before it).
    std::optional<coverse::message> last = co_await s.next(10s);
    EXPECT(last && last->as<int>() == 7, "PE %u's last message did not arrive", failing);
    std::printf("PE %u got PE %u's last message\n", m.pe(), failing);
    // A stream has no fixed sender: a receive that starts after this PE learnt of the loss
    // waits for the others (docs/coroutines.md). The failure may be known by now.
    if (m.is_lost(failing)) {
        std::printf("PE %u learnt PE %u was lost (before its receive)\n", m.pe(), failing);
    } else {
        try {
            (void)co_await s.next();
            EXPECT(false, "PE %u sent a message it never sends", failing);
        } catch (const coverse::peer_lost& e) {
            EXPECT(e.pe() == failing, "peer_lost names PE %u, not PE %u", e.pe(), failing);
            std::printf("PE %u learnt PE %u was lost (its receive threw peer_lost)\n", m.pe(),
                        e.pe());
        }
    }
    std::printf("PE %u finished\n", m.pe());
    std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
    if (argc > 1) scenario = argv[1];  // first: runtime flags (++set ...) come after it
    return coverse::run(argc, argv, entry);
}
