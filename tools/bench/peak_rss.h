/* peak_rss.h: a process's peak resident set (VmHWM) in KiB, -1 where /proc cannot say; for
 * the start-up measurements' trivial programs (tests/startup/barrier_exit.c and
 * mpi_barrier_exit.c), plain C so that mpicc builds it too. */
#pragma once

#include <stdio.h>

static inline long peak_rss_kib(void) {
    FILE* f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;
    if (!f) return -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %ld kB", &kib) == 1) break;
    fclose(f);
    return kib;
}
