// transport: the byte-stream interface the connection layer runs on, and the two backends
// behind it — io_uring (the default) and standalone Asio (where io_uring is unavailable or
// COVERSE_NET_BACKEND=asio). Everything runs on the calling thread's scheduler.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>

#include <coverse/runtime/scheduler.hpp>
#include <coverse/runtime/task.hpp>

namespace coverse::net {

/// An IPv4 address and port. Local jobs use 127.0.0.1.
struct endpoint {
    std::string host = "127.0.0.1";
    std::uint16_t port = 0;
    /// "127.0.0.1:40123"
    std::string to_string() const { return host + ":" + std::to_string(port); }
};

/// A value or an errno: the hot path reports errors as values (negative errno in
/// `error`, 0 on success).
template <class T>
struct io_result {
    T value{};
    int error = 0;
    explicit operator bool() const noexcept { return error == 0; }
};

/// Where stream::recv_each hands received bytes: `take(ctx, bytes)` consumes all of them
/// and returns whether to go on receiving.
struct recv_sink {
    bool (*take)(void* ctx, std::span<const std::byte> bytes) = nullptr;
    void* ctx = nullptr;
    bool operator()(std::span<const std::byte> bytes) const { return take(ctx, bytes); }
};

/// recv_each's check of its sink (every backend's): std::invalid_argument without `take`.
inline void require_take(const recv_sink& sink) {
    if (!sink.take) throw std::invalid_argument("stream::recv_each: the sink has no take function");
}

/// One connected stream socket (TCP_NODELAY) on one backend. Not thread-safe: used by the
/// tasks of the scheduler that created it. One send_all and one recv_some may be in flight
/// at a time (a sender task and a receiver task per connection).
class stream {
public:
    virtual ~stream() = default;

    /// Sends every byte of `parts`, in order, as one gather (partial sends continue inside;
    /// the parts' memory must stay valid until the task completes). Returns 0, or -errno
    /// (-EPIPE / -ECONNRESET when the peer is gone, -ECANCELED after a stop request).
    virtual task<int> send_all(std::span<const std::span<const std::byte>> parts) = 0;

    /// Sends what the kernel takes at once, without waiting and without a task: the bytes
    /// sent (0 when the socket is full, maybe fewer than all), or -errno. For a writer whose
    /// queue is empty and that has no send_all in flight (bytes must not interleave). The
    /// default sends nothing: the caller queues the frame for send_all as before.
    virtual int try_send(std::span<const std::span<const std::byte>> parts) noexcept {
        (void)parts;
        return 0;
    }

    /// Receives up to buf.size() bytes: > 0 bytes, 0 at the peer's end of stream, -errno.
    virtual task<int> recv_some(std::span<std::byte> buf) = 0;

    /// Receives into all of `buf` when the bytes come: for a large payload whose length is
    /// known, one request instead of one per arriving chunk. Returns what arrived (buf.size()
    /// unless the stream ended or failed first: then fewer bytes, 0 or -errno as recv_some).
    /// The default is recv_some.
    virtual task<int> recv_all(std::span<std::byte> buf) { return recv_some(buf); }

    /// Receives bytes as they come and hands each arrival to `sink`, until the sink asks
    /// to stop (returns 1), the peer's end of stream (0) or an error (-errno; -ECANCELED
    /// after close()). For a reader that decodes as it goes: a backend that reads the
    /// socket from the loop's poll (io_uring's spinning receive) calls the sink right there,
    /// with no task resumed per arrival. The default receives with recv_some and calls the
    /// sink from this task. An exception from the sink ends the receive and reaches its
    /// awaiter. A stop request ends it with -ECANCELED even while bytes keep coming. The
    /// sink may run a nested loop; this receive does not call it again from there.
    /// std::invalid_argument when the sink has no take function.
    virtual task<int> recv_each(std::span<std::byte> buf, recv_sink sink) {
        require_take(sink);
        for (;;) {
            const int n = co_await recv_some(buf);
            if (n <= 0) co_return n;
            if (!sink(buf.first(static_cast<std::size_t>(n)))) co_return 1;
        }
    }
    /// Half-closes our sending side: after our data, the peer's receive returns 0.
    virtual void shutdown_send() noexcept = 0;

    /// Stops everything in flight (it completes with -ECANCELED), waits until the kernel is
    /// done with every buffer, then closes the socket. Idempotent.
    virtual task<void> close() = 0;

    /// The other side's address, "127.0.0.1:40123", for error messages.
    virtual const std::string& peer_name() const noexcept = 0;
};

class listener {
public:
    virtual ~listener() = default;
    /// The next incoming connection, or -errno.
    virtual task<io_result<std::unique_ptr<stream>>> accept() = 0;
    /// Where it listens (the port the kernel chose when asked for port 0).
    virtual endpoint local() const = 0;
    /// Stops a pending accept (it returns -ECANCELED) and closes the socket. Idempotent.
    virtual task<void> close() = 0;
};

class backend {
public:
    virtual ~backend() = default;
    /// "io_uring" or "asio".
    virtual std::string_view name() const noexcept = 0;
    /// One line for --verbose and coverse-info, e.g. the ring's features.
    virtual std::string describe() const = 0;
    /// One connection attempt (no retries: the connection layer retries with backoff).
    /// -ECONNREFUSED when nobody listens there.
    virtual task<io_result<std::unique_ptr<stream>>> connect(endpoint to) = 0;
    /// Listens on `at` (port 0: the kernel picks one), with SO_REUSEADDR.
    virtual io_result<std::unique_ptr<listener>> listen(const endpoint& at) = 0;
};

enum class backend_kind { automatic, io_uring, asio };

/// The NET_BACKEND setting (++set NET_BACKEND=..., COVERSE_NET_BACKEND, ...): "uring"/
/// "io_uring", "asio", or unset/"auto". Anything else is a clear error (std::invalid_argument
/// naming the variable, the value and the accepted ones).
backend_kind backend_kind_from_env();

/// The backend for `sched`. automatic: io_uring when the scheduler has a ring, else Asio.
/// Asking for io_uring on a scheduler without a ring fails with the reason in `why`.
/// `why` also receives one line saying which backend was chosen and why.
std::unique_ptr<backend> make_backend(scheduler& sched, backend_kind kind, std::string* why);

/// What coverse-demo and coverse-info say about networking on `sched`: the backend
/// make_backend(sched, backend_kind_from_env()) picks, and why. Never throws: a malformed
/// setting's error becomes the `why`.
struct backend_report {
    std::string name;      ///< "io_uring" or "asio"; "" when no backend can serve
    std::string why;       ///< one line: which backend and why, or why none
    std::string details;   ///< the backend's describe(); "" when none
    std::string asked_by;  ///< "COVERSE_NET_BACKEND=asio" when set; "" for the default (auto)
};
backend_report describe_backend_choice(scheduler& sched);

/// The backends themselves (net/src/uring_backend.cpp, net/src/asio_backend.cpp). Each
/// returns null with the reason in `why` when it cannot serve this scheduler.
std::unique_ptr<backend> make_uring_backend(scheduler& sched, std::string* why);
std::unique_ptr<backend> make_asio_backend(scheduler& sched, std::string* why);

}  // namespace coverse::net
