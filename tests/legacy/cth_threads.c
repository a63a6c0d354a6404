/* cth_threads.c: Converse user-level threads, in phases:
 *  1. -threads N (10,000 by default) Cth threads on every PE, each with its own Ctv value,
 *     yielding twice through the scheduler queue; a thread freed while awakened never runs.
 *  2. A handler that suspends (CthSuspend on the scheduling thread) while a ping-pong with
 *     the next PE goes on; the last pong's handler awakens it.
 *  3. Futures across PEs: each PE's future is set by the next PE; a Cth thread waits for it.
 *  4. Priorities: three threads awakened with IFIFO priorities 3, 1, 2 run as 1, 2, 3; the
 *     locks (CmiCreateLock, CmiTryLock on a held lock, CmiMemLock).
 * Then each PE reports to PE 0, which ends the job. A watchdog (alarm) names a hang.
 * It includes only converse.h (and the POSIX headers below): snprintf, malloc and
 * memcpy come through converse.h, as in Charm++. */
#define _POSIX_C_SOURCE 200809L
#include <converse.h>

#include <signal.h>
#include <stdint.h>
#include <unistd.h>

#define PINGS 20
#define WATCHDOG_SECONDS 50

typedef struct {
    char header[CmiMsgHeaderSizeBytes];
    int from;
    int count;
} ping_msg;

typedef struct {
    char header[CmiMsgHeaderSizeBytes];
    Cfuture future;
    int from;
} future_msg;

CtvStaticDeclare(int, my_index);

static int nthreads = 10000;
static int finished, checked_done, reports;
static int h_park, h_ping, h_pong, h_future, h_report, h_exit;
static CthThread parked;
static int pongs, woken, resumed_in_handler;
static int order[3], order_len;
static const char* phase = "phase 1 (threads)";

static void fail(const char* what) {
    CmiAbort("cth_threads: PE %d: %s", CmiMyPe(), what);
}

static void watchdog(int sig) {
    static const char text[] = "cth_threads: watchdog: never finished ";
    (void)sig;
    if (write(2, text, sizeof text - 1) < 0 || write(2, phase, strlen(phase)) < 0 ||
        write(2, "\n", 1) < 0)
        _exit(4);
    _exit(4);
}

static void at_exit_check(void) {
    if (!checked_done) {
        static const char text[] = "cth_threads: exited before its final checks\n";
        if (write(2, text, sizeof text - 1) < 0) _exit(3);
        _exit(3);
    }
}

static void send_ping(int to, int count) {
    ping_msg m;
    CmiSetHandler(&m, h_ping);
    m.from = CmiMyPe();
    m.count = count;
    CmiSyncSend(to, sizeof m, &m);
}

static void phase4(void);
static void phase3(void);

/* ---- phase 2: a handler suspends while messages flow -------------------------------- */
static void park_handler(void* msg) {
    CmiFree(msg);
    phase = "phase 2 (a handler suspended while a ping-pong runs)";
    if (!CthIsMainThread(CthSelf())) fail("the park handler should run on the main thread");
    parked = CthSelf();
    send_ping((CmiMyPe() + 1) % CmiNumPes(), 1);
    CthSuspend(); /* the PE goes on: pings and pongs are handled by a stand-in */
    if (!woken || pongs != PINGS) fail("resumed before the last pong awakened the handler");
    resumed_in_handler = 1;
    phase3();
}

static void ping_handler(void* msg) {
    ping_msg* m = (ping_msg*)msg;
    CmiSetHandler(m, h_pong);
    int from = m->from;
    m->from = CmiMyPe();
    CmiSyncSendAndFree(from, sizeof *m, m);
}

static void pong_handler(void* msg) {
    ping_msg* m = (ping_msg*)msg;
    int count = m->count;
    int from = m->from;
    CmiFree(m);
    if (++pongs != count) fail("pongs out of order");
    if (pongs < PINGS) {
        send_ping(from, count + 1);
        return;
    }
    woken = 1;
    CthAwaken(parked);
}

/* ---- phase 1: many threads ----------------------------------------------------------- */
static void never_runs(void* arg) {
    (void)arg;
    fail("a thread freed while awakened ran");
}

static void worker(void* arg) {
    const int index = (int)(intptr_t)arg;
    if (CthIsMainThread(CthSelf())) fail("a Cth thread says it is the main thread");
    CtvAccess(my_index) = index;
    CthYield();
    if (CtvAccess(my_index) != index) fail("a thread's Ctv value changed across CthYield");
    CthYield();
    if (CtvAccess(my_index) != index) fail("a thread's Ctv value changed across CthYield");
    if (++finished == nthreads) {
        if (CtvAccess(my_index) != index) fail("Ctv");
        void* m = CmiAlloc(CmiMsgHeaderSizeBytes);
        CmiSetHandler(m, h_park);
        CmiSyncSendAndFree(CmiMyPe(), CmiMsgHeaderSizeBytes, m);
    }
}

