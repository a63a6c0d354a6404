/* broadcast_reply.c: a root PE broadcasts with every broadcast call (Sync, SyncAll,
 * SyncAndFree, SyncAllAndFree, Async and AsyncAll; small and 64 KiB), every receiving PE
 * checks the data and replies to the root, and the root counts one reply per receiver (its
 * own too for the All forms) before it starts the next broadcast. PE 0 is the root for
 * ROUNDS rounds of all kinds, then hands the root role to PE 1, 2, ... for one round each
 * (broadcasts from a root other than PE 0 take other spanning trees). The sender's buffer is
 * scribbled over as soon as the call (or CmiAsyncMsgSent) says it may be reused: receivers
 * must still see the original data. */
#include <converse.h>

#include <stdlib.h>
#include <string.h>

enum kind {
    SYNC_SMALL,        /* CmiSyncBroadcast, message on the stack */
    SYNC_ALL_AND_FREE, /* CmiSyncBroadcastAllAndFree, CmiAlloc'd */
    ASYNC_LARGE,       /* CmiAsyncBroadcast, 64 KiB: a real handle to poll */
    ASYNC_SMALL,       /* CmiAsyncBroadcast, small: the handle may be 0 */
    SYNC_ALL,          /* CmiSyncBroadcastAll, on the stack */
    SYNC_AND_FREE,     /* CmiSyncBroadcastAndFree */
    ASYNC_ALL_LARGE,   /* CmiAsyncBroadcastAll, 64 KiB */
    NUM_KINDS
};
static const char* const kind_names[NUM_KINDS] = {"CmiSyncBroadcast",
                                                  "CmiSyncBroadcastAllAndFree",
                                                  "CmiAsyncBroadcast(64 KiB)",
                                                  "CmiAsyncBroadcast(small)",
                                                  "CmiSyncBroadcastAll",
                                                  "CmiSyncBroadcastAndFree",
                                                  "CmiAsyncBroadcastAll(64 KiB)"};
#define ROUNDS 5 /* with PE 0 as the root; one round for each other root */
#define LARGE_BYTES (64 * 1024)
#define SMALL_MAX 512

typedef struct {
    char header[CmiMsgHeaderSizeBytes];
    int root;
    int kind;
    int round;
    int len;          /* payload bytes after this struct */
    unsigned int sum; /* checksum of the payload */
} bcast_msg;

typedef struct {
    char header[CmiMsgHeaderSizeBytes];
    int root;
    int kind;
    int round;
    int pe;
    unsigned int sum; /* the checksum the receiver computed */
} reply_msg;

typedef struct {
    char header[CmiMsgHeaderSizeBytes];
    int pe;
} turn_msg;

static int bcast_handler_id, reply_handler_id, turn_handler_id, turn_done_handler_id,
    exit_handler_id;
static int received_broadcasts; /* on this PE */
static int finished;

/* The current root's progress (only the root uses these). */
static int cur_kind, cur_round, cur_rounds;
static int replies;
static char* replied; /* one flag per PE for the current broadcast */

/* The 64 KiB async buffer lives here: it must stay untouched until CmiAsyncMsgSent. */
static union {
    bcast_msg m;
    char bytes[sizeof(bcast_msg) + LARGE_BYTES];
} large_buffer;

static int includes_sender(int kind) {
    return kind == SYNC_ALL_AND_FREE || kind == SYNC_ALL || kind == ASYNC_ALL_LARGE;
}

static int rounds_of(int root) {
    return root == 0 ? ROUNDS : 1;
}

static unsigned char pattern(int root, int kind, int round, int i) {
    return (unsigned char)(i * 31 + kind * 7 + round * 13 + root * 3 + 1);
}

static unsigned int checksum(const unsigned char* p, int n) {
    unsigned int h = 2166136261u;
    for (int i = 0; i < n; ++i)
        h = (h ^ p[i]) * 16777619u;
    return h;
}

static bcast_msg* fill(void* buffer, int kind, int round, int len) {
    bcast_msg* m = (bcast_msg*)buffer;
    unsigned char* data = (unsigned char*)buffer + sizeof(bcast_msg);
    m->root = CmiMyPe();
    m->kind = kind;
    m->round = round;
    m->len = len;
    for (int i = 0; i < len; ++i)
        data[i] = pattern(m->root, kind, round, i);
    m->sum = checksum(data, len);
    CmiSetHandler(m, bcast_handler_id);
    return m;
}

