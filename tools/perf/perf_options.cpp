// coverse-perf's command line and run plan (see perf_options.hpp).
#include "perf_options.hpp"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>

#include <converse.h>

namespace coverse::perf {

namespace {

struct test_info {
    test_kind kind;
    std::string_view name;
    int min_pes;
};

// In the order coverse-perf runs them: point to point first, then the collectives.
constexpr test_info tests_table[] = {
    {test_kind::pingpong, "pingpong", 2},  // PE 0 <-> PE 1
    {test_kind::bw, "bw", 2},              // PE 0 -> PE 1
    {test_kind::rate, "rate", 2},          // PE 0 -> PE 1
    {test_kind::bcast, "bcast", 1},        // every PE
    {test_kind::barrier, "barrier", 1},    // every PE
};

constexpr std::size_t KiB = 1024, MiB = 1024 * KiB;
// The largest payload CmiAlloc (an int size) can carry behind the Converse header.
constexpr std::size_t max_payload = static_cast<std::size_t>(INT_MAX) - CmiMsgHeaderSizeBytes;

std::optional<long> parse_count(std::string_view text, long min) {
    const std::string s(text);
    char* end = nullptr;
    errno = 0;
    const long v = std::strtol(s.c_str(), &end, 10);
    if (s.empty() || errno || *end || v < min) return std::nullopt;
    return v;
}

// "8", "64K", "4M", "1G" (binary multiples; k/m/g also accepted).
std::optional<std::size_t> parse_size(std::string_view text) {
    std::size_t unit = 1;
    if (!text.empty()) {
        switch (text.back()) {
            case 'k':
            case 'K':
                unit = KiB;
                break;
            case 'm':
            case 'M':
                unit = MiB;
                break;
            case 'g':
            case 'G':
                unit = 1024 * MiB;
                break;
            default:
                break;
        }
        if (unit != 1) text.remove_suffix(1);
    }
    const auto n = parse_count(text, 1);
    if (!n || static_cast<std::size_t>(*n) > max_payload / unit) return std::nullopt;
    return static_cast<std::size_t>(*n) * unit;
}

std::vector<std::string_view> split_commas(std::string_view list) {
    std::vector<std::string_view> out;
    for (;;) {
        const auto comma = list.find(',');
        out.push_back(list.substr(0, comma));
        if (comma == std::string_view::npos) return out;
        list.remove_prefix(comma + 1);
    }
}

}  // namespace

std::string_view test_name(test_kind t) noexcept {
    for (const auto& i : tests_table)
        if (i.kind == t) return i.name;
    return "?";
}

std::optional<test_kind> test_from_name(std::string_view name) noexcept {
    for (const auto& i : tests_table)
        if (i.name == name) return i.kind;
    return std::nullopt;
}

int min_pes(test_kind t) noexcept {
    for (const auto& i : tests_table)
        if (i.kind == t) return i.min_pes;
    return 1;
}

const std::vector<test_kind>& all_tests() {
    static const std::vector<test_kind> all = [] {
        std::vector<test_kind> v;
        for (const auto& i : tests_table)
            v.push_back(i.kind);
        return v;
    }();
    return all;
}

std::optional<options> parse_options(int argc, char** argv, std::string& error) {
    options o;
    for (int i = 0; i < argc; ++i) {
        std::string_view arg = argv[i];
        std::string_view value;
        bool has_value = false;
        if (arg.starts_with("--")) {
            if (const auto eq = arg.find('='); eq != std::string_view::npos) {
                value = arg.substr(eq + 1);
                arg = arg.substr(0, eq);
                has_value = true;
            }
        }
        auto take_value = [&]() -> bool {
            if (has_value) return true;
            if (i + 1 >= argc) {
                error = std::string(arg) + " needs a value";
                return false;
            }
            value = argv[++i];
            return true;
        };
        auto no_value = [&]() -> bool {
            if (has_value) error = std::string(arg) + " takes no value";
            return !has_value;
        };

        if (arg == "--help" || arg == "-h") {
            o.help = true;
        } else if (arg == "--json") {
            if (!no_value()) return std::nullopt;
            o.json = true;
        } else if (arg == "--quick") {
            if (!no_value()) return std::nullopt;
            o.quick = true;
        } else if (arg == "--tests") {
            if (!take_value()) return std::nullopt;
            o.tests.clear();
            for (auto name : split_commas(value)) {
                const auto t = test_from_name(name);
                if (!t) {
                    error = "--tests: unknown test \"" + std::string(name) +
                            "\" (the tests: pingpong, bw, rate, bcast, barrier)";
                    return std::nullopt;
                }
                if (std::find(o.tests.begin(), o.tests.end(), *t) == o.tests.end())
                    o.tests.push_back(*t);
            }
        } else if (arg == "--api") {
            if (!take_value()) return std::nullopt;
            if (value == "converse") {
                o.api = api_kind::converse;
            } else if (value == "coroutine") {
                o.api = api_kind::coroutine;
            } else {
                error = "--api: \"" + std::string(value) + "\" is not converse or coroutine";
                return std::nullopt;
            }
        } else if (arg == "--onesided") {
            if (!take_value()) return std::nullopt;
            if (value == "put" || value == "get") {
                o.onesided_get = value == "get";
            } else {
                error = "--onesided: \"" + std::string(value) + "\" is not put or get";
                return std::nullopt;
            }
        } else if (arg == "--sizes") {
            if (!take_value()) return std::nullopt;
            o.sizes.clear();
            for (auto text : split_commas(value)) {
                const auto s = parse_size(text);
                if (!s) {
                    error = "--sizes: \"" + std::string(text) +
                            "\" is not a size in bytes from 1 to 2 GiB (8, 4096, 64K, 4M)";
                    return std::nullopt;
                }
                o.sizes.push_back(*s);
            }
        } else if (arg == "--iters" || arg == "--warmup" || arg == "--window") {
            if (!take_value()) return std::nullopt;
            // Bounded so that the per-iteration samples and a window's messages fit in memory.
            const long min = arg == "--warmup" ? 0 : 1;
            const long max = arg == "--window" ? 100'000 : 100'000'000;
            const auto n = parse_count(value, min);
            if (!n || *n > max) {
                error = std::string(arg) + ": \"" + std::string(value) + "\" is not a count from " +
                        std::to_string(min) + " to " + std::to_string(max);
                return std::nullopt;
            }
            if (arg == "--iters")
                o.iters = *n;
            else if (arg == "--warmup")
                o.warmup = *n;
            else
                o.window = static_cast<int>(*n);
        } else {
            error = "unknown argument \"" + std::string(argv[i]) + "\"";
            return std::nullopt;
        }
    }
    return o;
}

std::string usage_text() {
    return "Usage: coverse-run -n N coverse-perf [options]   (or: coverse-perf +pN [options])\n"
           "Measures coverse's Converse layer between PEs. Only PE 0 prints.\n"
           "\n"
           "Tests (default: every test the PE count allows):\n"
           "  pingpong  one-way latency (round trip / 2) PE 0 <-> PE 1, p50 and mean (2 PEs)\n"
           "  bw        bandwidth, PE 0 sends windows of W messages to PE 1, which acks each\n"
           "            window; MB/s = 10^6 B/s (2 PEs)\n"
           "  rate      8 B message rate (msgs/s), same window scheme as bw (2 PEs)\n"
           "  bcast     CmiSyncBroadcastAllAndFree until every PE has acked to PE 0 (any N)\n"
           "  barrier   CmiBarrier on every PE (any N)\n"
           "\n"
           "Options:\n"
           "  --tests LIST   comma-separated tests, e.g. pingpong,bw\n"
           "  --sizes LIST   payload bytes for pingpong, bw and bcast, e.g. 8,1K,64K,4M\n"
           "                 (default: pingpong 8..4M, bw 4K..4M, bcast 8; rate is 8 B)\n"
           "  --iters N      measured iterations for every test and size (default: scaled\n"
           "                 by size, see docs/perf.md)\n"
           "  --warmup N     unmeasured iterations first (default: a tenth of --iters)\n"
           "  --window W     messages per acknowledgement in bw and rate (default 64)\n"
           "  --api A        converse (default), or coroutine: pingpong, bw and rate also\n"
           "                 through the coroutine API (coverse.hpp), in 6 rounds taking\n"
           "                 turns with the facade, with the ratio; bw above 16K goes by\n"
           "                 expose/put there\n"
           "  --onesided O   put (default) or get: how --api coroutine's bw above 16K\n"
           "                 moves its data (PE 0 puts into PE 1, or gets from it)\n"
           "  --quick        few iterations (for tests and CI; numbers are rough)\n"
           "  --json         one JSON object per line instead of a table\n"
           "  -h, --help     this text\n";
}

std::vector<std::size_t> sizes_for(test_kind t, const options& o) {
    switch (t) {
        case test_kind::rate:
            return {8};
        case test_kind::barrier:
            return {0};
        default:
            break;
    }
    if (!o.sizes.empty()) return o.sizes;
    if (t == test_kind::pingpong)
        return {8, 64, 512, KiB, 4 * KiB, 16 * KiB, 64 * KiB, 256 * KiB, MiB, 4 * MiB};
    if (t == test_kind::bw) return {4 * KiB, 16 * KiB, 64 * KiB, 256 * KiB, MiB, 4 * MiB};
    return {8};  // bcast
}

run_plan plan_for(test_kind t, std::size_t bytes, const options& o) {
    long iters = 0;
    switch (t) {
        case test_kind::pingpong: {
            // Full count up to 4 KiB, then inversely to the size (same bytes per size).
            const long base = o.quick ? 50 : 10000;
            const long floor = o.quick ? 5 : 100;
            iters = bytes <= 4 * KiB
                        ? base
                        : std::clamp(static_cast<long>(base * (4 * KiB) / bytes), floor, base);
            break;
        }
        case test_kind::bw: {
            // About 512 MiB per size (16 MiB with --quick), 4..1000 windows (2..20).
            const std::size_t target = o.quick ? 16 * MiB : 512 * MiB;
            const std::size_t per_window = std::max<std::size_t>(1, bytes) * o.window;
            iters = std::clamp(static_cast<long>(target / per_window), o.quick ? 2L : 4L,
                               o.quick ? 20L : 1000L);
            break;
        }
        case test_kind::rate:
        case test_kind::bcast:
        case test_kind::barrier:
            iters = o.quick ? 20 : 1000;
            break;
    }
    if (o.iters > 0) iters = o.iters;
    const long warmup = o.warmup >= 0 ? o.warmup : std::max(1L, iters / 10);
    return run_plan{warmup, iters};
}

}  // namespace coverse::perf
