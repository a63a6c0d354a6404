// The Converse facade: every C entry point of converse.h, each a thin call into the PE's
// machine core (pe_core). Synchronous calls make progress with nested scheduler loops that
// never run user handlers (see DESIGN.md, "Runtime model").
#include <converse.h>

#include <sched.h>
#include <time.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <coverse/alloc/message.hpp>
#include <coverse/runtime/sync_wait.hpp>

#include "pe_core.hpp"

using coverse::detail::pe_core;
using own = pe_core::ownership;

namespace coverse::detail {
// The process's PE, owned here so that ConverseExit can end it before exit().
std::unique_ptr<pe_core>& core_slot() {
    static std::unique_ptr<pe_core> core;
    return core;
}
}  // namespace coverse::detail

namespace {

pe_core& core(const char* caller) {
    return pe_core::get(caller);
}

std::string vformat(const char* fmt, va_list ap) {
    va_list copy;
    va_copy(copy, ap);
    char small[512];
    const int n = std::vsnprintf(small, sizeof small, fmt, copy);
    va_end(copy);
    if (n < 0) return fmt;
    if (static_cast<std::size_t>(n) < sizeof small) return std::string(small, n);
    std::string out(static_cast<std::size_t>(n) + 1, '\0');
    std::vsnprintf(out.data(), out.size(), fmt, ap);
    out.resize(static_cast<std::size_t>(n));
    return out;
}

const std::chrono::steady_clock::time_point process_start = std::chrono::steady_clock::now();

}  // namespace

extern "C" {

// ---- start-up and exit --------------------------------------------------------------------

void ConverseInit(int argc, char** argv, CmiStartFn fn, int usched, int initret) {
    auto& slot = coverse::detail::core_slot();
    try {
        slot = std::make_unique<pe_core>(argc, argv);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "%s\n", e.what());
        std::fflush(nullptr);
        std::exit(1);
    }
    if (initret) return;  // this process continues as its PE; fn is for the others
    if (fn) fn(argc, argv);
    if (!usched) CsdScheduleForever();
    CoverseConverseExit(0);
}

void CoverseConverseExit(int exitcode) {
    auto& slot = coverse::detail::core_slot();
    std::fflush(stdout);  // a last printf line still goes through the launcher, in order
    if (slot) {
        try {
            slot->shutdown();
        } catch (const std::exception& e) {
            std::fprintf(stderr, "coverse: ConverseExit: %s\n", e.what());
            if (!exitcode) exitcode = 1;
        }
        slot.reset();
    }
    std::fflush(nullptr);
    std::exit(exitcode);
}

void CmiAbort(const char* format, ...) {
    va_list ap;
    va_start(ap, format);
    std::string text = vformat(format, ap);
    va_end(ap);
    while (!text.empty() && text.back() == '\n')
        text.pop_back();
    if (auto* c = pe_core::instance()) c->abort_job(text);
    std::fprintf(stderr, "coverse: aborted: %s\n", text.c_str());
    std::fflush(nullptr);
    std::_Exit(1);
}

void CoverseAssertFailed(const char* expr, const char* file, int line) {
    CmiAbort("assertion \"%s\" failed in %s line %d", expr, file, line);
}

// ---- PEs and nodes -------------------------------------------------------------------------

