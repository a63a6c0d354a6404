// coverse-perf's output formats (see perf_report.hpp).
#include "perf_report.hpp"

#include <algorithm>
#include <cstdio>
#include <numeric>

namespace coverse::perf {

namespace {

std::string printf_string(const char* fmt, auto... args) {
    char buf[256];
    const int n = std::snprintf(buf, sizeof buf, fmt, args...);
    return std::string(buf, static_cast<std::size_t>(std::clamp(n, 0, int(sizeof buf) - 1)));
}

std::string size_text(std::size_t bytes) {
    constexpr std::size_t KiB = 1024, MiB = 1024 * KiB;
    if (bytes >= MiB && bytes % MiB == 0) return std::to_string(bytes / MiB) + "M";
    if (bytes >= KiB && bytes % KiB == 0) return std::to_string(bytes / KiB) + "K";
    return std::to_string(bytes);
}

}  // namespace

latency_stats stats_of(std::vector<double>& samples) {
    latency_stats s;
    if (samples.empty()) return s;
    s.mean =
        std::accumulate(samples.begin(), samples.end(), 0.0) / static_cast<double>(samples.size());
    const auto mid = samples.begin() + static_cast<std::ptrdiff_t>(samples.size() / 2);
    std::nth_element(samples.begin(), mid, samples.end());
    s.p50 = *mid;
    if (samples.size() % 2 == 0)  // the mean of the two middle samples
        s.p50 = (s.p50 + *std::max_element(samples.begin(), mid)) / 2;
    return s;
}

std::string json_line(const result& r) {
    std::string out = "{\"test\":\"" + std::string(test_name(r.test)) + "\",\"impl\":\"" +
                      (r.coroutine ? "coverse-coro" : "coverse") + "\"";
    if (r.test != test_kind::barrier) out += ",\"bytes\":" + std::to_string(r.bytes);
    if (r.lat_us >= 0) out += printf_string(",\"lat_us\":%.3f", r.lat_us);
    if (r.p50_us >= 0) out += printf_string(",\"p50_us\":%.3f", r.p50_us);
    if (r.mbps >= 0) out += printf_string(",\"mbps\":%.3f", r.mbps);
    if (r.msgs_per_s >= 0) out += printf_string(",\"msgs_per_s\":%.0f", r.msgs_per_s);
    if (r.window > 0) out += ",\"window\":" + std::to_string(r.window);
    out += ",\"iters\":" + std::to_string(r.iters) + ",\"pes\":" + std::to_string(r.pes) + "}\n";
    return out;
}

std::string table_header() {
    // Written out by hand: "µs" is two bytes, which printf's widths would miscount.
    return "test          bytes  PEs    iters     p50 µs    mean µs        MB/s      msgs/s\n";
}

std::string table_row(const result& r) {
    auto num = [](double v, const char* fmt) { return v >= 0 ? printf_string(fmt, v) : "-"; };
    const std::string name = std::string(test_name(r.test)) + (r.coroutine ? "/co" : "");
    return printf_string("%-11s %7s %4d %8ld %10s %10s %11s %11s\n", name.c_str(),
                         r.test == test_kind::barrier ? "-" : size_text(r.bytes).c_str(), r.pes,
                         r.iters, num(r.p50_us, "%.2f").c_str(), num(r.lat_us, "%.2f").c_str(),
                         num(r.mbps, "%.1f").c_str(), num(r.msgs_per_s, "%.0f").c_str());
}

}  // namespace coverse::perf
