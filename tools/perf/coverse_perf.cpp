// coverse-perf: the project's benchmark, an ordinary Converse program. PE 0 drives each test
// from its start function, running the scheduler (CsdScheduler(-1)) until the test's last
// handler calls CsdExitScheduler; the other PEs only answer from handlers. At the end PE 0
// broadcasts "done" and every PE leaves through ConverseExit.
//
// Tests: pingpong (PE 0 <-> PE 1, CmiAlloc + CmiSyncSendAndFree from the handler, the usual
// Converse ping-pong), bw and rate (PE 0 sends windows of W messages, PE 1 acks each window;
// the W messages are CmiAsyncSends of one buffer, as mpi_perf's MPI_Isends and osu_bw's are),
// bcast (CmiSyncBroadcastAllAndFree, every PE acks to PE 0), barrier (CmiBarrier on every PE).
// --api coroutine runs pingpong, bw and rate through the facade and the coroutine API
// (perf_coroutine.cpp) in turn, in rounds, and prints the ratio (side_by_side).
#include <converse.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "perf_coroutine.hpp"
#include "perf_options.hpp"
#include "perf_report.hpp"

namespace {

using namespace coverse::perf;

constexpr int header_bytes = CmiMsgHeaderSizeBytes;

// One PE per process: the PE's state is plain globals (what CpvDeclare expands to).
struct handlers {
    int ping, pong;               // pingpong: PE 1 echoes, PE 0 times
    int window_data, window_ack;  // bw and rate
    int bcast, bcast_ack;
    int barrier_start;
    int done;
} h;

options opts;

// PE 0's state of the running test, reset by each test's driver.
struct run_state {
    std::size_t msg_bytes = 0;  // header + payload
    long warmup = 0;
    long total = 0;  // warmup + measured iterations
    long done = 0;   // iterations finished
    double sent_at = 0;
    double start = 0;
    double end = 0;
    std::vector<double> rtt_us;          // pingpong: one round trip per measured iteration
    int acks = 0;                        // bcast: acks of the current broadcast
    void* window_buf = nullptr;          // bw, rate: the one buffer every message of a window sends
    std::vector<CmiCommHandle> handles;  // bw, rate: the window's handles still held
} run;

// PE 1's count of window messages; it acks the W-th and starts over.
int window_received = 0;

void* new_message(std::size_t msg_bytes, int handler) {
    void* m = CmiAlloc(static_cast<int>(msg_bytes));
    CmiInitMsgHeader(m, static_cast<int>(msg_bytes));
    CmiSetHandler(m, handler);
    return m;
}

// Counts one finished iteration on PE 0; true when the test is over. The clock starts when
// the warm-up is done (at once without warm-up: the driver calls this with done == 0).
bool iteration_done() {
    const double now = CmiWallTimer();
    if (run.done == run.warmup) run.start = now;
    if (run.done == run.total) {
        run.end = now;
        return true;
    }
    return false;
}

// ---- pingpong ----------------------------------------------------------------------------

void ping_handler(void* msg) {  // PE 1: the same message goes back
    CmiSetHandler(msg, h.pong);
    CmiSyncSendAndFree(0, CmiSize(msg), msg);
}

void pong_handler(void* msg) {  // PE 0
    const double now = CmiWallTimer();
    if (run.done >= run.warmup) run.rtt_us.push_back((now - run.sent_at) * 1e6);
    if (++run.done == run.total) {
        CmiFree(msg);
        CsdExitScheduler();
        return;
    }
    CmiSetHandler(msg, h.ping);
    run.sent_at = CmiWallTimer();
    CmiSyncSendAndFree(1, static_cast<int>(run.msg_bytes), msg);
}

result run_pingpong(std::size_t bytes) {
    const run_plan plan = plan_for(test_kind::pingpong, bytes, opts);
    run = run_state{};
    run.msg_bytes = header_bytes + bytes;
    run.warmup = plan.warmup;
    run.total = plan.warmup + plan.iters;
    run.rtt_us.reserve(static_cast<std::size_t>(plan.iters));
    void* m = new_message(run.msg_bytes, h.ping);
    std::memset(static_cast<char*>(m) + header_bytes, 0x5a, bytes);
    run.sent_at = CmiWallTimer();
    CmiSyncSendAndFree(1, static_cast<int>(run.msg_bytes), m);
    CsdScheduler(-1);

    latency_stats s = stats_of(run.rtt_us);
    result r;
    r.test = test_kind::pingpong;
    r.bytes = bytes;
    r.iters = plan.iters;
    r.lat_us = s.mean / 2;
    r.p50_us = s.p50 / 2;
    return r;
}

// ---- bw and rate: windows of messages, one ack per window --------------------------------

// W async sends of one buffer (the receiver still gets W messages of its own): large ones
// go by rendezvous straight from it. The ack of a window means every message was fetched,
// so its handles are done and released before the next window.
void send_window() {
    for (CmiCommHandle c : run.handles) {
        while (!CmiAsyncMsgSent(c)) {
        }
        CmiReleaseCommHandle(c);
    }
    run.handles.clear();
    for (int i = 0; i < opts.window; ++i)
        if (CmiCommHandle c = CmiAsyncSend(1, static_cast<int>(run.msg_bytes), run.window_buf))
            run.handles.push_back(c);
}

void window_data_handler(void* msg) {  // PE 1
    CmiFree(msg);
    if (++window_received < opts.window) return;
    window_received = 0;
    CmiSyncSendAndFree(0, header_bytes, new_message(header_bytes, h.window_ack));
}

void window_ack_handler(void* msg) {  // PE 0
    CmiFree(msg);
    ++run.done;
    if (iteration_done())
        CsdExitScheduler();
    else
        send_window();
}

// Returns the measured seconds of plan.iters windows.
double run_windows(std::size_t bytes, const run_plan& plan) {
    run = run_state{};
    run.msg_bytes = header_bytes + bytes;
    run.warmup = plan.warmup;
    run.total = plan.warmup + plan.iters;
    run.window_buf = new_message(run.msg_bytes, h.window_data);
    std::memset(static_cast<char*>(run.window_buf) + header_bytes, 0x5a, bytes);
    iteration_done();
    send_window();
    CsdScheduler(-1);
    for (CmiCommHandle c : run.handles) {
        while (!CmiAsyncMsgSent(c)) {
        }
        CmiReleaseCommHandle(c);
    }
    run.handles.clear();
    CmiFree(run.window_buf);
    return run.end - run.start;
}

result run_bw(std::size_t bytes) {
    const run_plan plan = plan_for(test_kind::bw, bytes, opts);
    const double secs = run_windows(bytes, plan);
    result r;
    r.test = test_kind::bw;
    r.bytes = bytes;
    r.iters = plan.iters;
    r.window = opts.window;
    r.mbps = static_cast<double>(bytes) * opts.window * plan.iters / secs / 1e6;
    return r;
}

result run_rate(std::size_t bytes) {
    const run_plan plan = plan_for(test_kind::rate, bytes, opts);
    const double secs = run_windows(bytes, plan);
    result r;
    r.test = test_kind::rate;
    r.bytes = bytes;
    r.iters = plan.iters;
    r.window = opts.window;
    r.msgs_per_s = static_cast<double>(opts.window) * plan.iters / secs;
    return r;
}

// ---- bcast -------------------------------------------------------------------------------

void bcast_handler(void* msg) {  // every PE, PE 0 included
    CmiFree(msg);
    CmiSyncSendAndFree(0, header_bytes, new_message(header_bytes, h.bcast_ack));
}

void broadcast_one() {
    CmiSyncBroadcastAllAndFree(static_cast<int>(run.msg_bytes),
                               new_message(run.msg_bytes, h.bcast));
}

void bcast_ack_handler(void* msg) {  // PE 0
    CmiFree(msg);
    if (++run.acks < CmiNumPes()) return;
    run.acks = 0;
    ++run.done;
    if (iteration_done())
        CsdExitScheduler();
    else
        broadcast_one();
}

result run_bcast(std::size_t bytes) {
    const run_plan plan = plan_for(test_kind::bcast, bytes, opts);
    run = run_state{};
    run.msg_bytes = header_bytes + bytes;
    run.warmup = plan.warmup;
    run.total = plan.warmup + plan.iters;
    iteration_done();
    broadcast_one();
    CsdScheduler(-1);
    result r;
    r.test = test_kind::bcast;
    r.bytes = bytes;
    r.iters = plan.iters;
    r.lat_us = (run.end - run.start) / static_cast<double>(plan.iters) * 1e6;
    return r;
}

// ---- barrier -----------------------------------------------------------------------------

struct barrier_request {
    std::int64_t count;  // warm-up + measured barriers
};

void barrier_start_handler(void* msg) {  // PEs 1..N-1: barriers from inside the handler
    barrier_request req;
    std::memcpy(&req, static_cast<char*>(msg) + header_bytes, sizeof req);
    CmiFree(msg);
    for (std::int64_t i = 0; i < req.count; ++i)
        CmiBarrier();
}

result run_barrier() {
    const run_plan plan = plan_for(test_kind::barrier, 0, opts);
    const barrier_request req{plan.warmup + plan.iters};
    void* m = new_message(header_bytes + sizeof req, h.barrier_start);
    std::memcpy(static_cast<char*>(m) + header_bytes, &req, sizeof req);
    CmiSyncBroadcastAndFree(header_bytes + static_cast<int>(sizeof req), m);
    for (long i = 0; i < plan.warmup; ++i)
        CmiBarrier();
    const double start = CmiWallTimer();
    for (long i = 0; i < plan.iters; ++i)
        CmiBarrier();
    const double secs = CmiWallTimer() - start;
    result r;
    r.test = test_kind::barrier;
    r.iters = plan.iters;
    r.lat_us = secs / static_cast<double>(plan.iters) * 1e6;
    return r;
}

// ---- the driver --------------------------------------------------------------------------

void done_handler(void* msg) {
    CmiFree(msg);
    CsdExitScheduler();
}

void report(result r) {
    r.pes = CmiNumPes();
    const std::string line = opts.json ? json_line(r) : table_row(r);
    CmiPrintf("%s", line.c_str());
}

// A test that needs more PEs is skipped with a note, which keeps --json's stdout pure JSON.
void note(const std::string& text) {
    if (opts.json)
        CmiError("coverse-perf: %s\n", text.c_str());
    else
        CmiPrintf("%s\n", text.c_str());
}

result run_coroutine(test_kind t, std::size_t bytes) {
    return coroutine_run(t, bytes, opts);
}

result run_one(test_kind t, std::size_t bytes) {
    switch (t) {
        case test_kind::pingpong:
            return run_pingpong(bytes);
        case test_kind::bw:
            return run_bw(bytes);
        case test_kind::rate:
            return run_rate(bytes);
        case test_kind::bcast:
            return run_bcast(bytes);
        case test_kind::barrier:
            return run_barrier();
    }
    CmiAbort("coverse-perf: unknown test %d", static_cast<int>(t));
}

double median_of(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    return n == 0 ? 0 : n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// A test's figure of merit: one-way p50 for pingpong (lower is better), MB/s or msg/s.
double merit(const result& r) {
    return r.test == test_kind::pingpong ? r.p50_us
           : r.test == test_kind::bw     ? r.mbps
                                         : r.msgs_per_s;
}

// Rounds' results of one API as one row: medians over the rounds, the iterations summed.
result merged(const std::vector<result>& rounds) {
    result m = rounds.front();
    const auto med = [&](double result::*field) {
        std::vector<double> v;
        for (const result& r : rounds)
            v.push_back(r.*field);
        return median_of(std::move(v));
    };
    m.lat_us = med(&result::lat_us);
    m.p50_us = med(&result::p50_us);
    m.mbps = med(&result::mbps);
    m.msgs_per_s = med(&result::msgs_per_s);
    m.iters = 0;
    for (const result& r : rounds)
        m.iters += r.iters;
    return m;
}

// --api coroutine: the facade and the coroutine API take turns, side_rounds rounds of a
// side_rounds-th of the iterations each, the order flipping every round. The PEs' placement
// on the cores can move during a run and changes an 8 B figure by up to 3x, so running one
// API whole and then the other compared two machines; taking turns puts both on the same
// one. Each API's row holds its medians over the rounds; the ratio is the median of the
// rounds' own ratios, with their range.
constexpr int side_rounds = 6;

void side_by_side(test_kind t, std::size_t bytes) {
    const run_plan full = plan_for(t, bytes, opts);
    const options whole = opts;
    std::vector<result> facade, coro;
    std::vector<double> ratios, lat_ratios;
    for (int round = 0; round < side_rounds; ++round) {
        // The iterations shared out (the first rounds take the remainder), one at least.
        opts.iters = std::max(1L, full.iters / side_rounds + (round < full.iters % side_rounds));
        if (round % 2 == 0) {
            facade.push_back(run_one(t, bytes));
            coro.push_back(run_coroutine(t, bytes));
        } else {
            coro.push_back(run_coroutine(t, bytes));
            facade.push_back(run_one(t, bytes));
        }
        ratios.push_back(merit(coro.back()) / merit(facade.back()));
        if (t == test_kind::pingpong)
            lat_ratios.push_back(coro.back().lat_us / facade.back().lat_us);
    }
    opts = whole;
    report(merged(facade));
    const result c = merged(coro);
    report(c);
    const auto [lo, hi] = std::minmax_element(ratios.begin(), ratios.end());
    char range[64];
    std::snprintf(range, sizeof range, "%d rounds in turn: %.3f-%.3f", side_rounds, *lo, *hi);
    char text[200];
    if (t == test_kind::pingpong)
        std::snprintf(text, sizeof text,
                      "  coroutine/converse pingpong %zu B: p50 %.3fx (mean %.3fx; %s)", c.bytes,
                      median_of(ratios), median_of(lat_ratios), range);
    else if (t == test_kind::bw)
        std::snprintf(text, sizeof text, "  coroutine/converse bw %zu B: bandwidth %.3fx (%s)%s",
                      c.bytes, median_of(ratios), range,
                      c.bytes <= 16384    ? ""
                      : opts.onesided_get ? " (expose/get vs rendezvous)"
                                          : " (expose/put vs rendezvous)");
    else
        std::snprintf(text, sizeof text, "  coroutine/converse rate 8 B: rate %.3fx (%s)",
                      median_of(ratios), range);
    note(text);
}

void run_tests() {
    const int pes = CmiNumPes();
    std::vector<test_kind> runnable;
    for (test_kind t : opts.tests.empty() ? all_tests() : opts.tests) {
        if (pes >= min_pes(t))
            runnable.push_back(t);
        else
            note(std::string(test_name(t)) + ": skipped, needs " + std::to_string(min_pes(t)) +
                 " PEs (this job has " + std::to_string(pes) + "); run it with coverse-run -n 2");
    }
    if (!opts.json) {
        CmiPrintf(
            "coverse-perf: %d PE%s, window %d%s; latencies one-way, sizes are payload "
            "bytes\n",
            pes, pes == 1 ? "" : "s", opts.window, opts.quick ? ", --quick (rough numbers)" : "");
        CmiPrintf("%s", table_header().c_str());
    }
    for (test_kind t : runnable)
        for (std::size_t bytes : sizes_for(t, opts)) {
            if (opts.api == api_kind::coroutine && t != test_kind::bcast && t != test_kind::barrier)
                side_by_side(t, bytes);
            else
                report(run_one(t, bytes));
        }
}

void start(int argc, char** argv) {
    // Every PE registers the same handlers in the same order before any message arrives.
    h.ping = CmiRegisterHandler(ping_handler);
    h.pong = CmiRegisterHandler(pong_handler);
    h.window_data = CmiRegisterHandler(window_data_handler);
    h.window_ack = CmiRegisterHandler(window_ack_handler);
    h.bcast = CmiRegisterHandler(bcast_handler);
    h.bcast_ack = CmiRegisterHandler(bcast_ack_handler);
    h.barrier_start = CmiRegisterHandler(barrier_start_handler);
    h.done = CmiRegisterHandler(done_handler);

    std::string error;
    auto parsed = parse_options(argc > 0 ? argc - 1 : 0, argv + (argc > 0), error);
    if (!parsed || parsed->help) {
        // Every PE parsed the same argv, so every PE leaves here, with the same status.
        if (CmiMyPe() == 0) {
            const std::string usage = usage_text();
            if (parsed)
                CmiPrintf("%s", usage.c_str());
            else
                CmiError("coverse-perf: %s\n%s", error.c_str(), usage.c_str());
        }
        ConverseExit(parsed ? 0 : 2);
    }
    opts = *parsed;
    coverse::perf::coroutine_register(opts);  // every PE, same order (all parsed the same argv)

    if (CmiMyPe() != 0) return;  // to the scheduler (ConverseInit), until "done"
    run_tests();
    CmiSyncBroadcastAllAndFree(header_bytes, new_message(header_bytes, h.done));
}

}  // namespace

int main(int argc, char** argv) {
    ConverseInit(argc, argv, start, 0, 0);
    return 0;  // not reached: ConverseInit exits through ConverseExit
}
