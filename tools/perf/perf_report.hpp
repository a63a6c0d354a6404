// coverse-perf's results and how they are printed: one JSON object per line (the format
// scripts/bench-perf.sh and tools/perf/mpi_perf.c share) or a row of an aligned table.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "perf_options.hpp"

namespace coverse::perf {

/// One test at one size. Fields that a test does not measure stay negative and are left out.
struct result {
    test_kind test = test_kind::pingpong;
    std::size_t bytes = 0;  // payload bytes, behind the 16-byte Converse header
    int pes = 1;
    long iters = 0;
    int window = 0;          // bw and rate
    double lat_us = -1;      // pingpong: mean one-way; bcast, barrier: mean per operation
    double p50_us = -1;      // pingpong: median one-way
    double mbps = -1;        // bw: 10^6 B/s of payload
    double msgs_per_s = -1;  // rate
    bool coroutine = false;  // through the coroutine API (--api coroutine): impl "coverse-coro"
};

struct latency_stats {
    double mean = 0;
    double p50 = 0;
};
/// Mean and median of the samples (reorders them).
latency_stats stats_of(std::vector<double>& samples);

/// {"test":"pingpong","impl":"coverse","bytes":8,"lat_us":6.1,"p50_us":6.0,"iters":10000,"pes":2}
std::string json_line(const result& r);
std::string table_header();
std::string table_row(const result& r);

}  // namespace coverse::perf
