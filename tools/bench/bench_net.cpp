// bench_net: ping-pong between two processes over loopback, side by side in one run:
// coverse's mesh on the io_uring backend, the same mesh on the Asio backend, and two plain
// socket baselines (TCP_NODELAY): blocking, and busy-polled (recv with MSG_DONTWAIT in a
// loop, the floor a spinning runtime could reach over the kernel's TCP). One-way latency
// (half the round trip, p50 and mean) for 8 B, 1 KiB and 64 KiB, and windowed bandwidth for
// 1 MiB messages.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <coverse/net/mesh.hpp>
#include <coverse/runtime/runtime.hpp>

namespace {

using namespace coverse;
using namespace coverse::net;
using bench_clock = std::chrono::steady_clock;

// Every mode, in the order a run without --mode takes them; the last two are the plain
// socket baselines (run_socket_pe), the others the mesh on that backend (run_mesh_pe).
const std::vector<std::string> all_modes{"io_uring", "asio", "blocking", "busy"};
bool socket_mode(const std::string& mode) {
    return mode == "blocking" || mode == "busy";
}

struct options {
    int iterations = 2000;
    int bw_rounds = 20;
    int window = 16;
    bool json = false;
    std::vector<std::string> modes = all_modes;
};

struct result {
    std::string mode;
    std::size_t bytes;
    double lat_p50_us = 0, lat_mean_us = 0, mbps = 0;
};

void pin_to_core(int core) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(core % static_cast<int>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN))), &set);
    sched_setaffinity(0, sizeof set, &set);
}

// ---- coverse mesh -----------------------------------------------------------------------

task<void> mesh_pingpong(mesh* m, std::uint32_t rank, std::size_t bytes, int iters,
                         std::vector<double>* rtts) {
    std::vector<std::byte> buf(bytes, std::byte{1});
    frame_header h;
    const std::uint32_t peer = 1 - rank;
    for (int i = 0; i < iters; ++i) {
        const auto t0 = bench_clock::now();
        if (rank == 0) {
            if (co_await m->send(peer, h, buf) != 0) throw std::runtime_error("send failed");
            auto r = co_await m->receive();
            if (!r) throw std::runtime_error("peer went away");
        } else {
            auto r = co_await m->receive();
            if (!r) throw std::runtime_error("peer went away");
            if (co_await m->send(peer, h, buf) != 0) throw std::runtime_error("send failed");
        }
        if (rtts)
            rtts->push_back(
                std::chrono::duration<double, std::micro>(bench_clock::now() - t0).count());
    }
}

task<double> mesh_bandwidth(mesh* m, std::uint32_t rank, std::size_t bytes, int rounds,
                            int window) {
    std::vector<std::byte> buf(bytes, std::byte{2});
    std::vector<std::byte> ack(1);
    frame_header h;
    const std::uint32_t peer = 1 - rank;
    const auto t0 = bench_clock::now();
    for (int r = 0; r < rounds; ++r) {
        if (rank == 0) {
            // A window of sends in flight: each send completes when its bytes are in the
            // kernel, so issue them from one task in order and then wait for the ack.
            for (int w = 0; w < window; ++w)
                if (co_await m->send(peer, h, buf) != 0) throw std::runtime_error("send failed");
            if (!co_await m->receive()) throw std::runtime_error("peer went away");
        } else {
            for (int w = 0; w < window; ++w)
                if (!co_await m->receive()) throw std::runtime_error("peer went away");
            if (co_await m->send(peer, h, ack) != 0) throw std::runtime_error("send failed");
        }
    }
    const double secs = std::chrono::duration<double>(bench_clock::now() - t0).count();
    co_return static_cast<double>(bytes) * window* rounds / secs / 1e6;
}

