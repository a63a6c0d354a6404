// The Csd scheduler queue (see cqs.hpp).
#include "cqs.hpp"

#include <converse.h>

#include <algorithm>

namespace coverse::detail {

bool priority_queue_cqs::later::operator()(const entry& a, const entry& b) const noexcept {
    // std::priority_queue pops the largest; "later" = lower priority = larger fraction.
    const std::size_t n = std::max(a.key.size(), b.key.size());
    for (std::size_t i = 0; i < n; ++i) {
        const std::uint32_t x = i < a.key.size() ? a.key[i] : 0;
        const std::uint32_t y = i < b.key.size() ? b.key[i] : 0;
        if (x != y) return x > y;
    }
    return a.order > b.order;
}

bool priority_queue_cqs::push(void* msg, int strategy, int priobits, const void* prio) {
    entry e{{}, 0, msg};
    bool lifo = false;
    switch (strategy) {
        case CQS_QUEUEING_FIFO:
        case CQS_QUEUEING_LIFO:
            e.key = {0x8000'0000u};
            lifo = strategy == CQS_QUEUEING_LIFO;
            break;
        case CQS_QUEUEING_IFIFO:
        case CQS_QUEUEING_ILIFO: {
            int v = 0;
            if (prio) std::memcpy(&v, prio, sizeof v);
            e.key = {static_cast<std::uint32_t>(v) + 0x8000'0000u};
            lifo = strategy == CQS_QUEUEING_ILIFO;
            break;
        }
        case CQS_QUEUEING_LFIFO:
        case CQS_QUEUEING_LLIFO: {
            std::int64_t v = 0;
            if (prio) std::memcpy(&v, prio, sizeof v);
            const auto u = static_cast<std::uint64_t>(v) + 0x8000'0000'0000'0000ull;
            e.key = {static_cast<std::uint32_t>(u >> 32), static_cast<std::uint32_t>(u)};
            lifo = strategy == CQS_QUEUEING_LLIFO;
            break;
        }
        case CQS_QUEUEING_BFIFO:
        case CQS_QUEUEING_BLIFO: {
            if (priobits < 0) return false;
            const std::size_t words = (static_cast<std::size_t>(priobits) + 31) / 32;
            e.key.resize(words);
            if (words) {
                if (!prio) return false;
                std::memcpy(e.key.data(), prio, words * sizeof(std::uint32_t));
                // Bits past priobits in the last word are padding and must not count.
                if (const unsigned rest = static_cast<unsigned>(priobits) % 32; rest)
                    e.key.back() &= ~0u << (32 - rest);
            }
            lifo = strategy == CQS_QUEUEING_BLIFO;
            break;
        }
        default:
            return false;
    }
    ++_counter;
    e.order = lifo ? -_counter : _counter;
    _heap.push(std::move(e));
    return true;
}

void* priority_queue_cqs::pop() {
    if (_heap.empty()) return nullptr;
    void* m = _heap.top().msg;
    _heap.pop();
    return m;
}

}  // namespace coverse::detail
