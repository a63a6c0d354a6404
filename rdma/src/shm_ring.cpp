// shm_ring and shm_doorbell (see shm_ring.hpp): the same-host channel's memory layout, its
// producer/consumer protocol, and the sleep/doorbell handshake.
#include <coverse/rdma/shm_ring.hpp>

#include "shm_names.hpp"

#include <fcntl.h>
#include <linux/membarrier.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>
#include <system_error>
#include <utility>

namespace coverse::rdma {

namespace {

constexpr std::uint32_t ring_magic = 0x3552'5643;  // "CVR5": compact records, a shared-put block
constexpr std::size_t record_header = detail::shm_record_header;
constexpr std::size_t min_capacity = 64 * 1024;

using record_head = detail::shm_record_head;
std::size_t round_record(std::size_t n) noexcept {
    return detail::shm_round_record(n);
}

constexpr std::size_t max_capacity = std::size_t{1} << 30;  // chunks stay far below 4 GiB

std::size_t power_of_two_at_least(std::size_t n) noexcept {
    std::size_t p = min_capacity;
    while (p < n && p < max_capacity)
        p <<= 1;
    return p;
}

[[noreturn]] void fail(int err, const std::string& what) {
    throw std::system_error(err, std::generic_category(), what);
}

}  // namespace

shm_ring::shm_ring(std::string name, void* base, std::size_t bytes) noexcept
    : _name(std::move(name)),
      _h(static_cast<shm_ring_header*>(base)),
      _map_bytes(bytes),
      _cap(_h->capacity),
      _seen_head(_h->head.load(std::memory_order_acquire)) {}

shm_ring::shm_ring(shm_ring&& o) noexcept
    : _name(std::move(o._name)),
      _h(std::exchange(o._h, nullptr)),
      _map_bytes(std::exchange(o._map_bytes, 0)),
      _cap(o._cap),
      _seen_head(o._seen_head),
      _pending_advance(o._pending_advance),
      _linked(std::exchange(o._linked, false)),
      _corrupt(o._corrupt),
      _light_wake(o._light_wake),
      _after_channel(o._after_channel),
      _line_data(std::move(o._line_data)),
      _line_data_tried(o._line_data_tried) {}

shm_ring& shm_ring::operator=(shm_ring&& o) noexcept {
    if (this != &o) {
        this->~shm_ring();
        new (this) shm_ring(std::move(o));
    }
    return *this;
}

shm_ring::~shm_ring() {
    unlink();
    if (_h) ::munmap(_h, _map_bytes);
}

shm_ring shm_ring::create(const std::string& name, std::size_t capacity, shm_sleep_fence fence) {
    const std::size_t cap = power_of_two_at_least(capacity);
    const std::size_t bytes = sizeof(shm_ring_header) + cap;
    const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (const int e = errno; fd < 0)
        fail(e, "cannot create the shared-memory ring " + name +
                    " (is /dev/shm mounted and writable? a stale one from a crashed job "
                    "can be removed; or ++set SHM=off)");
    if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
        const int e = errno;
        ::close(fd);
        ::shm_unlink(name.c_str());
        fail(e, "cannot size the shared-memory ring " + name + " to " + std::to_string(bytes) +
                    " bytes (is /dev/shm full? lower SHM_RING_BYTES or ++set SHM=off)");
    }
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    const int e = errno;
    ::close(fd);
    if (p == MAP_FAILED) {
        ::shm_unlink(name.c_str());
        fail(e, "cannot map the shared-memory ring " + name);
    }
    auto* h = new (p) shm_ring_header{};
    h->tail.store(0, std::memory_order_relaxed);
    h->head.store(0, std::memory_order_relaxed);
    h->consumer_sleeping.store(0, std::memory_order_relaxed);
    h->capacity = cap;
    h->consumer_heavy_fence =
        fence == shm_sleep_fence::automatic && shm_heavy_fence_ready() ? 1u : 0u;
    std::atomic_thread_fence(std::memory_order_release);
    h->magic = ring_magic;
    shm_ring r(name, p, bytes);
    r._linked = true;
    detail::remember_shm_name(name, false);
    return r;
}

