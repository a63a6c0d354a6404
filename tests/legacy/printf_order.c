/* printf_order.c: a program's printf lines and its CmiPrintf lines come out in the order it
 * printed them, under the launcher too (stdout there is a pipe, which stdio block-buffers:
 * the printf lines used to come out at exit, after every CmiPrintf line). Every PE prints
 * ROUNDS pairs; expect_order.sh checks each PE's lines alternate printf, CmiPrintf. */
#include <converse.h>

#define ROUNDS 5

static void start(int argc, char** argv) {
    (void)argc;
    (void)argv;
    for (int i = 0; i < ROUNDS; ++i) {
        printf("printf_order: PE %d printf %d\n", CmiMyPe(), i);
        CmiPrintf("printf_order: PE %d CmiPrintf %d\n", CmiMyPe(), i);
    }
    printf("printf_order: PE %d last printf\n", CmiMyPe()); /* flushed by ConverseExit */
    CmiBarrier();
    ConverseExit();
}

int main(int argc, char** argv) {
    ConverseInit(argc, argv, start, 1, 0);
    return 0;
}
