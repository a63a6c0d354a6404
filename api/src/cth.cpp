// Cth: Converse's user-level threads on ucontext, each on its own mmap'd stack with a guard
// page below it, and the Ctv thread-private data blocks.
//
// Scheduling: an awakened thread's token is queued in the Csd queue; the scheduler loop
// hands it to the cth_resume handler, which switches to the thread. A suspending thread
// gives the PE back to the *scheduling thread*, the one whose stack runs the scheduler
// loop. When the scheduling thread itself suspends (a handler waiting in CfutureWait, the
// start function calling CthSuspend), a stand-in thread takes over the loop so messages,
// timers and protocol tasks go on; when the suspended scheduling thread's token comes up,
// the stand-in parks itself in a pool and the old scheduling thread runs the loop again.
//
// Lifetimes: a thread whose function returns is freed by the next thread to run (a stack
// cannot be unmapped while it is in use). A token outlives a freed thread while queued
// (its thread pointer is cleared; the handler frees it).
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <coverse/runtime/settings.hpp>

#include "compat.hpp"
#include "pe_core.hpp"

#if defined(__SANITIZE_ADDRESS__)
#define COVERSE_CTH_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define COVERSE_CTH_ASAN 1
#endif
#endif
#ifdef COVERSE_CTH_ASAN
#include <sanitizer/common_interface_defs.h>
#include <sanitizer/lsan_interface.h>
#endif

extern "C" {
char* Cpv_CthData = nullptr;
}

struct CthThreadStruct {
    CthThreadToken* token = nullptr;
    ucontext_t context{};
    void* mapping = nullptr;  // guard page + stack
    std::size_t mapping_size = 0;
    void* stack_low = nullptr;  // the usable stack, above the guard page
    std::size_t stack_size = 0;
    CthVoidFn fn = nullptr;
    void* arg = nullptr;
    CthAwkFn awaken_fn = nullptr;  // null: the default strategy (the Csd queue)
    CthThFn choose_fn = nullptr;
    CthThread next = nullptr;  // CthSetNext
    char* data = nullptr;      // Ctv block
    std::size_t data_size = 0;
    bool is_main = false;
    bool is_standin = false;
    bool exited = false;
    bool free_requested = false;        // CthFree(CthSelf()): gone at its next suspend
    bool queued = false;                // its token is in the Csd queue
    bool suspended_scheduling = false;  // suspended while it ran the scheduler loop
    void* fake_stack = nullptr;         // ASan's fake stack while switched out
};

