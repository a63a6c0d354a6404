/* leaky_pe: a Converse program that leaks one communication handle on purpose. PE 0 sends
 * 4 MiB to the last PE with CmiAsyncSend (larger than a same-host ring, so it cannot
 * finish inside the call), waits until the send is done, and never calls
 * CmiReleaseCommHandle; `coverse-trace leaks` must report that handle. With "-clean" it
 * releases the handle, and the trace must show no leak. */
#include <converse.h>
#include <string.h>

static int sink_handler;

static void on_data(void* msg) {
    CmiFree(msg);
}

static void start(int argc, char** argv) {
    const int clean = CmiGetArgFlag(argv, "-clean");
    (void)argc;
    sink_handler = CmiRegisterHandler(on_data);
    CmiBarrier();
    if (CmiMyPe() == 0) {
        static char msg[CmiMsgHeaderSizeBytes + (4 << 20)];
        memset(msg, 7, sizeof msg);
        CmiInitMsgHeader(msg, (int)sizeof msg);
        CmiSetHandler(msg, sink_handler);
        CmiCommHandle h = CmiAsyncSend(CmiNumPes() - 1, (int)sizeof msg, msg);
        if (!h) CmiAbort("leaky_pe: a 4 MiB CmiAsyncSend returned handle 0");
        while (!CmiAsyncMsgSent(h))
            CsdSchedulePoll();
        if (clean) CmiReleaseCommHandle(h);
    }
    CmiBarrier();
    CsdSchedulePoll();
    CmiBarrier();
    ConverseExit();
}

int main(int argc, char** argv) {
    ConverseInit(argc, argv, start, 1, 0);
    return 0;
}
