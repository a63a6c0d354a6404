// trace: the per-PE recorder (chunks filled by the PE thread, written by a writer thread at
// fixed file offsets), the session that installs it, COVERSE_TRACE* parsing, and the reader.
#include <coverse/runtime/trace.hpp>

#include <coverse/alloc/config.hpp>

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <mutex>
#include <new>
#include <stdexcept>
#include <system_error>
#include <thread>

namespace coverse::trace {

namespace {

constexpr char magic[8] = {'C', 'V', 'T', 'R', 'A', 'C', 'E', '\0'};
constexpr std::size_t max_text_record = 60000;  // keeps a runaway config text bounded

std::uint64_t realtime_ns() noexcept {
    return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                          std::chrono::system_clock::now().time_since_epoch())
                                          .count());
}

std::size_t pad8(std::size_t n) noexcept {
    return (n + 7) & ~std::size_t{7};
}

void append_record(std::vector<unsigned char>& out, info_tag tag, const void* payload,
                   std::size_t length) {
    info_record_header h{static_cast<std::uint16_t>(tag), 0, static_cast<std::uint32_t>(length)};
    const auto at = out.size();
    out.resize(at + sizeof h + pad8(length), 0);
    std::memcpy(out.data() + at, &h, sizeof h);
    if (length) std::memcpy(out.data() + at + sizeof h, payload, length);
}

void append_text(std::vector<unsigned char>& out, info_tag tag, const std::string& text) {
    append_record(out, tag, text.data(), std::min(text.size(), max_text_record));
}

bool pwrite_all(int fd, const void* data, std::size_t n, std::uint64_t offset, int& err) noexcept {
    const auto* p = static_cast<const unsigned char*>(data);
    while (n > 0) {
        const ssize_t w = ::pwrite(fd, p, n, static_cast<off_t>(offset));
        if (w < 0) {
            if (errno == EINTR) continue;
            err = errno;
            return false;
        }
        p += w;
        n -= static_cast<std::size_t>(w);
        offset += static_cast<std::uint64_t>(w);
    }
    return true;
}

// Every live sink, so a plain exit() (which skips destructors of objects on the stack or
// leaked ones) still writes what each PE buffered.
std::mutex live_mu;
// A forked child inherits the list but not the writer threads: it flushes only its own.
std::vector<std::pair<sink*, pid_t>> live_sinks;
std::once_flag exit_hook_once;

// Single-writer counter: only the producer thread increments it.
void bump(std::atomic<std::uint64_t>& c) noexcept {
    c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

void flush_live_sinks_at_exit() {
    std::lock_guard lock(live_mu);
    const pid_t me = ::getpid();
    for (const auto& [s, pid] : live_sinks)
        if (pid == me) s->flush();
}

}  // namespace

std::string protocol_name(unsigned p) {
    switch (p) {
        case 0:
            return "inline";
        case 1:
            return "stream";
        case 2:
            return "rendezvous";
        case 3:
            return "eager short";
        case 4:
            return "eager long";
        default:
            return "protocol " + std::to_string(p);
    }
}

std::string phase_name(std::uint64_t id) {
    switch (id) {
        case 1:
            return "register with launcher";
        case 2:
            return "mesh connect";
        case 3:
            return "start-up barrier";
        case 4:
            return "shutdown handshake";
        case 5:
            return "barrier";
        default:
            return "phase " + std::to_string(id);
    }
}

std::string file_name(std::uint32_t pe) {
    return "coverse-trace." + std::to_string(pe) + ".bin";
}

// ---- settings ----------------------------------------------------------------------------

namespace {

std::uint64_t parse_limit(const std::string& text) {
    const auto bad = [&] {
        return std::invalid_argument(
            "coverse: COVERSE_TRACE_LIMIT=" + text +
            " is not a size; give bytes per PE with an optional K, M or G suffix (KiB, MiB, "
            "GiB), at least 40 (one event), e.g. COVERSE_TRACE_LIMIT=64M");
    };
    const auto parsed = alloc::parse_size(text);  // the settings' one size parser
    if (!parsed) throw bad();
    const std::uint64_t value = *parsed;
    if (value < sizeof(event)) throw bad();
    return value;
}

}  // namespace

