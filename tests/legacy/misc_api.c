/* misc_api.c: the smaller corners of the machine interface, in phases separated by
 * CmiBarrier / CmiBarrierZero:
 *  1. argv: the runtime flags (+pN, ++local) are gone before start() runs; CmiGetArg*
 *     (plain and Desc forms) find and remove their arguments, CmiGetArgc shrinks; Cpv
 *     variables (an int, a struct); node/rank/topology and spanning-tree queries; timers;
 *     CrnSrand/CrnRand determinism (PE 0 compares every PE's sequence); conditions raised
 *     by hand (CcdCallOnCondition fires once, ...Keep until cancelled).
 *  2. CmiDeliverSpecificMsg (to self and from the previous PE, the latter to a handler
 *     registered with CmiRegisterHandlerEx, which must get its user pointer).
 *  3. CmiAsyncSend: one 64 KiB message polled with CmiAsyncMsgSent + CsdSchedulePoll, a small
 *     one whose handle may be 0, then eight 64 KiB ones waited for with CmiAllAsyncMsgsSent.
 *  4. In the scheduler: CcdCallFnAfter callbacks fire no earlier than asked, in due order,
 *     and CcdPROCESSOR_BEGIN_IDLE fires. Then each PE reports to PE 0, which ends the job.
 * A watchdog (alarm, 20 s) turns a hang into a message naming what never happened.
 * Expected arguments (see CMakeLists.txt):
 *   +p<N> -iters 7 ++local -name=hello -verbose -ratio 2.5 -big 123456789012 leftover */
#define _POSIX_C_SOURCE 200809L /* alarm() and write() for the watchdog */
#include <converse.h>

#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LARGE_BYTES (64 * 1024)
#define MULTI 8
#define RAND_COUNT 16
#define WATCHDOG_SECONDS 20 /* a hang becomes a message naming what never happened */

typedef struct {
    int x;
    double y;
    char tag[8];
} point;

CpvDeclare(int, counter);
CpvDeclare(point, where);
CpvStaticDeclare(int, hidden);

typedef struct {
    char header[CmiMsgHeaderSizeBytes];
    int kind;
    int src;
    int index;
    int len; /* payload bytes after this struct */
} data_msg;

typedef struct {
    char header[CmiMsgHeaderSizeBytes];
    int pe;
    unsigned int rand_sum;
    int counter;
} done_msg;

typedef struct {
    char header[CmiMsgHeaderSizeBytes];
} small_msg;

enum kind { BIG, SMALL, MULTI_BIG };

static int spec_a_id, spec_b_id, ring_ex_id, data_handler_id, done_handler_id, exit_handler_id;
static int spec_a_ran, spec_b_ran, ring_ex_ran;
static int ex_cookie;
static int got_big, got_small, got_multi;
static int timer_fired, order_log[2], order_len, idle_fired;
static double timer_registered_at;
static int timer_arg, idle_arg;
static unsigned int rand_sum;
static int done_sent, done_pes;
static unsigned int pe0_rand_sum;
static int finished;

static void check_finished(void) {
    if (!finished) {
        CmiError("misc_api: PE %d exited before the exit broadcast arrived\n", CmiMyPe());
        _Exit(3);
    }
}

static void expect(int ok, const char* what) {
    if (!ok) CmiAbort("misc_api: PE %d: expected %s", CmiMyPe(), what);
}

/* ---- phase 1 ------------------------------------------------------------------------- */

