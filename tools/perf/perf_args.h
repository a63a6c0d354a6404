/* perf_args.h: the flag and number parsing the two C benchmarks share (mpi_perf.c, pvr_bench.c),
 * the same syntax as perf_options.cpp's: counts in decimal, sizes with K, M, G as powers of 1024.
 * Header-only (static functions): mpi_perf.c is compiled alone by scripts/bench-perf.sh. */
#ifndef COVERSE_TOOLS_PERF_ARGS_H
#define COVERSE_TOOLS_PERF_ARGS_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A decimal count from min to max into *out; 0 when s is not one. */
static inline int perf_parse_long(const char* s, long min, long max, long* out) {
    char* end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end || errno || v < min || v > max) return 0;
    *out = v;
    return 1;
}

/* "8", "64K", "4M", "1G" (k, m, g too) of 1 to max_bytes bytes into *out; 0 when not one. */
static inline int perf_parse_size(const char* s, long max_bytes, long* out) {
    char buf[64];
    size_t n = strlen(s);
    long unit = 1;
    if (n == 0 || n >= sizeof buf) return 0;
    memcpy(buf, s, n + 1);
    switch (buf[n - 1]) {
        case 'k':
        case 'K':
            unit = 1024L;
            break;
        case 'm':
        case 'M':
            unit = 1024L * 1024;
            break;
        case 'g':
        case 'G':
            unit = 1024L * 1024 * 1024;
            break;
        default:
            break;
    }
    if (unit != 1) buf[n - 1] = '\0';
    long v;
    if (!perf_parse_long(buf, 1, max_bytes / unit, &v)) return 0;
    *out = v * unit;
    return 1;
}

/* The flag at argv[*i] and its value: "--name=value", or "--name value" for a flag listed
 * in `with_value` (NULL-terminated). `name` holds the flag of a "--name=value". Returns 0,
 * or 2 with `err` saying what is wrong (a value missing, or given to a flag that takes none). */
static inline int perf_next_flag(int argc, char** argv, int* i, const char* const* with_value,
                                 char name[32], const char** flag, const char** value, char* err,
                                 size_t errlen) {
    const char* a = argv[*i];
    const char* v = NULL;
    const char* eq = strchr(a, '=');
    if (strncmp(a, "--", 2) == 0 && eq && (size_t)(eq - a) < 32) {
        memcpy(name, a, (size_t)(eq - a));
        name[eq - a] = '\0';
        v = eq + 1;
        a = name;
    }
    int wants_value = 0;
    for (const char* const* w = with_value; *w; ++w)
        if (!strcmp(a, *w)) wants_value = 1;
    if (!wants_value && v) {
        snprintf(err, errlen, "%s takes no value", a);
        return 2;
    }
    if (wants_value && !v) {
        if (*i + 1 >= argc) {
            snprintf(err, errlen, "%s needs a value", a);
            return 2;
        }
        v = argv[++*i];
    }
    *flag = a;
    *value = v;
    return 0;
}

#endif