int CmiMyPe(void) {
    auto* c = pe_core::instance();
    return c ? static_cast<int>(c->pe()) : 0;
}
int CmiNumPes(void) {
    auto* c = pe_core::instance();
    return c ? static_cast<int>(c->num_pes()) : 1;
}
int CmiMyNode(void) {
    return CmiMyPe();
}
int CmiNumNodes(void) {
    return CmiNumPes();
}
int CmiMyRank(void) {
    return 0;
}
int CmiMyNodeSize(void) {
    return 1;
}
int CmiNodeSize(int) {
    return 1;
}
int CmiNodeOf(int pe) {
    return pe;
}
int CmiRankOf(int) {
    return 0;
}
int CmiNodeFirst(int node) {
    return node;
}
int CmiNumCores(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
    return 1;
}
// CmiNumPhysicalNodes and the rest of the host topology: physical_nodes.cpp.
void CmiInitCPUAffinity(char** argv) {
    // +setcpuaffinity was consumed by ConverseInit and applied there; a program calling
    // this again with the flag still present gets the same placement.
    if (!argv) return;
    for (int i = 0; argv[i]; ++i)
        if (std::strcmp(argv[i], "+setcpuaffinity") == 0) {
            // The n-th CPU this process may run on (not CPU pe % cores, which may be
            // outside a taskset or cgroup), as ConverseInit places it.
            cpu_set_t allowed;
            if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return;
            const int count = CPU_COUNT(&allowed);
            if (count <= 0) return;
            int want = CmiMyPe() % count;
            for (int c = 0; c < CPU_SETSIZE; ++c) {
                if (!CPU_ISSET(c, &allowed) || want-- > 0) continue;
                cpu_set_t one;
                CPU_ZERO(&one);
                CPU_SET(c, &one);
                sched_setaffinity(0, sizeof one, &one);
                break;
            }
        }
}
void CmiInitCPUTopology(char**) {}  // one host: the topology is the PE list
int CmiSpanTreeParent(int pe) {
    return pe_core::span_parent(pe);
}
int CmiNumSpanTreeChildren(int pe) {
    return core("CmiNumSpanTreeChildren").span_children(pe, nullptr);
}
void CmiSpanTreeChildren(int pe, int* children) {
    core("CmiSpanTreeChildren").span_children(pe, children);
}

// ---- handlers ---------------------------------------------------------------------------------

int CmiRegisterHandler(CmiHandler h) {
    return core("CmiRegisterHandler").register_handler(h, nullptr, nullptr);
}
int CmiRegisterHandlerEx(CmiHandlerEx h, void* user_ptr) {
    return core("CmiRegisterHandlerEx").register_handler(nullptr, h, user_ptr);
}
int CmiRegisterHandlerLocal(CmiHandler h) {
    return CmiRegisterHandler(h);
}
int CmiRegisterHandlerGlobal(CmiHandler h) {
    return CmiRegisterHandler(h);
}
void CmiNumberHandler(int n, CmiHandler h) {
    core("CmiNumberHandler").number_handler(n, h, nullptr, nullptr);
}
void CmiNumberHandlerEx(int n, CmiHandlerEx h, void* user_ptr) {
    core("CmiNumberHandlerEx").number_handler(n, nullptr, h, user_ptr);
}
CmiHandler CmiHandlerToFunction(int handler) {
    return core("CmiHandlerToFunction").handler_function(handler);
}
void CmiInitMsgHeader(void* msg, int size) {
    if (msg && size >= CmiMsgHeaderSizeBytes) std::memset(msg, 0, CmiMsgHeaderSizeBytes);
}

// ---- message memory ---------------------------------------------------------------------------

void* CmiAlloc(int size) {
    if (size < 0) CmiAbort("CmiAlloc(%d): negative size", size);
    void* m = coverse::alloc::msg_alloc(static_cast<std::size_t>(size));
    if (!m) CmiAbort("CmiAlloc(%d): out of memory", size);
    return m;
}
void CmiFree(void* msg) {
    coverse::alloc::msg_free(msg);
}
void CmiReference(void* msg) {
    coverse::alloc::msg_reference(msg);
}
int CmiSize(void* msg) {
    return static_cast<int>(coverse::alloc::msg_size(msg));
}
int CmiGetReference(void* msg) {
    return static_cast<int>(coverse::alloc::msg_reference_count(msg));
}

// ---- sends --------------------------------------------------------------------------------------

