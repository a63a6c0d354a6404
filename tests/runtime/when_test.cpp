// when_all, when_any, with_timeout: results, fail-fast, and that losers are cancelled and
// have finished before the call returns.
#include <stdexcept>
#include <string>
#include <vector>

#include "fixture.hpp"

namespace coverse::test {
namespace {

using namespace std::chrono_literals;
using when_test = runtime_test;

task<int> value_after(int v, clock::duration d) {
    co_await sleep_for(d);
    co_return v;
}
task<std::string> text_now(std::string s) {
    co_return s;
}
task<void> nothing() {
    co_return;
}

TEST_F(when_test, when_all_returns_every_result_in_order) {
    auto [a, b, c] = sync_wait(when_all(value_after(1, 3ms), text_now("two"), nothing()));
    EXPECT_EQ(a, 1);
    EXPECT_EQ(b, "two");
    (void)c;
    std::vector<task<int>> ts;
    for (int i = 0; i < 20; ++i)
        ts.push_back(value_after(i, std::chrono::microseconds(20 - i)));
    auto all = sync_wait(when_all(std::move(ts)));
    ASSERT_EQ(all.size(), 20u);
    for (int i = 0; i < 20; ++i)
        EXPECT_EQ(all[i], i);
}

struct cleanup_flag {
    bool* flag;
    ~cleanup_flag() { *flag = true; }
};

task<int> slow_with_cleanup(bool* cleaned) {
    cleanup_flag f{cleaned};
    co_await sleep_for(1h);
    co_return 0;
}

task<int> fail_soon() {
    co_await sleep_for(1ms);
    throw std::runtime_error("peer 2 reset the connection");
}

TEST_F(when_test, when_all_fails_fast_but_waits_for_the_stopped_siblings) {
    bool cleaned = false;
    EXPECT_THROW(
        {
            try {
                sync_wait(when_all(slow_with_cleanup(&cleaned), fail_soon()));
            } catch (const std::runtime_error& e) {
                EXPECT_STREQ(e.what(), "peer 2 reset the connection");
                throw;
            }
        },
        std::runtime_error);
    EXPECT_TRUE(cleaned) << "the sibling must have been stopped and finished";
}

TEST_F(when_test, when_any_returns_the_first_and_stops_the_rest) {
    bool cleaned = false;
    auto r = sync_wait(when_any(slow_with_cleanup(&cleaned), value_after(7, 1ms)));
    EXPECT_EQ(r.index, 1u);
    EXPECT_EQ(std::get<1>(r.value), 7);
    EXPECT_TRUE(cleaned) << "the loser finished before when_any returned";
}

TEST_F(when_test, when_any_rethrows_a_failing_winner) {
    bool cleaned = false;
    EXPECT_THROW(sync_wait(when_any(slow_with_cleanup(&cleaned), fail_soon())), std::runtime_error);
    EXPECT_TRUE(cleaned);
}

TEST_F(when_test, with_timeout_cancels_the_loser_and_waits_for_it) {
    bool cleaned = false;
    const auto t0 = clock::now();
    auto r = sync_wait(with_timeout(slow_with_cleanup(&cleaned), 5ms));
    EXPECT_FALSE(r.has_value());
    EXPECT_TRUE(cleaned);
    EXPECT_GE(clock::now() - t0, 5ms);

    auto ok = sync_wait(with_timeout(value_after(3, 1ms), 1h));
    ASSERT_TRUE(ok.has_value());
    EXPECT_EQ(*ok, 3);
    EXPECT_EQ(sched->pending_timers(), 0u) << "the hour-long limit timer must be cancelled";
}

TEST_F(when_test, an_outer_stop_reaches_nested_children) {
    bool cleaned = false;
    auto r = sync_wait(with_timeout(
        [](bool* c) -> task<void> { co_await when_all(slow_with_cleanup(c), nothing()); }(&cleaned),
        2ms));
    EXPECT_FALSE(r);
    EXPECT_TRUE(cleaned);
}

}  // namespace
}  // namespace coverse::test
