/* converse.h: the Converse machine interface (Cmi*, Csd*, Ccd*, Cpv/Csv, Crn) over the
 * coverse runtime. Source compatible with legacy Converse programs, in C and C++. One
 * process is one PE, so a node is a PE (CmiMyNode() == CmiMyPe()). */
#ifndef COVERSE_CONVERSE_H
#define COVERSE_CONVERSE_H

#include <stddef.h>
#include <stdint.h>
/* As Charm++'s converse.h does: many Converse programs call printf, malloc or memcpy
 * without including these themselves. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef __cplusplus
#define COVERSE_EXTERN_C extern "C"
extern "C" {
#else
#define COVERSE_EXTERN_C
#endif

/* ---- types --------------------------------------------------------------------------- */
typedef void (*CmiHandler)(void* msg);
typedef void (*CmiHandlerEx)(void* msg, void* user_ptr);
typedef void (*CmiStartFn)(int argc, char** argv);
typedef void* CmiCommHandle;
typedef int64_t CmiInt8;
typedef int32_t CmiInt4;
typedef uint64_t CmiUInt8;
typedef uint32_t CmiUInt4;

/** A set of PEs for the multicast calls (an opaque id; 0 is never a valid group). */
typedef struct {
    uint32_t id;
} CmiGroup;

/* ---- the message header ---------------------------------------------------------------
 * Every message starts with this header: the handler index, then the machine's fields
 * (broadcast root, internal flags). It is part of the wire format between coverse PEs. A
 * program need not initialise the machine's fields; a send may clear flags there. */
#define CmiMsgHeaderSizeBytes 16
typedef struct {
    uint32_t handler;
    uint32_t root_plus_one; /* broadcast root + 1, 0 when not a broadcast */
    uint32_t flags;
    uint32_t reserved;
} CmiMsgHeaderBasic;

#define CmiReservedHeaderSize CmiMsgHeaderSizeBytes
#define CmiMsgHeaderSizeInts (CmiMsgHeaderSizeBytes / 4)

/* ---- start-up and exit ----------------------------------------------------------------- */
void ConverseInit(int argc, char** argv, CmiStartFn fn, int usched, int initret);
/* ConverseExit() and ConverseExit(code) both work, in C and C++. */
void CoverseConverseExit(int exitcode);
#define ConverseExit(...) CoverseConverseExit(__VA_ARGS__ + 0)
void CmiAbort(const char* format, ...) __attribute__((noreturn, format(printf, 1, 2)));
void CoverseAssertFailed(const char* expr, const char* file, int line) __attribute__((noreturn));
#define CmiAssert(expr) ((expr) ? (void)0 : CoverseAssertFailed(#expr, __FILE__, __LINE__))
#define CmiAssertMsg(expr, ...) ((expr) ? (void)0 : CmiAbort(__VA_ARGS__))

/* ---- PEs and nodes ----------------------------------------------------------------------- */
int CmiMyPe(void);
int CmiNumPes(void);
#define CmiNumPe CmiNumPes
int CmiMyNode(void);
int CmiNumNodes(void);
int CmiMyRank(void);
int CmiMyNodeSize(void);
int CmiNodeSize(int node);
int CmiNodeOf(int pe);
int CmiRankOf(int pe);
int CmiNodeFirst(int node);
int CmiNumCores(void);
/* Hosts ("physical nodes") from the node table's host identities; numbered in the order of
   their first PE, so PE 0 is on physical node 0. See docs/hosts.md. */
int CmiCpuTopologyEnabled(void);
int CmiNumPhysicalNodes(void);
int CmiPhysicalNodeID(int pe);
int CmiNumPesOnPhysicalNode(int node);
void CmiGetPesOnPhysicalNode(int node, int** pelist, int* num);
int CmiPhysicalRank(int pe);
int CmiGetFirstPeOnPhysicalNode(int node);
int CmiPeOnSamePhysicalNode(int pe1, int pe2);

