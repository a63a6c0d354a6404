/* barrier_exit.c: the trivial program of the start-up measurements (docs/scale.md): every PE
 * starts, passes one barrier and exits. PE 0 says so. */
#include <converse.h>

static void start(int argc, char** argv) {
    (void)argc;
    (void)argv;
    CmiBarrier();
    if (CmiMyPe() == 0) CmiPrintf("barrier_exit: %d PEs passed the barrier\n", CmiNumPes());
}

int main(int argc, char** argv) {
    ConverseInit(argc, argv, start, 1, 0); /* usched: ConverseExit once start returns */
    return 0;
}
