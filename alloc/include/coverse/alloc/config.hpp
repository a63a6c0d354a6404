// Run-time settings of the alloc layer (pool on/off and sizing, leak report) and the one place
// that looks any coverse setting up: command-line overrides, then the environment in the
// spellings coverse accepts for every setting. The list of settings is runtime's
// (coverse/runtime/settings.hpp); this layer is below it, so it knows names, not meanings.
#pragma once

#include <cstddef>
#include <cstdint>
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
    /// LARGE_CACHE: bytes of freed large messages (above the pool) kept for reuse, so a
    /// stream of 1 MiB messages does not fault in fresh pages for each one. 0: none.
    std::size_t large_cache_bytes = std::size_t{256} << 20;

    /// Reads every setting above from the environment; a malformed value is reported on stderr
    /// and the default is kept.
    static alloc_config from_environment();
};

/// Where a setting's value came from and the value.
struct env_value {
    /// The spelling that supplied it: "CMI_VMI_MEMORY_POOL", or "++set MEMORY_POOL" for a
    /// command-line override, so `variable + "=" + value` reads as what the user wrote.
    std::string variable;
    std::string value;
    bool command_line = false;
};

/// Looks a setting up: a command-line override first (set_command_line_setting), then
/// COVERSE_<name>, then the legacy CMI_VMI_<name>; the first one set wins, so a
/// coverse-specific value overrides one inherited from an old job script. A bare <name> is
/// never read: TRACE or SHM in a user's environment belongs to something else. An environment
/// variable set to the empty string counts as unset.
std::optional<env_value> env_setting(std::string_view name);

/// Records `++set <name>=<value>` from the command line: env_setting(name) returns it before
/// any environment variable. Thread-safe; meant for start-up (runtime's
/// settings::consume_command_line), before the layers read their settings. The alloc settings
/// are read again on the next current_config(), so an override of MEMORY_POOL made after
/// they were first read still applies to pools created afterwards.
void set_command_line_setting(std::string_view name, std::string_view value);

/// Forgets every command-line override (tests, tools that parse several command lines).
void clear_command_line_settings();

/// Parses a switch: 1/0, on/off, true/false, yes/no (any case). nullopt if it is none of them.
std::optional<bool> parse_switch(std::string_view text);

/// Parses a non-negative decimal count. nullopt if it is not one.
std::optional<std::size_t> parse_count(std::string_view text);

/// Parses a size in bytes, the one form every size setting takes: a whole number with an
/// optional K, M or G (any case; powers of 1024), optionally followed by B or iB: "65536",
/// "64M", "512KiB", "2MB". nullopt if it is not one or does not fit 64 bits.
std::optional<std::uint64_t> parse_size(std::string_view text);

/// Parses a duration into whole microseconds, the one form every duration setting takes: a
/// non-negative decimal number with an optional unit us, ms, s or min ("500ms", "0.5s"). A
/// number without a unit counts `bare_unit_us` microseconds per unit (1000000 for settings in
/// seconds, 1 for settings in microseconds, where it must then be whole). nullopt otherwise.
std::optional<std::uint64_t> parse_duration_us(std::string_view text, std::uint64_t bare_unit_us);

/// The settings in force. Read from the environment on first use.
alloc_config current_config();

/// Replaces the settings in force (tools and tests). Pool settings apply to pools created after
/// the call: a thread keeps the pool it has until it exits or calls release_thread_pool().
void set_config(const alloc_config& config);

}  // namespace coverse::alloc
