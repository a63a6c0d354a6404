/* persistent.c: Charm++'s persistent-communication API. Phase 1: PE 0 and PE 1 each create a
 * handle to the other (CmiCreatePersistent) and exchange ROUNDS halos of HALO bytes through
 * them (CmiUsePersistentHandle around each send). Phase 2: PE 1 offers a receiver-initiated
 * channel (CmiCreateReceiverPersistent), sends the PersistentReq to PE 0 inside a message,
 * and PE 0 sends BURST messages on the handle CmiRegisterReceivePersistent gives. Every
 * payload is checked; the handles are destroyed (CmiDestroyPersistent, then
 * CmiDestroyAllPersistent). A receiver without resources refuses quietly: the same run
 * passes with the sends going the usual ways. Usage: persistent [-rounds N] [-halo BYTES] */
#include <converse.h>

#include <stdlib.h>
#include <string.h>

typedef struct {
    char header[CmiMsgHeaderSizeBytes];
    int phase;
    int seq;
} halo_head;

typedef struct {
    char header[CmiMsgHeaderSizeBytes];
    PersistentReq req;
} req_msg;

static int halo_handler, req_handler, done_handler;
static int rounds = 1000, halo = 65536, burst = 200;
static PersistentHandle to_peer, offered;
static char* buf;

static void fill(char* m, int phase, int seq, int size) {
    halo_head* h = (halo_head*)m;
    CmiSetHandler(m, halo_handler);
    h->phase = phase;
    h->seq = seq;
    for (int i = sizeof(halo_head); i < size; i += 61)
        m[i] = (char)(seq * 7 + i + phase);
}

static void check(const char* m, int size, int phase, int seq) {
    const halo_head* h = (const halo_head*)m;
    if (h->phase != phase || h->seq != seq)
        CmiAbort("persistent: PE %d expected message %d of phase %d, got %d of phase %d", CmiMyPe(),
                 seq, phase, h->seq, h->phase);
    for (int i = sizeof(halo_head); i < size; i += 61)
        if (m[i] != (char)(seq * 7 + i + phase))
            CmiAbort("persistent: PE %d: message %d of phase %d has a wrong byte at %d", CmiMyPe(),
                     seq, phase, i);
}

static void send_on(PersistentHandle h, int dest, int phase, int seq, int size) {
    fill(buf, phase, seq, size);
    CmiUsePersistentHandle(&h, 1);
    CmiSyncSend(dest, size, buf);
    CmiUsePersistentHandle(NULL, 0);
}

static int phase2_seen;

static void on_halo(void* m) {
    const halo_head* h = (const halo_head*)m;
    const int peer = 1 - CmiMyPe();
    static int expect = 0;
    if (h->phase == 1) {
        check((const char*)m, halo, 1, expect);
        CmiFree(m);
        if (CmiMyPe() == 1) {
            send_on(to_peer, peer, 1, expect, halo); /* the reply */
            ++expect;
            return;
        }
        if (++expect < rounds) {
            send_on(to_peer, peer, 1, expect, halo);
            return;
        }
        CmiPrintf("persistent: %d halos of %d bytes each way ok\n", rounds, halo);
        CmiDestroyPersistent(to_peer);
        /* Phase 2: ask PE 1 for a receiver-initiated channel. */
        halo_head* ask = (halo_head*)CmiAlloc(sizeof(halo_head));
        CmiSetHandler(ask, req_handler);
        ask->phase = 2;
        ask->seq = -1;
        CmiSyncSendAndFree(1, sizeof(halo_head), ask);
        return;
    }
    check((const char*)m, CmiSize(m), 2, phase2_seen);
    CmiFree(m);
    if (++phase2_seen == burst) {
        CmiPrintf("persistent: %d messages on a receiver-initiated channel ok\n", burst);
        CmiDestroyAllPersistent();
        for (int pe = 0; pe < CmiNumPes(); ++pe) {
            halo_head* d = (halo_head*)CmiAlloc(sizeof(halo_head));
            CmiSetHandler(d, done_handler);
            CmiSyncSendAndFree(pe, sizeof(halo_head), d);
        }
    }
}

static void on_req(void* m) {
    if (CmiMyPe() == 1) { /* PE 0 asks: offer a channel */
        CmiFree(m);
        req_msg* r = (req_msg*)CmiAlloc(sizeof(req_msg));
        CmiSetHandler(r, req_handler);
        r->req = CmiCreateReceiverPersistent(halo);
        CmiSyncSendAndFree(0, sizeof(req_msg), r);
        return;
    }
    req_msg* r = (req_msg*)m;
    offered = CmiRegisterReceivePersistent(r->req);
    CmiFree(m);
    if (!offered) CmiAbort("persistent: CmiRegisterReceivePersistent returned a null handle");
    for (int k = 0; k < burst; ++k)
        send_on(offered, 1, 2, k, 64 + (k * 997) % (halo - 64));
}

static void on_done(void* m) {
    CmiFree(m);
    CsdExitScheduler();
}

static void start(int argc, char** argv) {
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-rounds"))
            rounds = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-halo"))
            halo = atoi(argv[i + 1]);
        else
            CmiAbort("usage: persistent [-rounds N] [-halo BYTES]");
    }
    if (CmiNumPes() != 2) CmiAbort("persistent needs 2 PEs");
    if (halo < (int)sizeof(halo_head) + 64) halo = sizeof(halo_head) + 64;
    halo_handler = CmiRegisterHandler(on_halo);
    req_handler = CmiRegisterHandler(on_req);
    done_handler = CmiRegisterHandler(on_done);
    CmiPersistentInit();
    buf = (char*)CmiAlloc(halo);
    to_peer = CmiCreatePersistent(1 - CmiMyPe(), halo);
    if (!to_peer) CmiAbort("persistent: CmiCreatePersistent returned a null handle");
    CmiBarrier(); /* both handles asked for before the first halo */
    if (CmiMyPe() == 0) send_on(to_peer, 1, 1, 0, halo);
}

int main(int argc, char** argv) {
    ConverseInit(argc, argv, start, 0, 0);
    return 0;
}