std::vector<result> run_mesh_pe(const std::string& mode, std::uint32_t rank, int port_fd_out,
                                int port_fd_in, const options& o) {
    const backend_kind kind = mode == "asio" ? backend_kind::asio : backend_kind::io_uring;
    scheduler_options so;
    so.use_io_uring = kind != backend_kind::asio;
    scheduler sched(so);
    std::string why;
    auto b = make_backend(sched, kind, &why);
    if (!b) throw std::runtime_error(mode + ": " + why);
    auto l = b->listen(endpoint{"127.0.0.1", 0});
    if (!l) throw std::runtime_error("listen failed");
    std::uint16_t port0 = 0;
    if (rank == 0) {
        port0 = l.value->local().port;
        if (::write(port_fd_out, &port0, sizeof port0) != sizeof port0)
            throw std::runtime_error("pipe");
    } else if (::read(port_fd_in, &port0, sizeof port0) != sizeof port0) {
        throw std::runtime_error("pipe");
    }
    mesh_config cfg;
    cfg.rank = rank;
    cfg.num_pes = 2;
    cfg.job_key = 42;
    cfg.peers = {endpoint{"127.0.0.1", port0}, l.value->local()};
    cfg.connect_timeout = std::chrono::seconds(20);
    mesh m(*b, std::move(l.value), cfg);
    std::vector<result> out;
    sync_wait([](mesh* mp, std::uint32_t r, const options* op, std::string md,
                 std::vector<result>* res) -> task<void> {
        co_await mp->establish();
        for (std::size_t bytes : {std::size_t{8}, std::size_t{1024}, std::size_t{65536}}) {
            const int iters = bytes >= 65536 ? op->iterations / 4 : op->iterations;
            co_await mesh_pingpong(mp, r, bytes, 100, nullptr);  // warm-up
            std::vector<double> rtts;
            co_await mesh_pingpong(mp, r, bytes, iters, &rtts);
            if (r == 0) {
                std::sort(rtts.begin(), rtts.end());
                double sum = 0;
                for (double x : rtts)
                    sum += x;
                res->push_back(
                    result{md, bytes, rtts[rtts.size() / 2] / 2, sum / rtts.size() / 2, 0});
            }
        }
        const double mbps = co_await mesh_bandwidth(mp, r, 1 << 20, op->bw_rounds, op->window);
        if (r == 0) res->push_back(result{md, 1 << 20, 0, 0, mbps});
        co_await mp->shutdown();
    }(&m, rank, &o, mode, &out));
    return out;
}

// ---- socket baselines: blocking, and busy-polled -------------------------------------------

void write_all(int fd, const void* p, std::size_t n) {
    auto* c = static_cast<const char*>(p);
    while (n) {
        const ssize_t w = ::send(fd, c, n, MSG_NOSIGNAL);
        if (w <= 0) throw std::runtime_error(std::string("send: ") + std::strerror(errno));
        c += w;
        n -= static_cast<std::size_t>(w);
    }
}
// busy: MSG_DONTWAIT in a loop, as a spinning runtime that asks the socket itself would.
void read_all(int fd, void* p, std::size_t n, bool busy) {
    auto* c = static_cast<char*>(p);
    while (n) {
        ssize_t r = ::recv(fd, c, n, busy ? MSG_DONTWAIT : 0);
        if (r < 0 && busy && (errno == EAGAIN || errno == EWOULDBLOCK)) continue;
        if (r <= 0) throw std::runtime_error("recv: peer closed");
        c += r;
        n -= static_cast<std::size_t>(r);
    }
}
// The same framing cost as ours: a 24-byte header before each payload. The receiver knows
// the size that comes (each phase uses one), so header and payload are read together, as
// the mesh reads a small frame with one receive into its buffer.
constexpr std::size_t header_bytes = 24;
void send_msg(int fd, std::vector<char>& buf, std::size_t bytes) {
    if (buf.size() < header_bytes + bytes) buf.resize(header_bytes + bytes);
    std::memcpy(buf.data(), &bytes, sizeof bytes);
    write_all(fd, buf.data(), header_bytes + bytes);
}
void recv_msg(int fd, std::vector<char>& buf, std::size_t bytes, bool busy) {
    if (buf.size() < header_bytes + bytes) buf.resize(header_bytes + bytes);
    read_all(fd, buf.data(), header_bytes + bytes, busy);
    std::size_t said = 0;
    std::memcpy(&said, buf.data(), sizeof said);
    if (said != bytes)
        throw std::runtime_error("a message of " + std::to_string(said) + " bytes where " +
                                 std::to_string(bytes) + " were expected");
}

