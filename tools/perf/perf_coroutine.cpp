// coverse-perf --api coroutine (perf_coroutine.hpp). The same schemes as the facade's tests:
// pingpong sends the received message straight back (moved, no copy); bw and rate send
// windows of W messages and PE 1 acks each window (rate copies one kept payload per send,
// as the facade's rate sends one buffer). Above MEDIUM_MESSAGE_BOUNDARY (16 KiB)
// bw goes by one-sided puts instead: PE 1 exposes a buffer once and PE 0 puts W messages
// into it, then sends a note that PE 1 acks (the facade moves those sizes by rendezvous,
// a publish and a get-done per message).
#include "perf_coroutine.hpp"

#include <converse.h>

#include <coverse/coverse.hpp>
#include <coverse/runtime/when.hpp>

#include <algorithm>
#include <cstring>
#include <vector>

namespace coverse::perf {

namespace {

constexpr std::size_t put_above = 16 * 1024;

struct streams {
    machine* m = nullptr;
    message_stream *ping = nullptr, *pong = nullptr, *data = nullptr, *note = nullptr,
                   *ack = nullptr, *region = nullptr;
    int start = -1;
} co;

struct start_request {
    std::int32_t test;
    std::int32_t window;
    std::uint64_t bytes;
    std::int64_t total;         // warm-up + measured iterations
    std::int32_t by_get;        // bw above put_above: PE 0 gets from PE 1 instead of putting
    std::int32_t reserved = 0;  // no uninitialised padding goes to PE 1
};

bool by_put(test_kind t, std::size_t bytes) {
    return t == test_kind::bw && bytes > put_above;
}

// ---- PE 1 --------------------------------------------------------------------------------

task<void> serve(start_request req) {
    machine& m = *co.m;
    const auto t = static_cast<test_kind>(req.test);
    if (t == test_kind::pingpong) {
        for (std::int64_t i = 0; i < req.total; ++i) {
            message ball = co_await co.ping->receive();  // no task frame per receive
            co_await m.send(0, co.pong->handler(), std::move(ball));
        }
    } else if (by_put(t, req.bytes)) {
        std::vector<std::byte> target(req.bytes, std::byte{0x5a});  // what a get reads
        exposed_region region = co_await m.expose(target);
        co_await m.send_value(0, co.region->handler(), region.descriptor());
        for (std::int64_t w = 0; w < req.total; ++w) {
            (void)co_await co.note->next();  // PE 0's puts (gets) of this window are done
            co_await m.send_value(0, co.ack->handler(), std::int32_t{1});
        }
    } else {
        for (std::int64_t w = 0; w < req.total; ++w) {
            for (std::int32_t i = 0; i < req.window; ++i)
                (void)co_await co.data->receive();
            co_await m.send_value(0, co.ack->handler(), std::int32_t{1});
        }
    }
}

void start_handler(void* msg) {
    start_request req;
    std::memcpy(&req, static_cast<char*>(msg) + CmiMsgHeaderSizeBytes, sizeof req);
    CmiFree(msg);
    co.m->spawn(serve(req), "coverse-perf coroutine server");
}

// ---- PE 0 --------------------------------------------------------------------------------

struct measured {
    std::vector<double> rtt_us;
    double start = 0, end = 0;
};

task<void> drive(start_request req, long warmup, measured* out) {
    machine& m = *co.m;
    const auto t = static_cast<test_kind>(req.test);
    if (t == test_kind::pingpong) {
        message ball = message::allocate(co.ping->handler(), req.bytes);
        std::memset(ball.payload().data(), 0x5a, req.bytes);
        for (std::int64_t i = 0; i < req.total; ++i) {
            const double sent = CmiWallTimer();
            co_await m.send(1, co.ping->handler(), std::move(ball));
            ball = co_await co.pong->receive();
            if (i >= warmup) out->rtt_us.push_back((CmiWallTimer() - sent) * 1e6);
        }
    } else if (by_put(t, req.bytes)) {
        const remote_region target = co_await co.region->next<remote_region>();
        // A put's source; a get's destination, zeroed so that the check below can fail.
        std::vector<std::byte> source(req.bytes, req.by_get ? std::byte{0} : std::byte{0x5a});
        for (std::int64_t w = 0; w < req.total; ++w) {
            if (w == warmup) out->start = CmiWallTimer();
            std::vector<task<void>> moves;
            for (std::int32_t i = 0; i < req.window; ++i)
                moves.push_back(req.by_get ? m.get(1, target, source) : m.put(1, source, target));
            co_await when_all(std::move(moves));
            co_await m.send_value(1, co.note->handler(), std::int32_t{1});
            (void)co_await co.ack->next();
        }
        // Gets must have brought PE 1's bytes: a benchmark of transfers that moved nothing
        // would be worthless.
        if (req.by_get && std::any_of(source.begin(), source.end(),
                                      [](std::byte b) { return b != std::byte{0x5a}; }))
            CmiAbort("coverse-perf: the coroutine API's gets did not bring PE 1's bytes");
    } else {
        // One payload the caller keeps, like the facade's CmiAsyncSend of one buffer: each
        // send copies it, straight into the peer's ring when it fits (no message allocated).
        const std::vector<std::byte> payload(req.bytes, std::byte{0x5a});
        for (std::int64_t w = 0; w < req.total; ++w) {
            if (w == warmup) out->start = CmiWallTimer();
            for (std::int32_t i = 0; i < req.window; ++i)
                co_await m.send(1, co.data->handler(), std::span<const std::byte>(payload));
            (void)co_await co.ack->next();
        }
    }
    out->end = CmiWallTimer();
    CsdExitScheduler();
}

}  // namespace

void coroutine_register(const options& o) {
    co.m = &machine::current();
    co.ping = &co.m->register_stream();
    co.pong = &co.m->register_stream();
    // Credits for two windows: the sender never waits for the receiver's returns.
    co.data = &co.m->register_stream(static_cast<std::uint32_t>(2 * o.window));
    co.note = &co.m->register_stream();
    co.ack = &co.m->register_stream();
    co.region = &co.m->register_stream();
    co.start = CmiRegisterHandler(start_handler);
}

result coroutine_run(test_kind t, std::size_t bytes, const options& o) {
    const run_plan plan = plan_for(t, bytes, o);
    const start_request req{static_cast<std::int32_t>(t), o.window, bytes, plan.warmup + plan.iters,
                            o.onesided_get ? 1 : 0};
    const int size = static_cast<int>(CmiMsgHeaderSizeBytes + sizeof req);
    void* msg = CmiAlloc(size);
    CmiInitMsgHeader(msg, size);
    CmiSetHandler(msg, co.start);
    std::memcpy(static_cast<char*>(msg) + CmiMsgHeaderSizeBytes, &req, sizeof req);
    CmiSyncSendAndFree(1, size, msg);

    measured out;
    out.rtt_us.reserve(static_cast<std::size_t>(plan.iters));
    co.m->spawn(drive(req, plan.warmup, &out), "coverse-perf coroutine driver");
    CsdScheduler(-1);  // delivers to the streams; the driver ends it

    result r;
    r.test = t;
    r.bytes = bytes;
    r.iters = plan.iters;
    r.coroutine = true;
    const double secs = out.end - out.start;
    if (t == test_kind::pingpong) {
        const latency_stats s = stats_of(out.rtt_us);
        r.lat_us = s.mean / 2;
        r.p50_us = s.p50 / 2;
    } else {
        r.window = o.window;
        if (t == test_kind::bw)
            r.mbps = static_cast<double>(bytes) * o.window * plan.iters / secs / 1e6;
        else
            r.msgs_per_s = static_cast<double>(o.window) * plan.iters / secs;
    }
    return r;
}

}  // namespace coverse::perf
