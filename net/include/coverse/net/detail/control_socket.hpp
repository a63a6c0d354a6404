// control_socket: the blocking TCP helpers of the control connections (to coverse-run and
// to coverse-crm): one bounded connect attempt, and a send of two buffers as one stream.
#pragma once

#include <netdb.h>

#include <chrono>
#include <cstddef>
#include <span>

namespace coverse::net::detail {

/// One non-blocking connect attempt with a deadline; returns the connected socket (blocking,
/// TCP_NODELAY), or -1 with errno set.
int connect_once(const addrinfo& ai, std::chrono::steady_clock::time_point deadline);

/// Blocking send of `a` then `b` as one stream of bytes; false on a broken connection.
bool send_both(int fd, std::span<const std::byte> a, std::span<const std::byte> b) noexcept;

}  // namespace coverse::net::detail
