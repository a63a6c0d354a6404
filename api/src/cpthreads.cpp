// Cpthreads (cpthreads.h): POSIX-style threads over Cth threads of one PE. Each Cpthread is a
// Cth thread with a record (result, joiners, keys, cleanup stack) that Ctv Cpthread_current
// points to; blocking calls (join, mutex_lock, cond_wait) queue the caller and suspend it,
// and the call that unblocks it awakens it through the scheduler.
#define CPTHREAD_IS_HERE
#include <cpthreads.h>

#include <cerrno>
#include <deque>
#include <map>
#include <utility>
#include <vector>

#include "compat.hpp"
#include "pe_core.hpp"

struct Cpthread_key_s {
    void (*destructor)(void*);
};

struct Cpthread_s {
    CthThread thread = nullptr;
    void* (*fn)(void*) = nullptr;
    void* arg = nullptr;
    void* result = nullptr;
    bool done = false;
    bool detached = false;
    std::vector<CthThread> joiners;
    std::map<Cpthread_key_t, void*> values;
    std::vector<std::pair<void (*)(void*), void*>> cleanups;
};

namespace coverse::detail {
namespace {

constexpr int attr_magic = 0x7A11'0001;
constexpr int mutexattr_magic = 0x7A11'0002;
constexpr int mutex_magic = 0x7A11'0003;
constexpr int condattr_magic = 0x7A11'0004;
constexpr int cond_magic = 0x7A11'0005;

struct mutex_state {
    CthThread owner = nullptr;
    std::deque<CthThread> waiters;
};
struct cond_state {
    std::deque<CthThread> waiters;
};

Cpthread_s main_record;

// The calling thread's record; a plain Cth thread (CthCreate, CpmMakeThread) has none.
Cpthread_t self_record(const char* caller) {
    Cpthread_t self = CtvAccess(Cpthread_current);
    if (!self)
        CmiAbort(
            "%s: the calling thread is not a Cpthread (it was made by CthCreate, not "
            "Cpthread_create)",
            caller);
    return self;
}

int fail(int code) {
    CtvAccess(Cpthread_errcode) = code;
    return code;
}

[[noreturn]] void finish(Cpthread_t self, void* status) {
    while (!self->cleanups.empty()) {  // the handlers still pushed run, last first
        auto [routine, arg] = self->cleanups.back();
        self->cleanups.pop_back();
        routine(arg);
    }
    for (auto& [key, value] : self->values)
        if (value && key->destructor) key->destructor(value);
    self->values.clear();
    self->result = status;
    self->done = true;
    for (CthThread t : self->joiners)
        CthAwaken(t);
    self->joiners.clear();
    if (self->detached) delete self;
    CthFree(CthSelf());  // ends at the suspend below; its stack is freed by the next thread
    CthSuspend();
    CmiAbort("Cpthread_exit: a finished thread ran again");
}

void trampoline(void* arg) {
    auto* pt = static_cast<Cpthread_t>(arg);
    finish(pt, pt->fn(pt->arg));
}

struct start_main_args {
    CmiStartFn fn;
    int argc;
    char** argv;
};

void* run_main(void* arg) {
    auto* a = static_cast<start_main_args*>(arg);
    a->fn(a->argc, a->argv);
    delete a;
    return nullptr;
}

}  // namespace

void cpthreads_install(pe_core&) {
    CtvInitialize(Cpthread_t, Cpthread_current);
    CtvInitialize(int, Cpthread_errcode);
    main_record.thread = CthSelf();
    CtvAccess(Cpthread_current) = &main_record;
}

}  // namespace coverse::detail

using coverse::detail::fail;
using coverse::detail::self_record;

