// PEs of a real job in forked processes (two: run_pair; more: run_job): each has its own
// scheduler, io_uring backend, mesh over loopback and rdma::layer, and runs a test body; the
// gtest process only starts them, passes their ports round, opens gates between them, and
// checks how each ended. A body returns 0 for success or a small number naming the check that
// failed (printed on stderr).
#pragma once

#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <coverse/alloc/config.hpp>
#include <coverse/alloc/message.hpp>
#include <coverse/net/bootstrap.hpp>
#include <coverse/net/mesh.hpp>
#include <coverse/net/transport.hpp>
#include <coverse/rdma/layer.hpp>
#include <coverse/runtime/scheduler.hpp>
#include <coverse/runtime/sync_wait.hpp>
#include <coverse/runtime/timer.hpp>

namespace coverse::rdma::test {

using namespace std::chrono_literals;

struct arrived {
    std::uint32_t from;
    void* msg;  // message memory, owned by the test
    std::uint32_t size;
};

/// A send completion that remembers its result.
struct recorded_send final : send_completion {
    int result = 1;  // 1: not completed yet
    int calls = 0;
    void sent(int r) noexcept override {
        result = r;
        ++calls;
    }
};

class node final : public upcalls {
public:
    scheduler sched;
    std::unique_ptr<net::backend> backend;
    std::unique_ptr<net::mesh> mesh;
    std::unique_ptr<layer> rdma;
    std::deque<arrived> inbox;
    std::vector<std::string> lost;
    std::vector<std::string> notices;
    std::vector<std::uint32_t> failed_peers;
    std::uint32_t rank = 0;
    std::uint64_t job_key = 0;
    bool _down = false;

    explicit node(scheduler_options o) : sched(o) {}
    ~node() {
        for (auto& a : inbox)
            alloc::msg_free(a.msg);
    }

    void on_message(std::uint32_t from, void* msg, std::uint32_t size, bool,
                    std::uint32_t) override {
        inbox.push_back(arrived{from, msg, size});
    }
    void on_lost_message(std::uint32_t, std::uint64_t, const std::string& text) override {
        std::fprintf(stderr, "PE %u lost a message: %s\n", rank, text.c_str());
        lost.push_back(text);
    }
    [[noreturn]] void on_fatal(const std::string& text) override {
        std::fprintf(stderr, "PE %u fatal: %s\n", rank, text.c_str());
        std::fflush(stderr);
        std::_Exit(42);
    }
    void on_notice(const std::string& text) override {
        std::fprintf(stderr, "%s", text.c_str());
        notices.push_back(text);
    }

