/* mpi_perf: coverse-perf's pingpong, bw and rate tests in MPI, for scripts/bench-perf.sh.
 * Same sizes, same iteration schedule (docs/perf.md), same JSON lines with "impl":"mpi".
 * Built by the script with mpicc (CI has no MPI); rank 0 prints. Ranks 0 and 1 take part.
 *   pingpong: MPI_Send/MPI_Recv of one reused buffer; one-way = round trip / 2.
 *   bw, rate: rank 0 MPI_Isends a window of W messages, rank 1 has W MPI_Irecvs posted,
 *             and answers each window with a 1-byte ack (the osu_bw scheme). */
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "perf_args.h"

enum { PINGPONG, BW, RATE, NTESTS };
static const char* const test_names[NTESTS] = {"pingpong", "bw", "rate"};
static int world_size; /* the JSON lines' "pes" */

#define KiB 1024L
#define MiB (1024L * KiB)
#define MAX_SIZES 64

struct options {
    int tests[NTESTS]; /* 1: run it */
    int any_test;
    long sizes[MAX_SIZES];
    int nsizes;
    long iters, warmup, window;
    int quick;
};

static const long pingpong_sizes[] = {8,        64,       512,       KiB, 4 * KiB,
                                      16 * KiB, 64 * KiB, 256 * KiB, MiB, 4 * MiB};
static const long bw_sizes[] = {4 * KiB, 16 * KiB, 64 * KiB, 256 * KiB, MiB, 4 * MiB};

static void usage(FILE* f) {
    fprintf(f,
            "Usage: mpirun -np 2 mpi_perf [options]\n"
            "coverse-perf's pingpong, bw and rate tests over MPI (JSON lines, \"impl\":\"mpi\").\n"
            "  --tests LIST   pingpong,bw,rate (default: all three)\n"
            "  --sizes LIST   payload bytes for pingpong and bw, e.g. 8,1K,64K,4M\n"
            "  --iters N      measured iterations for every test and size\n"
            "  --warmup N     unmeasured iterations first (default: a tenth of --iters)\n"
            "  --window W     messages per acknowledgement in bw and rate (default 64)\n"
            "  --quick        few iterations\n"
            "  --json         accepted for symmetry with coverse-perf (output is always JSON)\n"
            "  -h, --help     this text\n");
}

static long clampl(long v, long lo, long hi) {
    return v < lo ? lo : v > hi ? hi : v;
}

/* 0: fine, 1: --help, 2: bad argument (message in err). */
static int parse_options(int argc, char** argv, struct options* o, char* err, size_t errlen) {
    memset(o, 0, sizeof *o);
    o->warmup = -1;
    o->window = 64;
    for (int i = 1; i < argc; ++i) {
        static const char* const with_value[] = {"--tests",  "--sizes",  "--iters",
                                                 "--warmup", "--window", NULL};
        char name[32];
        const char *a, *v;
        if (perf_next_flag(argc, argv, &i, with_value, name, &a, &v, err, errlen)) return 2;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return 1;
        if (!strcmp(a, "--json")) continue;
        if (!strcmp(a, "--quick")) {
            o->quick = 1;
        } else if (!strcmp(a, "--tests")) {
            char list[256];
            snprintf(list, sizeof list, "%s", v);
            memset(o->tests, 0, sizeof o->tests);
            for (char* t = strtok(list, ","); t; t = strtok(NULL, ",")) {
                int k = 0;
                while (k < NTESTS && strcmp(t, test_names[k]))
                    ++k;
                if (k == NTESTS) {
                    snprintf(err, errlen, "--tests: unknown test \"%s\" (pingpong, bw, rate)", t);
                    return 2;
                }
                o->tests[k] = 1;
            }
            o->any_test = 1;
        } else if (!strcmp(a, "--sizes")) {
            char list[512];
            snprintf(list, sizeof list, "%s", v);
            o->nsizes = 0;
            for (char* t = strtok(list, ","); t; t = strtok(NULL, ",")) {
                if (o->nsizes == MAX_SIZES ||
                    !perf_parse_size(t, INT_MAX - 16, &o->sizes[o->nsizes])) {
                    snprintf(err, errlen, "--sizes: \"%s\" is not a size (or too many sizes)", t);
                    return 2;
                }
                ++o->nsizes;
            }
        } else if (!strcmp(a, "--iters") || !strcmp(a, "--warmup") || !strcmp(a, "--window")) {
            long n;
            long min = !strcmp(a, "--warmup") ? 0 : 1;
            long max = !strcmp(a, "--window") ? 100000 : 100000000;
            if (!perf_parse_long(v, min, max, &n)) {
                snprintf(err, errlen, "%s: \"%s\" is not a count from %ld to %ld", a, v, min, max);
                return 2;
            }
            if (!strcmp(a, "--iters"))
                o->iters = n;
            else if (!strcmp(a, "--warmup"))
                o->warmup = n;
            else
                o->window = n;
        } else {
            snprintf(err, errlen, "unknown argument \"%s\"", argv[i]);
            return 2;
        }
    }
    if (!o->any_test)
        for (int k = 0; k < NTESTS; ++k)
            o->tests[k] = 1;
    return 0;
}