extern "C" {

int Cpthread_init(void) {
    return 0;  // ready from start-up
}
void Cpthread_initialize(void) {}
void Cpthread_top(Cpthread_t) {}

int Cpthread_attr_init(Cpthread_attr_t* attr) {
    attr->magic = coverse::detail::attr_magic;
    attr->detached = 0;
    attr->stacksize = 0;
    return 0;
}
int Cpthread_attr_destroy(Cpthread_attr_t* attr) {
    if (attr->magic != coverse::detail::attr_magic) return fail(EINVAL);
    attr->magic = 0;
    return 0;
}
int Cpthread_attr_getstacksize(Cpthread_attr_t* attr, size_t* size) {
    if (attr->magic != coverse::detail::attr_magic) return fail(EINVAL);
    *size = static_cast<size_t>(attr->stacksize);
    return 0;
}
int Cpthread_attr_setstacksize(Cpthread_attr_t* attr, size_t size) {
    if (attr->magic != coverse::detail::attr_magic || size < CPTHREAD_STACK_MIN ||
        size > 0x7FFF'FFFFu)
        return fail(EINVAL);
    attr->stacksize = static_cast<int>(size);
    return 0;
}
int Cpthread_attr_getdetachstate(Cpthread_attr_t* attr, int* state) {
    if (attr->magic != coverse::detail::attr_magic) return fail(EINVAL);
    *state = attr->detached;
    return 0;
}
int Cpthread_attr_setdetachstate(Cpthread_attr_t* attr, int state) {
    if (attr->magic != coverse::detail::attr_magic ||
        (state != CPTHREAD_CREATE_DETACHED && state != CPTHREAD_CREATE_JOINABLE))
        return fail(EINVAL);
    attr->detached = state;
    return 0;
}

int Cpthread_key_create(Cpthread_key_t* keyp, void (*destructo)(void*)) {
    *keyp = new Cpthread_key_s{destructo};
    return 0;
}
int Cpthread_key_delete(Cpthread_key_t key) {
    if (!key) return fail(EINVAL);
    self_record("Cpthread_key_delete")->values.erase(key);
    delete key;  // values other threads hold for it are forgotten with their threads
    return 0;
}
int Cpthread_setspecific(Cpthread_key_t key, void* val) {
    if (!key) return fail(EINVAL);
    self_record("Cpthread_setspecific")->values[key] = val;
    return 0;
}
void* Cpthread_getspecific(Cpthread_key_t key) {
    auto& v = self_record("Cpthread_getspecific")->values;
    auto it = v.find(key);
    return it == v.end() ? nullptr : it->second;
}

void Cpthread_cleanup_push(void (*routine)(void*), void* arg) {
    self_record("Cpthread_cleanup_push")->cleanups.emplace_back(routine, arg);
}
void Cpthread_cleanup_pop(int execute) {
    auto& c = self_record("Cpthread_cleanup_pop")->cleanups;
    if (c.empty()) return;
    auto [routine, arg] = c.back();
    c.pop_back();
    if (execute) routine(arg);
}

void Cpthread_exit(void* status) {
    Cpthread_t self = self_record("Cpthread_exit");
    if (self == &coverse::detail::main_record)
        CmiAbort("Cpthread_exit: called on the main thread; return from it instead");
    coverse::detail::finish(self, status);
}

int Cpthread_create(Cpthread_t* thread, Cpthread_attr_t* attr, void* (*fn)(void*), void* arg) {
    if (attr && attr->magic != coverse::detail::attr_magic) return fail(EINVAL);
    auto* pt = new Cpthread_s;
    pt->fn = fn;
    pt->arg = arg;
    pt->detached = attr && attr->detached == CPTHREAD_CREATE_DETACHED;
    pt->thread = CthCreate(coverse::detail::trampoline, pt, attr ? attr->stacksize : 0);
    CtvAccessOther(pt->thread, Cpthread_current) = pt;
    if (thread) *thread = pt;
    CthAwaken(pt->thread);
    return 0;
}
int Cpthread_equal(Cpthread_t t1, Cpthread_t t2) {
    return t1 == t2;
}
int Cpthread_detach(Cpthread_t pt) {
    if (!pt || pt->detached) return fail(EINVAL);
    if (pt->done) {
        delete pt;
        return 0;
    }
    pt->detached = true;
    return 0;
}
int Cpthread_join(Cpthread_t pt, void** status) {
    if (!pt || pt->detached) return fail(EINVAL);
    if (pt == Cpthread_self()) return fail(EDEADLK);
    while (!pt->done) {
        pt->joiners.push_back(CthSelf());
        CthSuspend();
    }
    if (status) *status = pt->result;
    delete pt;
    return 0;
}

int Cpthread_mutexattr_init(Cpthread_mutexattr_t* mattr) {
    mattr->magic = coverse::detail::mutexattr_magic;
    mattr->pshared = 0;
    return 0;
}
int Cpthread_mutexattr_destroy(Cpthread_mutexattr_t* mattr) {
    if (mattr->magic != coverse::detail::mutexattr_magic) return fail(EINVAL);
    mattr->magic = 0;
    return 0;
}
int Cpthread_mutexattr_getpshared(Cpthread_mutexattr_t* mattr, int* pshared) {
    if (mattr->magic != coverse::detail::mutexattr_magic) return fail(EINVAL);
    *pshared = mattr->pshared;
    return 0;
}
int Cpthread_mutexattr_setpshared(Cpthread_mutexattr_t* mattr, int pshared) {
    if (mattr->magic != coverse::detail::mutexattr_magic) return fail(EINVAL);
    mattr->pshared = pshared;
    return 0;
}
int Cpthread_mutex_init(Cpthread_mutex_t* mutex, Cpthread_mutexattr_t*) {
    mutex->magic = coverse::detail::mutex_magic;
    mutex->onpe = CmiMyPe();
    mutex->users = new coverse::detail::mutex_state;
    return 0;
}
namespace {
coverse::detail::mutex_state* mutex_of(Cpthread_mutex_t* m) {
    if (!m || m->magic != coverse::detail::mutex_magic) return nullptr;
    if (m->onpe != CmiMyPe())
        CmiAbort("Cpthread mutex: made on PE %d, used on PE %d (a mutex is one PE's)", m->onpe,
                 CmiMyPe());
    return static_cast<coverse::detail::mutex_state*>(m->users);
}
coverse::detail::cond_state* cond_of(Cpthread_cond_t* c) {
    if (!c || c->magic != coverse::detail::cond_magic) return nullptr;
    if (c->onpe != CmiMyPe())
        CmiAbort("Cpthread condition: made on PE %d, used on PE %d", c->onpe, CmiMyPe());
    return static_cast<coverse::detail::cond_state*>(c->users);
}
}  // namespace
int Cpthread_mutex_destroy(Cpthread_mutex_t* mutex) {
    auto* m = mutex_of(mutex);
    if (!m) return fail(EINVAL);
    if (m->owner || !m->waiters.empty()) return fail(EBUSY);
    delete m;
    mutex->magic = 0;
    mutex->users = nullptr;
    return 0;
}
int Cpthread_mutex_lock(Cpthread_mutex_t* mutex) {
    auto* m = mutex_of(mutex);
    if (!m) return fail(EINVAL);
    CthThread me = CthSelf();
    if (m->owner == me) return fail(EDEADLK);
    if (!m->owner) {
        m->owner = me;
        return 0;
    }
    m->waiters.push_back(me);
    while (m->owner != me)  // unlock hands the mutex to the first waiter
        CthSuspend();
    return 0;
}
int Cpthread_mutex_trylock(Cpthread_mutex_t* mutex) {
    auto* m = mutex_of(mutex);
    if (!m) return fail(EINVAL);
    if (m->owner) return fail(EBUSY);
    m->owner = CthSelf();
    return 0;
}
int Cpthread_mutex_unlock(Cpthread_mutex_t* mutex) {
    auto* m = mutex_of(mutex);
    if (!m) return fail(EINVAL);
    if (m->owner != CthSelf()) return fail(EPERM);
    if (m->waiters.empty()) {
        m->owner = nullptr;
        return 0;
    }
    m->owner = m->waiters.front();
    m->waiters.pop_front();
    CthAwaken(m->owner);
    return 0;
}

int Cpthread_condattr_init(Cpthread_condattr_t* cattr) {
    cattr->magic = coverse::detail::condattr_magic;
    cattr->pshared = 0;
    return 0;
}
int Cpthread_condattr_destroy(Cpthread_condattr_t* cattr) {
    if (cattr->magic != coverse::detail::condattr_magic) return fail(EINVAL);
    cattr->magic = 0;
    return 0;
}
int Cpthread_condattr_getpshared(Cpthread_condattr_t* cattr, int* pshared) {
    if (cattr->magic != coverse::detail::condattr_magic) return fail(EINVAL);
    *pshared = cattr->pshared;
    return 0;
}
int Cpthread_condattr_setpshared(Cpthread_condattr_t* cattr, int pshared) {
    if (cattr->magic != coverse::detail::condattr_magic) return fail(EINVAL);
    cattr->pshared = pshared;
    return 0;
}
int Cpthread_cond_init(Cpthread_cond_t* cond, Cpthread_condattr_t*) {
    cond->magic = coverse::detail::cond_magic;
    cond->onpe = CmiMyPe();
    cond->users = new coverse::detail::cond_state;
    return 0;
}
int Cpthread_cond_destroy(Cpthread_cond_t* cond) {
    auto* c = cond_of(cond);
    if (!c) return fail(EINVAL);
    if (!c->waiters.empty()) return fail(EBUSY);
    delete c;
    cond->magic = 0;
    cond->users = nullptr;
    return 0;
}
int Cpthread_cond_wait(Cpthread_cond_t* cond, Cpthread_mutex_t* mutex) {
    auto* c = cond_of(cond);
    if (!c || !mutex_of(mutex)) return fail(EINVAL);
    if (const int rc = Cpthread_mutex_unlock(mutex)) return rc;
    c->waiters.push_back(CthSelf());
    CthSuspend();  // a signal or broadcast awakens it
    return Cpthread_mutex_lock(mutex);
}
int Cpthread_cond_signal(Cpthread_cond_t* cond) {
    auto* c = cond_of(cond);
    if (!c) return fail(EINVAL);
    if (!c->waiters.empty()) {
        CthAwaken(c->waiters.front());
        c->waiters.pop_front();
    }
    return 0;
}
int Cpthread_cond_broadcast(Cpthread_cond_t* cond) {
    auto* c = cond_of(cond);
    if (!c) return fail(EINVAL);
    for (CthThread t : c->waiters)
        CthAwaken(t);
    c->waiters.clear();
    return 0;
}
int Cpthread_once(Cpthread_once_t* once, void (*fn)(void)) {
    if (once->flag[0]) return 0;
    once->flag[0] = 1;
    fn();
    return 0;
}

void Cpthread_start_main(CmiStartFn fn, int argc, char** argv) {
    Cpthread_t t = nullptr;
    Cpthread_attr_t attr;
    Cpthread_attr_init(&attr);
    Cpthread_attr_setdetachstate(&attr, CPTHREAD_CREATE_DETACHED);
    Cpthread_create(&t, &attr, coverse::detail::run_main,
                    new coverse::detail::start_main_args{fn, argc, argv});
}

}  // extern "C"
