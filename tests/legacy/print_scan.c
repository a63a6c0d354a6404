/* print_scan.c: output and input through the launcher. Every PE prints LINES whole lines
 * (every tenth one longer than 4 KiB), PARTIALS lines built from four CmiPrintf calls each,
 * and ERRORS lines on CmiError (half of them built from two calls). PE 0 reads two integers
 * and a word with CmiScanf and echoes them ("scanned 17 42 hello"). Every line carries its
 * PE, its number and a body whose length and letters are known, so run_with_input.sh can
 * check that each line came out exactly once and whole (not interleaved with another).
 * The counts below must match run_with_input.sh. */
#include <converse.h>

#include <stdlib.h>
#include <string.h>

#define LINES 40
#define PARTIALS 10
#define ERRORS 6
#define LONG_LEN 5000

typedef struct {
    char header[CmiMsgHeaderSizeBytes];
} small_msg;

static int exit_handler_id;
static int finished;

static void check_finished(void) {
    if (!finished) {
        CmiError("print_scan: PE %d exited before the exit broadcast arrived\n", CmiMyPe());
        _Exit(3);
    }
}

static int body_len(int line) {
    return line % 10 == 3 ? LONG_LEN : 20 + line * 3;
}
static char body_letter(int pe, int line) {
    return (char)('a' + (pe * 7 + line) % 26);
}

static void print_all(void) {
    const int me = CmiMyPe();
    char* body = (char*)malloc(LONG_LEN + 1);
    for (int line = 0; line < LINES; ++line) {
        const int len = body_len(line);
        memset(body, body_letter(me, line), (size_t)len);
        body[len] = '\0';
        CmiPrintf("print_scan: pe=%d line=%d len=%d %s end\n", me, line, len, body);
        if (line % (LINES / PARTIALS) == 0) {
            const int partial = line / (LINES / PARTIALS);
            CmiPrintf("print_scan: pe=%d partial=%d", me, partial);
            CmiPrintf(" a");
            CmiPrintf(" b");
            CmiPrintf(" c end\n");
        }
        if (line % (LINES / ERRORS) == 0 && line / (LINES / ERRORS) < ERRORS) {
            const int err = line / (LINES / ERRORS);
            if (err % 2 == 0) {
                CmiError("print_scan: pe=%d error=%d end\n", me, err);
            } else {
                CmiError("print_scan: pe=%d error=%d", me, err);
                CmiError(" end\n");
            }
        }
    }
    free(body);
}

static void exit_handler(void* msg) {
    CmiFree(msg);
    finished = 1;
    CsdExitScheduler();
}

static void start(int argc, char** argv) {
    (void)argc;
    (void)argv;
    atexit(check_finished);
    exit_handler_id = CmiRegisterHandler(exit_handler);
    if (CmiMyPe() == 0) {
        int a = 0, b = 0, n;
        char word[64] = "";
        n = CmiScanf("%d %d %63s", &a, &b, word);
        if (n != 3)
            CmiAbort(
                "print_scan: CmiScanf(\"%%d %%d %%63s\") returned %d, expected 3 (stdin should "
                "start with \"17 42 hello\")",
                n);
        CmiPrintf("scanned %d %d %s\n", a, b, word);
    }
    print_all();
    CmiBarrier(); /* everyone has printed */
    if (CmiMyPe() == 0) {
        small_msg* e = (small_msg*)CmiAlloc(sizeof(small_msg));
        CmiPrintf(
            "print_scan: %d lines, %d partial lines and %d error lines from each of %d PEs "
            "ok\n",
            LINES, PARTIALS, ERRORS, CmiNumPes());
        CmiSetHandler(e, exit_handler_id);
        CmiSyncBroadcastAllAndFree(sizeof(small_msg), e);
    }
}

int main(int argc, char** argv) {
    ConverseInit(argc, argv, start, 0, 0);
    return 0;
}