namespace coverse::detail {
namespace {

struct cth_state {
    CthThreadStruct main_thread;
    CthThread current = nullptr;
    CthThread scheduling = nullptr;    // whose stack runs the scheduler loop
    std::vector<CthThread> standins;   // parked stand-ins
    std::vector<CthThread> graveyard;  // exited, freed by the next thread to run
    std::size_t ctv_size = 0;
    std::size_t default_stack = 0;
    bool exit_pending = false;  // a stand-in's loop took a CsdExitScheduler meant for another
    int serial = 0;
};

cth_state& state() {
    static cth_state s;
    if (!s.current) {
        s.main_thread.is_main = true;
        s.current = &s.main_thread;
        s.scheduling = &s.main_thread;
    }
    return s;
}

[[noreturn]] void cth_fail(const std::string& text) {
    CmiAbort("%s", text.c_str());
}

std::size_t page_size() {
    static const std::size_t p = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    return p;
}

void fix_data(CthThread t) {
    auto& s = state();
    if (t->data_size >= s.ctv_size) return;
    auto* grown = static_cast<char*>(std::realloc(t->data, s.ctv_size));
    if (!grown) cth_fail("Cth: out of memory for thread-private (Ctv) data");
    std::memset(grown + t->data_size, 0, s.ctv_size - t->data_size);
    t->data = grown;
    t->data_size = s.ctv_size;
}

CthThreadToken* make_token(CthThread t) {
    auto* tok = static_cast<CthThreadToken*>(std::calloc(1, sizeof(CthThreadToken)));
    if (!tok) cth_fail("Cth: out of memory for a thread token");
    CmiSetHandler(tok, static_cast<int>(internal_handler::cth_resume));
    tok->thread = t;
    return tok;
}

void release_thread(CthThread t) {
    if (t->token) {
        if (t->queued)
            t->token->thread = nullptr;  // the handler frees it when it comes up
        else
            std::free(t->token);
    }
    if (t->mapping) {
#ifdef COVERSE_CTH_ASAN
        __lsan_unregister_root_region(t->stack_low, t->stack_size);
#endif
        munmap(t->mapping, t->mapping_size);
    }
    std::free(t->data);
    delete t;
}

void bury_the_dead() {
    auto& s = state();
    while (!s.graveyard.empty()) {
        CthThread t = s.graveyard.back();
        s.graveyard.pop_back();
        release_thread(t);
    }
}

// Runs on the thread switched to, right after the switch (or at its start).
void arrived([[maybe_unused]] CthThread self, [[maybe_unused]] CthThread from) {
#ifdef COVERSE_CTH_ASAN
    const void* from_bottom = nullptr;
    std::size_t from_size = 0;
    __sanitizer_finish_switch_fiber(self->fake_stack, &from_bottom, &from_size);
    if (from && from->is_main && !from->stack_low) {
        from->stack_low = const_cast<void*>(from_bottom);
        from->stack_size = from_size;
    }
#endif
    bury_the_dead();
}

CthThread switched_from = nullptr;

void switch_to(CthThread next) {
    auto& s = state();
    CthThread cur = s.current;
    if (next == cur) return;
    if (next->exited) cth_fail("Cth: switch to a thread that has finished");
    fix_data(next);
    s.current = next;
    Cpv_CthData = next->data;
    switched_from = cur;
#ifdef COVERSE_CTH_ASAN
    // An exited thread's fake stack is dropped (null save slot).
    __sanitizer_start_switch_fiber(cur->exited ? nullptr : &cur->fake_stack, next->stack_low,
                                   next->stack_size);
#endif
    swapcontext(&cur->context, &next->context);
    arrived(cur, switched_from);
}

[[noreturn]] void finish_current() {
    // Finished: free it from the next thread's stack, and never come back here.
    auto& s = state();
    CthThread self = s.current;
    self->exited = true;
    s.graveyard.push_back(self);
    CthThread next = self->choose_fn ? self->choose_fn() : s.scheduling;
    if (!next || next == self) next = s.scheduling;
    switch_to(next);
    std::abort();  // unreachable: nothing switches to an exited thread
}

void thread_entry() {
    CthThread self = state().current;
    arrived(self, switched_from);
    self->fn(self->arg);
    finish_current();
}

CthThread new_thread(CthVoidFn fn, void* arg, int size) {
    auto& s = state();
    if (size < 0) cth_fail("CthCreate: negative stack size " + std::to_string(size));
    std::size_t stack = size > 0 ? static_cast<std::size_t>(size) : s.default_stack;
    if (!stack) stack = 256 * 1024;
    const std::size_t page = page_size();
    stack = std::max<std::size_t>((stack + page - 1) / page * page, 4 * page);
    auto* t = new CthThreadStruct;
    t->mapping_size = stack + page;
    t->mapping = mmap(nullptr, t->mapping_size, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (t->mapping == MAP_FAILED) {
        delete t;
        cth_fail("CthCreate: cannot map a " + std::to_string(stack) +
                 "-byte stack (too many threads for this memory or vm.max_map_count; set "
                 "CTH_STACK_SIZE smaller)");
    }
    mprotect(t->mapping, page, PROT_NONE);  // overflow faults instead of corrupting
    t->stack_low = static_cast<char*>(t->mapping) + page;
    t->stack_size = stack;
#ifdef COVERSE_CTH_ASAN
    __lsan_register_root_region(t->stack_low, t->stack_size);  // pointers held on it
#endif
    t->fn = fn;
    t->arg = arg;
    t->token = make_token(t);
    t->token->serialNo = ++s.serial;
    getcontext(&t->context);
    t->context.uc_stack.ss_sp = t->stack_low;
    t->context.uc_stack.ss_size = t->stack_size;
    t->context.uc_link = nullptr;
    makecontext(&t->context, thread_entry, 0);
    return t;
}

void standin_main(void*) {
    // Runs the scheduler loop for a suspended scheduling thread. CsdExitScheduler ends the
    // loop of the thread it was meant for, so one taken here is handed on.
    auto& core = pe_core::get("Cth");
    for (;;) {
        core.schedule(-1, false);
        state().exit_pending = true;
    }
}

void default_awaken(CthThread t, int strategy, int prio_bits, unsigned int* prio) {
    if (t->queued) return;                    // already on its way: it runs once
    if (!t->token) t->token = make_token(t);  // the main thread's, on its first awakening
    t->queued = true;
    if (!pe_core::get("CthAwaken").enqueue(t->token, strategy, prio_bits, prio))
        cth_fail("CthAwakenPrio: strategy " + std::to_string(strategy) + " with " +
                 std::to_string(prio_bits) + " priority bits is not valid");
}

void awaken(CthThread t, int strategy, int prio_bits, unsigned int* prio) {
    if (!t) cth_fail("CthAwaken: null thread");
    if (t->exited) cth_fail("CthAwaken: the thread has finished");
    if (t->awaken_fn) {
        t->awaken_fn(t->token, strategy, prio_bits, prio);
        return;
    }
    default_awaken(t, strategy, prio_bits, prio);
}

void after_resume() {
    auto& s = state();
    if (s.exit_pending && s.current == s.scheduling && !s.current->is_standin) {
        s.exit_pending = false;
        pe_core::get("Cth").exit_scheduler();
    }
}

void suspend_current() {
    auto& s = state();
    CthThread cur = s.current;
    // Converse's way to end a thread from anywhere: CthFree(CthSelf()); CthSuspend();
    if (cur->free_requested && !cur->is_main && !cur->is_standin) finish_current();
    CthThread next = cur->choose_fn ? cur->choose_fn() : nullptr;
    if (!next) {
        if (cur == s.scheduling) {
            // The loop must go on while this thread waits: a stand-in runs it.
            cur->suspended_scheduling = true;
            if (!s.standins.empty()) {
                next = s.standins.back();
                s.standins.pop_back();
            } else {
                next = new_thread(standin_main, nullptr, 0);
                next->is_standin = true;
            }
            s.scheduling = next;
        } else {
            next = s.scheduling;
        }
    }
    switch_to(next);
    after_resume();
}

void on_resume_token(void* msg) {
    auto* tok = static_cast<CthThreadToken*>(msg);
    CthThread t = tok->thread;
    if (!t) {  // freed while its token was queued
        std::free(tok);
        return;
    }
    t->queued = false;
    if (t->exited) return;
    auto& s = state();
    CthThread cur = s.current;
    if (t == cur) return;  // awakened and resumed by hand meanwhile
    if (t->suspended_scheduling) {
        // t ran the loop when it suspended: it takes the loop back.
        t->suspended_scheduling = false;
        if (cur->is_standin) {
            s.standins.push_back(cur);
        } else {
            cur->suspended_scheduling = true;
            default_awaken(cur, CQS_QUEUEING_FIFO, 0, nullptr);
        }
        s.scheduling = t;
        switch_to(t);
        after_resume();
        return;
    }
    switch_to(t);
    after_resume();
}

}  // namespace

void cth_install(pe_core& core) {
    state();
    state().default_stack = settings::count("CTH_STACK_SIZE");
    core.set_internal_handler(
        internal_handler::cth_resume, [](void* msg, void*) { on_resume_token(msg); }, nullptr);
}

}  // namespace coverse::detail

using coverse::detail::state;

extern "C" {

int CthImplemented(void) {
    return 1;
}
CthThread CthSelf(void) {
    return state().current;
}
int CthIsMainThread(CthThread t) {
    return t && t->is_main ? 1 : 0;
}
CthThread CthCreate(CthVoidFn fn, void* arg, int size) {
    if (!fn) coverse::detail::cth_fail("CthCreate: null function");
    return coverse::detail::new_thread(fn, arg, size);
}
CthThread CthCreateMigratable(CthVoidFn fn, void* arg, int size) {
    return CthCreate(fn, arg, size);  // one process per PE: threads never migrate
}
int CthMigratable(void) {
    return 0;
}
CthThreadToken* CthGetToken(CthThread t) {
    if (!t->token) t->token = coverse::detail::make_token(t);
    return t->token;
}
void CthResume(CthThread t) {
    if (!t) coverse::detail::cth_fail("CthResume: null thread");
    coverse::detail::switch_to(t);
    coverse::detail::after_resume();
}
void CthSwitchThread(CthThread t) {
    CthResume(t);
}
void CthSuspend(void) {
    coverse::detail::suspend_current();
}
void CthAwaken(CthThread t) {
    coverse::detail::awaken(t, CQS_QUEUEING_FIFO, 0, nullptr);
}
void CthAwakenPrio(CthThread t, int strategy, int prioBits, unsigned int* prioptr) {
    coverse::detail::awaken(t, strategy, prioBits, prioptr);
}
void CthYield(void) {
    CthAwaken(CthSelf());
    CthSuspend();
}
void CthYieldPrio(int strategy, int prioBits, unsigned int* prioptr) {
    CthAwakenPrio(CthSelf(), strategy, prioBits, prioptr);
    CthSuspend();
}
void CthSetStrategy(CthThread t, CthAwkFn awakenfn, CthThFn choosefn) {
    t->awaken_fn = awakenfn;
    t->choose_fn = choosefn;
}
void CthSetStrategyDefault(CthThread t) {
    t->awaken_fn = nullptr;
    t->choose_fn = nullptr;
}
void CthFree(CthThread t) {
    if (!t || t->is_main || t->is_standin) return;
    auto& s = state();
    if (t == s.current) {  // ends at its next CthSuspend, or when its function returns
        t->free_requested = true;
        return;
    }
    if (t->exited) return;  // already in the graveyard
    coverse::detail::release_thread(t);
}
void CthSetNext(CthThread t, CthThread next) {
    t->next = next;
}
CthThread CthGetNext(CthThread t) {
    return t->next;
}
void CthSetSerialNo(CthThread t, int no) {
    CthGetToken(t)->serialNo = no;
}

size_t CthRegister(size_t dataSize) {
    auto& s = state();
    const std::size_t offset = s.ctv_size;
    s.ctv_size += (dataSize + 15) / 16 * 16;  // keep every variable aligned
    coverse::detail::fix_data(s.current);
    Cpv_CthData = s.current->data;
    return offset;
}
void CthRegistered(size_t dataOffMax) {
    auto& s = state();
    if (dataOffMax > s.ctv_size) s.ctv_size = (dataOffMax + 15) / 16 * 16;
    coverse::detail::fix_data(s.current);
    Cpv_CthData = s.current->data;
}
char* CthGetData(CthThread t) {
    coverse::detail::fix_data(t);
    return t->data;
}

}  // extern "C"
