/* facade_fixes.c: defects of the facade found by reading it, each checked where it was:
 *  - CmiDeleteArgs(argv, 0) read argv[-1] (the asan preset sees it: argv here is a heap
 *    array with nothing before it);
 *  - CmiInitCPUAffinity pinned PE n to CPU n % cores, which may lie outside the CPUs the
 *    process may use; it must pick the n-th allowed CPU (checked with the process first
 *    restricted to its highest allowed CPU, when there are two or more);
 *  - CpvAccessOther ignored its rank: rank 0 is the variable itself (cpv_other_rank.c shows
 *    that another rank aborts). */
#define _GNU_SOURCE /* sched_getaffinity, CPU_* */
#include <converse.h>

#include <sched.h>

CpvDeclare(int, value);

static void fail(const char* what) {
    CmiAbort("facade_fixes: PE %d: %s", CmiMyPe(), what);
}

static void check_delete_args(void) {
    char** argv = (char**)malloc(3 * sizeof(char*));
    argv[0] = "a";
    argv[1] = "b";
    argv[2] = NULL;
    CmiDeleteArgs(argv, 0);
    if (CmiGetArgc(argv) != 2) fail("CmiDeleteArgs(argv, 0) changed argv");
    CmiDeleteArgs(argv, 1);
    if (CmiGetArgc(argv) != 1 || strcmp(argv[0], "b") != 0) fail("CmiDeleteArgs(argv, 1)");
    free(argv);
}

static void check_affinity(void) {
    cpu_set_t allowed;
    if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) fail("sched_getaffinity");
    int highest = -1;
    for (int c = 0; c < CPU_SETSIZE; ++c)
        if (CPU_ISSET(c, &allowed)) highest = c;
    if (highest <= 0) {
        CmiPrintf("facade_fixes: PE %d: one CPU only, affinity check skipped\n", CmiMyPe());
        return;
    }
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(highest, &one);
    if (sched_setaffinity(0, sizeof one, &one) != 0) fail("sched_setaffinity");
    char* args[] = {"prog", "+setcpuaffinity", NULL};
    CmiInitCPUAffinity(args);
    cpu_set_t now;
    if (sched_getaffinity(0, sizeof now, &now) != 0) fail("sched_getaffinity");
    if (CPU_COUNT(&now) != 1 || !CPU_ISSET(highest, &now))
        fail("CmiInitCPUAffinity left the CPUs this process may use");
    sched_setaffinity(0, sizeof allowed, &allowed);
}

static void start(int argc, char** argv) {
    (void)argc;
    (void)argv;
    check_delete_args();
    check_affinity();
    CpvInitialize(int, value);
    CpvAccess(value) = 41;
    CpvAccessOther(value, 0) += 1;
    if (CpvAccess(value) != 42) fail("CpvAccessOther(v, 0) is not the variable itself");
    CmiBarrier();
    if (CmiMyPe() == 0) CmiPrintf("facade_fixes: on %d PEs ok\n", CmiNumPes());
    ConverseExit();
}

int main(int argc, char** argv) {
    ConverseInit(argc, argv, start, 1, 0);
    return 0;
}
