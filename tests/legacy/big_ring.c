/* big_ring.c: a 1 MiB message (CmiAlloc) goes around the ring of PEs LAPS times, then a
 * 4 MiB one goes around once. The data pattern depends on the lap (PE 0 rewrites it at the
 * start of each lap) and every PE checks every byte and the size. PEs alternate between
 * forwarding the buffer itself (CmiSyncSendAndFree) and a copy (CmiSyncSend, then CmiFree,
 * scribbling over the buffer first: the copy must already be taken). */
#include <converse.h>

#include <stdlib.h>
#include <string.h>

#define LAPS 4
#define MIB (1024 * 1024)

typedef struct {
    char header[CmiMsgHeaderSizeBytes];
    int lap;
    int hops;
    int bytes; /* payload bytes after this struct */
    int big;   /* 1 for the 4 MiB message */
} big_msg;

typedef struct {
    char header[CmiMsgHeaderSizeBytes];
} small_msg;

static int big_handler_id, exit_handler_id;
static int visits;
static int finished;

static unsigned char pattern(int lap, int big, int i) {
    return (unsigned char)((i >> 3) * 7 + i + lap * 29 + big * 101);
}

static void write_pattern(big_msg* m) {
    unsigned char* data = (unsigned char*)(m + 1);
    for (int i = 0; i < m->bytes; ++i)
        data[i] = pattern(m->lap, m->big, i);
}

static big_msg* make(int bytes, int big) {
    big_msg* m = (big_msg*)CmiAlloc((int)sizeof(big_msg) + bytes);
    m->lap = 0;
    m->hops = 0;
    m->bytes = bytes;
    m->big = big;
    write_pattern(m);
    CmiSetHandler(m, big_handler_id);
    return m;
}

static void check_finished(void) {
    if (!finished) {
        CmiError("big_ring: PE %d exited before the exit broadcast arrived\n", CmiMyPe());
        _Exit(3);
    }
}

static void forward(big_msg* m) {
    const int next = (CmiMyPe() + 1) % CmiNumPes();
    const int size = (int)sizeof(big_msg) + m->bytes;
    ++m->hops;
    if ((m->hops + CmiMyPe()) % 2 == 0) {
        CmiSyncSendAndFree(next, size, m);
    } else {
        CmiSyncSend(next, size, m);
        memset(m + 1, 0xEE, (size_t)m->bytes); /* the send must have taken its copy */
        CmiFree(m);
    }
}

static void big_handler(void* msg) {
    big_msg* m = (big_msg*)msg;
    const unsigned char* data = (const unsigned char*)(m + 1);
    const int want_bytes = m->big ? 4 * MIB : MIB;
    ++visits;
    if (m->bytes != want_bytes || CmiSize(m) != (int)sizeof(big_msg) + want_bytes)
        CmiAbort("big_ring: PE %d got a %d-byte message saying %d payload bytes, expected %d + %d",
                 CmiMyPe(), CmiSize(m), m->bytes, (int)sizeof(big_msg), want_bytes);
    for (int i = 0; i < m->bytes; ++i)
        if (data[i] != pattern(m->lap, m->big, i))
            CmiAbort("big_ring: PE %d, %s message lap %d: byte %d is 0x%02x, expected 0x%02x",
                     CmiMyPe(), m->big ? "4 MiB" : "1 MiB", m->lap, i, data[i],
                     pattern(m->lap, m->big, i));
    if (CmiMyPe() == 0 && m->hops > 0) { /* a lap is complete */
        if (m->hops != (m->lap + 1) * CmiNumPes())
            CmiAbort("big_ring: after lap %d expected %d hops, counted %d", m->lap,
                     (m->lap + 1) * CmiNumPes(), m->hops);
        ++m->lap;
        if (!m->big && m->lap == LAPS) {
            CmiFree(m);
            forward(make(4 * MIB, 1));
            return;
        }
        if (m->big) {
            small_msg* e = (small_msg*)CmiAlloc(sizeof(small_msg));
            CmiFree(m);
            CmiPrintf("big_ring: %d laps of 1 MiB and 1 of 4 MiB on %d PEs ok\n", LAPS,
                      CmiNumPes());
            CmiSetHandler(e, exit_handler_id);
            CmiSyncBroadcastAllAndFree(sizeof(small_msg), e);
            return;
        }
        write_pattern(m);
    }
    forward(m);
}

static void exit_handler(void* msg) {
    /* Every PE, PE 0 included, sees the 1 MiB message once a lap and the 4 MiB one once. */
    const int expected = LAPS + 1;
    if (visits != expected)
        CmiAbort("big_ring: PE %d saw the big messages %d times, expected %d", CmiMyPe(), visits,
                 expected);
    CmiFree(msg);
    finished = 1;
    ConverseExit(); /* from inside a handler */
}

static void start(int argc, char** argv) {
    (void)argc;
    (void)argv;
    atexit(check_finished);
    big_handler_id = CmiRegisterHandler(big_handler);
    exit_handler_id = CmiRegisterHandler(exit_handler);
    if (CmiMyPe() == 0) forward(make(MIB, 0));
}

int main(int argc, char** argv) {
    ConverseInit(argc, argv, start, 0, 0);
    return 0;
}
