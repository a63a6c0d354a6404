/* quiescence.c: CmiStartQD / CcdQUIESCENCE and the idle conditions.
 * Every PE starts CHAINS chains of TTL hops around the ring of PEs; some hops wait in the
 * Csd queue (CsdEnqueue) or in a Cth thread that yields first, so the queues are busy while
 * no message is in flight. Every PE receives exactly CHAINS * TTL hops, so a quiescence that
 * fires early is caught on the PE where it fires. PE 0 starts detection with CmiStartQD, the
 * others wait with CcdCallOnCondition(CcdQUIESCENCE) (older form: a C++ caller would pass a
 * (void *, double) callback). After quiescence: CcdPROCESSOR_STILL_IDLE and
 * CcdPROCESSOR_LONG_IDLE (LONG_IDLE_TIME is set small by the test) must fire, then a second
 * detection round finds quiescence again, and PE 0 ends the job. */
#define _POSIX_C_SOURCE 200809L
#include <conv-qd.h>
#include <converse.h>

#include <signal.h>
#include <stdint.h>
#include <unistd.h>

#define CHAINS 8
#define TTL 40
#define WATCHDOG_SECONDS 50

typedef struct {
    char header[CmiMsgHeaderSizeBytes];
    int ttl;
    int hop;
    int queued; /* went through the Csd queue once already */
} hop_msg;

static int h_hop, h_report, h_exit;
static int received, quiet_calls, still_idle, long_idle, reports, checked_done, second_quiet;

static void fail(const char* what) {
    CmiAbort("quiescence: PE %d: %s (received %d of %d hops)", CmiMyPe(), what, received,
             CHAINS * TTL);
}

static void watchdog(int sig) {
    static const char text[] = "quiescence: watchdog: quiescence or an idle condition never came\n";
    (void)sig;
    if (write(2, text, sizeof text - 1) < 0) _exit(4);
    _exit(4);
}

static void at_exit_check(void) {
    if (!checked_done) {
        static const char text[] = "quiescence: exited before its final checks\n";
        if (write(2, text, sizeof text - 1) < 0) _exit(3);
        _exit(3);
    }
}

static void forward(hop_msg* m) {
    if (--m->ttl == 0) {
        CmiFree(m);
        return;
    }
    ++m->hop;
    CmiSyncSendAndFree((CmiMyPe() + 1) % CmiNumPes(), sizeof *m, m);
}

static void slow_forward(void* arg) {
    CthYield();
    CthYield();
    forward((hop_msg*)arg);
}

static void hop_handler(void* msg) {
    hop_msg* m = (hop_msg*)msg;
    if (m->hop % 3 == 1 && !m->queued) { /* once through the Csd queue first */
        m->queued = 1;
        CsdEnqueue(m);
        return;
    }
    m->queued = 0;
    ++received;
    if (m->hop % 3 == 2) { /* through a thread that yields first */
        CthAwaken(CthCreate(slow_forward, m, 0));
        return;
    }
    forward(m);
}

static void report(void) {
    void* m = CmiAlloc(CmiMsgHeaderSizeBytes);
    CmiSetHandler(m, h_report);
    CmiSyncSendAndFree(0, CmiMsgHeaderSizeBytes, m);
}

static void second_quiescence(void* arg) {
    (void)arg;
    ++second_quiet;
    report();
}

static void long_idle_cb(void* arg) {
    (void)arg;
    ++long_idle;
    if (!still_idle) fail("CcdPROCESSOR_LONG_IDLE came before any CcdPROCESSOR_STILL_IDLE");
    if (CmiMyPe() == 0)
        CmiStartQD(second_quiescence, 0);
    else
        CcdCallOnCondition(CcdQUIESCENCE, second_quiescence, 0);
}

static void still_idle_cb(void* arg) {
    (void)arg;
    ++still_idle;
}

static void quiet(void* arg) {
    if (arg != &quiet_calls) fail("the quiescence callback's argument");
    ++quiet_calls;
    if (received != CHAINS * TTL) fail("quiescence was raised while hops were still under way");
    if (CQdGetCreated(CpvAccess(cQdState)) < CQdGetProcessed(CpvAccess(cQdState)))
        fail("CQd counts more processed than created messages");
    CcdCallOnConditionKeep(CcdPROCESSOR_STILL_IDLE, still_idle_cb, 0);
    CcdCallOnCondition(CcdPROCESSOR_LONG_IDLE, long_idle_cb, 0);
}

static void report_handler(void* msg) {
    CmiFree(msg);
    if (++reports < CmiNumPes()) return;
    CmiPrintf("quiescence: %d hops per PE, two detections, idle conditions on %d PEs ok\n",
              CHAINS * TTL, CmiNumPes());
    void* m = CmiAlloc(CmiMsgHeaderSizeBytes);
    CmiSetHandler(m, h_exit);
    CmiSyncBroadcastAllAndFree(CmiMsgHeaderSizeBytes, m);
}

static void exit_handler(void* msg) {
    CmiFree(msg);
    if (quiet_calls != 1 || second_quiet != 1) fail("each detection should call back once");
    if (!still_idle || long_idle != 1) fail("the idle conditions");
    checked_done = 1;
    CsdExitScheduler();
}

static void start(int argc, char** argv) {
    (void)argc;
    (void)argv;
    signal(SIGALRM, watchdog);
    alarm(WATCHDOG_SECONDS);
    atexit(at_exit_check);
    h_hop = CmiRegisterHandler(hop_handler);
    h_report = CmiRegisterHandler(report_handler);
    h_exit = CmiRegisterHandler(exit_handler);
    CmiBarrier(); /* every PE's handlers exist before the first hop */
    for (int i = 0; i < CHAINS; ++i) {
        hop_msg* m = (hop_msg*)CmiAlloc(sizeof(hop_msg));
        CmiSetHandler(m, h_hop);
        m->ttl = TTL;
        m->hop = 0;
        m->queued = 0;
        CmiSyncSendAndFree((CmiMyPe() + 1) % CmiNumPes(), sizeof *m, m);
    }
    if (CmiMyPe() == 0)
        CmiStartQD(quiet, &quiet_calls);
    else
        CcdCallOnCondition(CcdQUIESCENCE, quiet, &quiet_calls);
}

int main(int argc, char** argv) {
    ConverseInit(argc, argv, start, 0, 0);
    return 0;
}