static void check_finished(void) {
    if (!finished) {
        CmiError("broadcast_reply: PE %d exited before the exit broadcast arrived\n", CmiMyPe());
        _Exit(3);
    }
}

static void wait_sent(CmiCommHandle h) {
    /* CmiAsyncMsgSent makes progress itself: a bare loop must end. */
    while (!CmiAsyncMsgSent(h)) {
    }
    CmiReleaseCommHandle(h);
}

/* Starts broadcast (cur_kind, cur_round) from this PE, the root. */
static void send_broadcast(void) {
    const int kind = cur_kind, round = cur_round;
    const int small_len = 100 + round * 37;
    const int small_size = (int)sizeof(bcast_msg) + small_len;
    struct {
        bcast_msg m;
        char data[SMALL_MAX];
    } stack_msg;
    CmiCommHandle h;
    memset(replied, 0, (size_t)CmiNumPes());
    replies = 0;
    switch (kind) {
        case SYNC_SMALL:
            CmiSyncBroadcast(small_size, fill(&stack_msg, kind, round, small_len));
            memset(&stack_msg, 0xEE, sizeof stack_msg); /* reusable once the call returns */
            break;
        case SYNC_ALL:
            CmiSyncBroadcastAll(small_size, fill(&stack_msg, kind, round, small_len));
            memset(&stack_msg, 0xEE, sizeof stack_msg);
            break;
        case SYNC_AND_FREE:
            CmiSyncBroadcastAndFree(small_size, fill(CmiAlloc(small_size), kind, round, small_len));
            break;
        case SYNC_ALL_AND_FREE:
            CmiSyncBroadcastAllAndFree(small_size,
                                       fill(CmiAlloc(small_size), kind, round, small_len));
            break;
        case ASYNC_LARGE:
            h = CmiAsyncBroadcast((int)sizeof large_buffer,
                                  fill(&large_buffer, kind, round, LARGE_BYTES));
            wait_sent(h);
            memset(&large_buffer, 0xEE, sizeof large_buffer);
            break;
        case ASYNC_ALL_LARGE:
            h = CmiAsyncBroadcastAll((int)sizeof large_buffer,
                                     fill(&large_buffer, kind, round, LARGE_BYTES));
            wait_sent(h);
            memset(&large_buffer, 0xEE, sizeof large_buffer);
            break;
        case ASYNC_SMALL:
            h = CmiAsyncBroadcast(small_size, fill(&stack_msg, kind, round, small_len));
            wait_sent(h); /* a handle of 0 means "already reusable"; both are legal */
            memset(&stack_msg, 0xEE, sizeof stack_msg);
            break;
        default:
            CmiAbort("broadcast_reply: unknown kind %d", kind);
    }
}

static int expected_replies(int kind) {
    return includes_sender(kind) ? CmiNumPes() : CmiNumPes() - 1;
}

static void next_broadcast(void) {
    if (++cur_kind == NUM_KINDS) {
        cur_kind = 0;
        ++cur_round;
    }
}

static void send_turn(int handler, int pe, int dest) {
    turn_msg t;
    t.pe = pe;
    CmiSetHandler(&t, handler);
    CmiSyncSend(dest, sizeof t, &t);
}

/* The root: start broadcasts until one needs replies (with 1 PE the excluding forms need
 * none); when its rounds are over, report to PE 0. */
static void advance(void) {
    for (;;) {
        if (cur_round == cur_rounds) {
            send_turn(turn_done_handler_id, CmiMyPe(), 0);
            return;
        }
        send_broadcast();
        if (expected_replies(cur_kind) > 0) return;
        next_broadcast();
    }
}

static void turn_handler(void* msg) {
    CmiFree(msg);
    cur_kind = 0;
    cur_round = 0;
    cur_rounds = rounds_of(CmiMyPe());
    advance();
}

static void turn_done_handler(void* msg) {
    const int root = ((turn_msg*)msg)->pe;
    CmiFree(msg);
    if (root + 1 < CmiNumPes()) {
        send_turn(turn_handler_id, root + 1, root + 1);
        return;
    }
    CmiPrintf(
        "broadcast_reply: %d kinds x %d rounds from PE 0 and 1 round from each other root "
        "on %d PEs ok\n",
        NUM_KINDS, ROUNDS, CmiNumPes());
    turn_msg* e = (turn_msg*)CmiAlloc(sizeof(turn_msg));
    CmiSetHandler(e, exit_handler_id);
    CmiSyncBroadcastAllAndFree(sizeof(turn_msg), e);
}

