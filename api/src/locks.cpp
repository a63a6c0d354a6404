// Converse locks: one PE per process, so they only ever guard against the program's own
// helper threads; each is a pthread mutex.
#include <pthread.h>

#include <converse.h>

struct CoverseNodeLock {
    pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
};

namespace {
pthread_mutex_t mem_lock = PTHREAD_MUTEX_INITIALIZER;
}

extern "C" {

CmiNodeLock CmiCreateLock(void) {
    return new CoverseNodeLock;
}
void CmiLock(CmiNodeLock lock) {
    if (!lock) CmiAbort("CmiLock: null lock (make it with CmiCreateLock)");
    pthread_mutex_lock(&lock->mutex);
}
void CmiUnlock(CmiNodeLock lock) {
    if (!lock) CmiAbort("CmiUnlock: null lock (make it with CmiCreateLock)");
    pthread_mutex_unlock(&lock->mutex);
}
int CmiTryLock(CmiNodeLock lock) {
    if (!lock) CmiAbort("CmiTryLock: null lock (make it with CmiCreateLock)");
    return pthread_mutex_trylock(&lock->mutex) == 0 ? 0 : 1;
}
void CmiDestroyLock(CmiNodeLock lock) {
    if (!lock) return;
    pthread_mutex_destroy(&lock->mutex);
    delete lock;
}
void CmiMemLock(void) {
    pthread_mutex_lock(&mem_lock);
}
void CmiMemUnlock(void) {
    pthread_mutex_unlock(&mem_lock);
}

}  // extern "C"
