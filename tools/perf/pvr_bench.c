/* pvr_bench: the raw process_vm_readv floor that the cma rendezvous is measured against
 * (scripts/bench-perf.sh, column "pvr"). Two processes, no runtime: the parent (the reader,
 * pinned to the first CPU) copies N bytes out of its child's buffer (pinned to the second
 * CPU) with back-to-back process_vm_readv calls. JSON lines with "impl":"pvr":
 *   bw:  MB/s (10^6 B/s) over R back-to-back reads of N bytes ("mbps")
 *   get: µs of one read of N bytes, median and mean ("p50_us", "lat_us")
 * Exit status 77 when the kernel refuses the read (Yama ptrace_scope, no CAP_SYS_PTRACE). */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "perf_args.h"

#define KiB 1024L
#define MiB (1024L * KiB)
#define MAX_SIZES 64
#define EXIT_SKIP 77

static const long default_sizes[] = {8, KiB, 64 * KiB, MiB, 4 * MiB};

struct options {
    int bw, get; /* 1: run that test */
    long sizes[MAX_SIZES];
    int nsizes;
    long iters, warmup; /* 0 and -1: the schedule below */
    int cpus[2];
    int quick;
};

static void usage(FILE* f) {
    fprintf(f,
            "Usage: pvr_bench [options]\n"
            "The raw process_vm_readv floor: a parent reads N bytes from its child's buffer,\n"
            "back to back, the two pinned to two CPUs. One JSON line per test and size.\n"
            "  --tests LIST   bw,get (default both): bw = MB/s of back-to-back reads,\n"
            "                 get = one-way µs of one read (p50_us, lat_us)\n"
            "  --sizes LIST   bytes per read, e.g. 8,1K,64K,1M,4M (the default)\n"
            "  --iters N      measured reads per test and size (default: 512 MiB worth for\n"
            "                 bw, clamped to 16..200000; 10000 up to 4 KiB for get, then fewer)\n"
            "  --warmup N     unmeasured reads first (default: a tenth, at least 1)\n"
            "  --cpus A,B     pin the reader to CPU A and the owner of the buffer to B (0,1)\n"
            "  --quick        few reads (a smoke test, the numbers are rough)\n"
            "  --json         accepted for symmetry with coverse-perf (output is always JSON)\n"
            "  -h, --help     this text\n"
            "Exit status: 0, 2 for a bad argument, 77 when the kernel refuses the read.\n");
}

/* 0: fine, 1: --help, 2: bad argument (message in err). */
static int parse_options(int argc, char** argv, struct options* o, char* err, size_t errlen) {
    memset(o, 0, sizeof *o);
    o->bw = o->get = 1;
    o->warmup = -1;
    o->cpus[1] = 1;
    for (int i = 1; i < argc; ++i) {
        static const char* const with_value[] = {"--tests",  "--sizes", "--iters",
                                                 "--warmup", "--cpus",  NULL};
        char name[32];
        const char *a, *v;
        if (perf_next_flag(argc, argv, &i, with_value, name, &a, &v, err, errlen)) return 2;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return 1;
        if (!strcmp(a, "--json")) continue;
        if (!strcmp(a, "--quick")) {
            o->quick = 1;
        } else if (!strcmp(a, "--tests")) {
            char list[256];
            snprintf(list, sizeof list, "%s", v);
            o->bw = o->get = 0;
            for (char* t = strtok(list, ","); t; t = strtok(NULL, ",")) {
                if (!strcmp(t, "bw")) {
                    o->bw = 1;
                } else if (!strcmp(t, "get")) {
                    o->get = 1;
                } else {
                    snprintf(err, errlen, "--tests: unknown test \"%s\" (bw, get)", t);
                    return 2;
                }
            }
            if (!o->bw && !o->get) {
                snprintf(err, errlen, "--tests: no test named");
                return 2;
            }
        } else if (!strcmp(a, "--sizes")) {
            char list[512];
            snprintf(list, sizeof list, "%s", v);
            o->nsizes = 0;
            for (char* t = strtok(list, ","); t; t = strtok(NULL, ",")) {
                if (o->nsizes == MAX_SIZES || !perf_parse_size(t, 1L << 30, &o->sizes[o->nsizes])) {
                    snprintf(err, errlen,
                             "--sizes: \"%s\" is not a size from 1 B to 1G (or too many sizes)", t);
                    return 2;
                }
                ++o->nsizes;
            }
            if (!o->nsizes) {
                snprintf(err, errlen, "--sizes: no size named");
                return 2;
            }
        } else if (!strcmp(a, "--iters") || !strcmp(a, "--warmup")) {
            long n;
            long min = !strcmp(a, "--warmup") ? 0 : 1;
            if (!perf_parse_long(v, min, 100000000, &n)) {
                snprintf(err, errlen, "%s: \"%s\" is not a count from %ld to 100000000", a, v, min);
                return 2;
            }
            if (!strcmp(a, "--iters"))
                o->iters = n;
            else
                o->warmup = n;
        } else if (!strcmp(a, "--cpus")) {
            long c0, c1;
            char first[32];
            const char* comma = strchr(v, ',');
            if (!comma || (size_t)(comma - v) >= sizeof first) {
                snprintf(err, errlen, "--cpus: \"%s\" is not two CPU numbers A,B", v);
                return 2;
            }
            memcpy(first, v, (size_t)(comma - v));
            first[comma - v] = '\0';
            if (!perf_parse_long(first, 0, CPU_SETSIZE - 1, &c0) ||
                !perf_parse_long(comma + 1, 0, CPU_SETSIZE - 1, &c1)) {
                snprintf(err, errlen, "--cpus: \"%s\" is not two CPU numbers A,B", v);
                return 2;
            }
            o->cpus[0] = (int)c0;
            o->cpus[1] = (int)c1;
        } else {
            snprintf(err, errlen, "unknown argument \"%s\"", argv[i]);
            return 2;
        }
    }
    if (!o->nsizes) {
        o->nsizes = (int)(sizeof default_sizes / sizeof *default_sizes);
        memcpy(o->sizes, default_sizes, sizeof default_sizes);
    }
    return 0;
}

