/* ring.c: a token goes around the ring of PEs (PE p hands it to PE p+1 mod N) for a number
 * of laps; every PE counts its visits and the token counts its hops. PE 0 checks the hop
 * count, every PE checks its visit count when the exit broadcast arrives.
 * -fork: first every PE forks a child that returns through exit(5) without exec (a copy of
 * the PE in it): the child's end must leave its parent's PE alone (no exit vote on the
 * parent's connections, no shared-memory name removed), so the ring then runs as always.
 * Usage: ring [-laps N] [-fork]   (default 100 laps) */
#include <converse.h>

#include <stdlib.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct {
    char header[CmiMsgHeaderSizeBytes];
    int lap;  /* laps completed so far */
    int hops; /* hand-overs so far */
} token_msg;

typedef struct {
    char header[CmiMsgHeaderSizeBytes];
    int laps;
} exit_msg;

static int token_handler_id;
static int exit_handler_id;
static int laps_wanted = 100;
static int visits;   /* times the token arrived here */
static int finished; /* the exit broadcast arrived and every check passed */

static void check_finished(void) {
    if (!finished) {
        CmiError("ring: PE %d exited before the exit broadcast arrived\n", CmiMyPe());
        _Exit(3);
    }
}

static void send_exit(void) {
    exit_msg* m = (exit_msg*)CmiAlloc(sizeof(exit_msg));
    m->laps = laps_wanted;
    CmiSetHandler(m, exit_handler_id);
    CmiSyncBroadcastAllAndFree(sizeof(exit_msg), m);
}

static void token_handler(void* msg) {
    token_msg* t = (token_msg*)msg;
    const int next = (CmiMyPe() + 1) % CmiNumPes();
    ++visits;
    if (CmiMyPe() == 0) {
        if (t->hops != (t->lap + 1) * CmiNumPes())
            CmiAbort("ring: after lap %d expected %d hops, the token counted %d", t->lap + 1,
                     (t->lap + 1) * CmiNumPes(), t->hops);
        ++t->lap;
        if (t->lap == laps_wanted) {
            CmiPrintf("ring: %d laps on %d PEs ok\n", laps_wanted, CmiNumPes());
            CmiFree(t);
            send_exit();
            return;
        }
    }
    ++t->hops;
    CmiSyncSendAndFree(next, sizeof(token_msg), t);
}

static void exit_handler(void* msg) {
    exit_msg* m = (exit_msg*)msg;
    /* Every PE, PE 0 included, sees the token once per lap. */
    const int expected = m->laps;
    if (visits != expected)
        CmiAbort("ring: PE %d expected %d token visits, counted %d", CmiMyPe(), expected, visits);
    CmiFree(m);
    finished = 1;
    CsdExitScheduler();
}

static void fork_a_child(void) {
    int status = 0;
    const pid_t child = fork();
    if (child < 0) CmiAbort("ring: fork failed");
    if (child == 0) exit(5); /* the exit handlers run in the child, before check_finished exists */
    if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 5)
        CmiAbort("ring: PE %d's child did not end with exit(5)", CmiMyPe());
}

static void start(int argc, char** argv) {
    (void)argc;
    CmiGetArgIntDesc(argv, "-laps", &laps_wanted, "laps of the token around the ring");
    if (laps_wanted < 1) CmiAbort("ring: -laps must be at least 1, got %d", laps_wanted);
    if (CmiGetArgFlagDesc(argv, "-fork", "fork a child that exits first")) fork_a_child();
    atexit(check_finished);
    token_handler_id = CmiRegisterHandler(token_handler);
    exit_handler_id = CmiRegisterHandler(exit_handler);
    if (CmiMyPe() == 0) {
        token_msg t; /* on the stack: CmiSyncSend copies it */
        t.lap = 0;
        t.hops = 1;
        CmiSetHandler(&t, token_handler_id);
        CmiSyncSend(1 % CmiNumPes(), sizeof t, &t);
    }
}

int main(int argc, char** argv) {
    ConverseInit(argc, argv, start, 0, 0);
    return 0;
}
