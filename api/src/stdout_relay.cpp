// The program's stdout under the launcher. There it is a pipe or a file, so stdio would
// block-buffer it and a program's printf lines would come out at exit, after every CmiPrintf
// line. Instead stdout becomes a line-buffered stream whose lines travel as the launcher's
// print frames, on the same ordered path as CmiPrintf. Writes from another thread, or after
// the PE has shut down, go to the original file descriptor directly.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <string_view>
#include <thread>

#include "compat.hpp"
#include "pe_core.hpp"

namespace coverse::detail {
namespace {

std::thread::id pe_thread;

ssize_t write_direct(const char* buf, std::size_t size) {
    std::size_t done = 0;
    while (done < size) {
        const ssize_t n = ::write(STDOUT_FILENO, buf + done, size - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return done ? static_cast<ssize_t>(done) : -1;
        done += static_cast<std::size_t>(n);
    }
    return static_cast<ssize_t>(done);
}

ssize_t relay_write(void*, const char* buf, std::size_t size) {
    pe_core* core = pe_core::instance();
    if (!core || std::this_thread::get_id() != pe_thread) return write_direct(buf, size);
    core->print(std::string_view(buf, size), false);
    return static_cast<ssize_t>(size);
}

}  // namespace

void relay_stdout() {
    if (pe_thread != std::thread::id{}) return;  // once per process
    cookie_io_functions_t io{};
    io.write = relay_write;
    std::FILE* relay = fopencookie(nullptr, "w", io);
    if (!relay) {  // keep the original stream, but line-buffered as on a terminal
        std::setvbuf(stdout, nullptr, _IOLBF, BUFSIZ);
        return;
    }
    std::fflush(stdout);
    std::setvbuf(relay, nullptr, _IOLBF, BUFSIZ);
    pe_thread = std::this_thread::get_id();
    stdout = relay;  // glibc: stdout is a variable; printf, puts and putchar follow it
}

}  // namespace coverse::detail
