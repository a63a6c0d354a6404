/* kill_check: PEs keep a message going around the ring forever; the driver
 * (expect_kill.sh) kills one PE with SIGKILL mid-run and checks that the launcher stops the
 * job quickly, names the PE, and leaves no process behind. Each PE writes its pid to
 * $KILL_CHECK_DIR/pe<N>.pid once the ring is running, and PE 0 the job's key to
 * $KILL_CHECK_DIR/key (its names in /dev/shm start "coverse-KEY-"). With KILL_CHECK_OFFER
 * set, the last PE first offers a long channel nobody takes (CmiCreateReceiverPersistent),
 * so that a name of its own is still in /dev/shm when it is killed. */
#include <converse.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int token_handler;

static void on_token(void* msg) {
    CmiSyncSendAndFree((CmiMyPe() + 1) % CmiNumPes(), CmiMsgHeaderSizeBytes, msg);
}

static void start(int argc, char** argv) {
    (void)argc;
    (void)argv;
    token_handler = CmiRegisterHandler(on_token);
    CmiBarrier();
    const char* dir = getenv("KILL_CHECK_DIR");
    if (!dir) CmiAbort("kill_check: KILL_CHECK_DIR is not set");
    if (getenv("KILL_CHECK_OFFER") && CmiMyPe() == CmiNumPes() - 1) {
        const PersistentReq offer = CmiCreateReceiverPersistent(64 * 1024);
        if (!offer.myHand) CmiAbort("kill_check: PE %d could not offer a long channel", CmiMyPe());
    }
    char path[512];
    if (CmiMyPe() == 0) {
        const char* key = getenv("COVERSE_JOB_KEY");
        snprintf(path, sizeof path, "%s/key", dir);
        FILE* k = fopen(path, "w");
        if (!k || !key)
            CmiAbort("kill_check: cannot write %s (COVERSE_JOB_KEY %s)", path,
                     key ? "set" : "unset");
        fprintf(k, "%s\n", key);
        fclose(k);
    }
    snprintf(path, sizeof path, "%s/pe%d.pid", dir, CmiMyPe());
    FILE* f = fopen(path, "w");
    if (!f) CmiAbort("kill_check: cannot write %s", path);
    fprintf(f, "%d\n", (int)getpid());
    fclose(f);
    if (CmiMyPe() == 0) {
        void* msg = CmiAlloc(CmiMsgHeaderSizeBytes);
        CmiInitMsgHeader(msg, CmiMsgHeaderSizeBytes);
        CmiSetHandler(msg, token_handler);
        CmiSyncSendAndFree(CmiNumPes() > 1 ? 1 : 0, CmiMsgHeaderSizeBytes, msg);
    }
}

int main(int argc, char** argv) {
    ConverseInit(argc, argv, start, 0, 0);
    return 0;
}
