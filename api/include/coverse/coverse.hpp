// The coroutine-native API: one `machine` per process (one PE), with awaitable sends,
// broadcasts, barriers and reductions, handlers or per-handler message streams, and
// `coverse::run`, which starts the PE and runs an entry task on its scheduler. Legacy
// Converse handlers (converse.h) and coroutines share that scheduler.
#pragma once

#include <converse.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include <coverse/runtime/scheduler.hpp>
#include <coverse/runtime/task.hpp>

namespace coverse {

namespace detail {
class pe_core;
}

/// A received Converse message: owns the CmiAlloc'd buffer (header included) and frees it.
class message {
public:
    message() = default;
    /// Takes ownership of a CmiAlloc'd message.
    explicit message(void* msg) noexcept : _msg(msg) {}
    message(message&& o) noexcept : _msg(o.release()) {}
    message& operator=(message&& o) noexcept;
    ~message();

    explicit operator bool() const noexcept { return _msg != nullptr; }
    /// The whole message, header first.
    std::span<std::byte> bytes() const noexcept;
    /// The user data after CmiMsgHeaderSizeBytes.
    std::span<std::byte> payload() const noexcept;
    int handler() const noexcept { return CmiGetHandler(_msg); }
    void* get() const noexcept { return _msg; }
    /// Gives up ownership (the caller must CmiFree it).
    void* release() noexcept {
        void* m = _msg;
        _msg = nullptr;
        return m;
    }

private:
    void* _msg = nullptr;
};

/// Builds a message for `handler` holding a copy of `payload`.
message make_message(int handler, std::span<const std::byte> payload);

/// Messages for one handler, delivered in arrival order to whoever awaits `next()`.
class message_stream {
public:
    /// The next message for the handler (suspends until one arrives).
    task<message> next();
    /// Messages that arrived and were not taken by next() yet.
    std::size_t pending() const noexcept { return _queue.size() - _head; }
    int handler() const noexcept { return _handler; }

private:
    friend class machine;
    void push(void* msg);
    int _handler = -1;
    std::vector<void*> _queue;  // FIFO via _head
    std::size_t _head = 0;
    std::coroutine_handle<> _waiter;
};

/// This process's PE. Obtained from `coverse::run` (or `machine::current()` once the
/// runtime is up, also under ConverseInit).
class machine {
public:
    static machine& current();

    std::uint32_t pe() const noexcept;
    std::uint32_t num_pes() const noexcept;
    scheduler& sched() noexcept;

    /// A handler called with each message (it owns it). Same order on every PE.
    int register_handler(std::function<void(message)> fn);
    /// A handler whose messages are queued for `co_await stream.next()`.
    message_stream& register_stream();

    /// Sends a whole message (header included, handler set). Completes when `msg` may be
    /// reused; the data then is in the kernel (or queued locally for a send to self).
    task<void> send(std::uint32_t pe, std::span<const std::byte> msg);
    /// Sends `payload` to `handler` on `pe`.
    task<void> send(std::uint32_t pe, int handler, std::span<const std::byte> payload);
    /// To every PE (spanning tree or flat per BROADCAST_TREE); include_self adds a local copy.
    task<void> broadcast(std::span<const std::byte> msg, bool include_self = false);
    /// Completes once every PE reached the barrier. Messages arriving meanwhile wait.
    task<void> barrier();
    /// Sum-reduces `value` over all PEs; every PE gets the total.
    task<std::int64_t> reduce_sum(std::int64_t value);

    detail::pe_core& core() noexcept { return *_core; }

private:
    friend class detail::pe_core;
    explicit machine(detail::pe_core& c) : _core(&c) {}
    detail::pe_core* _core;
    std::vector<std::unique_ptr<message_stream>> _streams;
    std::vector<std::unique_ptr<std::function<void(message)>>> _functions;
    std::uint32_t _reduce_seq = 0;
};

/// Starts this PE (launcher, mesh, handlers), runs `entry(machine)` on its scheduler while
/// delivering Converse messages, then shuts down (every send finished, disconnect handshake
/// with every peer) and returns the exit status (0; non-zero when the entry threw).
int run(int argc, char** argv, std::function<task<void>(machine&)> entry);

}  // namespace coverse
