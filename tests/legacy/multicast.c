/* multicast.c: every PE establishes the same two groups (the odd PEs, or PE 0 when alone;
 * PE 0 and the last PE), checks them with CmiLookupGroup, and sends ROUNDS times to them
 * with CmiSyncMulticast, CmiSyncMulticastAndFree and CmiAsyncMulticast (64 KiB, handle
 * polled), and to PE lists with CmiSyncListSend (every third PE and the last) and
 * CmiSyncListSendAndFree (the even PEs). Every receiver checks that it is a member of the
 * set the message was for and that the data is intact, and counts what it expects. */
#include <converse.h>

#include <stdlib.h>
#include <string.h>

#define ROUNDS 10
#define LARGE_BYTES (64 * 1024)

enum kind { MC_SYNC, MC_SYNC_AND_FREE, MC_ASYNC, LIST_SYNC, LIST_SYNC_AND_FREE, NUM_KINDS };
static const char* const kind_names[NUM_KINDS] = {"CmiSyncMulticast", "CmiSyncMulticastAndFree",
                                                  "CmiAsyncMulticast", "CmiSyncListSend",
                                                  "CmiSyncListSendAndFree"};
enum set { ODD_PES, FIRST_AND_LAST, EVERY_THIRD, EVEN_PES, NUM_SETS };

typedef struct {
    char header[CmiMsgHeaderSizeBytes];
    int kind;
    int set;
    int src;
    int round;
    int len;
} mc_msg;

typedef struct {
    char header[CmiMsgHeaderSizeBytes];
} small_msg;

static int mc_handler_id, done_handler_id, exit_handler_id;
static int received, expected;
static int done_pes;
static int done_sent;
static int finished;
static union {
    mc_msg m;
    char bytes[sizeof(mc_msg) + LARGE_BYTES];
} large_buffer;

static int in_set(int set, int pe) {
    const int n = CmiNumPes();
    switch (set) {
        case ODD_PES:
            return n == 1 ? pe == 0 : pe % 2 == 1;
        case FIRST_AND_LAST:
            return pe == 0 || pe == n - 1;
        case EVERY_THIRD:
            return pe % 3 == 0 || pe == n - 1;
        case EVEN_PES:
            return pe % 2 == 0;
    }
    return 0;
}
static int set_of(int kind, int round) {
    switch (kind) {
        case MC_SYNC:
        case MC_SYNC_AND_FREE:
        case MC_ASYNC:
            return round % 2 == 0 ? ODD_PES : FIRST_AND_LAST;
        case LIST_SYNC:
            return EVERY_THIRD;
        default:
            return EVEN_PES;
    }
}
/* The PE list of a set, without duplicates; returns its length. */
static int members(int set, int* pes) {
    int n = 0;
    for (int p = 0; p < CmiNumPes(); ++p)
        if (in_set(set, p)) pes[n++] = p;
    return n;
}

static unsigned char pattern(int kind, int src, int round, int i) {
    return (unsigned char)(kind * 29 + src * 5 + round * 3 + i);
}

static mc_msg* fill(mc_msg* m, int kind, int round, int len) {
    unsigned char* data = (unsigned char*)(m + 1);
    m->kind = kind;
    m->set = set_of(kind, round);
    m->src = CmiMyPe();
    m->round = round;
    m->len = len;
    for (int i = 0; i < len; ++i)
        data[i] = pattern(kind, m->src, round, i);
    CmiSetHandler(m, mc_handler_id);
    return m;
}

static void check_finished(void) {
    if (!finished) {
        CmiError("multicast: PE %d exited before the exit broadcast arrived\n", CmiMyPe());
        _Exit(3);
    }
}

static void maybe_done(void) {
    if (received != expected || done_sent) return;
    done_sent = 1;
    small_msg d;
    CmiSetHandler(&d, done_handler_id);
    CmiSyncSend(0, sizeof d, &d);
}

static void mc_handler(void* msg) {
    mc_msg* m = (mc_msg*)msg;
    const unsigned char* data = (const unsigned char*)(m + 1);
    if (m->kind < 0 || m->kind >= NUM_KINDS || m->set < 0 || m->set >= NUM_SETS)
        CmiAbort("multicast: PE %d got a message of unknown kind %d / set %d", CmiMyPe(), m->kind,
                 m->set);
    if (!in_set(m->set, CmiMyPe()))
        CmiAbort(
            "multicast: PE %d received a %s message from PE %d (round %d) meant for set %d, "
            "which does not contain it",
            CmiMyPe(), kind_names[m->kind], m->src, m->round, m->set);
    for (int i = 0; i < m->len; ++i)
        if (data[i] != pattern(m->kind, m->src, m->round, i))
            CmiAbort("multicast: PE %d, %s from PE %d round %d: byte %d is 0x%02x, expected 0x%02x",
                     CmiMyPe(), kind_names[m->kind], m->src, m->round, i, data[i],
                     pattern(m->kind, m->src, m->round, i));
    if (++received > expected)
        CmiAbort(
            "multicast: PE %d received %d messages, expected only %d (the last: %s from PE "
            "%d, round %d)",
            CmiMyPe(), received, expected, kind_names[m->kind], m->src, m->round);
    CmiFree(m);
    maybe_done();
}