    /// Runs the loop until `n` messages are queued or `limit` passes; true when they are.
    bool wait_messages(std::size_t n, std::chrono::milliseconds limit = 60s) {
        return wait_for([&] { return inbox.size() >= n; }, limit);
    }
    /// Runs the loop until p() or `limit` passes (the scheduler's deadline timer wakes a
    /// loop that sleeps); true when p() holds.
    template <class Pred>
    bool wait_for(Pred p, std::chrono::milliseconds limit = 60s) {
        sched.run_until(p, limit);
        return p();
    }
    /// Everything a PE does before exit: finish rendezvous, the disconnect handshake, close.
    /// Work that never finishes (a rendezvous whose get-done never comes, a send queued for
    /// a ring nobody reads) ends the PE with code shutdown_stalled, said on stderr, instead
    /// of holding the test until ctest's timeout.
    static constexpr int shutdown_stalled = 95;
    void shut_down(std::chrono::milliseconds limit = 60s) {
        if (_down) return;
        _down = true;
        if (!wait_for([&] { return rdma->idle(); }, limit)) {
            std::fprintf(stderr,
                         "PE %u: the rdma layer still had work %lld ms into shutdown (a "
                         "rendezvous or a queued send that never completed)\n",
                         rank, static_cast<long long>(limit.count()));
            std::fflush(nullptr);
            std::_Exit(shutdown_stalled);
        }
        try {
            sync_wait(mesh->shutdown());
        } catch (const std::exception& e) {
            std::fprintf(stderr, "PE %u shutdown: %s\n", rank, e.what());
        }
        rdma->close();
    }
};

struct pair_options {
    layer_config cfg = [] {
        layer_config c;
        c.shm_ring_bytes = 256 * 1024;
        return c;
    }();
    bool same_host = true;
    /// The bodies of PE 1 and up may call gate() to wait until PE 0 has ended (the parent
    /// reaped it). Without it, gate() returns at once.
    bool gate_pe1_on_pe0_exit = false;
    /// The schedulers' option for more PEs than cores.
    bool yield_while_spinning = false;
    /// How long run_job waits for its PEs to end: then it stops those still running
    /// (SIGKILL), says which on stderr, and gives each the code job_timed_out. Far above any
    /// test's job (seconds; a stalled shutdown ends its PE at 60 s), below the rdma tests'
    /// ctest timeouts (180 s and up), so that a stalled PE fails its test by name.
    std::chrono::seconds job_limit = 90s;
};

/// The code run_job gives a PE it had to stop at pair_options::job_limit.
inline constexpr int job_timed_out = 124;

/// How the two PEs ended: exit codes, or 128 + signal.
struct pair_result {
    int pe0 = -1;
    int pe1 = -1;
    std::uint64_t job_key = 0;  // the job's key (its names in /dev/shm begin with it)
};

enum class wait_outcome { ended, timed_out, failed };

// Waits for child `pid` until `deadline`: ended (with its status), timed_out (it still runs),
// or failed (waitpid's error is in errno: it is not, or no longer, our child to wait for).
inline wait_outcome wait_until(pid_t pid, std::chrono::steady_clock::time_point deadline,
                               int& status) {
    const int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
    for (;;) {
        const pid_t r = ::waitpid(pid, &status, WNOHANG);
        if (r == pid || (r < 0 && errno != EINTR)) {
            const int saved = errno;
            if (fd >= 0) ::close(fd);
            errno = saved;
            return r == pid ? wait_outcome::ended : wait_outcome::failed;
        }
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0) {
            if (fd >= 0) ::close(fd);
            return wait_outcome::timed_out;
        }
        // The pidfd is readable once the child ended; without one (old kernel), a short nap.
        pollfd p{fd, POLLIN, 0};
        if (fd < 0 || ::poll(&p, 1, static_cast<int>(std::min<long long>(left.count(), 1000))) < 0)
            ::usleep(1000);
    }
}

inline int status_code(int status) {
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return -1;
}

/// Body of one PE: its node (connected) and a gate to wait on (see pair_options).
using pe_body = std::function<int(node&, const std::function<void()>& gate)>;

