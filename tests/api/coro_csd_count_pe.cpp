// Converse's scheduler run a few messages at a time while a coroutine stream takes bursts
// (ConverseInit, the user calling the scheduler): PE 1's task sends PE 0's bounded stream
// numbered messages as fast as its credits allow; PE 0's start function runs
// CsdScheduleCount(n) for n = 1, 2, 3 in turn until its task took them all. Messages that
// queued up reach the stream's handler in batches (some must); each call must still hand the
// stream at most n of them, no more than it says it delivered, and the task must take every
// message, in order. Any mismatch aborts the job with a message saying what was expected.
// 2 PEs.
#include <converse.h>

#include <coverse/coverse.hpp>

#include <algorithm>
#include <cstdint>

#include "pe_expect.hpp"

namespace {

constexpr const char* expect_program = "coro_csd_count";

constexpr std::int32_t total = 3000;
coverse::message_stream* numbers = nullptr;
std::int32_t taken = 0;    // on PE 0: the messages its task took
int asked = 0;             // what the CsdScheduleCount running now was asked for
std::int32_t batched = 0;  // messages the task took with more of the same call's behind them
int exit_handler = -1;

coverse::task<void> take_all() {
    for (std::int32_t i = 0; i < total; ++i) {
        const auto v = co_await numbers->next<std::int32_t>();
        EXPECT(v == i, "message %d came as %d", static_cast<int>(i), static_cast<int>(v));
        ++taken;
        // What waits behind it came with it, in the same call (the task takes each message as
        // it is handed over, so nothing is left from an earlier one).
        const auto behind = numbers->pending();
        EXPECT(behind + 1 <= static_cast<std::size_t>(asked),
               "CsdScheduleCount(%d) handed the stream %zu messages at once", asked, behind + 1);
        if (behind > 0) ++batched;
    }
}

coverse::task<void> send_all() {
    auto& m = coverse::machine::current();
    for (std::int32_t i = 0; i < total; ++i)
        co_await m.send_value(0, numbers->handler(), i);  // waits for credits when out of them
}

void on_exit(void* msg) {
    CmiFree(msg);
    CsdExitScheduler();
}

// The messages PE 0's stream was handed so far: taken by the task, or waiting for it.
std::int64_t handed() {
    return taken + static_cast<std::int64_t>(numbers->pending());
}

void start(int, char**) {
    auto& m = coverse::machine::current();
    numbers = &m.register_stream(32);
    exit_handler = CmiRegisterHandler(on_exit);
    if (CmiNumPes() != 2) CmiAbort("coro_csd_count: run it on 2 PEs, not %d", CmiNumPes());
    if (CmiMyPe() == 1) {
        m.spawn(send_all(), "numbers sender");
        CsdScheduler(-1);  // until PE 0 says it is done
        return;
    }
    m.spawn(take_all(), "numbers taker");
    // Out of the scheduler for a while first: PE 1's first window of credits queues up here, so
    // the calls below find messages waiting together (the batches under test).
    for (const double until = CmiWallTimer() + 0.02; CmiWallTimer() < until;) {
    }
    int n = 1;
    while (handed() < total) {
        // Never more than is left to come: the call returns only once it delivered n.
        const int ask = static_cast<int>(std::min<std::int64_t>(n, total - handed()));
        const std::int64_t before = handed();
        asked = ask;
        const int left = CsdScheduleCount(ask);
        const std::int64_t got = handed() - before;
        // It returns what it did not deliver; what it delivered includes what the stream got
        // (and any message of the runtime's own).
        EXPECT(left >= 0 && got <= ask - left,
               "CsdScheduleCount(%d) handed the stream %lld messages and returned %d", ask,
               static_cast<long long>(got), left);
        n = n % 3 + 1;
    }
    CsdScheduler(0);  // the task takes what was handed over last
    EXPECT(taken == total, "the task took %d of %d messages", static_cast<int>(taken),
           static_cast<int>(total));
    EXPECT(batched > 0, "no call handed the stream more than one message at once");
    void* bye = CmiAlloc(CmiMsgHeaderSizeBytes);
    CmiSetHandler(bye, exit_handler);
    CmiSyncSendAndFree(1, CmiMsgHeaderSizeBytes, bye);
}

}  // namespace

int main(int argc, char** argv) {
    ConverseInit(argc, argv, start, 1, 0);  // the user calls the scheduler
    return 0;
}