/* ---- grids: latency probing, the cluster map, the grid queue (docs/hosts.md) ----------- */
/* Collective: every PE calls it; each measures its latency to every other PE, PE 0 builds the
   clusters (PEs within WAN_LATENCY µs, closed transitively) and every PE gets the result.
   PROBE_CLUSTERS=1 runs it at start-up. */
void CmiProbeLatencies(void);
long CmiGetLatency(int pe1, int pe2); /* µs as pe1 measured it; LONG_MAX where unknown */
int CmiGetCluster(int pe);            /* -1 where unknown */
/* The object a message is for, right after the Converse header (the layout Charm++'s array
   messages keep there): group id, index length in ints (1 to 3), the index. */
typedef struct {
    int gid;
    int nInts;
    int index[3];
} CmiGridObjectHeader;
void CmiGridQueueRegister(int gid, int nInts, int index1, int index2, int index3);
void CmiGridQueueDeregister(int gid, int nInts, int index1, int index2, int index3);
void CmiGridQueueDeregisterAll(void);
int CmiGridQueueLookup(int gid, int nInts, int index1, int index2, int index3);
int CmiGridQueueLookupMsg(char* msg);
int CmiGridQueueGetInterval(void);
int CmiGridQueueGetThreshold(void);
void CmiInitCPUAffinity(char** argv);
void CmiInitCPUTopology(char** argv);
int CmiSpanTreeParent(int pe);
int CmiNumSpanTreeChildren(int pe);
void CmiSpanTreeChildren(int pe, int* children);
#define CmiNodeSpanTreeParent CmiSpanTreeParent
#define CmiNumNodeSpanTreeChildren CmiNumSpanTreeChildren
#define CmiNodeSpanTreeChildren CmiSpanTreeChildren

/* ---- handlers ------------------------------------------------------------------------------ */
int CmiRegisterHandler(CmiHandler h);
int CmiRegisterHandlerEx(CmiHandlerEx h, void* user_ptr);
int CmiRegisterHandlerLocal(CmiHandler h);
int CmiRegisterHandlerGlobal(CmiHandler h);
void CmiNumberHandler(int n, CmiHandler h);
void CmiNumberHandlerEx(int n, CmiHandlerEx h, void* user_ptr);
CmiHandler CmiHandlerToFunction(int handler);
#define CmiSetHandler(msg, h) (((CmiMsgHeaderBasic*)(void*)(msg))->handler = (uint32_t)(h))
#define CmiGetHandler(msg) ((int)((CmiMsgHeaderBasic*)(void*)(msg))->handler)
#define CmiGetHandlerFunction(msg) CmiHandlerToFunction(CmiGetHandler(msg))
void CmiInitMsgHeader(void* msg, int size);

/* ---- message memory --------------------------------------------------------------------- */
void* CmiAlloc(int size);
void CmiFree(void* msg);
void CmiReference(void* msg);
int CmiSize(void* msg);
int CmiGetReference(void* msg);

/* ---- point-to-point sends ------------------------------------------------------------------
 * Sync: returns when the buffer may be reused (a message on the stack is legal).
 * AndFree: takes ownership of a CmiAlloc'd message. Async: returns a handle (0: the buffer
 * is free at once); poll it with CmiAsyncMsgSent and drop it with CmiReleaseCommHandle. */
void CmiSyncSend(int dest_pe, int size, void* msg);
void CmiSyncSendAndFree(int dest_pe, int size, void* msg);
CmiCommHandle CmiAsyncSend(int dest_pe, int size, void* msg);
#define CmiSyncNodeSend CmiSyncSend
#define CmiSyncNodeSendAndFree CmiSyncSendAndFree
#define CmiAsyncNodeSend CmiAsyncSend
int CmiAsyncMsgSent(CmiCommHandle handle);
void CmiReleaseCommHandle(CmiCommHandle handle);
int CmiAllAsyncMsgsSent(void);

