// doctor_hang_pe: programs that hang on purpose, for the hang report's tests
// (doctor_test.cpp). `doctor_hang_pe MODE`, run by coverse-run:
//   barrier          every PE but the last enters the machine's barrier (CmiBarrier); the
//                    last waits for a message that never comes
//   reply-cycle      PE 0 and PE 1 each wait for the other's reply before answering
//   endless-handler  PE 0 sends PE 1 a message whose handler never returns, then waits
//                    for PE 1's answer
//   rndv-unfetched   like endless-handler, then PE 0 sends PE 1 a 256 KiB message: a
//                    rendezvous PE 1 never fetches, so PE 0 waits for its get-done
//   healthy          PEs 0 and 1 (a job of 2) ping-pong until the file $DOCTOR_TEST_STOP
//                    exists, then both exit 0; each writes past_barrier_pe<N> next to the
//                    pid directory once it is past the start-up barrier
//   slow-start       every PE sleeps 2.5 s before it starts the machine (as exec and
//                    ASan's start can take on a loaded machine), then passes a barrier
//                    and exits 0
//   responder-files  every PE, past the barrier (its connections made), checks that the
//                    responder thread has a file table of its own holding at most its
//                    four descriptors and no socket of the PE's; exits 0, or 1 saying why
// Each PE writes its pid to $COVERSE_TEST_PID_DIR/pe<N> first, so the test can check that
// none survives.
#include <coverse/coverse.hpp>
#include <coverse/runtime/wait_reason.hpp>

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace {

std::string g_mode;

// The descriptors in a thread's file table: what each one's /proc link names.
std::vector<std::string> files_of(const std::string& task) {
    std::vector<std::string> out;
    const std::string dir = "/proc/self/task/" + task + "/fd";
    if (DIR* d = ::opendir(dir.c_str())) {
        while (const dirent* e = ::readdir(d)) {
            if (e->d_name[0] == '.') continue;
            char target[256] = {};
            const std::string link = dir + "/" + e->d_name;
            const ssize_t n = ::readlink(link.c_str(), target, sizeof target - 1);
            out.push_back(std::string(e->d_name) + " -> " + (n > 0 ? target : "?"));
        }
        ::closedir(d);
    }
    return out;
}

// A thread's name (/proc/self/task/T/comm), without the newline.
std::string name_of(const std::string& task) {
    std::string name;
    std::ifstream("/proc/self/task/" + task + "/comm") >> name;
    return name;
}

// responder-files: "" when the responder's table is its own and small, else why not. The
// responder is the thread named coverse-doctor (other threads may exist: io_uring workers).
std::string responder_files_problem() {
    const std::string self = std::to_string(::gettid());
    std::vector<std::string> responders;
    if (DIR* d = ::opendir("/proc/self/task")) {
        while (const dirent* e = ::readdir(d))
            if (e->d_name[0] != '.' && self != e->d_name && name_of(e->d_name) == "coverse-doctor")
                responders.push_back(e->d_name);
        ::closedir(d);
    }
    if (responders.size() != 1)
        return "expected one thread named coverse-doctor, found " +
               std::to_string(responders.size());
    const auto pe_files = files_of(self);
    const auto responder = files_of(responders[0]);
    std::string listing;
    for (const auto& f : responder)
        listing += "\n  " + f;
    if (responder.size() > 4) return "the responder holds more than its 4 files:" + listing;
    if (pe_files.size() <= responder.size())
        return "the PE's table is no larger than the responder's: still shared?" + listing;
    int sockets = 0;  // its channel; stderr may be one too (a journal's stream), not counted
    for (const auto& f : responder)
        sockets += f.rfind("2 -> ", 0) != 0 && f.find("socket:") != std::string::npos ? 1 : 0;
    if (sockets > 1) return "the responder holds sockets beyond its doctor channel:" + listing;
    return {};
}

void write_pid(std::uint32_t pe) {
    const char* dir = std::getenv("COVERSE_TEST_PID_DIR");
    if (!dir) return;
    std::ofstream(std::string(dir) + "/pe" + std::to_string(pe)) << ::getpid() << "\n";
}

bool stop_requested() {
    const char* f = std::getenv("DOCTOR_TEST_STOP");
    return f && ::access(f, F_OK) == 0;
}

}  // namespace

// Exported (the program links with -rdynamic), so the report can name it.
extern "C" void doctor_spin_forever(void* msg) {
    CmiFree(msg);
    std::atomic<std::uint64_t> spins{0};
    for (;;)
        spins.fetch_add(1, std::memory_order_relaxed);
}

