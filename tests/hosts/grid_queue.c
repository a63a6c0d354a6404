/* grid_queue.c: the grid queue reorders. PE 1 registers border object (gid 7, index 5), tells
 * PE 0 so, and then sits in a handler (in CmiBarrier) while PE 0 sends it ten messages for
 * unregistered objects and then one for object 7/5; once the barrier returns all eleven are queued
 * at PE 1. With GRID_QUEUE on and PE 0 in another cluster (WAN_LATENCY=0 splits every pair), the
 * message for 7/5 is delivered first; otherwise it comes last, in send order. PE 1 checks the
 * position against -expect first|last, and the table calls: Lookup, LookupMsg, Deregister,
 * GetInterval/GetThreshold (against -interval/-threshold), and that a second object fits only when
 * -maximum (GRID_QUEUE_MAXIMUM) is 2 or more. With -deregister PE 1 calls CmiGridQueueDeregisterAll
 * before the messages come (so: last). Usage: grid_queue -expect first|last [-interval N]
 * [-threshold N] [-maximum N] [-deregister] */
#include <converse.h>

#include <string.h>

typedef struct {
    char header[CmiMsgHeaderSizeBytes];
    CmiGridObjectHeader object; /* right after the Converse header */
    int seq;
} item_msg;

enum { items = 11 };

static int ready_handler_id;
static int hold_handler_id;
static int item_handler_id;
static int exit_handler_id;
static const char* expect = "last";
static int position = -1;
static int seen;

static void exit_handler(void* msg) {
    CmiFree(msg);
    CsdExitScheduler();
}

static void item_handler(void* msg) {
    item_msg* m = (item_msg*)msg;
    if (m->object.gid == 7 && m->object.index[0] == 5) position = seen;
    ++seen;
    CmiFree(m);
    if (seen < items) return;
    const int want = strcmp(expect, "first") == 0 ? 0 : items - 1;
    if (position != want)
        CmiAbort(
            "grid_queue: the message for the border object came at position %d, expected %d "
            "(%s)",
            position, want, expect);
    CmiPrintf("grid_queue: border object's message delivered %s (position %d of %d)\n", expect,
              position, items);
    void* bye = CmiAlloc(CmiMsgHeaderSizeBytes);
    CmiSetHandler(bye, exit_handler_id);
    CmiSyncBroadcastAllAndFree(CmiMsgHeaderSizeBytes, bye);
}

static void hold_handler(void* msg) {
    CmiFree(msg);
    /* PE 0 sends its eleven messages before it enters the barrier: when the barrier
       returns they are all queued here, behind this handler. */
    CmiBarrier();
}

static void send_item(int gid, int index, int seq) {
    item_msg m;
    memset(&m, 0, sizeof m);
    m.object.gid = gid;
    m.object.nInts = 1;
    m.object.index[0] = index;
    m.seq = seq;
    CmiSetHandler(&m, item_handler_id);
    CmiSyncSend(1, sizeof m, &m);
}

/* PE 0: PE 1 has registered its object (the grid queue judges a message when it arrives). */
static void ready_handler(void* msg) {
    CmiFree(msg);
    void* hold = CmiAlloc(CmiMsgHeaderSizeBytes);
    CmiSetHandler(hold, hold_handler_id);
    CmiSyncSendAndFree(1, CmiMsgHeaderSizeBytes, hold);
    for (int i = 0; i < items - 1; ++i)
        send_item(7, 100 + i, i);
    send_item(7, 5, items - 1);
    CmiBarrier();
}

static void check_table(int interval, int threshold, int maximum, int deregister) {
    item_msg probe;
    memset(&probe, 0, sizeof probe);
    probe.object.gid = 7;
    probe.object.nInts = 1;
    probe.object.index[0] = 5;
    CmiGridQueueRegister(7, 1, 5, 0, 0);
    CmiGridQueueRegister(9, 2, 1, 2, 0); /* the second object: only if GRID_QUEUE_MAXIMUM >= 2 */
    if (!CmiGridQueueLookup(7, 1, 5, 99, 99)) CmiAbort("grid_queue: 7/5 not found");
    if (CmiGridQueueLookup(7, 1, 6, 0, 0)) CmiAbort("grid_queue: 7/6 found");
    if (CmiGridQueueLookup(9, 2, 1, 2, 0) != (maximum >= 2))
        CmiAbort("grid_queue: the second object %s with GRID_QUEUE_MAXIMUM %d",
                 maximum >= 2 ? "is missing" : "was registered", maximum);
    item_msg* heap = (item_msg*)CmiAlloc(sizeof(item_msg));
    memcpy(heap, &probe, sizeof probe);
    if (!CmiGridQueueLookupMsg((char*)heap)) CmiAbort("grid_queue: LookupMsg missed 7/5");
    heap->object.index[0] = 6;
    if (CmiGridQueueLookupMsg((char*)heap)) CmiAbort("grid_queue: LookupMsg found 7/6");
    CmiFree(heap);
    char* tiny = (char*)CmiAlloc(CmiMsgHeaderSizeBytes);
    if (CmiGridQueueLookupMsg(tiny)) CmiAbort("grid_queue: a header-only message matched");
    CmiFree(tiny);
    CmiGridQueueDeregister(9, 2, 1, 2, 0);
    if (CmiGridQueueLookup(9, 2, 1, 2, 0)) CmiAbort("grid_queue: 9 still there after Deregister");
    if (CmiGridQueueGetInterval() != interval || CmiGridQueueGetThreshold() != threshold)
        CmiAbort("grid_queue: interval %d threshold %d, expected %d and %d",
                 CmiGridQueueGetInterval(), CmiGridQueueGetThreshold(), interval, threshold);
    if (deregister) {
        CmiGridQueueDeregisterAll();
        if (CmiGridQueueLookup(7, 1, 5, 0, 0)) CmiAbort("grid_queue: 7/5 after DeregisterAll");
    }
}

static void start(int argc, char** argv) {
    (void)argc;
    int interval = 0, threshold = 0, maximum = 100;
    CmiGetArgStringDesc(argv, "-expect", (char**)&expect, "first or last");
    CmiGetArgIntDesc(argv, "-interval", &interval, "GRID_QUEUE_INTERVAL");
    CmiGetArgIntDesc(argv, "-threshold", &threshold, "GRID_QUEUE_THRESHOLD");
    CmiGetArgIntDesc(argv, "-maximum", &maximum, "GRID_QUEUE_MAXIMUM");
    const int deregister = CmiGetArgFlagDesc(argv, "-deregister", "deregister all first");
    if (strcmp(expect, "first") != 0 && strcmp(expect, "last") != 0)
        CmiAbort("grid_queue: -expect takes first or last, not '%s'", expect);
    if (CmiNumPes() != 2) CmiAbort("grid_queue: runs on 2 PEs, not %d", CmiNumPes());
    ready_handler_id = CmiRegisterHandler(ready_handler);
    hold_handler_id = CmiRegisterHandler(hold_handler);
    item_handler_id = CmiRegisterHandler(item_handler);
    exit_handler_id = CmiRegisterHandler(exit_handler);
    if (CmiMyPe() == 1) {
        check_table(interval, threshold, maximum, deregister);
        void* ready = CmiAlloc(CmiMsgHeaderSizeBytes);
        CmiSetHandler(ready, ready_handler_id);
        CmiSyncSendAndFree(0, CmiMsgHeaderSizeBytes, ready);
    }
}

int main(int argc, char** argv) {
    ConverseInit(argc, argv, start, 0, 0);
    return 0;
}
