/* barrier_exit.c: the trivial program of the start-up measurements (docs/scale.md): every PE
 * starts, passes one barrier and exits. PE 0 says so. For scripts/bench-startup.sh: with -rss
 * every PE also prints its peak resident set (VmHWM), with -times PE 0 prints the wall clock
 * (CLOCK_REALTIME) when its start-up is done and when it passed the barrier. */
#include <converse.h>

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "peak_rss.h"

static double realtime(void) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void start(int argc, char** argv) {
    const double started = realtime();
    int rss = 0, times = 0;
    for (int i = 1; i < argc; ++i) {
        if (strcmp(argv[i], "-rss") == 0) rss = 1;
        if (strcmp(argv[i], "-times") == 0) times = 1;
    }
    CmiBarrier();
    if (CmiMyPe() == 0) CmiPrintf("barrier_exit: %d PEs passed the barrier\n", CmiNumPes());
    if (times && CmiMyPe() == 0)
        CmiPrintf("barrier_exit: PE 0 started at %.6f, passed the barrier at %.6f\n", started,
                  realtime());
    if (rss) CmiPrintf("barrier_exit: PE %d peak RSS %ld KiB\n", CmiMyPe(), peak_rss_kib());
}

int main(int argc, char** argv) {
    ConverseInit(argc, argv, start, 1, 0); /* usched: ConverseExit once start returns */
    return 0;
}
