// The Csd scheduler queue's ordering rules: smaller priorities first, LIFO before FIFO
// among equal priorities (most recent LIFO first), integer and long priorities mapped into
// the bit-vector space, bit-vectors compared as binary fractions (zero-padded).
#include <gtest/gtest.h>

#include <converse.h>

#include <cstdint>
#include <vector>

#include "cqs.hpp"

namespace {

using coverse::detail::priority_queue_cqs;

void* tag(std::uintptr_t n) {
    return reinterpret_cast<void*>(n);
}

std::vector<std::uintptr_t> drain(priority_queue_cqs& q) {
    std::vector<std::uintptr_t> out;
    while (void* m = q.pop())
        out.push_back(reinterpret_cast<std::uintptr_t>(m));
    return out;
}

TEST(cqs, fifo_and_lifo_at_the_middle_priority) {
    priority_queue_cqs q;
    q.push(tag(1), CQS_QUEUEING_FIFO, 0, nullptr);
    q.push(tag(2), CQS_QUEUEING_FIFO, 0, nullptr);
    q.push(tag(3), CQS_QUEUEING_LIFO, 0, nullptr);
    q.push(tag(4), CQS_QUEUEING_LIFO, 0, nullptr);
    EXPECT_EQ(drain(q), (std::vector<std::uintptr_t>{4, 3, 1, 2}));
}

TEST(cqs, integer_priorities_smaller_first_and_zero_is_the_middle) {
    priority_queue_cqs q;
    const int p5 = 5, m3 = -3, z = 0;
    q.push(tag(1), CQS_QUEUEING_IFIFO, 32, &p5);
    q.push(tag(2), CQS_QUEUEING_IFIFO, 32, &m3);
    q.push(tag(3), CQS_QUEUEING_FIFO, 0, nullptr);  // middle priority, same as integer 0
    q.push(tag(4), CQS_QUEUEING_IFIFO, 32, &z);
    q.push(tag(5), CQS_QUEUEING_ILIFO, 32, &z);
    EXPECT_EQ(drain(q), (std::vector<std::uintptr_t>{2, 5, 3, 4, 1}));
}

TEST(cqs, long_priorities) {
    priority_queue_cqs q;
    const std::int64_t big = 1ll << 40, small = -(1ll << 40);
    q.push(tag(1), CQS_QUEUEING_LFIFO, 64, &big);
    q.push(tag(2), CQS_QUEUEING_LFIFO, 64, &small);
    q.push(tag(3), CQS_QUEUEING_LLIFO, 64, &small);
    EXPECT_EQ(drain(q), (std::vector<std::uintptr_t>{3, 2, 1}));
}

TEST(cqs, bit_vectors_compare_as_fractions) {
    priority_queue_cqs q;
    // .01 (2 bits) < .1 (1 bit) < .11; and .10 == .1 (padding), FIFO between those two.
    const unsigned b01 = 0x4000'0000u, b1 = 0x8000'0000u, b11 = 0xC000'0000u;
    const unsigned b10_with_garbage = 0x8000'0001u;  // bits past priobits must not count
    q.push(tag(1), CQS_QUEUEING_BFIFO, 1, &b1);
    q.push(tag(2), CQS_QUEUEING_BFIFO, 2, &b11);
    q.push(tag(3), CQS_QUEUEING_BFIFO, 2, &b01);
    q.push(tag(4), CQS_QUEUEING_BFIFO, 2, &b10_with_garbage);
    const unsigned long_vec[2] = {0x8000'0000u, 0x0000'0001u};  // .1000...0001 (64 bits)
    q.push(tag(5), CQS_QUEUEING_BFIFO, 64, long_vec);
    EXPECT_EQ(drain(q), (std::vector<std::uintptr_t>{3, 1, 4, 5, 2}));
}

TEST(cqs, invalid_strategies_are_refused) {
    priority_queue_cqs q;
    EXPECT_FALSE(q.push(tag(1), 99, 0, nullptr));
    EXPECT_FALSE(q.push(tag(1), CQS_QUEUEING_BFIFO, 8, nullptr));
    EXPECT_FALSE(q.push(tag(1), CQS_QUEUEING_BFIFO, -1, nullptr));
    EXPECT_TRUE(q.empty());
}

}  // namespace