namespace detail {

// PE `rank` of hosts.size(): says its listening port on `port_out`, reads every PE's on
// `port_in` (in rank order), then joins the mesh; `hosts[i]` is PE i's host.
inline int run_pe(std::uint32_t rank, const std::vector<std::uint32_t>& hosts,
                  const pair_options& opt, std::uint64_t key, int port_in, int port_out,
                  int gate_fd, const pe_body& body) {
    const auto num_pes = static_cast<std::uint32_t>(hosts.size());
    alloc::set_config(alloc::alloc_config::from_environment());  // MEMORY_POOL of the variant
    scheduler_options so;
    so.spin = std::chrono::microseconds(50);
    so.yield_while_spinning = opt.yield_while_spinning;
    node n(so);
    n.rank = rank;
    n.job_key = key;
    std::string why;
    n.backend = net::make_backend(n.sched, net::backend_kind::io_uring, &why);
    if (!n.backend) {
        std::fprintf(stderr, "no backend: %s\n", why.c_str());
        return 90;
    }
    auto l = n.backend->listen(net::endpoint{"127.0.0.1", 0});
    if (l.error) return 91;
    const std::uint16_t mine = l.value->local().port;
    if (::write(port_out, &mine, sizeof mine) != sizeof mine) return 92;
    std::vector<std::uint16_t> ports(num_pes);
    const auto want = static_cast<ssize_t>(ports.size() * sizeof ports[0]);
    for (ssize_t got = 0; got < want;) {
        const ssize_t r = ::read(port_in, reinterpret_cast<char*>(ports.data()) + got,
                                 static_cast<std::size_t>(want - got));
        if (r <= 0) return 93;
        got += r;
    }
    layer_config cfg = opt.cfg;
    cfg.rank = rank;
    cfg.num_pes = num_pes;
    cfg.job_key = key;
    n.rdma = std::make_unique<layer>(n.sched, cfg, n);
    n.rdma->prepare();
    net::mesh_config mc;
    mc.rank = rank;
    mc.num_pes = num_pes;
    mc.job_key = key;
    mc.connect_timeout = 30s;
    mc.payload_alloc.allocate = static_cast<void* (*)(std::size_t) noexcept>(&alloc::msg_alloc);
    mc.payload_alloc.release = &alloc::msg_free;
    for (const std::uint16_t p : ports)
        mc.peers.push_back(net::endpoint{"127.0.0.1", p});
    n.mesh = std::make_unique<net::mesh>(*n.backend, std::move(l.value), mc);
    n.rdma->attach(*n.mesh);
    n.mesh->on_peer_failure([&n](std::uint32_t pe, const std::string& text) {
        std::fprintf(stderr, "PE %u: peer failure: %s\n", n.rank, text.c_str());
        n.failed_peers.push_back(pe);
        n.rdma->peer_lost(pe);
    });
    try {
        sync_wait(n.mesh->establish());
    } catch (const std::exception& e) {
        std::fprintf(stderr, "PE %u: establish: %s\n", rank, e.what());
        return 94;
    }
    std::vector<peer_info> peers;
    for (const std::uint32_t h : hosts)
        peers.push_back(peer_info{h});
    n.rdma->connect(peers);
    const auto gate = [gate_fd] {
        char c;
        [[maybe_unused]] auto r = ::read(gate_fd, &c, 1);
    };
    const int rc = body(n, gate);
    if (rc != 0) {
        // A failed check: its code is the result. Tearing the node down mid-protocol would
        // abort on the tasks still running and hide the code behind SIGABRT (134).
        std::fprintf(stderr, "PE %u: failed with code %d\n", rank, rc);
        std::fflush(nullptr);
        std::_Exit(rc);
    }
    if (n.failed_peers.empty()) n.shut_down();
    if (rc == 0 && !n.failed_peers.empty() && !n._down) {
        // The peer is gone: close what is left without a handshake.
        n.rdma->close();
        try {
            sync_wait(n.mesh->shutdown());
        } catch (const std::exception&) {
        }
    }
    return rc;
}

}  // namespace detail

/// How each PE of run_job ended, by rank: its exit code, 128 + signal, or -1 (never ran).
struct job_result {
    std::vector<int> codes;
    std::uint64_t job_key = 0;  // the job's key (its names in /dev/shm begin with it)
};

