// The leak report: gathers live messages from every pool and the system tracker, groups them
// by allocation site and owner, and prints the result at exit when LEAK_REPORT=1.
#include <coverse/alloc/leak_report.hpp>

#include "internal.hpp"

#include <dlfcn.h>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <tuple>

namespace coverse::alloc {
namespace {

struct group_key {
    const void* site;
    bool site_is_tag;
    const char* owner;
    std::uint64_t pool_serial;
    long thread_id;
    std::size_t capacity;

    auto tie() const {
        return std::tie(owner, pool_serial, site, site_is_tag, capacity, thread_id);
    }
    bool operator<(const group_key& other) const { return tie() < other.tie(); }
};

struct group_total {
    std::size_t blocks = 0;
    std::size_t bytes = 0;
};

// "tag", or "0x... in symbol+0x.. (object+0x..)" so `addr2line -e object 0x..` finds the line.
std::string describe_site(const group_key& key) {
    if (key.site == nullptr) return "unknown (allocated while the report was off)";
    if (key.site_is_tag) return static_cast<const char*>(key.site);
    char text[512];
    Dl_info info{};
    if (dladdr(key.site, &info) != 0 && info.dli_fname != nullptr) {
        const auto offset = static_cast<std::size_t>(static_cast<const char*>(key.site) -
                                                     static_cast<const char*>(info.dli_fbase));
        if (info.dli_sname != nullptr) {
            std::snprintf(text, sizeof text, "%p in %s+0x%zx (%s+0x%zx)", key.site, info.dli_sname,
                          static_cast<std::size_t>(static_cast<const char*>(key.site) -
                                                   static_cast<const char*>(info.dli_saddr)),
                          info.dli_fname, offset);
        } else {
            std::snprintf(text, sizeof text, "%p (%s+0x%zx)", key.site, info.dli_fname, offset);
        }
    } else {
        std::snprintf(text, sizeof text, "%p", key.site);
    }
    return text;
}

void report_at_exit() {
    // Switched off again since it was registered (a tool or test toggled it): stay quiet.
    if (detail::leak_tracking_state.load(std::memory_order_relaxed) <= 0) return;
    const std::string report = leak_report();
    std::fputs(report.c_str(), stderr);
    std::fflush(stderr);
}

}  // namespace

std::string leak_report() {
    std::map<group_key, group_total> groups;
    group_total all;
    auto add = [&](const detail::live_block& block) {
        const group_key key{block.chunk->site, block.chunk->site_is_tag(),
                            block.owner,       block.pool_serial,
                            block.thread_id,   block.capacity};
        group_total& g = groups[key];
        ++g.blocks;
        g.bytes += block.chunk->size;
        ++all.blocks;
        all.bytes += block.chunk->size;
    };
    detail::for_each_live_pool_block(add);
    detail::for_each_tracked_system_block(add);

    std::string out;
    char line[768];
    if (all.blocks == 0) {
        return "coverse alloc: leak report: no message is live\n";
    }
    std::snprintf(line, sizeof line,
                  "coverse alloc: leak report: %zu messages (%zu bytes) still live\n", all.blocks,
                  all.bytes);
    out += line;
    for (const auto& [key, total] : groups) {
        char owner[128];
        if (key.pool_serial != 0) {
            std::snprintf(owner, sizeof owner, "pool #%llu of thread %ld, %zu B bucket",
                          static_cast<unsigned long long>(key.pool_serial), key.thread_id,
                          key.capacity);
        } else {
            std::snprintf(owner, sizeof owner, "%s allocator", key.owner);
        }
        std::snprintf(line, sizeof line, "  %zu x (%zu bytes total) from %s, allocated at %s\n",
                      total.blocks, total.bytes, owner, describe_site(key).c_str());
        out += line;
    }
    out +=
        "  (sites are recorded while LEAK_REPORT=1; resolve an address with addr2line -e "
        "<object> <offset>)\n";
    return out;
}

namespace detail {

void set_leak_tracking(bool on) {
    static bool hooked = false;  // guarded by the config lock
    if (on && !hooked) {
        hooked = true;
        // The registries are never destroyed, so they are still readable here; the main
        // thread's pool is retired (not freed, if blocks are live) before atexit handlers run.
        std::atexit(report_at_exit);
    }
    leak_tracking_state.store(on ? 1 : 0, std::memory_order_relaxed);
}

}  // namespace detail
}  // namespace coverse::alloc
