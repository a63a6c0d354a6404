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
    for (const std::string& variable : {"COVERSE_" + n, n, "CMI_VMI_" + n}) {
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
