/* ring.c: a Cpm invocation hops around the ring of PEs 100 times, carrying a string, an
 * array of strings and an array of doubles; every hop checks them. */
#include <converse.h>

#include "modules.h"
#include "ring.cpm.h"

static void ring_fail(const char* what) {
    CmiAbort("megacon ring: PE %d: %s", CmiMyPe(), what);
}

CpmInvokable ring_hop(int steps, CpmStr greeting, CpmDim nwords, CpmStr* words, CpmDim nvalues,
                      double* values) {
    if (strcmp(greeting, "Howdy, Dude.") != 0) ring_fail("the string arrived changed");
    if (nwords != 4 || strcmp(words[0], "this") || strcmp(words[1], "is") ||
        strcmp(words[2], "a") || strcmp(words[3], "test"))
        ring_fail("the array of strings arrived changed");
    if (nvalues != 3 || values[0] != 0.5 || values[1] != -2.25 || values[2] != 1e10)
        ring_fail("the array of doubles arrived changed");
    if (steps > 0)
        Cpm_ring_hop(CpmSend((CmiMyPe() + 1) % CmiNumPes()), steps - 1, greeting, nwords, words,
                     nvalues, values);
    else
        Cpm_megacon_ack(CpmSend(0));
}

void ring_moduleinit(void) {
    CpmInitializeThisModule();
}

void ring_init(void) {
    char* words[4] = {"this", "is", "a", "test"};
    double values[3] = {0.5, -2.25, 1e10};
    if (CmiMyPe() == 0) Cpm_ring_hop(CpmSend(0), 100, "Howdy, Dude.", 4, words, 3, values);
}
