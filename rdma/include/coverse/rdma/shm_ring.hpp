// shm_ring: a single-producer single-consumer byte ring in POSIX shared memory, the same-host
// channel between two PEs (one ring per ordered pair). The producer copies a record in and
// publishes it with one release store of the record's own mark; the consumer polls the
// header at its position — no system call on either side, and for a small message one cache
// line crosses the cores: the record itself (a separate published position was a second
// line the consumer had to fetch first, one cross-core transfer more per message). Records
// never wrap: the producer pads the end with a skip record. A consumer that is about to
// sleep says so in the header, and a producer that sees it rings the consumer's doorbell
// (shm_doorbell).
//
// Records (detail below): each starts on a 16-byte boundary with an 8-byte mark, stored
// last with release, that names the record's position in the ring's byte stream and what
// it is: a *compact* record (a whole point-to-point message, its size in the mark, the
// message right after), a *full* record (a 32-byte header whose first word is the mark,
// then one chunk: a chunk of a large message, a broadcast, a control frame) or a *skip*
// (nothing more before the ring's end). A mark left from an earlier lap, stale payload or
// zeroed memory never names the consumer's position, so it never reads as published; the
// producer also zeroes the next record's place when that space is free and its word could
// be anything but a mark (a line start is left alone when it last held one: writing the
// next line early pulled it from a consumer polling it). A message larger than a chunk
// travels as several full records, the first flagged `first`. The producer still publishes
// its position (tail) for itself and for a consumer that asks whether the ring is empty
// before it sleeps.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>

