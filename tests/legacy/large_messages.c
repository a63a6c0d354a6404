/* large_messages.c: what a legacy program may rely on for messages above
 * MEDIUM_MESSAGE_BOUNDARY, which go by rendezvous.
 * 1. hold: PE 1 sits in a handler (it says so with a file) until PE 0 says so (another
 *    file); meanwhile PE 0's CmiAsyncSend of 1 MiB to it must stay unsent (nobody fetched
 *    it), then turn sent.
 * 2. cross: every PE, inside a handler, CmiSyncSends 4 MiB to the next PE while that PE does
 *    the same (nested progress serves each other's rendezvous: no deadlock), then scribbles
 *    over its buffer (the receiver has its copy already).
 * 3. bcast: PE 0 broadcasts 2 MiB with CmiSyncBroadcastAllAndFree (one publish per tree
 *    child; interior PEs forward what they fetched).
 * 4. self: a 1 MiB CmiSyncSend to oneself (a copy).
 * 5. huge (with -huge BYTES): PE 0 sends PE 1 one message of that size (e.g. 100 MiB, more
 *    than a frame may carry: it must go by rendezvous on every path).
 * Every PE checks every byte; PE 0 counts acknowledgements and exits everyone.
 * Usage: large_messages -flag PATH (PATH.hold and PATH.go: files the test creates and
 * removes). */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE
#include <converse.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MIB (1024 * 1024)

typedef struct {
    char header[CmiMsgHeaderSizeBytes];
    int step; /* 1 hold, 2 cross, 3 bcast, 4 self */
    int from;
    int bytes; /* payload bytes after this struct */
} big_msg;

typedef struct {
    char header[CmiMsgHeaderSizeBytes];
    int step;
    int pe;
} ack_msg;

static int big_h, ack_h, hold_h, cross_h, exit_h;
static char hold_path[512], go_path[512];
static int huge_bytes;
static int acks[6];

static void fill(big_msg* m, int step, int from, int bytes) {
    unsigned char* p = (unsigned char*)(m + 1);
    m->step = step;
    m->from = from;
    m->bytes = bytes;
    for (int i = 0; i < bytes; ++i)
        p[i] = (unsigned char)(i * 7 + step * 13 + from);
}

static int intact(const big_msg* m) {
    const unsigned char* p = (const unsigned char*)(m + 1);
    for (int i = 0; i < m->bytes; ++i)
        if (p[i] != (unsigned char)(i * 7 + m->step * 13 + m->from)) return 0;
    return 1;
}

static big_msg* new_big(int step, int bytes) {
    big_msg* m = (big_msg*)CmiAlloc((int)sizeof(big_msg) + bytes);
    fill(m, step, CmiMyPe(), bytes);
    CmiSetHandler(m, big_h);
    return m;
}

static void send_ack(int step) {
    ack_msg* a = (ack_msg*)CmiAlloc(sizeof(ack_msg));
    a->step = step;
    a->pe = CmiMyPe();
    CmiSetHandler(a, ack_h);
    CmiSyncSendAndFree(0, sizeof(ack_msg), a);
}

static void start_step(int step);

static void big_handler(void* msg) {
    big_msg* m = (big_msg*)msg;
    if (CmiSize(m) != (int)sizeof(big_msg) + m->bytes || !intact(m)) {
        CmiPrintf("large_messages: step %d: PE %d got a damaged %d-byte message from PE %d\n",
                  m->step, CmiMyPe(), m->bytes, m->from);
        CmiAbort("large_messages: damaged message");
    }
    const int step = m->step;
    CmiFree(m);
    send_ack(step);
}

static int wait_file(const char* path) {
    for (int i = 0; i < 60000 && access(path, F_OK) != 0; ++i)
        usleep(1000);
    return access(path, F_OK) == 0;
}

static void touch(const char* path) {
    FILE* f = fopen(path, "w");
    if (!f) CmiAbort("large_messages: cannot create a flag file");
    fclose(f);
}

/* Step 1, on PE 1: wait, making no progress, until PE 0 has checked its handle. */
static void hold_handler(void* msg) {
    CmiFree(msg);
    touch(hold_path);
    if (!wait_file(go_path)) CmiAbort("large_messages: PE 0 never released PE 1");
}

