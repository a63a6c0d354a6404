// Eager channels: a receiver's slots in shared memory that one sender writes messages into
// directly, so the receiver hands the slot's memory to the handler without a copy or an
// allocation. A short channel (EAGER_SHORT_SLOTS slots of EAGER_SHORT_MESSAGE_BOUNDARY) is
// opened by a receiver for a busy sender; a long channel (EAGER_LONG_BUFFERS buffers of
// EAGER_LONG_BUFFER_SIZE or the requested size) backs a persistent handle.
//
// Segment (created by the receiver, mapped by the sender, both sides little-endian):
//   header     {magic, version, slots, capacity, kind, stride, sender PE}   64 bytes
//   delivered  u64 on its own cache line: messages the receiver took
//   freed      slots x u32, from a cache line on: freed[i] is (k + 1) mod 2^32 of the last
//              message a handler freed from slot i (0: none); 16 slots share one line
//   slots      slots x stride bytes, the same layout as a channel written by put (below):
//              [32 bytes for the receiver's alloc header | free | message | footer]
// The receiver writes delivered and freed. The sender reads freed when what it last read
// does not let it write (about once per lap of the slots), and delivered for the order gate,
// for a skip, and for the short channel's drained policy unless the mark of the receiver's
// last message back to it said everything was taken (one-way traffic reads it per message).
//
// Both sides walk the slots in turn. Message k (counting from 0) goes into the next slot
// whose last message was freed; a slot still held by a handler is skipped, and the sender
// says so in that slot's footer (a skip for k), so the receiver walks past it. A footer is
// overwritten only once the receiver passed it (delivered says so). Footer, 16 bytes at the
// slot's end, apart from the message memory a handler holds:
//   @0 u64 word: bits 0..15 the sentinel (data or skip), 16..31 k mod 2^16, 32..63 the size
//                (0 for a skip)
//   @8 u64 mark: bits 0..31 (k + 1) mod 2^32, 32..63 how many messages the writer had taken
//                from the reader's channel to it (mod 2^32: a hint for the reader's sends)
// The sender writes the message, the word, then the mark with a release store; the receiver
// polls the mark of the slot it is at (acquire), then reads the word and the message. A
// message of up to 16 bytes shares its cache line with the footer, so one line crosses the
// cores per message. A mark left from an earlier lap names an earlier message.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace coverse::rdma {

enum class eager_kind : std::uint32_t { short_slots = 1, long_buffers = 2 };

// Footer sentinels. A shared-memory slot is published by its mark and says data or skip;
// a slot written by put says where it stands: ready (never written, or reclaimed), data (a
// message waits), received (a handler holds it), free (the handler freed it).
namespace eager_sentinel {
inline constexpr std::uint16_t ready = 0xA5E1;
inline constexpr std::uint16_t data = 0xDA7A;
inline constexpr std::uint16_t received = 0x2ECD;
inline constexpr std::uint16_t free = 0xF2EE;
inline constexpr std::uint16_t skip = 0x5C1B;  // shared memory: the message is further on
}  // namespace eager_sentinel

/// A footer, decoded and checked.
struct eager_footer {
    std::uint16_t sentinel = eager_sentinel::ready;
    std::uint16_t seq = 0;
    std::uint32_t size = 0;

    static constexpr std::uint64_t encode(std::uint16_t sentinel, std::uint16_t seq,
                                          std::uint32_t size) noexcept {
        return static_cast<std::uint64_t>(size) << 32 | static_cast<std::uint64_t>(seq) << 16 |
               sentinel;
    }
};

/// Why a footer cannot be trusted (empty: it can).
struct eager_footer_error {
    std::string_view what;    // "unknown sentinel", "size beyond the slot"
    std::uint64_t value = 0;  // the offending value
    std::uint64_t limit = 0;  // the bound it broke
    explicit operator bool() const noexcept { return !what.empty(); }
};

