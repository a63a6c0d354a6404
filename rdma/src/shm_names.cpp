// shm_names.hpp: a fixed table of names, written by the PE's thread and read by the signal
// handler, which only unlinks what is marked in use (the mark is set after the name is
// written, and cleared before its slot is reused).
#include "shm_names.hpp"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

namespace coverse::rdma::detail {

namespace {

struct name_slot {
    std::atomic<bool> used{false};
    bool fifo = false;
    char name[200] = {};
};

constexpr int most_names = 512;
name_slot g_names[most_names];
std::atomic<bool> g_installed{false};

constexpr int stop_signals[] = {SIGTERM, SIGINT, SIGHUP};

void on_stop_signal(int sig) {
    const int saved = errno;
    for (name_slot& s : g_names)
        if (s.used.load(std::memory_order_acquire)) {
            if (s.fifo)
                ::unlink(s.name);
            else
                ::shm_unlink(s.name);
        }
    errno = saved;
    // SA_RESETHAND put the default action back: the signal, blocked while we run, ends the
    // process as it would have without us once we return.
    ::raise(sig);
}

// Once, on the first name: only over a default action, so a program's own handler (or an
// ignored signal) stays as the program set it.
void install_handlers() noexcept {
    if (g_installed.exchange(true)) return;
    for (const int sig : stop_signals) {
        struct sigaction old {};
        if (::sigaction(sig, nullptr, &old) != 0) continue;
        if ((old.sa_flags & SA_SIGINFO) != 0 || old.sa_handler != SIG_DFL) continue;
        struct sigaction sa {};
        sa.sa_handler = &on_stop_signal;
        sigemptyset(&sa.sa_mask);
        sa.sa_flags = SA_RESETHAND;
        ::sigaction(sig, &sa, nullptr);
    }
}

}  // namespace

void remember_shm_name(const std::string& name, bool fifo) noexcept {
    if (name.size() >= sizeof(name_slot::name)) return;
    install_handlers();
    for (name_slot& s : g_names) {
        if (s.used.load(std::memory_order_relaxed)) continue;
        s.fifo = fifo;
        std::memcpy(s.name, name.c_str(), name.size() + 1);
        s.used.store(true, std::memory_order_release);
        return;
    }
}

void forget_shm_name(const std::string& name) noexcept {
    for (name_slot& s : g_names)
        if (s.used.load(std::memory_order_relaxed) && name == s.name) {
            s.used.store(false, std::memory_order_release);
            return;
        }
}

}  // namespace coverse::rdma::detail
