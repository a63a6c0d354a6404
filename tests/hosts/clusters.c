/* clusters.c: latency probing and the cluster map against the placement the test made:
 * -block B means PEs come in clusters of B consecutive PEs (PE p in cluster p / B). With
 * -probe the program calls CmiProbeLatencies itself (and first checks that nothing is known
 * yet); without it, PROBE_CLUSTERS=1 must have probed at start-up. Every PE checks every
 * entry: each latency known (0 to itself), each cluster as expected, out-of-range queries
 * LONG_MAX / -1. PE 0 prints its table and "clusters: ok" once every PE has checked.
 * Usage: clusters -block B [-probe] */
#include <converse.h>

#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "gather_checks.h"

static int block = 1;

static int check_all(void) {
    int failures = 0;
    const int n = CmiNumPes();
    for (int p = 0; p < n; ++p) {
        if (CmiGetCluster(p) != p / block) {
            CmiError("clusters: PE %d: PE %d is in cluster %d, expected %d\n", CmiMyPe(), p,
                     CmiGetCluster(p), p / block);
            ++failures;
        }
        for (int q = 0; q < n; ++q) {
            const long l = CmiGetLatency(p, q);
            if (l == LONG_MAX || l < 0 || (p == q && l != 0)) {
                CmiError("clusters: PE %d: latency %d -> %d is %ld\n", CmiMyPe(), p, q, l);
                ++failures;
            }
        }
    }
    if (CmiGetLatency(-1, 0) != LONG_MAX || CmiGetLatency(0, n) != LONG_MAX ||
        CmiGetCluster(n) != -1 || CmiGetCluster(-1) != -1) {
        CmiError("clusters: PE %d: an out-of-range query answered\n", CmiMyPe());
        ++failures;
    }
    return failures;
}

static void print_table(void) {
    for (int p = 0; p < CmiNumPes(); ++p) {
        char line[4096];
        int used = 0;
        for (int q = 0; q < CmiNumPes() && used < (int)sizeof line - 16; ++q)
            used += snprintf(line + used, sizeof line - (size_t)used, " %ld", CmiGetLatency(p, q));
        CmiPrintf("clusters: PE %d cluster %d latencies (us):%s\n", p, CmiGetCluster(p), line);
    }
    CmiPrintf("clusters: ok, %d PEs in clusters of %d\n", CmiNumPes(), block);
}

static void start(int argc, char** argv) {
    (void)argc;
    const int probe = CmiGetArgFlagDesc(argv, "-probe", "call CmiProbeLatencies");
    CmiGetArgIntDesc(argv, "-block", &block, "PEs per cluster");
    if (block < 1) CmiAbort("clusters: -block must be at least 1");
    gather_checks_init("clusters", print_table);
    if (probe) {
        if (CmiGetCluster(0) != -1 || CmiGetLatency(0, CmiNumPes() - 1) != LONG_MAX)
            CmiAbort("clusters: PE %d knows clusters before any probe", CmiMyPe());
        CmiProbeLatencies();
    }
    gather_checks_send(check_all());
}

int main(int argc, char** argv) {
    ConverseInit(argc, argv, start, 0, 0);
    return 0;
}