std::vector<result> run_socket_pe(const std::string& mode, std::uint32_t rank, int port_fd_out,
                                  int port_fd_in, const options& o) {
    const bool busy = mode == "busy";
    int fd = -1;
    const int one = 1;
    if (rank == 0) {
        int l = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        ::setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (::bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a) || ::listen(l, 1))
            throw std::runtime_error("bind/listen");
        socklen_t len = sizeof a;
        ::getsockname(l, reinterpret_cast<sockaddr*>(&a), &len);
        std::uint16_t port = ntohs(a.sin_port);
        if (::write(port_fd_out, &port, sizeof port) != sizeof port)
            throw std::runtime_error("pipe");
        fd = ::accept(l, nullptr, nullptr);
        ::close(l);
    } else {
        std::uint16_t port = 0;
        if (::read(port_fd_in, &port, sizeof port) != sizeof port) throw std::runtime_error("pipe");
        fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        a.sin_port = htons(port);
        if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a))
            throw std::runtime_error("connect");
    }
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    std::vector<result> out;
    std::vector<char> buf(1 << 20, 1);
    for (std::size_t bytes : {std::size_t{8}, std::size_t{1024}, std::size_t{65536}}) {
        const int iters = bytes >= 65536 ? o.iterations / 4 : o.iterations;
        std::vector<double> rtts;
        for (int i = -100; i < iters; ++i) {
            const auto t0 = bench_clock::now();
            if (rank == 0) {
                send_msg(fd, buf, bytes);
                recv_msg(fd, buf, bytes, busy);
            } else {
                recv_msg(fd, buf, bytes, busy);
                send_msg(fd, buf, bytes);
            }
            if (i >= 0)
                rtts.push_back(
                    std::chrono::duration<double, std::micro>(bench_clock::now() - t0).count());
        }
        if (rank == 0) {
            std::sort(rtts.begin(), rtts.end());
            double sum = 0;
            for (double x : rtts)
                sum += x;
            out.push_back(result{mode, bytes, rtts[rtts.size() / 2] / 2, sum / rtts.size() / 2, 0});
        }
    }
    const auto t0 = bench_clock::now();
    for (int r = 0; r < o.bw_rounds; ++r) {
        if (rank == 0) {
            for (int w = 0; w < o.window; ++w)
                send_msg(fd, buf, 1 << 20);
            recv_msg(fd, buf, 1, busy);
        } else {
            for (int w = 0; w < o.window; ++w)
                recv_msg(fd, buf, 1 << 20, busy);
            send_msg(fd, buf, 1);
        }
    }
    const double secs = std::chrono::duration<double>(bench_clock::now() - t0).count();
    if (rank == 0)
        out.push_back(
            result{mode, 1 << 20, 0, 0, double(1 << 20) * o.window * o.bw_rounds / secs / 1e6});
    ::close(fd);
    return out;
}

std::vector<result> run_mode(const std::string& mode, const options& o) {
    int p[2];
    if (::pipe(p)) throw std::runtime_error("pipe");
    const pid_t child = ::fork();
    if (child < 0) throw std::runtime_error("fork");
    if (child == 0) {
        ::close(p[1]);
        pin_to_core(1);
        int code = 0;
        try {
            if (socket_mode(mode))
                run_socket_pe(mode, 1, -1, p[0], o);
            else
                run_mesh_pe(mode, 1, -1, p[0], o);
        } catch (const std::exception& e) {
            std::fprintf(stderr, "bench_net: PE 1 (%s): %s\n", mode.c_str(), e.what());
            code = 1;
        }
        ::_exit(code);
    }
    ::close(p[0]);
    pin_to_core(0);
    std::vector<result> out;
    try {
        out = socket_mode(mode) ? run_socket_pe(mode, 0, p[1], -1, o)
                                : run_mesh_pe(mode, 0, p[1], -1, o);
    } catch (...) {
        ::kill(child, SIGKILL);
        ::waitpid(child, nullptr, 0);
        ::close(p[1]);
        throw;
    }
    ::close(p[1]);
    int status = 0;
    ::waitpid(child, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        throw std::runtime_error(mode + ": PE 1 failed (status " + std::to_string(status) + ")");
    return out;
}

void usage() {
    std::printf(
        "usage: bench_net [--iterations N] [--rounds N] [--window N] [--mode M]... [--json]\n"
        "  Ping-pong between two processes over loopback (pinned to cores 0 and 1):\n"
        "  coverse's mesh on io_uring, on Asio, and two socket baselines (TCP_NODELAY):\n"
        "  blocking, and busy-polled (recv with MSG_DONTWAIT in a loop), all in one run.\n"
        "  Prints one-way latency (p50, mean) for 8 B, 1 KiB, 64 KiB and the\n"
        "  bandwidth of 1 MiB messages (MB/s = 10^6 B/s) sent in windows.\n"
        "  --mode M     io_uring, asio, blocking or busy (repeatable; default: all four)\n"
        "  --json       one JSON object per line instead of the table\n");
}

}  // namespace

