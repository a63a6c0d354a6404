/* abort_check.c: the premise of every other program here: a CmiAbort on one PE ends the
 * whole job with a non-zero status and its message, instead of leaving the other PEs waiting.
 * PE 0 sends a message to the last PE, whose handler calls CmiAbort; every other PE sits in
 * the scheduler with nothing to do. Run through expect_abort.sh, which passes only if the
 * job fails with the abort message. */
#include <converse.h>

typedef struct {
    char header[CmiMsgHeaderSizeBytes];
} small_msg;

static int abort_handler_id;

static void abort_handler(void* msg) {
    CmiFree(msg);
    CmiAbort("abort_check: deliberate abort on PE %d of %d (expected by this test)", CmiMyPe(),
             CmiNumPes());
}

static void start(int argc, char** argv) {
    (void)argc;
    (void)argv;
    abort_handler_id = CmiRegisterHandler(abort_handler);
    CmiBarrier(); /* every PE is up and has registered the handler */
    if (CmiMyPe() == 0) {
        small_msg m;
        CmiSetHandler(&m, abort_handler_id);
        CmiSyncSend(CmiNumPes() - 1, sizeof m, &m);
    }
}

int main(int argc, char** argv) {
    ConverseInit(argc, argv, start, 0, 0);
    return 0;
}