void CmiSyncVectorSend(int dest_pe, int n, int* sizes, char** pieces);
void CmiSyncVectorSendAndFree(int dest_pe, int n, int* sizes, char** pieces);
CmiCommHandle CmiAsyncVectorSend(int dest_pe, int n, int* sizes, char** pieces);
void CmiMultipleSend(unsigned int dest_pe, int n, int* sizes, char** msgs);
void CmiInitMultipleSendRoutine(void);

void CmiSyncListSend(int npes, const int* pes, int size, void* msg);
void CmiSyncListSendAndFree(int npes, const int* pes, int size, void* msg);
CmiCommHandle CmiAsyncListSend(int npes, const int* pes, int size, void* msg);

CmiGroup CmiEstablishGroup(int npes, int* pes);
void CmiLookupGroup(CmiGroup grp, int* npes, int** pes);
void CmiSyncMulticast(CmiGroup grp, int size, void* msg);
void CmiSyncMulticastAndFree(CmiGroup grp, int size, void* msg);
CmiCommHandle CmiAsyncMulticast(CmiGroup grp, int size, void* msg);

/* ---- broadcasts (Broadcast excludes the sender, BroadcastAll includes it) --------------- */
void CmiSyncBroadcast(int size, void* msg);
void CmiSyncBroadcastAndFree(int size, void* msg);
void CmiSyncBroadcastAll(int size, void* msg);
void CmiSyncBroadcastAllAndFree(int size, void* msg);
CmiCommHandle CmiAsyncBroadcast(int size, void* msg);
CmiCommHandle CmiAsyncBroadcastAll(int size, void* msg);
#define CmiSyncNodeBroadcast CmiSyncBroadcast
#define CmiSyncNodeBroadcastAndFree CmiSyncBroadcastAndFree
#define CmiSyncNodeBroadcastAll CmiSyncBroadcastAll
#define CmiSyncNodeBroadcastAllAndFree CmiSyncBroadcastAllAndFree
#define CmiAsyncNodeBroadcast CmiAsyncBroadcast
#define CmiAsyncNodeBroadcastAll CmiAsyncBroadcastAll

/* ---- persistent communication (Charm++'s persistent.h) -------------------------------------
 * A handle names a destination and a largest message size. Sends made while it is in use
 * (CmiUsePersistentHandle) go into buffers the receiver set aside for this sender: one copy,
 * no allocation at the receiver. A receiver without resources for it (another host, no
 * shared memory, EAGER_LONG_BUFFERS=0) refuses quietly: the sends go the usual way. */
#define CMK_PERSISTENT_COMM 1
typedef void* PersistentHandle;
typedef struct {
    int pe;                  /* the receiver */
    int maxBytes;            /* the largest message its buffers take */
    void** bufPtr;           /* unused by coverse (NULL) */
    PersistentHandle myHand; /* the receiver's channel: plain data, copy it into a message */
} PersistentReq;
void CmiPersistentInit(void);
PersistentHandle CmiCreatePersistent(int destPE, int maxBytes);
PersistentReq CmiCreateReceiverPersistent(int maxBytes);
PersistentHandle CmiRegisterReceivePersistent(PersistentReq req);
void CmiUsePersistentHandle(PersistentHandle* handles, int n);
void CmiDestroyPersistent(PersistentHandle handle);
void CmiDestroyAllPersistent(void);

/* ---- barriers and reductions -------------------------------------------------------------- */
int CmiBarrier(void);
int CmiBarrierZero(void);
#define CmiNodeBarrier CmiBarrier
#define CmiNodeAllBarrier CmiBarrier

typedef struct coverse_pup* pup_er;
typedef void* (*CmiReduceMergeFn)(int* size, void* local, void** remote, int count);
typedef void (*CmiReducePupFn)(pup_er p, void* data);
typedef void (*CmiReduceDeleteFn)(void* data);
typedef int CmiReductionID;
void CmiReduce(void* msg, int size, CmiReduceMergeFn merge);
void CmiReduceStruct(void* data, CmiReducePupFn pup, CmiReduceMergeFn merge, CmiHandler dest,
                     CmiReduceDeleteFn del);