namespace {

// An empty Converse message for `handler` on `pe`.
void send_empty(int pe, int handler) {
    void* msg = CmiAlloc(CmiMsgHeaderSizeBytes);
    CmiInitMsgHeader(msg, CmiMsgHeaderSizeBytes);
    CmiSetHandler(msg, handler);
    CmiSyncSendAndFree(pe, CmiMsgHeaderSizeBytes, msg);
}

coverse::task<void> main_task(coverse::machine& m) {
    const std::uint32_t pe = m.pe();
    write_pid(pe);
    // The same registrations on every PE, in the same order.
    const int spin = CmiRegisterHandler(doctor_spin_forever);
    coverse::message_stream& inbox = m.register_stream();
    const std::byte none[1] = {};
    co_await m.barrier();  // every PE has its handlers before any message is sent
    if (g_mode == "healthy")
        if (const char* dir = std::getenv("COVERSE_TEST_PID_DIR"))
            std::ofstream(std::string(dir) + "/../past_barrier_pe" + std::to_string(pe)) << "\n";

    if (g_mode == "barrier") {
        if (pe + 1 == m.num_pes()) {
            (void)co_await inbox.next();  // never sent: this PE stays out of the barrier
        } else {
            // The machine's barrier (out of band, below the message queue), which the report
            // explains by epoch and tree; the coroutine API's barrier() is a collective of
            // messages now (cancellable, failing with peer_lost) and reads as message waits.
            CmiBarrier();
        }
    } else if (g_mode == "reply-cycle") {
        const std::uint32_t other = 1 - pe;
        // Each answers only after the other's reply: neither ever sends.
        (void)co_await coverse::waiting_for(
            {coverse::wait_kind::reply, other, 0, "the peer's reply"}, inbox.next());
        co_await m.send(other, inbox.handler(), none);
    } else if (g_mode == "endless-handler") {
        if (pe == 0) {
            send_empty(1, spin);
            (void)co_await coverse::waiting_for(
                {coverse::wait_kind::reply, 1, 0, "the answer to its request"}, inbox.next());
        } else {
            (void)co_await inbox.next();
        }
    } else if (g_mode == "rndv-unfetched") {
        if (pe == 0) {
            send_empty(1, spin);
            const std::vector<std::byte> big(256 * 1024);
            co_await m.send(1, inbox.handler(), big);
        } else {
            (void)co_await inbox.next();
        }
    } else if (g_mode == "slow-start") {
        co_await m.barrier();
    } else if (g_mode == "responder-files") {
        if (const std::string why = responder_files_problem(); !why.empty()) {
            std::fprintf(stderr, "doctor_hang_pe: PE %u: %s\n", pe, why.c_str());
            std::_Exit(1);  // at once: exit() from the entry task waits for it to stop
        }
        co_await m.barrier();  // no PE ends before every PE has looked
    } else if (g_mode == "healthy") {
        if (pe < 2 && m.num_pes() >= 2) {
            const std::uint32_t other = 1 - pe;
            if (pe == 0) co_await m.send(other, inbox.handler(), none);
            // One message in flight at a time: whoever holds it decides to stop, and says
            // so in the message it sends last.
            for (;;) {
                const coverse::message msg = co_await inbox.next();
                if (!msg.payload().empty() && msg.payload()[0] == std::byte{1}) break;
                const bool stop = stop_requested();
                const std::byte flag[1] = {std::byte{stop ? std::uint8_t{1} : std::uint8_t{0}}};
                co_await m.send(other, inbox.handler(), flag);
                if (stop) break;
            }
        }
    }
}

}  // namespace

int main(int argc, char** argv) {
    static const char* const modes[] = {"barrier",        "reply-cycle", "endless-handler",
                                        "rndv-unfetched", "healthy",     "slow-start",
                                        "responder-files"};
    // Checked before the machine starts: exit() from the entry task would wait for the task
    // to stop (10 s) and then abort.
    if (argc < 2 ||
        std::find(std::begin(modes), std::end(modes), std::string(argv[1])) == std::end(modes)) {
        if (argc >= 2) std::fprintf(stderr, "doctor_hang_pe: unknown mode '%s'\n", argv[1]);
        std::fprintf(stderr,
                     "usage: doctor_hang_pe "
                     "barrier|reply-cycle|endless-handler|rndv-unfetched|healthy|slow-start|"
                     "responder-files\n");
        return 2;
    }
    g_mode = argv[1];
    if (g_mode == "slow-start") {
        // Before the machine (and so the PE's doctor responder) starts: the launcher hears
        // nothing from any PE meanwhile.
        ::usleep(2'500'000);
    }
    return coverse::run(argc, argv, main_task);
}
