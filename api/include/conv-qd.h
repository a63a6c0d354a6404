/* conv-qd.h: Converse quiescence detection (CQd*). Quiescence: no message in flight
 * anywhere and every PE idle with empty queues; CcdQUIESCENCE is then raised on every PE.
 * The machine counts every message itself; CQdCreate/CQdProcess add the program's own
 * (work it tracks outside Converse messages). */
#ifndef COVERSE_CONV_QD_H
#define COVERSE_CONV_QD_H

#include <converse.h>

#ifdef __cplusplus
extern "C" {
#endif

struct ConvQdMsg;
struct ConvQdState;
typedef struct ConvQdMsg* CQdMsg;
typedef struct ConvQdState* CQdState;

void CQdInit(void);
void CQdCpvInit(void);
void CQdCreate(CQdState state, CmiInt8 n);
void CQdProcess(CQdState state, CmiInt8 n);
CmiInt8 CQdGetCreated(CQdState state);
CmiInt8 CQdGetProcessed(CQdState state);
void CQdRegisterCallback(CQdVoidFn fn, void* arg);

#ifdef __cplusplus
}
#endif

CpvExtern(CQdState, cQdState);

#endif /* COVERSE_CONV_QD_H */
