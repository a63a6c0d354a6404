/* initret.c: ConverseInit in ConverseInit-returns mode (usched=1, initret=1). Every process
 * calls main, so ConverseInit returns on every PE without calling the start function; main
 * then registers handlers, runs a ring with CsdScheduler(-1) until the exit broadcast, checks
 * its counts and ends with ConverseExit(), which must not return. */
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

static int token_handler_id, exit_handler_id;
static int visits;
static int exit_seen;
static int finished;

static void check_finished(void) {
    if (!finished) {
        CmiError("initret: PE %d exited before main finished its checks\n", CmiMyPe());
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

static void not_for_main_pes(int argc, char** argv) {
    (void)argc;
    (void)argv;
    CmiAbort("initret: the start function ran on PE %d, which called main itself", CmiMyPe());
}

int main(int argc, char** argv) {
    ConverseInit(argc, argv, not_for_main_pes, 1, 1);
    atexit(check_finished);
    token_handler_id = CmiRegisterHandler(token_handler);
    exit_handler_id = CmiRegisterHandler(exit_handler);
    CmiBarrier(); /* every PE has registered its handlers */
    if (CmiMyPe() == 0) {
        token_msg t;
        t.lap = 0;
        CmiSetHandler(&t, token_handler_id);
        CmiSyncSend(1 % CmiNumPes(), sizeof t, &t);
    }
    CsdScheduler(-1);
    if (exit_seen != 1 || visits != LAPS)
        CmiAbort(
            "initret: PE %d: exit handler ran %d times (expected 1), token seen %d times "
            "(expected %d)",
            CmiMyPe(), exit_seen, visits, LAPS);
    if (CmiMyPe() == 0)
        CmiPrintf("initret: %d laps after ConverseInit returned on %d PEs ok\n", LAPS, CmiNumPes());
    finished = 1;
    ConverseExit();
    CmiError("initret: ConverseExit() returned on PE %d\n", CmiMyPe());
    return 1;
}
