/* priority.c: the scheduler queue's delivery order, checked on every PE on its own (no
 * message crosses PEs until every PE has done its checks and passed a CmiBarrier):
 *  - IFIFO/ILIFO integer priorities: smaller first; among equal ones LIFO entries go before
 *    FIFO ones, the most recent LIFO first;
 *  - BFIFO/BLIFO bit-vector priorities of several lengths (compared as binary fractions);
 *  - LFIFO/LLIFO 64-bit priorities;
 *  - FIFO/LIFO (the middle priority), alone and between negative and positive priorities;
 *  - CsdScheduleCount delivers exactly n, and returns n minus the delivered count when a
 *    handler calls CsdExitScheduler; CsdSchedulePoll delivers everything and returns;
 *  - messages from the network (CmiSyncSend to self) go before everything in the scheduler
 *    queue, whatever its priority, also one a handler sends mid-way; CmiDeliverMsgs
 *    delivers only those. */
#include <converse.h>

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LOG 64

typedef struct {
    char header[CmiMsgHeaderSizeBytes];
    int id;
    int action; /* what the handler does besides logging */
} prio_msg;

enum action { LOG_ONLY, SEND_NET_101, EXIT_SCHEDULER };

typedef struct {
    char header[CmiMsgHeaderSizeBytes];
} small_msg;

static int log_handler_id, exit_handler_id;
static int log_ids[MAX_LOG];
static int log_len;
static int finished;
static const char* current_test = "";

/* Priorities are not copied by the queue (manual): they live here until delivery. */
static int int_prio[16];
static CmiInt8 long_prio[16];
static unsigned int bit_prio[16][2];

static void check_finished(void) {
    if (!finished) {
        CmiError("priority: PE %d exited before the exit broadcast arrived\n", CmiMyPe());
        _Exit(3);
    }
}

static prio_msg* make(int id, int action) {
    prio_msg* m = (prio_msg*)CmiAlloc(sizeof(prio_msg));
    m->id = id;
    m->action = action;
    CmiSetHandler(m, log_handler_id);
    return m;
}

static void enqueue_int(int id, int strategy, int prio, int slot) {
    int_prio[slot] = prio;
    CsdEnqueueGeneral(make(id, LOG_ONLY), strategy, 8 * (int)sizeof(int), &int_prio[slot]);
}

static void enqueue_long(int id, int strategy, CmiInt8 prio, int slot) {
    long_prio[slot] = prio;
    CsdEnqueueGeneral(make(id, LOG_ONLY), strategy, 8 * (int)sizeof(CmiInt8), &long_prio[slot]);
}

static void enqueue_bits(int id, int strategy, int bits, unsigned int w0, unsigned int w1,
                         int slot) {
    bit_prio[slot][0] = w0;
    bit_prio[slot][1] = w1;
    CsdEnqueueGeneral(make(id, LOG_ONLY), strategy, bits, bit_prio[slot]);
}

static void net_to_self(int id) {
    prio_msg m; /* on the stack: CmiSyncSend copies it */
    m.id = id;
    m.action = LOG_ONLY;
    CmiSetHandler(&m, log_handler_id);
    CmiSyncSend(CmiMyPe(), sizeof m, &m);
}

static void log_handler(void* msg) {
    prio_msg* m = (prio_msg*)msg;
    if (log_len == MAX_LOG)
        CmiAbort("priority: %s: more than %d deliveries", current_test, MAX_LOG);
    log_ids[log_len++] = m->id;
    if (m->action == SEND_NET_101) net_to_self(101);
    if (m->action == EXIT_SCHEDULER) CsdExitScheduler();
    CmiFree(m);
}

static void list_text(char* out, size_t cap, const int* ids, int n) {
    size_t at = 0;
    out[0] = '\0';
    for (int i = 0; i < n && at + 12 < cap; ++i)
        at += (size_t)snprintf(out + at, cap - at, i ? " %d" : "%d", ids[i]);
}

static void expect_log(const int* want, int n) {
    char got[400], exp[400];
    int ok = log_len == n;
    for (int i = 0; ok && i < n; ++i)
        ok = log_ids[i] == want[i];
    if (!ok) {
        list_text(got, sizeof got, log_ids, log_len);
        list_text(exp, sizeof exp, want, n);
        CmiAbort("priority: PE %d, %s: delivered in the order [%s], expected [%s]", CmiMyPe(),
                 current_test, got, exp);
    }
    log_len = 0;
}