/* The schedule of tools/perf/perf_options.cpp (plan_for): keep the two in step. */
static void plan(int test, long bytes, const struct options* o, long* warmup, long* iters) {
    long n;
    if (test == PINGPONG) {
        long base = o->quick ? 50 : 10000, floor = o->quick ? 5 : 100;
        n = bytes <= 4 * KiB ? base : clampl(base * (4 * KiB) / bytes, floor, base);
    } else if (test == BW) {
        long target = o->quick ? 16 * MiB : 512 * MiB;
        n = clampl(target / (bytes * o->window), o->quick ? 2 : 4, o->quick ? 20 : 1000);
    } else {
        n = o->quick ? 20 : 1000;
    }
    if (o->iters > 0) n = o->iters;
    *iters = n;
    *warmup = o->warmup >= 0 ? o->warmup : (n / 10 > 1 ? n / 10 : 1);
}

static int cmp_double(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b;
    return x < y ? -1 : x > y;
}

static void pingpong(int rank, long bytes, const struct options* o, char* buf) {
    long warmup, iters;
    plan(PINGPONG, bytes, o, &warmup, &iters);
    double* rtt = malloc((size_t)iters * sizeof *rtt);
    for (long i = -warmup; i < iters; ++i) {
        double t0 = MPI_Wtime();
        if (rank == 0) {
            MPI_Send(buf, (int)bytes, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
            MPI_Recv(buf, (int)bytes, MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(buf, (int)bytes, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(buf, (int)bytes, MPI_BYTE, 0, 0, MPI_COMM_WORLD);
        }
        if (i >= 0) rtt[i] = (MPI_Wtime() - t0) * 1e6;
    }
    if (rank == 0) {
        double sum = 0;
        for (long i = 0; i < iters; ++i)
            sum += rtt[i];
        qsort(rtt, (size_t)iters, sizeof *rtt, cmp_double);
        double p50 = iters % 2 ? rtt[iters / 2] : (rtt[iters / 2 - 1] + rtt[iters / 2]) / 2;
        printf(
            "{\"test\":\"pingpong\",\"impl\":\"mpi\",\"bytes\":%ld,\"lat_us\":%.3f,"
            "\"p50_us\":%.3f,\"iters\":%ld,\"pes\":%d}\n",
            bytes, sum / (double)iters / 2, p50 / 2, iters, world_size);
        fflush(stdout);
    }
    free(rtt);
}

/* Windows of messages, one ack each; returns the measured seconds (rank 0). */
static double windows(int rank, long bytes, long warmup, long iters, long window, char* buf,
                      MPI_Request* req) {
    double start = MPI_Wtime();
    char ack = 0;
    for (long r = 0; r < warmup + iters; ++r) {
        if (r == warmup) start = MPI_Wtime();
        if (rank == 0) {
            for (long w = 0; w < window; ++w)
                MPI_Isend(buf, (int)bytes, MPI_BYTE, 1, 1, MPI_COMM_WORLD, &req[w]);
            MPI_Waitall((int)window, req, MPI_STATUSES_IGNORE);
            MPI_Recv(&ack, 1, MPI_BYTE, 1, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            for (long w = 0; w < window; ++w)
                MPI_Irecv(buf, (int)bytes, MPI_BYTE, 0, 1, MPI_COMM_WORLD, &req[w]);
            MPI_Waitall((int)window, req, MPI_STATUSES_IGNORE);
            MPI_Send(&ack, 1, MPI_BYTE, 0, 2, MPI_COMM_WORLD);
        }
    }
    return MPI_Wtime() - start;
}

int main(int argc, char** argv) {
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    world_size = size;

    struct options o;
    char err[256] = "";
    int rc = parse_options(argc, argv, &o, err, sizeof err);
    if (rc) {
        if (rank == 0) {
            if (rc == 2) fprintf(stderr, "mpi_perf: %s\n", err);
            usage(rc == 1 ? stdout : stderr);
        }
        MPI_Finalize();
        return rc == 1 ? 0 : 2;
    }
    if (size < 2) {
        if (rank == 0) fprintf(stderr, "mpi_perf: every test needs 2 ranks; skipped\n");
        MPI_Finalize();
        return 0;
    }

    long max_bytes = 8;
    for (int i = 0; i < o.nsizes; ++i)
        if (o.sizes[i] > max_bytes) max_bytes = o.sizes[i];
    if (!o.nsizes) max_bytes = 4 * MiB;
    char* buf = malloc((size_t)max_bytes);
    memset(buf, 0x5a, (size_t)max_bytes);
    MPI_Request* req = malloc((size_t)o.window * sizeof *req);

    if (rank < 2) {
        if (o.tests[PINGPONG]) {
            int n = o.nsizes ? o.nsizes : (int)(sizeof pingpong_sizes / sizeof *pingpong_sizes);
            for (int i = 0; i < n; ++i)
                pingpong(rank, o.nsizes ? o.sizes[i] : pingpong_sizes[i], &o, buf);
        }
        if (o.tests[BW]) {
            int n = o.nsizes ? o.nsizes : (int)(sizeof bw_sizes / sizeof *bw_sizes);
            for (int i = 0; i < n; ++i) {
                long bytes = o.nsizes ? o.sizes[i] : bw_sizes[i], warmup, iters;
                plan(BW, bytes, &o, &warmup, &iters);
                double secs = windows(rank, bytes, warmup, iters, o.window, buf, req);
                if (rank == 0) {
                    printf(
                        "{\"test\":\"bw\",\"impl\":\"mpi\",\"bytes\":%ld,\"mbps\":%.3f,"
                        "\"window\":%ld,\"iters\":%ld,\"pes\":%d}\n",
                        bytes, (double)bytes * (double)o.window * (double)iters / secs / 1e6,
                        o.window, iters, world_size);
                    fflush(stdout);
                }
            }
        }
        if (o.tests[RATE]) {
            long warmup, iters;
            plan(RATE, 8, &o, &warmup, &iters);
            double secs = windows(rank, 8, warmup, iters, o.window, buf, req);
            if (rank == 0) {
                printf(
                    "{\"test\":\"rate\",\"impl\":\"mpi\",\"bytes\":8,\"msgs_per_s\":%.0f,"
                    "\"window\":%ld,\"iters\":%ld,\"pes\":%d}\n",
                    (double)o.window * (double)iters / secs, o.window, iters, world_size);
                fflush(stdout);
            }
        }
    }
    free(req);
    free(buf);
    MPI_Finalize();
    return 0;
}