/// Runs a job of bodies.size() PEs, PE i on host hosts[i] (PEs of one host share memory);
/// each PE's exit code comes back (0: its body passed). With gate_pe1_on_pe0_exit, every PE
/// but 0 may call gate() to wait until PE 0 has ended.
inline job_result run_job(const pair_options& opt, const std::vector<std::uint32_t>& hosts,
                          const std::vector<pe_body>& bodies) {
    const std::size_t n = bodies.size();
    job_result out;
    out.codes.assign(n, -1);
    if (n == 0 || hosts.size() != n) {
        std::fprintf(stderr, "run_job: %zu bodies and %zu hosts; nothing run\n", n, hosts.size());
        return out;
    }
    // Per PE: a pipe up (its port to us) and a pipe down (every port to it).
    std::vector<int> up(2 * n, -1), down(2 * n, -1);
    int gate_pipe[2];
    const auto close_all = [&] {
        for (int& fd : up)
            if (fd >= 0) ::close(std::exchange(fd, -1));
        for (int& fd : down)
            if (fd >= 0) ::close(std::exchange(fd, -1));
    };
    for (std::size_t i = 0; i < n; ++i)
        if (::pipe(&up[2 * i]) != 0 || ::pipe(&down[2 * i]) != 0) {
            close_all();
            return out;
        }
    if (::pipe(gate_pipe) != 0) {
        close_all();
        return out;
    }
    out.job_key =
        (static_cast<std::uint64_t>(::getpid()) << 20) ^
        static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    std::fflush(nullptr);
    std::vector<pid_t> pids(n, -1);
    for (std::size_t i = 0; i < n; ++i) {
        pids[i] = ::fork();
        if (pids[i] == 0) {
            ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // a test process killed takes its PEs along
            // Only its own ends stay open, so that a PE which dies early ends the pipes the
            // others read (they fail instead of waiting for ever).
            const int in = down[2 * i], out_fd = up[2 * i + 1];
            for (const int fd : up)
                if (fd != out_fd) ::close(fd);
            for (const int fd : down)
                if (fd != in) ::close(fd);
            ::close(gate_pipe[1]);
            const int gate = i == 0 ? -1 : gate_pipe[0];
            std::exit(detail::run_pe(static_cast<std::uint32_t>(i), hosts, opt, out.job_key, in,
                                     out_fd, gate, bodies[i]));
        }
    }
    // The gate's read end stays open here until the gate is written: a write into a pipe
    // that no PE holds any more (they ended or were stopped) must not raise SIGPIPE in us.
    // Every port, in rank order, to every PE. A PE that died before it said its port ends
    // its pipe: the others then read too few and fail (code 93) instead of waiting.
    // Every pipe is read (none closed early), so no PE writes its port into a closed pipe.
    std::vector<std::uint16_t> ports(n, 0);
    bool all = true;
    for (std::size_t i = 0; i < n; ++i) {
        ::close(std::exchange(up[2 * i + 1], -1));
        const bool said = ::read(up[2 * i], &ports[i], sizeof ports[i]) == sizeof ports[i];
        all = all && said;
    }
    for (std::size_t i = 0; i < n; ++i) {
        if (all) {
            [[maybe_unused]] auto w =
                ::write(down[2 * i + 1], ports.data(), ports.size() * sizeof ports[0]);
        }
    }
    close_all();
    const auto deadline = std::chrono::steady_clock::now() + opt.job_limit;
    std::vector<bool> stopped(n, false);  // sent SIGKILL by us, at the job's limit
    const auto ended = [&](std::size_t i, int status) {
        // A PE we stopped says so; one that ended by itself meanwhile keeps its own code.
        const bool ours = stopped[i] && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
        out.codes[i] = ours ? job_timed_out : status_code(status);
        if (ours) std::fprintf(stderr, "run_job: PE %zu stopped (code %d)\n", i, job_timed_out);
        pids[i] = -1;
    };
    const auto reap = [&](std::size_t i) {
        if (pids[i] < 0) return;  // fork failed (code -1), or reaped already
        int status = 0;
        if (!stopped[i]) {
            const wait_outcome w = wait_until(pids[i], deadline, status);
            if (w == wait_outcome::ended) return ended(i, status);
            if (w == wait_outcome::failed) {
                std::fprintf(stderr, "run_job: cannot wait for PE %zu (pid %d): %s\n", i,
                             static_cast<int>(pids[i]), std::strerror(errno));
                pids[i] = -1;  // not ours to signal any more: code -1
                return;
            }
            std::fprintf(stderr,
                         "run_job: PE %zu (pid %d) did not end within %lld s; stopping the "
                         "PEs still running\n",
                         i, static_cast<int>(pids[i]),
                         static_cast<long long>(opt.job_limit.count()));
            // Those that ended by now are reaped as they ended; the rest are stopped. A
            // child not yet reaped keeps its PID, so the signal cannot reach anyone else.
            for (std::size_t k = i; k < n; ++k) {
                if (pids[k] < 0) continue;
                if (::waitpid(pids[k], &status, WNOHANG) == pids[k]) {
                    ended(k, status);
                    continue;
                }
                ::kill(pids[k], SIGKILL);
                stopped[k] = true;
            }
            if (pids[i] < 0) return;
        }
        while (::waitpid(pids[i], &status, 0) < 0)
            if (errno != EINTR) {
                pids[i] = -1;  // cannot happen for our unreaped child: code -1
                return;
            }
        ended(i, status);
    };
    if (opt.gate_pe1_on_pe0_exit) {
        reap(0);
        [[maybe_unused]] auto w = ::write(gate_pipe[1], std::string(n, 'g').data(), n);
        ::close(gate_pipe[1]);
    } else {
        ::close(gate_pipe[1]);
        reap(0);
    }
    ::close(gate_pipe[0]);
    for (std::size_t i = 1; i < n; ++i)
        reap(i);
    // A PE that failed mid-protocol (a channel made and never mapped by its peer) left names
    // behind; the job is over, so they go, as coverse-run removes them (net::run_job).
    coverse::net::remove_shm_entries(coverse::net::shm_name_prefix(out.job_key));
    return out;
}