static long clampl(long v, long lo, long hi) {
    return v < lo ? lo : v > hi ? hi : v;
}

/* bw reads as many bytes as coverse-perf's bw moves (512 MiB, --quick 16 MiB); get follows
 * coverse-perf's pingpong schedule, one read per round trip. */
static void plan(int bw, long bytes, const struct options* o, long* warmup, long* iters) {
    long n;
    if (bw) {
        n = clampl((o->quick ? 16 * MiB : 512 * MiB) / bytes, o->quick ? 2 : 16,
                   o->quick ? 2000 : 200000);
    } else {
        long base = o->quick ? 50 : 10000, floor = o->quick ? 5 : 100;
        n = bytes <= 4 * KiB ? base : clampl(base * (4 * KiB) / bytes, floor, base);
    }
    if (o->iters > 0) n = o->iters;
    *iters = n;
    *warmup = o->warmup >= 0 ? o->warmup : (n / 10 > 1 ? n / 10 : 1);
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Pins the calling process; a CPU this machine does not have is a note, not a failure. */
static void pin(int cpu, const char* who) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set))
        fprintf(stderr, "pvr_bench: could not pin the %s to CPU %d (%s); running unpinned\n", who,
                cpu, strerror(errno));
}

/* One read of n bytes, repeated while the kernel copies partially; 0 or an errno. */
static int read_remote(pid_t pid, char* local, const char* remote, size_t n) {
    size_t done = 0;
    while (done < n) {
        struct iovec l = {local + done, n - done};
        struct iovec r = {(void*)(remote + done), n - done};
        ssize_t got = process_vm_readv(pid, &l, 1, &r, 1, 0);
        if (got < 0) {
            if (errno == EINTR) continue;
            return errno;
        }
        if (got == 0) return EFAULT;
        done += (size_t)got;
    }
    return 0;
}

static int cmp_double(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b;
    return x < y ? -1 : x > y;
}

static int fail_read(int err, pid_t pid) {
    fprintf(stderr, "pvr_bench: process_vm_readv of the child (pid %d) failed: %s", (int)pid,
            strerror(err));
    if (err == EPERM)
        fprintf(stderr,
                " (the kernel refuses cross-memory reads here: Yama's kernel.yama.ptrace_scope "
                "above 1, or no CAP_SYS_PTRACE in this container); skipped\n");
    else if (err == ENOSYS)
        fprintf(stderr, " (no CONFIG_CROSS_MEMORY_ATTACH in this kernel); skipped\n");
    else
        fputc('\n', stderr);
    return err == EPERM || err == ENOSYS ? EXIT_SKIP : 1;
}