#define CmiNodeReduce CmiReduce
#define CmiNodeReduceStruct CmiReduceStruct

/* The PUP calls a CmiReducePupFn uses (sizing and packing; coverse never unpacks). */
int pup_isPacking(const pup_er p);
int pup_isUnpacking(const pup_er p);
int pup_isSizing(const pup_er p);
void pup_bytes(pup_er p, void* ptr, size_t nbytes);
void pup_char(pup_er p, char* v);
void pup_chars(pup_er p, char* v, size_t n);
void pup_int(pup_er p, int* v);
void pup_ints(pup_er p, int* v, size_t n);
void pup_long(pup_er p, long* v);
void pup_longs(pup_er p, long* v, size_t n);
void pup_float(pup_er p, float* v);
void pup_floats(pup_er p, float* v, size_t n);
void pup_double(pup_er p, double* v);
void pup_doubles(pup_er p, double* v, size_t n);

/* ---- the scheduler ------------------------------------------------------------------------ */
#define CQS_QUEUEING_FIFO 2
#define CQS_QUEUEING_LIFO 3
#define CQS_QUEUEING_IFIFO 4
#define CQS_QUEUEING_ILIFO 5
#define CQS_QUEUEING_BFIFO 6
#define CQS_QUEUEING_BLIFO 7
#define CQS_QUEUEING_LFIFO 8
#define CQS_QUEUEING_LLIFO 9

void CsdScheduler(int n);
void CsdScheduleForever(void);
int CsdScheduleCount(int n);
void CsdSchedulePoll(void);
void CsdExitScheduler(void);
/* prioptr: int (IFIFO/ILIFO), int64 (LFIFO/LLIFO) or unsigned bit-vector words
 * (BFIFO/BLIFO, priobits long); not copied: it must live until the message is delivered. */
void CsdEnqueueGeneral(void* msg, int strategy, int priobits, const void* prioptr);
#define CsdEnqueue(msg) CsdEnqueueGeneral((msg), CQS_QUEUEING_FIFO, 0, (void*)0)
#define CsdEnqueueFifo(msg) CsdEnqueueGeneral((msg), CQS_QUEUEING_FIFO, 0, (void*)0)
#define CsdEnqueueLifo(msg) CsdEnqueueGeneral((msg), CQS_QUEUEING_LIFO, 0, (void*)0)
#define CsdNodeEnqueueGeneral CsdEnqueueGeneral
#define CsdNodeEnqueue CsdEnqueue
#define CsdNodeEnqueueFifo CsdEnqueueFifo
#define CsdNodeEnqueueLifo CsdEnqueueLifo
int CsdEmpty(void);
#define CsdNodeEmpty CsdEmpty
int CsdLength(void);
int CmiDeliverMsgs(int max_msgs);
void CmiDeliverSpecificMsg(int handler);
void* CmiGetNonLocal(void);
void CmiHandleMessage(void* msg);

