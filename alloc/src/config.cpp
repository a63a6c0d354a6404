// Reads the alloc layer's settings, keeps the settings in force, and holds the command-line
// overrides that env_setting consults before the environment.
#include <coverse/alloc/config.hpp>

#include "internal.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <mutex>
#include <string>

namespace coverse::alloc {
namespace {

struct config_state {
    std::mutex mutex;
    bool loaded = false;
    alloc_config config;
};

// Never destroyed: allocations made by static destructors of other files still read it.
config_state& state() {
    static auto* s = new config_state;
    return *s;
}

void warn_ignored(const env_value& found, const char* expected) {
    std::fprintf(stderr, "coverse alloc: ignoring %s='%s': expected %s; using the default\n",
                 found.variable.c_str(), found.value.c_str(), expected);
}

void read_switch(std::string_view name, bool& into) {
    if (auto found = env_setting(name)) {
        if (auto value = parse_switch(found->value)) {
            into = *value;
        } else {
            warn_ignored(*found, "1/0, on/off, true/false or yes/no");
        }
    }
}

void read_count(std::string_view name, std::size_t& into, std::size_t minimum) {
    if (auto found = env_setting(name)) {
        auto value = parse_count(found->value);
        if (value && *value >= minimum) {
            into = *value;
        } else {
            warn_ignored(*found, minimum == 0 ? "a count" : "a count of at least 1");
        }
    }
}

struct override_table {
    std::mutex mutex;
    std::map<std::string, std::string, std::less<>> values;
};

// Never destroyed, like state(): settings may be looked up from static destructors.
override_table& overrides() {
    static auto* t = new override_table;
    return *t;
}

// Applies a new config to the parts that read it on their fast paths. Called with the lock held.
void publish(const alloc_config& config) {
    detail::set_leak_tracking(config.leak_report);
    detail::set_large_cache_limit(config.large_cache_bytes);
}

}  // namespace

std::optional<env_value> env_setting(std::string_view name) {
    {
        override_table& t = overrides();
        std::lock_guard lock(t.mutex);
        if (auto it = t.values.find(name); it != t.values.end()) {
            return env_value{"++set " + it->first, it->second, true};
        }
    }
    const std::string n(name);
    // Only the prefixed spellings: a bare TRACE or SHM in a user's environment belongs to
    // something else, and must not change coverse.
    for (const std::string& variable : {"COVERSE_" + n, "CMI_VMI_" + n}) {
        if (const char* value = std::getenv(variable.c_str()); value && *value) {
            return env_value{variable, value};
        }
    }
    return std::nullopt;
}

void set_command_line_setting(std::string_view name, std::string_view value) {
    {
        override_table& t = overrides();
        std::lock_guard lock(t.mutex);
        t.values.insert_or_assign(std::string(name), std::string(value));
    }
    config_state& s = state();
    std::lock_guard lock(s.mutex);
    s.loaded = false;
}

void clear_command_line_settings() {
    {
        override_table& t = overrides();
        std::lock_guard lock(t.mutex);
        if (t.values.empty()) return;  // keep a config that set_config() put in force
        t.values.clear();
    }
    config_state& s = state();
    std::lock_guard lock(s.mutex);
    s.loaded = false;
}

std::optional<bool> parse_switch(std::string_view text) {
    std::string lower(text);
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (lower == "1" || lower == "on" || lower == "true" || lower == "yes") return true;
    if (lower == "0" || lower == "off" || lower == "false" || lower == "no") return false;
    return std::nullopt;
}

std::optional<std::size_t> parse_count(std::string_view text) {
    std::size_t value = 0;
    const char* end = text.data() + text.size();
    auto [ptr, ec] = std::from_chars(text.data(), end, value);
    if (text.empty() || ec != std::errc{} || ptr != end) return std::nullopt;
    return value;
}

std::optional<std::uint64_t> parse_size(std::string_view text) {
    std::uint64_t value = 0;
    const char* end = text.data() + text.size();
    auto [ptr, ec] = std::from_chars(text.data(), end, value);
    if (text.empty() || ec != std::errc{} || ptr == text.data()) return std::nullopt;
    std::string_view suffix(ptr, static_cast<std::size_t>(end - ptr));
    unsigned shift = 0;
    if (!suffix.empty()) {
        switch (suffix.front()) {
            case 'k':
            case 'K':
                shift = 10;
                break;
            case 'm':
            case 'M':
                shift = 20;
                break;
            case 'g':
            case 'G':
                shift = 30;
                break;
            default:
                break;
        }
        if (shift) suffix.remove_prefix(1);
        if (shift && (suffix.starts_with('i') || suffix.starts_with('I'))) suffix.remove_prefix(1);
        if (suffix == "B" || suffix == "b") suffix = {};
        if (!suffix.empty()) return std::nullopt;
    }
    if (shift && value > (~std::uint64_t{0} >> shift)) return std::nullopt;
    return value << shift;
}

std::optional<std::uint64_t> parse_duration_us(std::string_view text, std::uint64_t bare_unit_us) {
    double number = 0;
    const char* end = text.data() + text.size();
    auto [ptr, ec] = std::from_chars(text.data(), end, number, std::chars_format::fixed);
    if (text.empty() || ec != std::errc{} || ptr == text.data() || !(number >= 0)) {
        return std::nullopt;
    }
    const std::string_view unit(ptr, static_cast<std::size_t>(end - ptr));
    double us_per_unit = 0;
    if (unit.empty()) {
        us_per_unit = static_cast<double>(bare_unit_us);
        if (bare_unit_us == 1 && number != static_cast<double>(static_cast<std::uint64_t>(number)))
            return std::nullopt;  // bare microseconds are whole
    } else if (unit == "us") {
        us_per_unit = 1;
    } else if (unit == "ms") {
        us_per_unit = 1e3;
    } else if (unit == "s") {
        us_per_unit = 1e6;
    } else if (unit == "min") {
        us_per_unit = 6e7;
    } else {
        return std::nullopt;
    }
    const double us = number * us_per_unit;
    if (!(us < 1.8e19)) return std::nullopt;
    return static_cast<std::uint64_t>(us + 0.5);
}

alloc_config alloc_config::from_environment() {
    alloc_config config;
    read_switch("MEMORY_POOL", config.pool_enabled);
    read_count("MEMORY_POOL_PREALLOCATE", config.pool_preallocate, 0);
    read_count("MEMORY_POOL_GROW", config.pool_grow, 1);
    read_switch("LEAK_REPORT", config.leak_report);
    if (auto found = env_setting("LARGE_CACHE"); found && found->value == "off")
        config.large_cache_bytes = 0;
    else
        read_count("LARGE_CACHE", config.large_cache_bytes, 0);
    return config;
}

alloc_config current_config() {
    config_state& s = state();
    std::lock_guard lock(s.mutex);
    if (!s.loaded) {
        s.config = alloc_config::from_environment();
        s.loaded = true;
        publish(s.config);
    }
    return s.config;
}

void set_config(const alloc_config& config) {
    config_state& s = state();
    std::lock_guard lock(s.mutex);
    s.config = config;
    s.config.pool_grow = std::max<std::size_t>(s.config.pool_grow, 1);
    s.loaded = true;
    publish(s.config);
}

}  // namespace coverse::alloc
