#define _POSIX_C_SOURCE 200809L
/* slow_receiver.c: PE 0 sends COUNT messages of each SIZE to PE 1 as fast as CmiSyncSend
 * lets it, while PE 1's handler spends SPIN microseconds on each (a receiver about 100x
 * slower than its sender). Every message must arrive, in order, with its payload; the
 * receiver's and the sender's peak RSS above their idle size must stay under LIMIT MiB
 * (back-pressure, not a growing queue). Each PE prints its peak growth.
 * Usage: slow_receiver [-count N] [-spin US] [-limit MIB] [-sizes 8,1024,16384] */
#include <converse.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#define MAX_SIZES 8

typedef struct {
    char header[CmiMsgHeaderSizeBytes];
    int round;
    int seq;
} flood_head;

static int data_handler, ack_handler, done_handler;
static long count = 100000, spin_us = 30, limit_mib = 64;
static int sizes[MAX_SIZES], nsizes, round_now, expected;
static long idle_kib;
static char* buffer;

static long peak_kib(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_maxrss;
}

static long rss_kib(void) {
    FILE* f = fopen("/proc/self/statm", "r");
    long pages = 0, resident = 0;
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
        fclose(f);
    }
    return resident * 4;
}

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static void report_and_check(const char* who) {
    const long grew = (peak_kib() - idle_kib) / 1024;
    CmiPrintf("slow_receiver: %s PE %d peak RSS %ld MiB above idle (limit %ld)\n", who, CmiMyPe(),
              grew, limit_mib);
    if (grew >= limit_mib)
        CmiAbort("slow_receiver: PE %d grew %ld MiB, over the %ld MiB limit: a queue is unbounded",
                 CmiMyPe(), grew, limit_mib);
}

static void send_round(void);

static void data(void* m) {
    flood_head* h = (flood_head*)m;
    const int size = CmiSize(m);
    if (h->round != round_now || h->seq != expected || size != sizes[round_now])
        CmiAbort("slow_receiver: expected message %d of round %d (%d B), got %d of round %d (%d B)",
                 expected, round_now, sizes[round_now], h->seq, h->round, size);
    const unsigned char* p = (const unsigned char*)m + sizeof(flood_head);
    for (int i = 0; i < size - (int)sizeof(flood_head); i += 97)
        if (p[i] != (unsigned char)(h->seq + i))
            CmiAbort("slow_receiver: message %d of round %d has a wrong byte at %d", h->seq,
                     h->round, i);
    CmiFree(m);
    const double until = now_us() + spin_us;
    while (now_us() < until) {
    }
    if (++expected == count) {
        flood_head* a = (flood_head*)CmiAlloc(sizeof(flood_head));
        CmiSetHandler(a, ack_handler);
        a->round = round_now;
        CmiSyncSendAndFree(0, sizeof(flood_head), a);
        expected = 0;
        ++round_now;
        if (round_now == nsizes) report_and_check("receiver");
    }
}

static void ack(void* m) {
    CmiFree(m);
    ++round_now;
    if (round_now < nsizes) {
        send_round();
        return;
    }
    report_and_check("sender");
    CmiPrintf("slow_receiver: %ld messages of each of %d sizes arrived in order\n", count, nsizes);
    for (int pe = 0; pe < CmiNumPes(); ++pe) {
        flood_head* d = (flood_head*)CmiAlloc(sizeof(flood_head));
        CmiSetHandler(d, done_handler);
        CmiSyncSendAndFree(pe, sizeof(flood_head), d);
    }
}

static void done(void* m) {
    CmiFree(m);
    CsdExitScheduler();
}

static void send_round(void) {
    const int size = sizes[round_now];
    flood_head* h = (flood_head*)buffer;
    CmiSetHandler(buffer, data_handler);
    h->round = round_now;
    for (long k = 0; k < count; ++k) {
        h->seq = (int)k;
        unsigned char* p = (unsigned char*)buffer + sizeof(flood_head);
        for (int i = 0; i < size - (int)sizeof(flood_head); i += 97)
            p[i] = (unsigned char)(k + i);
        CmiSyncSend(1, size, buffer);
    }
}

static void start(int argc, char** argv) {
    const char* list = "8,1024,16384";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-count"))
            count = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "-spin"))
            spin_us = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "-limit"))
            limit_mib = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "-sizes"))
            list = argv[i + 1];
        else
            CmiAbort("usage: slow_receiver [-count N] [-spin US] [-limit MIB] [-sizes A,B]");
    }
    char copy[256];
    snprintf(copy, sizeof copy, "%s", list);
    for (char* t = strtok(copy, ","); t && nsizes < MAX_SIZES; t = strtok(NULL, ",")) {
        const int s = atoi(t);
        sizes[nsizes++] = s < (int)sizeof(flood_head) ? (int)sizeof(flood_head) : s;
    }
    data_handler = CmiRegisterHandler(data);
    ack_handler = CmiRegisterHandler(ack);
    done_handler = CmiRegisterHandler(done);
    if (CmiNumPes() != 2) CmiAbort("slow_receiver needs 2 PEs");
    buffer = (char*)CmiAlloc(sizes[0] > 16384 ? sizes[0] : 65536);
    idle_kib = rss_kib();
    if (CmiMyPe() == 0) send_round();
}

int main(int argc, char** argv) {
    ConverseInit(argc, argv, start, 0, 0);
    return 0;
}
