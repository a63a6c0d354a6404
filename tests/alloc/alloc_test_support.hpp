// Helpers shared by the alloc tests: scoped settings, a registrar whose registrations have
// an identity, and an owner that lends its own storage.
#pragma once

#include <coverse/alloc/bucket_pool.hpp>
#include <coverse/alloc/chunk_owner.hpp>
#include <coverse/alloc/config.hpp>
#include <coverse/alloc/memory_release.hpp>
#include <coverse/test/scoped_env.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <set>
#include <string>
#include <system_error>

namespace coverse::alloc::test {

// Installs `config` with a fresh pool for this thread; restores the previous settings after.
class scoped_config {
public:
    explicit scoped_config(const alloc_config& config) : _saved(current_config()) {
        release_thread_pool();
        set_config(config);
    }
    ~scoped_config() {
        release_thread_pool();
        set_config(_saved);
    }
    scoped_config(const scoped_config&) = delete;
    scoped_config& operator=(const scoped_config&) = delete;

private:
    alloc_config _saved;
};

inline alloc_config pool_config(bool enabled, std::size_t preallocate = 128,
                                std::size_t grow = 128) {
    alloc_config c;
    c.pool_enabled = enabled;
    c.pool_preallocate = preallocate;
    c.pool_grow = grow;
    c.leak_report = false;
    return c;
}

using coverse::test::scoped_env;

// Every registration gets a new id, so a test can tell a fresh registration from a stale one.
// Called under the cache's lock, so it needs none of its own.
struct id_registrar {
    struct registration {
        std::uint64_t id = 0;
        std::uintptr_t address = 0;
        std::size_t length = 0;
    };

    std::error_code register_memory(std::byte* address, std::size_t length, registration& out) {
        if (fail_next > 0) {
            --fail_next;
            return std::make_error_code(std::errc::not_enough_memory);
        }
        out = registration{++last_id, reinterpret_cast<std::uintptr_t>(address), length};
        live.insert(out.id);
        return {};
    }
    void deregister_memory(registration& reg) noexcept { live.erase(reg.id); }

    std::uint64_t last_id = 0;
    int fail_next = 0;
    std::set<std::uint64_t> live;
};

// Lends a fixed buffer for one message at a time, like an eager slot. With `announce`, it
// tells release listeners when the message comes back, as an owner handing memory back must.
class arena_owner final : public chunk_owner {
public:
    explicit arena_owner(bool announce) : _announce(announce) {}

    void* place(std::size_t size, const char* tag = nullptr) {
        return place_message(_storage, size, *this, tag);
    }
    void take_back(void* storage, std::size_t size) noexcept override {
        if (_announce) announce_release(storage, message_storage_size(size));
        last_storage = storage;
        last_size = size;
        taken_back.fetch_add(1);
    }
    const char* name() const noexcept override { return "test arena"; }
    void* storage() noexcept { return _storage; }

    std::atomic<int> taken_back{0};
    void* last_storage = nullptr;
    std::size_t last_size = 0;

private:
    bool _announce;
    alignas(64) std::byte _storage[8192];
};

}  // namespace coverse::alloc::test
