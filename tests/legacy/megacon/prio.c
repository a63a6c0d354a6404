/* prio.c: Cpm's queued destinations. Each PE enqueues ten invocations on itself from one
 * handler with CpmEnqueueIFIFO priorities in scrambled order, and they run in priority
 * order; then one CpmEnqueueLIFO pair runs last-in first; a user-defined pointer type
 * (CpmDeclarePointer(box)) carries each step's number. */
#include <converse.h>

#include "modules.h"

typedef int* box;
CpmDeclarePointer(box);
#define CpmPtrSize_box(v) sizeof(int)
#define CpmPtrPack_box(p, v) memcpy((p), (v), sizeof(int))
#define CpmPtrUnpack_box(v) \
    do {                    \
    } while (0)
#define CpmPtrFree_box(v) \
    do {                  \
    } while (0)

#include "prio.cpm.h"

#define STEPS 10

static int next_step, lifo_seen;

CpmInvokable prio_lifo(int which) {
    if (which != 2 - lifo_seen)
        CmiAbort("megacon prio: LIFO ran %d as number %d", which, lifo_seen);
    if (++lifo_seen == 2) Cpm_megacon_ack(CpmSend(0));
}

CpmInvokable prio_step(box step) {
    if (*step != next_step)
        CmiAbort("megacon prio: PE %d ran step %d, expected %d", CmiMyPe(), *step, next_step);
    if (++next_step == STEPS) {
        Cpm_prio_lifo(CpmEnqueueLIFO(CmiMyPe()), 1);
        Cpm_prio_lifo(CpmEnqueueLIFO(CmiMyPe()), 2);
    }
}

CpmInvokable prio_begin(void) {
    static const int order[STEPS] = {7, 2, 9, 0, 4, 1, 8, 3, 6, 5};
    for (int i = 0; i < STEPS; ++i) {
        int step = order[i];
        Cpm_prio_step(CpmEnqueueIFIFO(CmiMyPe(), step - 100), &step);
    }
}

void prio_moduleinit(void) {
    CpmInitializeThisModule();
}

void prio_init(void) {
    next_step = 0;
    lifo_seen = 0;
    Cpm_prio_begin(CpmSend(CmiMyPe()));
}
