/* megacon.c: a megacon-style driver (the team's own, after Charm++'s tests/converse/megacon):
 * modules built with coverse-cpm, run one after another on every PE. Each module has a
 * moduleinit (registers its Cpm invokers, the same on every PE) and an init that starts its
 * test on every PE; the test reports to PE 0 with Cpm_megacon_ack, and PE 0 starts the next
 * module once the module's acks are in. A watchdog names the module that hangs. */
#define _POSIX_C_SOURCE 200809L
#include <converse.h>

#include <signal.h>
#include <unistd.h>

#include "megacon.cpm.h"
#include "modules.h"

#define WATCHDOG_SECONDS 50

static const struct {
    const char* name;
    void (*moduleinit)(void);
    void (*init)(void);
    int (*acks)(void); /* acks PE 0 waits for */
} modules[] = {
    {"ring", ring_moduleinit, ring_init, one_ack},
    {"fibthr", fibthr_moduleinit, fibthr_init, one_ack},
    {"future", future_moduleinit, future_init, every_pe_acks},
    {"prio", prio_moduleinit, prio_init, every_pe_acks},
};
#define NMODULES ((int)(sizeof modules / sizeof modules[0]))

static int current = -1, acks, finished;
static const char* running = "start-up";

int one_ack(void) {
    return 1;
}
int every_pe_acks(void) {
    return CmiNumPes();
}

static void watchdog(int sig) {
    static const char text[] = "megacon: watchdog: this module never finished: ";
    (void)sig;
    if (write(2, text, sizeof text - 1) < 0 || write(2, running, strlen(running)) < 0 ||
        write(2, "\n", 1) < 0)
        _exit(4);
    _exit(4);
}

static void at_exit_check(void) {
    if (!finished) {
        static const char text[] = "megacon: exited before every module ran\n";
        if (write(2, text, sizeof text - 1) < 0) _exit(3);
        _exit(3);
    }
}

CpmInvokable megacon_start(int index) {
    current = index;
    running = modules[index].name;
    modules[index].init();
}

CpmInvokable megacon_stop(CpmDim count, int* done) {
    if (count != NMODULES) CmiAbort("megacon: stop names %d modules, expected %d", count, NMODULES);
    for (int i = 0; i < count; ++i)
        if (done[i] != 1) CmiAbort("megacon: module %s did not finish", modules[i].name);
    finished = 1;
    CsdExitScheduler();
}

static void next_module(void) {
    static int done[NMODULES];
    if (current >= 0) {
        done[current] = 1;
        CmiPrintf("megacon: %s ok on %d PEs\n", modules[current].name, CmiNumPes());
    }
    if (current + 1 == NMODULES) {
        Cpm_megacon_stop(CpmSend(CpmALL), NMODULES, done);
        return;
    }
    acks = 0;
    Cpm_megacon_start(CpmSend(CpmALL), current + 1);
}

CpmInvokable megacon_ack(void) {
    if (CmiMyPe() != 0) CmiAbort("megacon: an ack reached PE %d", CmiMyPe());
    if (++acks == modules[current].acks()) next_module();
}

static void start(int argc, char** argv) {
    (void)argc;
    (void)argv;
    signal(SIGALRM, watchdog);
    alarm(WATCHDOG_SECONDS);
    atexit(at_exit_check);
    CpmModuleInit();
    CpmInitializeThisModule();
    for (int i = 0; i < NMODULES; ++i)
        modules[i].moduleinit();
    CmiBarrier(); /* every PE's invokers exist before the first message */
    if (CmiMyPe() == 0) next_module();
}

int main(int argc, char** argv) {
    ConverseInit(argc, argv, start, 0, 0);
    return 0;
}