/* ---- conditions and timed callbacks (Charm++ 8's numbers and callback types) ----------- */
typedef void (*CcdCondFn)(void* arg);                  /* CcdCallOnCondition callbacks */
typedef void (*CcdVoidFn)(void* arg, double now_wall); /* CcdCallFnAfter callbacks */
#define CcdSCHEDLOOP 0
#define CcdPROCESSOR_BEGIN_BUSY 1
#define CcdPROCESSOR_END_IDLE 1
#define CcdPROCESSOR_BEGIN_IDLE 2
#define CcdPROCESSOR_END_BUSY 2
#define CcdPROCESSOR_STILL_IDLE 3 /* raised every few ms while the PE stays idle */
#define CcdPROCESSOR_LONG_IDLE 4  /* raised once an idle spell passes LONG_IDLE_TIME */
#define CcdPERIODIC_FIRST 5
#define CcdPERIODIC 5 /* every few ms */
#define CcdPERIODIC_10ms 6
#define CcdPERIODIC_100ms 7
#define CcdPERIODIC_1second 8
#define CcdPERIODIC_1s 8
#define CcdPERIODIC_5s 9
#define CcdPERIODIC_5seconds 9
#define CcdPERIODIC_10second 10
#define CcdPERIODIC_10seconds 10
#define CcdPERIODIC_10s 10
#define CcdPERIODIC_1minute 11
#define CcdPERIODIC_2minute 12
#define CcdPERIODIC_5minute 13
#define CcdPERIODIC_10minute 14
#define CcdPERIODIC_1hour 15
#define CcdPERIODIC_12hour 16
#define CcdPERIODIC_1day 17
#define CcdPERIODIC_LAST 18 /* last periodic condition + 1 */
#define CcdQUIESCENCE 18    /* no message in flight anywhere, every queue empty */
#define CcdTOPOLOGY_AVAIL 19
#define CcdSIGUSR1 20
#define CcdSIGUSR2 21
#define CcdUSER 22
#define CcdUSERMAX 127
#define CcdIGNOREPE (-2)
int CcdCallOnCondition(int condnum, CcdCondFn fn, void* arg);
int CcdCallOnConditionKeep(int condnum, CcdCondFn fn, void* arg);
/* pe: the PE that registers; CcdIGNOREPE (or this PE) registers here, another PE aborts
 * (one process is one PE: no other PE shares this process's condition table). */
int CcdCallOnConditionOnPE(int condnum, CcdCondFn fn, void* arg, int pe);
int CcdCallOnConditionKeepOnPE(int condnum, CcdCondFn fn, void* arg, int pe);
void CcdCancelCallOnCondition(int condnum, int idx);
void CcdCancelCallOnConditionKeep(int condnum, int idx);
void CcdRaiseCondition(int condnum);
void CcdCallFnAfter(CcdVoidFn fn, void* arg, double msecs);
void CcdCallFnAfterOnPE(CcdVoidFn fn, void* arg, double msecs, int pe);
void CcdCallBacks(void);
/* Older Converse's condition callbacks took (arg, now) too: the C++ overloads below. */
int CoverseCcdCallOnConditionTimed(int condnum, CcdVoidFn fn, void* arg, int keep);

/* ---- locks (one PE per process: they guard against a program's own helper threads) ---- */
typedef struct CoverseNodeLock* CmiNodeLock;
CmiNodeLock CmiCreateLock(void);
void CmiLock(CmiNodeLock lock);
void CmiUnlock(CmiNodeLock lock);
int CmiTryLock(CmiNodeLock lock); /* 0: taken; non-zero: held by another thread */
void CmiDestroyLock(CmiNodeLock lock);
void CmiMemLock(void);
void CmiMemUnlock(void);
void CmiNotifyIdle(void);

/* ---- Cth: user-level threads --------------------------------------------------------------
 * Non-preemptive threads with their own stacks (guard page below each; CTH_STACK_SIZE), run
 * by the PE's scheduler: CthAwaken queues a thread's token in the Csd queue, and the
 * scheduler resumes it when the token comes up. A thread that suspends gives the PE back to
 * the scheduler, also when it suspends inside a handler: protocol work and other messages go
 * on meanwhile. */
typedef struct CthThreadStruct* CthThread;
typedef struct {
    char cmicore[CmiMsgHeaderSizeBytes]; /* a token is queued like a message */
    CthThread thread;
    int serialNo;
} CthThreadToken;
typedef void (*CthVoidFn)(void* arg);
typedef void (*CthAwkFn)(CthThreadToken* token, int strategy, int prioBits, unsigned int* prioptr);
typedef CthThread (*CthThFn)(void);