static void check_args(int argc, char** argv) {
    int iters = -1, missing = 99;
    char* name = NULL;
    char* none = NULL;
    double ratio = 0;
    CmiInt8 big = 0;
    char** copy;
    if (argc != CmiGetArgc(argv))
        CmiAbort("misc_api: start() got argc %d but CmiGetArgc(argv) is %d", argc,
                 CmiGetArgc(argv));
    for (int i = 0; i < argc; ++i)
        if (argv[i][0] == '+')
            CmiAbort(
                "misc_api: runtime flag \"%s\" (argv[%d]) reached start(); ConverseInit must "
                "remove +/++ flags",
                argv[i], i);
    if (argc != 10)
        CmiAbort(
            "misc_api: expected 10 arguments after the runtime flags were removed "
            "(program + 9), got %d (run with +p<N> -iters 7 ++local -name=hello -verbose "
            "-ratio 2.5 -big 123456789012 leftover)",
            argc);
    copy = CmiCopyArgs(argv);
    expect(CmiGetArgc(copy) == argc && copy[argc] == NULL, "CmiCopyArgs to copy every argument");
    free(copy);

    expect(CmiGetArgIntDesc(argv, "-iters", &iters, "iterations") == 1 && iters == 7,
           "CmiGetArgIntDesc(-iters) to give 7");
    expect(CmiGetArgc(argv) == 8, "CmiGetArgc to drop to 8 after -iters 7");
    expect(CmiGetArgInt(argv, "-missing", &missing) == 0 && missing == 99,
           "CmiGetArgInt of an absent argument to return 0 and leave the value alone");
    expect(CmiGetArgStringDesc(argv, "-name", &name, "a name") == 1 && name &&
               strcmp(name, "hello") == 0,
           "CmiGetArgStringDesc(-name) to give \"hello\" from -name=hello");
    expect(CmiGetArgc(argv) == 7, "CmiGetArgc to drop to 7 after -name=hello");
    expect(CmiGetArgString(argv, "-nothing", &none) == 0 && none == NULL,
           "CmiGetArgString of an absent argument to return 0");
    expect(CmiGetArgFlagDesc(argv, "-verbose", "talk more") == 1, "CmiGetArgFlagDesc(-verbose)");
    expect(CmiGetArgFlag(argv, "-verbose") == 0, "-verbose to be gone after it was read");
    expect(CmiGetArgc(argv) == 6, "CmiGetArgc to drop to 6 after -verbose");
    expect(CmiGetArgDouble(argv, "-ratio", &ratio) == 1 && ratio == 2.5,
           "CmiGetArgDouble(-ratio) to give 2.5");
    expect(CmiGetArgLongDesc(argv, "-big", &big, "a big one") == 1 && big == 123456789012LL,
           "CmiGetArgLongDesc(-big) to give 123456789012");
    expect(CmiGetArgc(argv) == 2 && strcmp(argv[1], "leftover") == 0 && argv[2] == NULL,
           "only \"leftover\" to remain in argv");
}

static void check_cpv(void) {
    CpvInitialize(int, counter);
    CpvInitialize(point, where);
    CpvInitialize(int, hidden);
    expect(CpvInitialized(counter) != 0, "CpvInitialized(counter)");
    CpvAccess(counter) = CmiMyPe() * 10;
    CpvAccess(where).x = CmiMyPe();
    CpvAccess(where).y = 0.5 * CmiMyPe();
    strcpy(CpvAccess(where).tag, "pt");
    CpvAccess(hidden) = 42;
    CpvAccess(counter) += 1;
    expect(CpvAccess(counter) == CmiMyPe() * 10 + 1, "CpvAccess(counter) to keep its value");
    expect(CpvAccess(where).x == CmiMyPe() && CpvAccess(where).y == 0.5 * CmiMyPe() &&
               strcmp(CpvAccess(where).tag, "pt") == 0,
           "CpvAccess(where) to keep the struct's fields");
    expect(CpvAccess(hidden) == 42, "CpvStaticDeclare'd variable to keep its value");
}

