/* reduction.c: reductions over all PEs, results checked on PE 0.
 *  1. BATCH message reductions issued back to back from the start function, alternating an
 *     int sum and an int max (merge in place: it returns `local`), each result delivered on
 *     PE 0 to the handler set in the message.
 *  2. CHAIN reductions started one after the other (PE 0 broadcasts "next" when a result
 *     arrives) whose merge builds a bigger message (the list of contributing PEs), frees
 *     `local` and updates *size.
 *  3. STRUCTS struct reductions back to back (CmiReduceStruct) of a heap struct holding an
 *     int array, with a pup function (pup_int/pup_ints), a merge that reads the packed
 *     remote data, and a delete function; the result goes to the `dest` handler on PE 0.
 * Merge semantics per the Converse manual: the system frees the remote contributions, merge
 * owns `local`; remote entries are whole messages (header included) for CmiReduce and packed
 * bytes for CmiReduceStruct. */
#include <converse.h>

#include <stdlib.h>
#include <string.h>

#define BATCH 8
#define CHAIN 5
#define STRUCTS 3

enum op { OP_SUM, OP_MAX };

typedef struct {
    char header[CmiMsgHeaderSizeBytes];
    int op;
    int round;
    int value;
    int count; /* contributions merged into this message */
} red_msg;

typedef struct {
    char header[CmiMsgHeaderSizeBytes];
    int round;
    int n; /* then n ints: the PEs whose contributions are in */
} list_msg;

typedef struct {
    char header[CmiMsgHeaderSizeBytes];
    int round;
} small_msg;

typedef struct {
    int round;
    int contributors;
    int n;
    int* vals;
} vec_data;

static int sum_handler_id, max_handler_id, list_handler_id, chain_handler_id, struct_go_id,
    exit_handler_id;
static int finished;
static int contributions; /* on this PE */
/* PE 0 */
static int batch_seen[BATCH];
static int batch_results, chain_round, struct_seen[STRUCTS], struct_results;

static int sum_contribution(int pe, int round) {
    return pe + round * 100;
}
static int max_contribution(int pe, int round) {
    return (pe * 37 + round * 11) % 1000;
}
static int vec_len(int round) {
    return 5 + round * 3;
}
static int vec_value(int pe, int round, int i) {
    return pe * 1000 + round * 10 + i;
}

static void check_finished(void) {
    if (!finished) {
        CmiError("reduction: PE %d exited before the exit broadcast arrived\n", CmiMyPe());
        _Exit(3);
    }
}

/* ---- message reductions, merged in place -------------------------------------------- */

static void* merge_red(int* size, void* local, void** remote, int count) {
    red_msg* l = (red_msg*)local;
    if (*size != (int)sizeof(red_msg))
        CmiAbort("reduction: merge got *size %d, expected the local message's %d bytes", *size,
                 (int)sizeof(red_msg));
    for (int i = 0; i < count; ++i) {
        const red_msg* r = (const red_msg*)remote[i];
        if (r->op != l->op || r->round != l->round)
            CmiAbort("reduction: PE %d merged op %d round %d with a contribution of op %d round %d",
                     CmiMyPe(), l->op, l->round, r->op, r->round);
        if (CmiGetHandler(r) != CmiGetHandler(l))
            CmiAbort("reduction: a remote contribution lost its header: handler %d, expected %d",
                     CmiGetHandler(r), CmiGetHandler(l));
        if (l->op == OP_SUM)
            l->value += r->value;
        else if (r->value > l->value)
            l->value = r->value;
        l->count += r->count;
    }
    return l;
}

static void contribute_red(int op, int round) {
    red_msg* m = (red_msg*)CmiAlloc(sizeof(red_msg));
    m->op = op;
    m->round = round;
    m->value =
        op == OP_SUM ? sum_contribution(CmiMyPe(), round) : max_contribution(CmiMyPe(), round);
    m->count = 1;
    CmiSetHandler(m, op == OP_SUM ? sum_handler_id : max_handler_id);
    ++contributions;
    CmiReduce(m, sizeof(red_msg), merge_red);
}

static void start_chain(int round) {
    small_msg* m = (small_msg*)CmiAlloc(sizeof(small_msg));
    m->round = round;
    CmiSetHandler(m, chain_handler_id);
    CmiSyncBroadcastAllAndFree(sizeof(small_msg), m);
}