int CthImplemented(void);
CthThread CthSelf(void);
int CthIsMainThread(CthThread t);
CthThread CthCreate(CthVoidFn fn, void* arg, int size); /* size 0: CTH_STACK_SIZE */
CthThread CthCreateMigratable(CthVoidFn fn, void* arg, int size);
int CthMigratable(void);
CthThreadToken* CthGetToken(CthThread t);
void CthResume(CthThread t);
void CthSuspend(void);
void CthAwaken(CthThread t);
void CthAwakenPrio(CthThread t, int strategy, int prioBits, unsigned int* prioptr);
void CthYield(void);
void CthYieldPrio(int strategy, int prioBits, unsigned int* prioptr);
void CthSetStrategy(CthThread t, CthAwkFn awakenfn, CthThFn choosefn);
void CthSetStrategyDefault(CthThread t);
void CthSwitchThread(CthThread t);
void CthFree(CthThread t);
void CthSetNext(CthThread t, CthThread next);
CthThread CthGetNext(CthThread t);
void CthSetSerialNo(CthThread t, int no);

/* Ctv: thread-private variables (one copy per Cth thread, the main thread included). */
size_t CthRegister(size_t dataSize);
void CthRegistered(size_t dataOffMax);
char* CthGetData(CthThread t);

/* ---- Cfuture: a value set once (from any PE) and waited for on the PE that made it ------ */
typedef struct Cfuture_s {
    int pe;
    struct Cfuture_data_s* data;
} Cfuture;
Cfuture CfutureCreate(void);
void CfutureSet(Cfuture f, void* val, int len);
void* CfutureWait(Cfuture f); /* suspends the calling thread until set; the value's copy */
void CfutureDestroy(Cfuture f);
void* CfutureCreateBuffer(int bytes);
void CfutureDestroyBuffer(void* val);
void CfutureStoreBuffer(Cfuture f, void* value);
#define CfuturePE(f) ((f).pe)
void CfutureInit(void);

/* ---- quiescence (see conv-qd.h): CcdQUIESCENCE is raised on every PE once detected --- */
typedef CcdCondFn CQdVoidFn;
void CmiStartQD(CQdVoidFn fn, void* arg);

/* ---- timers -------------------------------------------------------------------------------- */
double CmiWallTimer(void);
double CmiCpuTimer(void);
double CmiTimer(void);
double CmiStartTimer(void);

/* ---- output and input through the launcher (whole lines) ---------------------------------- */
int CmiPrintf(const char* format, ...) __attribute__((format(printf, 1, 2)));
int CmiError(const char* format, ...) __attribute__((format(printf, 1, 2)));
int CmiScanf(const char* format, ...) __attribute__((format(scanf, 1, 2)));

/* ---- command-line arguments (runtime +/++ flags are gone before the program sees argv) --- */
int CmiGetArgc(char** argv);
char** CmiCopyArgs(char** argv);
void CmiDeleteArgs(char** argv, int k);
int CmiGetArgInt(char** argv, const char* arg, int* out);
int CmiGetArgIntDesc(char** argv, const char* arg, int* out, const char* desc);
int CmiGetArgLong(char** argv, const char* arg, CmiInt8* out);
int CmiGetArgLongDesc(char** argv, const char* arg, CmiInt8* out, const char* desc);
int CmiGetArgDouble(char** argv, const char* arg, double* out);
int CmiGetArgDoubleDesc(char** argv, const char* arg, double* out, const char* desc);
int CmiGetArgString(char** argv, const char* arg, char** out);
int CmiGetArgStringDesc(char** argv, const char* arg, char** out, const char* desc);
int CmiGetArgFlag(char** argv, const char* arg);
int CmiGetArgFlagDesc(char** argv, const char* arg, const char* desc);
void CmiArgGroup(const char* parent, const char* group);

/* ---- random numbers (per PE) --------------------------------------------------------------- */
int CrnRand(void);
double CrnDrand(void);
void CrnSrand(unsigned int seed);

/* Aborts unless rank is 0 (this process's only rank); returns 0 (CpvAccessOther). */
int CoverseCheckRank(int rank);

