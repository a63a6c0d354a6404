#!/bin/bash
# pmix_hosts.sh: PMIx jobs across hosts on the test bed (testbed.sh: one network namespace
# per host on a bridge), started by a real resource manager instead of coverse-run.
#   pmix_hosts.sh SCENARIO SUBNET LEGACY_DIR HOSTS_DIR
# SCENARIO:
#   slurm_2x2   a Slurm of the test's own: slurmctld and one slurmd in host h0, another
#               slurmd in host h1 (each its NodeName, NodeAddr = its eth0 address, 2 CPUs,
#               its own spool, log, pid and TmpFS), config and state in the test's temp
#               dir, ClusterName unique per run; `srun --mpi=pmix -N2 -n4
#               --ntasks-per-node=2 -m block` from h0 runs legacy_ring and hosts_topology
#               with ++verbose
#   mpirun_2x2  Open MPI's mpirun in h0 with --host h0:2,h1:2 and an rsh agent (written
#               here) that enters the host's namespace (and a UTS namespace named after
#               it); the hosts' names resolve through /etc/netns/NS/hosts, which
#               `ip netns exec` mounts over /etc/hosts
# Both check: exit status 0 and the program's ok line; which PE ran on which host, from the
# starter itself (each task prints its rank and node before it execs the program); each PE
# listens on its own host's eth0 address (PMIx says the job spans 2 nodes, so never on
# loopback); ++verbose's per-peer lines: same-host pairs on the shm ring + cma, other pairs
# on the connection + tcp, both ends of each pair, exactly the pairs legacy_ring talks
# over; and no process of the job is left in the hosts (testbed_left) once it ended and
# once the daemons were stopped. Every daemon is stopped by its PID at exit, also on
# failure; the temp dir, the namespaces, the bridge and /etc/netns files go with them.
# Exit 77 (skip) with the reason when not root, or Slurm, its mpi_pmix plugin or mpirun is
# missing. SUBNET is the third octet of the scenario's 10.99.SUBNET.0/24.
set -u
scenario="$1"
# shellcheck disable=SC2034 # used by paths.sh
subnet="$2"
legacy="$3"
here="$4"
# shellcheck source-path=SCRIPTDIR source=testbed.sh
. "$(dirname "$0")/testbed.sh"
# shellcheck source=paths.sh
. "$(dirname "$0")/paths.sh"
# shellcheck source=../startup/slurm_conf.sh
. "$(dirname "$0")/../startup/slurm_conf.sh"
# Under ASan: libpmix's own leaks from PMIx_Init are suppressed, nothing else (as in
# tests/startup/pmix_check.sh); srun passes the environment, mpirun gets -x.
LSAN_OPTIONS="suppressions=$(cd "$(dirname "$0")/../startup" && pwd)/lsan-pmix.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
ASAN_OPTIONS="fast_unwind_on_malloc=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export LSAN_OPTIONS ASAN_OPTIONS

case "$scenario" in
slurm_2x2)
    for tool in slurmctld slurmd srun sinfo nsenter; do
        command -v "$tool" >/dev/null 2>&1 ||
            testbed_skip "$tool is not installed (scripts/setup.sh installs slurmctld, slurmd, slurm-client)"
    done
    ls /usr/lib/x86_64-linux-gnu/slurm-wlm/mpi_pmix*.so >/dev/null 2>&1 ||
        testbed_skip "Slurm has no mpi_pmix plugin (Debian's slurm-wlm-basic-plugins ships it)"
    ;;
mpirun_2x2)
    for tool in mpirun orted unshare; do
        command -v "$tool" >/dev/null 2>&1 ||
            testbed_skip "$tool is not installed (scripts/setup.sh installs openmpi-bin)"
    done
    ;;
*)
    echo "pmix_hosts.sh: unknown scenario '$scenario'" >&2
    exit 2
    ;;
esac
[ "$(id -u)" = 0 ] || testbed_skip "the daemons and the namespaces need root; this is uid $(id -u)"

testbed_init "pmix-$scenario"
LOG="$TB_DIR/log"
DAEMONS=()

# stop_daemons: the daemons by their PIDs (TERM, then KILL after 5 s).
stop_daemons() {
    local pid i
    for pid in "${DAEMONS[@]}"; do kill "$pid" 2>/dev/null; done
    for pid in "${DAEMONS[@]}"; do
        i=0
        while kill -0 "$pid" 2>/dev/null && [ $i -lt 50 ]; do
            sleep 0.1
            i=$((i + 1))
        done
        kill -KILL "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
    done
    DAEMONS=()
}
# At exit, also on failure: the daemons, then the test bed (and its /etc/netns files).
cleanup() {
    stop_daemons
    testbed_cleanup
}
trap cleanup EXIT


