/* vector_send.c: each PE sends to the next PE (itself when alone), ROUNDS times, a message
 * made of 3 pieces (a header piece with the Converse header and a description, then 2 data
 * pieces of different sizes) with CmiSyncVectorSend (pieces on the stack and in static
 * storage), CmiSyncVectorSendAndFree (CmiAlloc'd pieces) and CmiAsyncVectorSend (handle
 * polled, then released), and 3 separate messages in one CmiMultipleSend. The receiver
 * checks that it got exactly the concatenation, and each multiple-send message intact. */
#include <converse.h>

#include <stdlib.h>
#include <string.h>

#define ROUNDS 20
#define PIECE1_MAX 1500
#define PIECE2_MAX 70000 /* past the small-message boundary: the async form gets a handle */

enum kind { VEC_SYNC, VEC_SYNC_AND_FREE, VEC_ASYNC, MULTIPLE, NUM_KINDS };
static const char* const kind_names[NUM_KINDS] = {"CmiSyncVectorSend", "CmiSyncVectorSendAndFree",
                                                  "CmiAsyncVectorSend", "CmiMultipleSend"};
#define MULTIPLE_PARTS 3

typedef struct {
    char header[CmiMsgHeaderSizeBytes];
    int kind;
    int round;
    int src;
    int part; /* CmiMultipleSend: which of the messages */
    int len1; /* bytes of the first data piece */
    int len2; /* bytes of the second data piece */
} vec_header;

typedef struct {
    char header[CmiMsgHeaderSizeBytes];
} small_msg;

static int vec_handler_id, done_handler_id, exit_handler_id;
static int received[NUM_KINDS];
static int done_pes;
static int finished;
static char static_piece2[PIECE2_MAX];

static int len1_of(int kind, int round, int part) {
    return (round * 53 + kind * 7 + part * 101) % PIECE1_MAX + 1;
}
static int len2_of(int kind, int round, int part) {
    return kind == MULTIPLE ? (round * 17 + part) % 300 : PIECE2_MAX - round * 1000 - kind;
}
static unsigned char pattern(int which, int round, int i) {
    return (unsigned char)(which * 101 + round * 7 + i * 3);
}

static void fill_header(vec_header* h, int kind, int round, int part) {
    h->kind = kind;
    h->round = round;
    h->src = CmiMyPe();
    h->part = part;
    h->len1 = len1_of(kind, round, part);
    h->len2 = len2_of(kind, round, part);
    CmiSetHandler(h, vec_handler_id);
}

static void fill_data(char* p, int which, int round, int len) {
    for (int i = 0; i < len; ++i)
        p[i] = (char)pattern(which, round, i);
}

static void check_finished(void) {
    if (!finished) {
        CmiError("vector_send: PE %d exited before the exit broadcast arrived\n", CmiMyPe());
        _Exit(3);
    }
}

static int expected_of(int kind) {
    return kind == MULTIPLE ? ROUNDS * MULTIPLE_PARTS : ROUNDS;
}

static void maybe_done(void) {
    for (int k = 0; k < NUM_KINDS; ++k)
        if (received[k] != expected_of(k)) return;
    small_msg d;
    CmiSetHandler(&d, done_handler_id);
    CmiSyncSend(0, sizeof d, &d);
}

static void vec_handler(void* msg) {
    vec_header* h = (vec_header*)msg;
    const unsigned char* p1 = (const unsigned char*)(h + 1);
    const unsigned char* p2 = p1 + h->len1;
    const int from = (CmiMyPe() + CmiNumPes() - 1) % CmiNumPes();
    if (h->kind < 0 || h->kind >= NUM_KINDS)
        CmiAbort("vector_send: PE %d got a message of unknown kind %d", CmiMyPe(), h->kind);
    if (h->src != from)
        CmiAbort("vector_send: PE %d expected %s messages from PE %d only, got one from PE %d",
                 CmiMyPe(), kind_names[h->kind], from, h->src);
    if (h->len1 != len1_of(h->kind, h->round, h->part) ||
        h->len2 != len2_of(h->kind, h->round, h->part))
        CmiAbort(
            "vector_send: PE %d, %s round %d: header piece says %d + %d bytes, expected %d + "
            "%d",
            CmiMyPe(), kind_names[h->kind], h->round, h->len1, h->len2,
            len1_of(h->kind, h->round, h->part), len2_of(h->kind, h->round, h->part));
    if (CmiSize(h) != (int)sizeof(vec_header) + h->len1 + h->len2)
        CmiAbort(
            "vector_send: PE %d, %s round %d: message of %d bytes, expected the %d bytes of "
            "the pieces",
            CmiMyPe(), kind_names[h->kind], h->round, CmiSize(h),
            (int)sizeof(vec_header) + h->len1 + h->len2);
    for (int i = 0; i < h->len1; ++i)
        if (p1[i] != pattern(1, h->round, i))
            CmiAbort("vector_send: PE %d, %s round %d: piece 1 byte %d is 0x%02x, expected 0x%02x",
                     CmiMyPe(), kind_names[h->kind], h->round, i, p1[i], pattern(1, h->round, i));
    for (int i = 0; i < h->len2; ++i)
        if (p2[i] != pattern(2, h->round, i))
            CmiAbort("vector_send: PE %d, %s round %d: piece 2 byte %d is 0x%02x, expected 0x%02x",
                     CmiMyPe(), kind_names[h->kind], h->round, i, p2[i], pattern(2, h->round, i));
    ++received[h->kind];
    if (received[h->kind] > expected_of(h->kind))
        CmiAbort("vector_send: PE %d got %d %s messages, expected %d", CmiMyPe(), received[h->kind],
                 kind_names[h->kind], expected_of(h->kind));
    CmiFree(h);
    maybe_done();
}

