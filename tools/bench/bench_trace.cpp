// bench_trace: what one trace point costs. Off (no recorder on this thread) beside the same
// loop without the trace point; on (recording to a file in a temporary directory, the
// writer thread running) beside off; the steady-clock read an event starts with; and an
// event dropped at the stop limit. docs/trace.md has the numbers.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

#include <coverse/runtime/trace.hpp>

namespace {

namespace trace = coverse::trace;

std::string make_bench_dir() {
    std::string tmpl =
        (std::filesystem::temp_directory_path() / "coverse-bench-trace-XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) std::abort();
    return tmpl;
}

// One temporary directory for the whole run, removed at exit. The exit hook is registered
// after the string is made, so it runs before the string is destroyed.
const std::string& bench_dir() {
    static const std::string dir = make_bench_dir();
    static const bool cleanup = std::atexit([] {
                                    std::error_code ec;
                                    std::filesystem::remove_all(bench_dir(), ec);
                                }) == 0;
    (void)cleanup;
    return dir;
}

// The same loop body around the trace point in every benchmark: the argument escapes and
// memory is clobbered, as in real code where the emit sits between other work.
inline void body(std::uint64_t i) {
    benchmark::DoNotOptimize(i);
    trace::emit(trace::kind::handle_completed, i, 0, 0);
    benchmark::ClobberMemory();
}

void emit_loop_only(benchmark::State& state) {
    std::uint64_t i = 0;
    for (auto _ : state) {
        benchmark::DoNotOptimize(++i);
        benchmark::ClobberMemory();
    }
    state.SetItemsProcessed(state.iterations());
}

void emit_off(benchmark::State& state) {
    if (trace::enabled()) state.SkipWithError("a recorder is installed");
    std::uint64_t i = 0;
    for (auto _ : state)
        body(++i);
    state.SetItemsProcessed(state.iterations());
}

// Ring mode keeps the file at 64 MiB however long Google Benchmark runs the loop, so every
// iteration is a real recorded event (stop mode would be dropping after 6.7 M of them).
void emit_on(benchmark::State& state) {
    trace::record_options o;
    o.dir = bench_dir();
    o.limit_bytes = 64ull << 20;
    o.mode = trace::limit_mode::ring;
    std::uint64_t recorded = 0, dropped = 0;
    {
        trace::session s({0, 1, "bench", "none", ""}, o);
        std::uint64_t i = 0;
        for (auto _ : state)
            body(++i);
        recorded = s.recorded();
        dropped = s.dropped();
    }
    state.SetItemsProcessed(state.iterations());
    // Events the writer could not take (beyond the ring's own overwriting) would make the
    // on figure look cheaper than it is: report them.
    const std::uint64_t capacity = o.limit_bytes / sizeof(trace::event);
    const std::uint64_t overwritten = recorded > capacity ? recorded - capacity : 0;
    state.counters["dropped_behind"] = static_cast<double>(dropped - overwritten);
}

void emit_dropped_at_limit(benchmark::State& state) {
    trace::record_options o;
    o.dir = bench_dir();
    o.limit_bytes = 40;  // one event, then every emit is dropped and counted
    o.mode = trace::limit_mode::stop;
    trace::session s({1, 1, "bench", "none", ""}, o);
    std::uint64_t i = 0;
    for (auto _ : state)
        body(++i);
    state.SetItemsProcessed(state.iterations());
}

void clock_steady_now(benchmark::State& state) {
    for (auto _ : state)
        benchmark::DoNotOptimize(trace::sink::now_ns());
    state.SetItemsProcessed(state.iterations());
}

}  // namespace

BENCHMARK(emit_loop_only)->Name("trace_emit/loop_only");
BENCHMARK(emit_off)->Name("trace_emit/off");
BENCHMARK(emit_on)->Name("trace_emit/on");
BENCHMARK(emit_dropped_at_limit)->Name("trace_emit/dropped_at_limit");
BENCHMARK(clock_steady_now)->Name("trace_clock/steady_now");

BENCHMARK_MAIN();
