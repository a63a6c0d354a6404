// coverse-perf --api coroutine: pingpong, bw and rate through the coroutine API
// (coverse.hpp), run beside the facade's in the same job. PE 0 drives each test from a
// task while CsdScheduler runs; PE 1 serves it from a task its start message spawns.
#pragma once

#include <cstddef>

#include "perf_options.hpp"
#include "perf_report.hpp"

namespace coverse::perf {

/// Every PE, in start(), after the facade's handlers: the mode's streams and handler.
void coroutine_register(const options& o);
/// PE 0: test `t` (pingpong, bw or rate) at `bytes` through the coroutine API.
result coroutine_run(test_kind t, std::size_t bytes, const options& o);

}  // namespace coverse::perf