static void batch_result(red_msg* m, int want_op) {
    int expected = 0;
    if (CmiMyPe() != 0) CmiAbort("reduction: a result was delivered on PE %d, not PE 0", CmiMyPe());
    if (m->op != want_op || m->round < 0 || m->round >= BATCH || batch_seen[m->round])
        CmiAbort("reduction: unexpected result op %d round %d (or a second one)", m->op, m->round);
    for (int p = 0; p < CmiNumPes(); ++p) {
        const int v =
            m->op == OP_SUM ? sum_contribution(p, m->round) : max_contribution(p, m->round);
        if (m->op == OP_SUM)
            expected += v;
        else if (p == 0 || v > expected)
            expected = v;
    }
    if (m->value != expected || m->count != CmiNumPes())
        CmiAbort("reduction: %s round %d gave %d from %d contributions, expected %d from %d",
                 m->op == OP_SUM ? "sum" : "max", m->round, m->value, m->count, expected,
                 CmiNumPes());
    batch_seen[m->round] = 1;
    CmiFree(m);
    if (++batch_results == BATCH) start_chain(0);
}

static void sum_handler(void* msg) {
    batch_result((red_msg*)msg, OP_SUM);
}
static void max_handler(void* msg) {
    batch_result((red_msg*)msg, OP_MAX);
}

/* ---- message reductions whose merge makes a new, bigger message ----------------------- */

static void* merge_list(int* size, void* local, void** remote, int count) {
    list_msg* l = (list_msg*)local;
    int total = l->n;
    list_msg* out;
    int* ids;
    if (*size != (int)sizeof(list_msg) + l->n * (int)sizeof(int))
        CmiAbort("reduction: list merge got *size %d, the local message has %d bytes", *size,
                 (int)sizeof(list_msg) + l->n * (int)sizeof(int));
    for (int i = 0; i < count; ++i)
        total += ((const list_msg*)remote[i])->n;
    *size = (int)sizeof(list_msg) + total * (int)sizeof(int);
    out = (list_msg*)CmiAlloc(*size);
    memcpy(out, l, sizeof(list_msg)); /* header (handler) and round */
    out->n = total;
    ids = (int*)(out + 1);
    memcpy(ids, l + 1, (size_t)l->n * sizeof(int));
    ids += l->n;
    for (int i = 0; i < count; ++i) {
        const list_msg* r = (const list_msg*)remote[i];
        if (r->round != l->round)
            CmiAbort("reduction: list merge of round %d got a contribution of round %d", l->round,
                     r->round);
        memcpy(ids, r + 1, (size_t)r->n * sizeof(int));
        ids += r->n;
    }
    CmiFree(l); /* merge owns local */
    return out;
}

static void chain_handler(void* msg) {
    const int round = ((small_msg*)msg)->round;
    list_msg* m = (list_msg*)CmiAlloc(sizeof(list_msg) + sizeof(int));
    CmiFree(msg);
    m->round = round;
    m->n = 1;
    *(int*)(m + 1) = CmiMyPe();
    CmiSetHandler(m, list_handler_id);
    ++contributions;
    CmiReduce(m, sizeof(list_msg) + sizeof(int), merge_list);
}

static void list_handler(void* msg) {
    list_msg* m = (list_msg*)msg;
    const int* ids = (const int*)(m + 1);
    char* seen = (char*)calloc((size_t)CmiNumPes(), 1);
    if (m->round != chain_round)
        CmiAbort("reduction: chain result of round %d, expected round %d", m->round, chain_round);
    if (m->n != CmiNumPes() || CmiSize(m) < (int)sizeof(list_msg) + m->n * (int)sizeof(int))
        CmiAbort("reduction: chain round %d listed %d PEs in a %d-byte message, expected %d PEs",
                 m->round, m->n, CmiSize(m), CmiNumPes());
    for (int i = 0; i < m->n; ++i) {
        if (ids[i] < 0 || ids[i] >= CmiNumPes() || seen[ids[i]])
            CmiAbort("reduction: chain round %d lists PE %d twice (or out of range)", m->round,
                     ids[i]);
        seen[ids[i]] = 1;
    }
    free(seen);
    CmiFree(m);
    if (++chain_round < CHAIN) {
        start_chain(chain_round);
    } else {
        small_msg* go = (small_msg*)CmiAlloc(sizeof(small_msg));
        CmiSetHandler(go, struct_go_id);
        CmiSyncBroadcastAllAndFree(sizeof(small_msg), go);
    }
}

/* ---- struct reductions ----------------------------------------------------------------- */

