// The coroutine API's awaitables on 1, 2 and 4 PEs (same host and over TCP): ownership-
// taking sends (small and 1 MiB), copying sends (read when awaited, none when dropped),
// typed sends and receives, receive timeouts and
// cancellation (a stop before and after a message was handed over: none is half-taken),
// when_all / when_any over sends and receives, bounded streams (a full stream holds the
// sender back), the typed collectives with a user type and operator, the machine's task
// scope (the job waits for it), and the error paths (PE out of range, wrong sizes).
// Any mismatch aborts the job with a message saying what was expected.
#include <converse.h>

#include <coverse/coverse.hpp>
#include <coverse/runtime/settings.hpp>
#include <coverse/runtime/timer.hpp>
#include <coverse/runtime/when.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <vector>

using namespace std::chrono_literals;

// The stream's queue, seen from a test: the room it keeps for a message handed out.
struct coverse::detail::stream_access {
    static std::size_t reserved(const coverse::message_stream& s) { return s._queue.reserved(); }
    static std::size_t capacity(const coverse::message_stream& s) { return s._queue.capacity(); }
};

namespace {

#define EXPECT(cond, ...)                                                       \
    do {                                                                        \
        if (!(cond)) CmiAbort("coro_features: PE %d: " #cond ": " __VA_ARGS__); \
    } while (0)

struct stats {  // a user type for the collectives
    std::int64_t sum;
    std::int32_t min;
    std::int32_t max;
};
stats merge_stats(stats a, stats b) {
    return {a.sum + b.sum, std::min(a.min, b.min), std::max(a.max, b.max)};
}

coverse::task<void> nap(std::chrono::milliseconds d) {
    co_await coverse::sleep_for(d);
}

int stop_handler_hits = 0;
coverse::message_stream* st_go = nullptr;  // put_notify's cancelled note would land here
int st_go_handler = -1;
coverse::task_scope* stop_target = nullptr;
int stop_delivers_first = -1;  // the stopper's handler first delivers this handler's message
int stop_delivers_count = 1;   // that many of them
coverse::message_stream* stop_stream = nullptr;  // then looks at its queue
std::size_t stop_seen_reserved = 0, stop_seen_capacity = 0;
bool scope_task_done = false;

coverse::task<void> receive_expecting_cancel(coverse::message_stream& s, bool* cancelled) {
    try {
        coverse::message m = co_await s.next();
        (void)m;
    } catch (const coverse::cancelled_error&) {
        *cancelled = true;
    }
}

coverse::task<void> send_many(coverse::machine& m, std::uint32_t to, int handler, int count,
                              int* sent) {
    for (int i = 0; i < count; ++i) {
        co_await m.send_value(to, handler, i);
        ++*sent;
    }
}

coverse::task<void> send_expecting_cancel(coverse::machine& m, std::uint32_t to, int handler,
                                          bool* cancelled) {
    try {
        co_await m.send_value(to, handler, -1);
    } catch (const coverse::cancelled_error&) {
        *cancelled = true;
    }
}

// Runs after the entry returned: coverse::run must wait for it.
coverse::task<void> late_ring(coverse::machine& m, coverse::message_stream& s) {
    co_await coverse::sleep_for(20ms);
    const std::uint32_t next = (m.pe() + 1) % m.num_pes();
    co_await m.send_value(next, s.handler(), std::uint32_t{0xABC0} + m.pe());
    const auto v = co_await s.next<std::uint32_t>();
    const std::uint32_t prev = (m.pe() + m.num_pes() - 1) % m.num_pes();
    EXPECT(v == 0xABC0 + prev, "late ring got %x", CmiMyPe(), v);
    scope_task_done = true;
}

struct streams {
    coverse::message_stream *ring, *big, *quiet, *self, *bounded, *late, *go;
    int stopper;
    coverse::message_stream *burst, *window, *window_ack;
    int garbage;
    coverse::message_stream* nested;
    int nested_done;
    coverse::message_stream *huge, *huge_ack;
    coverse::message_stream *pair_a, *pair_b, *pair_ack;
};

// ownership-taking sends, typed payloads
coverse::task<void> sends(coverse::machine& m, streams st) {
    auto& ring = *st.ring;
    auto& big = *st.big;
    const std::uint32_t me = m.pe(), n = m.num_pes();
    const std::uint32_t next = (me + 1) % n, prev = (me + n - 1) % n;
    const int pe = static_cast<int>(me);
    {
        coverse::message msg =
            coverse::message::allocate(ring.handler(), 4 * sizeof(std::uint32_t));
        auto words = msg.as_span<std::uint32_t>();
        for (std::uint32_t i = 0; i < 4; ++i)
            words[i] = me * 100 + i;
        co_await m.send(next, std::move(msg));
        EXPECT(!msg, "a sent message must be moved from", pe);
        coverse::message got = co_await ring.next();
        auto in = got.as_span<const std::uint32_t>();
        EXPECT(in.size() == 4 && in[3] == prev * 100 + 3, "ring words %zu", pe, in.size());
        bool threw = false;
        try {
            (void)got.as<std::uint64_t>();  // 16 bytes are not one 8-byte value
        } catch (const std::length_error&) {
            threw = true;
        }
        EXPECT(threw, "as<T> of the wrong size must throw", pe);

        std::array<double, 3> arr{me + 0.5, 1.5, 2.5};
        co_await m.send(next, ring.handler(), std::span<const double>(arr));
        got = co_await ring.next();
        EXPECT(got.as_span<double>().size() == 3 && got.as_span<double>()[0] == prev + 0.5,
               "span of double", pe);

        co_await m.send_value(next, ring.handler(), std::int16_t{7});
        threw = false;
        try {
            (void)co_await ring.next<std::int64_t>();
        } catch (const std::length_error&) {
            threw = true;
        }
        EXPECT(threw, "next<int64_t> of a 2-byte message must throw", pe);
    }
    // Copying sends from the caller's bytes: read when awaited, reusable once it completes
    // (the small ones go straight into the peer's ring on the same host, or into its
    // connection's copies over TCP; a message of our own to ourselves).
    {
        const coverse::machine::send_counters before = m.send_stats();
        std::vector<std::uint32_t> word(1);
        for (std::uint32_t batch = 0; batch < 4; ++batch) {  // 25 at a time: within credits
            for (std::uint32_t i = batch * 25; i < (batch + 1) * 25; ++i) {
                word[0] = me * 1000 + i;
                co_await m.send(next, ring.handler(), std::span<const std::uint32_t>(word));
                word[0] = 0xDEAD;  // after the await: must not reach the receiver
            }
            for (std::uint32_t i = batch * 25; i < (batch + 1) * 25; ++i) {
                const auto v = co_await ring.next<std::uint32_t>();
                EXPECT(v == prev * 1000 + i, "copying send %u: got %u", pe, i, v);
            }
        }
        // Each went one of the two ways; to another PE (ring or connection), straight from
        // the stack.
        const auto& after = m.send_stats();
        const std::uint64_t frameless = after.copied_frameless - before.copied_frameless;
        const std::uint64_t allocated = after.copied_allocated - before.copied_allocated;
        EXPECT(frameless + allocated == 100, "copying sends counted %llu + %llu, not 100", pe,
               static_cast<unsigned long long>(frameless),
               static_cast<unsigned long long>(allocated));
        if (n > 1)
            EXPECT(frameless > 0, "no copying send to PE %u went from the stack (%llu copied)", pe,
                   next, static_cast<unsigned long long>(allocated));
        else
            EXPECT(frameless == 0, "%llu copying sends to ourselves went from the stack", pe,
                   static_cast<unsigned long long>(frameless));
        // Made first, awaited later: the bytes are those at the await.
        word[0] = 0x1111;
        {
            auto later = m.send(next, ring.handler(), std::span<const std::uint32_t>(word));
            word[0] = 0x2222;
            co_await std::move(later);
        }
        const auto read = co_await ring.next<std::uint32_t>();
        EXPECT(read == 0x2222, "a copying send read its bytes before its await (%#x)", pe, read);
        // Moved into a task: the task sends once, and the moved-from send_op nothing.
        {
            auto op = m.send(next, ring.handler(), std::span<const std::uint32_t>(word));
            coverse::task<void> as_task = std::move(op);
            co_await std::move(as_task);
            bool threw = false;
            try {
                co_await std::move(op);
            } catch (const std::invalid_argument&) {
                threw = true;
            }
            EXPECT(threw, "awaiting a moved-from copying send must throw", pe);
            (void)co_await ring.next<std::uint32_t>();
        }
        // Awaited twice: the second await sends nothing (it throws, as for an empty message).
        {
            auto op = m.send(next, ring.handler(), std::span<const std::uint32_t>(word));
            co_await op;
            bool threw = false;
            try {
                co_await op;
            } catch (const std::invalid_argument&) {
                threw = true;
            }
            EXPECT(threw, "awaiting a sent copying send again must throw, not send again", pe);
            (void)co_await ring.next<std::uint32_t>();
        }
        // Dropped unawaited: nothing goes.
        word[0] = 0xBAD;
        { auto dropped = m.send(next, ring.handler(), std::span<const std::uint32_t>(word)); }
        co_await m.send_value(next, ring.handler(), std::uint32_t{0x600D});
        const auto first = co_await ring.next<std::uint32_t>();
        EXPECT(first == 0x600D, "a dropped copying send arrived (got %#x)", pe, first);
        // Larger than the stack's composition: an allocated copy (by rendezvous here).
        std::vector<std::byte> bulk(64 * 1024);
        for (std::size_t i = 0; i < bulk.size(); ++i)
            bulk[i] = static_cast<std::byte>((i * 13 + me) & 0xFF);
        co_await m.send(next, big.handler(), std::span<const std::byte>(bulk));
        std::fill(bulk.begin(), bulk.end(), std::byte{0});
        coverse::message got = co_await big.next();
        EXPECT(got.payload().size() == bulk.size(), "64 KiB copy arrived with %zu", pe,
               got.payload().size());
        for (std::size_t i = 0; i < got.payload().size(); ++i)
            if (got.payload()[i] != static_cast<std::byte>((i * 13 + prev) & 0xFF))
                EXPECT(false, "64 KiB copy corrupt at %zu", pe, i);
    }
    // 1 MiB, moved in: no copy on the way out; completes at get-done.
    {
        coverse::message msg = coverse::message::allocate(big.handler(), 1 << 20);
        auto p = msg.payload();
        for (std::size_t i = 0; i < p.size(); ++i)
            p[i] = static_cast<std::byte>((i * 7 + me) & 0xFF);
        co_await m.send(next, std::move(msg));
        coverse::message got = co_await big.next();
        EXPECT(got.payload().size() == (1u << 20), "1 MiB arrived with %zu", pe,
               got.payload().size());
        for (std::size_t i = 0; i < got.payload().size(); ++i)
            if (got.payload()[i] != static_cast<std::byte>((i * 7 + prev) & 0xFF))
                EXPECT(false, "1 MiB corrupt at %zu", pe, i);
    }
}

// error paths
coverse::task<void> errors(coverse::machine& m, streams st) {
    auto& ring = *st.ring;
    const std::uint32_t me = m.pe(), n = m.num_pes();
    const std::uint32_t next = (me + 1) % n;
    const int pe = static_cast<int>(me);
    {
        bool threw = false;
        try {
            co_await m.send_value(n, ring.handler(), 1);
        } catch (const std::out_of_range&) {
            threw = true;
        }
        EXPECT(threw, "a send to PE %u must throw out_of_range", pe, n);
        threw = false;
        try {
            const std::uint32_t v = 1;
            co_await m.send(n + 1, ring.handler(), std::span<const std::uint32_t>(&v, 1));
        } catch (const std::out_of_range&) {
            threw = true;
        }
        EXPECT(threw, "a copying send to PE %u must throw out_of_range", pe, n + 1);
        threw = false;
        try {
            (void)co_await m.reduce(1, std::plus<int>{}, n + 3);
        } catch (const std::out_of_range&) {
            threw = true;
        }
        EXPECT(threw, "reduce with root %u must throw out_of_range", pe, n + 3);
        threw = false;
        try {
            co_await m.send(next, coverse::message{});
        } catch (const std::invalid_argument&) {
            threw = true;
        }
        EXPECT(threw, "sending an empty message must throw", pe);
    }
}

// timeouts and cancellation
coverse::task<void> cancellation(coverse::machine& m, streams st) {
    auto& quiet = *st.quiet;
    auto& self = *st.self;
    const int stopper = st.stopper;
    const std::uint32_t me = m.pe();
    const int pe = static_cast<int>(me);
    {
        // Nothing comes: the timeout says so, and nothing is taken.
        auto r = co_await quiet.next(5ms);
        EXPECT(!r, "a receive on a quiet stream must time out", pe);
        auto w = co_await coverse::with_timeout(quiet.next(), 2ms);
        EXPECT(!w, "with_timeout on a quiet stream", pe);
        // when_any: the sleep wins, the receive is cancelled and takes nothing.
        auto any = co_await coverse::when_any(quiet.next(), nap(3ms));
        EXPECT(any.index == 1, "when_any: the sleep must win, got %zu", pe, any.index);
        EXPECT(quiet.pending() == 0, "nothing pending", pe);
        // A message sent after those cancelled receives is still the next one taken.
        co_await m.send_value(me, quiet.handler(), std::uint32_t{42});
        auto later = co_await quiet.next(10s);
        EXPECT(later && later->as<std::uint32_t>() == 42, "the message after cancelled receives",
               pe);

        // Stop before any message: the waiting receive throws cancelled_error.
        coverse::task_scope scope("cancel test");
        bool cancelled = false;
        scope.spawn(receive_expecting_cancel(quiet, &cancelled), "receive to cancel");
        co_await coverse::sleep_for(1ms);
        scope.request_stop();
        co_await scope.join();
        EXPECT(cancelled, "a stopped receive must throw cancelled_error", pe);

        // Stop after the message was handed to the waiting receive, before it ran again:
        // the stopper's handler delivers the stream's messages itself (CmiDeliverSpecificMsg,
        // nested in that handler, so the receiving task is only woken and the 16 after it
        // fill the stream's queue), then requests the stop; the receive resumes already
        // stopped and gives its message back to the front, into the room the queue kept for
        // it (message_queue::reserve_one). (Delivered by the loop itself, the message would
        // resume the receive at once.)
        coverse::task_scope scope2("cancel after hand-off");
        stop_target = &scope2;
        stop_delivers_first = self.handler();
        stop_delivers_count = 17;
        stop_stream = &self;
        bool cancelled2 = false;
        scope2.spawn(receive_expecting_cancel(self, &cancelled2), "receive handed a message");
        co_await coverse::sleep_for(1ms);
        co_await m.send(me, stopper, std::span<const std::byte>{});
        for (std::uint32_t v = 77; v < 77 + 17; ++v)
            co_await m.send_value(me, self.handler(), v);
        co_await scope2.join();
        stop_delivers_count = 1;
        stop_stream = nullptr;
        // The give-back used the room kept for it: nothing grew, nothing stays reserved.
        EXPECT(stop_seen_reserved == 1 && stop_seen_capacity == 32,
               "after the hand-over and 16 queued: %zu reserved, room for %zu (1, 32 expected)", pe,
               stop_seen_reserved, stop_seen_capacity);
        EXPECT(coverse::detail::stream_access::reserved(self) == 0 &&
                   coverse::detail::stream_access::capacity(self) == stop_seen_capacity,
               "after the give-back: %zu reserved, room for %zu", pe,
               coverse::detail::stream_access::reserved(self),
               coverse::detail::stream_access::capacity(self));
        EXPECT(stop_handler_hits == 1 && cancelled2, "the handed-over receive must be cancelled",
               pe);
        EXPECT(self.pending() == 17, "%zu messages pending after the give-back, not 17", pe,
               self.pending());
        for (std::uint32_t v = 77; v < 77 + 17; ++v) {
            auto back = self.try_next();
            EXPECT(back && back->as<std::uint32_t>() == v,
                   "the cancelled receive must give its message back first (%u)", pe, v);
        }
        EXPECT(self.pending() == 0, "nothing left", pe);
    }
}

// when_all over sends and receives
coverse::task<void> when_all_test(coverse::machine& m, streams st) {
    auto& ring = *st.ring;
    const std::uint32_t me = m.pe(), n = m.num_pes();
    const std::uint32_t next = (me + 1) % n, prev = (me + n - 1) % n;
    const int pe = static_cast<int>(me);
    {
        auto [a, b, got] =
            co_await coverse::when_all(m.send_value(next, ring.handler(), me),
                                       m.send_value(next, ring.handler(), me + 1000), ring.next());
        (void)a;
        (void)b;
        coverse::message second = co_await ring.next();
        const auto x = got.as<std::uint32_t>(), y = second.as<std::uint32_t>();
        EXPECT(x == prev && y == prev + 1000, "when_all ring %u %u", pe, x, y);
    }
    // machine::send's send_op where tasks are wanted (when_all, a vector of tasks), and one
    // dropped unawaited: that message is never sent (the next one to arrive is the later).
    {
        auto one = [&](std::uint32_t v) {
            coverse::message msg = coverse::message::allocate(ring.handler(), sizeof v);
            std::memcpy(msg.payload().data(), &v, sizeof v);
            return m.send(next, std::move(msg));
        };
        {
            coverse::send_op dropped = one(me + 2000);
            (void)dropped;
        }
        std::vector<coverse::task<void>> sends;
        sends.push_back(one(me + 3000));
        co_await coverse::when_all(std::move(sends));
        auto [sent, got] =
            co_await coverse::when_all(coverse::task<void>(one(me + 4000)), ring.next());
        (void)sent;
        coverse::message last = co_await ring.next();
        const auto x = got.as<std::uint32_t>(), y = last.as<std::uint32_t>();
        EXPECT(x == prev + 3000 && y == prev + 4000,
               "send_ops as tasks gave %u %u (%u: a dropped send_op went)", pe, x, y, prev + 2000);
    }
}

// bounded stream: capacity 2 per sender
coverse::task<void> bounded_test(coverse::machine& m, streams st) {
    auto& bounded = *st.bounded;
    const std::uint32_t me = m.pe(), n = m.num_pes();
    const std::uint32_t next = (me + 1) % n;
    const int pe = static_cast<int>(me);
    {
        co_await m.barrier();
        int sent = 0;
        coverse::task_scope senders("bounded senders");
        senders.spawn(send_many(m, next, bounded.handler(), 10, &sent), "bounded sender");
        while (bounded.pending() < 2)
            co_await coverse::sleep_for(200us);
        co_await coverse::sleep_for(20ms);  // room for a third, if credits were broken
        EXPECT(bounded.pending() == 2, "a stream of capacity 2 holds %zu", pe, bounded.pending());
        for (int i = 0; i < 10; ++i) {
            const int v = co_await bounded.next<int>();
            EXPECT(v == i, "bounded stream: got %d, expected %d", pe, v, i);
            EXPECT(bounded.pending() <= 2, "bounded stream over capacity: %zu", pe,
                   bounded.pending());
        }
        co_await senders.join();
        EXPECT(sent == 10, "sent %d of 10", pe, sent);
    }
}

// A send waiting for a credit, stopped: it throws cancelled_error and sends nothing.
coverse::task<void> credit_cancel_test(coverse::machine& m, streams st) {
    auto& bounded = *st.bounded;
    const std::uint32_t me = m.pe();
    const int pe = static_cast<int>(me);
    {
        co_await m.barrier();  // every PE drained its bounded stream
        for (int i = 0; i < 2; ++i)
            co_await m.send_value(me, bounded.handler(), 100 + i);  // both of our credits
        bool cancelled = false;
        coverse::task_scope waiting("credit wait");
        waiting.spawn(send_expecting_cancel(m, me, bounded.handler(), &cancelled), "third send");
        co_await coverse::sleep_for(2ms);
        waiting.request_stop();
        co_await waiting.join();
        EXPECT(cancelled, "a send waiting for a credit must be cancelled", pe);
        EXPECT(co_await bounded.next<int>() == 100 && co_await bounded.next<int>() == 101,
               "the two sends before the cancelled one", pe);
        co_await coverse::sleep_for(2ms);
        EXPECT(bounded.pending() == 0, "the cancelled send must not arrive (%zu pending)", pe,
               bounded.pending());
    }
}

coverse::task<void> take_burst(coverse::message_stream& s, std::vector<int>* got) {
    for (;;) {
        const int v = co_await s.next<int>();
        if (v < 0) co_return;
        got->push_back(v);
    }
}

// A burst into a stream that two tasks wait on: messages that arrive together go to the
// stream at once (the waiting task takes them without suspending for each). Every message
// arrives exactly once, and each task sees its share in the order sent.
coverse::task<void> burst_test(coverse::machine& m, streams st) {
    auto& burst = *st.burst;
    const std::uint32_t me = m.pe(), n = m.num_pes();
    const int pe = static_cast<int>(me);
    constexpr int total = 3000;
    std::vector<int> a, b;
    coverse::task_scope receivers("burst receivers");
    receivers.spawn(take_burst(burst, &a), "burst receiver a");
    receivers.spawn(take_burst(burst, &b), "burst receiver b");
    co_await m.barrier();  // both wait, on every PE
    const std::uint32_t next = (me + 1) % n;
    for (int i = 0; i < total; ++i)
        co_await m.send_value(next, burst.handler(), i);
    for (int i = 0; i < 2; ++i)
        co_await m.send_value(next, burst.handler(), -1);  // one end for each task
    co_await receivers.join();
    EXPECT(a.size() + b.size() == total, "burst: %zu + %zu of %d messages", pe, a.size(), b.size(),
           total);
    EXPECT(std::adjacent_find(a.begin(), a.end(), std::greater_equal<int>()) == a.end() &&
               std::adjacent_find(b.begin(), b.end(), std::greater_equal<int>()) == b.end(),
           "burst: a task saw its messages out of order", pe);
    std::vector<int> all(a);
    all.insert(all.end(), b.begin(), b.end());
    std::sort(all.begin(), all.end());
    for (int i = 0; i < total; ++i)
        EXPECT(all[static_cast<std::size_t>(i)] == i, "burst: message %d missing or twice", pe, i);
}

int garbage_hits = 0;

coverse::task<void> serve_windows(coverse::machine& m, streams st, std::uint32_t to, int windows) {
    const int pe = static_cast<int>(m.pe());
    for (int k = 0; k < windows; ++k) {
        for (int i = 0; i < 4; ++i) {
            const int v = co_await st.window->next<int>();
            EXPECT(v == k * 4 + i, "window %d: got %d", pe, k, v);
        }
        if (k % 2 == 0) {
            co_await m.send_value(to, st.window_ack->handler(), k);  // a copying send
        } else {
            coverse::message ack = coverse::message::allocate(st.window_ack->handler(), sizeof k);
            std::memcpy(ack.payload().data(), &k, sizeof k);
            co_await m.send(to, std::move(ack));  // a message send
        }
    }
}

// Stream credits come back riding in the header of the receiver's replies: a stream of
// capacity 8 (its credits due after 4 taken), windows of 4 each answered by an unbounded
// acknowledgement, copied or a message in turn. Every window's credits went back exactly
// once, in its acknowledgement's header, over a ring or a socket alike. A Converse message
// whose header holds anything in the machine's fields (a stack message with only its
// handler set) is delivered as it is, no flag of it taken for credits.
coverse::task<void> credits_ride_test(coverse::machine& m, streams st) {
    const std::uint32_t me = m.pe(), n = m.num_pes();
    const std::uint32_t next = (me + 1) % n, prev = (me + n - 1) % n;
    const int pe = static_cast<int>(me);
    constexpr int windows = 50;
    co_await m.barrier();
    // Credit returns the earlier tests left due go first (a deferred call returns them).
    co_await coverse::sleep_for(2ms);
    const coverse::machine::send_counters before = m.send_stats();
    coverse::task_scope server("window server");
    server.spawn(serve_windows(m, st, prev, windows), "window server");
    for (int k = 0; k < windows; ++k) {
        for (int i = 0; i < 4; ++i)
            co_await m.send_value(next, st.window->handler(), k * 4 + i);
        const int a = co_await st.window_ack->next<int>();
        EXPECT(a == k, "window %d acknowledged as %d", pe, k, a);
    }
    co_await server.join();
    co_await m.barrier();  // the last window's credits leave when the delivery that took it ends
    const coverse::machine::send_counters after = m.send_stats();
    const std::uint64_t riding = after.credits_riding - before.credits_riding;
    const std::uint64_t messages = after.credit_messages - before.credit_messages;
    EXPECT(riding + messages == windows, "credits of %d windows went back %llu + %llu times", pe,
           windows, static_cast<unsigned long long>(riding),
           static_cast<unsigned long long>(messages));
    // The credits of a window come due as its last message is taken, and its
    // acknowledgement, copied or a message, goes before that task suspends: each carries
    // them, over a ring or a socket. A PE's sends to itself carry none.
    if (n > 1)
        EXPECT(riding == windows, "credits rode in %llu of %d acknowledgements", pe,
               static_cast<unsigned long long>(riding), windows);
    else
        EXPECT(riding == 0, "%llu credits rode in sends to this PE itself", pe,
               static_cast<unsigned long long>(riding));

    struct {
        char header[CmiMsgHeaderSizeBytes];
        int value;
    } junk;
    std::memset(&junk, 0xff, sizeof junk);
    CmiSetHandler(&junk, st.garbage);
    CmiSyncSend(static_cast<int>(next), sizeof junk, &junk);
    for (int waited = 0; garbage_hits < 1; ++waited) {
        EXPECT(waited < 10000, "a message with a header full of ones never came", pe);
        co_await coverse::sleep_for(1ms);
    }

    // The API's own header flags set by chance in headers it did not compose: a stream
    // credit (0x2) with a source PE (from bit 8) and carried credits (0x4, `reserved` =
    // handler << 16 | count), into the bounded stream. Through a Converse send, with this
    // PE as the source, they would have the receiver return credits nobody spent; through
    // the API's send of raw bytes, with a source no PE has, the credit that send spent would
    // be lost. Either way this PE's credits for the next PE end at the capacity.
    auto& window = *st.window;
    const auto credits_settle = [&](const char* after_what) -> coverse::task<void> {
        for (int waited = 0; window.credits_for(next) != window.capacity(); ++waited) {
            EXPECT(waited < 10000, "%s: this PE holds %u credits for PE %u, not the capacity %u",
                   pe, after_what, window.credits_for(next), next, window.capacity());
            co_await coverse::sleep_for(1ms);
        }
    };
    EXPECT(st.window_ack->credits_for(next) == coverse::message_stream::unbounded_credits,
           "an unbounded stream reports %u credits", pe, st.window_ack->credits_for(next));
    co_await credits_settle("before forged flags");
    struct {
        CmiMsgHeaderBasic header;
        int value;
    } forged{};
    forged.header.handler = static_cast<std::uint32_t>(window.handler());
    forged.header.reserved = static_cast<std::uint32_t>(window.handler()) << 16 | 4u;
    for (int i = 0; i < 4; ++i) {
        forged.header.flags = 0x2u | 0x4u | (me << 8);
        forged.value = 1000 + i;
        CmiSyncSend(static_cast<int>(next), sizeof forged, &forged);
    }
    for (int i = 0; i < 4; ++i) {
        const int v = co_await window.next<int>();
        EXPECT(v == 1000 + i, "Converse message %d with forged flags came as %d", pe, i, v);
    }
    co_await m.barrier();
    co_await coverse::sleep_for(20ms);  // credits returned for them would be here by now
    // Returned for the forged credits (to this PE's credits for the next PE), or carried
    // by the previous PE's forged messages (to its credits for the previous PE).
    for (const std::uint32_t other : {next, prev})
        EXPECT(window.credits_for(other) == window.capacity(),
               "Converse messages with forged flags gave this PE %u credits for PE %u "
               "(capacity %u)",
               pe, window.credits_for(other), other, window.capacity());
    // Raw bytes, with the flags or with only stray bits where a credit's PE goes (which a
    // credited send must set, not add to). The caller's bytes are read-only to the send.
    for (int i = 0; i < 4; ++i) {
        forged.header.flags = (i % 2 == 0 ? 0x2u | 0x4u : 0u) | ~0u << 8;
        forged.value = 2000 + i;
        const auto before = forged;
        co_await m.send(next, std::as_bytes(std::span(&forged, 1)));
        EXPECT(std::memcmp(&before, &forged, sizeof forged) == 0,
               "send(pe, span) wrote into the caller's bytes", pe);
    }
    for (int i = 0; i < 4; ++i) {
        const int v = co_await window.next<int>();
        EXPECT(v == 2000 + i, "raw message %d with forged flags came as %d", pe, i, v);
    }
    co_await credits_settle("after raw sends with forged flags");
}

// Credits owed past what a header carries (a count above 0xffff) go back by a credit
// message: a stream whose return point (half its capacity) is 2^16 + 1 credits. Each PE
// sends the next one more message than the capacity, which it can only with credits back;
// the receiver answers the sender as soon as those credits come due, a send they would
// ride in if they fitted. Then the sender's credits and what the receiver still owes it
// add up to the capacity: none lost (a count cut to 16 bits), none made up.
constexpr std::uint32_t huge_capacity = (1u << 17) + 2;

coverse::task<void> take_in_order(coverse::machine& m, streams st, std::uint32_t from,
                                  std::uint32_t total) {
    const int pe = static_cast<int>(m.pe());
    for (std::uint32_t i = 0; i < total; ++i) {
        const auto v = co_await st.huge->next<std::uint32_t>();
        if (v != i) EXPECT(v == i, "huge stream: message %u came as %u", pe, i, v);
        if (i + 1 == huge_capacity / 2) co_await m.send_value(from, st.huge_ack->handler(), 0u);
    }
}

coverse::task<void> large_count_test(coverse::machine& m, streams st) {
    auto& huge = *st.huge;
    const std::uint32_t me = m.pe(), n = m.num_pes();
    const std::uint32_t next = (me + 1) % n, prev = (me + n - 1) % n;
    const int pe = static_cast<int>(me);
    const std::uint32_t total = huge.capacity() + 1;
    co_await m.barrier();
    coverse::task_scope taker("huge taker");
    taker.spawn(take_in_order(m, st, prev, total), "huge taker");
    for (std::uint32_t i = 0; i < total; ++i)
        co_await m.send_value(next, huge.handler(), i);
    co_await taker.join();
    (void)co_await st.huge_ack->next<std::uint32_t>();  // the next PE's answer
    co_await m.barrier();  // every PE took all; what came due went back
    co_await m.send_value(prev, st.huge_ack->handler(), huge.owed_to(prev));
    const auto owed = co_await st.huge_ack->next<std::uint32_t>();
    for (int waited = 0; huge.credits_for(next) + owed != huge.capacity(); ++waited) {
        EXPECT(waited < 10000 && huge.credits_for(next) + owed < huge.capacity(),
               "huge stream: this PE holds %u credits for PE %u, which owes it %u, capacity %u", pe,
               huge.credits_for(next), next, owed, huge.capacity());
        co_await coverse::sleep_for(1ms);
    }
}

// Two bounded streams owe credits to one PE at once: each PE sends the next one 5.5 times
// the capacity on each of streams A and B in turn (capacity 8, due after 4 taken), which it can
// only with both streams' credits back. The receiver takes them in turn and answers every 4
// pairs with an acknowledgement, whose header carries one stream's credits; the other's go
// by a credit message (or ride in the next acknowledgement). Every due return goes exactly
// once, by one way or the other, and the sender ends holding the capacity of both.
coverse::task<void> take_pairs(coverse::machine& m, streams st, std::uint32_t from, int pairs) {
    const int pe = static_cast<int>(m.pe());
    for (int group = 0; group < pairs / 4; ++group) {
        // The group's 8 messages are all here before any is taken: both streams come due
        // without this task suspending between (which would let the credit message of the
        // first go before the second came due), so the acknowledgement finds two returns due
        // to one PE and carries one.
        for (int waited = 0; st.pair_a->pending() < 4 || st.pair_b->pending() < 4; ++waited) {
            EXPECT(waited < 20000, "two streams: group %d never arrived (%zu and %zu here)", pe,
                   group, st.pair_a->pending(), st.pair_b->pending());
            co_await coverse::sleep_for(100us);
        }
        for (int k = 0; k < 4; ++k) {
            const int i = group * 4 + k;
            const int a = co_await st.pair_a->next<int>();
            const int b = co_await st.pair_b->next<int>();
            EXPECT(a == i && b == -i, "pair %d came as %d, %d", pe, i, a, b);
        }
        co_await m.send_value(from, st.pair_ack->handler(), group * 4 + 3);
    }
}

coverse::task<void> two_streams_test(coverse::machine& m, streams st) {
    auto& a = *st.pair_a;
    auto& b = *st.pair_b;
    const std::uint32_t me = m.pe(), n = m.num_pes();
    const std::uint32_t next = (me + 1) % n, prev = (me + n - 1) % n;
    const int pe = static_cast<int>(me);
    // Not a multiple of the capacity: the last returns due are due ones, not the ones a
    // stream makes when all its credits are taken.
    const int pairs = 5 * static_cast<int>(a.capacity()) + 4;
    co_await m.barrier();
    co_await coverse::sleep_for(2ms);  // returns the earlier tests left due go first
    const coverse::machine::send_counters before = m.send_stats();
    coverse::task_scope taker("pair taker");
    taker.spawn(take_pairs(m, st, prev, pairs), "pair taker");
    const auto send_all = [&]() -> coverse::task<void> {
        for (int i = 0; i < pairs; ++i) {
            co_await m.send_value(next, a.handler(), i);
            co_await m.send_value(next, b.handler(), -i);
        }
    };
    // A due return lost for either stream would hold this loop at a full window for good.
    const auto sent = co_await coverse::with_timeout(send_all(), 20s);
    EXPECT(sent, "two streams: the sends waited 20 s for credits", pe);
    co_await taker.join();
    for (int k = 0; k < pairs / 4; ++k) {
        const int v = co_await st.pair_ack->next<int>();
        EXPECT(v == k * 4 + 3, "two streams: acknowledgement %d came as %d", pe, k, v);
    }
    co_await m.barrier();  // the last returns leave when the delivery that took them ends
    for (int waited = 0; a.credits_for(next) != a.capacity() || b.credits_for(next) != b.capacity();
         ++waited) {
        EXPECT(waited < 10000,
               "two streams: this PE holds %u and %u credits for PE %u (capacity 8)", pe,
               a.credits_for(next), b.credits_for(next), next);
        co_await coverse::sleep_for(1ms);
    }
    co_await m.barrier();  // every PE's returns arrived (the counts below are of this PE's)
    const coverse::machine::send_counters after = m.send_stats();
    const std::uint64_t riding = after.credits_riding - before.credits_riding;
    const std::uint64_t messages = after.credit_messages - before.credit_messages;
    // Each stream comes due once per 4 pairs taken, 2 returns per acknowledgement at most
    // (one still due when 4 more are taken goes with them, all 8 at once): more is a return
    // made twice. (Too few cannot be told from here: the credits all came back, above.)
    EXPECT(riding + messages <= static_cast<std::uint64_t>(pairs / 2),
           "two streams: %d returns due went back %llu + %llu times", pe, pairs / 2,
           static_cast<unsigned long long>(riding), static_cast<unsigned long long>(messages));
    EXPECT(a.owed_to(prev) == 0 && b.owed_to(prev) == 0,
           "two streams: this PE still owes PE %u %u and %u credits", pe, prev, a.owed_to(prev),
           b.owed_to(prev));
    // Two returns are due when an acknowledgement goes (nothing runs in between): every
    // acknowledgement carries one; the other goes by a credit message, or, with 2 PEs (the
    // next PE is the previous one), may ride in one of this PE's data sends.
    if (n > 1)
        EXPECT(riding >= static_cast<std::uint64_t>(pairs / 4),
               "two streams: credits rode in %llu of %d acknowledgements", pe,
               static_cast<unsigned long long>(riding), pairs / 4);
}

int nested_done_hits = 0;
void nested_done_handler(void* msg) {
    CmiFree(msg);
    ++nested_done_hits;
}

// Credits that came due in a task that then waits in a nested loop go back from there: PE 1
// takes 4 of PE 0's 12 messages on a stream of capacity 8, then waits inside
// CmiDeliverSpecificMsg for the message PE 0 sends after all 12, which PE 0 can send only
// with those 4 credits back.
coverse::task<void> nested_wait_test(coverse::machine& m, streams st) {
    if (m.num_pes() < 2) co_return;
    const int pe = static_cast<int>(m.pe());
    co_await m.barrier();
    if (m.pe() == 0) {
        for (int i = 0; i < 12; ++i)
            co_await m.send_value(1, st.nested->handler(), i);
        struct {
            char header[CmiMsgHeaderSizeBytes];
        } done;
        CmiInitMsgHeader(&done, sizeof done);
        CmiSetHandler(&done, st.nested_done);
        CmiSyncSend(1, sizeof done, &done);
    } else if (m.pe() == 1) {
        for (int i = 0; i < 4; ++i)
            EXPECT(co_await st.nested->next<int>() == i, "nested: message %d", pe, i);
        CmiDeliverSpecificMsg(st.nested_done);
        EXPECT(nested_done_hits == 1, "nested: the done message ran %d times", pe,
               nested_done_hits);
        for (int i = 4; i < 12; ++i)
            EXPECT(co_await st.nested->next<int>() == i, "nested: message %d", pe, i);
    }
    co_await m.barrier();
}

// typed collectives
coverse::task<void> collectives(coverse::machine& m, streams) {
    const std::uint32_t me = m.pe(), n = m.num_pes();
    const int pe = static_cast<int>(me);
    {
        const stats mine{me + 1, static_cast<std::int32_t>(me), static_cast<std::int32_t>(me)};
        const auto at_root = co_await m.reduce(mine, merge_stats, n - 1);
        if (me == n - 1) {
            EXPECT(at_root && at_root->sum == std::int64_t(n) * (n + 1) / 2 && at_root->min == 0 &&
                       at_root->max == std::int32_t(n - 1),
                   "reduce of stats at the root", pe);
        } else {
            EXPECT(!at_root, "reduce: a non-root PE gets nullopt", pe);
        }
        const stats all = co_await m.allreduce(mine, merge_stats);
        EXPECT(all.sum == std::int64_t(n) * (n + 1) / 2 && all.max == std::int32_t(n - 1),
               "allreduce of stats", pe);
        const double b = co_await m.broadcast(me == n / 2 ? 3.25 : -1.0, n / 2);
        EXPECT(b == 3.25, "broadcast from PE %u gave %f", pe, n / 2, b);
        const auto g = co_await m.gather(me * me, 0);
        if (me == 0) {
            EXPECT(g.size() == n, "gather size %zu", pe, g.size());
            for (std::uint32_t i = 0; i < n; ++i)
                EXPECT(g[i] == i * i, "gather[%u] = %u", pe, i, g[i]);
        } else {
            EXPECT(g.empty(), "gather: a non-root PE gets nothing", pe);
        }
        const auto ag = co_await m.allgather(std::array<std::uint16_t, 2>{std::uint16_t(me), 9});
        EXPECT(ag.size() == n && ag[n - 1][0] == n - 1 && ag[0][1] == 9, "allgather", pe);
        const std::int64_t s = co_await m.reduce_sum(me);
        EXPECT(s == std::int64_t(n) * (n - 1) / 2, "reduce_sum %lld", pe,
               static_cast<long long>(s));
        co_await m.barrier();
    }
}

// one-sided memory: get and put over the provider that reaches each PE, and error paths
coverse::task<void> onesided(coverse::machine& m, streams) {
    const std::uint32_t me = m.pe(), n = m.num_pes();
    const std::uint32_t next = (me + 1) % n, prev = (me + n - 1) % n;
    const int pe = static_cast<int>(me);
    std::vector<std::uint32_t> mem(2048);
    for (std::size_t i = 0; i < 1024; ++i)
        mem[i] = me * 1'000'000 + static_cast<std::uint32_t>(i);
    coverse::exposed_region region = co_await m.expose(std::as_writable_bytes(std::span(mem)));
    const auto all = co_await m.allgather(region.descriptor());
    EXPECT(all[next].pe == next && all[next].length == mem.size() * 4, "descriptors", pe);

    // get the next PE's first half; put mine into the previous PE's second half.
    std::vector<std::uint32_t> got(1024);
    co_await m.get(next, all[next].slice(0, 4096), std::as_writable_bytes(std::span(got)));
    for (std::size_t i = 0; i < got.size(); ++i)
        EXPECT(got[i] == next * 1'000'000 + i, "get: word %zu is %u", pe, i, got[i]);
    co_await m.put(prev, std::as_bytes(std::span(mem).first(1024)), all[prev].slice(4096, 4096));
    co_await m.barrier();  // every put completed before its PE reached the barrier
    for (std::size_t i = 0; i < 1024; ++i)
        EXPECT(mem[1024 + i] == next * 1'000'000 + i, "put: word %zu is %u", pe, i, mem[1024 + i]);

    // A put and a get above RNDV_SPLIT at an odd size and offset (over cma: copied by both
    // PEs, rdma/src/shared_put.cpp).
    {
        constexpr std::size_t big = (1u << 20) + 5;
        std::vector<std::byte> sink(big + 3), source(big);
        for (std::size_t i = 0; i < big; ++i)
            source[i] = static_cast<std::byte>((i * 7 + me) & 0xFF);
        coverse::exposed_region sink_region = co_await m.expose(sink);
        const auto sinks = co_await m.allgather(sink_region.descriptor());
        co_await m.put(prev, source, sinks[prev].slice(3, big));
        co_await m.barrier();
        std::size_t wrong = 0;
        for (std::size_t i = 0; i < big; ++i)
            wrong += sink[3 + i] != static_cast<std::byte>((i * 7 + next) & 0xFF);
        EXPECT(wrong == 0 && sink[0] == std::byte{0}, "big put: %zu wrong bytes", pe, wrong);
        // And a get of the same size (shared too): the next PE's sink holds what the PE
        // after it put there.
        std::vector<std::byte> got_big(big);
        co_await m.get(next, sinks[next].slice(3, big), got_big);
        const std::uint32_t after_next = (next + 1) % n;
        wrong = 0;
        for (std::size_t i = 0; i < big; ++i)
            wrong += got_big[i] != static_cast<std::byte>((i * 7 + after_next) & 0xFF);
        EXPECT(wrong == 0, "big get: %zu wrong bytes", pe, wrong);
        co_await m.barrier();  // nobody reads the sinks any more
    }

    auto throws = [](auto&& f) {
        try {
            f();
        } catch (const std::exception&) {
            return true;
        }
        return false;
    };
    EXPECT(throws([&] { (void)all[next].slice(4000, 8192); }), "slice past the end", pe);
    bool threw = false;
    if (n > 2) {  // on 1 or 2 PEs, prev == next
        try {
            co_await m.get(prev, all[next], std::as_writable_bytes(std::span(got)));
        } catch (const std::invalid_argument&) {
            threw = true;
        }
        EXPECT(threw, "a get naming the wrong PE must throw", pe);
    }
    threw = false;
    std::vector<std::byte> too_big(all[next].length + 1);
    try {
        co_await m.get(next, all[next], too_big);
    } catch (const std::out_of_range&) {
        threw = true;
    }
    EXPECT(threw, "a get larger than the region must throw", pe);
    threw = false;
    try {
        (void)co_await m.expose({});
    } catch (const std::invalid_argument&) {
        threw = true;
    }
    EXPECT(threw, "exposing nothing must throw", pe);
    co_await m.barrier();  // nobody reads `mem` any more
}

// Runs `t` expecting cancelled_error (its scope's stop was requested before it started).
coverse::task<void> expect_cancel(coverse::task<void> t, bool* cancelled) {
    try {
        co_await std::move(t);
    } catch (const coverse::cancelled_error&) {
        *cancelled = true;
    }
}

// A stop requested before a one-sided operation is posted: cancelled_error, and nothing
// was read or written (the buffers are the caller's again at once).
coverse::task<void> onesided_cancel_test(coverse::machine& m, streams) {
    const std::uint32_t me = m.pe(), n = m.num_pes();
    const std::uint32_t next = (me + 1) % n;
    const int pe = static_cast<int>(me);
    std::vector<std::uint32_t> mem(1024, 0xAAAA0000u + me);
    coverse::exposed_region region = co_await m.expose(std::as_writable_bytes(std::span(mem)));
    const auto all = co_await m.allgather(region.descriptor());
    std::vector<std::uint32_t> local(1024, 0x5555u);
    const auto local_bytes = std::as_writable_bytes(std::span(local));
    bool cancelled[4] = {};
    {
        coverse::task_scope stopped("stopped one-sided operations");
        stopped.request_stop();
        stopped.spawn(expect_cancel(m.get(next, all[next], local_bytes), &cancelled[0]), "get");
        stopped.spawn(expect_cancel(m.put(next, local_bytes, all[next]), &cancelled[1]), "put");
        stopped.spawn(expect_cancel(m.put_notify(next, local_bytes, all[next],
                                                 coverse::message::allocate(st_go_handler, 0)),
                                    &cancelled[2]),
                      "put_notify");
        auto expose_then_drop = [](coverse::machine& mm,
                                   std::span<std::byte> b) -> coverse::task<void> {
            (void)co_await mm.expose(b);
        };
        stopped.spawn(expect_cancel(expose_then_drop(m, local_bytes), &cancelled[3]), "expose");
        co_await stopped.join();
    }
    for (int i = 0; i < 4; ++i)
        EXPECT(cancelled[i], "stopped one-sided operation %d must throw cancelled_error", pe, i);
    for (std::size_t i = 0; i < local.size(); ++i)
        EXPECT(local[i] == 0x5555u, "a cancelled get wrote word %zu", pe, i);
    co_await m.barrier();  // every PE's cancelled puts are behind it
    for (std::size_t i = 0; i < mem.size(); ++i)
        EXPECT(mem[i] == 0xAAAA0000u + me, "a cancelled put wrote word %zu", pe, i);
    EXPECT(st_go->pending() == 0, "a cancelled put_notify sent its note", pe);
    co_await m.barrier();  // nobody reads `mem` any more
}

// Collectives cancelled on one PE: PE 0 gives up on each kind of collective (a timeout)
// before any other PE has called it, then lets them go on. Its abandoned collective must
// not hand the late contributions to the next one: the allreduce after each is exact.
coverse::task<void> collective_cancel_test(coverse::machine& m, streams st) {
    auto& go = *st.go;
    const std::uint32_t me = m.pe(), n = m.num_pes();
    const int pe = static_cast<int>(me);
    if (n == 1) co_return;  // nothing to wait for: every collective finishes at once
    const char* kinds[] = {"reduce", "allreduce", "broadcast", "gather", "allgather", "barrier"};
    for (int kind = 0; kind < 6; ++kind) {
        auto one = [](coverse::machine& mm, int k) -> coverse::task<void> {
            switch (k) {
                case 0:
                    (void)co_await mm.reduce(100, std::plus<int>{});
                    break;
                case 1:
                    (void)co_await mm.allreduce(100, std::plus<int>{});
                    break;
                case 2:
                    (void)co_await mm.broadcast(100, mm.num_pes() - 1);  // PE 0 waits
                    break;
                case 3:
                    (void)co_await mm.gather(100);
                    break;
                case 4:
                    (void)co_await mm.allgather(100);
                    break;
                default:
                    co_await mm.barrier();
            }
        };
        if (me == 0) {
            const bool finished = co_await coverse::with_timeout(one(m, kind), 20ms);
            EXPECT(!finished, "%s finished at PE 0 before the others called it", pe, kinds[kind]);
            for (std::uint32_t p = 1; p < n; ++p)
                co_await m.send_value(p, go.handler(), kind);
        } else {
            EXPECT(co_await go.next<int>() == kind, "the go message", pe);
        }
        // The others' part: leaves of a reduce or gather finish (they only send); anything
        // that waits for PE 0 times out. Either is right.
        if (me != 0) (void)co_await coverse::with_timeout(one(m, kind), 20ms);
        const int total = co_await m.allreduce(static_cast<int>(me) + 1, std::plus<int>{});
        EXPECT(total == static_cast<int>(n * (n + 1) / 2),
               "the allreduce after a cancelled %s gave %d: a stale contribution", pe, kinds[kind],
               total);
    }
    co_await m.barrier();
}

// the machine's scope: the job waits for a task started here
coverse::task<void> scope_test(coverse::machine& m, streams st) {
    auto& late = *st.late;
    const std::uint32_t me = m.pe(), n = m.num_pes();
    m.spawn(late_ring(m, late), "late ring");
    if (me == 0) CmiPrintf("coro_features: %u PEs ok\n", n);
    co_return;
}

coverse::task<void> entry(coverse::machine& m) {
    streams st{&m.register_stream(),
               &m.register_stream(),
               &m.register_stream(),
               &m.register_stream(),
               &m.register_stream(2),
               &m.register_stream(),
               &m.register_stream(),
               0,
               &m.register_stream(),
               &m.register_stream(8),
               &m.register_stream(0),
               0,
               &m.register_stream(8),
               0,
               &m.register_stream(huge_capacity),
               &m.register_stream(),
               &m.register_stream(8),
               &m.register_stream(8),
               &m.register_stream(0)};
    st.nested_done = CmiRegisterHandler(nested_done_handler);
    st_go = st.go;
    st_go_handler = st.go->handler();
    st.garbage = m.register_handler([](coverse::message) { ++garbage_hits; });
    st.stopper = m.register_handler([](coverse::message) {
        ++stop_handler_hits;
        for (int i = 0; stop_delivers_first >= 0 && i < stop_delivers_count; ++i)
            CmiDeliverSpecificMsg(stop_delivers_first);
        if (stop_stream) {  // one handed out (its room kept), 16 queued: the ring grew for them
            stop_seen_reserved = coverse::detail::stream_access::reserved(*stop_stream);
            stop_seen_capacity = coverse::detail::stream_access::capacity(*stop_stream);
        }
        stop_target->request_stop();
    });
    co_await sends(m, st);
    co_await errors(m, st);
    co_await cancellation(m, st);
    co_await when_all_test(m, st);
    co_await bounded_test(m, st);
    co_await credit_cancel_test(m, st);
    co_await burst_test(m, st);
    co_await credits_ride_test(m, st);
    co_await nested_wait_test(m, st);
    co_await large_count_test(m, st);
    co_await two_streams_test(m, st);
    co_await collectives(m, st);
    co_await onesided(m, st);
    co_await onesided_cancel_test(m, st);
    co_await collective_cancel_test(m, st);
    co_await scope_test(m, st);
}

}  // namespace

int main(int argc, char** argv) {
    const int status = coverse::run(argc, argv, entry);
    if (status == 0 && !scope_task_done) {
        std::fprintf(stderr,
                     "coro_features: coverse::run returned before the scope's task ended\n");
        return 1;
    }
    return status;
}