/// Runs two PEs, on one host or (same_host false) two.
inline pair_result run_pair(const pair_options& opt, const pe_body& pe0, const pe_body& pe1) {
    const job_result j = run_job(opt, {1, opt.same_host ? 1u : 2u}, {pe0, pe1});
    pair_result out;
    out.pe0 = j.codes[0];
    out.pe1 = j.codes[1];
    out.job_key = j.job_key;
    return out;
}

/// A pattern that depends on the message's number and each 8-byte word's offset.
inline void fill(void* msg, std::size_t size, std::uint64_t seed) {
    auto* b = static_cast<unsigned char*>(msg);
    std::size_t i = 0;
    for (; i + 8 <= size; i += 8) {
        const std::uint64_t v = seed * 0x9E37'79B9'7F4A'7C15ull + i;
        std::memcpy(b + i, &v, 8);
    }
    for (; i < size; ++i)
        b[i] = static_cast<unsigned char>(seed + i);
}

inline bool check(const void* msg, std::size_t size, std::uint64_t seed) {
    const auto* b = static_cast<const unsigned char*>(msg);
    std::size_t i = 0;
    for (; i + 8 <= size; i += 8) {
        const std::uint64_t v = seed * 0x9E37'79B9'7F4A'7C15ull + i;
        if (std::memcmp(b + i, &v, 8) != 0) return false;
    }
    for (; i < size; ++i)
        if (b[i] != static_cast<unsigned char>(seed + i)) return false;
    return true;
}

/// Sends sizes[k] (filled with seed k) to `to` in order and waits for every completion;
/// with `pause_every`, runs the loop 1 ms after every that many sends, so the receiver
/// catches up. Returns 0, or 10 (no memory), 11 (a send never completed), 12 (one failed).
/// Runs the loop until every send in `done` completed: 0, 11 (some never did) or 12 (one
/// completed twice or failed).
inline int wait_sent(node& n, std::vector<recorded_send>& done) {
    if (!n.wait_for([&] {
            for (auto& d : done)
                if (d.calls == 0) return false;
            return true;
        }))
        return 11;
    for (auto& d : done)
        if (d.calls != 1 || d.result != 0) return 12;
    return 0;
}

/// Sends sizes[k] with seed first_seed + k, pausing 1 ms every `pause_every` messages;
/// waits for every completion. `posted`, when given, sees the completions once every send
/// was made and before the wait (what went at once, and what waits).
inline int send_numbered(
    node& n, std::uint32_t to, const std::vector<std::size_t>& sizes, std::size_t pause_every = 0,
    std::size_t first_seed = 0,
    const std::function<void(const std::vector<recorded_send>&)>& posted = {}) {
    std::vector<recorded_send> done(sizes.size());
    std::vector<void*> bufs;
    for (std::size_t k = 0; k < sizes.size(); ++k) {
        void* m = alloc::msg_alloc(sizes[k]);
        if (!m) return 10;
        fill(m, sizes[k], first_seed + k);
        bufs.push_back(m);
        n.rdma->send(to, static_cast<const std::byte*>(m), static_cast<std::uint32_t>(sizes[k]),
                     false, 0, &done[k]);
        if (pause_every && k % pause_every == pause_every - 1)
            n.wait_for([] { return false; }, std::chrono::milliseconds(1));
    }
    if (posted) posted(done);
    const int rc = wait_sent(n, done);
    for (void* m : bufs)
        alloc::msg_free(m);
    return rc;
}

}  // namespace coverse::rdma::test
