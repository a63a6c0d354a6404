// tcp_line: a bare ping-pong over loopback TCP, the floor under coverse-tcp's small messages
// (scripts/bench-perf.sh, column "tcpline"). Issue 11's TCP target is set against UCX's
// ucx_perftest over lo; every layer that carries messages through kernel TCP sockets pays at
// least one send() and one recv() per message and the kernel's loopback path between them, and
// this exchange pays that and nothing else. Two processes, no runtime: each pinned to one CPU,
// one connection over 127.0.0.1 with TCP_NODELAY on both ends (Nagle would hold a small
// message back until the last one is acknowledged). The sender passes a whole Converse message
// (the 16-byte header and the payload) to one send(); the receiver spins on recv(MSG_DONTWAIT)
// until the whole message is in: no poll, no epoll, no sleep, so no wakeup is ever paid, the
// cheapest wait there is. So tcpline/ucx-tcp is the lowest tcp/ucx-tcp any layer over this
// kernel's TCP could reach. One JSON line per size with "impl":"tcpline", the fields of
// ring_bench and coverse-perf's pingpong: one-way µs (round trip / 2), median and mean
// ("p50_us", "lat_us"), timed per round trip.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "floor_bench.hpp"

namespace {

using floor_bench::header_bytes;
using floor_bench::now_us;
using floor_bench::options;
using floor_bench::plan;

// The bounds on every wait for the other process, far above anything a working exchange
// takes: a hang is turned into a failure that says which wait it was.
constexpr int connect_limit_s = 10;  // the second process connecting, the first accepting
constexpr int quiet_limit_s = 30;    // a send the peer takes nothing of; a recv with no byte
constexpr int exit_limit_s = 10;     // the second process exiting after its last answer

void usage(FILE* f) {
    std::fputs(
        "Usage: tcp_line [options]\n"
        "A bare ping-pong over loopback TCP between two processes pinned to two CPUs, one\n"
        "send() per message and the receiver spinning on recv(MSG_DONTWAIT): the floor under\n"
        "any layer's TCP latency (\"impl\":\"tcpline\"). A ping-pong per size; one JSON line\n"
        "each, one-way µs (p50_us, lat_us) as coverse-perf's pingpong.\n"
        "  --sizes LIST   payload bytes, e.g. 8,1K,64K (the default); each message is the\n"
        "                 16-byte Converse header and the payload\n",
        f);
    std::fputs(floor_bench::schedule_help, f);
    std::fputs(floor_bench::closing_help, f);
    std::fputs(
        "Exit status: 0, 1 when the connection cannot be made or the other process stops,\n"
        "2 for a bad argument.\n",
        f);
}

[[noreturn]] void fail(const std::string& why) {
    std::fprintf(stderr, "tcp_line: %s; giving up\n", why.c_str());
    std::_Exit(1);
}

[[noreturn]] void fail_errno(const char* call) {
    std::fprintf(stderr, "tcp_line: %s: %s; giving up\n", call, std::strerror(errno));
    std::_Exit(1);
}

// Both ends: TCP_NODELAY, and SO_SNDTIMEO, which bounds a blocking send() and connect().
void tune(int fd) {
    const int one = 1;
    if (::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0)
        fail_errno("setsockopt TCP_NODELAY");
    const timeval limit{quiet_limit_s, 0};
    if (::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit) != 0)
        fail_errno("setsockopt SO_SNDTIMEO");
}

// One end of the connection. Both fail with a reason when the other process is gone (end of
// stream, reset, broken pipe) or silent for quiet_limit_s, never wait for ever.
class stream_side {
public:
    explicit stream_side(int fd) : _fd(fd) {}

    // One send() for the whole message, as a layer would; another only for what the kernel
    // did not take (a large message over the socket's buffer that the timeout cut, a signal).
    void send(const std::byte* bytes, std::size_t size) {
        while (size > 0) {
            const ssize_t r = ::send(_fd, bytes, size, MSG_NOSIGNAL);
            if (r > 0) {
                bytes += r;
                size -= static_cast<std::size_t>(r);
            } else if (r < 0 && errno == EINTR) {
                continue;
            } else if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
                fail("the other process took nothing for " + std::to_string(quiet_limit_s) +
                     " s (SO_SNDTIMEO)");
            } else if (r < 0 && (errno == EPIPE || errno == ECONNRESET)) {
                fail("the other process stopped (the connection is closed)");
            } else {
                fail_errno("send");
            }
        }
    }

    // Spins until `size` bytes are in `into`: recv(MSG_DONTWAIT) takes what has arrived, a
    // short read is continued. Every 2^16 empty polls it reads the clock, to give up after
    // quiet_limit_s without a byte (a peer alive but stuck; a dead one ends the stream).
    void receive(std::byte* into, std::size_t size) {
        std::uint64_t empty = 0;
        double waiting_since = 0;
        while (size > 0) {
            const ssize_t r = ::recv(_fd, into, size, MSG_DONTWAIT);
            if (r > 0) {
                into += r;
                size -= static_cast<std::size_t>(r);
                empty = 0;
                continue;
            }
            if (r == 0) fail("the other process stopped (end of stream)");
            if (errno == ECONNRESET) fail("the other process stopped (the connection is reset)");
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) fail_errno("recv");
            if ((++empty & 0xFFFF) != 0) continue;
            const double t = now_us();
            if (empty == 0x10000)
                waiting_since = t;
            else if (t - waiting_since > quiet_limit_s * 1e6)
                fail("no byte from the other process for " + std::to_string(quiet_limit_s) + " s");
        }
    }

