// Trace points: an always-compiled, off-by-default sink of fixed-size events (timestamp,
// PE, kind, object id, two integer arguments). With tracing off an emit is one
// predictable branch on a thread-local pointer; with it on, events are buffered per PE
// (per thread) and written to a binary file `coverse-trace.<pe>.bin`.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace coverse::trace {

/// Every event kind, in one list (coverse-trace reads the same numbers). Append only.
enum class kind : std::uint16_t {
    none = 0,
    task_spawned = 1,       // object: spawn record; a: scope id
    task_failed = 2,        // object: spawn record
    task_finished = 3,      // object: spawn record
    handle_allocated = 16,  // object: handle index; a: bytes; b: protocol
    handle_published = 17,
    handle_get_posted = 18,
    handle_put_done = 19,
    handle_completed = 20,
    handle_released = 21,
    phase_begin = 32,  // object: phase id (start-up phases, barriers)
    phase_end = 33,
    user = 1000,  // first kind free for applications
};

/// One event on disk and in memory: 40 bytes, little-endian host layout.
struct event {
    std::uint64_t ts_ns;  // steady clock, ns
    std::uint32_t pe;
    std::uint16_t kind;
    std::uint16_t flags;
    std::uint64_t object;
    std::uint64_t a;
    std::uint64_t b;
};
static_assert(sizeof(event) == 40, "trace event layout is part of the file format");

/// File header: magic "CVTRACE\0", version, PE, event size, and the clock reference
/// (steady and realtime read together) so a merger can align PEs' clocks.
struct file_header {
    char magic[8];
    std::uint32_t version;
    std::uint32_t pe;
    std::uint32_t event_size;
    std::uint32_t reserved;
    std::uint64_t steady_ref_ns;
    std::uint64_t realtime_ref_ns;
};
static_assert(sizeof(file_header) == 40, "trace header layout is part of the file format");
inline constexpr std::uint32_t file_version = 1;

class sink {
public:
    /// Opens `dir/coverse-trace.<pe>.bin` for writing; throws std::system_error naming the
    /// path if it cannot.
    sink(const std::string& dir, std::uint32_t pe, std::size_t buffer_events = 4096);
    ~sink();  // flushes
    sink(const sink&) = delete;
    sink& operator=(const sink&) = delete;

    void write(kind k, std::uint64_t object, std::uint64_t a, std::uint64_t b) noexcept;
    void flush() noexcept;
    const std::string& path() const noexcept { return _path; }
    std::uint64_t written() const noexcept { return _written; }

private:
    std::string _path;
    std::FILE* _file = nullptr;
    std::uint32_t _pe;
    std::vector<event> _buffer;
    std::uint64_t _written = 0;
};

namespace detail {
inline thread_local sink* current_sink = nullptr;
}

/// Installs `s` as this thread's sink (null turns tracing off); returns the previous one.
inline sink* install(sink* s) noexcept {
    sink* old = detail::current_sink;
    detail::current_sink = s;
    return old;
}
inline bool enabled() noexcept {
    return detail::current_sink != nullptr;
}

/// The trace point. Costs one well-predicted branch while tracing is off.
inline void emit(kind k, std::uint64_t object, std::uint64_t a = 0, std::uint64_t b = 0) noexcept {
    if (sink* s = detail::current_sink) [[unlikely]]
        s->write(k, object, a, b);
}

/// Reads a trace file back (for tools and tests). Throws std::runtime_error naming the
/// file and the byte offset when the header is wrong; a truncated tail is dropped and
/// reported through `truncated_bytes`.
struct file_contents {
    file_header header;
    std::vector<event> events;
    std::uint64_t truncated_bytes = 0;
};
file_contents read_file(const std::string& path);

}  // namespace coverse::trace
