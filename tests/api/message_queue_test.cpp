// A message stream's queue (coverse/detail/message_queue.hpp): FIFO order through growth and
// wrap-around, messages put back at the front, batches at every position around the ring's
// end, the room given back when a large backlog drains (down to the 16 slots a new queue
// has; a small queue keeps its ring), and random mixes that grow and drain again; checked
// against std::deque as the model.
#include <gtest/gtest.h>

#include <coverse/detail/message_queue.hpp>

#include <cstdint>
#include <deque>
#include <random>
#include <vector>

namespace {

using coverse::detail::message_queue;

void* tag(std::uintptr_t n) {
    return reinterpret_cast<void*>(n);
}

std::vector<std::uintptr_t> contents(const message_queue& q) {
    std::vector<std::uintptr_t> out;
    q.for_each([&](void* m) { out.push_back(reinterpret_cast<std::uintptr_t>(m)); });
    return out;
}

std::vector<std::uintptr_t> contents(const std::deque<std::uintptr_t>& d) {
    return {d.begin(), d.end()};
}

TEST(message_queue, keeps_order_through_growth_and_wrap_around) {
    message_queue q;
    EXPECT_TRUE(q.empty());
    std::uintptr_t next_in = 1, next_out = 1;
    // Take fewer than are added each round: the head walks round the ring while it grows.
    for (int round = 0; round < 50; ++round) {
        for (int i = 0; i < 7; ++i)
            q.push_back(tag(next_in++));
        for (int i = 0; i < 5; ++i) {
            ASSERT_FALSE(q.empty());
            ASSERT_EQ(q.front(), tag(next_out)) << "round " << round;
            q.pop_front();
            ++next_out;
        }
        ASSERT_EQ(q.size(), next_in - next_out);
    }
    while (!q.empty()) {
        ASSERT_EQ(q.front(), tag(next_out++));
        q.pop_front();
    }
    EXPECT_EQ(next_out, next_in);
}

TEST(message_queue, a_batch_split_at_the_end_of_the_ring_stays_in_order) {
    message_queue q;
    for (std::uintptr_t i = 1; i <= 12; ++i)
        q.push_back(tag(i));
    for (int i = 0; i < 10; ++i)
        q.pop_front();  // the head is near the end of the first 16 slots
    const std::vector<void*> batch{tag(13), tag(14), tag(15), tag(16), tag(17), tag(18)};
    q.push_back(batch.data(), batch.size());
    EXPECT_EQ(contents(q), (std::vector<std::uintptr_t>{11, 12, 13, 14, 15, 16, 17, 18}));
    std::vector<void*> big;
    for (std::uintptr_t i = 19; i <= 60; ++i)
        big.push_back(tag(i));
    q.push_back(big.data(), big.size());  // grows while wrapped
    std::vector<std::uintptr_t> want;
    for (std::uintptr_t i = 11; i <= 60; ++i)
        want.push_back(i);
    EXPECT_EQ(contents(q), want);
    q.push_back(big.data(), 0);  // nothing
    EXPECT_EQ(q.size(), want.size());
}

TEST(message_queue, a_message_put_back_goes_first) {
    message_queue q;
    EXPECT_EQ(q.capacity(), message_queue::first_slots) << "a new queue has room from the start";
    q.push_front(tag(2));  // into an empty queue
    q.push_back(tag(3));
    q.push_front(tag(1));
    EXPECT_EQ(contents(q), (std::vector<std::uintptr_t>{1, 2, 3}));
    EXPECT_EQ(q.front(), tag(1));
}

TEST(message_queue, a_drained_backlog_gives_its_room_back) {
    message_queue q;
    for (std::uintptr_t i = 1; i <= 5000; ++i)
        q.push_back(tag(i));
    EXPECT_GE(q.capacity(), 5000u);
    for (std::uintptr_t i = 1; i <= 5000; ++i) {
        ASSERT_EQ(q.front(), tag(i));
        q.pop_front();
    }
    EXPECT_TRUE(q.empty());
    EXPECT_EQ(q.capacity(), message_queue::first_slots)
        << "a ring of 8192 slots was kept after its backlog drained";
    q.push_back(tag(7));  // works in the small ring again
    q.push_front(tag(6));
    EXPECT_EQ(contents(q), (std::vector<std::uintptr_t>{6, 7}));

    // A queue that never held more than a few thousand keeps its ring when it drains.
    message_queue small;
    for (int round = 0; round < 3; ++round) {
        for (std::uintptr_t i = 0; i < 3000; ++i)
            small.push_back(tag(i + 1));
        while (!small.empty())
            small.pop_front();
        EXPECT_EQ(small.capacity(), 4096u) << "round " << round;
    }
}

// Room reserved for messages handed out (a receive woken, not yet run) is kept through
// pushes: the pushes grow the ring, and a reserved message coming back never does — it may
// come back from a noexcept clean-up, where a bad_alloc would end the PE.
TEST(message_queue, a_reserved_message_comes_back_without_growing_the_ring) {
    for (std::size_t reserved = 1; reserved <= 20; ++reserved) {
        message_queue q;
        for (std::size_t i = 0; i < reserved; ++i)
            q.reserve_one();
        EXPECT_EQ(q.reserved(), reserved);
        const std::size_t cap = q.capacity();
        EXPECT_GE(cap, reserved);
        // Single pushes and a batch fill exactly what is not reserved.
        std::uintptr_t next = 100;
        std::vector<std::uintptr_t> want;
        while (q.size() + q.reserved() + 3 <= cap) {
            q.push_back(tag(next));
            want.push_back(next++);
        }
        std::vector<void*> batch;
        while (q.size() + batch.size() + q.reserved() < cap) {
            batch.push_back(tag(next));
            want.push_back(next++);
        }
        if (!batch.empty()) q.push_back(batch.data(), batch.size());
        ASSERT_EQ(q.capacity(), cap) << reserved << " reserved: the pushes grew too early";
        ASSERT_EQ(q.size() + q.reserved(), cap);
        // One more push, with the room reserved: it must grow rather than take that room.
        q.push_back(tag(next));
        want.push_back(next++);
        const std::size_t grown = q.capacity();
        ASSERT_GT(grown, cap) << reserved << " reserved: a push took the reserved room";
        // Each reserved message comes back to the front, into the room kept for it.
        for (std::size_t i = 0; i < reserved; ++i) {
            q.push_front_reserved(tag(i + 1));
            want.insert(want.begin(), i + 1);
        }
        EXPECT_EQ(q.capacity(), grown) << reserved << " reserved: a message coming back grew it";
        EXPECT_EQ(q.reserved(), 0u);
        EXPECT_EQ(contents(q), want);
    }
    // A batch one larger than the room not reserved grows the ring too.
    for (std::size_t reserved = 1; reserved <= 16; ++reserved) {
        message_queue q;
        for (std::size_t i = 0; i < reserved; ++i)
            q.reserve_one();
        const std::size_t cap = q.capacity();
        std::vector<void*> batch;
        for (std::size_t i = 0; i < cap - reserved + 1; ++i)
            batch.push_back(tag(i + 1));
        q.push_back(batch.data(), batch.size());
        EXPECT_GT(q.capacity(), cap) << reserved << " reserved: a batch took the reserved room";
        EXPECT_EQ(q.size(), batch.size());
    }
    // Reserved room that is taken for good (the receive ran) is free for pushes again.
    message_queue q;
    q.reserve_one();
    q.unreserve_one();
    for (std::uintptr_t i = 0; i < message_queue::first_slots; ++i)
        q.push_back(tag(i + 1));
    EXPECT_EQ(q.capacity(), message_queue::first_slots);
}

// A message pop_front() took comes back to the front without growth, also when that pop
// drained a large ring and gave its room back, and while room is reserved; a drained ring
// is not shrunk below what is reserved plus one.
TEST(message_queue, a_message_just_taken_goes_back_into_its_slot) {
    for (const std::size_t reserved : {0, 1, 15, 16, 40}) {
        message_queue q;
        for (std::size_t i = 0; i < reserved; ++i)
            q.reserve_one();
        for (std::uintptr_t i = 1; i <= 5000; ++i)
            q.push_back(tag(i));
        for (std::uintptr_t i = 1; i < 5000; ++i)
            q.pop_front();
        void* last = q.front();
        q.pop_front();  // drained: the ring may shrink here
        const std::size_t cap = q.capacity();
        EXPECT_GT(cap, reserved) << reserved << " reserved: no room left beside them";
        q.push_front_again(last);
        EXPECT_EQ(q.capacity(), cap) << reserved << " reserved";
        EXPECT_EQ(q.front(), tag(5000));
        EXPECT_EQ(q.reserved(), reserved);
        if (reserved < message_queue::first_slots) {
            EXPECT_EQ(cap, message_queue::first_slots) << "the drained ring gives its room back";
        }
    }
}

// A batch at every head position and fill of a 32-slot ring: short ones, ones that end exactly
// at the ring's end or one past it, ones into a full ring, and ones that need the ring to
// double more than once.
TEST(message_queue, batches_at_every_position_keep_their_order) {
    for (std::size_t head = 0; head < 32; ++head)
        for (std::size_t fill = 0; fill <= 32; ++fill)
            for (const std::size_t n : {1, 2, 15, 16, 17, 31, 32, 33, 48, 64, 65, 100}) {
                message_queue q;
                for (std::uintptr_t i = 0; i < 32; ++i)  // a ring of 32, empty again, head 0
                    q.push_back(tag(1000000 + i));
                for (std::size_t i = 0; i < 32 + head; ++i) {
                    if (i >= 32) q.push_back(tag(1));
                    q.pop_front();
                }
                ASSERT_EQ(q.capacity(), 32u);
                std::vector<std::uintptr_t> want;
                std::uintptr_t next = 1;
                for (std::size_t i = 0; i < fill; ++i) {
                    q.push_back(tag(next));
                    want.push_back(next++);
                }
                std::vector<void*> batch;
                for (std::size_t i = 0; i < n; ++i) {
                    batch.push_back(tag(next));
                    want.push_back(next++);
                }
                q.push_back(batch.data(), batch.size());
                ASSERT_EQ(contents(q), want)
                    << "head " << head << ", " << fill << " queued, " << n << " in the batch";
                for (const std::uintptr_t w : want) {
                    ASSERT_EQ(q.front(), tag(w));
                    q.pop_front();
                }
            }
}

// Phases that fill and then drain to empty: the mix of every operation, around the ring's
// growth, wrap-around and release.
TEST(message_queue, random_operations_match_a_deque) {
    std::mt19937 rng(36);
    message_queue q;
    std::deque<std::uintptr_t> model;
    std::uintptr_t next = 1;
    std::vector<void*> batch;
    bool draining = false;
    int emptied = 0;
    for (int step = 0; step < 300000; ++step) {
        if (!draining && step % 3000 == 2999) draining = true;
        if (draining && model.empty()) {
            draining = false;
            ++emptied;
        }
        const unsigned op = rng() % 100;
        if (!draining && op < 30) {
            q.push_back(tag(next));
            model.push_back(next++);
        } else if (op < 35) {
            q.push_front(tag(next));
            model.push_front(next++);
        } else if (!draining && op < 42) {
            batch.clear();
            const unsigned n = rng() % 70;
            for (unsigned i = 0; i < n; ++i) {
                batch.push_back(tag(next));
                model.push_back(next++);
            }
            q.push_back(batch.data(), batch.size());
        } else if (!model.empty()) {
            ASSERT_EQ(q.front(), tag(model.front())) << "step " << step;
            q.pop_front();
            model.pop_front();
        }
        ASSERT_EQ(q.size(), model.size()) << "step " << step;
        ASSERT_EQ(q.empty(), model.empty());
        if (step % 251 == 0) {
            ASSERT_EQ(contents(q), contents(model)) << "step " << step;
        }
    }
    EXPECT_GT(emptied, 20) << "the mix should drain the queue again and again";
}

}  // namespace
