// Run-time settings of the alloc layer (pool on/off and sizing, leak report) and the one place
// that reads them from the environment, in the spellings coverse accepts for every setting.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace coverse::alloc {

/// Settings of the alloc layer. Defaults follow DESIGN.md, section "Memory".
struct alloc_config {
    /// MEMORY_POOL: serve messages up to 16 KiB from per-thread buckets. Off: every message
    /// comes from the system allocator.
    bool pool_enabled = true;
    /// MEMORY_POOL_PREALLOCATE: entries each bucket allocates when a thread's pool is created.
    std::size_t pool_preallocate = 128;
    /// MEMORY_POOL_GROW: entries a bucket adds when it runs empty (at least 1).
    std::size_t pool_grow = 128;
    /// LEAK_REPORT: record each message's allocation site and print what is still live at exit.
    bool leak_report = false;

    /// Reads every setting above from the environment; a malformed value is reported on stderr
    /// and the default is kept.
    static alloc_config from_environment();
};

/// One environment variable that supplied a setting.
struct env_value {
    std::string variable;  ///< the spelling that was set, e.g. "CMI_VMI_MEMORY_POOL"
    std::string value;
};

/// Looks a setting up as COVERSE_<name>, then <name>, then the legacy CMI_VMI_<name>; the first
/// one set wins, so a coverse-specific value overrides one inherited from an old job script.
std::optional<env_value> env_setting(std::string_view name);

/// Parses a switch: 1/0, on/off, true/false, yes/no (any case). nullopt if it is none of them.
std::optional<bool> parse_switch(std::string_view text);

/// Parses a non-negative decimal count. nullopt if it is not one.
std::optional<std::size_t> parse_count(std::string_view text);

/// The settings in force. Read from the environment on first use.
alloc_config current_config();

/// Replaces the settings in force (tools and tests). Pool settings apply to pools created after
/// the call: a thread keeps the pool it has until it exits or calls release_thread_pool().
void set_config(const alloc_config& config);

}  // namespace coverse::alloc
