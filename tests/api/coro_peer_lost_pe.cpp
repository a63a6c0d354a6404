// A PE dies while the others wait on it (issue 15): run by expect_peer_lost.sh through
// coverse-run with ++set ON_PEER_LOST=report, every survivor must catch coverse::peer_lost
// naming the dead PE in the awaitable the scenario names, then finish its entry (and show
// that the job still works among the survivors). With the default, the job stops.
//
// Usage: coro_peer_lost_pe SCENARIO, one of
//   receive     survivors wait on a stream; the victim's message sent before it died
//               arrives first, the next receive ends with peer_lost
//   credit      survivors send to a stream of capacity 2 the victim never reads: the third
//               send waits for a credit until the victim dies
//   slot        MAXIMUM_HANDLES=2: survivors send three 1 MiB messages (rendezvous: done at
//               get-done) to a victim that never serves them; two hold the slots, the third
//               waits for one
//   get, put, put_notify
//               survivors transfer to and from the victim's exposed region until it dies
//   collective  survivors allreduce; the victim never joins
//   barrier     the same with barrier()
//   burst       the victim sends each survivor 1000 numbered messages and dies at once, its
//               last ones maybe still on their way: what arrives is a prefix of them, in
//               order, none twice; then a wait or a send ends with peer_lost
//   exit        survivors end their entry at once and wait in ConverseExit's exit vote
//               (CONNECT=lazy), which the victim never joins: they must exit 0 without it
// The victim (the last PE) dies by raise(SIGKILL) once the survivors are waiting, or, with
// PEER_LOST_PID set, writes its pid to PEER_LOST_DIR and waits for the driver to kill it.
#include <converse.h>
#include <signal.h>
#include <unistd.h>

#include <coverse/coverse.hpp>
#include <coverse/runtime/timer.hpp>
#include <coverse/runtime/when.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

using namespace std::chrono_literals;

#include "pe_expect.hpp"