for h in h0 h1; do
    testbed_host "$h" "$(addr_of "$h")/24" || fail "could not make host $h"
done

# placement PES WHAT: HOST_OF[i] is the host PE i ran on, from the starter's own line each task
# prints before it execs the program ("pmix_hosts: rank R on node N"; R is the PMIx rank,
# which coverse takes as the PE number).
placement() {
    local pes="$1" i line
    HOST_OF=()
    for ((i = 0; i < pes; ++i)); do
        line="$(grep "^pmix_hosts: rank $i on node " "$LOG")"
        [ "$(printf '%s\n' "$line" | grep -c .)" = 1 ] ||
            fail "rank $i's placement line appears $(printf '%s\n' "$line" | grep -c .) times, expected once"
        HOST_OF[i]="${line##* }"
        case "${HOST_OF[i]}" in h0 | h1) ;; *) fail "rank $i ran on node '${HOST_OF[i]}', not h0 or h1" ;; esac
    done
    echo "$2: PEs 0..$((pes - 1)) ran on ${HOST_OF[*]}"
}

# check_spread PES: HOST_OF puts PES/2 PEs on each host (so the ++verbose lines test both
# paths: the shared-memory one within each host and TCP between them).
check_spread() {
    local pes="$1" n0=0 i
    for ((i = 0; i < pes; ++i)); do [ "${HOST_OF[i]}" = h0 ] && n0=$((n0 + 1)); done
    [ "$n0" = $((pes / 2)) ] || fail "$n0 of $pes PEs ran on h0, expected $((pes / 2)) (2 per node)"
}

# job_left: fails when a process that was not in the hosts before the job (BEFORE: the
# daemons and their helpers, such as slurmctld's slurmscriptd) is still there 5 s after
# the job ended (slurmstepd and the tasks end within a second).
job_left() {
    local i pid extra
    for ((i = 0; i < 50; ++i)); do
        extra=""
        for pid in $(testbed_left); do
            case " $BEFORE " in *" $pid "*) ;; *) extra="$extra $pid" ;; esac
        done
        [ -z "$extra" ] && return 0
        sleep 0.1
    done
    extra="${extra# }"
    fail "processes of the job left in the hosts: $(ps -o pid=,args= -p "${extra// /,}")"
}


# The wrapper each task runs: prints where it is (the starter's word: Slurm's node name,
# else the host name the rsh agent gave), then execs the program.
# shellcheck disable=SC2016 # expanded by each task's sh
where='echo "pmix_hosts: rank ${PMIX_RANK:-?} on node ${SLURMD_NODENAME:-$(hostname)}" >&2; exec "$0" "$@"'

