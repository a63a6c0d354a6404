// The leak report: live messages grouped by site and owner, sites recorded only while the
// report is on, and the report printed at exit with LEAK_REPORT=1.
#include <coverse/alloc/leak_report.hpp>
#include <coverse/alloc/message.hpp>

#include "alloc_test_support.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>

namespace coverse::alloc {
namespace {

using test::pool_config;
using test::scoped_config;
using testing::HasSubstr;
using testing::Not;

alloc_config with_report(bool pool) {
    alloc_config c = pool_config(pool, 4, 4);
    c.leak_report = true;
    return c;
}

class leak_report_suite : public testing::TestWithParam<bool> {
protected:
    scoped_config _config{with_report(GetParam())};
};

INSTANTIATE_TEST_SUITE_P(pool, leak_report_suite, testing::Bool(),
                         [](const testing::TestParamInfo<bool>& p) {
                             return p.param ? "on" : "off";
                         });

TEST_P(leak_report_suite, names_the_site_size_and_owner_of_what_is_live) {
    void* a = msg_alloc(100, "leak-test-site-a");
    void* b = msg_alloc(100, "leak-test-site-a");
    void* c = msg_alloc(40000, "leak-test-site-c");
    const std::string report = leak_report();
    EXPECT_THAT(report, HasSubstr("2 x (200 bytes total) from "));
    EXPECT_THAT(report, HasSubstr("leak-test-site-a"));
    EXPECT_THAT(report, HasSubstr("1 x (40000 bytes total) from system allocator, allocated at "
                                  "leak-test-site-c"));
    if (GetParam()) {
        EXPECT_THAT(report, HasSubstr("1024 B bucket, allocated at leak-test-site-a"));
    }
    for (void* m : {a, b, c})
        msg_free(m);
    EXPECT_THAT(leak_report(), Not(HasSubstr("leak-test-site")));
}

TEST_P(leak_report_suite, an_untagged_site_is_the_callers_return_address) {
    void* m = msg_alloc(123);
    const std::string report = leak_report();
    // dladdr names the object the call came from: this test executable.
    EXPECT_THAT(report, HasSubstr("alloc_tests+0x")) << report;
    msg_free(m);
}

TEST(leak_report, sites_are_recorded_only_while_the_report_is_on) {
    scoped_config config(pool_config(true, 4, 4));
    void* before = msg_alloc(77, "leak-test-recorded-while-off");
    set_config(with_report(true));
    const std::string report = leak_report();
    EXPECT_THAT(report, Not(HasSubstr("leak-test-recorded-while-off")));
    EXPECT_THAT(report, HasSubstr("unknown (allocated while the report was off)"));
    msg_free(before);
}

TEST(leak_report, is_printed_at_exit_when_enabled) {
    scoped_config config(pool_config(true, 4, 4));
    EXPECT_EXIT(
        {
            set_config(with_report(true));
            (void)msg_alloc(300, "leak-test-at-exit");
            (void)msg_alloc(70000, "leak-test-at-exit-large");
            std::exit(0);
        },
        testing::ExitedWithCode(0),
        "still live(.|\n)*leak-test-at-exit(.|\n)*leak-test-at-exit-large");
}

TEST(leak_report, leak_report_1_in_the_environment_turns_it_on) {
    // A re-executed child reads its environment afresh on its first allocation.
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    test::scoped_env on("COVERSE_LEAK_REPORT", "1");
    EXPECT_EXIT(
        {
            (void)msg_alloc(300, "leak-test-from-env");
            std::exit(0);
        },
        testing::ExitedWithCode(0), "leak-test-from-env");
    GTEST_FLAG_SET(death_test_style, "fast");
}

}  // namespace
}  // namespace coverse::alloc