void CmiSyncSend(int dest_pe, int size, void* msg) {
    core("CmiSyncSend").send(dest_pe, size, msg, own::copy, "CmiSyncSend");
}
void CmiSyncSendAndFree(int dest_pe, int size, void* msg) {
    core("CmiSyncSendAndFree").send(dest_pe, size, msg, own::take, "CmiSyncSendAndFree");
}
CmiCommHandle CmiAsyncSend(int dest_pe, int size, void* msg) {
    return core("CmiAsyncSend").send(dest_pe, size, msg, own::borrow, "CmiAsyncSend");
}
int CmiAsyncMsgSent(CmiCommHandle handle) {
    return core("CmiAsyncMsgSent").handle_done(handle, "CmiAsyncMsgSent") ? 1 : 0;
}
void CmiReleaseCommHandle(CmiCommHandle handle) {
    core("CmiReleaseCommHandle").release_handle(handle, "CmiReleaseCommHandle");
}
int CmiAllAsyncMsgsSent(void) {
    auto& c = core("CmiAllAsyncMsgsSent");
    if (c.all_sends_done()) return 1;
    c.sched().run_once();
    return c.all_sends_done() ? 1 : 0;
}

namespace {
void* concatenate(int n, const int* sizes, char** pieces, const char* caller) {
    if (n < 0 || (n > 0 && (!sizes || !pieces))) CmiAbort("%s: invalid piece list", caller);
    std::size_t total = 0;
    for (int i = 0; i < n; ++i) {
        if (sizes[i] < 0) CmiAbort("%s: piece %d has negative size %d", caller, i, sizes[i]);
        total += static_cast<std::size_t>(sizes[i]);
    }
    auto* out = static_cast<char*>(CmiAlloc(static_cast<int>(total)));
    std::size_t at = 0;
    for (int i = 0; i < n; ++i) {
        std::memcpy(out + at, pieces[i], static_cast<std::size_t>(sizes[i]));
        at += static_cast<std::size_t>(sizes[i]);
    }
    return out;
}
}  // namespace

void CmiSyncVectorSend(int dest_pe, int n, int* sizes, char** pieces) {
    void* m = concatenate(n, sizes, pieces, "CmiSyncVectorSend");
    CmiSyncSendAndFree(dest_pe, CmiSize(m), m);
}
void CmiSyncVectorSendAndFree(int dest_pe, int n, int* sizes, char** pieces) {
    CmiSyncVectorSend(dest_pe, n, sizes, pieces);
    for (int i = 0; i < n; ++i)
        CmiFree(pieces[i]);
}
CmiCommHandle CmiAsyncVectorSend(int dest_pe, int n, int* sizes, char** pieces) {
    CmiSyncVectorSend(dest_pe, n, sizes, pieces);  // copied: the pieces are free at once
    return nullptr;
}
void CmiMultipleSend(unsigned int dest_pe, int n, int* sizes, char** msgs) {
    for (int i = 0; i < n; ++i)
        CmiSyncSend(static_cast<int>(dest_pe), sizes[i], msgs[i]);
}
void CmiInitMultipleSendRoutine(void) {}

void CmiSyncListSend(int npes, const int* pes, int size, void* msg) {
    core("CmiSyncListSend")
        .send_many(std::span<const int>(pes, static_cast<std::size_t>(std::max(npes, 0))), size,
                   msg, own::copy, "CmiSyncListSend");
}
void CmiSyncListSendAndFree(int npes, const int* pes, int size, void* msg) {
    core("CmiSyncListSendAndFree")
        .send_many(std::span<const int>(pes, static_cast<std::size_t>(std::max(npes, 0))), size,
                   msg, own::take, "CmiSyncListSendAndFree");
}
CmiCommHandle CmiAsyncListSend(int npes, const int* pes, int size, void* msg) {
    return core("CmiAsyncListSend")
        .send_many(std::span<const int>(pes, static_cast<std::size_t>(std::max(npes, 0))), size,
                   msg, own::borrow, "CmiAsyncListSend");
}