namespace coverse::rdma {

/// A one-sided put or get that the ring's consumer helps copy (rdma/src/shared_put.cpp).
/// The producer's PE writes a large buffer into the consumer's memory (put) or reads one
/// from it (get) in chunks, and both PEs claim chunks from `claim`, so both cores copy. The
/// producer opens a put by writing the fields below, then storing `claim` with release: the put's
/// serial in bits 32..63 and the chunks nobody claimed yet, [front, back), in bits 0..15 (front,
/// from 0) and 16..31 (back, from `chunks`). The producer claims by raising front, the consumer by
/// lowering back, each by compare-and-swap, the consumer only while the serial still names the put
/// it was told about (a stale notice claims nothing).
struct shm_put_share {
    alignas(128) std::atomic<std::uint64_t> claim;
    std::atomic<std::uint32_t> consumer_done;     // chunks the consumer finished, copied or not
    std::atomic<std::uint32_t> consumer_failed;   // 1: a chunk the consumer claimed failed
    std::atomic<std::uint64_t> initiator_memory;  // the producer's buffer, in its address space
    std::atomic<std::uint64_t> target_memory;     // the consumer's, in the consumer's
    std::atomic<std::uint32_t> is_get;            // 1: a get (the bytes go to the producer)
    std::atomic<std::uint64_t> size;
    std::atomic<std::uint64_t> chunk;   // bytes per chunk; the last one may be shorter
    std::atomic<std::uint32_t> chunks;  // how many
};

/// The shared header at the start of a segment. Producer and consumer fields sit in
/// separate 128-byte blocks, not only separate cache lines: the adjacent-line prefetcher
/// fetches lines in aligned pairs, so a consumer writing `head` on the line next to `tail`
/// kept taking the producer's line (8 B facade rate +2-3 %, docs/perf.md stop 26).
struct shm_ring_header {
    alignas(128) std::atomic<std::uint64_t> tail;  // bytes published (producer)
    alignas(128) std::atomic<std::uint64_t> head;  // bytes consumed (consumer)
    alignas(128) std::atomic<std::uint32_t> consumer_sleeping;
    std::uint32_t magic;
    std::uint64_t capacity;  // data bytes, a power of two, after this header
    /// 1: the consumer fences every registered process's CPU before it sleeps
    /// (shm_heavy_fence), so a registered producer needs no fence of its own per record.
    std::uint32_t consumer_heavy_fence;
    shm_put_share put_share;
};

/// How a ring's consumer orders its sleep announcement before its last look at the ring.
enum class shm_sleep_fence {
    automatic,  // a heavy fence (membarrier) where the kernel has it, else a full fence
    full,       // a full fence, which every producer must pair with one per record
};

/// True when this process can fence the CPUs of every cooperating process at once
/// (membarrier's global expedited command; registered at the first call). Then a producer
/// orders its record before its read of the sleep flag with a compiler barrier alone.
bool shm_heavy_fence_ready() noexcept;
/// Runs that fence; false when it failed (then no consumer may rely on it to sleep).
bool shm_heavy_fence() noexcept;
static_assert(std::atomic<std::uint64_t>::is_always_lock_free,
              "the ring needs lock-free 64-bit atomics to be shared between processes");

namespace detail {
/// A record starts with its mark, an 8-byte word stored last, with release: the record's
/// position in the ring's byte stream in 16-byte units, modulo 2^48 - 1, plus one (bits
/// 16..63: never 0, so zeroed memory never reads as a record, and it goes on past 2^52
/// bytes through one ring instead of running out), and what the record is (bits 0..15): below
/// shm_code_skip, a *compact* record, a whole message (shm_flags::message, tag 0) of that many
/// bytes right after the mark; shm_code_full, a 32-byte header (shm_record_head, the mark its first
/// word) and its chunk; shm_code_skip, nothing more before the ring's end.
inline constexpr std::uint64_t shm_code_full = 0xFFFF;
inline constexpr std::uint64_t shm_code_skip = 0xFFFE;
inline constexpr std::size_t shm_compact_header = 8;
/// A full record's 32-byte header.
struct shm_record_head {
    std::uint64_t mark;
    std::uint32_t chunk;
    std::uint32_t total;
    std::uint16_t flags;
    std::uint16_t reserved;
    std::uint32_t tag;
    std::uint64_t reserved2;
};
static_assert(sizeof(shm_record_head) == 32 && offsetof(shm_record_head, mark) == 0);
/// The position field of a mark: 1 .. 2^48 - 1, repeating every 16 (2^48 - 1) bytes, far
/// more than any ring's capacity, so two records a lap or a few laps apart never share it.
constexpr std::uint64_t shm_mark_position(std::uint64_t position) noexcept {
    constexpr std::uint64_t period = (std::uint64_t{1} << 48) - 1;
    return (position >> 4) % period + 1;
}
/// The mark of a record at `position` (a multiple of 16) saying `code`.
constexpr std::uint64_t shm_mark(std::uint64_t position, std::uint64_t code) noexcept {
    return (shm_mark_position(position) << 16) | code;
}
/// True when `mark` is that of a record at `position` (of this lap).
constexpr bool shm_mark_at(std::uint64_t mark, std::uint64_t position) noexcept {
    return (mark >> 16) == shm_mark_position(position);
}
/// Reads a record's mark as the producer published it (acquire).
inline std::uint64_t shm_load_mark(const std::byte* header) noexcept {
    return std::atomic_ref<const std::uint64_t>(*reinterpret_cast<const std::uint64_t*>(header))
        .load(std::memory_order_acquire);
}
inline constexpr std::size_t shm_record_header = sizeof(shm_record_head);
/// Records start on 16-byte boundaries, so a skip's mark always fits at the end; two
/// compact records of a 24-byte message share a cache line.
constexpr std::size_t shm_round_record(std::size_t n) noexcept {
    return (n + 15) & ~std::size_t{15};
}
}  // namespace detail

/// A record as the consumer sees it (views the ring until consume()).
struct shm_record {
    std::span<const std::byte> chunk;
    std::uint32_t total = 0;
    std::uint16_t flags = 0;
    std::uint32_t tag = 0;
};

namespace shm_flags {
inline constexpr std::uint16_t first = 0x1;      // the first chunk of a message
inline constexpr std::uint16_t broadcast = 0x2;  // a spanning-tree broadcast (tag = root)
/// The record follows messages its sender wrote into an eager channel to this PE that the
/// consumer may not have taken yet: it takes those first (the order of docs/rdma.md).
inline constexpr std::uint16_t after_channel = 0x4;
/// Bits 8..12: what the record carries, as a net::frame_type number (0 or 1: a message;
/// publish, get_done, rma_put_request, rma_complete: the rendezvous's control frames).
inline constexpr unsigned type_shift = 8;
inline constexpr std::uint16_t type_mask = 0x1F00;
constexpr std::uint16_t with_type(std::uint16_t flags, std::uint8_t type) noexcept {
    return static_cast<std::uint16_t>(flags | ((type << type_shift) & type_mask));
}
constexpr std::uint8_t type_of(std::uint16_t flags) noexcept {
    return static_cast<std::uint8_t>((flags & type_mask) >> type_shift);
}
/// A whole point-to-point Converse message (net::frame_type::standard, one chunk): with tag
/// 0, the kind a compact record carries.
inline constexpr std::uint16_t message = with_type(first, 1);
}  // namespace shm_flags

/// One mapped ring: created by the consumer, opened by the producer.
class shm_ring {
public:
    /// Creates and maps `/name` with `capacity` data bytes (rounded up to a power of two,
    /// at least 64 KiB, at most 1 GiB). Throws std::system_error naming the object and the fix.
    static shm_ring create(const std::string& name, std::size_t capacity,
                           shm_sleep_fence fence = shm_sleep_fence::automatic);
    /// Maps an existing ring; throws std::system_error naming it.
    static shm_ring open(const std::string& name);
    shm_ring(shm_ring&& o) noexcept;
    shm_ring& operator=(shm_ring&& o) noexcept;
    ~shm_ring();