std::optional<record_options> record_options::from_env() {
    // Through alloc's env_setting, like every setting: ++set TRACE=DIR, COVERSE_TRACE, ...
    const auto dir = alloc::env_setting("TRACE");
    if (!dir || dir->value.empty()) return std::nullopt;
    record_options o;
    o.dir = dir->value;
    if (const auto v = alloc::env_setting("TRACE_LIMIT"); v && !v->value.empty())
        o.limit_bytes = parse_limit(v->value.c_str());
    if (const auto v = alloc::env_setting("TRACE_MODE"); v && !v->value.empty()) {
        const std::string mode = v->value;
        if (mode == "stop")
            o.mode = limit_mode::stop;
        else if (mode == "ring")
            o.mode = limit_mode::ring;
        else
            throw std::invalid_argument("coverse: COVERSE_TRACE_MODE=" + mode +
                                        " is not a mode; use stop (keep the first events) or "
                                        "ring (keep the last events)");
    }
    return o;
}

// ---- the recorder --------------------------------------------------------------------------

struct sink::state {
    struct chunk {
        std::unique_ptr<event[]> events;
        std::size_t count = 0;
        std::uint64_t first = 0;  // global index of events[0]
    };

    record_options opts;
    std::uint32_t pe = 0;
    std::string path;
    int fd = -1;
    std::uint64_t capacity = 0;  // events the file holds
    std::uint64_t header_size = 0;
    std::uint64_t progress_offset = 0;
    std::thread::id owner;

    // Producer side: touched only by the owner thread.
    chunk* current = nullptr;
    std::uint64_t accepted = 0;  // events in chunks handed to the writer
    bool warned_limit = false;
    bool warned_behind = false;

    // Shared with the writer.
    std::mutex mu;  // full queue, free list, stopping
    std::condition_variable cv;
    std::deque<chunk*> full;
    std::vector<chunk*> free;
    std::vector<std::unique_ptr<chunk>> all;
    bool stopping = false;
    std::atomic<std::size_t> free_count{0};
    std::atomic<std::size_t> allocated{0};  // all.size(), written only by the producer
    // Drop counts. The producer's own are written only by it (a plain store, no locked
    // add on the drop path) and read by the writer and other threads; the writer counts
    // what it could not write separately.
    std::atomic<std::uint64_t> dropped_limit{0}, dropped_no_chunk{0}, dropped_io{0};
    std::atomic<std::uint64_t> handed{0};  // == accepted, readable from any thread

    // Whoever writes the file holds write_mu and pops from `full` while holding it, so
    // chunks reach the file in order even when flush() and the writer thread race.
    std::mutex write_mu;
    std::uint64_t written = 0;  // events put in the file
    bool write_failed = false;
    std::thread writer;

    std::uint64_t behind() const noexcept {
        return dropped_no_chunk.load(std::memory_order_relaxed) +
               dropped_io.load(std::memory_order_relaxed);
    }

    std::uint64_t overwritten(std::uint64_t total) const noexcept {
        return opts.mode == limit_mode::ring && total > capacity ? total - capacity : 0;
    }

    // Hands the producer's current chunk (holding `n` events) to the writer.
    void queue_current(std::size_t n) noexcept {
        current->count = n;
        accepted += n;
        handed.store(accepted, std::memory_order_relaxed);
        if (opts.mode == limit_mode::ring && accepted > capacity && !warned_limit) {
            warned_limit = true;
            std::fprintf(stderr,
                         "coverse: PE %u's trace wrapped at its limit (%llu bytes, ring mode); "
                         "the oldest events are overwritten and counted in %s\n",
                         pe, static_cast<unsigned long long>(opts.limit_bytes), path.c_str());
        }
        queue(current);
        current = nullptr;
    }

    void queue(chunk* c) noexcept {
        {
            std::lock_guard lock(mu);
            full.push_back(c);
        }
        cv.notify_one();
    }

