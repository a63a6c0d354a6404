// io_op: requests complete through the loop; a stopped request is cancelled and its final
// completion is awaited before the coroutine resumes.
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cstring>
#include <thread>

#include "fixture.hpp"

namespace coverse::test {
namespace {

using namespace std::chrono_literals;

class io_test : public runtime_test {
protected:
    void SetUp() override {
        runtime_test::SetUp();
        if (!sched->io())
            GTEST_SKIP() << "io_uring unavailable: " << sched->io_unavailable_reason();
        ASSERT_EQ(::pipe(fds), 0);
    }
    void TearDown() override {
        if (fds[0] >= 0) ::close(fds[0]);
        if (fds[1] >= 0) ::close(fds[1]);
        runtime_test::TearDown();
    }
    int fds[2] = {-1, -1};
};

TEST_F(io_test, read_and_write_through_the_ring) {
    auto r = sync_wait([](int rd, int wr) -> task<std::string> {
        const char msg[] = "hello ring";
        int w = co_await write_some(wr, msg, sizeof msg - 1);
        EXPECT_EQ(w, static_cast<int>(sizeof msg - 1));
        char buf[32] = {};
        int n = co_await read_some(rd, buf, sizeof buf);
        co_return std::string(buf, n > 0 ? static_cast<std::size_t>(n) : 0);
    }(fds[0], fds[1]));
    EXPECT_EQ(r, "hello ring");
}

TEST_F(io_test, a_read_waits_for_data_written_by_another_thread) {
    std::thread writer([w = fds[1]] {
        std::this_thread::sleep_for(2ms);
        [[maybe_unused]] auto n = ::write(w, "x", 1);
    });
    int n = sync_wait([](int rd) -> task<int> {
        char c = 0;
        int got = co_await read_some(rd, &c, 1);
        EXPECT_EQ(c, 'x');
        co_return got;
    }(fds[0]));
    writer.join();
    EXPECT_EQ(n, 1);
}

TEST_F(io_test, poll_fd_reports_readiness_of_an_eventfd) {
    int efd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    ASSERT_GE(efd, 0);
    int mask = sync_wait([](int fd) -> task<int> {
        task_scope scope("signaller");
        scope.spawn(
            [](int f) -> task<void> {
                co_await sleep_for(1ms);
                std::uint64_t one = 1;
                [[maybe_unused]] auto n = ::write(f, &one, sizeof one);
            }(fd),
            "eventfd-writer");
        int m = co_await poll_fd(fd, POLLIN);
        co_await scope.join();
        co_return m;
    }(efd));
    ::close(efd);
    EXPECT_GT(mask, 0);
    EXPECT_TRUE(mask & POLLIN);
}

TEST_F(io_test, a_timed_out_read_is_cancelled_and_its_completion_reaped) {
    int result = 1;
    const auto t0 = clock::now();
    // io_op reports cancellation as a value, so the task finishes normally with it and
    // with_timeout hands that outcome back.
    auto done = sync_wait(with_timeout(
        [](int rd, int* res) -> task<void> {
            char buf[8];
            *res = co_await read_some(rd, buf, sizeof buf);  // nobody writes
        }(fds[0], &result),
        3ms));
    EXPECT_TRUE(done);
    EXPECT_GE(clock::now() - t0, 3ms);
    // -ECANCELED is only ever written by the request's final completion: the coroutine
    // resumed after the kernel let go of `buf`, not at the stop request.
    EXPECT_EQ(result, -ECANCELED) << std::strerror(-result);
}

}  // namespace
}  // namespace coverse::test
