// Trace file format and recorder: the header and its info section round-trip; COVERSE_TRACE*
// settings; stop and ring limits keep the right events and count the dropped ones; the
// writer thread writes in the background, flush() and exit() write what is buffered; the
// reader names file and offset for a damaged header or event and keeps the rest.
#include <sys/wait.h>

#include <chrono>
#include <cstdlib>

#include <coverse/runtime/runtime.hpp>
#include <coverse/runtime/trace_poller.hpp>

#include "trace_test_support.hpp"

namespace coverse::test {
namespace {

using namespace std::chrono_literals;

// Sessions a forked child leaves to its exit path; reachable, so LeakSanitizer is quiet.
trace::session* leaked_session = nullptr;

class trace_format_test : public trace_dir_test {
protected:
    // Records `n` events with object = 0..n-1 as PE `pe` with the given limits.
    trace::file_contents record(std::uint64_t n, trace::record_options o,
                                std::uint64_t* dropped = nullptr, std::uint32_t pe = 0) {
        std::string path;
        {
            trace::session s(pe_info(pe, 1), o);
            path = s.path();
            for (std::uint64_t i = 0; i < n; ++i)
                trace::emit(kind::user, i, i, 0);
            if (dropped) *dropped = s.dropped();
        }
        return trace::read_file(path);
    }
    trace::record_options limited(std::uint64_t events, trace::limit_mode mode,
                                  std::size_t chunk = 4) {
        auto o = opts_for(dir);
        o.limit_bytes = events * sizeof(trace::event);
        o.mode = mode;
        o.chunk_events = chunk;
        return o;
    }
    static std::vector<std::uint64_t> objects(const trace::file_contents& f) {
        std::vector<std::uint64_t> out;
        for (const auto& e : f.events)
            out.push_back(e.object);
        return out;
    }
    static std::vector<std::uint64_t> range(std::uint64_t from, std::uint64_t to) {
        std::vector<std::uint64_t> out;
        for (auto i = from; i < to; ++i)
            out.push_back(i);
        return out;
    }
};

TEST_F(trace_format_test, header_carries_the_session_info_and_clock_reference) {
    trace::session_info info{2, 4, "asio", "cma", "COVERSE_NET_BACKEND=asio\nMEMORY_POOL=1\n"};
    std::string path;
    {
        trace::session s(info, opts_for(dir / "fresh"));  // the directory is created
        path = s.path();
        EXPECT_TRUE(trace::enabled());
        trace::emit(kind::phase_begin, 1);
        trace::emit(kind::phase_end, 1);
        EXPECT_EQ(s.recorded(), 2u);
    }
    EXPECT_FALSE(trace::enabled()) << "the session uninstalls itself";
    EXPECT_EQ(path, (dir / "fresh" / "coverse-trace.2.bin").string());
    const auto f = trace::read_file(path);
    EXPECT_EQ(f.header.version, trace::file_version);
    EXPECT_EQ(f.header.pe, 2u);
    EXPECT_EQ(f.header.header_size % 8, 0u);
    EXPECT_GT(f.header.realtime_ref_ns, 1'500'000'000ull * 1'000'000'000ull);  // after 2017
    EXPECT_EQ(f.info.num_pes, 4u);
    EXPECT_EQ(f.info.backend, "asio");
    EXPECT_EQ(f.info.provider, "cma");
    EXPECT_EQ(f.info.config, info.config);
    EXPECT_FALSE(f.info.host.empty());
    EXPECT_EQ(f.info.pid, static_cast<std::uint32_t>(::getpid()));
    ASSERT_TRUE(f.info.has_limit);
    EXPECT_EQ(f.info.limit.limit_bytes, 256ull << 20);
    EXPECT_EQ(f.info.limit.mode, static_cast<std::uint32_t>(trace::limit_mode::stop));
    ASSERT_TRUE(f.info.has_progress);
    EXPECT_EQ(f.info.state(), trace::file_state::closed);
    EXPECT_EQ(f.info.progress.events_written, 2u);
    EXPECT_EQ(f.info.dropped(), 0u);
    ASSERT_EQ(f.events.size(), 2u);
    EXPECT_GE(f.events[0].ts_ns, f.header.steady_ref_ns);
    EXPECT_GE(f.info.progress.end_ns, f.events[1].ts_ns);
    EXPECT_TRUE(f.error.empty()) << f.error;
}

TEST_F(trace_format_test, settings_come_from_the_environment) {
    ::unsetenv("COVERSE_TRACE");
    EXPECT_EQ(trace::start_from_env(pe_info(0, 1)), nullptr) << "off by default";
    ::setenv("COVERSE_TRACE", (dir / "env").c_str(), 1);
    ::setenv("COVERSE_TRACE_LIMIT", "4K", 1);
    ::setenv("COVERSE_TRACE_MODE", "ring", 1);
    std::string path;
    {
        auto s = trace::start_from_env(pe_info(1, 2));
        ASSERT_NE(s, nullptr);
        path = s->path();
        trace::emit(kind::user, 1);
    }
    const auto f = trace::read_file(path);
    EXPECT_EQ(f.info.limit.limit_bytes, 4096u);
    EXPECT_EQ(f.info.limit.capacity_events, 4096u / 40);
    EXPECT_EQ(f.info.limit.mode, static_cast<std::uint32_t>(trace::limit_mode::ring));
    EXPECT_EQ(f.events.size(), 1u);

    for (const char* ok : {"64M", "1G", "512KiB", "100000", "2MB"}) {
        ::setenv("COVERSE_TRACE_LIMIT", ok, 1);
        EXPECT_NO_THROW(trace::record_options::from_env()) << ok;
    }
    for (const char* bad : {"abc", "12X", "-5", "10", "M"}) {
        ::setenv("COVERSE_TRACE_LIMIT", bad, 1);
        try {
            trace::record_options::from_env();
            ADD_FAILURE() << "COVERSE_TRACE_LIMIT=" << bad << " must be rejected";
        } catch (const std::invalid_argument& e) {
            EXPECT_NE(std::string(e.what()).find("COVERSE_TRACE_LIMIT"), std::string::npos);
        }
    }
    ::setenv("COVERSE_TRACE_LIMIT", "1M", 1);
    ::setenv("COVERSE_TRACE_MODE", "circle", 1);
    EXPECT_THROW(trace::record_options::from_env(), std::invalid_argument);
    ::unsetenv("COVERSE_TRACE");
    ::unsetenv("COVERSE_TRACE_LIMIT");
    ::unsetenv("COVERSE_TRACE_MODE");
}

TEST_F(trace_format_test, an_unusable_directory_is_an_error_naming_it) {
    std::ofstream(dir / "plain-file") << "x";
    const auto bad = (dir / "plain-file" / "traces").string();
    try {
        trace::session s(pe_info(0, 1), opts_for(bad));
        ADD_FAILURE() << "a directory under a file cannot be created";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    }
    EXPECT_FALSE(trace::enabled());
}

TEST_F(trace_format_test, stop_limit_keeps_the_first_events_and_counts_the_rest) {
    std::uint64_t dropped = 0;
    ::testing::internal::CaptureStderr();
    const auto f = record(25, limited(10, trace::limit_mode::stop), &dropped);
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_EQ(objects(f), range(0, 10));
    EXPECT_EQ(dropped, 15u);
    EXPECT_EQ(f.info.progress.dropped_limit, 15u);
    EXPECT_EQ(f.info.progress.dropped_overwritten, 0u);
    EXPECT_EQ(f.info.progress.events_written, 10u);
    // Said once on stderr, with the fix.
    EXPECT_NE(err.find("COVERSE_TRACE_LIMIT"), std::string::npos) << err;
    EXPECT_EQ(err.find("trace limit"), err.rfind("trace limit")) << err;
}

TEST_F(trace_format_test, ring_limit_keeps_the_last_events_in_order) {
    std::uint64_t dropped = 0;
    ::testing::internal::CaptureStderr();
    const auto f = record(25, limited(10, trace::limit_mode::ring), &dropped);
    std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_EQ(objects(f), range(15, 25));
    EXPECT_EQ(dropped, 15u);
    EXPECT_EQ(f.info.progress.dropped_overwritten, 15u);
    EXPECT_EQ(f.info.progress.events_written, 25u);
    EXPECT_NE(err.find("ring mode"), std::string::npos) << err;
    // A chunk longer than the whole ring keeps only its tail.
    ::testing::internal::CaptureStderr();
    EXPECT_EQ(objects(record(20, limited(3, trace::limit_mode::ring, 8))), range(17, 20));
    ::testing::internal::GetCapturedStderr();
    // Exactly full: nothing dropped, nothing said.
    dropped = 1;
    ::testing::internal::CaptureStderr();
    EXPECT_EQ(objects(record(10, limited(10, trace::limit_mode::ring), &dropped)), range(0, 10));
    err = ::testing::internal::GetCapturedStderr();
    EXPECT_EQ(dropped, 0u);
    EXPECT_TRUE(err.empty()) << err;
}

TEST_F(trace_format_test, the_writer_thread_writes_full_chunks_in_the_background) {
    auto o = opts_for(dir);
    o.chunk_events = 4;
    trace::session s(pe_info(0, 1), o);
    for (int i = 0; i < 100; ++i)
        trace::emit(kind::user, static_cast<std::uint64_t>(i));
    // No flush: 25 full chunks go to the writer thread, which writes them by itself.
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    std::size_t n = 0;
    while ((n = trace::read_file(s.path()).events.size()) < 100 &&
           std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(1ms);
    EXPECT_EQ(n, 100u);
}

TEST_F(trace_format_test, flush_writes_what_is_buffered_and_recording_goes_on) {
    trace::session s(pe_info(0, 1), opts_for(dir));  // 16-event chunks
    for (int i = 0; i < 3; ++i)
        trace::emit(kind::user, static_cast<std::uint64_t>(i));
    s.flush();
    auto f = trace::read_file(s.path());
    EXPECT_EQ(objects(f), range(0, 3));
    EXPECT_EQ(f.info.state(), trace::file_state::flushed);
    trace::emit(kind::user, 3);
    s.flush();
    s.flush();  // twice is harmless
    EXPECT_EQ(objects(trace::read_file(s.path())), range(0, 4));
}

TEST_F(trace_format_test, an_idle_scheduler_hands_the_partial_chunk_to_the_writer) {
    trace::session s(pe_info(0, 1), opts_for(dir));  // 16-event chunks: 2 events stay buffered
    scheduler_options so;
    so.spin = std::chrono::microseconds(10);
    scheduler sched(so);
    trace::flush_poller poller(s.recorder());
    sched.add_poller(poller);
    trace::emit(kind::user, 0);
    trace::emit(kind::user, 1);
    // The loop blocks while the task sleeps: try_sleep() hands the chunk off first.
    sync_wait([]() -> task<void> { co_await sleep_for(20ms); }());
    sched.remove_poller(poller);
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    std::size_t n = 0;
    while ((n = trace::read_file(s.path()).events.size()) < 2 &&
           std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(1ms);
    EXPECT_EQ(n, 2u) << "without a flush, the idle hand-off must reach the file";
}

TEST_F(trace_format_test, exit_and_abort_paths_leave_the_buffered_events_in_the_file) {
    // exit(): the session is leaked (never destroyed), the exit hook flushes it.
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        leaked_session = new trace::session(pe_info(5, 1), opts_for(dir));
        trace::emit(kind::user, 1);
        trace::emit(kind::user, 2);
        std::exit(0);
    }
    int status = 0;
    ::waitpid(child, &status, 0);
    ASSERT_TRUE(WIFEXITED(status));
    auto f = trace::read_file((dir / "coverse-trace.5.bin").string());
    EXPECT_EQ(objects(f), (std::vector<std::uint64_t>{1, 2}));
    EXPECT_EQ(f.info.state(), trace::file_state::flushed);

    // CmiAbort: flush(), then the process dies without running anything else.
    const pid_t aborting = ::fork();
    ASSERT_GE(aborting, 0);
    if (aborting == 0) {
        leaked_session = new trace::session(pe_info(6, 1), opts_for(dir));
        trace::emit(kind::user, 7);
        leaked_session->flush();
        ::signal(SIGABRT, SIG_DFL);
        std::abort();
    }
    ::waitpid(aborting, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status));
    EXPECT_EQ(objects(trace::read_file((dir / "coverse-trace.6.bin").string())),
              (std::vector<std::uint64_t>{7}));
}

TEST_F(trace_format_test, threads_acting_as_pes_each_write_their_own_file) {
    std::vector<std::function<void()>> bodies;
    for (int pe = 0; pe < 4; ++pe)
        bodies.push_back([] {
            for (std::uint64_t i = 0; i < 1000; ++i)
                trace::emit(kind::user, i);
        });
    run_pes(dir, bodies);
    for (std::uint32_t pe = 0; pe < 4; ++pe) {
        const auto f = trace::read_file((dir / trace::file_name(pe)).string());
        EXPECT_EQ(f.header.pe, pe);
        EXPECT_EQ(f.info.num_pes, 4u);
        EXPECT_EQ(objects(f), range(0, 1000));
    }
}

TEST_F(trace_format_test, recorded_plus_dropped_is_what_was_emitted_when_the_writer_lags) {
    auto o = opts_for(dir);
    o.chunk_events = 1;
    o.max_chunks = 2;  // the writer can fall behind: events are then dropped and counted
    std::uint64_t recorded = 0, dropped = 0;
    std::string path;
    ::testing::internal::CaptureStderr();
    {
        trace::session s(pe_info(0, 1), o);
        path = s.path();
        for (std::uint64_t i = 0; i < 20000; ++i)
            trace::emit(kind::user, i);
        recorded = s.recorded();
        dropped = s.dropped();
    }
    ::testing::internal::GetCapturedStderr();
    EXPECT_EQ(recorded + dropped, 20000u);
    const auto f = trace::read_file(path);
    EXPECT_EQ(f.events.size(), recorded);
    EXPECT_EQ(f.info.progress.dropped_behind, dropped);
    for (std::size_t i = 1; i < f.events.size(); ++i)
        ASSERT_LT(f.events[i - 1].object, f.events[i].object) << "order kept across chunks";
}

TEST_F(trace_format_test, a_damaged_header_names_the_file_and_offset) {
    const auto write = [&](const std::string& name, const std::string& bytes) {
        const auto p = (dir / name).string();
        std::ofstream(p, std::ios::binary) << bytes;
        return p;
    };
    const auto expect_error = [](const std::string& path, const std::string& what) {
        try {
            trace::read_file(path);
            ADD_FAILURE() << path << " must be rejected";
        } catch (const std::runtime_error& e) {
            const std::string msg = e.what();
            EXPECT_NE(msg.find(path), std::string::npos) << msg;
            EXPECT_NE(msg.find(what), std::string::npos) << msg;
        }
    };
    expect_error(write("short.bin", "CVTRACE"), "at byte 7: file ends inside its 40-byte header");
    expect_error(write("magic.bin", std::string(64, 'x')), "at byte 0: not a coverse trace file");

    raw_file r;
    r.add(10, kind::user, 1);
    const std::string good = read_text(r.write(dir));
    std::string v = good;
    v[8] = 99;  // version
    expect_error(write("version.bin", v), "at byte 8: unsupported trace version 99");
    std::string hs = good;
    hs[20] = static_cast<char>(0xf8);  // header_size 248 + 256*x: past the file's end
    hs[21] = 0x10;
    expect_error(write("hsize.bin", hs), "file ends inside its");
    EXPECT_THROW(trace::read_file((dir / "missing.bin").string()), std::runtime_error);
}

TEST_F(trace_format_test, a_torn_tail_or_bad_event_keeps_everything_else) {
    raw_file r;
    for (std::uint64_t i = 0; i < 5; ++i)
        r.add(10 * i, kind::user, i);
    const auto path = r.write(dir);
    const auto header_size = trace::read_file(path).header.header_size;

    fs::resize_file(path, fs::file_size(path) - 7);
    auto f = trace::read_file(path);
    EXPECT_EQ(objects(f), range(0, 4));
    EXPECT_EQ(f.truncated_bytes, 33u);
    EXPECT_EQ(f.truncated_offset, header_size + 4 * 40u);

    // Event 2 claims another PE: reported with its offset, skipped, the rest kept.
    r.events[2].pe = 9;
    r.write(dir);
    f = trace::read_file(path);
    EXPECT_EQ(objects(f), (std::vector<std::uint64_t>{0, 1, 3, 4}));
    EXPECT_NE(f.error.find(path + " at byte " + std::to_string(header_size + 2 * 40)),
              std::string::npos)
        << f.error;
    EXPECT_NE(f.error.find("PE 9"), std::string::npos) << f.error;
}

TEST_F(trace_format_test, version_1_files_still_read) {
    // The layout before the info section: a 40-byte header with a zero where header_size is.
    raw_file r;
    r.add(5, kind::handle_allocated, 1);
    std::string bytes = read_text(r.write(dir));
    trace::file_header h;
    std::memcpy(&h, bytes.data(), sizeof h);
    const std::string events = bytes.substr(h.header_size);
    h.version = 1;
    h.header_size = 0;
    std::string v1(reinterpret_cast<const char*>(&h), sizeof h);
    const auto path = (dir / "v1.bin").string();
    std::ofstream(path, std::ios::binary) << v1 + events;
    const auto f = trace::read_file(path);
    EXPECT_EQ(f.events.size(), 1u);
    EXPECT_FALSE(f.info.has_progress);
}

}  // namespace
}  // namespace coverse::test
