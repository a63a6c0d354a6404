/* topology.c: the host topology calls (CmiNumPhysicalNodes, CmiPhysicalNodeID,
 * CmiPhysicalRank, CmiNumPesOnPhysicalNode, CmiGetFirstPeOnPhysicalNode,
 * CmiGetPesOnPhysicalNode, CmiPeOnSamePhysicalNode) against the placement the test asked
 * for: -hosts H -ppn P means PEs in blocks of P per host (coverse-run ++ppn P), so PE p is
 * on node p / P with rank p % P. Every PE checks every PE; out-of-range arguments answer
 * -1 (0, an empty list). Each PE prints one line "topology: PE p node n rank r" and PE 0
 * "topology: ok" once all have checked (a reduction of the failure counts).
 * Usage: topology -hosts H -ppn P */
#include <converse.h>

#include <stdlib.h>

#include "gather_checks.h"

static int hosts = 1;
static int ppn = 1;

static int check_all(void) {
    int failures = 0;
    const int n = CmiNumPes();
#define EXPECT(cond, ...)          \
    do {                           \
        if (!(cond)) {             \
            CmiError(__VA_ARGS__); \
            ++failures;            \
        }                          \
    } while (0)
    EXPECT(CmiCpuTopologyEnabled() == 1, "topology: CmiCpuTopologyEnabled is 0\n");
    EXPECT(CmiNumPhysicalNodes() == hosts, "topology: PE %d: %d physical nodes, expected %d\n",
           CmiMyPe(), CmiNumPhysicalNodes(), hosts);
    for (int p = 0; p < n; ++p) {
        EXPECT(CmiPhysicalNodeID(p) == p / ppn, "topology: PE %d: node of PE %d is %d, not %d\n",
               CmiMyPe(), p, CmiPhysicalNodeID(p), p / ppn);
        EXPECT(CmiPhysicalRank(p) == p % ppn, "topology: PE %d: rank of PE %d is %d, not %d\n",
               CmiMyPe(), p, CmiPhysicalRank(p), p % ppn);
        for (int q = 0; q < n; ++q)
            EXPECT(CmiPeOnSamePhysicalNode(p, q) == (p / ppn == q / ppn),
                   "topology: PE %d: same node(%d, %d) wrong\n", CmiMyPe(), p, q);
    }
    for (int node = 0; node < hosts; ++node) {
        const int first = node * ppn;
        const int count = first + ppn <= n ? ppn : n - first;
        int* pes = NULL;
        int num = -1;
        EXPECT(CmiNumPesOnPhysicalNode(node) == count, "topology: node %d has %d PEs, not %d\n",
               node, CmiNumPesOnPhysicalNode(node), count);
        EXPECT(CmiGetFirstPeOnPhysicalNode(node) == first, "topology: node %d starts at %d\n", node,
               CmiGetFirstPeOnPhysicalNode(node));
        CmiGetPesOnPhysicalNode(node, &pes, &num);
        EXPECT(num == count && pes != NULL, "topology: node %d lists %d PEs\n", node, num);
        for (int i = 0; i < num && i < count; ++i)
            EXPECT(pes[i] == first + i, "topology: node %d PE %d is %d\n", node, i, pes[i]);
    }
    EXPECT(CmiPhysicalNodeID(-1) == -1 && CmiPhysicalNodeID(n) == -1,
           "topology: a PE out of range has a node\n");
    EXPECT(CmiPhysicalRank(n) == -1, "topology: a PE out of range has a rank\n");
    EXPECT(CmiNumPesOnPhysicalNode(hosts) == 0, "topology: a node out of range has PEs\n");
    EXPECT(CmiGetFirstPeOnPhysicalNode(-1) == -1, "topology: a node out of range has a PE\n");
    EXPECT(CmiPeOnSamePhysicalNode(0, n) == 0, "topology: a PE out of range shares a node\n");
    {
        int* pes = NULL;
        int num = -1;
        CmiGetPesOnPhysicalNode(hosts, &pes, &num);
        EXPECT(num == 0, "topology: a node out of range lists %d PEs\n", num);
    }
#undef EXPECT
    return failures;
}

static void print_ok(void) {
    CmiPrintf("topology: ok on %d PEs, %d hosts\n", CmiNumPes(), hosts);
}

static void start(int argc, char** argv) {
    (void)argc;
    CmiGetArgIntDesc(argv, "-hosts", &hosts, "hosts the job runs on");
    CmiGetArgIntDesc(argv, "-ppn", &ppn, "PEs per host (blocks)");
    if (hosts < 1 || ppn < 1) CmiAbort("topology: -hosts and -ppn must be at least 1");
    gather_checks_init("topology", print_ok);
    const int failures = check_all();
    CmiPrintf("topology: PE %d node %d rank %d\n", CmiMyPe(), CmiPhysicalNodeID(CmiMyPe()),
              CmiPhysicalRank(CmiMyPe()));
    gather_checks_send(failures);
}

int main(int argc, char** argv) {
    ConverseInit(argc, argv, start, 0, 0);
    return 0;
}
