/* idle_edges.c: callbacks on the edges of an idle spell (CcdPROCESSOR_BEGIN_IDLE and
 * CcdPROCESSOR_END_IDLE) registered after the scheduler loop has run idle spells without
 * any: they fire while registered, a once-callback fires once, and nothing fires after
 * they are cancelled. A token goes round the PEs; from lap FIRST to lap LAST each PE passes
 * it on from a 0.1 ms timer, so that every PE (a single one too) idles between two hops. */
#include <converse.h>

#include <unistd.h>

enum { FIRST = 200, CANCEL = 400, LAST = 600 };

typedef struct {
    char header[CmiMsgHeaderSizeBytes];
    int lap;
} token_msg;

static int token_handler_id, exit_handler_id;
static int begin_count, end_count, once_count;
static int begin_id = -1, end_id = -1;
static int begin_at_cancel, end_at_cancel;

static void on_begin_idle(void* arg) {
    (void)arg;
    ++begin_count;
}
static void on_end_idle(void* arg) {
    (void)arg;
    ++end_count;
}
static void on_end_idle_once(void* arg) {
    (void)arg;
    ++once_count;
}

static void send_token(int lap) {
    token_msg* m = (token_msg*)CmiAlloc(sizeof(token_msg));
    CmiSetHandler(m, token_handler_id);
    m->lap = lap;
    CmiSyncSendAndFree((CmiMyPe() + 1) % CmiNumPes(), sizeof(token_msg), m);
}

static int pending_lap;
static void send_later(void* arg, double now) {
    (void)arg;
    (void)now;
    send_token(pending_lap);
}

static void token_handler(void* msg) {
    token_msg* m = (token_msg*)msg;
    /* PE 0 starts each lap: the lap number counts PE 0's passes. */
    const int lap = CmiMyPe() == 0 ? m->lap + 1 : m->lap;
    CmiFree(msg);
    if (lap == FIRST && begin_id == -1) {
        begin_id = CcdCallOnConditionKeep(CcdPROCESSOR_BEGIN_IDLE, on_begin_idle, NULL);
        end_id = CcdCallOnConditionKeep(CcdPROCESSOR_END_IDLE, on_end_idle, NULL);
        CcdCallOnCondition(CcdPROCESSOR_END_IDLE, on_end_idle_once, NULL);
    }
    if (lap == CANCEL && begin_id >= 0) {
        CcdCancelCallOnConditionKeep(CcdPROCESSOR_BEGIN_IDLE, begin_id);
        CcdCancelCallOnConditionKeep(CcdPROCESSOR_END_IDLE, end_id);
        begin_id = -2;
        begin_at_cancel = begin_count;
        end_at_cancel = end_count;
    }
    if (CmiMyPe() == 0 && lap == LAST) {
        void* bye = CmiAlloc(CmiMsgHeaderSizeBytes);
        CmiSetHandler(bye, exit_handler_id);
        CmiSyncBroadcastAllAndFree(CmiMsgHeaderSizeBytes, bye);
        return;
    }
    if (lap >= FIRST && lap < CANCEL) {
        pending_lap = lap;
        CcdCallFnAfter(send_later, NULL, 0.1);
    } else {
        send_token(lap);
    }
}

static void exit_handler(void* msg) {
    CmiFree(msg);
    CsdExitScheduler();
}

static void start(int argc, char** argv) {
    (void)argc;
    (void)argv;
    alarm(50);
    token_handler_id = CmiRegisterHandler(token_handler);
    exit_handler_id = CmiRegisterHandler(exit_handler);
    CmiBarrier();
    if (CmiMyPe() == 0) send_token(0);
    CsdScheduleForever();
    if (begin_id != -2)
        CmiAbort("idle_edges: PE %d: the callbacks were never cancelled", CmiMyPe());
    if (begin_at_cancel < 1 || end_at_cancel < 1)
        CmiAbort("idle_edges: PE %d: while registered, BEGIN_IDLE ran %d times and END_IDLE %d",
                 CmiMyPe(), begin_at_cancel, end_at_cancel);
    if (begin_count != begin_at_cancel || end_count != end_at_cancel)
        CmiAbort(
            "idle_edges: PE %d: after cancelling, BEGIN_IDLE ran %d more times and "
            "END_IDLE %d more",
            CmiMyPe(), begin_count - begin_at_cancel, end_count - end_at_cancel);
    if (once_count != 1)
        CmiAbort("idle_edges: PE %d: the once-callback on END_IDLE ran %d times", CmiMyPe(),
                 once_count);
    CmiBarrier();
    if (CmiMyPe() == 0) CmiPrintf("idle_edges: on %d PEs ok\n", CmiNumPes());
    ConverseExit();
}

int main(int argc, char** argv) {
    ConverseInit(argc, argv, start, 1, 0);
    return 0;
}
