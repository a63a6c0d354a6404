/* gather_checks.h: the ending shared by the tests/hosts check programs. Every PE sends PE 0
 * its count of failed checks (gather_checks_send); once all have come, PE 0 aborts naming
 * the total, or calls the program's `on_ok` (which prints its summary) and ends every PE.
 * Call gather_checks_init from the start function on every PE first. */
#ifndef COVERSE_TESTS_HOSTS_GATHER_CHECKS_H
#define COVERSE_TESTS_HOSTS_GATHER_CHECKS_H

#include <converse.h>

typedef struct {
    char header[CmiMsgHeaderSizeBytes];
    int failures;
} gather_count_msg;

static int gather_count_handler_id;
static int gather_done_handler_id;
static int gather_reported;
static int gather_failures;
static const char* gather_name;
static void (*gather_on_ok)(void);

static void gather_done_handler(void* msg) {
    CmiFree(msg);
    CsdExitScheduler();
}

static void gather_count_handler(void* msg) {
    gather_count_msg* m = (gather_count_msg*)msg;
    gather_failures += m->failures;
    CmiFree(m);
    if (++gather_reported < CmiNumPes()) return;
    if (gather_failures != 0) CmiAbort("%s: %d checks failed", gather_name, gather_failures);
    gather_on_ok();
    void* bye = CmiAlloc(CmiMsgHeaderSizeBytes);
    CmiSetHandler(bye, gather_done_handler_id);
    CmiSyncBroadcastAllAndFree(CmiMsgHeaderSizeBytes, bye);
}

static void gather_checks_init(const char* name, void (*on_ok)(void)) {
    gather_name = name;
    gather_on_ok = on_ok;
    gather_count_handler_id = CmiRegisterHandler(gather_count_handler);
    gather_done_handler_id = CmiRegisterHandler(gather_done_handler);
}

static void gather_checks_send(int failures) {
    gather_count_msg* m = (gather_count_msg*)CmiAlloc(sizeof(gather_count_msg));
    m->failures = failures;
    CmiSetHandler(m, gather_count_handler_id);
    CmiSyncSendAndFree(0, sizeof(gather_count_msg), m);
}

#endif
