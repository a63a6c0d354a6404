/* cpthreads.c: cpthreads.h on every PE: a bounded buffer with one mutex and two condition
 * variables between PRODUCERS producers and CONSUMERS consumers (Cpthread threads, which
 * suspend while they wait); joins returning each thread's result; keys with a destructor;
 * cleanup handlers (popped with and without running, and run by Cpthread_exit); once; a
 * detached thread; trylock on a held mutex. Then every PE reports to PE 0. */
#include <converse.h>
#include <cpthreads.h>

#define PRODUCERS 3
#define CONSUMERS 2
#define ITEMS 200 /* per producer */
#define SLOTS 4

static Cpthread_mutex_t lock;
static Cpthread_cond_t not_full, not_empty;
static int buffer[SLOTS], count, head, produced, consumed_sum;
static Cpthread_key_t key;
static int destructed, cleaned, once_runs, detached_ran, checked_done, reports;
static int h_report, h_exit;

static void fail(const char* what) {
    CmiAbort("cpthreads: PE %d: %s", CmiMyPe(), what);
}

static void destructor(void* value) {
    if (*(int*)value != 42) fail("the key's destructor got the wrong value");
    ++destructed;
}

static void cleanup(void* arg) {
    cleaned += *(int*)arg;
}

static void once_fn(void) {
    ++once_runs;
}

static void* producer(void* arg) {
    static Cpthread_once_t once = CPTHREAD_ONCE_INIT;
    static int value = 42;
    const int id = (int)(size_t)arg;
    Cpthread_once(&once, once_fn);
    Cpthread_setspecific(key, &value);
    if (Cpthread_getspecific(key) != &value) fail("Cpthread_getspecific");
    for (int i = 0; i < ITEMS; ++i) {
        Cpthread_mutex_lock(&lock);
        while (count == SLOTS)
            Cpthread_cond_wait(&not_full, &lock);
        buffer[(head + count) % SLOTS] = id * 1000 + i;
        ++count;
        ++produced;
        Cpthread_cond_signal(&not_empty);
        Cpthread_mutex_unlock(&lock);
    }
    return (void*)(size_t)(id + 100);
}

static void* consumer(void* arg) {
    static int one = 1, ten = 10;
    long sum = 0;
    (void)arg;
    Cpthread_cleanup_push(cleanup, &one);
    Cpthread_cleanup_push(cleanup, &ten);
    Cpthread_cleanup_pop(0); /* removed without running: ten is never added */
    for (;;) {
        Cpthread_mutex_lock(&lock);
        while (count == 0 && produced < PRODUCERS * ITEMS)
            Cpthread_cond_wait(&not_empty, &lock);
        if (count == 0) {
            Cpthread_cond_broadcast(&not_empty); /* the other consumer ends too */
            Cpthread_mutex_unlock(&lock);
            break;
        }
        sum += buffer[head] % 1000;
        head = (head + 1) % SLOTS;
        --count;
        Cpthread_cond_signal(&not_full);
        Cpthread_mutex_unlock(&lock);
    }
    Cpthread_mutex_lock(&lock);
    consumed_sum += (int)sum;
    Cpthread_mutex_unlock(&lock);
    Cpthread_exit((void*)sum); /* runs the cleanup still pushed: one */
    return 0;
}

static void* detached(void* arg) {
    (void)arg;
    ++detached_ran;
    return 0;
}

static void report(void) {
    void* m = CmiAlloc(CmiMsgHeaderSizeBytes);
    CmiSetHandler(m, h_report);
    CmiSyncSendAndFree(0, CmiMsgHeaderSizeBytes, m);
}

static void* main_thread(void* arg) {
    Cpthread_t p[PRODUCERS], c[CONSUMERS], d;
    Cpthread_attr_t attr;
    void* result;
    long total = 0;
    (void)arg;
    Cpthread_mutex_init(&lock, 0);
    Cpthread_cond_init(&not_full, 0);
    Cpthread_cond_init(&not_empty, 0);
    Cpthread_key_create(&key, destructor);
    for (int i = 0; i < PRODUCERS; ++i)
        Cpthread_create(&p[i], 0, producer, (void*)(size_t)i);
    for (int i = 0; i < CONSUMERS; ++i)
        Cpthread_create(&c[i], 0, consumer, 0);
    Cpthread_attr_init(&attr);
    Cpthread_attr_setdetachstate(&attr, CPTHREAD_CREATE_DETACHED);
    Cpthread_attr_setstacksize(&attr, 65536);
    Cpthread_create(&d, &attr, detached, 0);
    for (int i = 0; i < PRODUCERS; ++i) {
        Cpthread_join(p[i], &result);
        if ((size_t)result != (size_t)(i + 100))
            fail("a producer's join returned the wrong result");
    }
    for (int i = 0; i < CONSUMERS; ++i) {
        Cpthread_join(c[i], &result);
        total += (long)result;
    }
    const long want = (long)PRODUCERS * ITEMS * (ITEMS - 1) / 2;
    if (total != want || consumed_sum != want)
        fail("the consumers' sums do not match what was produced");
    if (destructed != PRODUCERS) fail("the key destructor did not run once per producer");
    if (cleaned != CONSUMERS) fail("cleanup handlers: expected one run per consumer exit");
    if (once_runs != 1) fail("Cpthread_once ran more than once");
    if (!detached_ran) fail("the detached thread never ran");
    Cpthread_mutex_lock(&lock);
    if (Cpthread_mutex_trylock(&lock) == 0) fail("trylock took a held mutex");
    Cpthread_mutex_unlock(&lock);
    if (!Cpthread_equal(Cpthread_self(), Cpthread_self())) fail("Cpthread_equal");
    Cpthread_cond_destroy(&not_full);
    Cpthread_cond_destroy(&not_empty);
    Cpthread_mutex_destroy(&lock);
    Cpthread_key_delete(key);
    report();
    return 0;
}

static void report_handler(void* msg) {
    CmiFree(msg);
    if (++reports < CmiNumPes()) return;
    CmiPrintf("cpthreads: producers, consumers, joins, keys, cleanups on %d PEs ok\n", CmiNumPes());
    void* m = CmiAlloc(CmiMsgHeaderSizeBytes);
    CmiSetHandler(m, h_exit);
    CmiSyncBroadcastAllAndFree(CmiMsgHeaderSizeBytes, m);
}

static void exit_handler(void* msg) {
    CmiFree(msg);
    checked_done = 1;
    CsdExitScheduler();
}

static void at_exit_check(void) {
    if (!checked_done) _Exit(3);
}

static void start(int argc, char** argv) {
    Cpthread_t t;
    (void)argc;
    (void)argv;
    atexit(at_exit_check);
    h_report = CmiRegisterHandler(report_handler);
    h_exit = CmiRegisterHandler(exit_handler);
    if (Cpthread_init() != 0) fail("Cpthread_init");
    Cpthread_create(&t, 0, main_thread, 0);
    Cpthread_detach(t);
}

int main(int argc, char** argv) {
    ConverseInit(argc, argv, start, 0, 0);
    return 0;
}
