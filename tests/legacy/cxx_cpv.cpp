// cxx_cpv.cpp: converse.h from C++, with Cpv variables of non-POD types (std::vector<int>,
// std::string, std::map). A token goes around the ring LAPS times; each PE appends the lap
// to its vector, counts visits in a map keyed by the sender, and PE 0 checks the token's
// record of every hop. At exit every PE checks its Cpv containers. Also the older
// Converse forms C++ callers still get as overloads: a (void *, double) condition callback
// and a no-argument CthCreate function.
#include <converse.h>

#include <cstdlib>
#include <map>
#include <string>
#include <vector>

namespace {

constexpr int laps = 20;

struct token_msg {
    char header[CmiMsgHeaderSizeBytes];
    int lap;
    int hops;
    int last_pe;
};

struct small_msg {
    char header[CmiMsgHeaderSizeBytes];
};

int token_handler_id, exit_handler_id;
bool finished;
int timed_hits, old_thread_runs;

void timed_condition(void* arg, double now) {
    if (arg != &timed_hits || now < 0) CmiAbort("cxx_cpv: the (arg, now) condition callback");
    ++timed_hits;
}

void start_ring() {
    token_msg t{};
    t.lap = 0;
    t.hops = 1;
    t.last_pe = 0;
    CmiSetHandler(&t, token_handler_id);
    CmiSyncSend(1 % CmiNumPes(), sizeof t, &t);
}

// Runs before the ring starts on PE 0 (it starts it), and between two messages elsewhere:
// the scheduler takes the Csd queue whenever the network queue is empty.
void old_style_thread() {
    ++old_thread_runs;
    if (CmiMyPe() == 0) start_ring();
}

}  // namespace

// A type with a comma needs a typedef: CpvDeclare is a macro (as in Charm++).
typedef std::map<int, int> count_map;

CpvDeclare(std::vector<int>, laps_seen);
CpvStaticDeclare(std::string, name);
CpvDeclare(count_map, from_count);

namespace {

void check_finished() {
    if (!finished) {
        CmiError("cxx_cpv: PE %d exited before the exit broadcast arrived\n", CmiMyPe());
        std::_Exit(3);
    }
}

void token_handler(void* msg) {
    auto* t = static_cast<token_msg*>(msg);
    CpvAccess(laps_seen).push_back(t->lap);
    ++CpvAccess(from_count)[t->last_pe];
    if (CmiMyPe() == 0) {
        if (t->hops != (t->lap + 1) * CmiNumPes())
            CmiAbort("cxx_cpv: lap %d ended after %d hops, expected %d", t->lap, t->hops,
                     (t->lap + 1) * CmiNumPes());
        if (++t->lap == laps) {
            CmiFree(t);
            CmiPrintf("cxx_cpv: %d laps with non-POD Cpv variables on %d PEs ok\n", laps,
                      CmiNumPes());
            auto* e = static_cast<small_msg*>(CmiAlloc(sizeof(small_msg)));
            CmiSetHandler(e, exit_handler_id);
            CmiSyncBroadcastAllAndFree(sizeof(small_msg), e);
            return;
        }
    }
    ++t->hops;
    t->last_pe = CmiMyPe();
    CmiSyncSendAndFree((CmiMyPe() + 1) % CmiNumPes(), sizeof(token_msg), t);
}

void exit_handler(void* msg) {
    CmiFree(msg);
    const std::vector<int>& seen = CpvAccess(laps_seen);
    if (static_cast<int>(seen.size()) != laps)
        CmiAbort("cxx_cpv: PE %d recorded %zu laps, expected %d", CmiMyPe(), seen.size(), laps);
    for (int i = 0; i < laps; ++i)
        if (seen[i] != i) CmiAbort("cxx_cpv: PE %d: entry %d is lap %d", CmiMyPe(), i, seen[i]);
    const int prev = (CmiMyPe() + CmiNumPes() - 1) % CmiNumPes();
    if (CpvAccess(from_count).size() != 1 || CpvAccess(from_count)[prev] != laps)
        CmiAbort("cxx_cpv: PE %d expected %d tokens, all from PE %d", CmiMyPe(), laps, prev);
    if (timed_hits != 1 || old_thread_runs != 1)
        CmiAbort("cxx_cpv: PE %d: the older Ccd and Cth forms ran %d and %d times, expected 1",
                 CmiMyPe(), timed_hits, old_thread_runs);
    if (CpvAccess(name) != "pe" + std::to_string(CmiMyPe()))
        CmiAbort("cxx_cpv: PE %d: Cpv string is \"%s\"", CmiMyPe(), CpvAccess(name).c_str());
    finished = true;
    CsdExitScheduler();
}

void start(int, char**) {
    std::atexit(check_finished);
    CpvInitialize(std::vector<int>, laps_seen);
    CpvInitialize(std::string, name);
    CpvInitialize(count_map, from_count);
    CpvAccess(name) = "pe" + std::to_string(CmiMyPe());
    CpvAccess(laps_seen).reserve(laps);
    token_handler_id = CmiRegisterHandler(token_handler);
    exit_handler_id = CmiRegisterHandler(exit_handler);
    CcdCallOnCondition(CcdUSER + 3, timed_condition, &timed_hits);
    CcdRaiseCondition(CcdUSER + 3);
    CcdRaiseCondition(CcdUSER + 3);  // once: the callback is gone
    CthAwaken(CthCreate(old_style_thread, nullptr, 0));
}

}  // namespace

int main(int argc, char** argv) {
    ConverseInit(argc, argv, start, 0, 0);
    return 0;
}
