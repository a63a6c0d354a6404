// Quiescence detection: no message in flight anywhere and every PE idle with empty queues.
//
// PE 0 runs rounds while someone waits (CmiStartQD, or a callback on CcdQUIESCENCE): it asks
// every PE for its counts; each answers once it is idle, with the messages it sent and
// received (the machine's per-pair counts plus the program's CQdCreate/CQdProcess, minus the
// detection's own messages). Two rounds in a row with sent == received and the same totals
// mean nothing moved in between: PE 0 tells every PE, and each raises CcdQUIESCENCE.
#include <cstdint>
#include <cstring>

#include <conv-qd.h>

#include "compat.hpp"
#include "pe_core.hpp"

struct ConvQdState {
    CmiInt8 created = 0;  // CQdCreate: the program's own messages outside Converse
    CmiInt8 processed = 0;
};

// CpvExtern(CQdState, cQdState): a plain global (one PE per process).
CQdState Cpv_cQdState = nullptr;

namespace coverse::detail {
namespace {

struct qd_message {
    CmiMsgHeaderBasic header;
    std::uint32_t round;
    std::uint32_t pad;
    std::uint64_t sent;
    std::uint64_t received;
};

struct qd_state {
    ConvQdState counters;
    std::uint64_t own_sent = 0;  // detection messages, not counted as the program's
    std::uint64_t own_received = 0;
    std::int64_t pending_round = -1;  // a request to answer once idle
    // PE 0
    bool running = false;
    bool restart = false;  // a start arrived during a round: that round does not count
    std::uint32_t round = 0;
    std::uint32_t replies = 0;
    std::uint64_t sum_sent = 0, sum_received = 0;
    bool previous_valid = false;
    std::uint64_t previous_sent = 0, previous_received = 0;
};

qd_state& qd() {
    static qd_state s;
    if (!Cpv_cQdState) Cpv_cQdState = &s.counters;
    return s;
}

void send_qd(pe_core& core, int pe, internal_handler which, std::uint32_t round,
             std::uint64_t sent = 0, std::uint64_t received = 0) {
    auto* m = static_cast<qd_message*>(CmiAlloc(sizeof(qd_message)));
    std::memset(m, 0, sizeof *m);
    CmiSetHandler(m, static_cast<int>(which));
    m->round = round;
    m->sent = sent;
    m->received = received;
    ++qd().own_sent;
    core.send(pe, sizeof *m, m, pe_core::ownership::take, "quiescence");
}

void start_round(pe_core& core) {
    auto& s = qd();
    ++s.round;
    s.replies = 0;
    s.sum_sent = s.sum_received = 0;
    s.restart = false;
    for (std::uint32_t pe = 0; pe < core.num_pes(); ++pe)
        send_qd(core, static_cast<int>(pe), internal_handler::qd_request, s.round);
}

void next_round_later(void*, double) {
    start_round(pe_core::get("quiescence"));
}

void on_start(void* msg) {
    auto& s = qd();
    ++s.own_received;
    CmiFree(msg);
    if (s.running) {
        s.restart = true;  // the round under way may have seen this PE before it asked
        s.previous_valid = false;
        return;
    }
    s.running = true;
    s.previous_valid = false;
    start_round(pe_core::get("quiescence"));
}

void on_request(void* msg) {
    auto& s = qd();
    ++s.own_received;
    s.pending_round = static_cast<qd_message*>(msg)->round;
    CmiFree(msg);
    // Answered from quiescence_idle, once the queues behind this request are empty.
}

void on_reply(void* msg) {
    auto& s = qd();
    ++s.own_received;
    const qd_message m = *static_cast<qd_message*>(msg);
    CmiFree(msg);
    auto& core = pe_core::get("quiescence");
    if (!s.running || m.round != s.round) return;  // a stale round
    s.sum_sent += m.sent;
    s.sum_received += m.received;
    if (++s.replies < core.num_pes()) return;
    const bool balanced = s.sum_sent == s.sum_received;
    if (balanced && !s.restart && s.previous_valid && s.previous_sent == s.sum_sent &&
        s.previous_received == s.sum_received) {
        s.running = false;
        s.previous_valid = false;
        for (std::uint32_t pe = 0; pe < core.num_pes(); ++pe)
            send_qd(core, static_cast<int>(pe), internal_handler::qd_done, s.round);
        return;
    }
    s.previous_valid = balanced && !s.restart;
    s.previous_sent = s.sum_sent;
    s.previous_received = s.sum_received;
    if (balanced)
        start_round(core);  // confirm at once
    else
        core.call_after(next_round_later, nullptr, 1.0);  // still busy: look again shortly
}

void on_done(void* msg) {
    ++qd().own_received;
    CmiFree(msg);
    CcdRaiseCondition(CcdQUIESCENCE);
}

// The program's messages: the machine's counts, the program's own, minus detection traffic.
std::uint64_t program_sent(pe_core& core) {
    const auto& s = qd();
    return core.messages_sent() - s.own_sent + static_cast<std::uint64_t>(s.counters.created);
}
std::uint64_t program_received(pe_core& core) {
    const auto& s = qd();
    return core.messages_received() - s.own_received +
           static_cast<std::uint64_t>(s.counters.processed);
}

}  // namespace

void quiescence_install(pe_core& core) {
    qd();
    core.set_internal_handler(
        internal_handler::qd_start, [](void* m, void*) { on_start(m); }, nullptr);
    core.set_internal_handler(
        internal_handler::qd_request, [](void* m, void*) { on_request(m); }, nullptr);
    core.set_internal_handler(
        internal_handler::qd_reply, [](void* m, void*) { on_reply(m); }, nullptr);
    core.set_internal_handler(
        internal_handler::qd_done, [](void* m, void*) { on_done(m); }, nullptr);
}

void quiescence_start(pe_core& core) {
    send_qd(core, 0, internal_handler::qd_start, 0);
}

void quiescence_idle(pe_core& core) {
    auto& s = qd();
    if (s.pending_round < 0) return;
    const auto round = static_cast<std::uint32_t>(s.pending_round);
    s.pending_round = -1;
    // Counted before the reply itself goes out: it is detection traffic.
    const std::uint64_t sent = program_sent(core), received = program_received(core);
    send_qd(core, 0, internal_handler::qd_reply, round, sent, received);
}

}  // namespace coverse::detail

using coverse::detail::qd;

extern "C" {

void CQdInit(void) {
    qd();
}
void CQdCpvInit(void) {
    qd();
}
void CQdCreate(CQdState state, CmiInt8 n) {
    (state ? state : &qd().counters)->created += n;
}
void CQdProcess(CQdState state, CmiInt8 n) {
    (state ? state : &qd().counters)->processed += n;
}
CmiInt8 CQdGetCreated(CQdState state) {
    auto* c = coverse::detail::pe_core::instance();
    const CmiInt8 own = (state ? state : &qd().counters)->created;
    return c ? own + static_cast<CmiInt8>(c->messages_sent() - qd().own_sent) : own;
}
CmiInt8 CQdGetProcessed(CQdState state) {
    auto* c = coverse::detail::pe_core::instance();
    const CmiInt8 own = (state ? state : &qd().counters)->processed;
    return c ? own + static_cast<CmiInt8>(c->messages_received() - qd().own_received) : own;
}
void CQdRegisterCallback(CQdVoidFn fn, void* arg) {
    CcdCallOnCondition(CcdQUIESCENCE, fn, arg);
}
void CmiStartQD(CQdVoidFn fn, void* arg) {
    CcdCallOnCondition(CcdQUIESCENCE, fn, arg);  // registering starts the detection
}

}  // extern "C"