/* The reader's side; returns the exit status. */
static int measure(pid_t child, const struct options* o, char* local, const char* remote) {
    for (int i = 0; i < o->nsizes; ++i) {
        const long bytes = o->sizes[i];
        long warmup, iters;
        if (o->get) {
            plan(0, bytes, o, &warmup, &iters);
            double* t = malloc((size_t)iters * sizeof *t);
            if (!t) {
                fprintf(stderr, "pvr_bench: out of memory for %ld samples\n", iters);
                return 1;
            }
            double sum = 0;
            for (long k = -warmup; k < iters; ++k) {
                double t0 = now_s();
                int err = read_remote(child, local, remote, (size_t)bytes);
                if (err) {
                    free(t);
                    return fail_read(err, child);
                }
                if (k >= 0) {
                    t[k] = (now_s() - t0) * 1e6;
                    sum += t[k];
                }
            }
            qsort(t, (size_t)iters, sizeof *t, cmp_double);
            double p50 = iters % 2 ? t[iters / 2] : (t[iters / 2 - 1] + t[iters / 2]) / 2;
            printf(
                "{\"test\":\"get\",\"impl\":\"pvr\",\"bytes\":%ld,\"lat_us\":%.3f,"
                "\"p50_us\":%.3f,\"iters\":%ld,\"pes\":2}\n",
                bytes, sum / (double)iters, p50, iters);
            fflush(stdout);
            free(t);
        }
        if (o->bw) {
            plan(1, bytes, o, &warmup, &iters);
            double start = now_s();
            for (long k = -warmup; k < iters; ++k) {
                if (k == 0) start = now_s();
                int err = read_remote(child, local, remote, (size_t)bytes);
                if (err) return fail_read(err, child);
            }
            double secs = now_s() - start;
            printf(
                "{\"test\":\"bw\",\"impl\":\"pvr\",\"bytes\":%ld,\"mbps\":%.3f,\"iters\":%ld,"
                "\"pes\":2}\n",
                bytes, (double)bytes * (double)iters / secs / 1e6, iters);
            fflush(stdout);
        }
    }
    return 0;
}

int main(int argc, char** argv) {
    struct options o;
    char err[256] = "";
    int rc = parse_options(argc, argv, &o, err, sizeof err);
    if (rc == 1) {
        usage(stdout);
        return 0;
    }
    if (rc) {
        fprintf(stderr, "pvr_bench: %s\n", err);
        usage(stderr);
        return 2;
    }

    long max_bytes = 0;
    for (int i = 0; i < o.nsizes; ++i)
        if (o.sizes[i] > max_bytes) max_bytes = o.sizes[i];
    /* Mapped before the fork, so the child's copy sits at the same address: the reader names
     * it without a handshake. The child writes every page, so the pages it owns are its own
     * (copy on write), not pages shared with the reader. */
    char* remote =
        mmap(NULL, (size_t)max_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    char* local =
        mmap(NULL, (size_t)max_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (remote == MAP_FAILED || local == MAP_FAILED) {
        fprintf(stderr, "pvr_bench: mmap of 2 x %ld bytes failed: %s\n", max_bytes,
                strerror(errno));
        return 1;
    }
    int ready[2], done[2];
    if (pipe(ready) || pipe(done)) {
        fprintf(stderr, "pvr_bench: pipe: %s\n", strerror(errno));
        return 1;
    }
    fflush(stdout);
    pid_t child = fork();
    if (child < 0) {
        fprintf(stderr, "pvr_bench: fork: %s\n", strerror(errno));
        return 1;
    }
    if (child == 0) {
        close(ready[0]);
        close(done[1]);
        /* The owner of the buffer: fault it in, say so, then sleep until the reader is done
         * (a reader of its own memory needs nothing from it, as in a cma rendezvous get). */
        pin(o.cpus[1], "buffer's owner");
        memset(remote, 0x5a, (size_t)max_bytes);
        char c = 'r';
        if (write(ready[1], &c, 1) != 1) _exit(1);
        while (read(done[0], &c, 1) < 0 && errno == EINTR) {
        }
        _exit(0);
    }
    close(ready[1]); /* so a child that dies unready ends the read below */
    close(done[0]);
    pin(o.cpus[0], "reader");
    munmap(remote, (size_t)max_bytes); /* the reader's copy is never touched */
    memset(local, 0, (size_t)max_bytes);
    char c;
    ssize_t n;
    while ((n = read(ready[0], &c, 1)) < 0 && errno == EINTR) {
    }
    if (n == 1) {
        rc = measure(child, &o, local, remote);
    } else {
        fprintf(stderr, "pvr_bench: the child died before it was ready\n");
        rc = 1;
    }
    close(done[1]); /* the child's read returns 0: it exits */
    int status;
    while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
    }
    return rc;
}