    chunk* take_free() noexcept {
        if (free_count.load(std::memory_order_acquire) > 0) {
            std::lock_guard lock(mu);
            if (!free.empty()) {
                chunk* c = free.back();
                free.pop_back();
                free_count.fetch_sub(1, std::memory_order_relaxed);
                return c;
            }
        }
        // All chunks made and none free: the writer is behind. Checked without the lock,
        // since this is where every event lands while it stays behind.
        if (allocated.load(std::memory_order_relaxed) >= opts.max_chunks) return nullptr;
        std::lock_guard lock(mu);
        try {
            auto c = std::make_unique<chunk>();
            c->events = std::make_unique<event[]>(opts.chunk_events);
            all.push_back(std::move(c));
            allocated.store(all.size(), std::memory_order_relaxed);
            return all.back().get();
        } catch (const std::bad_alloc&) {
            return nullptr;
        }
    }

    void write_chunk(const chunk& c) noexcept {
        if (write_failed) {
            dropped_io.fetch_add(c.count, std::memory_order_relaxed);
            return;
        }
        int err = 0;
        bool ok = true;
        if (opts.mode == limit_mode::stop) {
            ok = pwrite_all(fd, c.events.get(), c.count * sizeof(event),
                            header_size + c.first * sizeof(event), err);
        } else {
            // Event number g lives in slot g % capacity; a chunk longer than the ring keeps
            // only its last `capacity` events.
            std::size_t skip = c.count > capacity ? c.count - capacity : 0;
            std::uint64_t g = c.first + skip;
            std::size_t left = c.count - skip;
            const event* from = c.events.get() + skip;
            while (ok && left > 0) {
                const std::uint64_t slot = g % capacity;
                const std::size_t n =
                    static_cast<std::size_t>(std::min<std::uint64_t>(left, capacity - slot));
                ok = pwrite_all(fd, from, n * sizeof(event), header_size + slot * sizeof(event),
                                err);
                g += n;
                from += n;
                left -= n;
            }
        }
        if (!ok) {
            write_failed = true;
            dropped_io.fetch_add(c.count, std::memory_order_relaxed);
            std::fprintf(stderr,
                         "coverse: PE %u cannot write its trace file %s: %s; tracing of this PE "
                         "stops here (free space in COVERSE_TRACE's directory or lower "
                         "COVERSE_TRACE_LIMIT)\n",
                         pe, path.c_str(), std::strerror(err));
            return;
        }
        written += c.count;
    }

    void write_progress(file_state st) noexcept {
        progress_record p{};
        p.events_written = written;
        p.dropped_limit = dropped_limit.load(std::memory_order_relaxed);
        p.dropped_overwritten = overwritten(written);
        p.dropped_behind = behind();
        p.end_ns = sink::now_ns();
        p.state = static_cast<std::uint32_t>(st);
        int err = 0;
        if (!write_failed) (void)pwrite_all(fd, &p, sizeof p, progress_offset, err);
    }

    // With write_mu held: writes every queued chunk, oldest first, then the progress record.
    void drain(file_state st) noexcept {
        for (;;) {
            chunk* c = nullptr;
            {
                std::lock_guard lock(mu);
                if (full.empty()) break;
                c = full.front();
                full.pop_front();
            }
            write_chunk(*c);
            {
                std::lock_guard lock(mu);
                free.push_back(c);
                free_count.fetch_add(1, std::memory_order_release);
            }
        }
        write_progress(st);
    }

    void writer_loop() noexcept {
        for (;;) {
            {
                std::unique_lock lock(mu);
                cv.wait(lock, [&] { return stopping || !full.empty(); });
                if (full.empty()) return;  // stopping
            }
            std::lock_guard w(write_mu);
            drain(file_state::recording);
        }
    }
};

