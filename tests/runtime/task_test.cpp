#include <gtest/gtest.h>
#include <coverse/runtime/runtime.hpp>
TEST(task, placeholder_builds) {
    EXPECT_EQ(coverse::sync_wait([]() -> coverse::task<int> { co_return 1; }()), 1);
}
