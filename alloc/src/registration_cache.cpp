// The registration cache's settings from the environment (the cache itself is a header
// template over the provider's registrar).
#include <coverse/alloc/config.hpp>
#include <coverse/alloc/registration_cache.hpp>

#include <cstdio>

namespace coverse::alloc {

rcache_config rcache_config::from_environment() {
    rcache_config config;
    if (auto found = env_setting("RCACHE")) {
        if (auto on = parse_switch(found->value)) {
            config.enabled = *on;
        } else {
            std::fprintf(stderr,
                         "coverse alloc: ignoring %s='%s': expected 1/0, on/off, "
                         "true/false or yes/no; the registration cache stays on\n",
                         found->variable.c_str(), found->value.c_str());
        }
    }
    auto read_limit = [](const char* name, std::size_t& into, bool bytes) {
        if (auto found = env_setting(name)) {
            const std::optional<std::uint64_t> value =
                bytes ? parse_size(found->value) : parse_count(found->value);
            if (value && *value > 0) {
                into = *value;
            } else {
                std::fprintf(stderr,
                             "coverse alloc: ignoring %s='%s': expected a count of at "
                             "least 1; using %zu\n",
                             found->variable.c_str(), found->value.c_str(), into);
            }
        }
    };
    read_limit("RCACHE_MAX_ENTRIES", config.max_entries, false);
    read_limit("RCACHE_MAX_BYTES", config.max_bytes, true);
    return config;
}

}  // namespace coverse::alloc
