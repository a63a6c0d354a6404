// Shared fixture: every runtime test runs with a fresh scheduler and ends by proving that
// no coroutine frame outlived it.
#pragma once

#include <gtest/gtest.h>

#include <optional>

#include <coverse/runtime/runtime.hpp>

namespace coverse::test {

class runtime_test : public ::testing::Test {
protected:
    void SetUp() override {
        _frames_before = live_task_frames();
        sched.emplace(options());
    }
    void TearDown() override {
        sched.reset();
        EXPECT_EQ(live_task_frames(), _frames_before) << "coroutine frames leaked";
    }
    virtual scheduler_options options() {
        scheduler_options o;
        o.spin = std::chrono::microseconds(20);
        return o;
    }
    std::optional<scheduler> sched;

private:
    std::int64_t _frames_before = 0;
};

}  // namespace coverse::test