static void check_topology(void) {
    int nodes_total = 0;
    int children[16];
    expect(CmiNumPes() >= 1 && CmiMyPe() >= 0 && CmiMyPe() < CmiNumPes(),
           "0 <= CmiMyPe() < CmiNumPes()");
    expect(CmiMyNode() >= 0 && CmiMyNode() < CmiNumNodes(), "0 <= CmiMyNode() < CmiNumNodes()");
    expect(CmiNodeOf(CmiMyPe()) == CmiMyNode(), "CmiNodeOf(CmiMyPe()) == CmiMyNode()");
    expect(CmiRankOf(CmiMyPe()) == CmiMyRank(), "CmiRankOf(CmiMyPe()) == CmiMyRank()");
    expect(CmiNodeFirst(CmiMyNode()) + CmiMyRank() == CmiMyPe(),
           "CmiNodeFirst(CmiMyNode()) + CmiMyRank() == CmiMyPe()");
    expect(CmiMyNodeSize() >= 1 && CmiMyRank() < CmiMyNodeSize(),
           "0 <= CmiMyRank() < CmiMyNodeSize()");
    for (int node = 0; node < CmiNumNodes(); ++node)
        nodes_total += CmiNodeSize(node);
    expect(nodes_total == CmiNumPes(), "the node sizes to add up to CmiNumPes()");
    for (int pe = 0; pe < CmiNumPes(); ++pe)
        expect(CmiNodeFirst(CmiNodeOf(pe)) + CmiRankOf(pe) == pe,
               "CmiNodeFirst(CmiNodeOf(pe)) + CmiRankOf(pe) == pe for every PE");
    expect(CmiNumCores() > 0, "CmiNumCores() > 0");
    expect(CmiSpanTreeParent(0) < 0, "PE 0 to be the root of the spanning tree");
    for (int pe = 0; pe < CmiNumPes(); ++pe) {
        const int n = CmiNumSpanTreeChildren(pe);
        expect(n >= 0 && n <= 16, "a sane number of spanning-tree children");
        CmiSpanTreeChildren(pe, children);
        for (int i = 0; i < n; ++i)
            expect(children[i] > 0 && children[i] < CmiNumPes() &&
                       CmiSpanTreeParent(children[i]) == pe,
                   "each spanning-tree child to have its parent as parent");
    }
}

static void check_timers(void) {
    double last = CmiWallTimer(), c0, c1, t0;
    volatile double sink = 0;
    expect(last >= 0, "CmiWallTimer() >= 0");
    for (int i = 0; i < 10000; ++i) {
        const double now = CmiWallTimer();
        if (now < last) CmiAbort("misc_api: CmiWallTimer went back from %.9f to %.9f", last, now);
        last = now;
    }
    c0 = CmiCpuTimer();
    t0 = CmiWallTimer();
    while (CmiWallTimer() - t0 < 0.02)
        sink += 1.0;
    c1 = CmiCpuTimer();
    if (!(c0 >= 0 && c1 > c0))
        CmiAbort("misc_api: CmiCpuTimer did not advance over 20 ms of busy work (%.9f -> %.9f)", c0,
                 c1);
    expect(CmiTimer() >= t0, "CmiTimer() to be at least an earlier CmiWallTimer()");
}

static unsigned int rand_sequence(void) {
    unsigned int sum = 0;
    int first[RAND_COUNT];
    CrnSrand(12345);
    for (int i = 0; i < RAND_COUNT; ++i) {
        first[i] = CrnRand();
        expect(first[i] >= 0, "CrnRand() >= 0");
    }
    CrnSrand(12345);
    for (int i = 0; i < RAND_COUNT; ++i) {
        const int again = CrnRand();
        if (again != first[i])
            CmiAbort("misc_api: CrnRand after CrnSrand(12345) again gave %d at %d, first time %d",
                     again, i, first[i]);
        sum = sum * 31u + (unsigned int)again;
    }
    for (int i = 0; i < 100; ++i) {
        const double d = CrnDrand();
        expect(d >= 0 && d < 1, "0 <= CrnDrand() < 1");
    }
    return sum;
}

static int cond_once_hits, cond_keep_hits;
static void cond_once(void* arg) { /* Charm++ 8's CcdCondFn */
    expect(arg == &cond_once_hits, "the condition callback's argument");
    ++cond_once_hits;
}
static void cond_keep(void* arg) { /* Charm++ 8's CcdCondFn */
    expect(arg == &cond_keep_hits, "the kept condition callback's argument");
    ++cond_keep_hits;
}