    /// Removes the name (the mapping stays valid for both sides). Idempotent.
    void unlink() noexcept;
    std::size_t capacity() const noexcept { return static_cast<std::size_t>(_cap); }
    /// The largest chunk one record carries.
    std::size_t max_chunk() const noexcept { return capacity() / 4; }

    // ---- producer ------------------------------------------------------------------------
    /// Copies `chunk` in as one record if it fits now; false when the ring is too full.
    /// The first record written after follow_channel() carries shm_flags::after_channel.
    bool try_write(std::span<const std::byte> chunk, std::uint32_t total, std::uint16_t flags,
                   std::uint32_t tag) noexcept;
    /// True when the consumer has taken every record written so far.
    bool consumer_caught_up() const noexcept {
        return _h->head.load(std::memory_order_acquire) == _h->tail.load(std::memory_order_relaxed);
    }
    /// Like consumer_caught_up(), for a sender asking before every message whether it may
    /// leave the ring. True at once if the consumer's position last read says so; else the
    /// consumer's line (which it keeps writing: each read is a transfer) is read again only
    /// when `look` — the caller's guess that the consumer may have caught up meanwhile.
    bool consumer_caught_up_if(bool look) noexcept {
        const std::uint64_t tail = _h->tail.load(std::memory_order_relaxed);
        if (_seen_head == tail) return true;
        if (!look) return false;
        _seen_head = _h->head.load(std::memory_order_acquire);
        return _seen_head == tail;
    }
    /// The next record written follows messages in an eager channel to the same consumer,
    /// which need not have taken them: it is flagged so (shm_flags::after_channel).
    void follow_channel() noexcept { _after_channel = true; }
    /// Lines a sender in a burst asks for ahead of its position (write_ahead).
    static constexpr std::uint64_t write_ahead_lines = 2;
    /// For a burst (the consumer behind): asks now for the lines the next records will fill,
    /// up to write_ahead_lines past the position's line, if the consumer has left them. Each
    /// such line is still in the consumer's cache from a lap ago, and a store into it waits
    /// for it to come over; the stores behind that one wait too (they leave in order), so a
    /// sender whose path has more stores per message brought fewer lines over at once. Asked
    /// for ahead, the lines come while the sender writes earlier ones: 8 B rate +25-40 %
    /// through the facade, +40-60 % through the coroutine API (docs/perf.md, stop 29). Not
    /// for a lone message (a ping-pong): there the consumer waits at the position, and the
    /// extra transfer made the 8 B ping-pong over the ring ~10 % slower.
    void write_ahead() noexcept {
        const lines_range r =
            lines_ahead(_h->tail.load(std::memory_order_relaxed), _ahead_to, _seen_head, _cap);
        for (std::uint64_t at = r.from; at < r.to; at += line)
            prefetch_for_write(data() + (at & (_cap - 1)));
        _ahead_to = r.to;
    }
    /// Positions [from, to) of whole lines, `from` and `to` multiples of the line size.
    struct lines_range {
        std::uint64_t from, to;
    };
    /// What write_ahead() asks for, at the producer position `tail`, having asked for the
    /// lines before `asked_to`, with the consumer at `head` or past it: the lines after the
    /// tail's line up to write_ahead_lines of them, not asked for yet, and only while the
    /// consumer has finished reading what it held a lap ago.
    static lines_range lines_ahead(std::uint64_t tail, std::uint64_t asked_to, std::uint64_t head,
                                   std::uint64_t cap) noexcept {
        const std::uint64_t next_line = (tail & ~(line - 1)) + line;
        const std::uint64_t from = next_line > asked_to ? next_line : asked_to;
        // The line at `at` held, a lap ago, bytes the consumer is done with once its head
        // passed at + line - cap.
        const std::uint64_t limit = (head + cap) & ~(line - 1);
        std::uint64_t to = next_line + write_ahead_lines * line;
        if (to > limit) to = limit;
        return {from, to > from ? to : from};
    }
    /// The shared-put block of this ring (both sides: the producer opens puts in it).
    shm_put_share& put_share() noexcept { return _h->put_share; }
    /// True when the consumer said it is going to sleep (and clears that): ring its bell.
    bool take_sleeper() noexcept;

