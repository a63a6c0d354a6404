/* barrier_exit.c: the trivial program of the start-up measurements (docs/scale.md): every PE
 * starts, passes one barrier and exits. PE 0 says so. With -rss every PE also prints its
 * peak resident set (VmHWM), for scripts/bench-startup.sh. */
#include <converse.h>

#include <stdio.h>
#include <string.h>

#include "peak_rss.h"

static void start(int argc, char** argv) {
    int rss = 0;
    for (int i = 1; i < argc; ++i)
        if (strcmp(argv[i], "-rss") == 0) rss = 1;
    CmiBarrier();
    if (CmiMyPe() == 0) CmiPrintf("barrier_exit: %d PEs passed the barrier\n", CmiNumPes());
    if (rss) CmiPrintf("barrier_exit: PE %d peak RSS %ld KiB\n", CmiMyPe(), peak_rss_kib());
}

int main(int argc, char** argv) {
    ConverseInit(argc, argv, start, 1, 0); /* usched: ConverseExit once start returns */
    return 0;
}
