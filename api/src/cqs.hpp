// The Csd scheduler queue: Converse priorities (integer, long and bit-vector) with FIFO or
// LIFO placement among equal priorities. Bit-vectors compare as binary fractions, so a
// shorter one is padded with zero bits; integer priorities map to the bit-vector space by
// adding 2^31 (2^63 for longs), as the Converse manual specifies.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <queue>
#include <vector>

namespace coverse::detail {

class priority_queue_cqs {
public:
    /// `strategy` is a CQS_QUEUEING_* value; `prio` is read now (integers) or copied
    /// (bit-vectors), so callers need not keep it alive.
    bool push(void* msg, int strategy, int priobits, const void* prio);
    void* pop();
    bool empty() const noexcept { return _heap.empty(); }
    std::size_t size() const noexcept { return _heap.size(); }

private:
    struct entry {
        std::vector<std::uint32_t> key;  // bit-vector priority, most significant word first
        std::int64_t order;              // FIFO: increasing; LIFO: decreasing
        void* msg;
    };
    struct later {
        bool operator()(const entry& a, const entry& b) const noexcept;
    };
    std::priority_queue<entry, std::vector<entry>, later> _heap;
    std::int64_t _counter = 0;
};

}  // namespace coverse::detail