/// Decodes a footer word the peer wrote into a slot of `capacity` bytes. A data footer
/// must hold 1..capacity bytes, a skip none; every sentinel must be one of the five.
[[nodiscard]] eager_footer decode_eager_footer(std::uint64_t word, std::uint32_t capacity,
                                               eager_footer_error& error) noexcept;

// ---- channels written by one-sided put (src/eager_put.cpp) -----------------------------
// The receiver's slots are registered memory the sender writes with its provider's put. A
// slot holds its message at its end, right before a 16-byte footer, so that one put of
// [message, slot end) carries both and the footer's last bytes are the last it writes:
//   slot    [32 bytes: the receiver's alloc header | free | message, padded to 16 | footer]
//   footer  @0 u32 after: messages the sender had sent this receiver by the stream path
//                         (frames that carry a message) before this one, mod 2^32
//           @4 u32 reserved, 0
//           @8 u64 word: bits 0..15 seq (mod 2^16), 16..47 size, 48..63 sentinel — the
//                        sentinel in the slot's last two bytes; the sentinels of eager_footer
// Little-endian hosts, like the segment.

/// Bytes of a slot's footer (shared-memory and put channels alike).
inline constexpr std::uint32_t eager_footer_size = 16;

/// Bytes from one slot to the next (shared-memory and put channels alike), for messages of up to
/// `capacity` bytes (at most eager_segment::largest_capacity): a multiple of 64, so every slot
/// starts on a cache line.
constexpr std::uint32_t eager_slot_stride(std::uint32_t capacity) noexcept {
    const std::uint32_t body = (capacity + 15u) / 16u * 16u;
    return (32u + body + eager_footer_size + 63u) / 64u * 64u;
}

/// One of the two 64-bit words of the footer at the end of a slot of `stride` bytes (0 the
/// first, 1 the last), in both kinds of channel.
inline std::atomic_ref<std::uint64_t> eager_footer_at(std::byte* slot, std::uint32_t stride,
                                                      unsigned word) noexcept {
    return std::atomic_ref<std::uint64_t>(
        *reinterpret_cast<std::uint64_t*>(slot + stride - eager_footer_size + 8 * word));
}

/// Where a message of `size` bytes (1..capacity) starts in its slot: 16-byte aligned, its
/// padded end at the footer, and room for the 32-byte alloc header in front of it.
constexpr std::uint32_t eager_message_offset(std::uint32_t stride, std::uint32_t size) noexcept {
    return stride - eager_footer_size - (size + 15u) / 16u * 16u;
}

/// The footer's word: eager_footer's fields, rotated so the sentinel is in its top bits.
constexpr std::uint64_t eager_put_word(std::uint16_t sentinel, std::uint16_t seq,
                                       std::uint32_t size) noexcept {
    const std::uint64_t w = eager_footer::encode(sentinel, seq, size);
    return w >> 16 | w << 48;
}

/// The footer's first eight bytes: `after` and the reserved word.
constexpr std::uint64_t eager_put_head(std::uint32_t after) noexcept {
    return after;
}

struct eager_put_footer {
    eager_footer footer;
    std::uint32_t after = 0;
};

/// Decodes a put slot's footer, its head and its word as the peer wrote them, for a slot of
/// `capacity` bytes: the checks of decode_eager_footer, and the reserved word must be 0.
/// Whether its seq and `after` are the ones expected next is the channel's to judge.
[[nodiscard]] eager_put_footer decode_eager_put_footer(std::uint64_t head, std::uint64_t word,
                                                       std::uint32_t capacity,
                                                       eager_footer_error& error) noexcept;

