/* A legacy Converse program built against the installed coverse (pkg-config and
 * find_package): a token goes around the ring of PEs 3 times, then every PE exits. */
#include <converse.h>
#include <string.h>

static int token_handler, exit_handler;

static void on_exit_msg(void* msg) {
    CmiFree(msg);
    CsdExitScheduler();
}

static void on_token(void* msg) {
    int laps;
    memcpy(&laps, (char*)msg + CmiMsgHeaderSizeBytes, sizeof laps);
    if (CmiMyPe() == 0) laps++;
    if (laps > 3) {
        CmiPrintf("install_ring: 3 laps on %d PEs ok\n", CmiNumPes());
        CmiSetHandler(msg, exit_handler);
        CmiSyncBroadcastAllAndFree(CmiMsgHeaderSizeBytes + (int)sizeof laps, msg);
        return;
    }
    memcpy((char*)msg + CmiMsgHeaderSizeBytes, &laps, sizeof laps);
    CmiSyncSendAndFree((CmiMyPe() + 1) % CmiNumPes(), CmiMsgHeaderSizeBytes + (int)sizeof laps,
                       msg);
}

static void start(int argc, char** argv) {
    (void)argc;
    (void)argv;
    token_handler = CmiRegisterHandler(on_token);
    exit_handler = CmiRegisterHandler(on_exit_msg);
    if (CmiMyPe() == 0) {
        char msg[CmiMsgHeaderSizeBytes + sizeof(int)];
        int laps = 0;
        CmiInitMsgHeader(msg, (int)sizeof msg);
        CmiSetHandler(msg, token_handler);
        memcpy(msg + CmiMsgHeaderSizeBytes, &laps, sizeof laps);
        CmiSyncSend(0, (int)sizeof msg, msg); /* a message on the stack: legal for Sync */
    }
}

int main(int argc, char** argv) {
    ConverseInit(argc, argv, start, 0, 0);
    return 0;
}