private:
    int _fd;
};

// The header's first 12 bytes: the message's number and its size, checked on the answer, so
// a stream out of step fails instead of timing something else.
void stamp(std::byte* msg, std::uint64_t number, std::uint32_t size) {
    std::memcpy(msg, &number, sizeof number);
    std::memcpy(msg + sizeof number, &size, sizeof size);
}

// The first process: a ping-pong per size, printed as it ends. The second answers (echo()).
void drive(stream_side& s, const options& o, std::size_t largest) {
    std::vector<std::byte> msg(largest, std::byte{0x5a}), back(largest);
    std::uint64_t number = 0;
    for (const long payload : o.sizes) {
        const auto size = static_cast<std::size_t>(header_bytes + payload);
        long warmup = 0, iters = 0;
        plan(payload, o, warmup, iters);
        std::vector<double> rtt;
        rtt.reserve(static_cast<std::size_t>(iters));
        for (long k = -warmup; k < iters; ++k) {
            stamp(msg.data(), ++number, static_cast<std::uint32_t>(size));
            const double t0 = now_us();
            s.send(msg.data(), size);
            s.receive(back.data(), size);
            const double t1 = now_us();
            if (std::memcmp(back.data(), msg.data(), header_bytes) != 0)
                fail("the answer is not the message sent (the stream is out of step)");
            if (k >= 0) rtt.push_back(t1 - t0);
        }
        floor_bench::print_pingpong("tcpline", payload, rtt, iters);
    }
}

// Answers drive(): each message with itself. Both follow the same schedule, so each knows
// how many bytes the next message has; after the last answer it exits.
void echo(stream_side& s, const options& o, std::size_t largest) {
    std::vector<std::byte> buf(largest);
    for (const long payload : o.sizes) {
        const auto size = static_cast<std::size_t>(header_bytes + payload);
        long warmup = 0, iters = 0;
        plan(payload, o, warmup, iters);
        for (long k = -warmup; k < iters; ++k) {
            s.receive(buf.data(), size);
            s.send(buf.data(), size);
        }
    }
}

// The second process: connects to the first's port and answers. Never returns.
[[noreturn]] void second(const options& o, pid_t parent, int listener, in_port_t port,
                         std::size_t largest) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) fail("the first process stopped before the second started");
    ::close(listener);
    floor_bench::pin("tcp_line", o.cpus[1], "second process");
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) fail_errno("socket");
    tune(fd);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    to.sin_port = port;
    while (::connect(fd, reinterpret_cast<const sockaddr*>(&to), sizeof to) != 0)
        if (errno != EINTR) fail_errno("connect to the first process on 127.0.0.1");
    stream_side s(fd);
    echo(s, o, largest);
    std::_Exit(0);
}

// The first process's end: accepts the second's connection, polling in slices of 100 ms so
// that a second process that died before connecting is noticed within one.
int accept_second(int listener, pid_t child) {
    for (int slice = 0; slice < connect_limit_s * 10; ++slice) {
        pollfd p{listener, POLLIN, 0};
        const int r = ::poll(&p, 1, 100);
        if (r < 0 && errno != EINTR) fail_errno("poll");
        if (r > 0) {
            const int fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
            if (fd >= 0) return fd;
            if (errno != EINTR && errno != EAGAIN && errno != ECONNABORTED) fail_errno("accept");
        }
        const pid_t w = ::waitpid(child, nullptr, WNOHANG);
        if (w == child || (w < 0 && errno == ECHILD))
            fail("the other process stopped before it connected");
    }
    fail("the second process did not connect within " + std::to_string(connect_limit_s) + " s");
}

}  // namespace

int main(int argc, char** argv) {
    options o;
    if (const int rc = floor_bench::command_line("tcp_line", argc, argv, false, usage, o); rc >= 0)
        return rc;
    const auto largest =
        static_cast<std::size_t>(header_bytes + *std::max_element(o.sizes.begin(), o.sizes.end()));

    // The listener is bound to an ephemeral port (0) and listening before the fork, its port
    // read back here: the second process connects to a port that is already there, and runs
    // side by side never collide.
    const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (listener < 0) fail_errno("socket");
    sockaddr_in at{};
    at.sin_family = AF_INET;
    at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    at.sin_port = 0;
    socklen_t len = sizeof at;
    if (::bind(listener, reinterpret_cast<const sockaddr*>(&at), sizeof at) != 0)
        fail_errno("bind to 127.0.0.1, port 0");
    if (::listen(listener, 1) != 0) fail_errno("listen");
    if (::getsockname(listener, reinterpret_cast<sockaddr*>(&at), &len) != 0)
        fail_errno("getsockname");

    floor_bench::keep_exit_status();
    std::fflush(stdout);
    const pid_t parent = ::getpid();
    const pid_t child = ::fork();
    if (child < 0) fail_errno("fork");
    if (child == 0) second(o, parent, listener, at.sin_port, largest);

    floor_bench::pin("tcp_line", o.cpus[0], "first process");
    const int fd = accept_second(listener, child);
    ::close(listener);
    tune(fd);
    stream_side s(fd);
    drive(s, o, largest);
    ::close(fd);
    return floor_bench::wait_second("tcp_line", child, exit_limit_s);
}