static void expect_int(const char* what, int got, int want) {
    if (got != want)
        CmiAbort("priority: PE %d, %s: %s is %d, expected %d", CmiMyPe(), current_test, what, got,
                 want);
}

static void run_count(int n, int want_return) {
    expect_int("CsdScheduleCount's return", CsdScheduleCount(n), want_return);
}

static void test_int(void) {
    static const int want[] = {9, 7, 2, 5, 3, 1, 4, 6, 8};
    current_test = "IFIFO/ILIFO";
    enqueue_int(1, CQS_QUEUEING_IFIFO, 5, 0);
    enqueue_int(2, CQS_QUEUEING_IFIFO, -3, 1);
    enqueue_int(3, CQS_QUEUEING_ILIFO, 5, 2);
    enqueue_int(4, CQS_QUEUEING_IFIFO, 5, 3);
    enqueue_int(5, CQS_QUEUEING_ILIFO, 5, 4);
    enqueue_int(6, CQS_QUEUEING_IFIFO, 100, 5);
    enqueue_int(7, CQS_QUEUEING_ILIFO, -100, 6);
    enqueue_int(8, CQS_QUEUEING_IFIFO, INT_MAX, 7);
    enqueue_int(9, CQS_QUEUEING_IFIFO, INT_MIN, 8);
    expect_int("CsdLength()", CsdLength(), 9);
    expect_int("CsdEmpty()", CsdEmpty(), 0);
    run_count(9, 0);
    expect_log(want, 9);
    expect_int("CsdEmpty() after", CsdEmpty() != 0, 1);
}

static void test_bits(void) {
    /* Bit-vectors are binary fractions: the first bit is the most significant bit of word 0;
     * unused bits of the last word are 0. */
    static const int want[] = {16, 15, 12, 14, 11, 13, 17};
    current_test = "BFIFO/BLIFO";
    enqueue_bits(11, CQS_QUEUEING_BFIFO, 2, 0x40000000u, 0, 0);            /* .01 */
    enqueue_bits(12, CQS_QUEUEING_BFIFO, 4, 0x30000000u, 0, 1);            /* .0011 */
    enqueue_bits(13, CQS_QUEUEING_BFIFO, 1, 0x80000000u, 0, 2);            /* .1 */
    enqueue_bits(14, CQS_QUEUEING_BFIFO, 40, 0x30000000u, 0x01000000u, 3); /* .0011 0..0 1 */
    enqueue_bits(15, CQS_QUEUEING_BLIFO, 4, 0x30000000u, 0, 4);            /* .0011, LIFO */
    enqueue_bits(16, CQS_QUEUEING_BFIFO, 64, 0, 0, 5);                     /* .000...0 */
    enqueue_bits(17, CQS_QUEUEING_BFIFO, 8, 0xFF000000u, 0, 6);            /* .11111111 */
    run_count(7, 0);
    expect_log(want, 7);
}

static void test_long(void) {
    static const int want[] = {26, 22, 25, 24, 23, 21};
    current_test = "LFIFO/LLIFO";
    enqueue_long(21, CQS_QUEUEING_LFIFO, (CmiInt8)1 << 40, 0);
    enqueue_long(22, CQS_QUEUEING_LFIFO, -((CmiInt8)1 << 40), 1);
    enqueue_long(23, CQS_QUEUEING_LFIFO, 3, 2);
    enqueue_long(24, CQS_QUEUEING_LLIFO, 3, 3);
    enqueue_long(25, CQS_QUEUEING_LFIFO, -5, 4);
    enqueue_long(26, CQS_QUEUEING_LFIFO, INT64_MIN, 5);
    run_count(6, 0);
    expect_log(want, 6);
}

static void test_fifo_lifo(void) {
    static const int want[] = {34, 32, 31, 33, 35};
    current_test = "FIFO/LIFO";
    CsdEnqueueFifo(make(31, LOG_ONLY));
    CsdEnqueueLifo(make(32, LOG_ONLY));
    CsdEnqueue(make(33, LOG_ONLY));
    CsdEnqueueLifo(make(34, LOG_ONLY));
    CsdEnqueueGeneral(make(35, LOG_ONLY), CQS_QUEUEING_FIFO, 0, NULL);
    run_count(5, 0);
    expect_log(want, 5);
}