static void bcast_handler(void* msg) {
    bcast_msg* m = (bcast_msg*)msg;
    const unsigned char* data = (const unsigned char*)(m + 1);
    reply_msg r;
    if (m->kind < 0 || m->kind >= NUM_KINDS || m->root < 0 || m->root >= CmiNumPes())
        CmiAbort("broadcast_reply: PE %d got a broadcast of unknown kind %d or root %d", CmiMyPe(),
                 m->kind, m->root);
    if (CmiMyPe() == m->root && !includes_sender(m->kind))
        CmiAbort("broadcast_reply: %s (round %d) was delivered to its sender, PE %d",
                 kind_names[m->kind], m->round, m->root);
    for (int i = 0; i < m->len; ++i)
        if (data[i] != pattern(m->root, m->kind, m->round, i))
            CmiAbort(
                "broadcast_reply: PE %d, %s from PE %d round %d: byte %d is 0x%02x, "
                "expected 0x%02x",
                CmiMyPe(), kind_names[m->kind], m->root, m->round, i, data[i],
                pattern(m->root, m->kind, m->round, i));
    if (CmiSize(m) != (int)sizeof(bcast_msg) + m->len)
        CmiAbort("broadcast_reply: PE %d, %s: CmiSize says %d bytes, expected %d", CmiMyPe(),
                 kind_names[m->kind], CmiSize(m), (int)sizeof(bcast_msg) + m->len);
    ++received_broadcasts;
    r.root = m->root;
    r.kind = m->kind;
    r.round = m->round;
    r.pe = CmiMyPe();
    r.sum = checksum(data, m->len);
    CmiSetHandler(&r, reply_handler_id);
    CmiFree(m);
    CmiSyncSend(r.root, sizeof r, &r);
}

static void reply_handler(void* msg) {
    reply_msg* r = (reply_msg*)msg;
    if (r->root != CmiMyPe() || r->kind != cur_kind || r->round != cur_round)
        CmiAbort(
            "broadcast_reply: PE %d expected replies to its %s round %d, got one to PE %d's "
            "kind %d round %d from PE %d",
            CmiMyPe(), kind_names[cur_kind], cur_round, r->root, r->kind, r->round, r->pe);
    if (r->pe < 0 || r->pe >= CmiNumPes() || replied[r->pe])
        CmiAbort("broadcast_reply: %s round %d: second reply (or bad PE) from PE %d",
                 kind_names[cur_kind], cur_round, r->pe);
    if (r->pe == CmiMyPe() && !includes_sender(cur_kind))
        CmiAbort("broadcast_reply: %s round %d: the root, PE %d, replied to its own broadcast",
                 kind_names[cur_kind], cur_round, r->pe);
    replied[r->pe] = 1;
    ++replies;
    CmiFree(r);
    if (replies < expected_replies(cur_kind)) return;
    next_broadcast();
    advance();
}

static void exit_handler(void* msg) {
    int expected = 0;
    for (int root = 0; root < CmiNumPes(); ++root)
        for (int k = 0; k < NUM_KINDS; ++k)
            if (CmiMyPe() != root || includes_sender(k)) expected += rounds_of(root);
    if (received_broadcasts != expected)
        CmiAbort("broadcast_reply: PE %d expected %d broadcasts, received %d", CmiMyPe(), expected,
                 received_broadcasts);
    CmiFree(msg);
    free(replied);
    finished = 1;
    ConverseExit(); /* from inside a handler: the other way to end */
}

static void start(int argc, char** argv) {
    (void)argc;
    (void)argv;
    atexit(check_finished);
    bcast_handler_id = CmiRegisterHandler(bcast_handler);
    reply_handler_id = CmiRegisterHandler(reply_handler);
    turn_handler_id = CmiRegisterHandler(turn_handler);
    turn_done_handler_id = CmiRegisterHandler(turn_done_handler);
    exit_handler_id = CmiRegisterHandler(exit_handler);
    replied = (char*)calloc((size_t)CmiNumPes(), 1);
    if (CmiMyPe() == 0) send_turn(turn_handler_id, 0, 0);
}

int main(int argc, char** argv) {
    ConverseInit(argc, argv, start, 0, 0);
    return 0;
}