/// A shared-memory slot's mark for message `k` (see the segment above): (k + 1) mod 2^32,
/// and the writer's count of messages it took from the reader's channel.
constexpr std::uint64_t eager_mark(std::uint64_t k, std::uint64_t taken) noexcept {
    return (taken & 0xFFFF'FFFFu) << 32 | ((k + 1) & 0xFFFF'FFFFu);
}
/// True when `mark` says message `k` is in its slot.
constexpr bool eager_mark_names(std::uint64_t mark, std::uint64_t k) noexcept {
    return ((mark ^ (k + 1)) & 0xFFFF'FFFFu) == 0;
}

struct eager_segment_header {
    std::uint32_t magic;
    std::uint32_t version;
    std::uint32_t slots;
    std::uint32_t capacity;             // message bytes per slot
    std::uint32_t kind;                 // eager_kind
    std::uint32_t stride;               // bytes from one slot to the next
    std::atomic<std::uint32_t> sender;  // receiver-initiated long channels: who attached
    std::atomic<std::uint32_t> attached;
    /// The receiver stopped reading (a bad footer): nothing more it holds will be taken, so
    /// the sender's order gate on this channel is open.
    std::atomic<std::uint32_t> receiver_stopped;
    std::uint8_t pad[28];
    alignas(64) std::atomic<std::uint64_t> delivered;  // messages the receiver took
};
static_assert(sizeof(eager_segment_header) == 128);

/// One mapped channel segment.
class eager_segment {
public:
    static constexpr std::uint32_t magic_value = 0x45414752;  // "EAGR"
    static constexpr std::uint32_t most_slots = 1024;
    static constexpr std::uint32_t largest_capacity = 1u << 30;

    /// Creates and maps `/name` (the receiver). Throws std::system_error naming the object
    /// and the fix (a small /dev/shm).
    static eager_segment create(const std::string& name, eager_kind kind, std::uint32_t slots,
                                std::uint32_t capacity);
    /// Maps an existing segment (the sender) and checks its header against what the open
    /// frame said; throws std::runtime_error naming what does not match.
    static eager_segment open(const std::string& name, std::uint32_t slots, std::uint32_t capacity);
    eager_segment(eager_segment&& o) noexcept;
    eager_segment& operator=(eager_segment&& o) noexcept;
    ~eager_segment();

    void unlink() noexcept;
    eager_segment_header& header() const noexcept { return *_h; }
    std::uint32_t slots() const noexcept { return _slots; }
    std::uint32_t capacity() const noexcept { return _capacity; }
    std::uint32_t stride() const noexcept { return _stride; }
    /// (k + 1) mod 2^32 of the last message a handler freed from slot `i` (0: none).
    std::atomic<std::uint32_t>& freed(std::uint32_t i) const noexcept { return _freed[i]; }
    /// The slot's first byte.
    std::byte* slot(std::uint32_t i) const noexcept {
        return _slots_base + std::size_t{i} * _stride;
    }
    /// The footer's word and mark of slot `i`.
    std::atomic_ref<std::uint64_t> footer_word(std::uint32_t i) const noexcept {
        return eager_footer_at(slot(i), _stride, 0);
    }
    std::atomic_ref<std::uint64_t> footer_mark(std::uint32_t i) const noexcept {
        return eager_footer_at(slot(i), _stride, 1);
    }
    /// Where a message of `size` bytes starts in slot `i`.
    std::byte* message(std::uint32_t i, std::uint32_t size) const noexcept {
        return slot(i) + eager_message_offset(_stride, size);
    }
    /// The slot that holds `p` (a pointer into a slot), or nullopt.
    std::optional<std::uint32_t> slot_of(const void* p) const noexcept;
    std::size_t bytes() const noexcept { return _bytes; }
    const std::string& name() const noexcept { return _name; }

    /// Bytes a segment of `slots` x `capacity` maps.
    static std::size_t size_for(std::uint32_t slots, std::uint32_t capacity) noexcept;

private:
    eager_segment(std::string name, void* base, std::size_t bytes, bool linked) noexcept;
    std::string _name;
    eager_segment_header* _h = nullptr;
    std::atomic<std::uint32_t>* _freed = nullptr;
    std::byte* _slots_base = nullptr;
    std::size_t _bytes = 0;
    std::uint32_t _slots = 0, _capacity = 0, _stride = 0;
    bool _linked = false;
};

}  // namespace coverse::rdma