CmiGroup CmiEstablishGroup(int npes, int* pes) {
    return core("CmiEstablishGroup").establish_group(npes, pes);
}
void CmiLookupGroup(CmiGroup grp, int* npes, int** pes) {
    const auto& g = core("CmiLookupGroup").group(grp, "CmiLookupGroup");
    if (npes) *npes = static_cast<int>(g.size());
    if (pes) *pes = const_cast<int*>(g.data());
}
void CmiSyncMulticast(CmiGroup grp, int size, void* msg) {
    auto& c = core("CmiSyncMulticast");
    c.send_many(c.group(grp, "CmiSyncMulticast"), size, msg, own::copy, "CmiSyncMulticast");
}
void CmiSyncMulticastAndFree(CmiGroup grp, int size, void* msg) {
    auto& c = core("CmiSyncMulticastAndFree");
    c.send_many(c.group(grp, "CmiSyncMulticastAndFree"), size, msg, own::take,
                "CmiSyncMulticastAndFree");
}
CmiCommHandle CmiAsyncMulticast(CmiGroup grp, int size, void* msg) {
    auto& c = core("CmiAsyncMulticast");
    return c.send_many(c.group(grp, "CmiAsyncMulticast"), size, msg, own::borrow,
                       "CmiAsyncMulticast");
}

// ---- broadcasts -------------------------------------------------------------------------------

void CmiSyncBroadcast(int size, void* msg) {
    core("CmiSyncBroadcast").broadcast(size, msg, own::copy, false, "CmiSyncBroadcast");
}
void CmiSyncBroadcastAndFree(int size, void* msg) {
    core("CmiSyncBroadcastAndFree")
        .broadcast(size, msg, own::take, false, "CmiSyncBroadcastAndFree");
}
void CmiSyncBroadcastAll(int size, void* msg) {
    core("CmiSyncBroadcastAll").broadcast(size, msg, own::copy, true, "CmiSyncBroadcastAll");
}
void CmiSyncBroadcastAllAndFree(int size, void* msg) {
    core("CmiSyncBroadcastAllAndFree")
        .broadcast(size, msg, own::take, true, "CmiSyncBroadcastAllAndFree");
}
CmiCommHandle CmiAsyncBroadcast(int size, void* msg) {
    return core("CmiAsyncBroadcast").broadcast(size, msg, own::borrow, false, "CmiAsyncBroadcast");
}
CmiCommHandle CmiAsyncBroadcastAll(int size, void* msg) {
    return core("CmiAsyncBroadcastAll")
        .broadcast(size, msg, own::borrow, true, "CmiAsyncBroadcastAll");
}

// ---- barriers and reductions ------------------------------------------------------------------

int CmiBarrier(void) {
    coverse::sync_wait(core("CmiBarrier").barrier(false));
    return 0;
}
int CmiBarrierZero(void) {
    coverse::sync_wait(core("CmiBarrierZero").barrier(true));
    return 0;
}
void CmiReduce(void* msg, int size, CmiReduceMergeFn merge) {
    core("CmiReduce").reduce(msg, size, merge);
}
void CmiReduceStruct(void* data, CmiReducePupFn pup, CmiReduceMergeFn merge, CmiHandler dest,
                     CmiReduceDeleteFn del) {
    core("CmiReduceStruct").reduce_struct(data, pup, merge, dest, del);
}

// ---- PUP (sizing and packing) -------------------------------------------------------------------

namespace {
coverse::detail::pup_cursor& cursor(pup_er p) {
    return *reinterpret_cast<coverse::detail::pup_cursor*>(p);
}
}  // namespace
int pup_isPacking(const pup_er p) {
    return cursor(p).mode == 1;
}
int pup_isUnpacking(const pup_er) {
    return 0;
}
int pup_isSizing(const pup_er p) {
    return cursor(p).mode == 0;
}
void pup_bytes(pup_er p, void* ptr, size_t nbytes) {
    auto& c = cursor(p);
    if (c.mode == 1) std::memcpy(c.out + c.size, ptr, nbytes);
    c.size += nbytes;
}
void pup_char(pup_er p, char* v) {
    pup_bytes(p, v, sizeof *v);
}
void pup_chars(pup_er p, char* v, size_t n) {
    pup_bytes(p, v, n * sizeof *v);
}
void pup_int(pup_er p, int* v) {
    pup_bytes(p, v, sizeof *v);
}
void pup_ints(pup_er p, int* v, size_t n) {
    pup_bytes(p, v, n * sizeof *v);
}
void pup_long(pup_er p, long* v) {
    pup_bytes(p, v, sizeof *v);
}
void pup_longs(pup_er p, long* v, size_t n) {
    pup_bytes(p, v, n * sizeof *v);
}
void pup_float(pup_er p, float* v) {
    pup_bytes(p, v, sizeof *v);
}
void pup_floats(pup_er p, float* v, size_t n) {
    pup_bytes(p, v, n * sizeof *v);
}
void pup_double(pup_er p, double* v) {
    pup_bytes(p, v, sizeof *v);
}
void pup_doubles(pup_er p, double* v, size_t n) {
    pup_bytes(p, v, n * sizeof *v);
}

