/* fibthr.c: fib(14) by threads: each fibthr runs in a thread made on a random PE by
 * CpmMakeThreadSize, starts two more and suspends until both have added their results to
 * its accumulator. The accumulator travels as a simple type (a pointer, meaningful only on
 * its own PE): each result goes back to the PE that owns it, with Cpm_accum_add. */
#include <converse.h>

#include "modules.h"

typedef struct accum {
    int total;
    int countdown;
    CthThread pending;
} * accum;

CpmDeclareSimple(accum);
#define CpmPack_accum(x) \
    do {                 \
    } while (0)
#define CpmUnpack_accum(x) \
    do {                   \
    } while (0)

#include "fibthr.cpm.h"

#define FIB_N 14
#define FIB_RESULT 377

static int randpe(void) {
    return (int)(((unsigned)CrnRand() >> 11) % (unsigned)CmiNumPes());
}

CpmInvokable accum_add(accum a, int value) {
    a->total += value;
    if (--a->countdown == 0 && a->pending) CthAwaken(a->pending);
}

CpmInvokable fibthr(int n, int pe, accum resp) {
    int result;
    if (n < 2) {
        result = n;
    } else {
        struct accum acc;
        acc.total = 0;
        acc.countdown = 2;
        acc.pending = CthSelf();
        Cpm_fibthr(CpmMakeThreadSize(randpe(), 64 * 1024), n - 1, CmiMyPe(), &acc);
        Cpm_fibthr(CpmMakeThreadSize(randpe(), 64 * 1024), n - 2, CmiMyPe(), &acc);
        CthSuspend();
        result = acc.total;
    }
    Cpm_accum_add(CpmSend(pe), resp, result);
}

CpmInvokable fibthr_top(void) {
    struct accum acc;
    acc.total = 0;
    acc.countdown = 1;
    acc.pending = CthSelf();
    Cpm_fibthr(CpmMakeThread(randpe()), FIB_N, CmiMyPe(), &acc);
    CthSuspend();
    if (acc.total != FIB_RESULT)
        CmiAbort("megacon fibthr: fib(%d) gave %d, expected %d", FIB_N, acc.total, FIB_RESULT);
    Cpm_megacon_ack(CpmSend(0));
}

void fibthr_moduleinit(void) {
    CpmInitializeThisModule();
}

void fibthr_init(void) {
    if (CmiMyPe() == 0) Cpm_fibthr_top(CpmMakeThread(0));
}