int main(int argc, char** argv) {
    options o;
    bool modes_given = false;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto next = [&]() -> std::string {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "bench_net: %s needs a value (try --help)\n", a.c_str());
                std::exit(2);
            }
            return argv[++i];
        };
        if (a == "--help" || a == "-h") {
            usage();
            return 0;
        } else if (a == "--iterations") {
            o.iterations = std::max(8, std::atoi(next().c_str()));
        } else if (a == "--rounds") {
            o.bw_rounds = std::max(1, std::atoi(next().c_str()));
        } else if (a == "--window") {
            o.window = std::max(1, std::atoi(next().c_str()));
        } else if (a == "--mode") {
            if (!modes_given) o.modes.clear();
            modes_given = true;
            o.modes.push_back(next());
            if (std::find(all_modes.begin(), all_modes.end(), o.modes.back()) == all_modes.end()) {
                std::fprintf(stderr,
                             "bench_net: unknown mode '%s' (io_uring, asio, blocking, busy)\n",
                             o.modes.back().c_str());
                return 2;
            }
        } else if (a == "--json") {
            o.json = true;
        } else {
            std::fprintf(stderr, "bench_net: unknown argument '%s' (try --help)\n", a.c_str());
            return 2;
        }
    }
    std::vector<result> all;
    for (const auto& mode : o.modes) {
        if (!o.json) std::fprintf(stderr, "bench_net: running %s ...\n", mode.c_str());
        try {
            auto r = run_mode(mode, o);
            all.insert(all.end(), r.begin(), r.end());
        } catch (const std::exception& e) {
            std::fprintf(stderr, "bench_net: %s failed: %s\n", mode.c_str(), e.what());
            return 1;
        }
    }
    if (o.json) {
        for (const auto& r : all) {
            if (r.mbps > 0)
                std::printf("{\"test\":\"bw\",\"impl\":\"%s\",\"bytes\":%zu,\"mbps\":%.1f}\n",
                            r.mode.c_str(), r.bytes, r.mbps);
            else
                std::printf(
                    "{\"test\":\"pingpong\",\"impl\":\"%s\",\"bytes\":%zu,\"lat_us\":%.2f,\"lat_"
                    "mean_us\":%.2f}\n",
                    r.mode.c_str(), r.bytes, r.lat_p50_us, r.lat_mean_us);
        }
        return 0;
    }
    std::printf(
        "| impl | 8 B p50 µs | 1 KiB p50 µs | 64 KiB p50 µs | 1 MiB MB/s "
        "|\n|---|---:|---:|---:|---:|\n");
    for (const auto& mode : o.modes) {
        double v[4] = {0, 0, 0, 0};
        for (const auto& r : all) {
            if (r.mode != mode) continue;
            if (r.bytes == 8) v[0] = r.lat_p50_us;
            if (r.bytes == 1024) v[1] = r.lat_p50_us;
            if (r.bytes == 65536) v[2] = r.lat_p50_us;
            if (r.mbps > 0) v[3] = r.mbps;
        }
        std::printf("| %s | %.2f | %.2f | %.2f | %.0f |\n", mode.c_str(), v[0], v[1], v[2], v[3]);
    }
    return 0;
}
