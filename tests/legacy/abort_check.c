/* abort_check.c: the premise of every other program here: a CmiAbort on one PE ends the
 * whole job with a non-zero status and its message, instead of leaving the other PEs waiting.
 * PE 0 sends a message to the last PE, whose handler calls CmiAbort; every other PE sits in
 * the scheduler with nothing to do. Run through expect_abort.sh, which passes only if the
 * job fails with the abort message.
 * -alone: no barrier and no message: the last PE aborts at once, and the others, connected
 * to nobody (CONNECT=lazy), sit in the scheduler: only the starter can stop them (under
 * PMIx: the PMIx_Abort that CmiAbort calls).
 * -exit: the last PE's handler calls exit(3) instead, as legacy programs do: the job must
 * stop the same way, with status 3 (expect_exit.sh), not wait for that PE's ConverseExit.
 * -exit-thread: the handler starts a thread that calls exit(3) and returns to the scheduler:
 * exit() from a thread that is not the PE's stops the job the same way. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <converse.h>

typedef struct {
    char header[CmiMsgHeaderSizeBytes];
} small_msg;

static int abort_handler_id;
static int by_exit; /* 1: -exit, 2: -exit-thread */

static void* exit_from_thread(void* arg) {
    (void)arg;
    exit(3);
}

static void abort_handler(void* msg) {
    CmiFree(msg);
    if (by_exit == 2) {
        pthread_t t;
        printf("abort_check: PE %d of %d calls exit(3) from a thread of its own\n", CmiMyPe(),
               CmiNumPes());
        fflush(stdout);
        if (pthread_create(&t, NULL, exit_from_thread, NULL) != 0)
            CmiAbort("abort_check: pthread_create failed");
        return; /* the PE goes on in its scheduler until the thread's exit() stops the job */
    }
    if (by_exit) {
        printf("abort_check: PE %d of %d calls exit(3)\n", CmiMyPe(), CmiNumPes());
        fflush(stdout);
        exit(3);
    }
    CmiAbort("abort_check: deliberate abort on PE %d of %d (expected by this test)", CmiMyPe(),
             CmiNumPes());
}

static void start(int argc, char** argv) {
    int i;
    for (i = 1; i < argc; ++i)
        if (strcmp(argv[i], "-exit") == 0)
            by_exit = 1;
        else if (strcmp(argv[i], "-exit-thread") == 0)
            by_exit = 2;
    for (i = 1; i < argc; ++i)
        if (strcmp(argv[i], "-alone") == 0) {
            if (CmiMyPe() == CmiNumPes() - 1)
                CmiAbort(
                    "abort_check: deliberate abort on PE %d of %d, alone (expected by this "
                    "test)",
                    CmiMyPe(), CmiNumPes());
            return;
        }
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