shm_ring shm_ring::open(const std::string& name) {
    const int fd = ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
    if (const int e = errno; fd < 0) fail(e, "cannot open the shared-memory ring " + name);
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        const int e = errno;
        ::close(fd);
        fail(e, "cannot inspect the shared-memory ring " + name);
    }
    if (static_cast<std::size_t>(st.st_size) < sizeof(shm_ring_header)) {
        ::close(fd);
        fail(EPROTO, "the shared-memory ring " + name + " is too small to be a coverse ring");
    }
    const auto bytes = static_cast<std::size_t>(st.st_size);
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    const int e = errno;
    ::close(fd);
    if (p == MAP_FAILED) fail(e, "cannot map the shared-memory ring " + name);
    auto* h = static_cast<shm_ring_header*>(p);
    if (h->magic != ring_magic || sizeof(shm_ring_header) + h->capacity != bytes) {
        ::munmap(p, bytes);
        fail(EPROTO, "the shared-memory ring " + name + " is not a coverse ring of this version");
    }
    shm_ring r(name, p, bytes);
    // Without our own registration the consumer's heavy fence would not reach our CPU.
    r._light_wake = h->consumer_heavy_fence != 0 && shm_heavy_fence_ready();
    return r;
}

void shm_ring::unlink() noexcept {
    if (_linked) {
        ::shm_unlink(_name.c_str());
        detail::forget_shm_name(_name);
    }
    _linked = false;
}

void shm_ring::start_line_data() noexcept {
    // What the line starts of the data hold before our first record: zeroed memory in a
    // ring nobody wrote yet, else unknown (each is zeroed before use, as if data).
    const std::size_t words = static_cast<std::size_t>(_cap / line / 64);
    _line_data_tried = true;  // once: a failure is not retried on every write
    _line_data.reset(new (std::nothrow) std::uint64_t[words]);
    if (!_line_data) return;  // then every line start is zeroed before use
    const bool fresh = _h->tail.load(std::memory_order_relaxed) == 0;
    std::fill_n(_line_data.get(), words, fresh ? std::uint64_t{0} : ~std::uint64_t{0});
}

// Inline in try_write: for a small record, a bit cleared or nothing.
inline void shm_ring::note_line_starts(std::uint64_t skip_off, std::uint64_t off,
                                       std::uint64_t rec) noexcept {
    if (!_line_data) [[unlikely]] {
        if (!_line_data_tried) start_line_data();
        if (!_line_data) return;
    }
    // A skip's mark and the record's mark sit at record starts; the line starts strictly
    // inside the record hold its header or message (records never wrap: those lines follow
    // each other in the bitmap).
    if (skip_off != ~std::uint64_t{0} && (skip_off & (line - 1)) == 0) [[unlikely]]
        set_line_start_data(skip_off, false);
    if ((off & (line - 1)) == 0) set_line_start_data(off, false);
    const std::uint64_t first = (off | (line - 1)) + 1;
    if (first < off + rec) [[unlikely]]
        mark_lines_inside(first / line, (off + rec - 1) / line + 1);
}

// Sets the bits of lines [from, to): a record's inside, one word at a time where it can.
void shm_ring::mark_lines_inside(std::uint64_t from, std::uint64_t to) noexcept {
    while (from < to) {
        const std::uint64_t bit = from % 64;
        const std::uint64_t n = std::min<std::uint64_t>(64 - bit, to - from);
        const std::uint64_t bits =
            n == 64 ? ~std::uint64_t{0} : ((std::uint64_t{1} << n) - 1) << bit;
        _line_data[from / 64] |= bits;
        from += n;
    }
}