/* Step 1, on PE 0: PE 1 holds, so a 1 MiB send to it cannot have been fetched yet. */
static void check_held_send(void) {
    for (int i = 0; i < 600000 && access(hold_path, F_OK) != 0; ++i) {
        CmiDeliverMsgs(0); /* our hold message must go out: progress */
        if (i % 100 == 99) usleep(100);
    }
    if (access(hold_path, F_OK) != 0) CmiAbort("large_messages: PE 1 never held");
    big_msg* m = new_big(1, MIB);
    CmiCommHandle h = CmiAsyncSend(1, (int)sizeof(big_msg) + MIB, m);
    for (int i = 0; i < 100; ++i)
        if (h == 0 || CmiAsyncMsgSent(h))
            CmiAbort("large_messages: a 1 MiB send completed before its receiver fetched it");
    touch(go_path);
    while (!CmiAsyncMsgSent(h)) {
    }
    CmiReleaseCommHandle(h);
    CmiFree(m);
}

static void cross_handler(void* msg) {
    CmiFree(msg);
    const int bytes = 4 * MIB;
    big_msg* m = new_big(2, bytes);
    CmiSyncSend((CmiMyPe() + 1) % CmiNumPes(), (int)sizeof(big_msg) + bytes, m);
    memset(m + 1, 0xEE, (size_t)bytes); /* the receiver already has its copy */
    CmiFree(m);
}

static void exit_handler(void* msg) {
    CmiFree(msg);
    CsdExitScheduler();
}

static void start_step(int step) {
    const int n = CmiNumPes();
    if (step == 1) {
        if (n < 2) {
            start_step(2);
            return;
        }
        big_msg* h = (big_msg*)CmiAlloc(sizeof(big_msg));
        CmiSetHandler(h, hold_h);
        CmiSyncSendAndFree(1, sizeof(big_msg), h);
        check_held_send();
    } else if (step == 2) {
        for (int p = 0; p < n; ++p) {
            big_msg* c = (big_msg*)CmiAlloc(sizeof(big_msg));
            CmiSetHandler(c, cross_h);
            CmiSyncSendAndFree(p, sizeof(big_msg), c);
        }
    } else if (step == 3) {
        big_msg* b = new_big(3, 2 * MIB);
        CmiSyncBroadcastAllAndFree((int)sizeof(big_msg) + 2 * MIB, b);
    } else if (step == 4) {
        big_msg* s = new_big(4, MIB);
        CmiSyncSend(0, (int)sizeof(big_msg) + MIB, s);
        memset(s + 1, 0xEE, MIB);
        CmiFree(s);
    } else if (step == 5 && huge_bytes > 0 && n > 1) {
        big_msg* h = new_big(5, huge_bytes);
        CmiSyncSendAndFree(1, (int)sizeof(big_msg) + huge_bytes, h);
    } else {
        CmiPrintf("large_messages: hold, cross, bcast, self%s on %d PEs ok\n",
                  huge_bytes > 0 && n > 1 ? " and huge" : "", n);
        void* e = CmiAlloc(CmiMsgHeaderSizeBytes);
        CmiSetHandler(e, exit_h);
        CmiSyncBroadcastAllAndFree(CmiMsgHeaderSizeBytes, e);
    }
}

static void ack_handler(void* msg) {
    ack_msg* a = (ack_msg*)msg;
    const int step = a->step;
    CmiFree(a);
    const int want[6] = {0, 1, CmiNumPes(), CmiNumPes(), 1, 1};
    if (step < 1 || step > 5) CmiAbort("large_messages: an acknowledgement of no step");
    if (++acks[step] == want[step]) start_step(step + 1);
}

static void start(int argc, char** argv) {
    const char* flag = NULL;
    for (int i = 1; i + 1 < argc; ++i)
        if (strcmp(argv[i], "-flag") == 0)
            flag = argv[i + 1];
        else if (strcmp(argv[i], "-huge") == 0)
            huge_bytes = atoi(argv[i + 1]);
    if (!flag || strlen(flag) > 500) CmiAbort("usage: large_messages -flag PATH");
    snprintf(hold_path, sizeof hold_path, "%s.hold", flag);
    snprintf(go_path, sizeof go_path, "%s.go", flag);
    big_h = CmiRegisterHandler(big_handler);
    ack_h = CmiRegisterHandler(ack_handler);
    hold_h = CmiRegisterHandler(hold_handler);
    cross_h = CmiRegisterHandler(cross_handler);
    exit_h = CmiRegisterHandler(exit_handler);
    if (CmiMyPe() == 0) {
        unlink(hold_path);
        unlink(go_path);
    }
    CmiBarrier(); /* nobody sees a flag file of an earlier run */
    if (CmiMyPe() == 0) start_step(1);
    CsdScheduler(-1);
    if (CmiMyPe() == 0) {
        unlink(hold_path);
        unlink(go_path);
    }
    ConverseExit();
}

int main(int argc, char** argv) {
    ConverseInit(argc, argv, start, 1, 0);
    return 0;
}
