// Settings from the environment: the three spellings and their precedence, command-line
// overrides above them, MEMORY_POOL=0, the pool sizing overrides, malformed values.
#include <coverse/alloc/config.hpp>
#include <coverse/alloc/registration_cache.hpp>

#include "alloc_test_support.hpp"

#include <gtest/gtest.h>

namespace coverse::alloc {
namespace {

using test::scoped_env;

// Clears every spelling of the settings these tests look at, so the CI's own environment
// cannot leak in.
struct clean_env {
    scoped_env a{"COVERSE_MEMORY_POOL", nullptr}, b{"MEMORY_POOL", nullptr},
        c{"CMI_VMI_MEMORY_POOL", nullptr}, d{"COVERSE_MEMORY_POOL_PREALLOCATE", nullptr},
        e{"MEMORY_POOL_PREALLOCATE", nullptr}, f{"CMI_VMI_MEMORY_POOL_PREALLOCATE", nullptr},
        g{"COVERSE_MEMORY_POOL_GROW", nullptr}, h{"MEMORY_POOL_GROW", nullptr},
        i{"CMI_VMI_MEMORY_POOL_GROW", nullptr}, j{"COVERSE_LEAK_REPORT", nullptr},
        k{"LEAK_REPORT", nullptr}, l{"CMI_VMI_LEAK_REPORT", nullptr}, m{"COVERSE_RCACHE", nullptr},
        n{"COVERSE_RCACHE_MAX_ENTRIES", nullptr}, o{"COVERSE_RCACHE_MAX_BYTES", nullptr};
};

TEST(alloc_config, defaults_follow_the_design) {
    clean_env clean;
    const alloc_config c = alloc_config::from_environment();
    EXPECT_TRUE(c.pool_enabled);
    EXPECT_EQ(c.pool_preallocate, 128u);
    EXPECT_EQ(c.pool_grow, 128u);
    EXPECT_FALSE(c.leak_report);
}

TEST(alloc_config, memory_pool_zero_turns_the_pool_off_in_every_spelling) {
    for (const char* variable : {"COVERSE_MEMORY_POOL", "CMI_VMI_MEMORY_POOL"}) {
        clean_env clean;
        scoped_env off(variable, "0");
        EXPECT_FALSE(alloc_config::from_environment().pool_enabled) << variable;
    }
}

TEST(alloc_config, coverse_spelling_wins_over_legacy_and_a_bare_name_is_not_read) {
    clean_env clean;
    scoped_env legacy("CMI_VMI_MEMORY_POOL", "0");
    EXPECT_EQ(env_setting("MEMORY_POOL")->variable, "CMI_VMI_MEMORY_POOL");
    {
        // A bare MEMORY_POOL belongs to someone else: it used to win over CMI_VMI_.
        scoped_env plain("MEMORY_POOL", "1");
        EXPECT_FALSE(alloc_config::from_environment().pool_enabled);
        EXPECT_EQ(env_setting("MEMORY_POOL")->variable, "CMI_VMI_MEMORY_POOL");
        scoped_env ours("COVERSE_MEMORY_POOL", "off");
        EXPECT_FALSE(alloc_config::from_environment().pool_enabled);
        EXPECT_EQ(env_setting("MEMORY_POOL")->variable, "COVERSE_MEMORY_POOL");
    }
    EXPECT_FALSE(alloc_config::from_environment().pool_enabled);
}

TEST(alloc_config, a_command_line_override_wins_over_every_spelling) {
    clean_env clean;
    scoped_env ours("COVERSE_MEMORY_POOL", "1");
    set_command_line_setting("MEMORY_POOL", "off");
    const auto found = env_setting("MEMORY_POOL");
    ASSERT_TRUE(found);
    EXPECT_TRUE(found->command_line);
    EXPECT_EQ(found->variable, "++set MEMORY_POOL");
    EXPECT_EQ(found->value, "off");
    EXPECT_FALSE(alloc_config::from_environment().pool_enabled);
    clear_command_line_settings();
    EXPECT_EQ(env_setting("MEMORY_POOL")->variable, "COVERSE_MEMORY_POOL");
    EXPECT_FALSE(env_setting("MEMORY_POOL")->command_line);
}

TEST(alloc_config, a_command_line_override_reaches_the_config_in_force) {
    clean_env clean;
    const alloc_config saved = current_config();
    set_config(test::pool_config(true));
    set_command_line_setting("MEMORY_POOL_GROW", "9");
    EXPECT_EQ(current_config().pool_grow, 9u) << "the settings are read again after ++set";
    clear_command_line_settings();
    EXPECT_EQ(current_config().pool_grow, 128u);
    set_config(saved);
}

TEST(alloc_config, an_empty_variable_counts_as_unset) {
    clean_env clean;
    scoped_env empty("COVERSE_MEMORY_POOL", "");
    scoped_env legacy("CMI_VMI_MEMORY_POOL", "0");
    EXPECT_EQ(env_setting("MEMORY_POOL")->variable, "CMI_VMI_MEMORY_POOL");
    scoped_env legacy_empty("CMI_VMI_MEMORY_POOL", "");
    EXPECT_FALSE(env_setting("MEMORY_POOL"));
}

TEST(alloc_config, pool_sizing_and_leak_report_are_overridable) {
    clean_env clean;
    scoped_env pre("CMI_VMI_MEMORY_POOL_PREALLOCATE", "7");
    scoped_env grow("COVERSE_MEMORY_POOL_GROW", "3");
    scoped_env leak("COVERSE_LEAK_REPORT", "yes");
    const alloc_config c = alloc_config::from_environment();
    EXPECT_EQ(c.pool_preallocate, 7u);
    EXPECT_EQ(c.pool_grow, 3u);
    EXPECT_TRUE(c.leak_report);
}

TEST(alloc_config, malformed_values_keep_the_default_and_say_so) {
    clean_env clean;
    scoped_env pool("COVERSE_MEMORY_POOL", "maybe");
    scoped_env grow("COVERSE_MEMORY_POOL_GROW", "0");  // a bucket must grow by at least one entry
    scoped_env pre("COVERSE_MEMORY_POOL_PREALLOCATE", "12x");
    testing::internal::CaptureStderr();
    const alloc_config c = alloc_config::from_environment();
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_TRUE(c.pool_enabled);
    EXPECT_EQ(c.pool_grow, 128u);
    EXPECT_EQ(c.pool_preallocate, 128u);
    EXPECT_NE(err.find("MEMORY_POOL='maybe'"), std::string::npos) << err;
    EXPECT_NE(err.find("MEMORY_POOL_GROW='0'"), std::string::npos) << err;
    EXPECT_NE(err.find("MEMORY_POOL_PREALLOCATE='12x'"), std::string::npos) << err;
}

TEST(alloc_config, parsers) {
    EXPECT_EQ(parse_switch("ON"), true);
    EXPECT_EQ(parse_switch("False"), false);
    EXPECT_EQ(parse_switch(""), std::nullopt);
    EXPECT_EQ(parse_count("4096"), 4096u);
    EXPECT_EQ(parse_count("-1"), std::nullopt);
    EXPECT_EQ(parse_count(""), std::nullopt);
    EXPECT_EQ(parse_count("99999999999999999999999"), std::nullopt);
}

TEST(alloc_config, set_config_is_what_current_config_returns) {
    const alloc_config saved = current_config();
    alloc_config c = test::pool_config(false, 5, 0);
    set_config(c);
    EXPECT_FALSE(current_config().pool_enabled);
    EXPECT_EQ(current_config().pool_preallocate, 5u);
    EXPECT_EQ(current_config().pool_grow, 1u) << "grow is clamped to one entry";
    set_config(saved);
}

TEST(rcache_config, switch_and_limits_from_the_environment) {
    clean_env clean;
    EXPECT_TRUE(rcache_config::from_environment().enabled);
    scoped_env off("COVERSE_RCACHE", "0");
    scoped_env entries("COVERSE_RCACHE_MAX_ENTRIES", "16");
    scoped_env bytes("COVERSE_RCACHE_MAX_BYTES", "65536");
    const rcache_config c = rcache_config::from_environment();
    EXPECT_FALSE(c.enabled);
    EXPECT_EQ(c.max_entries, 16u);
    EXPECT_EQ(c.max_bytes, 65536u);
}

// Sizes and durations: one parser each for every setting (TRACE_LIMIT took K/M/G while
// MAX_MESSAGE did not).
TEST(alloc_config, one_size_parser_takes_k_m_g_suffixes) {
    EXPECT_EQ(parse_size("65536"), 65536u);
    EXPECT_EQ(parse_size("64M"), 64u << 20);
    EXPECT_EQ(parse_size("512KiB"), 512u << 10);
    EXPECT_EQ(parse_size("2MB"), 2u << 20);
    EXPECT_EQ(parse_size("1g"), 1u << 30);
    EXPECT_EQ(parse_size("7b"), 7u);
    for (const char* bad : {"", "M", "-5", "12X", "1.5M", "64 M", "64MM", "99999999999G"})
        EXPECT_FALSE(parse_size(bad)) << bad;
}

TEST(alloc_config, one_duration_parser_takes_units) {
    EXPECT_EQ(parse_duration_us("300", 1'000'000), 300'000'000u);
    EXPECT_EQ(parse_duration_us("0.5", 1'000'000), 500'000u);
    EXPECT_EQ(parse_duration_us("500ms", 1'000'000), 500'000u);
    EXPECT_EQ(parse_duration_us("2min", 1'000'000), 120'000'000u);
    EXPECT_EQ(parse_duration_us("200", 1), 200u);
    EXPECT_EQ(parse_duration_us("2ms", 1), 2000u);
    EXPECT_EQ(parse_duration_us("0.5s", 1), 500'000u);
    EXPECT_EQ(parse_duration_us("10us", 1'000'000), 10u);
    for (const char* bad : {"", "ms", "-1", "1.5", "5 s", "5h", "soon"})
        EXPECT_FALSE(parse_duration_us(bad, 1)) << bad;
}

}  // namespace
}  // namespace coverse::alloc