bool shm_ring::try_write(std::span<const std::byte> chunk, std::uint32_t total, std::uint16_t flags,
                         std::uint32_t tag) noexcept {
    const std::uint64_t cap = _cap;
    if (chunk.size() > max_chunk()) return false;
    if (_after_channel) [[unlikely]]
        flags = static_cast<std::uint16_t>(flags | shm_flags::after_channel);
    // A whole message in one chunk goes as a compact record (its mark says its size); any
    // other record has the full header.
    const bool compact = flags == shm_flags::message && total == chunk.size() && tag == 0 &&
                         chunk.size() < detail::shm_code_skip;
    const std::size_t rec = compact ? round_record(detail::shm_compact_header + chunk.size())
                                    : record_header + round_record(chunk.size());
    std::uint64_t tail = _h->tail.load(std::memory_order_relaxed);  // ours
    std::uint64_t off = tail & (cap - 1);
    const std::uint64_t to_end = cap - off;
    const std::uint64_t need = rec <= to_end ? rec : to_end + rec;
    // The consumer's position as last read: it only moves forward, so the room it leaves
    // is at least this. The shared line is read again only when that room is too small —
    // reading it on every write pulled the line the consumer writes across the cores.
    if (need > cap - (tail - _seen_head)) {
        _seen_head = _h->head.load(std::memory_order_acquire);
        if (need > cap - (tail - _seen_head)) return false;
    }
    // The record, then its mark: everything but the mark first, the mark last with release,
    // so a consumer that reads the mark (acquire) reads the whole record.
    const auto publish = [this](std::uint64_t at_off, std::uint64_t position, std::uint64_t code) {
        std::atomic_ref<std::uint64_t>(*reinterpret_cast<std::uint64_t*>(data() + at_off))
            .store(detail::shm_mark(position, code), std::memory_order_release);
    };
    std::uint64_t skip_at = ~std::uint64_t{0}, skip_position = 0;
    if (rec > to_end) {
        // Records never wrap: a skip's mark sends the consumer to the beginning (to_end >= 16:
        // every size and offset is a multiple of 16). Published after the record behind it,
        // so the consumer never follows a skip to a record not there yet.
        skip_at = off;
        skip_position = tail;
        tail += to_end;
        off = 0;
    }
    std::uint64_t code = chunk.size();
    if (compact) {
        if (!chunk.empty())
            std::memcpy(data() + off + detail::shm_compact_header, chunk.data(), chunk.size());
    } else {
        const record_head head_rec{
            0, static_cast<std::uint32_t>(chunk.size()), total, flags, 0, tag, 0};
        // All but the mark, which the consumer may be polling: publish() stores it atomically.
        constexpr std::size_t after_mark = sizeof head_rec.mark;
        std::memcpy(data() + off + after_mark,
                    reinterpret_cast<const std::byte*>(&head_rec) + after_mark,
                    sizeof head_rec - after_mark);
        if (!chunk.empty()) std::memcpy(data() + off + record_header, chunk.data(), chunk.size());
        code = detail::shm_code_full;
    }
    // The next record's mark, when that space is free, must read "not yet" to a consumer
    // that reaches it before the record: never stale bytes of an earlier lap that happen to
    // look like its mark. Inside this record's last line (a mid-line position) it is zeroed
    // now, ordered before this record's mark; the line is ours already. A position that
    // starts a line is zeroed only when that line's first word last held something other
    // than a mark (a record ran across it): a stale mark names another lap's position and
    // never reads as published, and writing the line early pulled it from the consumer
    // polling it, one cross-core transfer more per line (8 B rate +20-25 % far apart,
    // docs/perf.md stop 28). When the space is not free, it holds the mark of the
    // consumer's oldest record.
    const std::uint64_t next = tail + rec;
    note_line_starts(skip_at, off, rec);
    const std::uint64_t next_off = next & (cap - 1);
    if (next + sizeof(std::uint64_t) - _seen_head <= cap &&
        ((next_off & (line - 1)) != 0 || line_start_may_hold_data(next_off))) {
        std::atomic_ref<std::uint64_t>(*reinterpret_cast<std::uint64_t*>(data() + next_off))
            .store(0, std::memory_order_relaxed);
        if ((next_off & (line - 1)) == 0 && _line_data) set_line_start_data(next_off, false);
    }
    publish(off, tail, code);
    if (skip_at != ~std::uint64_t{0}) publish(skip_at, skip_position, detail::shm_code_skip);
    // The producer's own position, for consumer_caught_up() and a consumer about to sleep.
    _h->tail.store(next, std::memory_order_release);
    _after_channel = false;
    return true;
}

bool shm_ring::take_sleeper() noexcept {
    // Pairs with the consumer's fence before its last look (shm_sleep_fence_now): either it
    // sees our record before it sleeps, or we see it sleeping and wake it. With the heavy
    // fence there, the compiler's order is enough here: the consumer's membarrier runs a
    // full barrier on our CPU between its announcement and its look, so our record is
    // visible to that look or our read comes after the announcement. A full fence per
    // record cost the 8 B rate ~25% (it waits for the record's cache line to arrive).
    if (_light_wake)
        std::atomic_signal_fence(std::memory_order_seq_cst);
    else
        std::atomic_thread_fence(std::memory_order_seq_cst);
    return _h->consumer_sleeping.load(std::memory_order_relaxed) != 0 &&
           _h->consumer_sleeping.exchange(0) != 0;
}

bool shm_ring::empty() const noexcept {
    return _h->head.load(std::memory_order_relaxed) == _h->tail.load(std::memory_order_acquire);
}

bool shm_ring::prepare_sleep() noexcept {
    announce_sleep();
    if (!shm_sleep_fence_now(heavy_sleep_fence())) {
        cancel_sleep();
        return false;
    }
    return sleep_allowed();
}

bool shm_ring::sleep_allowed() noexcept {
    if (!empty()) {
        cancel_sleep();
        return false;
    }
    return true;
}