static void done_handler(void* msg) {
    CmiFree(msg);
    if (++done_pes < CmiNumPes()) return;
    CmiPrintf("vector_send: %d rounds of 3 vector forms and CmiMultipleSend on %d PEs ok\n", ROUNDS,
              CmiNumPes());
    small_msg* e = (small_msg*)CmiAlloc(sizeof(small_msg));
    CmiSetHandler(e, exit_handler_id);
    CmiSyncBroadcastAllAndFree(sizeof(small_msg), e);
}

static void exit_handler(void* msg) {
    for (int k = 0; k < NUM_KINDS; ++k)
        if (received[k] != expected_of(k))
            CmiAbort("vector_send: PE %d received %d %s messages at exit, expected %d", CmiMyPe(),
                     received[k], kind_names[k], expected_of(k));
    CmiFree(msg);
    finished = 1;
    CsdExitScheduler();
}

static void send_round(int round) {
    const int dest = (CmiMyPe() + 1) % CmiNumPes();
    int sizes[3];
    char* pieces[3];

    /* CmiSyncVectorSend: pieces on the stack and in static storage, reusable on return. */
    {
        vec_header h;
        char p1[PIECE1_MAX];
        fill_header(&h, VEC_SYNC, round, 0);
        fill_data(p1, 1, round, h.len1);
        fill_data(static_piece2, 2, round, h.len2);
        sizes[0] = sizeof h;
        sizes[1] = h.len1;
        sizes[2] = h.len2;
        pieces[0] = (char*)&h;
        pieces[1] = p1;
        pieces[2] = static_piece2;
        CmiSyncVectorSend(dest, 3, sizes, pieces);
        memset(&h, 0xEE, sizeof h);
        memset(p1, 0xEE, sizeof p1);
        memset(static_piece2, 0xEE, sizeof static_piece2);
    }
    /* CmiSyncVectorSendAndFree: CmiAlloc'd pieces, freed by the call; the arrays are not. */
    {
        vec_header* h = (vec_header*)CmiAlloc(sizeof(vec_header));
        fill_header(h, VEC_SYNC_AND_FREE, round, 0);
        sizes[0] = sizeof *h;
        sizes[1] = h->len1;
        sizes[2] = h->len2;
        pieces[0] = (char*)h;
        pieces[1] = (char*)CmiAlloc(h->len1);
        pieces[2] = (char*)CmiAlloc(h->len2 > 0 ? h->len2 : 1);
        fill_data(pieces[1], 1, round, sizes[1]);
        fill_data(pieces[2], 2, round, sizes[2]);
        CmiSyncVectorSendAndFree(dest, 3, sizes, pieces);
    }
    /* CmiAsyncVectorSend: pieces and arrays must stay untouched until CmiAsyncMsgSent. */
    {
        vec_header* h = (vec_header*)malloc(sizeof(vec_header));
        char* p1 = (char*)malloc(PIECE1_MAX);
        int async_sizes[3];
        char* async_pieces[3];
        CmiCommHandle handle;
        fill_header(h, VEC_ASYNC, round, 0);
        fill_data(p1, 1, round, h->len1);
        fill_data(static_piece2, 2, round, h->len2);
        async_sizes[0] = sizeof *h;
        async_sizes[1] = h->len1;
        async_sizes[2] = h->len2;
        async_pieces[0] = (char*)h;
        async_pieces[1] = p1;
        async_pieces[2] = static_piece2;
        handle = CmiAsyncVectorSend(dest, 3, async_sizes, async_pieces);
        while (!CmiAsyncMsgSent(handle))
            CsdSchedulePoll();
        CmiReleaseCommHandle(handle);
        memset(h, 0xEE, sizeof *h);
        memset(p1, 0xEE, PIECE1_MAX);
        memset(static_piece2, 0xEE, sizeof static_piece2);
        free(h);
        free(p1);
    }
    /* CmiMultipleSend: MULTIPLE_PARTS whole messages, each with its own header. */
    {
        char* msgs[MULTIPLE_PARTS];
        int msg_sizes[MULTIPLE_PARTS];
        for (int part = 0; part < MULTIPLE_PARTS; ++part) {
            vec_header h;
            fill_header(&h, MULTIPLE, round, part);
            msg_sizes[part] = (int)sizeof h + h.len1 + h.len2;
            msgs[part] = (char*)malloc((size_t)msg_sizes[part]);
            memcpy(msgs[part], &h, sizeof h);
            fill_data(msgs[part] + sizeof h, 1, round, h.len1);
            fill_data(msgs[part] + sizeof h + h.len1, 2, round, h.len2);
        }
        CmiMultipleSend((unsigned int)dest, MULTIPLE_PARTS, msg_sizes, msgs);
        for (int part = 0; part < MULTIPLE_PARTS; ++part)
            free(msgs[part]);
    }
}

static void start(int argc, char** argv) {
    (void)argc;
    (void)argv;
    atexit(check_finished);
    vec_handler_id = CmiRegisterHandler(vec_handler);
    done_handler_id = CmiRegisterHandler(done_handler);
    exit_handler_id = CmiRegisterHandler(exit_handler);
    CmiInitMultipleSendRoutine();
    for (int round = 0; round < ROUNDS; ++round)
        send_round(round);
}

int main(int argc, char** argv) {
    ConverseInit(argc, argv, start, 0, 0);
    return 0;
}
