/* flood.c: every PE floods every other PE (itself when it is alone) with COUNT messages of
 * varying sizes, sent in one burst from the start function: even sequence numbers go out
 * with CmiSyncSend from a buffer on the stack (scribbled over right after the call), odd ones
 * are CmiAlloc'd and go out with CmiSyncSendAndFree. Receivers check the payload, that
 * nothing is lost or duplicated, and that each sender's messages arrive in the order sent.
 * Usage: flood [-count N]   (default 5000 per destination) */
#include <converse.h>

#include <stdlib.h>
#include <string.h>

#define MAX_PAYLOAD 3000 /* payloads range over both sides of the small-message boundary */

typedef struct {
    char header[CmiMsgHeaderSizeBytes];
    int src;
    int seq;
    int len;
} flood_msg;

typedef struct {
    char header[CmiMsgHeaderSizeBytes];
    int pe;
} done_msg;

typedef struct {
    char header[CmiMsgHeaderSizeBytes];
} exit_msg;

static int flood_handler_id, done_handler_id, exit_handler_id;
static int count = 5000;
static int* next_seq; /* next_seq[src]: the sequence number expected next from src */
static int senders;   /* PEs that send to this one */
static int senders_complete;
static int done_pes; /* PE 0: PEs that received everything */
static int finished;

static int sends_to(int from, int to) {
    return CmiNumPes() == 1 || from != to;
}

static int payload_len(int src, int seq) {
    return (seq * 97 + src * 13) % MAX_PAYLOAD;
}

static unsigned char pattern(int src, int seq, int i) {
    return (unsigned char)(src * 11 + seq * 3 + i);
}

static void fill(flood_msg* m, int src, int seq) {
    unsigned char* data = (unsigned char*)(m + 1);
    m->src = src;
    m->seq = seq;
    m->len = payload_len(src, seq);
    for (int i = 0; i < m->len; ++i)
        data[i] = pattern(src, seq, i);
    CmiSetHandler(m, flood_handler_id);
}

static void check_finished(void) {
    if (!finished) {
        CmiError("flood: PE %d exited before the exit broadcast arrived\n", CmiMyPe());
        _Exit(3);
    }
}

static void flood_handler(void* msg) {
    flood_msg* m = (flood_msg*)msg;
    const unsigned char* data = (const unsigned char*)(m + 1);
    if (m->src < 0 || m->src >= CmiNumPes() || !sends_to(m->src, CmiMyPe()))
        CmiAbort("flood: PE %d got a message from PE %d, which should not send to it", CmiMyPe(),
                 m->src);
    if (m->seq != next_seq[m->src])
        CmiAbort("flood: PE %d expected message %d from PE %d next, got %d (%s)", CmiMyPe(),
                 next_seq[m->src], m->src, m->seq,
                 m->seq < next_seq[m->src] ? "a duplicate or reordered message"
                                           : "one was lost or reordered");
    if (m->len != payload_len(m->src, m->seq))
        CmiAbort("flood: PE %d, message %d from PE %d: length %d, expected %d", CmiMyPe(), m->seq,
                 m->src, m->len, payload_len(m->src, m->seq));
    for (int i = 0; i < m->len; ++i)
        if (data[i] != pattern(m->src, m->seq, i))
            CmiAbort("flood: PE %d, message %d from PE %d: byte %d is 0x%02x, expected 0x%02x",
                     CmiMyPe(), m->seq, m->src, i, data[i], pattern(m->src, m->seq, i));
    ++next_seq[m->src];
    if (next_seq[m->src] == count && ++senders_complete == senders) {
        done_msg d;
        d.pe = CmiMyPe();
        CmiSetHandler(&d, done_handler_id);
        CmiSyncSend(0, sizeof d, &d);
    }
    CmiFree(m);
}

static void done_handler(void* msg) {
    CmiFree(msg);
    if (++done_pes < CmiNumPes()) return;
    CmiPrintf("flood: %d messages from each PE to each other PE on %d PEs ok\n", count,
              CmiNumPes());
    exit_msg* e = (exit_msg*)CmiAlloc(sizeof(exit_msg));
    CmiSetHandler(e, exit_handler_id);
    CmiSyncBroadcastAllAndFree(sizeof(exit_msg), e);
}

static void exit_handler(void* msg) {
    for (int p = 0; p < CmiNumPes(); ++p) {
        const int expected = sends_to(p, CmiMyPe()) ? count : 0;
        if (next_seq[p] != expected)
            CmiAbort("flood: PE %d received %d messages from PE %d at exit, expected %d", CmiMyPe(),
                     next_seq[p], p, expected);
    }
    CmiFree(msg);
    free(next_seq);
    finished = 1;
    CsdExitScheduler();
}

static void start(int argc, char** argv) {
    struct {
        flood_msg m;
        unsigned char data[MAX_PAYLOAD];
    } stack_msg;
    (void)argc;
    CmiGetArgIntDesc(argv, "-count", &count, "messages from each PE to each other PE");
    if (count < 1) CmiAbort("flood: -count must be at least 1, got %d", count);
    atexit(check_finished);
    flood_handler_id = CmiRegisterHandler(flood_handler);
    done_handler_id = CmiRegisterHandler(done_handler);
    exit_handler_id = CmiRegisterHandler(exit_handler);
    next_seq = (int*)calloc((size_t)CmiNumPes(), sizeof(int));
    for (int p = 0; p < CmiNumPes(); ++p)
        senders += sends_to(p, CmiMyPe());

    /* Round-robin over the destinations, so the streams interleave. */
    for (int seq = 0; seq < count; ++seq) {
        for (int k = 1; k <= CmiNumPes(); ++k) {
            const int dest = (CmiMyPe() + k) % CmiNumPes();
            if (!sends_to(CmiMyPe(), dest)) continue;
            if (seq % 2 == 0) {
                fill((flood_msg*)&stack_msg, CmiMyPe(), seq);
                CmiSyncSend(dest, (int)sizeof(flood_msg) + stack_msg.m.len, &stack_msg);
                memset(&stack_msg, 0xEE, sizeof(flood_msg) + 64); /* the buffer is ours again */
            } else {
                const int size = (int)sizeof(flood_msg) + payload_len(CmiMyPe(), seq);
                flood_msg* m = (flood_msg*)CmiAlloc(size);
                fill(m, CmiMyPe(), seq);
                CmiSyncSendAndFree(dest, size, m);
            }
        }
    }
}

int main(int argc, char** argv) {
    ConverseInit(argc, argv, start, 0, 0);
    return 0;
}
