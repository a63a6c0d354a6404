// bench_alloc: message allocation (coverse's pool, system beyond 16 KiB) beside malloc/free,
// same sizes and the same writes on both sides, and the registration cache's hit and miss
// cost. Names carry `coverse` or `malloc` as one `/` part so scripts/bench-pairs.py pairs them;
// docs/alloc.md has the numbers.
#include <benchmark/benchmark.h>

#include <coverse/alloc/bucket_pool.hpp>
#include <coverse/alloc/config.hpp>
#include <coverse/alloc/message.hpp>
#include <coverse/alloc/registration_cache.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <system_error>

namespace {

namespace ca = coverse::alloc;

constexpr std::size_t sizes[] = {64, 1024, 8192, 16384, 65536};
constexpr std::size_t burst = 64;

// Both sides write the first and the last byte, so neither skips touching its memory, and
// DoNotOptimize makes the pointer escape, so the compiler cannot pair malloc with free away.
inline void touch(void* p, std::size_t size) {
    auto* bytes = static_cast<unsigned char*>(p);
    bytes[0] = 1;
    bytes[size - 1] = 2;
    benchmark::DoNotOptimize(p);
    benchmark::ClobberMemory();
}

void label_pool(benchmark::State& state) {
    if (!ca::current_config().pool_enabled) state.SetLabel("MEMORY_POOL=0");
}

void alloc_free_coverse(benchmark::State& state, std::size_t size) {
    label_pool(state);
    ca::msg_free(ca::msg_alloc(size));  // the thread's pool is created outside the timing
    for (auto _ : state) {
        void* p = ca::msg_alloc(size);
        touch(p, size);
        ca::msg_free(p);
    }
}

void alloc_free_malloc(benchmark::State& state, std::size_t size) {
    for (auto _ : state) {
        void* p = std::malloc(size);
        touch(p, size);
        std::free(p);
    }
}

// Many messages live at once, freed in allocation order: free lists and bins get exercised,
// not just the one block a single alloc/free pair recycles.
void alloc_free_burst_coverse(benchmark::State& state, std::size_t size) {
    label_pool(state);
    ca::msg_free(ca::msg_alloc(size));
    std::array<void*, burst> held{};
    for (auto _ : state) {
        for (void*& p : held) {
            p = ca::msg_alloc(size);
            touch(p, size);
        }
        for (void* p : held)
            ca::msg_free(p);
    }
    state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * burst));
}

void alloc_free_burst_malloc(benchmark::State& state, std::size_t size) {
    std::array<void*, burst> held{};
    for (auto _ : state) {
        for (void*& p : held) {
            p = std::malloc(size);
            touch(p, size);
        }
        for (void* p : held)
            std::free(p);
    }
    state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * burst));
}

// A provider that pins nothing (like cma), so only the cache's own cost is measured.
struct null_registrar {
    struct registration {
        const std::byte* address = nullptr;
    };
    std::error_code register_memory(std::byte* address, std::size_t, registration& out) {
        out.address = address;
        return {};
    }
    void deregister_memory(registration&) noexcept {}
};
using null_cache = ca::registration_cache<null_registrar>;

const std::byte* at(std::uintptr_t address) {
    return reinterpret_cast<const std::byte*>(address);
}

// Lookup inside one of 1024 cached 64 KiB ranges: a map search plus the LRU bookkeeping.
void rcache_lookup_hit(benchmark::State& state) {
    null_registrar provider;
    null_cache cache(provider, ca::rcache_config{true, 4096, std::size_t{1} << 40});
    constexpr std::uintptr_t base = 0x10000000, span = 0x10000, ranges = 1024;
    for (std::uintptr_t i = 0; i < ranges; ++i) {
        null_cache::handle h;
        (void)cache.acquire(at(base + i * span), span, h);
    }
    std::uintptr_t i = 0;
    for (auto _ : state) {
        null_cache::handle h;
        (void)cache.acquire(at(base + (i++ % ranges) * span + 256), 4096, h);
        benchmark::DoNotOptimize(h.get());
    }
    if (cache.stats().misses != ranges) state.SkipWithError("expected every timed lookup to hit");
}

// Lookup of a range never seen: registration plus insertion plus evicting the least recently
// used entry (the cache is kept full at 1024 entries).
void rcache_lookup_miss(benchmark::State& state) {
    null_registrar provider;
    null_cache cache(provider, ca::rcache_config{true, 1024, std::size_t{1} << 40});
    constexpr std::uintptr_t base = 0x10000000, span = 0x10000;
    std::uintptr_t i = 0;
    for (auto _ : state) {
        null_cache::handle h;
        (void)cache.acquire(at(base + (i++ % (1u << 20)) * span), 4096, h);
        benchmark::DoNotOptimize(h.get());
    }
    if (cache.stats().hits != 0) state.SkipWithError("expected every lookup to miss");
}

void register_all() {
    for (std::size_t size : sizes) {
        const std::string n = std::to_string(size);
        benchmark::RegisterBenchmark(("alloc_free/" + n + "/coverse").c_str(), alloc_free_coverse,
                                     size);
        benchmark::RegisterBenchmark(("alloc_free/" + n + "/malloc").c_str(), alloc_free_malloc,
                                     size);
    }
    for (std::size_t size : sizes) {
        const std::string n = std::to_string(size);
        benchmark::RegisterBenchmark(("alloc_free_burst64/" + n + "/coverse").c_str(),
                                     alloc_free_burst_coverse, size);
        benchmark::RegisterBenchmark(("alloc_free_burst64/" + n + "/malloc").c_str(),
                                     alloc_free_burst_malloc, size);
    }
    benchmark::RegisterBenchmark("rcache_lookup/hit/coverse", rcache_lookup_hit);
    benchmark::RegisterBenchmark("rcache_lookup/miss/coverse", rcache_lookup_miss);
}

}  // namespace

int main(int argc, char** argv) {
    register_all();
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