static void test_mixed(void) {
    /* FIFO/LIFO use the middle priority: after negative integers, before positive ones. */
    static const int want[] = {45, 43, 44, 42, 41};
    current_test = "mixed strategies";
    enqueue_int(41, CQS_QUEUEING_IFIFO, 5, 0);
    CsdEnqueueFifo(make(42, LOG_ONLY));
    enqueue_int(43, CQS_QUEUEING_IFIFO, -5, 1);
    CsdEnqueueLifo(make(44, LOG_ONLY));
    enqueue_bits(45, CQS_QUEUEING_BFIFO, 1, 0, 0, 0); /* .0: the highest priority */
    run_count(5, 0);
    expect_log(want, 5);
}

static void test_count_and_exit(void) {
    static const int first[] = {51, 52}, second[] = {53}, rest[] = {54, 55};
    current_test = "CsdScheduleCount/CsdExitScheduler/CsdSchedulePoll";
    CsdEnqueue(make(51, LOG_ONLY));
    CsdEnqueue(make(52, LOG_ONLY));
    CsdEnqueue(make(53, EXIT_SCHEDULER));
    CsdEnqueue(make(54, LOG_ONLY));
    CsdEnqueue(make(55, LOG_ONLY));
    run_count(2, 0);
    expect_log(first, 2);
    expect_int("CsdLength() after CsdScheduleCount(2)", CsdLength(), 3);
    run_count(3, 2); /* stopped by 53's handler after 1 of 3 */
    expect_log(second, 1);
    expect_int("CsdLength() after CsdExitScheduler", CsdLength(), 2);
    CsdSchedulePoll();
    expect_log(rest, 2);
    expect_int("CsdEmpty() after CsdSchedulePoll", CsdEmpty() != 0, 1);
}

static void test_network_first(void) {
    static const int want[] = {71, 72, 61, 62, 63, 101, 64};
    static const int net_only[] = {82, 83}, queued[] = {81};
    current_test = "network before scheduler queue";
    enqueue_int(61, CQS_QUEUEING_IFIFO, INT_MIN, 0);
    enqueue_int(62, CQS_QUEUEING_ILIFO, -1000, 1);
    CsdEnqueue(make(63, SEND_NET_101));
    CsdEnqueue(make(64, LOG_ONLY));
    net_to_self(71);
    net_to_self(72);
    run_count(7, 0);
    expect_log(want, 7);

    current_test = "CmiDeliverMsgs";
    enqueue_int(81, CQS_QUEUEING_IFIFO, INT_MIN, 0);
    net_to_self(82);
    net_to_self(83);
    expect_int("CmiDeliverMsgs(10)", CmiDeliverMsgs(10), 8);
    expect_log(net_only, 2);
    expect_int("CsdLength() after CmiDeliverMsgs", CsdLength(), 1);
    CsdSchedulePoll();
    expect_log(queued, 1);
}

static void exit_handler(void* msg) {
    CmiFree(msg);
    finished = 1;
    CsdExitScheduler();
}

static void start(int argc, char** argv) {
    (void)argc;
    (void)argv;
    atexit(check_finished);
    log_handler_id = CmiRegisterHandler(log_handler);
    exit_handler_id = CmiRegisterHandler(exit_handler);
    test_int();
    test_bits();
    test_long();
    test_fifo_lifo();
    test_mixed();
    test_count_and_exit();
    test_network_first();
    CmiBarrier(); /* every PE passed */
    if (CmiMyPe() == 0) {
        small_msg* e = (small_msg*)CmiAlloc(sizeof(small_msg));
        CmiPrintf("priority: delivery order checks on %d PEs ok\n", CmiNumPes());
        CmiSetHandler(e, exit_handler_id);
        CmiSyncBroadcastAllAndFree(sizeof(small_msg), e);
    }
}

int main(int argc, char** argv) {
    ConverseInit(argc, argv, start, 0, 0);
    return 0;
}