#ifdef __cplusplus
}
/* Older Converse's (arg, now) condition callbacks, for C++ callers. */
inline int CcdCallOnCondition(int condnum, CcdVoidFn fn, void* arg) {
    return CoverseCcdCallOnConditionTimed(condnum, fn, arg, 0);
}
inline int CcdCallOnConditionKeep(int condnum, CcdVoidFn fn, void* arg) {
    return CoverseCcdCallOnConditionTimed(condnum, fn, arg, 1);
}
/* Older Converse's CthVoidFn was void (*)(): a C++ function of no arguments. It is called
 * with the argument, which it ignores (as it did under the old form). */
inline CthThread CthCreate(void (*fn)(), void* arg, int size) {
    return CthCreate(reinterpret_cast<CthVoidFn>(reinterpret_cast<void (*)(void)>(fn)), arg, size);
}
inline CthThread CthCreateMigratable(void (*fn)(), void* arg, int size) {
    return CthCreateMigratable(reinterpret_cast<CthVoidFn>(reinterpret_cast<void (*)(void)>(fn)),
                               arg, size);
}
#endif

/* ---- pseudo-globals: one PE per process, so PE-private (Cpv) and node-shared (Csv)
 * variables are plain globals; any C++ type works (std::vector<int> included). ---------- */
#define CpvDeclare(t, v) t Cpv_##v
#define CpvStaticDeclare(t, v) static t Cpv_##v
#define CpvExtern(t, v) extern t Cpv_##v
#define CpvInitialize(t, v) ((void)0)
#define CpvInitialized(v) 1
#define CpvAccess(v) Cpv_##v
#define CpvAccessOther(v, r) (*(&Cpv_##v + CoverseCheckRank(r)))
#define CpvCExtern(t, v) CpvExtern(t, v)
#define CsvDeclare(t, v) t Csv_##v
#define CsvStaticDeclare(t, v) static t Csv_##v
#define CsvExtern(t, v) extern t Csv_##v
#define CsvInitialize(t, v) ((void)0)
#define CsvInitialized(v) 1
#define CsvAccess(v) Csv_##v

/* Cth thread-private variables: an offset into each thread's data block. */
#define CthCpvDeclare(t, v) CpvDeclare(t, v)
#define CthCpvExtern(t, v) CpvExtern(t, v)
#define CthCpvStatic(t, v) CpvStaticDeclare(t, v)
#define CthCpvInitialize(t, v) CpvInitialize(t, v)
#define CthCpvAccess(x) CpvAccess(x)
#ifdef __cplusplus
extern "C" char* Cpv_CthData; /* the running thread's data block */
#else
extern char* Cpv_CthData;
#endif
#define CtvDeclare(t, v)  \
    typedef t CtvType##v; \
    CsvDeclare(int, CtvOffs##v) = (-1)
#define CtvStaticDeclare(t, v) \
    typedef t CtvType##v;      \
    CsvStaticDeclare(int, CtvOffs##v) = (-1)
#define CtvExtern(t, v)   \
    typedef t CtvType##v; \
    CsvExtern(int, CtvOffs##v)
#define CtvAccess(v) (*((CtvType##v*)(CthCpvAccess(CthData) + CsvAccess(CtvOffs##v))))
#define CtvAccessOther(t, v) (*((CtvType##v*)(CthGetData(t) + CsvAccess(CtvOffs##v))))
#define CtvInitialize(t, v)                                                    \
    do {                                                                       \
        if (CsvAccess(CtvOffs##v) == (-1))                                     \
            CsvAccess(CtvOffs##v) = (int)CthRegister(sizeof(CtvType##v));      \
        else                                                                   \
            CthRegistered((size_t)CsvAccess(CtvOffs##v) + sizeof(CtvType##v)); \
    } while (0)
#define CtvInitialized(v) (CsvAccess(CtvOffs##v) != (-1))

#endif /* COVERSE_CONVERSE_H */