namespace {
int membarrier(int cmd) noexcept {
    return static_cast<int>(::syscall(__NR_membarrier, cmd, 0u, 0));
}
}  // namespace

bool shm_heavy_fence_ready() noexcept {
    // Once per process: the command must exist, and this process must be registered for it
    // (it then reaches our CPU when another process runs it). A kernel without it, or a
    // sandbox that refuses the call, leaves every ring on full fences.
    // The probe also runs the fence once: a sandbox that lets the registration through but
    // refuses the fence itself would otherwise be found only at a consumer's first sleep.
    static const bool ready = [] {
        const int cmds = membarrier(MEMBARRIER_CMD_QUERY);
        return cmds > 0 && (cmds & MEMBARRIER_CMD_GLOBAL_EXPEDITED) != 0 &&
               (cmds & MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED) != 0 &&
               membarrier(MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED) == 0 &&
               membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) == 0;
    }();
    return ready;
}

bool shm_heavy_fence() noexcept {
    return membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) == 0;
}

bool shm_sleep_fence_now(bool heavy) noexcept {
    if (heavy) return shm_heavy_fence();  // a full barrier here too (the system call)
    std::atomic_thread_fence(std::memory_order_seq_cst);
    return true;
}

void shm_ring::cancel_sleep() noexcept {
    _h->consumer_sleeping.store(0, std::memory_order_relaxed);
}

// ---- doorbell ----------------------------------------------------------------------------

shm_doorbell::shm_doorbell(shm_doorbell&& o) noexcept
    : _path(std::move(o._path)),
      _fd(std::exchange(o._fd, -1)),
      _owner(std::exchange(o._owner, false)),
      _replaced_stale(o._replaced_stale) {}

shm_doorbell& shm_doorbell::operator=(shm_doorbell&& o) noexcept {
    if (this != &o) {
        this->~shm_doorbell();
        new (this) shm_doorbell(std::move(o));
    }
    return *this;
}

shm_doorbell::~shm_doorbell() {
    unlink();
    if (_fd >= 0) ::close(_fd);
}

shm_doorbell shm_doorbell::create(const std::string& path) {
    bool replaced = false;
    if (::mkfifo(path.c_str(), 0600) != 0) {
        int e = errno;
        if (e == EEXIST) {
            // Its owner holds it open to read for as long as it lives, so a write-only open
            // that finds no reader (ENXIO) means the owner is gone: a job of the same key
            // that crashed left it. One that opens belongs to a running process.
            const int probe = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
            if (probe >= 0) {
                ::close(probe);
                fail(EEXIST, "the doorbell FIFO " + path +
                                 " belongs to a running process: another job with the same "
                                 "key runs on this host (PMIx namespace or ++key)");
            }
            if (errno == ENXIO && ::unlink(path.c_str()) == 0 && ::mkfifo(path.c_str(), 0600) == 0)
                replaced = true;
            else
                e = errno;
        }
        if (!replaced)
            fail(e, "cannot create the doorbell FIFO " + path +
                        " (is /dev/shm writable? or ++set SHM=off)");
    }
    // O_RDWR: the FIFO always has a writer, so it never reports end-of-file to our poll.
    const int fd = ::open(path.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        const int e = errno;
        ::unlink(path.c_str());
        fail(e, "cannot open the doorbell FIFO " + path);
    }
    shm_doorbell bell(path, fd, true);
    bell._replaced_stale = replaced;
    detail::remember_shm_name(path, true);
    return bell;
}

shm_doorbell shm_doorbell::open(const std::string& path) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) fail(errno, "cannot open the doorbell FIFO " + path);
    return shm_doorbell(path, fd, false);
}

void shm_doorbell::ring() noexcept {
    // A FIFO whose owner has gone raises SIGPIPE on write, and FIFOs have no MSG_NOSIGNAL:
    // block it around the write and take back one it raised, so a departed peer cannot
    // kill us (its death is reported through its connection and the launcher).
    sigset_t pipe_set, old;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    ::pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
    const char one = 1;
    const ssize_t r = ::write(_fd, &one, 1);  // EAGAIN: full, so already rung
    if (r < 0 && errno == EPIPE) {
        const timespec zero{0, 0};
        ::sigtimedwait(&pipe_set, nullptr, &zero);
    }
    ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

void shm_doorbell::drain() noexcept {
    char buf[256];
    while (::read(_fd, buf, sizeof buf) > 0) {
    }
}

void shm_doorbell::unlink() noexcept {
    if (_owner && !_path.empty()) {
        ::unlink(_path.c_str());
        detail::forget_shm_name(_path);
    }
    _owner = false;
}

}  // namespace coverse::rdma
