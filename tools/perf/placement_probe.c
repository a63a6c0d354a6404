/* placement_probe: how far apart the host placed the two CPUs the benchmarks pin to. A
 * parent on CPU 0 and a child on CPU 1 bounce one cache line (each waits for the other's
 * store, then stores), and it prints the median one-way time of 2000 blocks of 100 bounces,
 * in microseconds, as JSON: {"probe":"cache_line","cpus":[0,1],"one_way_us":0.083}.
 * On a VM the host moves vCPUs: the same pair reads 0.09 us or 0.29 us depending on
 * placement (shared/MEASURED.md), and every same-host result moves with it, so
 * scripts/bench-perf.sh runs this before and after each run and files the run by it.
 * Usage: placement_probe [--cpus A,B] [-h|--help] */
#define _GNU_SOURCE
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { blocks = 2000, per_block = 100 };

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int pin(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return sched_setaffinity(0, sizeof set, &set);
}

static int by_value(const void* a, const void* b) {
    const double x = *(const double*)a, y = *(const double*)b;
    return (x > y) - (x < y);
}

int main(int argc, char** argv) {
    int cpu_a = 0, cpu_b = 1;
    for (int i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: placement_probe [--cpus A,B]\n"
                   "Bounces a cache line between CPU A (default 0) and CPU B (default 1) and\n"
                   "prints the median one-way time as JSON; see scripts/bench-perf.sh.\n");
            return 0;
        }
        if (!strcmp(argv[i], "--cpus") && i + 1 < argc &&
            sscanf(argv[i + 1], "%d,%d", &cpu_a, &cpu_b) == 2 && cpu_a >= 0 && cpu_b >= 0) {
            ++i;
            continue;
        }
        fprintf(stderr, "placement_probe: bad argument '%s' (see --help)\n", argv[i]);
        return 2;
    }
    /* Two counters on lines of their own: the parent writes `ping`, the child `pong`. */
    _Atomic long* line =
        mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (line == MAP_FAILED) {
        perror("placement_probe: mmap");
        return 1;
    }
    _Atomic long* ping = line;
    _Atomic long* pong = line + 16;
    const long total = (long)blocks * per_block;
    const pid_t child = fork();
    if (child < 0) {
        perror("placement_probe: fork");
        return 1;
    }
    if (child == 0) {
        if (pin(cpu_b) != 0) _exit(3);
        for (long i = 1; i <= total; ++i) {
            while (atomic_load_explicit(ping, memory_order_acquire) != i) {
            }
            atomic_store_explicit(pong, i, memory_order_release);
        }
        _exit(0);
    }
    if (pin(cpu_a) != 0) {
        fprintf(stderr, "placement_probe: cannot pin to CPU %d\n", cpu_a);
        kill(child, SIGKILL);
        return 1;
    }
    static double one_way[blocks];
    long i = 1;
    for (int b = 0; b < blocks; ++b) {
        const double t0 = now_s();
        for (int k = 0; k < per_block; ++k, ++i) {
            atomic_store_explicit(ping, i, memory_order_release);
            for (unsigned long spins = 1;
                 atomic_load_explicit(pong, memory_order_acquire) != i; ++spins) {
                if ((spins & 0xFFFFFF) == 0 && now_s() - t0 > 5.0) {  /* never hang */
                    fprintf(stderr, "placement_probe: no answer from CPU %d in 5 s\n", cpu_b);
                    kill(child, SIGKILL);
                    waitpid(child, NULL, 0);
                    return 1;
                }
            }
        }
        one_way[b] = (now_s() - t0) / per_block / 2 * 1e6;
    }
    int status = 0;
    waitpid(child, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "placement_probe: the child on CPU %d failed (cannot pin?)\n", cpu_b);
        return 1;
    }
    qsort(one_way, blocks, sizeof one_way[0], by_value);
    printf("{\"probe\":\"cache_line\",\"cpus\":[%d,%d],\"one_way_us\":%.4f}\n", cpu_a, cpu_b,
           one_way[blocks / 2]);
    return 0;
}
