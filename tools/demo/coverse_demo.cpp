// coverse-demo: a tour of the runtime on one PE — the reactor it chose, tasks exchanging
// messages over a bounded channel, a timer race, and a helper thread posting work.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include <coverse/net/transport.hpp>
#include <coverse/runtime/runtime.hpp>

using namespace std::chrono_literals;

namespace {

coverse::task<long> producer(coverse::channel<int>& ch, int count) {
    long sum = 0;
    for (int i = 1; i <= count; ++i) {
        co_await ch.send(i);
        sum += i;
    }
    ch.close();
    co_return sum;
}

coverse::task<long> consumer(coverse::channel<int>& ch) {
    long sum = 0;
    while (auto v = co_await ch.recv())
        sum += *v;
    co_return sum;
}

coverse::task<void> slow() {
    co_await coverse::sleep_for(10s);
}

coverse::task<int> demo() {
    auto& sched = coverse::scheduler::this_thread();
    std::printf("reactor      %s\n", sched.describe_io().c_str());
    const auto net = coverse::net::describe_backend_choice(sched);
    if (net.details.empty())
        std::printf("net          %s\n", net.why.c_str());
    else
        std::printf("net          %s: %s\n", net.why.c_str(), net.details.c_str());

    coverse::channel<int> ch(16);
    const auto t0 = coverse::clock::now();
    auto [sent, received] = co_await coverse::when_all(producer(ch, 100000), consumer(ch));
    const auto dt = std::chrono::duration<double, std::micro>(coverse::clock::now() - t0);
    std::printf("channel      100000 messages through a 16-slot channel in %.0f us, sums %ld/%ld\n",
                dt.count(), sent, received);

    const auto t1 = coverse::clock::now();
    bool finished = co_await coverse::with_timeout(slow(), 20ms);
    const auto waited = std::chrono::duration<double, std::milli>(coverse::clock::now() - t1);
    std::printf("with_timeout a 10 s sleep under a 20 ms limit: %s after %.1f ms\n",
                finished ? "finished" : "cancelled", waited.count());

    coverse::event done;
    int posted = 0;
    std::thread helper([&] {
        for (int i = 0; i < 1000; ++i)
            sched.post([&] { ++posted; });
        sched.post([&] { done.set(); });
    });
    co_await done.wait();
    helper.join();
    std::printf("cross-thread 1000 posts from a helper thread arrived: %d\n", posted);
    co_return (sent == received && !finished && posted == 1000) ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
    try {
        coverse::settings::consume_command_line(argc, argv);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "%s\n", e.what());
        return 2;
    }
    for (int i = 1; i < argc; ++i) {
        if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) {
            std::printf(
                "usage: coverse-demo [++set NAME=VALUE]...\n  Runs the coverse runtime tour "
                "on one PE and exits 0 when every step checked out.\n  ++set overrides a "
                "setting (coverse-info -c lists them).\n");
            return 0;
        }
        std::fprintf(stderr, "coverse-demo: unknown argument '%s' (try --help)\n", argv[i]);
        return 2;
    }
    coverse::scheduler sched;
    int rc = coverse::sync_wait(demo());
    std::printf("%s\n", rc == 0 ? "coverse-demo: ok" : "coverse-demo: FAILED");
    return rc;
}
