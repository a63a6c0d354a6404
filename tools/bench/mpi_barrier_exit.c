/* mpi_barrier_exit.c: Open MPI's twin of tests/startup/barrier_exit.c for
 * scripts/bench-startup.sh (built there with mpicc, not by CMake): every rank starts, passes
 * one barrier and exits; with -rss every rank prints its peak resident set (VmHWM), with
 * -times rank 0 prints the wall clock when MPI_Init returned and when it passed the barrier. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "peak_rss.h"

static double realtime(void) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(int argc, char** argv) {
    int rank = 0, size = 0, rss = 0, times = 0;
    for (int i = 1; i < argc; ++i) {
        if (strcmp(argv[i], "-rss") == 0) rss = 1;
        if (strcmp(argv[i], "-times") == 0) times = 1;
    }
    MPI_Init(&argc, &argv);
    const double started = realtime();
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) printf("barrier_exit: %d PEs passed the barrier\n", size);
    if (times && rank == 0)
        printf("barrier_exit: PE 0 started at %.6f, passed the barrier at %.6f\n", started,
               realtime());
    if (rss) printf("barrier_exit: PE %d peak RSS %ld KiB\n", rank, peak_rss_kib());
    fflush(stdout);
    MPI_Finalize();
    return 0;
}