static void pup_vec(pup_er p, void* data) {
    vec_data* d = (vec_data*)data;
    pup_int(p, &d->round);
    pup_int(p, &d->contributors);
    pup_int(p, &d->n);
    pup_ints(p, d->vals, (size_t)d->n);
}

static void delete_vec(void* data) {
    vec_data* d = (vec_data*)data;
    free(d->vals);
    free(d);
}

static int read_int(const char** at) {
    int v;
    memcpy(&v, *at, sizeof v);
    *at += sizeof v;
    return v;
}

static void* merge_vec(int* size, void* local, void** remote, int count) {
    vec_data* l = (vec_data*)local;
    if (*size != 0) CmiAbort("reduction: struct merge got *size %d, the manual says 0", *size);
    for (int i = 0; i < count; ++i) {
        const char* at = (const char*)remote[i]; /* packed by pup_vec, no header */
        const int round = read_int(&at);
        const int contributors = read_int(&at);
        const int n = read_int(&at);
        if (round != l->round || n != l->n)
            CmiAbort("reduction: struct merge of round %d (%d values) got round %d (%d values)",
                     l->round, l->n, round, n);
        for (int k = 0; k < n; ++k)
            l->vals[k] += read_int(&at);
        l->contributors += contributors;
    }
    return l;
}

static void struct_dest(void* data) {
    vec_data* d = (vec_data*)data;
    if (CmiMyPe() != 0) CmiAbort("reduction: a struct result arrived on PE %d", CmiMyPe());
    if (d->round < 0 || d->round >= STRUCTS || struct_seen[d->round])
        CmiAbort("reduction: unexpected struct result of round %d (or a second one)", d->round);
    if (d->contributors != CmiNumPes() || d->n != vec_len(d->round))
        CmiAbort("reduction: struct round %d: %d contributors and %d values, expected %d and %d",
                 d->round, d->contributors, d->n, CmiNumPes(), vec_len(d->round));
    for (int i = 0; i < d->n; ++i) {
        int expected = 0;
        for (int p = 0; p < CmiNumPes(); ++p)
            expected += vec_value(p, d->round, i);
        if (d->vals[i] != expected)
            CmiAbort("reduction: struct round %d: value %d is %d, expected %d", d->round, i,
                     d->vals[i], expected);
    }
    struct_seen[d->round] = 1;
    delete_vec(d);
    if (++struct_results == STRUCTS) {
        CmiPrintf("reduction: %d sum/max, %d growing and %d struct reductions on %d PEs ok\n",
                  BATCH, CHAIN, STRUCTS, CmiNumPes());
        small_msg* e = (small_msg*)CmiAlloc(sizeof(small_msg));
        CmiSetHandler(e, exit_handler_id);
        CmiSyncBroadcastAllAndFree(sizeof(small_msg), e);
    }
}

static void struct_go_handler(void* msg) {
    CmiFree(msg);
    for (int round = 0; round < STRUCTS; ++round) {
        vec_data* d = (vec_data*)malloc(sizeof(vec_data));
        d->round = round;
        d->contributors = 1;
        d->n = vec_len(round);
        d->vals = (int*)malloc((size_t)d->n * sizeof(int));
        for (int i = 0; i < d->n; ++i)
            d->vals[i] = vec_value(CmiMyPe(), round, i);
        ++contributions;
        CmiReduceStruct(d, pup_vec, merge_vec, struct_dest, delete_vec);
    }
}

static void exit_handler(void* msg) {
    if (contributions != BATCH + CHAIN + STRUCTS)
        CmiAbort("reduction: PE %d contributed %d times, expected %d", CmiMyPe(), contributions,
                 BATCH + CHAIN + STRUCTS);
    CmiFree(msg);
    finished = 1;
    CsdExitScheduler();
}

static void start(int argc, char** argv) {
    (void)argc;
    (void)argv;
    atexit(check_finished);
    sum_handler_id = CmiRegisterHandler(sum_handler);
    max_handler_id = CmiRegisterHandler(max_handler);
    list_handler_id = CmiRegisterHandler(list_handler);
    chain_handler_id = CmiRegisterHandler(chain_handler);
    struct_go_id = CmiRegisterHandler(struct_go_handler);
    exit_handler_id = CmiRegisterHandler(exit_handler);
    for (int round = 0; round < BATCH; ++round)
        contribute_red(round % 2 == 0 ? OP_SUM : OP_MAX, round);
}

int main(int argc, char** argv) {
    ConverseInit(argc, argv, start, 0, 0);
    return 0;
}