static void check_conditions(void) {
    int keep_id;
    CcdCallOnCondition(CcdUSER, cond_once, &cond_once_hits);
    keep_id = CcdCallOnConditionKeep(CcdUSER + 1, cond_keep, &cond_keep_hits);
    CcdRaiseCondition(CcdUSER);
    CcdRaiseCondition(CcdUSER);
    CcdRaiseCondition(CcdUSER + 1);
    CcdRaiseCondition(CcdUSER + 1);
    CcdCancelCallOnConditionKeep(CcdUSER + 1, keep_id);
    CcdRaiseCondition(CcdUSER + 1);
    if (cond_once_hits != 1 || cond_keep_hits != 2)
        CmiAbort(
            "misc_api: a one-shot condition callback ran %d times (expected 1), a kept one "
            "%d times (expected 2: it was cancelled before the third raise)",
            cond_once_hits, cond_keep_hits);
}

/* ---- phase 2: CmiDeliverSpecificMsg ------------------------------------------------------ */

static void spec_a(void* msg) {
    CmiFree(msg);
    ++spec_a_ran;
}
static void spec_b(void* msg) {
    CmiFree(msg);
    expect(spec_a_ran == 0, "CmiDeliverSpecificMsg(B) to leave the earlier message for A queued");
    ++spec_b_ran;
}
static void ring_ex(void* msg, void* user) {
    data_msg* m = (data_msg*)msg;
    expect(user == &ex_cookie, "CmiRegisterHandlerEx's user pointer in the handler");
    expect(m->src == (CmiMyPe() + CmiNumPes() - 1) % CmiNumPes(),
           "the Ex handler's message to come from the previous PE");
    CmiFree(msg);
    ++ring_ex_ran;
}

static void send_small(int dest, int handler, int kind, int index) {
    data_msg m;
    m.kind = kind;
    m.src = CmiMyPe();
    m.index = index;
    m.len = 0;
    CmiSetHandler(&m, handler);
    CmiSyncSend(dest, sizeof m, &m);
}

static void check_deliver_specific(void) {
    send_small(CmiMyPe(), spec_a_id, SMALL, 0);
    send_small(CmiMyPe(), spec_b_id, SMALL, 0);
    send_small((CmiMyPe() + 1) % CmiNumPes(), ring_ex_id, SMALL, 0);
    CmiDeliverSpecificMsg(spec_b_id);
    expect(spec_b_ran == 1 && spec_a_ran == 0, "CmiDeliverSpecificMsg(B) to run B only");
    CmiDeliverSpecificMsg(ring_ex_id); /* waits for the previous PE's message */
    expect(ring_ex_ran == 1, "CmiDeliverSpecificMsg(Ex handler) to run it once");
    CmiDeliverSpecificMsg(spec_a_id);
    expect(spec_a_ran == 1, "CmiDeliverSpecificMsg(A) to run A");
}

/* ---- phase 3: async sends ------------------------------------------------------------------ */

static unsigned char pattern(int kind, int index, int i) {
    return (unsigned char)(kind * 53 + index * 7 + i * 5);
}

static data_msg* make_data(void* buffer, int kind, int index, int len) {
    data_msg* m = (data_msg*)buffer;
    unsigned char* data = (unsigned char*)(m + 1);
    m->kind = kind;
    m->src = CmiMyPe();
    m->index = index;
    m->len = len;
    for (int i = 0; i < len; ++i)
        data[i] = pattern(kind, index, i);
    CmiSetHandler(m, data_handler_id);
    return m;
}

static void check_done(void);

