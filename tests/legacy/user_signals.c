/* user_signals.c: CcdSIGUSR1 and CcdSIGUSR2 are raised from the scheduler loop after the
 * process gets SIGUSR1 / SIGUSR2 (registering a callback installs the handler; without it
 * SIGUSR1 would end the process). Each PE signals itself, once per signal. */
#define _POSIX_C_SOURCE 200809L
#include <converse.h>

#include <signal.h>
#include <unistd.h>

static int usr1, usr2;

static void on_usr2(void* arg) {
    if (arg != &usr2) CmiAbort("user_signals: CcdSIGUSR2's argument");
    ++usr2;
    if (usr1 != 1) CmiAbort("user_signals: PE %d: CcdSIGUSR1 ran %d times", CmiMyPe(), usr1);
    CsdExitScheduler();
}

static void on_usr1(void* arg) {
    if (arg != &usr1) CmiAbort("user_signals: CcdSIGUSR1's argument");
    ++usr1;
    kill(getpid(), SIGUSR2);
}

static void start(int argc, char** argv) {
    (void)argc;
    (void)argv;
    alarm(50); /* a condition that never comes: SIGALRM ends the process */
    CcdCallOnCondition(CcdSIGUSR1, on_usr1, &usr1);
    CcdCallOnCondition(CcdSIGUSR2, on_usr2, &usr2);
    kill(getpid(), SIGUSR1);
    CsdScheduleForever();
    if (usr2 != 1) CmiAbort("user_signals: PE %d: CcdSIGUSR2 ran %d times", CmiMyPe(), usr2);
    CmiBarrier();
    if (CmiMyPe() == 0) CmiPrintf("user_signals: on %d PEs ok\n", CmiNumPes());
    ConverseExit();
}

int main(int argc, char** argv) {
    ConverseInit(argc, argv, start, 1, 0);
    return 0;
}