# ---------------------------------------------------------------- Slurm
slurm_2x2() {
    local sdir="$TB_DIR/slurm" conf cluster h i pid ctld_host
    conf="$sdir/slurm.conf"
    cluster="cvhosts$$"
    ctld_host="$(hostname -s)"
    mkdir -p "$sdir/state" "$sdir/log" "$sdir/run" "$sdir/spool/h0" "$sdir/spool/h1" \
        "$sdir/tmp/h0" "$sdir/tmp/h1"
    # The ports are fixed: the daemons listen inside the test's own namespaces only.
    slurm_conf "$conf" "$sdir" "$cluster" "$ctld_host" "$(addr_of h0)" 6817 6818 \
        "h0=$(addr_of h0)" "h1=$(addr_of h1)"
    export SLURM_CONF="$conf"
    # nsenter, not ip netns exec: that one remounts /sys without cgroups and slurmd refuses
    # to start (/work/shared/SLURM.md). nsenter execs the daemon: $! is its PID.
    nsenter --net="/var/run/netns/$TB-h0" slurmctld -D -f "$conf" >"$sdir/log/slurmctld.out" 2>&1 &
    DAEMONS+=($!)
    for h in h0 h1; do
        nsenter --net="/var/run/netns/$TB-$h" slurmd -D -N "$h" -f "$conf" >"$sdir/log/slurmd-$h.out" 2>&1 &
        DAEMONS+=($!)
    done
    # Ready when both nodes are idle (about 1-2 s; at most 15 s).
    i=0
    until [ "$(nsenter --net="/var/run/netns/$TB-h0" sinfo -h -o '%n %t' 2>/dev/null | sort | tr '\n' ' ')" = "h0 idle h1 idle " ]; do
        for pid in "${DAEMONS[@]}"; do
            kill -0 "$pid" 2>/dev/null || {
                tail -n 5 "$sdir/log/"* >&2
                fail "a Slurm daemon (pid $pid) ended at start-up"
            }
        done
        if [ $i -ge 150 ]; then
            tail -n 5 "$sdir/log/"* >&2
            fail "the test's Slurm did not come up in 15 s (nodes: $(nsenter --net="/var/run/netns/$TB-h0" sinfo -h -o '%n %t' 2>&1 | tr '\n' ' '))"
        fi
        sleep 0.1
        i=$((i + 1))
    done

    BEFORE="$(testbed_left | tr '\n' ' ')"

    # srun env: the cluster name reaches the tasks (coverse mixes it into the job key, so
    # the shared-memory files of two Slurms with the same job number do not meet).
    srun_job env
    [ "$status" = 0 ] || fail "srun env: exit status $status"
    [ "$(grep -c "^SLURM_CLUSTER_NAME=$cluster\$" "$LOG")" = 4 ] ||
        fail "the tasks do not all see SLURM_CLUSTER_NAME=$cluster: $(grep SLURM_CLUSTER_NAME "$LOG" | tr '\n' ' ')"

    srun_job sh -c "$where" "$legacy/legacy_ring" -laps 20 ++verbose
    expect_ok ring "ring: 20 laps on 4 PEs ok"
    placement 4 ring
    check_spread 4
    check_paths 4 ring tree
    job_left

    srun_job sh -c "$where" "$here/hosts_topology" -hosts 2 -ppn 2 ++verbose
    expect_ok topology "topology: ok on 4 PEs, 2 hosts"
    placement 4 topology
    check_spread 4
    check_paths 4
    job_left
}

# srun_job CMD...: 4 tasks, 2 on each node in blocks (ranks 0, 1 on the first: topology.c
# expects blocks; the other checks follow whatever placement the starter reports), from h0.
# Each job's timeout keeps the whole test inside ctest's 150 s, so the trap always runs.
srun_job() {
    nsenter --net="/var/run/netns/$TB-h0" timeout -k 3 30 srun --mpi=pmix -N2 -n4 --ntasks-per-node=2 \
        -m block "$@" >"$LOG" 2>&1 </dev/null
    status=$?
}

# ---------------------------------------------------------------- Open MPI's mpirun
mpirun_2x2() {
    # Host names resolve in the hosts as on a cluster; the rsh agent enters the namespaces.
    testbed_names "h0=$(addr_of h0)" "h1=$(addr_of h1)" || fail "cannot write /etc/netns/$TB-h*/hosts"
    testbed_rsh_agent "$TB_DIR/rsh-agent" || fail "cannot write the rsh agent"
    BEFORE=""

    mpirun_job "$legacy/legacy_ring" -laps 20 ++verbose
    expect_ok ring "ring: 20 laps on 4 PEs ok"
    placement 4 ring
    check_spread 4
    check_paths 4 ring tree
    job_left

    mpirun_job "$here/hosts_topology" -hosts 2 -ppn 2 ++verbose
    expect_ok topology "topology: ok on 4 PEs, 2 hosts"
    placement 4 topology
    check_spread 4
    check_paths 4
    job_left
}

# mpirun_job PROGRAM ARGS...: 4 tasks on h0:2,h1:2 (by slot: blocks, as for srun) from
# mpirun in h0 (named h0), its out-of-band TCP on eth0, its session directories in the
# temp dir.
mpirun_job() {
    testbed_exec_named h0 timeout -k 3 30 mpirun --allow-run-as-root --host h0:2,h1:2 -np 4 --map-by slot --bind-to none \
        --mca plm_rsh_agent "$TB_DIR/rsh-agent" --mca oob_tcp_if_include eth0 \
        --mca btl_tcp_if_include eth0 --mca orte_tmpdir_base "$TB_DIR/ompi" -x LSAN_OPTIONS -x ASAN_OPTIONS \
        sh -c "$where" "$@" >"$LOG" 2>&1 </dev/null
    status=$?
}

case "$scenario" in
slurm_2x2) slurm_2x2 ;;
mpirun_2x2) mpirun_2x2 ;;
esac
stop_daemons
nothing_left
echo "pmix_hosts $scenario: ok"