static void done_handler(void* msg) {
    CmiFree(msg);
    if (++done_pes < CmiNumPes()) return;
    CmiPrintf("multicast: %d rounds of 3 multicast and 2 list-send forms on %d PEs ok\n", ROUNDS,
              CmiNumPes());
    small_msg* e = (small_msg*)CmiAlloc(sizeof(small_msg));
    CmiSetHandler(e, exit_handler_id);
    CmiSyncBroadcastAllAndFree(sizeof(small_msg), e);
}

static void exit_handler(void* msg) {
    if (received != expected)
        CmiAbort("multicast: PE %d received %d messages at exit, expected %d", CmiMyPe(), received,
                 expected);
    CmiFree(msg);
    finished = 1;
    CsdExitScheduler();
}

static void check_group(CmiGroup g, int set) {
    int npes = -1, *pes = NULL;
    int want[64], nwant = members(set, want);
    CmiLookupGroup(g, &npes, &pes);
    if (npes != nwant)
        CmiAbort("multicast: CmiLookupGroup: group of set %d has %d PEs, expected %d", set, npes,
                 nwant);
    for (int i = 0; i < npes; ++i)
        if (pes[i] != want[i])
            CmiAbort("multicast: CmiLookupGroup: member %d of set %d is PE %d, expected PE %d", i,
                     set, pes[i], want[i]);
}

static void start(int argc, char** argv) {
    int odd[64], first_last[64], list[64];
    int nodd, nfirst_last, nlist;
    CmiGroup odd_group, first_last_group;
    (void)argc;
    (void)argv;
    if (CmiNumPes() > 64) CmiAbort("multicast: written for at most 64 PEs, got %d", CmiNumPes());
    atexit(check_finished);
    mc_handler_id = CmiRegisterHandler(mc_handler);
    done_handler_id = CmiRegisterHandler(done_handler);
    exit_handler_id = CmiRegisterHandler(exit_handler);

    nodd = members(ODD_PES, odd);
    nfirst_last = members(FIRST_AND_LAST, first_last);
    odd_group = CmiEstablishGroup(nodd, odd);
    first_last_group = CmiEstablishGroup(nfirst_last, first_last);
    memset(odd, 0xFF, sizeof odd); /* the group keeps its own copy of the list */
    check_group(odd_group, ODD_PES);
    check_group(first_last_group, FIRST_AND_LAST);

    /* What this PE will receive: from every PE, every round, each kind whose set holds it. */
    for (int round = 0; round < ROUNDS; ++round)
        for (int kind = 0; kind < NUM_KINDS; ++kind)
            if (in_set(set_of(kind, round), CmiMyPe())) expected += CmiNumPes();

    for (int round = 0; round < ROUNDS; ++round) {
        const CmiGroup g = round % 2 == 0 ? odd_group : first_last_group;
        const int small_len = 200 + round;
        struct {
            mc_msg m;
            char data[512];
        } stack_msg;
        int size = (int)sizeof(mc_msg) + small_len;
        CmiCommHandle h;

        CmiSyncMulticast(g, size, fill((mc_msg*)&stack_msg, MC_SYNC, round, small_len));
        memset(&stack_msg, 0xEE, sizeof stack_msg);

        CmiSyncMulticastAndFree(g, size,
                                fill((mc_msg*)CmiAlloc(size), MC_SYNC_AND_FREE, round, small_len));

        h = CmiAsyncMulticast(g, (int)sizeof large_buffer,
                              fill((mc_msg*)&large_buffer, MC_ASYNC, round, LARGE_BYTES));
        while (!CmiAsyncMsgSent(h))
            CsdSchedulePoll();
        CmiReleaseCommHandle(h);
        memset(&large_buffer, 0xEE, sizeof large_buffer);

        nlist = members(EVERY_THIRD, list);
        CmiSyncListSend(nlist, list, size, fill((mc_msg*)&stack_msg, LIST_SYNC, round, small_len));
        memset(&stack_msg, 0xEE, sizeof stack_msg);

        nlist = members(EVEN_PES, list);
        CmiSyncListSendAndFree(nlist, list, size,
                               fill((mc_msg*)CmiAlloc(size), LIST_SYNC_AND_FREE, round, small_len));
    }
    maybe_done(); /* PEs in no set expect nothing */
}

int main(int argc, char** argv) {
    ConverseInit(argc, argv, start, 0, 0);
    return 0;
}
