// delay_router: the test bed's WAN (the kernel here has no netem). It opens a TUN device and
// holds every IP packet the kernel routes into it for DELAY milliseconds, then writes it
// back unchanged; the kernel routes it on by its destination. The WAN test (wan.sh) runs it
// in a router namespace whose policy routing sends everything that arrives from the two
// groups' links into the TUN device, so each packet between the groups waits DELAY once.
// Packets leave in arrival order. It ends with SIGTERM, or when its parent dies.
//   delay_router TUN_NAME DELAY_MS
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <string>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;

struct held_packet {
    clock_type::time_point due;
    std::vector<unsigned char> bytes;
};

volatile sig_atomic_t stop = 0;
void on_signal(int) {
    stop = 1;
}

int open_tun(const char* name) {
    const int fd = ::open("/dev/net/tun", O_RDWR | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        std::fprintf(stderr, "delay_router: cannot open /dev/net/tun: %s\n", std::strerror(errno));
        return -1;
    }
    ifreq ifr{};
    ifr.ifr_flags = IFF_TUN | IFF_NO_PI;
    std::snprintf(ifr.ifr_name, IFNAMSIZ, "%s", name);
    if (::ioctl(fd, TUNSETIFF, &ifr) != 0) {
        std::fprintf(stderr, "delay_router: cannot make TUN device %s: %s\n", name,
                     std::strerror(errno));
        ::close(fd);
        return -1;
    }
    return fd;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc == 2 && (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0)) {
        std::printf(
            "Usage: delay_router TUN_NAME DELAY_MS\n"
            "Holds every packet routed into TUN_NAME for DELAY_MS, then writes it back.\n");
        return 0;
    }
    if (argc != 3) {
        std::fprintf(stderr, "usage: delay_router TUN_NAME DELAY_MS (see --help)\n");
        return 2;
    }
    char* end = nullptr;
    const long delay_ms = std::strtol(argv[2], &end, 10);
    if (*argv[2] == '\0' || *end != '\0' || delay_ms < 0 || delay_ms > 10000) {
        std::fprintf(stderr, "delay_router: DELAY_MS must be 0 to 10000, not '%s'\n", argv[2]);
        return 2;
    }
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);  // the test script dies: so do we
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    ::sigaction(SIGTERM, &sa, nullptr);
    ::sigaction(SIGINT, &sa, nullptr);
    const int fd = open_tun(argv[1]);
    if (fd < 0) return 1;
    std::printf("delay_router: %s holds packets %ld ms\n", argv[1], delay_ms);
    std::fflush(stdout);

    const auto delay = std::chrono::milliseconds(delay_ms);
    std::deque<held_packet> held;
    std::vector<unsigned char> buf(65536);
    while (!stop) {
        int timeout = -1;
        if (!held.empty()) {
            const auto left =
                std::chrono::ceil<std::chrono::milliseconds>(held.front().due - clock_type::now());
            timeout = static_cast<int>(std::max<long long>(left.count(), 0));
        }
        pollfd p{fd, POLLIN, 0};
        const int r = ::poll(&p, 1, timeout);
        if (r < 0 && errno != EINTR) {
            std::fprintf(stderr, "delay_router: poll: %s\n", std::strerror(errno));
            return 1;
        }
        const auto now = clock_type::now();
        if (r > 0 && (p.revents & POLLIN) != 0) {
            for (;;) {
                const ssize_t n = ::read(fd, buf.data(), buf.size());
                if (n <= 0) break;
                held.push_back({now + delay, {buf.begin(), buf.begin() + n}});
            }
        }
        while (!held.empty() && held.front().due <= clock_type::now()) {
            const auto& pkt = held.front();
            // A full device queue drops the packet, as a router would; TCP sends it again.
            [[maybe_unused]] const ssize_t n = ::write(fd, pkt.bytes.data(), pkt.bytes.size());
            held.pop_front();
        }
    }
    ::close(fd);
    return 0;
}