    // ---- consumer ------------------------------------------------------------------------
    /// The next record, if one is published (skip records are passed over). nullopt also
    /// when the next record header is impossible (see corrupt()).
    std::optional<shm_record> peek() noexcept {
        if (!readable()) return std::nullopt;  // the idle poll: inline, no call
        return peek_published();
    }
    /// True when a record (or skip record) is published at our position: its mark says so,
    /// in the line the record itself is read from.
    bool readable() noexcept {
        const std::uint64_t head = _h->head.load(std::memory_order_relaxed);  // ours
        return detail::shm_mark_at(detail::shm_load_mark(data() + (head & (_cap - 1))), head);
    }
    /// True once peek() met a record that cannot be (one that would cross the ring's end,
    /// a chunk over max_chunk(), a skip at the ring's start): the producer wrote garbage; the
    /// ring is not read further.
    bool corrupt() const noexcept { return _corrupt; }
    /// Releases the record peek() returned.
    void consume() noexcept {
        const std::uint64_t head = _h->head.load(std::memory_order_relaxed);
        // Release: the producer may reuse the bytes only after we are done reading them.
        _h->head.store(head + _pending_advance, std::memory_order_release);
        _pending_advance = 0;
    }
    bool empty() const noexcept;
    /// Announces sleep; returns false (and takes it back) if a record arrived meanwhile.
    /// announce_sleep(), the fence, sleep_allowed() for one ring.
    bool prepare_sleep() noexcept;
    /// The steps of prepare_sleep(), for a consumer of several rings that fences once for
    /// all of them: announce in each, then shm_sleep_fence_now(), then ask each.
    void announce_sleep() noexcept { _h->consumer_sleeping.store(1, std::memory_order_relaxed); }
    /// After the fence: true if the ring is still empty, else the announcement is taken back.
    bool sleep_allowed() noexcept;
    /// This consumer's sleep fence is the heavy one (its producers do not fence).
    bool heavy_sleep_fence() const noexcept { return _h->consumer_heavy_fence != 0; }
    /// This producer relies on its consumer's heavy fence (take_sleeper has no fence).
    bool light_wake() const noexcept { return _light_wake; }
    void cancel_sleep() noexcept;

private:
    shm_ring(std::string name, void* base, std::size_t bytes) noexcept;
    // Inline, so that a consumer's loop keeps the record in registers (it is read once per
    // message).
    std::optional<shm_record> peek_published() noexcept {
        const std::uint64_t cap = _cap;
        std::uint64_t head = _h->head.load(std::memory_order_relaxed);  // ours
        for (;;) {
            const std::uint64_t off = head & (cap - 1);
            // Published when its mark names this position (acquire: the rest of the record,
            // written before the mark, is visible after it).
            const std::uint64_t mark = detail::shm_load_mark(data() + off);
            if (!detail::shm_mark_at(mark, head)) return std::nullopt;
            const std::uint64_t code = mark & 0xFFFF;
            // The record comes from another process: it must lie inside the ring and its
            // chunk within max_chunk().
            if (code < detail::shm_code_skip) [[likely]] {
                const std::size_t rec = detail::shm_round_record(detail::shm_compact_header + code);
                if (rec > cap - off || code > max_chunk()) [[unlikely]] {
                    _corrupt = true;
                    return std::nullopt;
                }
                _pending_advance = rec;
                return shm_record{
                    std::span<const std::byte>(data() + off + detail::shm_compact_header, code),
                    static_cast<std::uint32_t>(code), shm_flags::message, 0};
            }
            if (code == detail::shm_code_skip) {
                // A skip sends the consumer to the ring's start: at the start itself it
                // would skip a whole lap.
                if (off == 0) [[unlikely]] {
                    _corrupt = true;
                    return std::nullopt;
                }
                head += cap - off;
                _h->head.store(head, std::memory_order_release);
                continue;
            }
            // shm_code_full: a 32-byte header, which must not cross the ring's end.
            if (cap - off < detail::shm_record_header) [[unlikely]] {
                _corrupt = true;
                return std::nullopt;
            }
            detail::shm_record_head r;
            std::memcpy(&r, data() + off, sizeof r);
            const std::size_t rec = detail::shm_record_header + detail::shm_round_record(r.chunk);
            if (rec > cap - off || r.chunk > max_chunk()) [[unlikely]] {
                _corrupt = true;
                return std::nullopt;
            }
            _pending_advance = rec;
            return shm_record{
                std::span<const std::byte>(data() + off + detail::shm_record_header, r.chunk),
                r.total, r.flags, r.tag};
        }
    }
    std::byte* data() const noexcept { return reinterpret_cast<std::byte*>(_h + 1); }
    static constexpr std::uint64_t line = 64;
    // Asks for the cache line at `p` to be brought here to be written (a hint: it never
    // faults, and older x86 processors without PREFETCHW run it as a no-op).
    static void prefetch_for_write(const std::byte* p) noexcept {
#if defined(__x86_64__) || defined(__i386__)
        asm volatile("prefetchw %0" : : "m"(*p));
#else
        __builtin_prefetch(p, 1, 3);
#endif
    }
    // Producer: whether the first word of the line at data offset `off` (a multiple of
    // `line`) last held something other than a mark, so that it could read as a record.
    bool line_start_may_hold_data(std::uint64_t off) const noexcept {
        return !_line_data || (_line_data[off / line / 64] >> (off / line % 64) & 1) != 0;
    }
    void set_line_start_data(std::uint64_t off, bool data) noexcept {
        std::uint64_t& w = _line_data[off / line / 64];
        const std::uint64_t bit = std::uint64_t{1} << (off / line % 64);
        w = data ? w | bit : w & ~bit;
    }
    // Records what a record of `rec` bytes at `off` (and a skip at `skip_off`, or ~0) leaves
    // at the line starts it covers.
    void note_line_starts(std::uint64_t skip_off, std::uint64_t off, std::uint64_t rec) noexcept;
    void start_line_data() noexcept;
    void mark_lines_inside(std::uint64_t from, std::uint64_t to) noexcept;

