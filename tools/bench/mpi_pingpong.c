/* mpi_pingpong: the Open MPI baseline for bench_net — the same ping-pong (8 B, 1 KiB,
 * 64 KiB one-way latency, p50 and mean of half round trips) and 1 MiB windowed bandwidth,
 * printed as bench_net's JSON lines with "impl":"openmpi-tcp". Run by scripts/bench-net.sh
 * with the TCP transport forced (--mca btl tcp,self). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char** argv) {
    int rank, iterations = 2000, rounds = 20, window = 16;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (argc > 1) iterations = atoi(argv[1]);
    char* buf = calloc(1 << 20, 1);
    double* rtt = calloc((size_t)iterations, sizeof(double));
    const int sizes[] = {8, 1024, 65536};
    for (int s = 0; s < 3; ++s) {
        const int bytes = sizes[s], iters = bytes >= 65536 ? iterations / 4 : iterations;
        for (int i = -100; i < iters; ++i) {
            double t0 = MPI_Wtime();
            if (rank == 0) {
                MPI_Send(buf, bytes, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
                MPI_Recv(buf, bytes, MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            } else {
                MPI_Recv(buf, bytes, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                MPI_Send(buf, bytes, MPI_BYTE, 0, 0, MPI_COMM_WORLD);
            }
            if (i >= 0) rtt[i] = (MPI_Wtime() - t0) * 1e6;
        }
        if (rank == 0) {
            double sum = 0;
            for (int i = 0; i < iters; ++i) sum += rtt[i];
            qsort(rtt, (size_t)iters, sizeof(double), cmp);
            printf("{\"test\":\"pingpong\",\"impl\":\"openmpi-tcp\",\"bytes\":%d,\"lat_us\":%.2f,"
                   "\"lat_mean_us\":%.2f}\n",
                   bytes, rtt[iters / 2] / 2, sum / iters / 2);
        }
    }
    MPI_Request req[64];
    double t0 = MPI_Wtime();
    for (int r = 0; r < rounds; ++r) {
        if (rank == 0) {
            for (int w = 0; w < window; ++w)
                MPI_Isend(buf, 1 << 20, MPI_BYTE, 1, 1, MPI_COMM_WORLD, &req[w]);
            MPI_Waitall(window, req, MPI_STATUSES_IGNORE);
            MPI_Recv(buf, 1, MPI_BYTE, 1, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            for (int w = 0; w < window; ++w)
                MPI_Recv(buf, 1 << 20, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(buf, 1, MPI_BYTE, 0, 2, MPI_COMM_WORLD);
        }
    }
    double secs = MPI_Wtime() - t0;
    if (rank == 0)
        printf("{\"test\":\"bw\",\"impl\":\"openmpi-tcp\",\"bytes\":%d,\"mbps\":%.1f}\n", 1 << 20,
               (double)(1 << 20) * window * rounds / secs / 1e6);
    free(rtt);
    free(buf);
    MPI_Finalize();
    return 0;
}
