// Tests of shm_ring and shm_doorbell: records round-trip in order with their fields and bytes
// (edge sizes, wrap-around, a full ring, another thread or process), the sleep handshake,
// errors that name the object, the doorbell FIFO, and what moves and destructors unlink.
#include <coverse/rdma/eager.hpp>
#include <coverse/rdma/shm_ring.hpp>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

namespace coverse::rdma {
namespace {

constexpr std::size_t min_capacity = 64 * 1024;

std::string unique_suffix() {
    static std::atomic<int> counter{0};
    return std::to_string(::getpid()) + "-" + std::to_string(counter.fetch_add(1));
}

// A shm name no other run uses, removed when the test ends however it ends.
struct shm_name {
    std::string name = "/coverse-test-" + unique_suffix();
    shm_name() = default;
    shm_name(const shm_name&) = delete;
    shm_name& operator=(const shm_name&) = delete;
    ~shm_name() { ::shm_unlink(name.c_str()); }
};

// A doorbell path under /dev/shm, removed when the test ends.
struct fifo_path {
    std::string path = "/dev/shm/coverse-test-bell-" + unique_suffix();
    fifo_path() = default;
    fifo_path(const fifo_path&) = delete;
    fifo_path& operator=(const fifo_path&) = delete;
    ~fifo_path() { ::unlink(path.c_str()); }
};

// A mapping of our own of a ring's data, to write what a faulty producer would; unmapped when
// the test ends. `data` is null when the mapping failed.
struct ring_data_mapping {
    void* base = MAP_FAILED;
    std::size_t bytes = 0;
    std::byte* data = nullptr;
    ring_data_mapping(const std::string& name, std::size_t capacity)
        : bytes(sizeof(shm_ring_header) + capacity) {
        const int fd = ::shm_open(name.c_str(), O_RDWR, 0);
        if (fd < 0) return;
        base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        ::close(fd);
        if (base != MAP_FAILED) data = static_cast<std::byte*>(base) + sizeof(shm_ring_header);
    }
    ring_data_mapping(const ring_data_mapping&) = delete;
    ring_data_mapping& operator=(const ring_data_mapping&) = delete;
    ~ring_data_mapping() {
        if (base != MAP_FAILED) ::munmap(base, bytes);
    }
};

bool shm_exists(const std::string& name) {
    const int fd = ::shm_open(name.c_str(), O_RDONLY, 0);
    if (fd < 0) return false;
    ::close(fd);
    return true;
}

bool path_exists(const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0;
}

bool contains(const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos;
}

// Bytes of record `seq`: the sequence number first (when it fits), then a pattern of seq.
std::vector<std::byte> record_bytes(std::uint64_t seq, std::size_t size) {
    std::vector<std::byte> out(size);
    for (std::size_t i = 0; i < size; ++i)
        out[i] = static_cast<std::byte>((seq * 131 + i * 7 + 3) & 0xff);
    if (size >= sizeof seq) std::memcpy(out.data(), &seq, sizeof seq);
    return out;
}

bool same_bytes(std::span<const std::byte> a, std::span<const std::byte> b) {
    return std::ranges::equal(a, b);
}

// Bytes a record of `chunk` bytes takes in the ring: a compact one its 8-byte mark and the
// chunk, a full one its 32-byte header and the chunk, rounded up to 16.
std::size_t record_size(std::size_t chunk, bool compact) {
    return compact ? (8 + chunk + 15) / 16 * 16 : 32 + (chunk + 15) / 16 * 16;
}

// Runs `f` expecting std::system_error; returns it (or nullopt if nothing was thrown).
std::optional<std::system_error> thrown_by(const std::function<void()>& f) {
    try {
        f();
    } catch (const std::system_error& e) {
        return e;
    }
    return std::nullopt;
}

// ---- round trip --------------------------------------------------------------------------

TEST(shm_ring, capacity_is_a_power_of_two_of_at_least_64_kib) {
    for (const auto& [asked, expected] :
         std::vector<std::pair<std::size_t, std::size_t>>{{0, min_capacity},
                                                          {1, min_capacity},
                                                          {min_capacity, min_capacity},
                                                          {min_capacity + 1, 2 * min_capacity},
                                                          {100'000, 128 * 1024}}) {
        SCOPED_TRACE(asked);
        shm_name n;
        auto consumer = shm_ring::create(n.name, asked);
        auto producer = shm_ring::open(n.name);
        EXPECT_EQ(consumer.capacity(), expected);
        EXPECT_EQ(producer.capacity(), expected);
        EXPECT_EQ(producer.max_chunk(), expected / 4);
    }
}

TEST(shm_ring, records_round_trip_in_order_with_fields_and_bytes) {
    shm_name n;
    auto consumer = shm_ring::create(n.name, min_capacity);
    auto producer = shm_ring::open(n.name);
    EXPECT_TRUE(consumer.empty());
    EXPECT_FALSE(consumer.peek().has_value());

    const std::vector<std::size_t> sizes{0, 1, 15, 16, 17, 1000, producer.max_chunk()};
    const std::vector<std::uint16_t> flags{
        shm_flags::first, 0, shm_flags::broadcast, shm_flags::first | shm_flags::broadcast,
        0x7ff0,           0, shm_flags::first};
    ASSERT_EQ(sizes.size(), flags.size());
    for (std::size_t i = 0; i < sizes.size(); ++i) {
        const auto b = record_bytes(i, sizes[i]);
        ASSERT_TRUE(producer.try_write(b, static_cast<std::uint32_t>(sizes[i] + 1000 * i), flags[i],
                                       0xC0DE'0000u + static_cast<std::uint32_t>(i)))
            << "size " << sizes[i];
    }
    EXPECT_FALSE(consumer.empty());

    for (std::size_t i = 0; i < sizes.size(); ++i) {
        SCOPED_TRACE("record " + std::to_string(i) + " of " + std::to_string(sizes[i]) + " bytes");
        auto r = consumer.peek();
        ASSERT_TRUE(r.has_value());
        EXPECT_EQ(r->chunk.size(), sizes[i]);
        EXPECT_TRUE(same_bytes(r->chunk, record_bytes(i, sizes[i])));
        EXPECT_EQ(r->total, sizes[i] + 1000 * i);
        EXPECT_EQ(r->flags, flags[i]);
        EXPECT_EQ(r->tag, 0xC0DE'0000u + i);
        // Until consume(), peek() keeps returning the same record.
        auto again = consumer.peek();
        ASSERT_TRUE(again.has_value());
        EXPECT_EQ(again->chunk.data(), r->chunk.data());
        EXPECT_EQ(again->tag, r->tag);
        consumer.consume();
    }
    EXPECT_TRUE(consumer.empty());
    EXPECT_FALSE(consumer.peek().has_value());
}

TEST(shm_ring, a_chunk_over_max_chunk_is_refused_even_on_an_empty_ring) {
    shm_name n;
    auto consumer = shm_ring::create(n.name, min_capacity);
    auto producer = shm_ring::open(n.name);
    const std::vector<std::byte> big(producer.max_chunk() + 1, std::byte{0x5a});
    EXPECT_FALSE(
        producer.try_write(big, static_cast<std::uint32_t>(big.size()), shm_flags::first, 1));
    EXPECT_TRUE(consumer.empty());
    EXPECT_FALSE(consumer.peek().has_value());
    // The refusal leaves the ring usable.
    const auto b = record_bytes(7, producer.max_chunk());
    ASSERT_TRUE(producer.try_write(b, 1, shm_flags::first, 2));
    auto r = consumer.peek();
    ASSERT_TRUE(r.has_value());
    EXPECT_TRUE(same_bytes(r->chunk, b));
    EXPECT_EQ(r->tag, 2u);
}

// ---- wrap-around -------------------------------------------------------------------------

// The flags and tag record `seq` is written with: a compact record is a whole message with
// tag 0 (shm_flags::message), anything else has the full header (here: tag seq).
std::uint16_t flags_of(bool compact) {
    return compact ? shm_flags::message : shm_flags::first;
}
std::uint32_t tag_of(std::uint64_t seq, bool compact) {
    return compact ? 0 : static_cast<std::uint32_t>(seq);
}

// The consumer's side of the ring tests: checks that the next record is `seq` of `size` bytes.
::testing::AssertionResult next_is(shm_ring& consumer, std::uint64_t seq, std::size_t size,
                                   bool compact = false) {
    auto r = consumer.peek();
    if (!r) return ::testing::AssertionFailure() << "no record; expected seq " << seq;
    if (r->chunk.size() != size || r->total != size || r->flags != flags_of(compact) ||
        r->tag != tag_of(seq, compact))
        return ::testing::AssertionFailure()
               << "record " << seq << ": chunk " << r->chunk.size() << " total " << r->total
               << " flags " << r->flags << " tag " << r->tag << "; expected size " << size;
    if (!same_bytes(r->chunk, record_bytes(seq, size)))
        return ::testing::AssertionFailure() << "record " << seq << ": bytes differ";
    consumer.consume();
    return ::testing::AssertionSuccess();
}

bool write_seq(shm_ring& producer, std::uint64_t seq, std::size_t size, bool compact = false) {
    const auto b = record_bytes(seq, size);
    return producer.try_write(b, static_cast<std::uint32_t>(size), flags_of(compact),
                              tag_of(seq, compact));
}

TEST(shm_ring, awkward_sizes_wrap_many_times_and_skip_records_stay_invisible) {
    shm_name n;
    auto consumer = shm_ring::create(n.name, min_capacity);
    auto producer = shm_ring::open(n.name);
    ASSERT_EQ(consumer.capacity(), min_capacity);

    std::mt19937 rng(20240611);
    std::uniform_int_distribution<std::size_t> size_of(1, 5000);
    std::uniform_int_distribution<int> batch(1, 24);
    std::deque<std::size_t> in_flight;  // sizes of written, unconsumed records
    std::uint64_t next_write = 0;
    std::uint64_t next_read = 0;
    std::uint64_t ring_bytes = 0;
    std::size_t pending_size = size_of(rng);
    constexpr std::uint64_t records = 30'000;

    while (next_read < records) {
        for (int k = batch(rng); k > 0 && next_write < records; --k) {
            if (!write_seq(producer, next_write, pending_size, next_write % 2 == 1)) break;
            in_flight.push_back(pending_size);
            ring_bytes += record_size(pending_size, next_write % 2 == 1);
            ++next_write;
            pending_size = size_of(rng);
        }
        for (int k = batch(rng); k > 0 && !in_flight.empty(); --k) {
            ASSERT_TRUE(next_is(consumer, next_read, in_flight.front(), next_read % 2 == 1));
            in_flight.pop_front();
            ++next_read;
        }
        if (in_flight.empty()) {
            EXPECT_TRUE(consumer.empty());
            EXPECT_FALSE(consumer.peek().has_value());
        }
    }
    EXPECT_TRUE(consumer.empty());
    EXPECT_FALSE(consumer.peek().has_value());
    // The records alone went round the ring hundreds of times (skip records add more).
    EXPECT_GT(ring_bytes, 500 * consumer.capacity());
}

// A mark's position field repeats every 16 (2^48 - 1) bytes and is never 0 (zeroed memory is
// never a record). A ring whose positions cross 2^52 bytes — where a field of the position
// plus one would overflow 48 bits — goes on carrying records of both kinds in order.
TEST(shm_ring, positions_past_2_to_the_52_bytes_go_on_and_zeroed_memory_is_never_a_record) {
    constexpr std::uint64_t period = std::uint64_t{16} * ((std::uint64_t{1} << 48) - 1);
    for (const std::uint64_t p : {std::uint64_t{0}, std::uint64_t{16}, period - 16, period,
                                  std::uint64_t{1} << 52, ~std::uint64_t{15}}) {
        EXPECT_NE(detail::shm_mark_position(p), 0u) << p;
        EXPECT_FALSE(detail::shm_mark_at(0, p)) << p;
        EXPECT_TRUE(detail::shm_mark_at(detail::shm_mark(p, 24), p)) << p;
        EXPECT_FALSE(detail::shm_mark_at(detail::shm_mark(p, 24), p + 16)) << p;
    }
    EXPECT_EQ(detail::shm_mark_position(period), detail::shm_mark_position(0));

    shm_name n;
    auto consumer = shm_ring::create(n.name, min_capacity);
    {
        // Both positions moved to 8 KiB before 2^52 (an empty ring), before the producer maps it.
        ring_data_mapping m(n.name, consumer.capacity());
        ASSERT_NE(m.data, nullptr);
        auto* h = static_cast<shm_ring_header*>(m.base);
        const std::uint64_t start = (std::uint64_t{1} << 52) - 8192;
        h->head.store(start);
        h->tail.store(start);
    }
    auto producer = shm_ring::open(n.name);
    std::mt19937 rng(52);
    std::uniform_int_distribution<std::size_t> size_of(0, 700);
    std::deque<std::size_t> in_flight;
    std::uint64_t next_write = 0, next_read = 0;
    constexpr std::uint64_t records = 3000;  // ~1 MiB: 16 laps of the ring past 2^52
    while (next_read < records) {
        while (next_write < records) {
            const std::size_t size = size_of(rng);
            if (!write_seq(producer, next_write, size, next_write % 3 != 0)) break;
            in_flight.push_back(size);
            ++next_write;
        }
        ASSERT_FALSE(in_flight.empty()) << "a ring with room refused record " << next_write;
        while (!in_flight.empty()) {
            ASSERT_TRUE(next_is(consumer, next_read, in_flight.front(), next_read % 3 != 0));
            in_flight.pop_front();
            ++next_read;
        }
    }
    EXPECT_TRUE(consumer.empty());
    EXPECT_FALSE(consumer.corrupt());
}

TEST(shm_ring, a_record_that_does_not_fit_before_the_end_starts_at_the_beginning) {
    shm_name n;
    auto consumer = shm_ring::create(n.name, min_capacity);
    auto producer = shm_ring::open(n.name);
    // Full records take their 32-byte header plus the chunk rounded up to 16 bytes. 63
    // records of 1024 ring bytes, then one of 992: 32 bytes remain before the end.
    constexpr std::size_t hdr = detail::shm_record_header;
    std::uint64_t seq = 0;
    for (int i = 0; i < 63; ++i)
        ASSERT_TRUE(write_seq(producer, seq++, 1024 - hdr));
    ASSERT_TRUE(write_seq(producer, seq++, 992 - hdr));
    for (std::uint64_t s = 0; s < 63; ++s)
        ASSERT_TRUE(next_is(consumer, s, 1024 - hdr));
    ASSERT_TRUE(next_is(consumer, 63, 992 - hdr));
    ASSERT_TRUE(consumer.empty());

    // Needs 48 bytes, 32 remain: a skip (its mark alone), then the record at offset 0.
    ASSERT_TRUE(write_seq(producer, seq++, 1));
    ASSERT_TRUE(next_is(consumer, 64, 1));
    EXPECT_TRUE(consumer.empty());

    // From offset 48, 63 records of 1024 ring bytes leave 976 before the end: a record of
    // exactly 976 ring bytes needs no skip, and the next one (48 bytes) starts at offset 0.
    // That fills the ring to the last byte (65488 + 48), so a needless skip could not fit.
    for (int i = 0; i < 63; ++i)
        ASSERT_TRUE(write_seq(producer, seq++, 1024 - hdr));
    ASSERT_TRUE(write_seq(producer, seq++, 976 - hdr));
    ASSERT_TRUE(write_seq(producer, seq++, 5));
    EXPECT_FALSE(producer.try_write({}, 0, shm_flags::first, 999));
    for (std::uint64_t s = 65; s < 65 + 63; ++s)
        ASSERT_TRUE(next_is(consumer, s, 1024 - hdr));
    ASSERT_TRUE(next_is(consumer, 128, 976 - hdr));
    ASSERT_TRUE(next_is(consumer, 129, 5));
    EXPECT_TRUE(consumer.empty());
    EXPECT_FALSE(consumer.peek().has_value());
}

// ---- full ring ---------------------------------------------------------------------------

TEST(shm_ring, a_full_ring_refuses_writes_until_the_consumer_consumes) {
    shm_name n;
    auto consumer = shm_ring::create(n.name, min_capacity);
    auto producer = shm_ring::open(n.name);
    // Chunks of 1024 - 32 bytes take 1024 ring bytes: exactly 64 fill 64 KiB.
    constexpr std::size_t chunk = 1024 - detail::shm_record_header;
    for (std::uint64_t s = 0; s < 64; ++s)
        ASSERT_TRUE(write_seq(producer, s, chunk)) << s;
    EXPECT_FALSE(write_seq(producer, 64, chunk));
    EXPECT_FALSE(producer.try_write({}, 0, shm_flags::first, 64));  // not even a header
    EXPECT_FALSE(write_seq(producer, 64, chunk));

    // Peeking does not free space; consuming does, exactly one record's worth.
    ASSERT_TRUE(consumer.peek().has_value());
    EXPECT_FALSE(write_seq(producer, 64, chunk));
    ASSERT_TRUE(next_is(consumer, 0, chunk));
    ASSERT_TRUE(write_seq(producer, 64, chunk));
    EXPECT_FALSE(write_seq(producer, 65, chunk));
    EXPECT_FALSE(producer.try_write({}, 0, shm_flags::first, 65));

    // Nothing was overwritten by the refused writes.
    for (std::uint64_t s = 1; s <= 64; ++s)
        ASSERT_TRUE(next_is(consumer, s, chunk));
    EXPECT_TRUE(consumer.empty());
    ASSERT_TRUE(write_seq(producer, 65, chunk));
    ASSERT_TRUE(next_is(consumer, 65, chunk));
}

TEST(shm_ring, a_record_needing_a_skip_waits_for_room_at_both_ends) {
    shm_name n;
    auto consumer = shm_ring::create(n.name, min_capacity);
    auto producer = shm_ring::open(n.name);
    // 60 records of 1024 ring bytes: 4096 bytes remain before the end.
    constexpr std::size_t chunk = 1024 - detail::shm_record_header;
    for (std::uint64_t s = 0; s < 60; ++s)
        ASSERT_TRUE(write_seq(producer, s, chunk));
    // Consume 4: 4096 free at the start. A 5000-byte record fits in neither stretch alone
    // (the skip takes the 4096 at the end, the record then needs 5040 from the start).
    for (std::uint64_t s = 0; s < 4; ++s)
        ASSERT_TRUE(next_is(consumer, s, chunk));
    EXPECT_FALSE(write_seq(producer, 60, 5000));
    // One more consumed: 5120 bytes at the start, enough after the skip.
    ASSERT_TRUE(next_is(consumer, 4, chunk));
    ASSERT_TRUE(write_seq(producer, 60, 5000));
    for (std::uint64_t s = 5; s < 60; ++s)
        ASSERT_TRUE(next_is(consumer, s, chunk));
    ASSERT_TRUE(next_is(consumer, 60, 5000));
    EXPECT_TRUE(consumer.empty());
}

// ---- compact records -----------------------------------------------------------------------

// A whole message with tag 0 goes as a compact record, its 8-byte mark and its bytes: a
// Converse message of 24 bytes (16 of header, 8 of data) takes 32 ring bytes, so two share
// a cache line, and 64 KiB hold exactly 2048 of them.
TEST(shm_ring, two_compact_records_of_a_24_byte_message_share_a_cache_line) {
    shm_name n;
    auto consumer = shm_ring::create(n.name, min_capacity);
    auto producer = shm_ring::open(n.name);
    std::uint64_t written = 0;
    while (write_seq(producer, written, 24, true))
        ++written;
    EXPECT_EQ(written, min_capacity / 32);
    // The same message with a tag (or a broadcast's flags) needs the full header: 64 bytes.
    EXPECT_FALSE(write_seq(producer, written, 24, false));
    for (std::uint64_t s = 0; s < written; ++s)
        ASSERT_TRUE(next_is(consumer, s, 24, true));
    EXPECT_TRUE(consumer.empty());
    // Sizes 0 up to 300 round-trip, each with its own rounding.
    for (std::uint64_t s = 0; s <= 300; ++s) {
        ASSERT_TRUE(write_seq(producer, s, s, true));
        ASSERT_TRUE(next_is(consumer, s, s, true));
    }
}

// The producer leaves the word at a line start alone when its last content was a mark (a
// stale mark names another lap and never reads as a record), and zeroes it before use when a
// record ran across it. Here a message of the first lap holds, at a line start, the very mark
// the consumer will look for there one lap later: once the consumer has taken the records
// that end at that line start, it must see nothing there until the producer writes one.
TEST(shm_ring, a_line_start_that_held_a_message_never_reads_as_a_record_a_lap_later) {
    for (const bool compact : {true, false}) {
        shm_name n;
        auto consumer = shm_ring::create(n.name, min_capacity);
        auto producer = shm_ring::open(n.name);
        constexpr std::uint64_t line_start = 128;
        const std::uint64_t fake = detail::shm_mark(min_capacity + line_start, 8);
        const auto write_consume = [&](std::span<const std::byte> b, bool as_message) {
            const auto flags = as_message ? shm_flags::message : shm_flags::first;
            ASSERT_TRUE(producer.try_write(b, static_cast<std::uint32_t>(b.size()), flags, 0));
            auto r = consumer.peek();
            ASSERT_TRUE(r.has_value());
            ASSERT_EQ(r->chunk.size(), b.size());
            ASSERT_TRUE(std::equal(b.begin(), b.end(), r->chunk.begin()));
            consumer.consume();
        };
        const std::vector<std::byte> small(8, std::byte{0x11});  // a 16-byte compact record
        // Records up to 16 bytes before the line start, then one across it whose bytes at the
        // line start are `fake`: a compact record's message starts 8 bytes after its mark, a
        // full record's chunk 32 bytes after (there the line start is in the chunk's middle).
        const std::uint64_t start = compact ? line_start - 16 : line_start - 48;
        for (std::uint64_t at = 0; at < start; at += 16)
            write_consume(small, true);
        std::vector<std::byte> across(compact ? 24 : 40, std::byte{0x22});
        std::memcpy(across.data() + (compact ? 8 : 16), &fake, sizeof fake);
        write_consume(across, compact);
        // Small records to the end of the lap, then to the line start in the next lap.
        for (std::uint64_t at = start + (compact ? 32 : 80); at < min_capacity + line_start;
             at += 16)
            write_consume(small, true);
        EXPECT_FALSE(consumer.peek().has_value()) << (compact ? "compact" : "full");
        EXPECT_FALSE(consumer.corrupt());
        write_consume(small, true);
    }
}

// The same over many laps of random records, compact and full, across the ring's end and
// with the ring filled up at times: every message holds, at each 16-byte place inside it,
// the mark the consumer will look for there one lap later. Whenever the consumer has taken
// everything, it must see nothing.
TEST(shm_ring, messages_holding_next_laps_marks_never_read_as_records) {
    shm_name n;
    auto consumer = shm_ring::create(n.name, min_capacity);
    auto producer = shm_ring::open(n.name);
    ring_data_mapping m(n.name, consumer.capacity());
    ASSERT_NE(m.data, nullptr);
    const auto* h = static_cast<const shm_ring_header*>(m.base);
    const std::uint64_t cap = consumer.capacity();
    std::mt19937 rng(28);
    std::uniform_int_distribution<std::size_t> size_of(0, 700);
    std::deque<std::vector<std::byte>> in_flight;
    const auto take_all = [&] {
        while (!in_flight.empty()) {
            auto r = consumer.peek();
            ASSERT_TRUE(r.has_value());
            ASSERT_TRUE(same_bytes(r->chunk, in_flight.front()));
            consumer.consume();
            in_flight.pop_front();
        }
        EXPECT_FALSE(consumer.peek().has_value()) << "at " << h->head.load();
        EXPECT_FALSE(consumer.corrupt());
    };
    for (int k = 0; k < 3000 && !testing::Test::HasFailure(); ++k) {
        const std::size_t size = size_of(rng);
        const bool compact = rng() % 2 == 0;
        // Where the message will sit: after a skip when it does not fit before the end.
        const std::uint64_t tail = h->tail.load();
        const std::uint64_t rec = record_size(size, compact);
        const std::uint64_t start = rec > cap - tail % cap ? tail + (cap - tail % cap) : tail;
        const std::uint64_t at = start + (compact ? 8 : 32);
        std::vector<std::byte> b = record_bytes(k, size);
        for (std::uint64_t q = (at + 15) / 16 * 16; q + 8 <= at + size; q += 16) {
            const std::uint64_t fake = detail::shm_mark(q + cap, 8);
            std::memcpy(b.data() + (q - at), &fake, sizeof fake);
        }
        if (!producer.try_write(b, static_cast<std::uint32_t>(size), flags_of(compact), 0)) {
            take_all();  // full: take everything, then write it
            ASSERT_TRUE(
                producer.try_write(b, static_cast<std::uint32_t>(size), flags_of(compact), 0));
        }
        in_flight.push_back(std::move(b));
        producer.write_ahead();  // as a burst does: a hint, which changes nothing read
        // Mostly one at a time (the consumer catches up after each); at times the ring fills.
        if (k % 500 >= 100) take_all();
    }
    take_all();
}

// A burst's sender asks for the lines ahead of its position (write_ahead): only lines after
// the one it is filling, at most write_ahead_lines of them, each once, and never a line whose
// bytes of a lap ago the consumer may still read.
TEST(shm_ring, write_ahead_asks_only_for_lines_the_consumer_has_left) {
    constexpr std::uint64_t line = 64, cap = 4096, ahead = shm_ring::write_ahead_lines;
    // An empty ring: the next lines.
    auto r = shm_ring::lines_ahead(0, 0, 0, cap);
    EXPECT_EQ(r.from, line);
    EXPECT_EQ(r.to, line + ahead * line);
    // Asked already: only what is new since; nothing at all while the tail stays in its line.
    r = shm_ring::lines_ahead(100, line + ahead * line, 0, cap);
    EXPECT_EQ(r.from, line + ahead * line);
    EXPECT_EQ(r.to, 2 * line + ahead * line);
    r = shm_ring::lines_ahead(120, r.to, 0, cap);
    EXPECT_EQ(r.from, r.to);
    // The consumer almost a lap behind: the next line still holds what it has to read.
    r = shm_ring::lines_ahead(cap + 3000, 0, 3000 + 16, cap);
    EXPECT_EQ(r.from, r.to);
    // Any position: the rule holds.
    std::mt19937_64 rng(29);
    for (int k = 0; k < 100000; ++k) {
        const std::uint64_t head = rng() % (1u << 20);
        const std::uint64_t tail = head + rng() % (cap + 1);
        const std::uint64_t asked = (tail & ~(line - 1)) + (rng() % 5) * line;
        r = shm_ring::lines_ahead(tail, asked, head, cap);
        ASSERT_EQ(r.from % line, 0u);
        ASSERT_EQ(r.to % line, 0u);
        ASSERT_LE(r.from, r.to);
        ASSERT_LE((r.to - r.from) / line, ahead);
        if (r.from == r.to) continue;
        ASSERT_GT(r.from, tail) << "the line being filled (the consumer may poll it)";
        ASSERT_GE(r.from, asked) << "asked twice";
        ASSERT_LE(r.to, (tail & ~(line - 1)) + line + ahead * line);
        ASSERT_LE(r.to, head + cap)
            << "a line the consumer may still read, tail " << tail << " head " << head;
    }
}

// A mark the consumer cannot believe: a compact size over max_chunk(), or one that runs past
// the ring's end. The ring is reported corrupt and nothing is handed on.
TEST(shm_ring, a_compact_mark_with_an_impossible_size_is_reported_as_corrupt) {
    // 9 bytes fit max_chunk() but not the 16 bytes left; the next is over max_chunk(); the
    // last says a full record, whose 32-byte header alone would cross the end.
    for (const std::uint64_t code :
         {std::uint64_t{9}, std::uint64_t{min_capacity / 4 + 1}, detail::shm_code_full}) {
        shm_name n;
        auto consumer = shm_ring::create(n.name, min_capacity);
        ring_data_mapping m(n.name, consumer.capacity());
        ASSERT_NE(m.data, nullptr);
        // At the last 16 bytes of the ring: the consumer's position is moved there by
        // consuming records up to it.
        auto producer = shm_ring::open(n.name);
        constexpr std::size_t chunk = 1024 - detail::shm_record_header;
        for (std::uint64_t s = 0; s < 63; ++s)
            ASSERT_TRUE(write_seq(producer, s, chunk));
        ASSERT_TRUE(write_seq(producer, 63, 1008 - detail::shm_record_header));
        for (std::uint64_t s = 0; s < 63; ++s)
            ASSERT_TRUE(next_is(consumer, s, chunk));
        ASSERT_TRUE(next_is(consumer, 63, 1008 - detail::shm_record_header));
        const std::uint64_t position = min_capacity - 16;
        const std::uint64_t mark = detail::shm_mark(position, code);
        std::memcpy(m.data + position, &mark, sizeof mark);
        EXPECT_FALSE(consumer.peek().has_value()) << "code " << code;
        EXPECT_TRUE(consumer.corrupt()) << "code " << code;
    }
}

// A skip at the ring's start would send the consumer a whole lap on, past records it has not
// read: no producer writes one (a skip fills the end behind a record that did not fit).
TEST(shm_ring, a_skip_at_the_rings_start_is_reported_as_corrupt) {
    shm_name n;
    auto consumer = shm_ring::create(n.name, min_capacity);
    ring_data_mapping m(n.name, consumer.capacity());
    ASSERT_NE(m.data, nullptr);
    const std::uint64_t mark = detail::shm_mark(0, detail::shm_code_skip);
    std::memcpy(m.data, &mark, sizeof mark);
    EXPECT_FALSE(consumer.peek().has_value());
    EXPECT_TRUE(consumer.corrupt());
}

// ---- another thread, another process -----------------------------------------------------

constexpr std::uint64_t stream_records = 200'000;

std::size_t stream_size(std::uint64_t seq) {
    return 8 + static_cast<std::size_t>((seq * 37) % 193);  // 8..200 bytes, seq first
}

// The producer's loop: 0 when every record went in, 2 when open() threw, 3 when stopped.
int produce_stream(const std::string& name, const std::atomic<bool>* stop) {
    std::optional<shm_ring> producer;
    try {
        producer.emplace(shm_ring::open(name));
    } catch (const std::system_error&) {
        return 2;
    }
    for (std::uint64_t seq = 0; seq < stream_records; ++seq) {
        const auto b = record_bytes(seq, stream_size(seq));
        // Two compact records in three, the third with the full header.
        const bool compact = seq % 3 != 0;
        while (!producer->try_write(b, static_cast<std::uint32_t>(b.size()), flags_of(compact),
                                    tag_of(seq, compact))) {
            if (stop && stop->load(std::memory_order_relaxed)) return 3;
            std::this_thread::yield();
        }
    }
    return 0;
}

// The consumer's loop: "" when all records arrived in order and intact, else what went
// wrong. `producer_gone` is asked while the ring is empty, so a dead producer fails the test
// instead of hanging it.
std::string consume_stream(shm_ring& consumer, const std::function<bool()>& producer_gone) {
    std::uint64_t seq = 0;
    std::uint64_t idle = 0;
    while (seq < stream_records) {
        auto r = consumer.peek();
        if (!r) {
            if (++idle % 1024 == 0 && producer_gone() && consumer.empty())
                return "the producer stopped after " + std::to_string(seq) + " records";
            std::this_thread::yield();
            continue;
        }
        const std::size_t size = stream_size(seq);
        std::uint64_t got = ~std::uint64_t{0};
        if (r->chunk.size() >= sizeof got) std::memcpy(&got, r->chunk.data(), sizeof got);
        if (got != seq)
            return "expected record " + std::to_string(seq) + ", got " + std::to_string(got);
        const bool compact = seq % 3 != 0;
        if (r->chunk.size() != size || r->total != size || r->flags != flags_of(compact) ||
            r->tag != tag_of(seq, compact))
            return "record " + std::to_string(seq) + ": wrong size or fields";
        if (!same_bytes(r->chunk, record_bytes(seq, size)))
            return "record " + std::to_string(seq) + ": bytes differ";
        consumer.consume();
        ++seq;
    }
    if (!consumer.empty()) return "records beyond the last one";
    return "";
}

// A forked child, killed and reaped if the test ends before it does.
struct child_process {
    pid_t pid = -1;
    bool reaped = false;
    int status = 0;
    bool exited() {
        if (!reaped && ::waitpid(pid, &status, WNOHANG) == pid) reaped = true;
        return reaped;
    }
    void wait() {
        while (!reaped) {
            if (::waitpid(pid, &status, 0) == pid)
                reaped = true;
            else if (errno != EINTR)
                break;
        }
    }
    ~child_process() {
        if (pid > 0 && !reaped) {
            ::kill(pid, SIGKILL);
            wait();
        }
    }
};

TEST(shm_ring, another_process_streams_records_in_order) {
    shm_name n;
    auto consumer = shm_ring::create(n.name, min_capacity);
    child_process child;
    child.pid = ::fork();
    ASSERT_GE(child.pid, 0) << std::strerror(errno);
    if (child.pid == 0) {
        // The child opens the ring by name; _exit skips the parent's objects it inherited.
        ::_exit(produce_stream(n.name, nullptr));
    }
    const std::string error = consume_stream(consumer, [&] { return child.exited(); });
    EXPECT_EQ(error, "");
    child.wait();
    ASSERT_TRUE(child.reaped);
    ASSERT_TRUE(WIFEXITED(child.status)) << "child status " << child.status;
    EXPECT_EQ(WEXITSTATUS(child.status), 0);
    EXPECT_FALSE(consumer.peek().has_value());
}

TEST(shm_ring, another_thread_streams_records_in_order) {
    shm_name n;
    auto consumer = shm_ring::create(n.name, min_capacity);
    std::atomic<bool> stop{false};
    std::atomic<bool> done{false};
    int result = -1;
    std::thread producer([&] {
        result = produce_stream(n.name, &stop);
        done.store(true);
    });
    const std::string error = consume_stream(consumer, [&] { return done.load(); });
    stop.store(true);
    producer.join();
    EXPECT_EQ(error, "");
    EXPECT_EQ(result, 0);
    EXPECT_FALSE(consumer.peek().has_value());
}

// ---- sleep handshake ---------------------------------------------------------------------

TEST(shm_ring, prepare_sleep_on_an_empty_ring_leaves_one_sleeper_to_take) {
    shm_name n;
    auto consumer = shm_ring::create(n.name, min_capacity);
    auto producer = shm_ring::open(n.name);
    EXPECT_FALSE(producer.take_sleeper());
    ASSERT_TRUE(consumer.prepare_sleep());
    EXPECT_TRUE(producer.take_sleeper());
    EXPECT_FALSE(producer.take_sleeper());
}

TEST(shm_ring, prepare_sleep_on_a_non_empty_ring_fails_and_leaves_no_sleeper) {
    shm_name n;
    auto consumer = shm_ring::create(n.name, min_capacity);
    auto producer = shm_ring::open(n.name);
    ASSERT_TRUE(write_seq(producer, 0, 40));
    EXPECT_FALSE(consumer.prepare_sleep());
    EXPECT_FALSE(producer.take_sleeper());
    // The record is still there, and once it is consumed the consumer may sleep.
    ASSERT_TRUE(next_is(consumer, 0, 40));
    ASSERT_TRUE(consumer.prepare_sleep());
    EXPECT_TRUE(producer.take_sleeper());
}

TEST(shm_ring, a_record_written_after_prepare_sleep_makes_the_producer_ring) {
    shm_name n;
    auto consumer = shm_ring::create(n.name, min_capacity);
    auto producer = shm_ring::open(n.name);
    ASSERT_TRUE(consumer.prepare_sleep());
    ASSERT_TRUE(write_seq(producer, 0, 100));
    EXPECT_TRUE(producer.take_sleeper());
    EXPECT_FALSE(producer.take_sleeper());
    ASSERT_TRUE(next_is(consumer, 0, 100));
}

TEST(shm_ring, cancel_sleep_takes_the_sleeper_back) {
    shm_name n;
    auto consumer = shm_ring::create(n.name, min_capacity);
    auto producer = shm_ring::open(n.name);
    ASSERT_TRUE(consumer.prepare_sleep());
    consumer.cancel_sleep();
    EXPECT_FALSE(producer.take_sleeper());
    // And the handshake works again afterwards.
    ASSERT_TRUE(consumer.prepare_sleep());
    EXPECT_TRUE(producer.take_sleeper());
}

// ---- errors ------------------------------------------------------------------------------

TEST(shm_ring, open_of_a_missing_name_throws_naming_it) {
    shm_name n;
    const auto e = thrown_by([&] { shm_ring::open(n.name); });
    ASSERT_TRUE(e.has_value());
    EXPECT_TRUE(contains(e->what(), n.name)) << e->what();
    EXPECT_EQ(e->code(), std::errc::no_such_file_or_directory) << e->code().message();
}

TEST(shm_ring, open_of_a_shm_object_that_is_not_a_ring_throws_naming_it) {
    for (const off_t size : {off_t{4096}, off_t{0}}) {
        SCOPED_TRACE("object of " + std::to_string(size) + " bytes");
        shm_name n;
        const int fd = ::shm_open(n.name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
        ASSERT_GE(fd, 0) << std::strerror(errno);
        const int r = ::ftruncate(fd, size);
        ::close(fd);
        ASSERT_EQ(r, 0) << std::strerror(errno);

        const auto e = thrown_by([&] { shm_ring::open(n.name); });
        ASSERT_TRUE(e.has_value());
        EXPECT_TRUE(contains(e->what(), n.name)) << e->what();
        // Refusing to map it did not remove someone else's object.
        EXPECT_TRUE(shm_exists(n.name));
    }
}

TEST(shm_ring, open_of_a_ring_with_another_magic_throws_naming_it) {
    shm_name n;
    auto consumer = shm_ring::create(n.name, min_capacity);
    // Right size and capacity, wrong magic: a ring of another version.
    const int fd = ::shm_open(n.name.c_str(), O_RDWR, 0);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    void* p = ::mmap(nullptr, sizeof(shm_ring_header), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    ASSERT_NE(p, MAP_FAILED) << std::strerror(errno);
    static_cast<shm_ring_header*>(p)->magic ^= 0x0100'0000u;
    ::munmap(p, sizeof(shm_ring_header));

    const auto e = thrown_by([&] { shm_ring::open(n.name); });
    ASSERT_TRUE(e.has_value());
    EXPECT_TRUE(contains(e->what(), n.name)) << e->what();
}

TEST(shm_ring, create_of_an_existing_name_throws_and_keeps_the_existing_ring) {
    shm_name n;
    auto consumer = shm_ring::create(n.name, min_capacity);
    const auto e = thrown_by([&] { shm_ring::create(n.name, min_capacity); });
    ASSERT_TRUE(e.has_value());
    EXPECT_TRUE(contains(e->what(), n.name)) << e->what();
    EXPECT_EQ(e->code(), std::errc::file_exists) << e->code().message();
    // The failed create neither unlinked nor reset the ring that was there.
    auto producer = shm_ring::open(n.name);
    ASSERT_TRUE(write_seq(producer, 9, 33));
    ASSERT_TRUE(next_is(consumer, 9, 33));
}

// ---- doorbell ----------------------------------------------------------------------------

int poll_readable(int fd, int timeout_ms) {
    pollfd p{fd, POLLIN, 0};
    const int r = ::poll(&p, 1, timeout_ms);
    if (r <= 0) return r;
    return (p.revents & POLLIN) ? 1 : -2;
}

TEST(shm_doorbell, ringing_makes_the_owner_readable_and_drain_empties_it) {
    fifo_path f;
    auto owner = shm_doorbell::create(f.path);
    struct stat st {};
    ASSERT_EQ(::stat(f.path.c_str(), &st), 0);
    EXPECT_TRUE(S_ISFIFO(st.st_mode));
    ASSERT_GE(owner.fd(), 0);
    auto writer = shm_doorbell::open(f.path);
    ASSERT_GE(writer.fd(), 0);

    EXPECT_EQ(poll_readable(owner.fd(), 0), 0);
    for (int i = 0; i < 5; ++i)
        writer.ring();
    EXPECT_EQ(poll_readable(owner.fd(), 10'000), 1);
    owner.drain();
    EXPECT_EQ(poll_readable(owner.fd(), 0), 0);
    owner.drain();  // draining an empty FIFO does not block
    EXPECT_EQ(poll_readable(owner.fd(), 0), 0);

    // It rings again after a drain.
    writer.ring();
    EXPECT_EQ(poll_readable(owner.fd(), 10'000), 1);
    owner.drain();
    EXPECT_EQ(poll_readable(owner.fd(), 0), 0);

    // unlink removes the path; the open ends keep working.
    owner.unlink();
    EXPECT_FALSE(path_exists(f.path));
    writer.ring();
    EXPECT_EQ(poll_readable(owner.fd(), 10'000), 1);
    owner.drain();
    EXPECT_EQ(poll_readable(owner.fd(), 0), 0);
    EXPECT_TRUE(thrown_by([&] { shm_doorbell::open(f.path); }).has_value());
}

TEST(shm_doorbell, ringing_a_full_fifo_does_not_block) {
    fifo_path f;
    auto owner = shm_doorbell::create(f.path);
    auto writer = shm_doorbell::open(f.path);
    const int fl = ::fcntl(writer.fd(), F_GETFL);
    ASSERT_GE(fl, 0);
    ASSERT_TRUE(fl & O_NONBLOCK);  // else the loop below would hang instead of failing
    // Far more than a pipe buffer holds: a blocking write would hang here (ctest's timeout).
    for (int i = 0; i < 100'000; ++i)
        writer.ring();
    EXPECT_EQ(poll_readable(owner.fd(), 10'000), 1);
    owner.drain();
    EXPECT_EQ(poll_readable(owner.fd(), 0), 0);
    writer.ring();
    EXPECT_EQ(poll_readable(owner.fd(), 10'000), 1);
}

TEST(shm_doorbell, errors_name_the_path) {
    fifo_path f;
    {
        const auto e = thrown_by([&] { shm_doorbell::open(f.path); });
        ASSERT_TRUE(e.has_value());
        EXPECT_TRUE(contains(e->what(), f.path)) << e->what();
    }
    auto owner = shm_doorbell::create(f.path);
    {
        const auto e = thrown_by([&] { shm_doorbell::create(f.path); });
        ASSERT_TRUE(e.has_value());
        EXPECT_TRUE(contains(e->what(), f.path)) << e->what();
        EXPECT_EQ(e->code(), std::errc::file_exists);
        // The failed create did not remove the owner's FIFO.
        EXPECT_TRUE(path_exists(f.path));
    }
}

TEST(shm_doorbell, create_replaces_a_fifo_that_nobody_holds_and_says_so) {
    // What a crashed job of the same key leaves: the FIFO with no process reading it.
    fifo_path f;
    ASSERT_EQ(::mkfifo(f.path.c_str(), 0600), 0) << std::strerror(errno);
    struct stat before {};
    ASSERT_EQ(::stat(f.path.c_str(), &before), 0);
    auto owner = shm_doorbell::create(f.path);
    EXPECT_TRUE(owner.replaced_stale());
    struct stat after {};
    ASSERT_EQ(::stat(f.path.c_str(), &after), 0);
    EXPECT_NE(before.st_ino, after.st_ino);  // a new FIFO, not the stale one reopened
    auto writer = shm_doorbell::open(f.path);
    writer.ring();
    EXPECT_EQ(poll_readable(owner.fd(), 10'000), 1);

    fifo_path fresh;
    EXPECT_FALSE(shm_doorbell::create(fresh.path).replaced_stale());
}

TEST(shm_doorbell, create_of_a_fifo_a_running_owner_holds_names_the_running_job) {
    fifo_path f;
    auto owner = shm_doorbell::create(f.path);
    const auto e = thrown_by([&] { shm_doorbell::create(f.path); });
    ASSERT_TRUE(e.has_value());
    EXPECT_TRUE(contains(e->what(), "belongs to a running process")) << e->what();
    EXPECT_TRUE(contains(e->what(), "same key")) << e->what();
    // The owner's FIFO still works.
    auto writer = shm_doorbell::open(f.path);
    writer.ring();
    EXPECT_EQ(poll_readable(owner.fd(), 10'000), 1);
}

TEST(shm_doorbell, open_of_a_fifo_without_an_owner_throws_instead_of_blocking) {
    fifo_path f;
    ASSERT_EQ(::mkfifo(f.path.c_str(), 0600), 0) << std::strerror(errno);
    const auto e = thrown_by([&] { shm_doorbell::open(f.path); });
    ASSERT_TRUE(e.has_value());
    EXPECT_TRUE(contains(e->what(), f.path)) << e->what();
}

// ---- moves and unlinking -----------------------------------------------------------------

TEST(shm_ring, a_moved_from_ring_is_harmless_and_the_creator_unlinks_the_name) {
    shm_name n;
    std::optional<shm_ring> consumer;
    {
        auto created = shm_ring::create(n.name, min_capacity);
        consumer.emplace(std::move(created));
    }  // the moved-from ring is destroyed here: no unlink, no unmap
    ASSERT_TRUE(shm_exists(n.name));
    std::optional<shm_ring> producer;
    {
        auto opened = shm_ring::open(n.name);
        producer.emplace(std::move(opened));
    }
    ASSERT_TRUE(write_seq(*producer, 1, 300));
    ASSERT_TRUE(next_is(*consumer, 1, 300));

    // The opening side's destructor leaves the name alone.
    { auto other = shm_ring::open(n.name); }
    EXPECT_TRUE(shm_exists(n.name));

    consumer.reset();
    EXPECT_FALSE(shm_exists(n.name));
    EXPECT_TRUE(thrown_by([&] { shm_ring::open(n.name); }).has_value());
    // The producer's mapping outlives the name and the consumer.
    EXPECT_TRUE(write_seq(*producer, 2, 300));
}

TEST(shm_ring, move_assignment_releases_the_ring_it_replaces) {
    shm_name a;
    shm_name b;
    auto x = shm_ring::create(a.name, min_capacity);
    {
        auto y = shm_ring::create(b.name, min_capacity);
        x = std::move(y);
        EXPECT_FALSE(shm_exists(a.name));  // x's old ring was created by x: unlinked
        EXPECT_TRUE(shm_exists(b.name));
    }  // moved-from y destroyed
    EXPECT_TRUE(shm_exists(b.name));
    auto producer = shm_ring::open(b.name);
    ASSERT_TRUE(write_seq(producer, 3, 64));
    ASSERT_TRUE(next_is(x, 3, 64));
}

TEST(shm_ring, unlink_is_idempotent_and_keeps_the_mapping) {
    shm_name n;
    auto consumer = shm_ring::create(n.name, min_capacity);
    auto producer = shm_ring::open(n.name);
    consumer.unlink();
    EXPECT_FALSE(shm_exists(n.name));
    consumer.unlink();
    ASSERT_TRUE(write_seq(producer, 4, 77));
    ASSERT_TRUE(next_is(consumer, 4, 77));

    // A new ring under the same name is not removed by the old one's later unlink or death.
    std::optional<shm_ring> old_consumer(std::move(consumer));
    auto fresh = shm_ring::create(n.name, min_capacity);
    old_consumer->unlink();
    old_consumer.reset();
    EXPECT_TRUE(shm_exists(n.name));
    auto fresh_producer = shm_ring::open(n.name);
    ASSERT_TRUE(write_seq(fresh_producer, 5, 10));
    ASSERT_TRUE(next_is(fresh, 5, 10));
}

TEST(shm_doorbell, a_moved_from_doorbell_is_harmless_and_the_owner_unlinks_the_path) {
    fifo_path f;
    std::optional<shm_doorbell> owner;
    {
        auto created = shm_doorbell::create(f.path);
        owner.emplace(std::move(created));
    }
    ASSERT_TRUE(path_exists(f.path));
    ASSERT_GE(owner->fd(), 0);

    auto writer = shm_doorbell::open(f.path);
    {
        auto moved = std::move(writer);
        moved.ring();
    }  // closes the moved-to writer; the moved-from one is left
    EXPECT_EQ(poll_readable(owner->fd(), 10'000), 1);
    owner->drain();

    // Move assignment: the replaced writer is closed, the new one rings.
    auto w1 = shm_doorbell::open(f.path);
    auto w2 = shm_doorbell::open(f.path);
    w1 = std::move(w2);
    w1.ring();
    EXPECT_EQ(poll_readable(owner->fd(), 10'000), 1);
    owner->drain();

    { auto other_writer = shm_doorbell::open(f.path); }  // a writer never unlinks
    EXPECT_TRUE(path_exists(f.path));
    owner.reset();
    EXPECT_FALSE(path_exists(f.path));
}

// Ringing the bell of a PE that has gone (its FIFO has no reader) raised SIGPIPE, which
// killed the ringing PE: one PE's exit took its same-host peers down with it.
TEST(shm_doorbell, ringing_a_departed_owner_does_not_kill_the_ringer) {
    fifo_path path;
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        auto owner = std::make_optional(shm_doorbell::create(path.path));
        auto writer = shm_doorbell::open(path.path);
        owner.reset();  // the owner closes its end: no reader left
        writer.ring();
        writer.ring();
        ::_exit(0);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFEXITED(status))
        << "the ringer died of signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    if (WIFEXITED(status)) {
        EXPECT_EQ(WEXITSTATUS(status), 0);
    }
}

// A record header the producer could never have written (a chunk running past the end of
// the ring) is reported as corruption, not read past the mapping.
TEST(shm_ring, an_impossible_record_header_is_reported_as_corrupt) {
    shm_name name;
    auto consumer = shm_ring::create(name.name, min_capacity);
    auto producer = shm_ring::open(name.name);
    const auto bytes = record_bytes(1, 100);
    ASSERT_TRUE(producer.try_write(bytes, 100, shm_flags::first, 0));
    // Overwrite the record's chunk length through a mapping of our own.
    ring_data_mapping m(name.name, consumer.capacity());
    ASSERT_NE(m.data, nullptr);
    const std::uint32_t bogus = 0xFFFF'FF00u;
    std::memcpy(m.data + offsetof(detail::shm_record_head, chunk), &bogus, sizeof bogus);
    EXPECT_FALSE(consumer.peek().has_value());
    EXPECT_TRUE(consumer.corrupt());
    // A corrupt ring stays corrupt when it moves (the move constructor dropped the flag, so
    // a ring held in a std::optional or a vector that grew looked healthy again).
    shm_ring moved(std::move(consumer));
    EXPECT_TRUE(moved.corrupt());
    std::optional<shm_ring> assigned;
    assigned = std::move(moved);
    EXPECT_TRUE(assigned->corrupt());
}

// ---- the sleep fence ---------------------------------------------------------------------

// Where the kernel has membarrier's global expedited command, a ring's consumer fences every
// registered CPU before it sleeps, and its producers order a record before their read of the
// sleep flag with the compiler alone; a consumer made with the full fence keeps its producers
// on a full fence per record.
TEST(shm_ring, the_producer_fences_per_record_only_when_its_consumer_does_not_fence_heavily) {
    for (const auto mode : {shm_sleep_fence::automatic, shm_sleep_fence::full}) {
        shm_name n;
        auto consumer = shm_ring::create(n.name, min_capacity, mode);
        auto producer = shm_ring::open(n.name);
        const bool heavy = mode == shm_sleep_fence::automatic && shm_heavy_fence_ready();
        EXPECT_EQ(consumer.heavy_sleep_fence(), heavy);
        EXPECT_EQ(producer.light_wake(), heavy);
        // The handshake is the same either way.
        ASSERT_TRUE(consumer.prepare_sleep());
        ASSERT_TRUE(write_seq(producer, 0, 40));
        EXPECT_TRUE(producer.take_sleeper());
        ASSERT_TRUE(next_is(consumer, 0, 40));
    }
    if (!shm_heavy_fence_ready())
        std::fprintf(stderr, "note: no membarrier global expedited here; full fences only\n");
}

// A consumer that sleeps whenever its ring is empty and a producer that writes with uneven
// pauses, so that sleeps begin at every point of a write: every record arrives in order and
// every sleep is ended by the doorbell (a lost wake-up leaves the consumer asleep with a
// record waiting: it gives up after 5 s and the test fails). With either fence.
TEST(shm_ring, a_consumer_that_sleeps_whenever_it_can_is_woken_for_every_record) {
    for (const auto mode : {shm_sleep_fence::automatic, shm_sleep_fence::full}) {
        SCOPED_TRACE(mode == shm_sleep_fence::full ? "full fence" : "automatic fence");
        shm_name n;
        fifo_path f;
        auto consumer = shm_ring::create(n.name, min_capacity, mode);
        auto bell = shm_doorbell::create(f.path);
        constexpr std::uint64_t count = 20000;
        constexpr std::size_t size = 24;
        std::atomic<bool> stop{false};
        std::thread producing([&] {
            auto producer = shm_ring::open(n.name);
            auto ringer = shm_doorbell::open(f.path);
            std::minstd_rand rng(7);
            for (std::uint64_t seq = 0; seq < count && !stop.load(); ++seq) {
                const auto bytes = record_bytes(seq, size);
                while (!producer.try_write(bytes, size, shm_flags::first, 0))
                    if (stop.load()) return;
                if (producer.take_sleeper()) ringer.ring();
                for (unsigned spin = rng() % 4000; spin > 0; --spin)
                    asm volatile("" ::: "memory");
                if (rng() % 64 == 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
            }
        });
        std::uint64_t next = 0, sleeps = 0;
        std::string error;
        while (next < count && error.empty()) {
            if (auto rec = consumer.peek()) {
                if (rec->chunk.size() != size || !same_bytes(rec->chunk, record_bytes(next, size)))
                    error = "record " + std::to_string(next) + " came wrong";
                consumer.consume();
                ++next;
                continue;
            }
            if (!consumer.prepare_sleep()) continue;
            ++sleeps;
            if (poll_readable(bell.fd(), 5000) != 1)
                error = "asleep for 5 s after record " + std::to_string(next) +
                        (consumer.peek() ? " with the next one waiting (a lost wake-up)"
                                         : " and nothing came");
            bell.drain();
        }
        stop.store(true);
        producing.join();
        EXPECT_EQ(error, "");
        EXPECT_EQ(next, count);
        EXPECT_GT(sleeps, 0u);
    }
}

}  // namespace
}  // namespace coverse::rdma

// A process ended by SIGTERM, SIGINT or SIGHUP (mpirun or srun stopping a job after another
// PE aborted, scancel, Ctrl-C) removes the /dev/shm names it created (rings, eager channels,
// its doorbell) and still dies of that signal; a program's own handler is left in charge.
namespace {
bool shm_entry_exists(const std::string& shm_name) {  // shm_open's name: "/x" is /dev/shm/x
    return ::access(("/dev/shm" + shm_name).c_str(), F_OK) == 0;
}

void on_term_kept(int) {}

// Forks a child that makes a ring, an eager channel and a doorbell, says so, and waits for
// `sig`; returns how it ended. With `own_handler` the child first installs its own handler,
// which then stays: the child lives on, and the test stops it with SIGKILL.
int end_of_child_with_names(const std::string& base, int sig, bool own_handler) {
    int ready[2];
    EXPECT_EQ(::pipe(ready), 0);
    const pid_t child = ::fork();
    if (child == 0) {
        ::close(ready[0]);
        if (own_handler) ::signal(sig, on_term_kept);
        {
            auto ring = coverse::rdma::shm_ring::create(base + "-ring", 1 << 16);
            auto eager = coverse::rdma::eager_segment::create(
                base + "-eager", coverse::rdma::eager_kind::short_slots, 4, 64);
            auto bell = coverse::rdma::shm_doorbell::create("/dev/shm" + base + ".bell");
            const char c = 'r';
            if (::write(ready[1], &c, 1) != 1) ::_exit(3);
            for (;;)
                ::pause();
        }
    }
    ::close(ready[1]);
    char c = 0;
    EXPECT_EQ(::read(ready[0], &c, 1), 1) << "the child made no names";
    ::close(ready[0]);
    ::kill(child, sig);
    if (own_handler) {
        ::usleep(100 * 1000);  // its handler ran and returned: still alive
        EXPECT_EQ(::waitpid(child, nullptr, WNOHANG), 0) << "a program's own handler was replaced";
        ::kill(child, SIGKILL);
    }
    int status = 0;
    EXPECT_EQ(::waitpid(child, &status, 0), child);
    return status;
}
}  // namespace

TEST(ShmNames, RemovedWhenAStopSignalEndsTheProcess) {
    for (const int sig : {SIGTERM, SIGINT, SIGHUP}) {
        const std::string base =
            "/coverse-test-names-" + std::to_string(::getpid()) + "-" + std::to_string(sig);
        const int status = end_of_child_with_names(base, sig, false);
        EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == sig)
            << "signal " << sig << ": the process did not die of it (status " << status << ")";
        EXPECT_FALSE(shm_entry_exists(base + "-ring")) << "signal " << sig;
        EXPECT_FALSE(shm_entry_exists(base + "-eager")) << "signal " << sig;
        EXPECT_FALSE(shm_entry_exists(base + ".bell")) << "signal " << sig;
        ::shm_unlink((base + "-ring").c_str());
        ::shm_unlink((base + "-eager").c_str());
        ::unlink(("/dev/shm" + base + ".bell").c_str());
    }
}

TEST(ShmNames, AProgramsOwnHandlerStays) {
    const std::string base = "/coverse-test-names-own-" + std::to_string(::getpid());
    const int status = end_of_child_with_names(base, SIGTERM, true);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    // SIGKILL cannot be caught: the names stay, and are removed here.
    EXPECT_TRUE(shm_entry_exists(base + "-ring"));
    ::shm_unlink((base + "-ring").c_str());
    ::shm_unlink((base + "-eager").c_str());
    ::unlink(("/dev/shm" + base + ".bell").c_str());
}