    std::string _name;
    shm_ring_header* _h = nullptr;
    std::size_t _map_bytes = 0;
    std::uint64_t _cap = 0;              // _h->capacity, checked when mapped; read on every record
    std::uint64_t _seen_head = 0;        // producer: the consumer's head when last read (<= head)
    std::uint64_t _pending_advance = 0;  // consumer: size of the record peek() returned
    bool _linked = false;
    bool _corrupt = false;
    bool _light_wake = false;     // producer: see light_wake()
    bool _after_channel = false;  // producer: see follow_channel()
    std::uint64_t _ahead_to = 0;  // producer: the first position write_ahead() has not asked for
    // Producer: a bit per line of the data, set while its first word holds the inside of a
    // record (line_start_may_hold_data); allocated at the first write.
    std::unique_ptr<std::uint64_t[]> _line_data;
    bool _line_data_tried = false;  // producer: allocated once, or found impossible once
};

/// The fence between a consumer's sleep announcements and its last look at its rings: the
/// heavy one if `heavy` (some ring's producers rely on it), else a full fence. False when the
/// heavy fence failed: the consumer must not sleep then.
bool shm_sleep_fence_now(bool heavy) noexcept;

/// A PE's doorbell: a FIFO in /dev/shm that producers write one byte to when the PE sleeps.
/// The owner polls its fd (with the scheduler's io_uring) and drains it.
class shm_doorbell {
public:
    /// Makes the FIFO. One that a crashed job of the same key left (nobody holds it open
    /// to read) is replaced, and `replaced_stale()` says so; one that a running process
    /// holds is an error naming it. Throws std::system_error.
    static shm_doorbell create(const std::string& path);
    static shm_doorbell open(const std::string& path);  // write side; throws
    bool replaced_stale() const noexcept { return _replaced_stale; }
    shm_doorbell(shm_doorbell&& o) noexcept;
    shm_doorbell& operator=(shm_doorbell&& o) noexcept;
    ~shm_doorbell();
    void ring() noexcept;   // write side: one byte (a full FIFO already wakes the owner)
    void drain() noexcept;  // owner side
    void unlink() noexcept;
    int fd() const noexcept { return _fd; }

private:
    shm_doorbell(std::string path, int fd, bool owner) noexcept
        : _path(std::move(path)), _fd(fd), _owner(owner) {}
    std::string _path;
    int _fd = -1;
    bool _owner = false;
    bool _replaced_stale = false;
};

}  // namespace coverse::rdma