sink::sink(const session_info& info, const record_options& opts)
    : _pe(info.pe), _s(std::make_unique<state>()) {
    auto& s = *_s;
    s.opts = opts;
    s.pe = info.pe;
    s.owner = std::this_thread::get_id();
    if (s.opts.chunk_events == 0) s.opts.chunk_events = 1;
    if (s.opts.max_chunks < 2) s.opts.max_chunks = 2;
    s.capacity = opts.limit_bytes / sizeof(event);
    if (s.capacity == 0)
        throw std::invalid_argument("coverse: trace limit of " + std::to_string(opts.limit_bytes) +
                                    " bytes holds no 40-byte event; raise COVERSE_TRACE_LIMIT");

    std::error_code ec;
    std::filesystem::create_directories(opts.dir, ec);
    if (ec)
        throw std::system_error(ec, "coverse: cannot create the trace directory " + opts.dir +
                                        " (COVERSE_TRACE must name a directory this process "
                                        "can create and write)");
    _path = (std::filesystem::path(opts.dir) / file_name(info.pe)).string();
    s.path = _path;
    s.fd = ::open(_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (s.fd < 0)
        throw std::system_error(errno, std::generic_category(),
                                "coverse: cannot open trace file " + _path +
                                    " (does COVERSE_TRACE name a writable directory?)");

    // Header: fixed part, then the info section. The progress record's offset is kept so
    // the writer can rewrite it in place.
    std::vector<unsigned char> buf(sizeof(file_header));
    const std::uint32_t pes[2] = {info.num_pes, 0};
    append_record(buf, info_tag::pes, pes, sizeof pes);
    append_text(buf, info_tag::backend, info.backend);
    append_text(buf, info_tag::provider, info.provider);
    append_text(buf, info_tag::config, info.config);
    char host[256] = {};
    if (::gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
    append_text(buf, info_tag::host, host);
    const std::uint32_t proc[2] = {static_cast<std::uint32_t>(::getpid()), 0};
    append_record(buf, info_tag::process, proc, sizeof proc);
    const limit_record lim{opts.limit_bytes, s.capacity, static_cast<std::uint32_t>(opts.mode),
                           static_cast<std::uint32_t>(s.opts.chunk_events)};
    append_record(buf, info_tag::limit, &lim, sizeof lim);
    s.progress_offset = buf.size() + sizeof(info_record_header);
    const progress_record prog{};
    append_record(buf, info_tag::progress, &prog, sizeof prog);
    s.header_size = buf.size();

    file_header h{};
    std::memcpy(h.magic, magic, sizeof magic);
    h.version = file_version;
    h.pe = info.pe;
    h.event_size = sizeof(event);
    h.header_size = static_cast<std::uint32_t>(s.header_size);
    // Read the steady clock on both sides of the realtime read and take the middle: the
    // pair then disagrees by at most half the (tens of ns) gap.
    const std::uint64_t before = now_ns();
    h.realtime_ref_ns = realtime_ns();
    const std::uint64_t after = now_ns();
    h.steady_ref_ns = before + (after - before) / 2;
    std::memcpy(buf.data(), &h, sizeof h);
    int err = 0;
    if (!pwrite_all(s.fd, buf.data(), buf.size(), 0, err)) {
        ::close(s.fd);
        throw std::system_error(err, std::generic_category(),
                                "coverse: cannot write the trace file header of " + _path);
    }

    s.all.reserve(s.opts.max_chunks);
    // Known to the exit hook from here on; nothing below throws once the writer runs.
    try {
        std::call_once(exit_hook_once, [] { std::atexit(flush_live_sinks_at_exit); });
        std::lock_guard lock(live_mu);
        live_sinks.emplace_back(this, ::getpid());
    } catch (...) {
        ::close(s.fd);
        throw;
    }
    // The writer must not take the application's signals (a SIGINT handler that calls
    // CmiAbort belongs on the PE thread): it starts with every signal blocked.
    sigset_t all_signals, old;
    sigfillset(&all_signals);
    pthread_sigmask(SIG_SETMASK, &all_signals, &old);
    try {
        s.writer = std::thread([st = _s.get()] { st->writer_loop(); });
    } catch (...) {
        pthread_sigmask(SIG_SETMASK, &old, nullptr);
        {
            std::lock_guard lock(live_mu);
            std::erase_if(live_sinks, [this](const auto& e) { return e.first == this; });
        }
        ::close(s.fd);
        throw;
    }
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    pthread_setname_np(s.writer.native_handle(), "coverse-trace");
}

sink::sink(const std::string& dir, std::uint32_t pe, std::size_t chunk_events)
    : sink(session_info{pe, 1, "", "", ""}, [&] {
          record_options o;
          o.dir = dir;
          o.chunk_events = chunk_events;
          return o;
      }()) {}

sink::~sink() {
    {
        std::lock_guard lock(live_mu);
        std::erase_if(live_sinks, [this](const auto& e) { return e.first == this; });
    }
    auto& s = *_s;
    if (std::this_thread::get_id() == s.owner) hand_off();
    {
        std::lock_guard lock(s.mu);
        s.stopping = true;
    }
    s.cv.notify_one();
    s.writer.join();
    {
        std::lock_guard w(s.write_mu);
        s.drain(file_state::closed);
    }
    ::close(s.fd);
}

void sink::overflow() noexcept {
    auto& s = *_s;
    if (_end == &_scratch + 1) {
        // The event is in the scratch slot: move it into a chunk, or drop it.
        const event e = _scratch;
        to_scratch();
        if (!acquire_chunk(true)) return;
        *_cursor = e;
        if (++_cursor == _end) overflow();  // a one-event chunk (the limit's last slot)
        return;
    }
    // The current chunk is full: to the writer with it, then on to a fresh one.
    s.queue_current(static_cast<std::size_t>(_cursor - s.current->events.get()));
    to_scratch();
    (void)acquire_chunk(false);  // failing here drops nothing yet: the next event will tell
}

// Points _cursor/_end at a fresh chunk. False when the limit (stop mode) or the writer
// (no free chunk) does not allow one; `dropping` counts the caller's event as dropped.
bool sink::acquire_chunk(bool dropping) noexcept {
    auto& s = *_s;
    std::size_t usable = s.opts.chunk_events;
    if (s.opts.mode == limit_mode::stop) {
        if (s.accepted >= s.capacity) {
            if (dropping) bump(s.dropped_limit);
            if (!s.warned_limit) {
                s.warned_limit = true;
                std::fprintf(stderr,
                             "coverse: PE %u reached its trace limit (%llu bytes, stop mode); "
                             "later events are dropped and counted in %s. Raise "
                             "COVERSE_TRACE_LIMIT or set COVERSE_TRACE_MODE=ring to keep the "
                             "last events instead\n",
                             s.pe, static_cast<unsigned long long>(s.opts.limit_bytes),
                             s.path.c_str());
            }
            return false;
        }
        usable = static_cast<std::size_t>(std::min<std::uint64_t>(usable, s.capacity - s.accepted));
    }
    s.current = s.take_free();
    if (!s.current) {
        if (dropping) bump(s.dropped_no_chunk);
        if (!s.warned_behind) {
            s.warned_behind = true;
            std::fprintf(stderr,
                         "coverse: PE %u records trace events faster than %s is written; "
                         "events are dropped and counted until the writer catches up\n",
                         s.pe, s.path.c_str());
        }
        return false;
    }
    s.current->first = s.accepted;
    s.current->count = 0;
    _cursor = s.current->events.get();
    _end = _cursor + usable;
    return true;
}

void sink::hand_off() noexcept {
    auto& s = *_s;
    if (!s.current || _cursor == s.current->events.get()) return;
    s.queue_current(static_cast<std::size_t>(_cursor - s.current->events.get()));
    to_scratch();  // the next event takes a fresh chunk
}

void sink::hand_off_if_older(std::chrono::nanoseconds age) noexcept {
    auto& s = *_s;
    if (!s.current || _cursor == s.current->events.get()) return;
    if (now_ns() - s.current->events[0].ts_ns >= static_cast<std::uint64_t>(age.count()))
        hand_off();
}

void sink::flush() noexcept {
    auto& s = *_s;
    if (std::this_thread::get_id() == s.owner) hand_off();
    std::lock_guard w(s.write_mu);
    s.drain(file_state::flushed);
}

std::uint64_t sink::recorded() const noexcept {
    auto& s = *_s;
    std::uint64_t n = s.handed.load(std::memory_order_relaxed);
    if (std::this_thread::get_id() == s.owner && s.current)
        n += static_cast<std::uint64_t>(_cursor - s.current->events.get());
    return n;
}

std::uint64_t sink::dropped() const noexcept {
    auto& s = *_s;
    return s.dropped_limit.load(std::memory_order_relaxed) + s.behind() + s.overwritten(recorded());
}

// ---- session -------------------------------------------------------------------------------

session::session(const session_info& info, const record_options& opts)
    : _sink(info, opts), _previous(install(&_sink)) {}

session::~session() {
    install(_previous);
}

std::unique_ptr<session> start_from_env(const session_info& info) {
    auto opts = record_options::from_env();
    if (!opts) return nullptr;
    return std::make_unique<session>(info, *opts);
}

// ---- reader --------------------------------------------------------------------------------

namespace {

std::string at(const std::string& path, std::uint64_t offset) {
    return path + " at byte " + std::to_string(offset) + ": ";
}

// Decodes the info section; returns "" or what was wrong (the caller adds file and offset).
std::string read_info(const std::vector<unsigned char>& bytes, std::uint64_t header_size,
                      file_info& info, std::uint64_t& bad_offset) {
    std::uint64_t off = sizeof(file_header);
    while (off + sizeof(info_record_header) <= header_size) {
        info_record_header h;
        std::memcpy(&h, bytes.data() + off, sizeof h);
        const std::uint64_t payload = off + sizeof h;
        if (h.tag == static_cast<std::uint16_t>(info_tag::end)) return "";
        if (payload + h.length > header_size) {
            bad_offset = off;
            return "info record (tag " + std::to_string(h.tag) + ", " + std::to_string(h.length) +
                   " bytes) runs past the " + std::to_string(header_size) + "-byte header";
        }
        const unsigned char* p = bytes.data() + payload;
        const auto text = [&] { return std::string(reinterpret_cast<const char*>(p), h.length); };
        const auto fixed = [&](void* out, std::size_t size) {
            if (h.length < size) return false;
            std::memcpy(out, p, size);
            return true;
        };
        bool ok = true;
        switch (static_cast<info_tag>(h.tag)) {
            case info_tag::pes:
                ok = fixed(&info.num_pes, sizeof info.num_pes);
                break;
            case info_tag::backend:
                info.backend = text();
                break;
            case info_tag::provider:
                info.provider = text();
                break;
            case info_tag::config:
                info.config = text();
                break;
            case info_tag::host:
                info.host = text();
                break;
            case info_tag::process:
                ok = fixed(&info.pid, sizeof info.pid);
                break;
            case info_tag::limit:
                ok = info.has_limit = fixed(&info.limit, sizeof info.limit);
                break;
            case info_tag::progress:
                ok = info.has_progress = fixed(&info.progress, sizeof info.progress);
                break;
            default:
                break;  // a newer writer's record: skip
        }
        if (!ok) {
            bad_offset = off;
            return "info record (tag " + std::to_string(h.tag) + ") is too short (" +
                   std::to_string(h.length) + " bytes)";
        }
        off = payload + pad8(h.length);
    }
    return "";
}

}  // namespace

file_contents read_file(const std::string& path) {
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (!f)
        throw std::runtime_error("coverse-trace: cannot open " + path + ": " +
                                 std::strerror(errno));
    std::vector<unsigned char> bytes;
    {
        unsigned char buf[1 << 16];
        std::size_t n;
        while ((n = std::fread(buf, 1, sizeof buf, f)) > 0)
            bytes.insert(bytes.end(), buf, buf + n);
        const bool failed = std::ferror(f);
        std::fclose(f);
        if (failed)
            throw std::runtime_error("coverse-trace: cannot read " + path + " (after byte " +
                                     std::to_string(bytes.size()) + ")");
    }
    const auto fail = [&](std::uint64_t offset, const std::string& what) {
        throw std::runtime_error("coverse-trace: " + at(path, offset) + what);
    };

    file_contents out{};
    if (bytes.size() < sizeof(file_header))
        fail(bytes.size(),
             "file ends inside its 40-byte header (" + std::to_string(bytes.size()) + " bytes)");
    std::memcpy(&out.header, bytes.data(), sizeof out.header);
    if (std::memcmp(out.header.magic, magic, sizeof magic) != 0)
        fail(0, "not a coverse trace file (bad magic)");
    if (out.header.version != 1 && out.header.version != file_version)
        fail(8, "unsupported trace version " + std::to_string(out.header.version) +
                    " (this reader knows 1 and " + std::to_string(file_version) + ")");
    if (out.header.event_size != sizeof(event))
        fail(16, "event size " + std::to_string(out.header.event_size) + ", expected 40");
    std::uint64_t header_size = sizeof(file_header);
    if (out.header.version >= 2) {
        header_size = out.header.header_size;
        if (header_size < sizeof(file_header) || header_size % 8 != 0 || header_size > (1u << 20))
            fail(20, "header size " + std::to_string(header_size) +
                         " is not a multiple of 8 between 40 and 1 MiB");
        if (header_size > bytes.size())
            fail(bytes.size(),
                 "file ends inside its " + std::to_string(header_size) + "-byte header");
        std::uint64_t bad = 0;
        if (auto why = read_info(bytes, header_size, out.info, bad); !why.empty())
            out.error = "coverse-trace: " + at(path, bad) + why;
    } else {
        out.header.header_size = 0;
    }

    const std::uint64_t body = bytes.size() - header_size;
    std::uint64_t n = body / sizeof(event);
    out.truncated_bytes = body % sizeof(event);
    if (out.truncated_bytes) out.truncated_offset = header_size + n * sizeof(event);

    // Slot order: a ring that wrapped starts at its oldest slot.
    std::uint64_t first_slot = 0;
    const auto& info = out.info;
    if (info.has_limit && info.limit.mode == static_cast<std::uint32_t>(limit_mode::ring) &&
        info.limit.capacity_events > 0) {
        n = std::min<std::uint64_t>(n, info.limit.capacity_events);
        if (info.has_progress && info.progress.events_written > n && n > 0)
            first_slot = info.progress.events_written % n;
    }
    out.events.reserve(static_cast<std::size_t>(n));
    std::uint64_t bad_events = 0, first_bad = 0;
    std::string first_why;
    for (std::uint64_t i = 0; i < n; ++i) {
        const std::uint64_t slot = (first_slot + i) % n;
        const std::uint64_t off = header_size + slot * sizeof(event);
        event e;
        std::memcpy(&e, bytes.data() + off, sizeof e);
        std::string why;
        if (e.kind == 0)
            why = "event of kind 0 (a hole of zeros, or not an event)";
        else if (e.pe != out.header.pe)
            why = "event names PE " + std::to_string(e.pe) + ", the header PE " +
                  std::to_string(out.header.pe);
        else if (e.ts_ns < out.header.steady_ref_ns)
            why = "event is older than the file's clock reference";
        if (!why.empty()) {
            if (bad_events++ == 0) {
                first_bad = off;
                first_why = why;
            }
            continue;
        }
        out.events.push_back(e);
    }
    if (bad_events) {
        std::string msg = "coverse-trace: " + at(path, first_bad) + first_why + "; skipped " +
                          std::to_string(bad_events) + " bad event(s), kept " +
                          std::to_string(out.events.size());
        out.error = out.error.empty() ? msg : out.error + "\n" + msg;
    }
    // One PE's events come from one thread reading a steady clock, so time order is file
    // order; sorting repairs a ring whose progress record lagged behind its data.
    std::stable_sort(out.events.begin(), out.events.end(),
                     [](const event& x, const event& y) { return x.ts_ns < y.ts_ns; });
    return out;
}

}  // namespace coverse::trace
