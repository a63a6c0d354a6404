/* conv-cpm.h: Converse parameter marshalling (Cpm). coverse-cpm reads a C file's
 * CpmInvokable functions and writes FILE.cpm.h with, for each function f, a launcher
 * Cpm_f(CpmDestination, f's arguments...) and the handler that unpacks the arguments on the
 * destination PE and calls f. The destination says where and how f runs: CpmSend (straight
 * to the handler), CpmEnqueue* (through the Csd queue with a priority), CpmMakeThread (in a
 * new Cth thread). CpmALL and CpmOTHERS in place of a PE broadcast.
 *
 * A message built by a launcher: the Converse header and envpos (struct CpmHeader), the
 * arguments from CPM_COVERSE_ARGS on, then the destination's envelope at envpos. */
#ifndef COVERSE_CONV_CPM_H
#define COVERSE_CONV_CPM_H

#include <converse.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct CpmDestinationStruct *CpmDestination;
typedef void *(*CpmSender)(CpmDestination dest, int len, void *msg);

/* Every destination structure starts with these two fields; a send function may keep more
 * after them (see the Converse manual, "Inventing new types of CpmDestinations"). */
struct CpmDestinationStruct {
    CpmSender sendfn;
    int envsize;
};

#define CpmPE(n) (n)
#define CpmALL (-1)
#define CpmOTHERS (-2)

CpmDestination CpmSend(int pe);
CpmDestination CpmMakeThread(int pe);
CpmDestination CpmMakeThreadSize(int pe, int size);
CpmDestination CpmEnqueueFIFO(int pe);
CpmDestination CpmEnqueueLIFO(int pe);
CpmDestination CpmEnqueueIFIFO(int pe, int prio);
CpmDestination CpmEnqueueILIFO(int pe, int prio);
CpmDestination CpmEnqueueBFIFO(int pe, int priobits, unsigned int *prioptr);
CpmDestination CpmEnqueueBLIFO(int pe, int priobits, unsigned int *prioptr);
CpmDestination CpmEnqueueLFIFO(int pe, int priobits, unsigned int *prioptr);
CpmDestination CpmEnqueueLLIFO(int pe, int priobits, unsigned int *prioptr);
CpmDestination CpmEnqueue(int pe, int qs, int priobits, unsigned int *prioptr);
void CpmModuleInit(void); /* nothing to do: Cpm's own handlers exist from start-up */

/* ---- declarations the scanner reads (no effect on the C code) ---------------------------- */
typedef void CpmInvokable;
typedef int CpmDeclareSimple1;
typedef int CpmDeclarePointer1;
#define CpmDeclareSimple(c) typedef CpmDeclareSimple1 CpmType_##c
#define CpmDeclarePointer(c) typedef CpmDeclarePointer1 CpmType_##c

/* ---- a Cpm message ------------------------------------------------------------------------- */
struct CpmHeader {
    char convcore[CmiMsgHeaderSizeBytes];
    int envpos;
};
#define CpmEnv(msg) (((char *)(msg)) + (((struct CpmHeader *)(msg))->envpos))
#define CpmAlign(val, type) (((val) + sizeof(type) - 1) & (~(sizeof(type) - 1)))

/* For the generated code: arguments start at CPM_COVERSE_ARGS; each argument is aligned to
 * CPM_COVERSE_ALIGN bytes. CpmCoverseAlloc makes a message with room for `argbytes` of
 * arguments and the destination's envelope; CpmCoverseSend sets the handler and hands the
 * message to the destination's send function (which owns it from then on). */
#define CPM_COVERSE_ALIGN(n) (((n) + (size_t)15) & ~(size_t)15)
#define CPM_COVERSE_ARGS CPM_COVERSE_ALIGN(sizeof(struct CpmHeader))
void *CpmCoverseAlloc(CpmDestination dest, size_t argbytes);
void CpmCoverseSend(CpmDestination dest, void *msg, int handler);

/* ---- built-in types ------------------------------------------------------------------------ */
CpmDeclareSimple(char);
#define CpmPack_char(v) do {} while (0)
#define CpmUnpack_char(v) do {} while (0)
CpmDeclareSimple(short);
#define CpmPack_short(v) do {} while (0)
#define CpmUnpack_short(v) do {} while (0)
CpmDeclareSimple(int);
#define CpmPack_int(v) do {} while (0)
#define CpmUnpack_int(v) do {} while (0)
CpmDeclareSimple(long);
#define CpmPack_long(v) do {} while (0)
#define CpmUnpack_long(v) do {} while (0)
CpmDeclareSimple(float);
#define CpmPack_float(v) do {} while (0)
#define CpmUnpack_float(v) do {} while (0)
CpmDeclareSimple(double);
#define CpmPack_double(v) do {} while (0)
#define CpmUnpack_double(v) do {} while (0)
typedef int CpmDim;
CpmDeclareSimple(CpmDim);
#define CpmPack_CpmDim(v) do {} while (0)
#define CpmUnpack_CpmDim(v) do {} while (0)
CpmDeclareSimple(Cfuture);
#define CpmPack_Cfuture(v) do {} while (0)
#define CpmUnpack_Cfuture(v) do {} while (0)
typedef char *CpmStr;
CpmDeclarePointer(CpmStr);
#define CpmPtrSize_CpmStr(v) (strlen(v) + 1)
#define CpmPtrPack_CpmStr(p, v) (strcpy((p), (v)))
#define CpmPtrUnpack_CpmStr(v) do {} while (0)
#define CpmPtrFree_CpmStr(v) do {} while (0)

#ifdef __cplusplus
}
#endif

#endif /* COVERSE_CONV_CPM_H */
