// reactor: completions reach their completion object, a full submission queue is
// back-pressure, cancel delivers the final completion, and drain empties the ring.
#include <sys/eventfd.h>
#include <unistd.h>

#include <cstdio>
#include <vector>

#include "fixture.hpp"

namespace coverse::test {
namespace {

struct recorder final : completion {
    std::vector<int> results;
    void complete(int res, std::uint32_t) noexcept override { results.push_back(res); }
};

std::unique_ptr<reactor> make_reactor(unsigned entries) {
    std::string why;
    auto r = reactor::create(entries, &why);
    if (!r) std::fprintf(stderr, "io_uring unavailable here: %s\n", why.c_str());
    return r;
}

TEST(reactor_test, describes_the_features_it_chose) {
    auto r = make_reactor(8);
    if (!r) GTEST_SKIP() << "io_uring unavailable";
    const std::string d = r->describe();
    EXPECT_EQ(d.rfind("io_uring: entries=", 0), 0u) << d;
}

TEST(reactor_test, a_full_submission_queue_is_back_pressure_not_an_error) {
    auto r = make_reactor(4);
    if (!r) GTEST_SKIP() << "io_uring unavailable";
    std::vector<recorder> recs(100);
    for (auto& rec : recs)
        io_uring_prep_nop(r->prepare(&rec));
    EXPECT_TRUE(r->drain(std::chrono::seconds(5)));
    for (auto& rec : recs) {
        ASSERT_EQ(rec.results.size(), 1u);
        EXPECT_EQ(rec.results[0], 0);
    }
    EXPECT_EQ(r->in_flight(), 0u);
}

TEST(reactor_test, cancel_delivers_the_final_completion) {
    auto r = make_reactor(8);
    if (!r) GTEST_SKIP() << "io_uring unavailable";
    int fd = ::eventfd(0, EFD_CLOEXEC);
    ASSERT_GE(fd, 0);
    std::uint64_t buf = 0;
    recorder rec;
    io_uring_prep_read(r->prepare(&rec), fd, &buf, sizeof buf, 0);
    EXPECT_FALSE(r->poll()) << "nothing was written: the read must still be pending";
    EXPECT_EQ(r->in_flight(), 1u);
    r->cancel(&rec);
    EXPECT_TRUE(r->drain(std::chrono::seconds(5)));
    ASSERT_EQ(rec.results.size(), 1u);
    EXPECT_EQ(rec.results[0], -ECANCELED);
    ::close(fd);
}

// A spinning loop must not pay a system call per idle poll: with TASKRUN_FLAG the ring
// says when the kernel holds completion work, and poll() reads the ring alone otherwise —
// yet still delivers the completion as soon as the kernel has queued it.
TEST(reactor_test, the_ring_says_when_a_completion_waits_in_the_kernel) {
    auto r = make_reactor(8);
    if (!r) GTEST_SKIP() << "io_uring unavailable";
    if (!r->polls_without_syscalls())
        GTEST_SKIP() << "this kernel's io_uring has no TASKRUN_FLAG: " << r->describe();
    int fd = ::eventfd(0, EFD_CLOEXEC);
    ASSERT_GE(fd, 0);
    std::uint64_t buf = 0;
    recorder rec;
    io_uring_prep_read(r->prepare(&rec), fd, &buf, sizeof buf, 0);
    EXPECT_FALSE(r->poll()) << "nothing was written: the read must still be pending";
    EXPECT_FALSE(r->kernel_has_work()) << "no task_work is queued while the read waits";
    const std::uint64_t one = 1;
    ASSERT_EQ(::write(fd, &one, sizeof one), static_cast<ssize_t>(sizeof one));
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!r->kernel_has_work() && rec.results.empty() && std::chrono::steady_clock::now() < end) {
    }
    EXPECT_TRUE(r->kernel_has_work()) << "the write queued the read's completion as task_work";
    EXPECT_TRUE(r->poll());
    ASSERT_EQ(rec.results.size(), 1u);
    EXPECT_EQ(rec.results[0], static_cast<int>(sizeof one));
    EXPECT_EQ(buf, 1u);
    EXPECT_FALSE(r->kernel_has_work());
    ::close(fd);
}

TEST(reactor_test, wait_returns_on_timeout) {
    auto r = make_reactor(8);
    if (!r) GTEST_SKIP() << "io_uring unavailable";
    const auto t0 = clock::now();
    EXPECT_FALSE(r->wait(std::chrono::milliseconds(3)));
    EXPECT_GE(clock::now() - t0, std::chrono::milliseconds(3));
}

}  // namespace
}  // namespace coverse::test
