/* coverse-halo-perf: two PEs exchange halos (default 64 KiB, 10^4 exchanges) through plain
 * sends and through persistent handles (CmiCreatePersistent + CmiUsePersistentHandle), side by
 * side in one run: blocks of exchanges alternate between the two ways, and the report gives
 * each way's median time per exchange over the blocks and their ratio. Only PE 0 prints.
 * Usage: coverse-run -n 2 --bind coverse-halo-perf [-bytes N] [-exchanges N] [-blocks N]
 *        [-h | --help] */
#define _POSIX_C_SOURCE 200809L
#include <converse.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    char header[CmiMsgHeaderSizeBytes];
    int seq;
} halo_head;

static int halo_handler, done_handler;
static int bytes = 65536, exchanges = 10000, blocks = 10;
static int use_persistent, left, block_now;
static PersistentHandle to_peer;
static char* buf;
static double block_start, *plain_us, *persistent_us;

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static void send_halo(int seq) {
    ((halo_head*)buf)->seq = seq;
    CmiSetHandler(buf, halo_handler);
    if (use_persistent) CmiUsePersistentHandle(&to_peer, 1);
    CmiSyncSend(1 - CmiMyPe(), bytes, buf);
    if (use_persistent) CmiUsePersistentHandle(NULL, 0);
}

static int cmp(const void* a, const void* b) {
    const double x = *(const double*)a, y = *(const double*)b;
    return x < y ? -1 : x > y;
}

static double median(double* v, int n) {
    qsort(v, n, sizeof *v, cmp);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void start_block(void);

static void on_halo(void* m) {
    const int seq = ((halo_head*)m)->seq;
    CmiFree(m);
    if (CmiMyPe() == 1) { /* the mode travels in the sign of seq: answer the same way */
        use_persistent = seq < 0;
        send_halo(seq);
        return;
    }
    if (--left > 0) {
        send_halo(seq);
        return;
    }
    const double per = (now_us() - block_start) / (exchanges / blocks);
    (use_persistent ? persistent_us : plain_us)[block_now / 2] = per;
    if (++block_now < 2 * blocks) {
        start_block();
        return;
    }
    const double p = median(plain_us, blocks), q = median(persistent_us, blocks);
    printf(
        "coverse-halo-perf: %d exchanges of %d-byte halos between PE 0 and PE 1, %d blocks "
        "per way, alternating\n",
        exchanges, bytes, blocks);
    printf("  plain sends          %8.2f us per exchange (median of blocks)\n", p);
    printf("  persistent handles   %8.2f us per exchange (median of blocks)\n", q);
    printf("  persistent / plain   %8.2f\n", q / p);
    fflush(stdout);
    for (int pe = 0; pe < 2; ++pe) {
        halo_head* d = (halo_head*)CmiAlloc(sizeof(halo_head));
        CmiSetHandler(d, done_handler);
        CmiSyncSendAndFree(pe, sizeof(halo_head), d);
    }
}

static void start_block(void) {
    use_persistent = block_now % 2; /* plain, persistent, plain, ... */
    left = exchanges / blocks;
    block_start = now_us();
    send_halo(use_persistent ? -1 : 1);
}

static void on_done(void* m) {
    CmiFree(m);
    CsdExitScheduler();
}

static void usage(int status) {
    if (CmiMyPe() == 0)
        printf(
            "Usage: coverse-run -n 2 --bind coverse-halo-perf [-bytes N] [-exchanges N] "
            "[-blocks N]\nTwo PEs exchange halos through plain sends and through persistent "
            "handles,\nalternating in blocks; prints each way's median time per exchange "
            "and the ratio.\n");
    exit(status);
}

static void start(int argc, char** argv) {
    for (int i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) usage(0);
        if (i + 1 >= argc) usage(2);
        if (!strcmp(argv[i], "-bytes"))
            bytes = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-exchanges"))
            exchanges = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-blocks"))
            blocks = atoi(argv[++i]);
        else
            usage(2);
    }
    if (CmiNumPes() != 2) CmiAbort("coverse-halo-perf needs 2 PEs (coverse-run -n 2)");
    if (bytes < (int)sizeof(halo_head)) bytes = sizeof(halo_head);
    if (blocks < 1 || exchanges < blocks)
        CmiAbort("coverse-halo-perf: -exchanges must be at least -blocks (>= 1)");
    halo_handler = CmiRegisterHandler(on_halo);
    done_handler = CmiRegisterHandler(on_done);
    buf = (char*)CmiAlloc(bytes);
    memset(buf, 7, bytes);
    plain_us = calloc(blocks, sizeof(double));
    persistent_us = calloc(blocks, sizeof(double));
    to_peer = CmiCreatePersistent(1 - CmiMyPe(), bytes);
    CmiBarrier();
    if (CmiMyPe() == 0) start_block();
}

int main(int argc, char** argv) {
    ConverseInit(argc, argv, start, 0, 0);
    return 0;
}