namespace {

constexpr const char* expect_program = "coro_peer_lost";

std::string scenario;

// The driver's directory (PEER_LOST_DIR), where the victim leaves files for it and the
// survivors; "" without one.
std::string driver_file(const char* name) {
    const char* dir = std::getenv("PEER_LOST_DIR");
    return dir ? std::string(dir) + "/" + name : std::string();
}

// Writes `text` to the driver's file `name` whole (by rename), if there is a driver.
void tell_the_driver(const char* name, const std::string& text) {
    const std::string path = driver_file(name);
    if (path.empty()) return;
    const std::string tmp = path + ".tmp";
    FILE* f = std::fopen(tmp.c_str(), "w");
    EXPECT(f != nullptr, "cannot write %s", tmp.c_str());
    std::fputs(text.c_str(), f);
    std::fclose(f);
    std::rename(tmp.c_str(), path.c_str());
}

// With PEER_LOST_PID set, the victim writes its pid and stops (serving nothing) until the
// driver's kill -9.
void wait_for_the_driver() {
    if (!std::getenv("PEER_LOST_PID")) return;
    tell_the_driver("victim.pid", std::to_string(::getpid()) + "\n");
    for (;;)
        ::pause();
}

// The victim's end, its scheduler running meanwhile (messages to it arrive and queue).
coverse::task<void> die(coverse::machine&) {
    // A small send completes once it is queued: let what the victim sent leave first.
    co_await coverse::sleep_for(100ms);
    wait_for_the_driver();
    co_await coverse::sleep_for(300ms);  // the survivors are waiting by now (not required)
    ::raise(SIGKILL);
}

// The victim's end, its scheduler blocked: nothing it was sent is served (no rendezvous
// get, no tcp one-sided request). It says so first (victim.blocked), for survivors that
// must not send before (see slot).
void die_without_serving() {
    tell_the_driver("victim.blocked", "");
    wait_for_the_driver();
    ::usleep(300000);
    ::raise(SIGKILL);
}

void caught(coverse::machine& m, const coverse::peer_lost& e, const char* where) {
    EXPECT(e.pe() == m.num_pes() - 1, "%s: peer_lost names PE %u, not the victim (%s)", where,
           e.pe(), e.what());
    std::printf("PE %u caught peer_lost from PE %u in %s\n", m.pe(), e.pe(), where);
    std::fflush(stdout);
}

// After the loss the survivors still talk: a ring of one message among them.
coverse::task<void> survivors_ring(coverse::machine& m, coverse::message_stream& s) {
    const std::uint32_t alive = m.num_pes() - 1;
    if (alive < 2) co_return;
    const std::uint32_t next = (m.pe() + 1) % alive;
    if (m.pe() == 0) co_await m.send_value(next, s.handler(), 1);
    const int v = co_await s.next<int>();
    EXPECT(v >= 1, "the survivors' ring carried %d", v);
    if (m.pe() != 0) co_await m.send_value(next, s.handler(), v + 1);
}

struct setup {
    coverse::message_stream* data;   // capacity 2: the credit scenario
    coverse::message_stream* notes;  // unbounded: put_notify's notes, the slot scenario
    std::uint32_t victim;
    bool is_victim;
    coverse::remote_region region;  // the victim's exposed region
};

coverse::task<void> receive(coverse::machine& m, setup s) {
    if (s.is_victim) {
        for (std::uint32_t p = 0; p < s.victim; ++p)
            co_await m.send_value(p, s.data->handler(), 42);
        co_await die(m);
    }
    const int first = co_await s.data->next<int>();  // sent before it died: never lost
    EXPECT(first == 42, "got %d before the loss", first);
    try {
        (void)co_await s.data->next();
        EXPECT(false, "a receive after the victim died returned a message");
    } catch (const coverse::peer_lost& e) {
        caught(m, e, "receive");
    }
    // A receive with a timeout is a receive too.
    EXPECT(!(co_await s.data->next(50ms)), "a message came from nowhere");
}

coverse::task<void> credit(coverse::machine& m, setup s) {
    if (s.is_victim) co_await die(m);
    try {
        for (int i = 0; i < 3; ++i)
            co_await m.send_value(s.victim, s.data->handler(), i);
        EXPECT(false, "three sends to a stream of capacity 2 nobody reads all went");
    } catch (const coverse::peer_lost& e) {
        caught(m, e, "send waiting for a credit");
    }
}

// Until the victim's loop has stopped. Leaving the barrier does not say so: another
// survivor's rendezvous offer can reach the victim before the barrier's release does, and
// a victim still in the barrier serves it (its get done, that send completes).
coverse::task<void> victim_blocked() {
    const std::string path = driver_file("victim.blocked");
    EXPECT(!path.empty(), "the slot scenario needs PEER_LOST_DIR (run it by expect_peer_lost.sh)");
    for (int waited_ms = 0; ::access(path.c_str(), F_OK) != 0; ++waited_ms) {
        EXPECT(waited_ms < 60000, "the victim did not stop serving within 60 s (%s)", path.c_str());
        co_await coverse::sleep_for(1ms);
    }
}

coverse::task<void> slot(coverse::machine& m, setup s) {
    if (s.is_victim) die_without_serving();
    co_await victim_blocked();
    std::vector<coverse::task<coverse::or_lost<void>>> sends;
    for (int i = 0; i < 3; ++i) {
        auto msg = coverse::message::allocate(s.notes->handler(), 1 << 20);
        sends.push_back(coverse::catch_lost(m.send(s.victim, std::move(msg))));
    }
    auto results = co_await coverse::when_all(std::move(sends));
    for (auto& r : results) {
        auto* e = std::get_if<coverse::peer_lost>(&r);
        EXPECT(e != nullptr, "a 1 MiB send to a victim that never served it completed");
        caught(m, *e, "a send in flight or waiting for a handle slot");
    }
    try {
        co_await m.send_value(s.victim, s.notes->handler(), 1);
        EXPECT(false, "a new send to a lost PE completed");
    } catch (const coverse::peer_lost& e) {
        caught(m, e, "a new send");
    }
}

coverse::task<void> one_sided(coverse::machine& m, setup s) {
    if (s.is_victim) {
        if (scenario == "put_notify")
            co_await die(m);
        else
            die_without_serving();  // a tcp transfer waits for it; cma does not
    }
    std::vector<std::byte> local(1 << 20, std::byte{7});
    try {
        for (;;) {
            if (scenario == "get")
                co_await m.get(s.victim, s.region, local);
            else if (scenario == "put")
                co_await m.put(s.victim, local, s.region);
            else
                co_await m.put_notify(s.victim, std::span(local).first(4096),
                                      s.region.slice(0, 4096),
                                      coverse::message::allocate(s.notes->handler(), 0));
            co_await coverse::sleep_for(5ms);
        }
    } catch (const coverse::peer_lost& e) {
        caught(m, e, scenario.c_str());
    }
}

coverse::task<void> collective(coverse::machine& m, setup s) {
    if (s.is_victim) co_await die(m);
    try {
        (void)co_await m.allreduce(1, std::plus<int>{});
        EXPECT(false, "an allreduce without the victim finished");
    } catch (const coverse::peer_lost& e) {
        caught(m, e, "allreduce");
    }
    try {  // later collectives fail at once
        (void)co_await m.gather(1);
        EXPECT(false, "a gather after the loss finished");
    } catch (const coverse::peer_lost& e) {
        caught(m, e, "a later gather");
    }
}

coverse::task<void> barrier(coverse::machine& m, setup s) {
    if (s.is_victim) co_await die(m);
    auto r = co_await coverse::catch_lost(m.barrier());
    auto* e = std::get_if<coverse::peer_lost>(&r);
    EXPECT(e != nullptr, "a barrier without the victim finished");
    caught(m, *e, "barrier");
}

// The victim dies in the middle of sending (no pause before its SIGKILL). It starts once
// every survivor said it is here: a survivor still finishing the barrier when the loss
// became known would end that barrier with peer_lost (a collective in progress fails on
// any loss), not the burst, and the survivors' ring would then wait for it (seen on a
// loaded 2-core machine).
coverse::task<void> burst(coverse::machine& m, setup s) {
    constexpr int count = 1000;
    if (s.is_victim) {
        for (std::uint32_t p = 0; p < s.victim; ++p) {
            const int ready = co_await s.notes->next<int>();
            EXPECT(ready == -1, "a survivor's ready note came as %d", ready);
        }
        for (int i = 0; i < count; ++i) {
            for (std::uint32_t p = 0; p < s.victim; ++p)
                co_await m.send_value(p, s.notes->handler(), i);
            // Now and then the loop's turn: queued sends (a connection's, one being made)
            // leave, so some of the burst is on its way when the victim dies.
            if (i % 100 == 99) co_await coverse::yield();
        }
        ::raise(SIGKILL);
    }
    co_await m.send_value(s.victim, s.notes->handler(), -1);  // ready: past the barrier
    int next = 0;
    try {
        // A receive waiting when the loss became known ends with peer_lost; one that began
        // after it waits for the survivors' messages, and ends here by its timeout.
        while (const auto v = co_await s.notes->next(500ms)) {
            const int got = v->as<int>();
            EXPECT(got == next, "message %d of the burst came as %d", next, got);
            ++next;
        }
        // The loss is known by now (its connection ended with it); a send to it says so.
        for (int tries = 0;; ++tries) {
            EXPECT(tries < 1000, "the victim's loss was not known 10 s after its burst");
            auto r = co_await coverse::catch_lost(m.send_value(s.victim, s.notes->handler(), 0));
            if (auto* e = std::get_if<coverse::peer_lost>(&r)) throw *e;
            co_await coverse::sleep_for(10ms);
        }
    } catch (const coverse::peer_lost& e) {
        caught(m, e, "burst");
    }
    std::printf("PE %u took %d of the victim's %d messages, in order, before the loss\n", m.pe(),
                next, count);
    std::fflush(stdout);
}

coverse::task<void> entry(coverse::machine& m) {
    setup s;
    s.data = &m.register_stream(2);
    auto& ring = m.register_stream();  // the survivors' ring afterwards
    s.notes = &m.register_stream(0);
    s.victim = m.num_pes() - 1;
    s.is_victim = m.pe() == s.victim;
    EXPECT(m.num_pes() >= 2, "run on 2 or more PEs");

    // The region the one-sided scenarios use, known everywhere before anyone dies.
    std::vector<std::byte> memory(1 << 20);
    auto exposed = co_await m.expose(memory);
    s.region = (co_await m.allgather(exposed.descriptor()))[s.victim];
    co_await m.barrier();

    if (scenario == "receive")
        co_await receive(m, s);
    else if (scenario == "credit")
        co_await credit(m, s);
    else if (scenario == "slot")
        co_await slot(m, s);
    else if (scenario == "get" || scenario == "put" || scenario == "put_notify")
        co_await one_sided(m, s);
    else if (scenario == "collective")
        co_await collective(m, s);
    else if (scenario == "barrier")
        co_await barrier(m, s);
    else if (scenario == "burst")
        co_await burst(m, s);
    else if (scenario == "exit") {
        if (s.is_victim) co_await die(m);
        std::printf("PE %u finished %s\n", m.pe(), scenario.c_str());
        std::fflush(stdout);
        co_return;  // straight into the exit vote, no survivors' ring first
    } else
        CmiAbort("coro_peer_lost: unknown scenario '%s'", scenario.c_str());
    co_await survivors_ring(m, ring);
    std::printf("PE %u finished %s\n", m.pe(), scenario.c_str());
    std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
    if (argc > 1) scenario = argv[1];
    return coverse::run(argc, argv, entry);
}
