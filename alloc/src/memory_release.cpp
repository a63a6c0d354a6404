// The list of release listeners and the announcement that walks it.
#include <coverse/alloc/memory_release.hpp>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <vector>

namespace coverse::alloc {
namespace {

struct listener_list {
    std::mutex mutex;
    std::vector<release_listener*> listeners;
    // Lets a free skip the lock when nobody listens (the common case without RDMA).
    std::atomic<std::size_t> count{0};
};

// Never destroyed: memory may be freed by static destructors of other files.
listener_list& list() {
    static auto* l = new listener_list;
    return *l;
}

}  // namespace

void add_release_listener(release_listener& listener) {
    listener_list& l = list();
    std::lock_guard lock(l.mutex);
    l.listeners.push_back(&listener);
    l.count.store(l.listeners.size(), std::memory_order_release);
}

void remove_release_listener(release_listener& listener) noexcept {
    listener_list& l = list();
    std::lock_guard lock(l.mutex);
    std::erase(l.listeners, &listener);
    l.count.store(l.listeners.size(), std::memory_order_release);
}

void announce_release(const void* address, std::size_t length) noexcept {
    listener_list& l = list();
    // Acquire pairs with add_release_listener: a cache that registered this memory was added
    // before the registration, and the registration happened before this free.
    if (l.count.load(std::memory_order_acquire) == 0) return;
    // The lock is held across the calls so remove_release_listener can promise that no
    // notification is still running once it returns.
    std::lock_guard lock(l.mutex);
    for (release_listener* listener : l.listeners)
        listener->on_memory_released(address, length);
}

}  // namespace coverse::alloc
