// A message stream's queue (coverse/detail/message_queue.hpp): FIFO order through growth and
// wrap-around, messages put back at the front, batches split at the ring's end, and the room
// given back when a large backlog drains; checked against std::deque as the model.
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
    q.push_front(tag(2));  // into an empty queue, before it has room
    q.push_back(tag(3));
    q.push_front(tag(1));
    EXPECT_EQ(contents(q), (std::vector<std::uintptr_t>{1, 2, 3}));
    EXPECT_EQ(q.front(), tag(1));
}

TEST(message_queue, a_drained_backlog_leaves_a_queue_that_works) {
    message_queue q;
    for (std::uintptr_t i = 1; i <= 5000; ++i)
        q.push_back(tag(i));
    for (std::uintptr_t i = 1; i <= 5000; ++i) {
        ASSERT_EQ(q.front(), tag(i));
        q.pop_front();
    }
    EXPECT_TRUE(q.empty());  // the drain gave its room back: it must work from nothing again
    q.push_back(tag(7));
    q.push_front(tag(6));
    EXPECT_EQ(contents(q), (std::vector<std::uintptr_t>{6, 7}));
}

TEST(message_queue, random_operations_match_a_deque) {
    std::mt19937 rng(36);
    message_queue q;
    std::deque<std::uintptr_t> model;
    std::uintptr_t next = 1;
    std::vector<void*> batch;
    for (int step = 0; step < 200000; ++step) {
        const unsigned op = rng() % 100;
        if (op < 40) {
            q.push_back(tag(next));
            model.push_back(next++);
        } else if (op < 45) {
            q.push_front(tag(next));
            model.push_front(next++);
        } else if (op < 52) {
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
        if (step % 997 == 0) {
            ASSERT_EQ(contents(q), contents(model)) << "step " << step;
        }
    }
}

}  // namespace