static void data_handler(void* msg) {
    data_msg* m = (data_msg*)msg;
    const unsigned char* data = (const unsigned char*)(m + 1);
    expect(m->src == (CmiMyPe() + CmiNumPes() - 1) % CmiNumPes(),
           "async messages to come from the previous PE");
    for (int i = 0; i < m->len; ++i)
        if (data[i] != pattern(m->kind, m->index, i))
            CmiAbort(
                "misc_api: PE %d, async message kind %d #%d: byte %d is 0x%02x, expected "
                "0x%02x",
                CmiMyPe(), m->kind, m->index, i, data[i], pattern(m->kind, m->index, i));
    if (m->kind == BIG) ++got_big;
    if (m->kind == SMALL) ++got_small;
    if (m->kind == MULTI_BIG) ++got_multi;
    CmiFree(m);
    check_done();
}

static void check_async(void) {
    const int next = (CmiMyPe() + 1) % CmiNumPes();
    const int size = (int)sizeof(data_msg) + LARGE_BYTES;
    char* large = (char*)malloc((size_t)size);
    char* multi[MULTI];
    CmiCommHandle h, hs[MULTI];
    struct {
        data_msg m;
        char data[64];
    } small;

    h = CmiAsyncSend(next, size, make_data(large, BIG, 0, LARGE_BYTES));
    while (!CmiAsyncMsgSent(h))
        CsdSchedulePoll();
    CmiReleaseCommHandle(h);
    memset(large, 0xEE, (size_t)size); /* reusable now */
    free(large);

    h = CmiAsyncSend(next, (int)sizeof small, make_data(&small, SMALL, 0, 64));
    if (h) { /* 0 is legal: the buffer is reusable at once */
        while (!CmiAsyncMsgSent(h))
            CsdSchedulePoll();
        CmiReleaseCommHandle(h);
    }
    memset(&small, 0xEE, sizeof small);

    for (int i = 0; i < MULTI; ++i) {
        multi[i] = (char*)malloc((size_t)size);
        hs[i] = CmiAsyncSend(next, size, make_data(multi[i], MULTI_BIG, i, LARGE_BYTES));
    }
    while (!CmiAllAsyncMsgsSent())
        CsdSchedulePoll();
    for (int i = 0; i < MULTI; ++i) {
        if (hs[i]) {
            expect(CmiAsyncMsgSent(hs[i]) != 0,
                   "every handle to be done once CmiAllAsyncMsgsSent() is true");
            CmiReleaseCommHandle(hs[i]);
        }
        memset(multi[i], 0xEE, (size_t)size);
        free(multi[i]);
    }
}

/* ---- phase 4: timed callbacks and idle -------------------------------------------------- */

static void timer_cb(void* arg, double now) {
    const double waited = CmiWallTimer() - timer_registered_at;
    expect(arg == &timer_arg, "CcdCallFnAfter's argument in the callback");
    if (waited < 0.050 || now < timer_registered_at + 0.050 - 1e-6)
        CmiAbort(
            "misc_api: CcdCallFnAfter(50 ms) fired after %.6f s (its time argument %.6f s "
            "after registration)",
            waited, now - timer_registered_at);
    ++timer_fired;
    check_done();
}

static void order_cb(void* arg, double now) {
    (void)now;
    if (order_len < 2) order_log[order_len] = *(int*)arg;
    ++order_len;
    check_done();
}

static void idle_cb(void* arg) { /* Charm++ 8's CcdCondFn */
    expect(arg == &idle_arg, "the idle callback's argument");
    ++idle_fired;
    check_done();
}

static void check_done(void) {
    done_msg d;
    if (done_sent || !got_big || !got_small || got_multi < MULTI || !timer_fired || order_len < 2 ||
        !idle_fired)
        return;
    if (got_big != 1 || got_small != 1 || got_multi != MULTI || timer_fired != 1 ||
        order_len != 2 || idle_fired != 1)
        CmiAbort(
            "misc_api: PE %d: events ran too often: big %d, small %d, multi %d/%d, timer %d, "
            "ordered timers %d, idle %d (each expected once)",
            CmiMyPe(), got_big, got_small, got_multi, MULTI, timer_fired, order_len, idle_fired);
    if (order_log[0] != 1 || order_log[1] != 2)
        CmiAbort("misc_api: the 10 ms timer should fire before the 30 ms one; order was %d, %d",
                 order_log[0], order_log[1]);
    done_sent = 1;
    d.pe = CmiMyPe();
    d.rand_sum = rand_sum;
    d.counter = CpvAccess(counter);
    CmiSetHandler(&d, done_handler_id);
    CmiSyncSend(0, sizeof d, &d);
}

