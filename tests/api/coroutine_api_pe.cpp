// A multi-PE program for the coroutine API, run by ctest through coverse-run with 1, 2 and
// 4 PEs: awaitable sends into per-handler streams, broadcasts, barriers, reduce_sum, a
// 1 MiB message with its data checked, and a legacy handler living on the same scheduler.
// Any mismatch aborts the job with a message saying what was expected.
#include <converse.h>

#include <coverse/coverse.hpp>
#include <coverse/runtime/timer.hpp>

#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <vector>

namespace {

int legacy_hits = 0;

void legacy_handler(void* msg) {
    ++legacy_hits;
    CmiFree(msg);
}

template <class T>
std::span<const std::byte> bytes_of(const T& v) {
    return std::as_bytes(std::span<const T, 1>(&v, 1));
}

template <class T>
T value_of(const coverse::message& m) {
    if (m.payload().size() != sizeof(T))
        CmiAbort("coroutine_api: payload of %zu bytes, expected %zu", m.payload().size(),
                 sizeof(T));
    T v;
    std::memcpy(&v, m.payload().data(), sizeof v);
    return v;
}

coverse::task<void> entry(coverse::machine& m) {
    const std::uint32_t n = m.num_pes();
    const std::uint32_t me = m.pe();
    auto& ring = m.register_stream();
    auto& bcast = m.register_stream();
    auto& big = m.register_stream();
    auto& self = m.register_stream();
    auto& read_only = m.register_stream();
    const int legacy = CmiRegisterHandler(legacy_handler);
    co_await m.barrier();

    // Ring: each PE sends its number to the next one.
    const std::uint32_t next = (me + 1) % n;
    const std::uint32_t prev = (me + n - 1) % n;
    const std::uint64_t mine = 1000 + me;
    co_await m.send(next, ring.handler(), bytes_of(mine));
    coverse::message got = co_await ring.next();
    if (value_of<std::uint64_t>(got) != 1000 + prev)
        CmiAbort("coroutine_api: PE %u got %llu from the ring, expected %u", me,
                 static_cast<unsigned long long>(value_of<std::uint64_t>(got)), 1000 + prev);

    // A legacy handler on the same scheduler, fed by a coroutine's send.
    const std::uint32_t token = 7;
    co_await m.send(next, legacy, bytes_of(token));
    while (legacy_hits < 1)
        co_await coverse::sleep_for(std::chrono::microseconds(100));

    // Broadcast including ourselves: every PE receives one from every PE.
    coverse::message b = coverse::make_message(bcast.handler(), bytes_of(me));
    co_await m.broadcast(b.bytes(), true);
    std::vector<int> seen(n, 0);
    for (std::uint32_t i = 0; i < n; ++i) {
        coverse::message x = co_await bcast.next();
        const auto from = value_of<std::uint32_t>(x);
        if (from >= n || seen[from]++)
            CmiAbort("coroutine_api: PE %u: broadcast from PE %u is out of range or repeated", me,
                     from);
    }

    // A broadcast only reads the caller's bytes: here from read-only memory, 8 B and 300 KiB
    // (a rendezvous), every byte checked. First with a header that names no root and holds
    // the API's flags by chance (both used to be written there: a crash; it goes as a copy),
    // then with one that names this PE and no flags (it goes from the bytes themselves).
    for (const std::size_t round : {0, 1, 2, 3}) {
        const std::size_t payload_size = round % 2 == 0 ? 8 : std::size_t{300} << 10;
        const bool ready = round >= 2;
        const std::size_t size = CmiMsgHeaderSizeBytes + payload_size;
        const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
        const std::size_t mapped = (size + page - 1) / page * page;
        void* area =
            ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (area == MAP_FAILED) CmiAbort("coroutine_api: mmap of %zu bytes failed", mapped);
        auto* bytes = static_cast<std::byte*>(area);
        CmiMsgHeaderBasic head{};
        head.handler = static_cast<std::uint32_t>(read_only.handler());
        if (ready) {
            head.root_plus_one = me + 1;
        } else {
            head.flags = 0x2 | 0x4 | (next << 8);  // a stream credit from `next`, carried credits
            head.reserved = (static_cast<std::uint32_t>(read_only.handler()) << 16) | 3;
        }
        std::memcpy(bytes, &head, sizeof head);
        for (std::size_t i = 0; i < payload_size; ++i)
            bytes[CmiMsgHeaderSizeBytes + i] = static_cast<std::byte>((i * 7 + me) & 0xFF);
        std::memcpy(bytes + CmiMsgHeaderSizeBytes, &me, sizeof me);
        // Read-only from here: a store into these bytes is a SIGSEGV, which fails the job.
        if (::mprotect(area, mapped, PROT_READ) != 0) CmiAbort("coroutine_api: mprotect failed");
        co_await m.broadcast(std::span<const std::byte>(bytes, size), true);
        std::vector<int> from_each(n, 0);
        for (std::uint32_t i = 0; i < n; ++i) {
            coverse::message x = co_await read_only.next();
            std::uint32_t from = n;
            if (x.payload().size() == payload_size)
                std::memcpy(&from, x.payload().data(), sizeof from);
            if (from >= n || from_each[from]++)
                CmiAbort("coroutine_api: PE %u: a %zu B broadcast of %zu B from PE %u", me,
                         x.payload().size(), payload_size, from);
            for (std::size_t k = sizeof from; k < payload_size; ++k)
                if (x.payload()[k] != static_cast<std::byte>((k * 7 + from) & 0xFF))
                    CmiAbort("coroutine_api: PE %u: broadcast of %zu B from PE %u corrupt at %zu",
                             me, payload_size, from, k);
        }
        ::munmap(area, mapped);
        co_await m.barrier();  // the next round's broadcasts after every PE took this one's
    }

    // reduce_sum, twice in a row.
    const std::int64_t s1 = co_await m.reduce_sum(me + 1);
    const std::int64_t s2 = co_await m.reduce_sum(2);
    const std::int64_t want1 = static_cast<std::int64_t>(n) * (n + 1) / 2;
    if (s1 != want1 || s2 != 2 * static_cast<std::int64_t>(n))
        CmiAbort("coroutine_api: PE %u: reduce_sum gave %lld and %lld, expected %lld and %lld", me,
                 static_cast<long long>(s1), static_cast<long long>(s2),
                 static_cast<long long>(want1), static_cast<long long>(2 * n));

    // 1 MiB to the next PE, data checked.
    std::vector<std::byte> payload(1 << 20);
    for (std::size_t i = 0; i < payload.size(); ++i)
        payload[i] = static_cast<std::byte>((i * 31 + me) & 0xFF);
    co_await m.send(next, big.handler(), payload);
    coverse::message large = co_await big.next();
    if (large.payload().size() != payload.size())
        CmiAbort("coroutine_api: PE %u: 1 MiB message arrived with %zu bytes", me,
                 large.payload().size());
    for (std::size_t i = 0; i < payload.size(); ++i)
        if (large.payload()[i] != static_cast<std::byte>((i * 31 + prev) & 0xFF))
            CmiAbort("coroutine_api: PE %u: 1 MiB message corrupt at byte %zu", me, i);

    // pending() counts the messages not taken yet (it counted taken ones too, until the
    // stream's queue emptied).
    for (std::uint32_t i = 0; i < 3; ++i)
        co_await m.send(me, self.handler(), bytes_of(i));
    while (self.pending() < 3)
        co_await coverse::sleep_for(std::chrono::microseconds(100));
    for (std::uint32_t i = 0; i < 3; ++i) {
        coverse::message x = co_await self.next();
        if (value_of<std::uint32_t>(x) != i || self.pending() != 2 - i)
            CmiAbort("coroutine_api: PE %u: after taking message %u of 3, pending() is %zu", me, i,
                     self.pending());
    }

    co_await m.barrier();
    if (me == 0) CmiPrintf("coroutine_api: %u PEs ok\n", n);
}

}  // namespace

int main(int argc, char** argv) {
    return coverse::run(argc, argv, entry);
}
