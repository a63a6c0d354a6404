// launcher_test_pe: a stand-in PE program for the launcher tests, talking to coverse-run
// through launcher_client directly (the Converse facade does not exist yet). argv[1] picks
// what it does. Every PE first writes its pid to $COVERSE_TEST_PID_DIR/<pe>.pid, so the test
// can check that no process is left; most modes also print "pid <pid>" once registered.
//
//   print <lines>          print <lines> numbered lines (some split over several calls,
//                          some several per call), errors every 50 lines, an unterminated tail
//   echo                   read lines until EOF, printing "echo <line>", then "EOF"
//   abort <pe> <code>      PE <pe> aborts with <code>; the others hang
//   crash <pe>             PE <pe> dies of SIGSEGV; the others hang
//   exit <pe> <code>       PE <pe> exits with <code>; the others hang
//   hang                   every PE hangs (until the launcher stops it)
//   never-register <pe>    PE <pe> never registers (prints its pid on its own stdout)
//   early-exit <pe>        PE <pe> exits 0 before connecting to the launcher
//   args                   print the arguments, the launch environment and the CPU mask
#include <coverse/net/bootstrap.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <thread>

namespace {

using namespace coverse::net;

[[noreturn]] void hang() {
    // The launcher stops us with SIGTERM (default action: die).
    for (;;)
        std::this_thread::sleep_for(std::chrono::seconds(60));
}

// A real data listener, as the machine layer will have one; only its port is used.
std::uint16_t data_port() {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::listen(fd, 8) != 0 || ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
        std::perror("launcher_test_pe: data listener");
        std::exit(1);
    }
    return ntohs(a.sin_port);  // the socket stays open until exit
}

std::uint32_t arg_u32(int argc, char** argv, int i) {
    if (i >= argc) {
        std::fprintf(stderr, "launcher_test_pe: %s needs more arguments\n", argv[1]);
        std::exit(64);
    }
    return static_cast<std::uint32_t>(std::strtoul(argv[i], nullptr, 10));
}

void print_lines(launcher_client& c, std::uint32_t pe, std::uint32_t lines) {
    const std::string tag = "PE " + std::to_string(pe);
    const std::string filler(40 + pe * 7, static_cast<char>('a' + pe));
    for (std::uint32_t k = 0; k < lines; ++k) {
        const std::string line = tag + " line " + std::to_string(k) + " " + filler;
        switch (k % 4) {
            case 0:  // whole line in one call
                c.print(line + "\n");
                break;
            case 1: {  // cut in three, mid-word
                const std::size_t a = line.size() / 3;
                c.print(line.substr(0, a));
                c.print(line.substr(a, a));
                c.print(line.substr(2 * a) + "\n");
                break;
            }
            case 2:  // this line and the start of the next in one call
                c.print(line + "\n" + tag + " line " + std::to_string(k + 1) + " ");
                break;
            case 3:  // the rest of the previous call's tail
                c.print(filler + "\n");
                break;
        }
        if (k % 50 == 0) c.error(tag + " err " + std::to_string(k) + "\n");
    }
    c.print(tag + " tail");  // no newline: the launcher adds one when we exit
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: launcher_test_pe <mode> [args...]\n");
        return 64;
    }
    const std::string mode = argv[1];
    if (const char* dir = std::getenv("COVERSE_TEST_PID_DIR")) {
        const char* pe = std::getenv("COVERSE_PE");
        const std::string path = std::string(dir) + "/" + (pe ? pe : "unknown") + ".pid";
        if (FILE* f = std::fopen(path.c_str(), "w")) {
            std::fprintf(f, "%d\n", static_cast<int>(::getpid()));
            std::fclose(f);
        }
    }
    std::optional<launch_info> info;
    try {
        info = launch_info_from_env();
    } catch (const bootstrap_error& e) {
        std::fprintf(stderr, "%s\n", e.what());
        return 1;
    }
    if (!info) {
        std::fprintf(stderr, "launcher_test_pe: not started by coverse-run\n");
        return 1;
    }
    const std::uint32_t pe = info->pe;
    const std::string pid_line = "pid " + std::to_string(::getpid()) + "\n";

    if (mode == "never-register" && pe == arg_u32(argc, argv, 2)) {
        std::fputs(pid_line.c_str(), stdout);
        std::fflush(stdout);
        hang();
    }
    if (mode == "early-exit" && pe == arg_u32(argc, argv, 2)) return 0;

    try {
        launcher_client c(*info, std::chrono::seconds(10));
        c.print(pid_line);  // held until the registration, then sent behind it
        const auto table = c.register_node(data_port(), "127.0.0.1", std::chrono::seconds(20));
        if (table.size() != info->num_pes) {
            c.error("bad node table size " + std::to_string(table.size()) + "\n");
            return 1;
        }
        for (std::uint32_t i = 0; i < table.size(); ++i) {
            if (table[i].pe != i || table[i].ip != "127.0.0.1" || table[i].data_port == 0) {
                c.error("bad node table entry " + std::to_string(i) + "\n");
                return 1;
            }
        }

        if (mode == "print") {
            print_lines(c, pe, arg_u32(argc, argv, 2));
        } else if (mode == "echo") {
            while (auto line = c.read_line())
                c.print("echo " + *line + "\n");
            c.print("EOF\n");
        } else if (mode == "abort") {
            if (pe == arg_u32(argc, argv, 2)) {
                const int code = static_cast<int>(arg_u32(argc, argv, 3));
                c.abort(code, "test abort from PE " + std::to_string(pe) + "\n");
                std::_Exit(code);
            }
            hang();
        } else if (mode == "crash") {
            if (pe == arg_u32(argc, argv, 2)) {
                // A real SIGSEGV death, not ASan's report of one.
                ::signal(SIGSEGV, SIG_DFL);
                ::raise(SIGSEGV);
            }
            hang();
        } else if (mode == "exit") {
            if (pe == arg_u32(argc, argv, 2)) std::_Exit(static_cast<int>(arg_u32(argc, argv, 3)));
            hang();
        } else if (mode == "hang") {
            hang();
        } else if (mode == "args") {
            std::string out;
            for (int i = 1; i < argc; ++i)
                out += "arg " + std::to_string(i) + " " + argv[i] + "\n";
            out += "num_pes " + std::to_string(info->num_pes) + "\n";
            for (const char* v : {"COVERSE_JOB_KEY", "COVERSE_TEST_EXTRA"}) {
                const char* value = std::getenv(v);
                out += std::string("env ") + v + " " + (value ? value : "(unset)") + "\n";
            }
            cpu_set_t set;
            CPU_ZERO(&set);
            std::string cpus;
            if (::sched_getaffinity(0, sizeof set, &set) == 0) {
                for (int i = 0; i < CPU_SETSIZE; ++i) {
                    if (CPU_ISSET(i, &set)) cpus += (cpus.empty() ? "" : ",") + std::to_string(i);
                }
            }
            out += "cpus " + cpus + "\n";
            c.print(out);
        } else if (mode != "never-register" && mode != "early-exit") {
            c.error("unknown mode " + mode + "\n");
            return 64;
        }
    } catch (const bootstrap_error& e) {
        std::fprintf(stderr, "launcher_test_pe: %s\n", e.what());
        return 1;
    }
    return 0;
}
