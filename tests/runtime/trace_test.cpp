// trace sink: off by default and silent; on, every event reaches the per-PE file intact;
// the reader names the file and offset of a corrupt header and reports a torn tail. The
// recorder's limits, sessions and the coverse-trace tool are tested in tests/trace/.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "fixture.hpp"

namespace coverse::test {
namespace {

namespace fs = std::filesystem;

class trace_test : public ::testing::Test {
protected:
    void SetUp() override {
        dir = fs::temp_directory_path() /
              ("coverse-trace-test-" + std::to_string(::getpid()) + "-" +
               ::testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::create_directories(dir);
    }
    void TearDown() override { fs::remove_all(dir); }
    fs::path dir;
};

TEST_F(trace_test, off_by_default) {
    EXPECT_FALSE(trace::enabled());
    trace::emit(trace::kind::handle_allocated, 1, 2, 3);  // must be a no-op
    EXPECT_TRUE(fs::is_empty(dir));
}

TEST_F(trace_test, events_round_trip_through_the_file) {
    std::string path;
    {
        trace::sink s(dir.string(), 3, 16);  // small buffer: forces several flushes
        path = s.path();
        trace::sink* old = trace::install(&s);
        for (std::uint64_t i = 0; i < 100; ++i)
            trace::emit(trace::kind::handle_allocated, i, i * 10, i * 100);
        trace::install(old);
        trace::emit(trace::kind::handle_released, 999);  // after uninstall: not recorded
    }
    auto f = trace::read_file(path);
    EXPECT_EQ(f.header.pe, 3u);
    EXPECT_EQ(f.header.version, trace::file_version);
    EXPECT_EQ(f.info.state(), trace::file_state::closed);
    EXPECT_EQ(f.info.progress.events_written, 100u);
    EXPECT_EQ(f.truncated_bytes, 0u);
    ASSERT_EQ(f.events.size(), 100u);
    for (std::uint64_t i = 0; i < 100; ++i) {
        const auto& e = f.events[i];
        EXPECT_EQ(e.kind, static_cast<std::uint16_t>(trace::kind::handle_allocated));
        EXPECT_EQ(e.pe, 3u);
        EXPECT_EQ(e.object, i);
        EXPECT_EQ(e.a, i * 10);
        EXPECT_EQ(e.b, i * 100);
        if (i) {
            EXPECT_GE(e.ts_ns, f.events[i - 1].ts_ns);
        }
    }
    EXPECT_GE(f.events.front().ts_ns, f.header.steady_ref_ns);
}

TEST_F(trace_test, spawned_tasks_leave_lifecycle_events) {
    std::string path;
    {
        trace::sink s(dir.string(), 0);
        path = s.path();
        trace::sink* old = trace::install(&s);
        {
            scheduler sched;
            sync_wait([]() -> task<void> {
                task_scope scope("traced");
                scope.spawn([]() -> task<void> { co_return; }(), "traced-task");
                co_await scope.join();
            }());
        }
        trace::install(old);
    }
    auto f = trace::read_file(path);
    ASSERT_EQ(f.events.size(), 2u);
    EXPECT_EQ(f.events[0].kind, static_cast<std::uint16_t>(trace::kind::task_spawned));
    EXPECT_EQ(f.events[1].kind, static_cast<std::uint16_t>(trace::kind::task_finished));
    EXPECT_EQ(f.events[0].object, f.events[1].object);
}

TEST_F(trace_test, corrupt_and_truncated_files_are_reported) {
    const auto bad = (dir / "bad.bin").string();
    std::ofstream(bad) << "definitely not a trace file, but long enough for a header.....";
    try {
        trace::read_file(bad);
        ADD_FAILURE() << "a bad magic must be rejected";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find(bad), std::string::npos);
        EXPECT_NE(std::string(e.what()).find("bad magic"), std::string::npos);
    }
    std::string path;
    {
        trace::sink s(dir.string(), 1);
        path = s.path();
        s.write(trace::kind::phase_begin, 1, 0, 0);
        s.write(trace::kind::phase_end, 1, 0, 0);
    }
    fs::resize_file(path, fs::file_size(path) - 7);  // tear the last event
    auto f = trace::read_file(path);
    EXPECT_EQ(f.events.size(), 1u);
    EXPECT_EQ(f.truncated_bytes, sizeof(trace::event) - 7);
    EXPECT_THROW(trace::read_file((dir / "missing.bin").string()), std::runtime_error);
}

}  // namespace
}  // namespace coverse::test