/* ---- phase 3: futures across PEs ----------------------------------------------------- */
static Cfuture my_future;

static void future_handler(void* msg) {
    future_msg* m = (future_msg*)msg;
    int value = 1000 * CmiMyPe() + 7;
    if (CfuturePE(m->future) != m->from) fail("a future names the wrong PE");
    CfutureSet(m->future, &value, sizeof value);
    CmiFree(m);
}

static void future_waiter(void* arg) {
    (void)arg;
    int* v = (int*)CfutureWait(my_future);
    const int expected = 1000 * ((CmiMyPe() + 1) % CmiNumPes()) + 7;
    if (*v != expected) fail("CfutureWait returned the wrong value");
    CfutureDestroy(my_future);
    phase4();
}

static void phase3(void) {
    phase = "phase 3 (futures)";
    my_future = CfutureCreate();
    CthAwaken(CthCreate(future_waiter, 0, 0));
    future_msg m;
    CmiSetHandler(&m, h_future);
    m.future = my_future;
    m.from = CmiMyPe();
    CmiSyncSend((CmiMyPe() + 1) % CmiNumPes(), sizeof m, &m);
}

/* ---- phase 4: priorities, locks, report ---------------------------------------------- */
static void report(void) {
    void* m = CmiAlloc(CmiMsgHeaderSizeBytes);
    CmiSetHandler(m, h_report);
    CmiSyncSendAndFree(0, CmiMsgHeaderSizeBytes, m);
}

static void prio_thread(void* arg) {
    order[order_len++] = (int)(intptr_t)arg;
    if (order_len < 3) return;
    if (order[0] != 1 || order[1] != 2 || order[2] != 3)
        fail("threads awakened with IFIFO priorities ran out of priority order");
    CmiNodeLock lock = CmiCreateLock();
    CmiLock(lock);
    if (CmiTryLock(lock) == 0) fail("CmiTryLock took a lock that is held");
    CmiUnlock(lock);
    if (CmiTryLock(lock) != 0) fail("CmiTryLock could not take a free lock");
    CmiUnlock(lock);
    CmiDestroyLock(lock);
    CmiMemLock();
    char* text = (char*)malloc(16);
    snprintf(text, 16, "%d%d%d", order[0], order[1], order[2]);
    char copy[16];
    memcpy(copy, text, 16);
    free(text);
    CmiMemUnlock();
    if (strcmp(copy, "123") != 0) fail("snprintf/memcpy through converse.h");
    report();
}

static void phase4(void) {
    static unsigned int prios[3] = {3, 1, 2};
    phase = "phase 4 (priorities)";
    for (int i = 0; i < 3; ++i)
        CthAwakenPrio(CthCreate(prio_thread, (void*)(intptr_t)prios[i], 0), CQS_QUEUEING_IFIFO,
                      8 * (int)sizeof(int), &prios[i]);
}

static void report_handler(void* msg) {
    CmiFree(msg);
    if (++reports < CmiNumPes()) return;
    CmiPrintf(
        "cth_threads: %d threads per PE, suspended handler, futures, priorities on %d PEs ok\n",
        nthreads, CmiNumPes());
    void* m = CmiAlloc(CmiMsgHeaderSizeBytes);
    CmiSetHandler(m, h_exit);
    CmiSyncBroadcastAllAndFree(CmiMsgHeaderSizeBytes, m);
}

static void exit_handler(void* msg) {
    CmiFree(msg);
    if (finished != nthreads) fail("not every thread finished");
    if (!resumed_in_handler) fail("the suspended handler never resumed");
    if (order_len != 3) fail("not every priority thread ran");
    checked_done = 1;
    CsdExitScheduler();
}

static void start(int argc, char** argv) {
    (void)argc;
    CmiGetArgInt(argv, "-threads", &nthreads);
    signal(SIGALRM, watchdog);
    alarm(WATCHDOG_SECONDS);
    atexit(at_exit_check);
    h_park = CmiRegisterHandler(park_handler);
    h_ping = CmiRegisterHandler(ping_handler);
    h_pong = CmiRegisterHandler(pong_handler);
    h_future = CmiRegisterHandler(future_handler);
    h_report = CmiRegisterHandler(report_handler);
    h_exit = CmiRegisterHandler(exit_handler);
    CtvInitialize(int, my_index);
    CtvAccess(my_index) = -1;
    if (!CthIsMainThread(CthSelf())) fail("start() should run on the main thread");
    CthThread doomed = CthCreate(never_runs, 0, 0);
    CthAwaken(doomed);
    CthFree(doomed);
    for (int i = 0; i < nthreads; ++i)
        CthAwaken(CthCreate(worker, (void*)(intptr_t)i, (i & 1) ? 64 * 1024 : 0));
    if (CtvAccess(my_index) != -1) fail("the main thread's Ctv value changed");
}

int main(int argc, char** argv) {
    ConverseInit(argc, argv, start, 0, 0);
    return 0;
}
