// Notifications that memory is going back to the system (or to whoever lent it), so that
// anything keyed by address, the registration cache above all, drops what it knows about it
// before the address can be reused.
#pragma once

#include <cstddef>

namespace coverse::alloc {

/// Told about every range the alloc layer gives back: large messages freed to the system, a
/// pool's slabs when the pool is destroyed, and whatever owners announce.
class release_listener {
public:
    /// Runs on the thread that frees, before the memory is reused. Must not free coverse memory
    /// (the notification holds a lock).
    virtual void on_memory_released(const void* address, std::size_t length) noexcept = 0;

protected:
    release_listener() = default;
    release_listener(const release_listener&) = default;
    release_listener& operator=(const release_listener&) = default;
    ~release_listener() = default;
};

/// Starts notifying `listener`. It must be removed before it is destroyed.
void add_release_listener(release_listener& listener);

/// Stops notifying `listener`; after return, no notification to it is running.
void remove_release_listener(release_listener& listener) noexcept;

/// Tells every listener that [address, address + length) is going back. The alloc layer calls
/// this itself; a chunk_owner that returns storage elsewhere calls it before doing so.
void announce_release(const void* address, std::size_t length) noexcept;

}  // namespace coverse::alloc