static void done_handler(void* msg) {
    done_msg* d = (done_msg*)msg;
    if (d->rand_sum != pe0_rand_sum)
        CmiAbort("misc_api: PE %d's CrnRand sequence after CrnSrand(12345) differs from PE 0's",
                 d->pe);
    if (d->counter != d->pe * 10 + 1)
        CmiAbort("misc_api: PE %d reported Cpv counter %d, expected %d", d->pe, d->counter,
                 d->pe * 10 + 1);
    CmiFree(d);
    if (++done_pes < CmiNumPes()) return;
    CmiPrintf(
        "misc_api: args, Cpv, topology, timers, Crn, Ccd, barriers, deliver-specific and "
        "async sends on %d PEs ok\n",
        CmiNumPes());
    small_msg* e = (small_msg*)CmiAlloc(sizeof(small_msg));
    CmiSetHandler(e, exit_handler_id);
    CmiSyncBroadcastAllAndFree(sizeof(small_msg), e);
}

static void exit_handler(void* msg) {
    CmiFree(msg);
    finished = 1;
    CsdExitScheduler();
}

static void say(const char* text) {
    if (write(2, text, strlen(text)) < 0) {
    }
}

/* SIGALRM: only async-signal-safe calls (write, _exit). */
static void watchdog(int sig) {
    (void)sig;
    say("misc_api: not done after 20 s; still waiting for:");
    if (!got_big) say(" the 64 KiB CmiAsyncSend message;");
    if (!got_small) say(" the small CmiAsyncSend message;");
    if (got_multi < MULTI) say(" some of the eight 64 KiB CmiAsyncSend messages;");
    if (order_len < 1) say(" the 10 ms CcdCallFnAfter callback;");
    if (order_len < 2) say(" the 30 ms CcdCallFnAfter callback;");
    if (!timer_fired) say(" the 50 ms CcdCallFnAfter callback;");
    if (!idle_fired) say(" the CcdPROCESSOR_BEGIN_IDLE callback;");
    if (done_sent) say(" the exit broadcast (this PE reported done);");
    say("\n");
    _exit(4);
}

static void start(int argc, char** argv) {
    static int first = 1, second = 2;
    signal(SIGALRM, watchdog);
    alarm(WATCHDOG_SECONDS);
    atexit(check_finished);
    check_args(argc, argv);
    spec_a_id = CmiRegisterHandler(spec_a);
    spec_b_id = CmiRegisterHandler(spec_b);
    ring_ex_id = CmiRegisterHandlerEx(ring_ex, &ex_cookie);
    data_handler_id = CmiRegisterHandler(data_handler);
    done_handler_id = CmiRegisterHandler(done_handler);
    exit_handler_id = CmiRegisterHandler(exit_handler);

    check_cpv();
    check_topology();
    check_timers();
    rand_sum = pe0_rand_sum = rand_sequence();
    check_conditions();
    CmiBarrier();

    check_deliver_specific();
    CmiBarrierZero();

    check_async();
    CmiBarrier();

    timer_registered_at = CmiWallTimer();
    CcdCallFnAfter(timer_cb, &timer_arg, 50.0);
    CcdCallFnAfter(order_cb, &second, 30.0);
    CcdCallFnAfter(order_cb, &first, 10.0);
    CcdCallOnCondition(CcdPROCESSOR_BEGIN_IDLE, idle_cb, &idle_arg);
}

int main(int argc, char** argv) {
    ConverseInit(argc, argv, start, 0, 0);
    return 0;
}
