/* cpv_other_rank.c: CpvAccessOther(v, 1) on a process with one rank must abort naming the
 * rank (it used to ignore the rank and hand back rank 0's variable). */
#include <converse.h>

CpvDeclare(int, value);

static void start(int argc, char** argv) {
    (void)argc;
    (void)argv;
    CpvInitialize(int, value);
    CpvAccessOther(value, 1) = 7;
    CmiPrintf("cpv_other_rank: CpvAccessOther(value, 1) did not abort\n");
    ConverseExit(0);
}

int main(int argc, char** argv) {
    ConverseInit(argc, argv, start, 1, 0);
    return 0;
}
