// coverse-perf's command line and its run plan: which tests, which sizes, how many
// iterations. Every PE parses the same argv, so all PEs agree on the plan without sending it.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace coverse::perf {

enum class test_kind { pingpong, bw, rate, bcast, barrier };
/// --api: the Converse facade alone, or also the coroutine API (coverse.hpp) beside it.
enum class api_kind { converse, coroutine };

/// What the command line asked for; empty lists and zero counts mean "the defaults".
struct options {
    std::vector<test_kind> tests;       // --tests (empty: every test that fits the PE count)
    std::vector<std::size_t> sizes;     // --sizes in payload bytes (empty: each test's list)
    long iters = 0;                     // --iters (0: the size-scaled defaults)
    long warmup = -1;                   // --warmup (-1: a tenth of the iterations)
    int window = 64;                    // --window: messages per acknowledgement in bw and rate
    bool quick = false;                 // --quick: few iterations, for tests and CI
    bool json = false;                  // --json: one JSON object per line
    bool help = false;                  // --help
    api_kind api = api_kind::converse;  // --api coroutine: pingpong, bw, rate through both
    bool onesided_get = false;          // --onesided get: coroutine bw by get, not put
};

/// How many iterations (round trips, windows, broadcasts or barriers) a run takes.
struct run_plan {
    long warmup;
    long iters;
};

std::string_view test_name(test_kind t) noexcept;
std::optional<test_kind> test_from_name(std::string_view name) noexcept;
/// PEs a test needs: 2 for pingpong, bw and rate (PE 0 and PE 1), 1 for bcast and barrier.
int min_pes(test_kind t) noexcept;
/// The tests in the order coverse-perf runs them.
const std::vector<test_kind>& all_tests();

/// Parses the arguments after the program name (the runtime's +flags are already gone).
/// nullopt on a bad argument, with `error` saying which and why.
std::optional<options> parse_options(int argc, char** argv, std::string& error);
std::string usage_text();

/// Payload sizes a test runs at. pingpong, bw and bcast: --sizes when given, else their
/// default lists (pingpong 8, 64, 512, 1K, 4K, 16K, 64K, 256K, 1M, 4M; bw 4K..4M by powers
/// of 4; bcast 8). rate is always 8 B; barrier carries no payload (one entry, 0).
std::vector<std::size_t> sizes_for(test_kind t, const options& o);
/// The iteration schedule, the same one tools/perf/mpi_perf.c uses (docs/perf.md).
run_plan plan_for(test_kind t, std::size_t bytes, const options& o);

}  // namespace coverse::perf