// ---- the scheduler ------------------------------------------------------------------------------

void CsdScheduler(int n) {
    if (n < 0)
        CsdScheduleForever();
    else if (n == 0)
        CsdSchedulePoll();
    else
        CsdScheduleCount(n);
}
void CsdScheduleForever(void) {
    core("CsdScheduleForever").schedule(-1, false);
}
int CsdScheduleCount(int n) {
    const int done = core("CsdScheduleCount").schedule(n, false);
    return n - done;
}
void CsdSchedulePoll(void) {
    core("CsdSchedulePoll").schedule(-1, true);
}
void CsdExitScheduler(void) {
    core("CsdExitScheduler").exit_scheduler();
}
void CsdEnqueueGeneral(void* msg, int strategy, int priobits, const void* prioptr) {
    if (!core("CsdEnqueueGeneral").enqueue(msg, strategy, priobits, prioptr))
        CmiAbort(
            "CsdEnqueueGeneral: strategy %d with %d priority bits is not valid (use a "
            "CQS_QUEUEING_* value; bit-vector priorities need a non-null prioptr)",
            strategy, priobits);
}
int CsdEmpty(void) {
    return core("CsdEmpty").queue_length() == 0;
}
int CsdLength(void) {
    return static_cast<int>(core("CsdLength").queue_length());
}
int CmiDeliverMsgs(int max_msgs) {
    return core("CmiDeliverMsgs").deliver_network(max_msgs);
}
void CmiDeliverSpecificMsg(int handler) {
    core("CmiDeliverSpecificMsg").deliver_specific(handler);
}
void* CmiGetNonLocal(void) {
    return core("CmiGetNonLocal").get_non_local();
}
void CmiHandleMessage(void* msg) {
    core("CmiHandleMessage").handle_message(msg);
}

// ---- conditions --------------------------------------------------------------------------------

int CcdCallOnCondition(int condnum, CcdCondFn fn, void* arg) {
    return core("CcdCallOnCondition").call_on_condition(condnum, fn, nullptr, arg, false);
}
int CcdCallOnConditionKeep(int condnum, CcdCondFn fn, void* arg) {
    return core("CcdCallOnConditionKeep").call_on_condition(condnum, fn, nullptr, arg, true);
}
namespace {
void check_on_pe(int pe, const char* caller) {
    if (pe != CcdIGNOREPE && pe != CmiMyPe())
        CmiAbort(
            "%s: PE %d is not this PE (%d); one process is one PE here, so register on that "
            "PE itself (or pass CcdIGNOREPE)",
            caller, pe, CmiMyPe());
}
}  // namespace
int CcdCallOnConditionOnPE(int condnum, CcdCondFn fn, void* arg, int pe) {
    check_on_pe(pe, "CcdCallOnConditionOnPE");
    return CcdCallOnCondition(condnum, fn, arg);
}
int CcdCallOnConditionKeepOnPE(int condnum, CcdCondFn fn, void* arg, int pe) {
    check_on_pe(pe, "CcdCallOnConditionKeepOnPE");
    return CcdCallOnConditionKeep(condnum, fn, arg);
}
int CoverseCcdCallOnConditionTimed(int condnum, CcdVoidFn fn, void* arg, int keep) {
    return core("CcdCallOnCondition").call_on_condition(condnum, nullptr, fn, arg, keep != 0);
}
void CcdCancelCallOnCondition(int condnum, int idx) {
    core("CcdCancelCallOnCondition").cancel_condition(condnum, idx, false);
}
void CcdCancelCallOnConditionKeep(int condnum, int idx) {
    core("CcdCancelCallOnConditionKeep").cancel_condition(condnum, idx, true);
}
void CcdRaiseCondition(int condnum) {
    core("CcdRaiseCondition").raise_condition(condnum);
}
void CcdCallFnAfter(CcdVoidFn fn, void* arg, double msecs) {
    core("CcdCallFnAfter").call_after(fn, arg, msecs);
}
void CcdCallFnAfterOnPE(CcdVoidFn fn, void* arg, double msecs, int pe) {
    check_on_pe(pe, "CcdCallFnAfterOnPE");
    CcdCallFnAfter(fn, arg, msecs);
}
void CcdCallBacks(void) {
    CsdSchedulePoll();  // due timers and periodic conditions run from the scheduler loop
}
void CmiNotifyIdle(void) {
    core("CmiNotifyIdle").sched().run_once();  // progress only: no handler runs
}
int CoverseCheckRank(int rank) {
    if (rank != 0)
        CmiAbort("CpvAccessOther: rank %d does not exist; a coverse process has one rank (0)",
                 rank);
    return 0;
}

