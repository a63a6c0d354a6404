// control_socket: the blocking TCP helpers of the control connections (to coverse-run and
// to coverse-crm): a connect retried until a deadline, and a send of two buffers as one
// stream.
#pragma once

#include <netdb.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace coverse::net::detail {

/// One non-blocking connect attempt with a deadline; returns the connected socket (blocking,
/// TCP_NODELAY), or -1 with errno set.
int connect_once(const addrinfo& ai, std::chrono::steady_clock::time_point deadline);

/// Connects to host:port (resolving it each time), retrying with doubling backoff from
/// `backoff` (at most 250 ms) until `deadline`. Returns the socket, or -1 with the last
/// failure in `last_error` ("Connection refused", "cannot resolve the host: ...").
int connect_retrying(const std::string& host, std::uint16_t port,
                     std::chrono::steady_clock::time_point deadline,
                     std::chrono::milliseconds backoff, std::string& last_error);

/// Blocking send of `a` then `b` as one stream of bytes; false on a broken connection.
bool send_both(int fd, std::span<const std::byte> a, std::span<const std::byte> b) noexcept;

}  // namespace coverse::net::detail
