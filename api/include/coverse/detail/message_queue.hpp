// The queue of a message stream: received messages (pointers) waiting for a receive, FIFO,
// in one power-of-two ring. A take from it is a load and two index updates, where
// std::deque's pop_front and push_back cost ~14 instructions per message between them
// (docs/perf.md, stop 36).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>
#include <new>

namespace coverse::detail {

class message_queue {
public:
    static constexpr std::size_t first_slots = 16;

    /// Room for first_slots messages from the start (throws std::bad_alloc). A message
    /// handed to a receive that has not run yet keeps a slot reserved here (reserve_one),
    /// so that a receive giving it back (push_front_reserved, from a noexcept clean-up)
    /// never allocates: growth happens in the pushes before, which may throw.
    message_queue() : _slots(std::make_unique_for_overwrite<void*[]>(first_slots)) {}
    message_queue(const message_queue&) = delete;
    message_queue& operator=(const message_queue&) = delete;

    bool empty() const noexcept { return _count == 0; }
    std::size_t size() const noexcept { return _count; }
    /// Messages it has room for before it grows.
    std::size_t capacity() const noexcept { return _cap; }
    void* front() const noexcept { return _slots[_head]; }
    /// Slots kept for messages handed out that may come back (reserve_one).
    std::size_t reserved() const noexcept { return _reserved; }
    /// Not on an empty queue. A queue that drains after holding many gives their room back
    /// (down to first_slots, or what is reserved).
    void pop_front() noexcept {
        _head = (_head + 1) & (_cap - 1);
        if (--_count == 0 && _cap > keep_slots) [[unlikely]]
            release();
    }
    void push_back(void* m) {
        make_room(1);
        _slots[(_head + _count) & (_cap - 1)] = m;
        ++_count;
    }
    /// `n` messages at the back, in order.
    void push_back(void* const* ms, std::size_t n) {
        make_room(n);
        const std::size_t tail = (_head + _count) & (_cap - 1);
        const std::size_t first = std::min(n, _cap - tail);  // up to the ring's end, then on from 0
        std::memcpy(_slots.get() + tail, ms, first * sizeof(void*));
        if (first < n) std::memcpy(_slots.get(), ms + first, (n - first) * sizeof(void*));
        _count += n;
    }
    void push_front(void* m) {
        make_room(1);
        put_front(m);
    }
    /// Keeps room for one message to come back at the front later (throws std::bad_alloc
    /// when the queue must grow for it, with nothing changed).
    void reserve_one() {
        make_room(1);
        ++_reserved;
    }
    /// The reserved message comes back to the front: never allocates.
    void push_front_reserved(void* m) noexcept {
        --_reserved;
        put_front(m);
    }
    /// The reserved message was taken for good.
    void unreserve_one() noexcept { --_reserved; }
    /// The message pop_front() just took comes back to the front: its slot is still free
    /// (a drained ring shrinks only to one with room beyond what is reserved), so this does
    /// not allocate.
    void push_front_again(void* m) noexcept {
        push_front(m);  // never grows (see above); if it did, a bad_alloc here would end the PE
    }
    /// Calls `f` on each message, front first.
    template <class F>
    void for_each(F&& f) const {
        for (std::size_t i = 0; i < _count; ++i)
            f(_slots[(_head + i) & (_cap - 1)]);
    }

private:
    // A ring above this is released when it drains (a backlog's room given back); up to it,
    // it is kept, so bursts of up to 4096 messages do not allocate again.
    static constexpr std::size_t keep_slots = 4096;

    void put_front(void* m) noexcept {
        _head = (_head - 1) & (_cap - 1);
        _slots[_head] = m;
        ++_count;
    }
    // Room for `more` beyond what is queued and reserved (throws std::bad_alloc, with
    // nothing changed, when the ring must grow for it).
    void make_room(std::size_t more) {
        if (_cap - _count - _reserved < more) [[unlikely]]
            grow(more);
    }
    // The capacity doubles until `more` fits, and the messages move to the start of the new
    // ring in order.
    void grow(std::size_t more) {
        std::size_t cap = _cap * 2;
        while (cap - _count - _reserved < more)
            cap *= 2;
        auto slots = std::make_unique_for_overwrite<void*[]>(cap);
        for (std::size_t i = 0; i < _count; ++i)
            slots[i] = _slots[(_head + i) & (_cap - 1)];
        _slots = std::move(slots);
        _cap = cap;
        _head = 0;
    }
    // To first_slots, when a small ring can be had and holds what is reserved with room
    // to spare (else the large one stays).
    void release() noexcept {
        if (_reserved >= first_slots) return;  // and room for one more: push_front_again
        std::unique_ptr<void*[]> small(new (std::nothrow) void*[first_slots]);
        if (!small) return;
        _slots = std::move(small);
        _cap = first_slots;
        _head = 0;
    }

    std::unique_ptr<void*[]> _slots;
    std::size_t _cap = first_slots;  // a power of two
    std::size_t _head = 0;
    std::size_t _count = 0;
    std::size_t _reserved = 0;  // _count + _reserved <= _cap
};

}  // namespace coverse::detail