// ---- timers -------------------------------------------------------------------------------------

double CmiWallTimer(void) {
    if (auto* c = pe_core::instance()) return c->wall_time();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - process_start).count();
}
double CmiCpuTimer(void) {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}
double CmiTimer(void) {
    return CmiWallTimer();
}
double CmiStartTimer(void) {
    return 0.0;
}

// ---- output and input ---------------------------------------------------------------------------

int CmiPrintf(const char* format, ...) {
    va_list ap;
    va_start(ap, format);
    const std::string text = vformat(format, ap);
    va_end(ap);
    std::fflush(stdout);  // the program's own printf lines before this one
    if (auto* c = pe_core::instance())
        c->print(text, false);
    else
        std::fputs(text.c_str(), stdout);
    return static_cast<int>(text.size());
}
int CmiError(const char* format, ...) {
    va_list ap;
    va_start(ap, format);
    const std::string text = vformat(format, ap);
    va_end(ap);
    std::fflush(stdout);
    if (auto* c = pe_core::instance())
        c->print(text, true);
    else
        std::fputs(text.c_str(), stderr);
    return static_cast<int>(text.size());
}
int CmiScanf(const char* format, ...) {
    std::optional<std::string> line = core("CmiScanf").read_line();
    if (!line) return EOF;
    va_list ap;
    va_start(ap, format);
    const int n = std::vsscanf(line->c_str(), format, ap);
    va_end(ap);
    return n;
}

// ---- command-line arguments ---------------------------------------------------------------------

int CmiGetArgc(char** argv) {
    int n = 0;
    while (argv && argv[n])
        ++n;
    return n;
}
char** CmiCopyArgs(char** argv) {
    const int n = CmiGetArgc(argv);
    auto** out = static_cast<char**>(std::malloc(sizeof(char*) * static_cast<std::size_t>(n + 1)));
    if (!out) CmiAbort("CmiCopyArgs: out of memory");
    for (int i = 0; i <= n; ++i)
        out[i] = argv[i];
    return out;
}
void CmiDeleteArgs(char** argv, int k) {
    if (!argv || k <= 0) return;  // nothing to delete (k == 0 used to read argv[-1])
    int i = 0;
    while (argv[i + k - 1]) {
        argv[i] = argv[i + k];
        ++i;
    }
}

