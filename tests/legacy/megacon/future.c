/* future.c: every PE makes one future per PE and asks each PE to set its own with
 * Cpm_future_sendback (a Cfuture travels as a Cpm argument); a thread waits for all of them
 * and checks each value names the PE that set it. */
#include <converse.h>

#include "future.cpm.h"
#include "modules.h"

static Cfuture* futures;

CpmInvokable future_sendback(Cfuture f) {
    int me = CmiMyPe();
    CfutureSet(f, &me, sizeof me);
}

static void future_wait(void* arg) {
    (void)arg;
    for (int i = 0; i < CmiNumPes(); ++i) {
        int* v = (int*)CfutureWait(futures[i]);
        if (*v != i) CmiAbort("megacon future: PE %d's future %d holds %d", CmiMyPe(), i, *v);
        CfutureDestroy(futures[i]);
    }
    free(futures);
    Cpm_megacon_ack(CpmSend(0));
}

void future_moduleinit(void) {
    CpmInitializeThisModule();
}

void future_init(void) {
    futures = (Cfuture*)malloc(sizeof(Cfuture) * (size_t)CmiNumPes());
    for (int i = 0; i < CmiNumPes(); ++i) {
        futures[i] = CfutureCreate();
        Cpm_future_sendback(CpmSend(i), futures[i]);
    }
    CthAwaken(CthCreate(future_wait, 0, 0));
}
