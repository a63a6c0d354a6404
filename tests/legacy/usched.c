/* usched.c: ConverseInit in user-calls-scheduler mode (usched=1, initret=0). start() runs
 * the whole computation: it polls once (CsdScheduler(0)), sends a token around the ring for
 * LAPS laps, and calls CsdScheduler(-1) itself until the exit broadcast's handler calls
 * CsdExitScheduler. It then checks its counts and queues one more message for itself: when
 * start() returns Converse must shut down without running the scheduler again, so that
 * message must never be delivered. */
#include <converse.h>

#include <stdlib.h>

#define LAPS 10

typedef struct {
    char header[CmiMsgHeaderSizeBytes];
    int lap;
} token_msg;

typedef struct {
    char header[CmiMsgHeaderSizeBytes];
} small_msg;

static int token_handler_id, exit_handler_id, never_handler_id;
static int visits;
static int exit_seen;
static int finished;

static void check_finished(void) {
    if (!finished) {
        CmiError("usched: PE %d exited before start() finished its checks\n", CmiMyPe());
        _Exit(3);
    }
}

static void token_handler(void* msg) {
    token_msg* t = (token_msg*)msg;
    ++visits;
    if (CmiMyPe() == 0 && ++t->lap == LAPS) {
        small_msg* e = (small_msg*)CmiAlloc(sizeof(small_msg));
        CmiFree(t);
        CmiSetHandler(e, exit_handler_id);
        CmiSyncBroadcastAllAndFree(sizeof(small_msg), e);
        return;
    }
    CmiSyncSendAndFree((CmiMyPe() + 1) % CmiNumPes(), sizeof(token_msg), t);
}

static void exit_handler(void* msg) {
    CmiFree(msg);
    ++exit_seen;
    CsdExitScheduler();
}

static void never_handler(void* msg) {
    (void)msg;
    CmiAbort(
        "usched: a message was delivered after start() returned; in user-calls-scheduler "
        "mode ConverseInit must not run the scheduler");
}

static void start(int argc, char** argv) {
    small_msg stray;
    (void)argc;
    (void)argv;
    atexit(check_finished);
    token_handler_id = CmiRegisterHandler(token_handler);
    exit_handler_id = CmiRegisterHandler(exit_handler);
    never_handler_id = CmiRegisterHandler(never_handler);
    CsdScheduler(0); /* a poll with nothing to do returns at once */
    if (CmiMyPe() == 0) {
        token_msg t;
        t.lap = 0;
        CmiSetHandler(&t, token_handler_id);
        CmiSyncSend(1 % CmiNumPes(), sizeof t, &t);
    }
    CsdScheduler(-1);
    if (exit_seen != 1)
        CmiAbort("usched: PE %d: CsdScheduler(-1) returned but the exit handler ran %d times",
                 CmiMyPe(), exit_seen);
    if (visits != LAPS)
        CmiAbort("usched: PE %d saw the token %d times, expected %d", CmiMyPe(), visits, LAPS);
    if (CmiMyPe() == 0)
        CmiPrintf("usched: %d laps with a user-called scheduler on %d PEs ok\n", LAPS, CmiNumPes());
    CmiSetHandler(&stray, never_handler_id);
    CmiSyncSend(CmiMyPe(), sizeof stray, &stray);
    finished = 1;
}

int main(int argc, char** argv) {
    ConverseInit(argc, argv, start, 1, 0);
    CmiAbort("usched: ConverseInit returned in user-calls-scheduler mode (initret=0)");
    return 1;
}