namespace {
// Finds `arg` with a value: "-n 5", "-n=5" or "-n5". Removes what it used.
bool take_value(char** argv, const char* arg, const char** value) {
    const std::size_t len = std::strlen(arg);
    for (int i = 0; argv && argv[i]; ++i) {
        if (std::strncmp(argv[i], arg, len) != 0) continue;
        const char* rest = argv[i] + len;
        if (*rest == '\0') {
            if (!argv[i + 1]) {
                std::fprintf(stderr, "coverse: argument %s needs a value\n", arg);
                return false;
            }
            *value = argv[i + 1];
            CmiDeleteArgs(argv + i, 2);
            return true;
        }
        if (*rest == '=') {
            *value = rest + 1;
            CmiDeleteArgs(argv + i, 1);
            return true;
        }
        if ((*rest >= '0' && *rest <= '9') || *rest == '-' || *rest == '+') {
            *value = rest;
            CmiDeleteArgs(argv + i, 1);
            return true;
        }
    }
    return false;
}
// take_value, then a whole number (decimal, 0x hex or 0 octal); anything else aborts
// naming the argument, as a typo in a job script should not run with a default.
bool take_integer(char** argv, const char* arg, long long* out) {
    const char* v = nullptr;
    if (!take_value(argv, arg, &v)) return false;
    char* end = nullptr;
    errno = 0;
    const long long x = std::strtoll(v, &end, 0);
    if (errno || end == v || *end) CmiAbort("argument %s expects an integer, got \"%s\"", arg, v);
    *out = x;
    return true;
}
}  // namespace

int CmiGetArgIntDesc(char** argv, const char* arg, int* out, const char*) {
    long long v = 0;
    if (!take_integer(argv, arg, &v)) return 0;
    *out = static_cast<int>(v);
    return 1;
}
int CmiGetArgInt(char** argv, const char* arg, int* out) {
    return CmiGetArgIntDesc(argv, arg, out, "");
}
int CmiGetArgLongDesc(char** argv, const char* arg, CmiInt8* out, const char*) {
    long long v = 0;
    if (!take_integer(argv, arg, &v)) return 0;
    *out = v;
    return 1;
}
int CmiGetArgLong(char** argv, const char* arg, CmiInt8* out) {
    return CmiGetArgLongDesc(argv, arg, out, "");
}
int CmiGetArgDoubleDesc(char** argv, const char* arg, double* out, const char*) {
    const char* v = nullptr;
    if (!take_value(argv, arg, &v)) return 0;
    char* end = nullptr;
    const double x = std::strtod(v, &end);
    if (end == v || *end) CmiAbort("argument %s expects a number, got \"%s\"", arg, v);
    *out = x;
    return 1;
}
int CmiGetArgDouble(char** argv, const char* arg, double* out) {
    return CmiGetArgDoubleDesc(argv, arg, out, "");
}
int CmiGetArgStringDesc(char** argv, const char* arg, char** out, const char*) {
    const std::size_t len = std::strlen(arg);
    for (int i = 0; argv && argv[i]; ++i) {
        if (std::strncmp(argv[i], arg, len) != 0) continue;
        if (argv[i][len] == '\0' && argv[i + 1]) {
            *out = argv[i + 1];
            CmiDeleteArgs(argv + i, 2);
            return 1;
        }
        if (argv[i][len] == '=') {
            *out = argv[i] + len + 1;
            CmiDeleteArgs(argv + i, 1);
            return 1;
        }
    }
    return 0;
}
int CmiGetArgString(char** argv, const char* arg, char** out) {
    return CmiGetArgStringDesc(argv, arg, out, "");
}
int CmiGetArgFlagDesc(char** argv, const char* arg, const char*) {
    for (int i = 0; argv && argv[i]; ++i)
        if (std::strcmp(argv[i], arg) == 0) {
            CmiDeleteArgs(argv + i, 1);
            return 1;
        }
    return 0;
}
int CmiGetArgFlag(char** argv, const char* arg) {
    return CmiGetArgFlagDesc(argv, arg, "");
}
void CmiArgGroup(const char*, const char*) {}

// ---- random numbers -----------------------------------------------------------------------------

namespace {
std::mt19937& rng() {
    static std::mt19937 gen(static_cast<unsigned>(0x5eed + 7919 * CmiMyPe()));
    return gen;
}
}  // namespace
int CrnRand(void) {
    return static_cast<int>(rng()() & 0x7FFF'FFFFu);
}
double CrnDrand(void) {
    return static_cast<double>(rng()()) / 4294967296.0;
}
void CrnSrand(unsigned int seed) {
    rng().seed(seed);
}

}  // extern "C"
