#!/bin/sh
# pmix_check.sh: runs a legacy program under a PMIx server and checks the result.
#   pmix_check.sh mpirun|srun|none <PEs> ok|abort|abort-alone|refused|no-pmix|mismatch|exit-thread
#                 <program> [args...]
# ok:      exit 0 and the program's "<name>: ... on <PEs> PEs ok" line (the size came from PMIx)
# abort:   non-zero exit and abort_check's message from the last PE (CmiAbort -> PMIx_Abort)
# abort-alone: abort_check -alone: the last PE aborts at once, the others are connected to
#          nobody and idle, so nothing but PMIx_Abort stops them: non-zero exit (not the
#          timeout's 124) with the message and the abort's status 1, and without the
#          starter's text for a process that merely ended: mpirun's "non-zero exit code",
#          Slurm's "Error handler invoked" (a client gone without PMIx_Finalize)
# refused: every PE gets PMIX_NAMESPACE=bogus: non-zero exit and the PMIx_Init error
#          (launcher none: one process with PMIX_* variables but no server at all)
# no-pmix: srun --mpi=none: non-zero exit and the "without PMIx" error
# mismatch: the program also gets +p<PEs+1>: non-zero exit, the error names both counts
# exit-thread: abort_check -exit-thread: the last PE calls exit(3) from a thread that is not
#          the PE's: status 3 and the PE's text naming its exit(3) (mpirun only)
# Under mpirun as root, the job runs with a /dev/shm of its own (a mount namespace with a
# fresh tmpfs, so other tests' names do not count), and no coverse-* name may be left in it
# when the job has ended: nobody removes them under PMIx (exit-thread skips without it).
# Every case also checks that no process of the job is left (found by a marker variable).
# srun needs SLURM_CONF (run it under slurm_bed.sh). Exit 77 (skip) when mpirun cannot run.
set -u
# The pids of the processes carrying the job's marker variable ($1), this shell's aside.
job_pids() {
    grep -l -s -a "STARTUP_TEST_MARK=$1" /proc/[0-9]*/environ 2>/dev/null |
        grep -v "^/proc/$$/" | sed 's#/proc/\([0-9]*\)/environ#\1#' | tr '\n' ' '
}
# Waits up to 5 s for them to end; prints those still running.
wait_job_end() {
    i=0
    while left=$(job_pids "$1") && [ -n "$left" ] && [ $i -lt 50 ]; do
        sleep 0.1
        i=$((i + 1))
    done
    printf '%s' "$left"
}
# Inside the mpirun case's mount namespace (this script again, under unshare -m): the job
# runs with a fresh /dev/shm, and the coverse-* names it left once every process of it has
# ended (a PE still ending could yet remove or make one) go to the file $2.
if [ "${1:-}" = --in-private-shm ]; then
    left_file=$2 job_mark=$3
    shift 3
    mount -t tmpfs tmpfs /dev/shm || exit 125
    "$@"
    st=$?
    wait_job_end "$job_mark" >/dev/null
    ls /dev/shm | grep "^coverse-" >"$left_file"
    exit $st
fi
launcher=$1 npes=$2 want=$3
shift 3
name=$(basename "$1")
name=${name#legacy_}
mark="coverse_pmix_check_$$_$(date +%s%N)"
out=$(mktemp /tmp/coverse-pmix-out.XXXXXX)
trap 'rm -f "$out"' EXIT
wrap=
[ "$want" = refused ] && wrap="env PMIX_NAMESPACE=bogus"
[ "$want" = mismatch ] && set -- "$@" "+p$((npes + 1))"
[ "$want" = abort-alone ] && set -- "$@" -alone
[ "$want" = exit-thread ] && set -- "$@" -exit-thread
# Under ASan: libpmix's own leaks from PMIx_Init are suppressed, nothing else (see the file).
LSAN_OPTIONS="suppressions=$(dirname "$0")/lsan-pmix.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
ASAN_OPTIONS="fast_unwind_on_malloc=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export LSAN_OPTIONS ASAN_OPTIONS

case $launcher in
mpirun)
    if ! command -v mpirun >/dev/null 2>&1; then
        echo "pmix_check.sh: SKIP: mpirun is not installed (scripts/setup.sh installs openmpi-bin)"
        exit 77
    fi
    if ! timeout 30 mpirun --allow-run-as-root -np 1 true >"$out" 2>&1; then
        echo "pmix_check.sh: SKIP: mpirun cannot start a process here:"
        cat "$out"
        exit 77
    fi
    # A /dev/shm of the job's own, where the system lets us make one.
    private_shm=
    if [ "$(id -u)" = 0 ] && unshare -m sh -c 'mount -t tmpfs tmpfs /dev/shm' >/dev/null 2>&1; then
        private_shm=$(mktemp /tmp/coverse-pmix-shm.XXXXXX) || {
            echo "pmix_check.sh: cannot make a temporary file in /tmp" >&2
            exit 1
        }
        trap 'rm -f "$out" "$private_shm"' EXIT
    elif [ "$want" = exit-thread ]; then
        echo "pmix_check.sh: SKIP: cannot give the job a /dev/shm of its own (needs root and" \
            "unshare -m), and the names it leaves are what exit-thread checks"
        exit 77
    fi
    # Loopback only; as root; more PEs than cores; no binding (idle PEs spin, then yield).
    # shellcheck disable=SC2086  # $wrap is words
    set -- timeout 60 mpirun --allow-run-as-root --oversubscribe --bind-to none \
        --mca oob_tcp_if_include lo --mca btl_tcp_if_include lo -x STARTUP_TEST_MARK="$mark" -x LSAN_OPTIONS -x ASAN_OPTIONS \
        -np "$npes" $wrap "$@"
    if [ -n "$private_shm" ]; then
        unshare -m sh "$0" --in-private-shm "$private_shm" "$mark" "$@" >"$out" 2>&1 </dev/null
    else
        "$@" >"$out" 2>&1 </dev/null
    fi
    status=$?
    ;;
srun)
    mpi=pmix
    [ "$want" = no-pmix ] && mpi=none
    # -O: more tasks than the node's 2 CPUs; the timeout because srun waits for resources.
    # shellcheck disable=SC2086
    timeout 60 srun --mpi=$mpi -O -n "$npes" --export=ALL,STARTUP_TEST_MARK="$mark" \
        $wrap "$@" >"$out" 2>&1 </dev/null
    status=$?
    ;;
none)
    timeout 60 env PMIX_NAMESPACE=bogus PMIX_RANK=0 "PMIX_SERVER_URI41=bogus.0;tcp4://127.0.0.1:1" \
        STARTUP_TEST_MARK="$mark" "$@" >"$out" 2>&1 </dev/null
    status=$?
    ;;
*)
    echo "pmix_check.sh: unknown launcher '$launcher'" >&2
    exit 2
    ;;
esac

fail() {
    printf 'pmix_check.sh: %s %s PEs %s: %s (status %s); output:\n' "$launcher" "$npes" "$want" "$1" "$status" >&2
    cat "$out" >&2
    exit 1
}
has() { grep -q -- "$1" "$out"; }

case $want in
ok)
    [ $status -eq 0 ] || fail "the job failed"
    grep -q "^$name: .* on $npes PEs ok" "$out" || fail "no '$name: ... on $npes PEs ok' line"
    ;;
abort-alone)
    [ $status -ne 124 ] || fail "the idle PEs were not stopped (the timeout ended the job)"
    [ $status -ne 0 ] || fail "status 0 after CmiAbort"
    has "abort_check: deliberate abort on PE $((npes - 1)) of $npes, alone" || fail "no abort message"
    # Without PMIx_Abort mpirun reports a process that exited non-zero, and Slurm's PMIx
    # plugin a client gone without PMIx_Finalize (and srun exits 137, its tasks killed).
    has "returned a non-zero exit code\|exited with non-zero status" &&
        fail "mpirun saw a process exit non-zero, not a PMIx_Abort"
    has "Error handler invoked" && fail "Slurm saw a client vanish, not a PMIx_Abort"
    [ $status -eq 1 ] || fail "not the abort's exit status 1"
    ;;
abort)
    [ $status -ne 0 ] || fail "status 0 after CmiAbort"
    has "abort_check: deliberate abort on PE $((npes - 1)) of $npes" || fail "no abort message"
    ;;
refused)
    [ $status -ne 0 ] || fail "status 0 although PMIx_Init cannot succeed"
    has "coverse: PMIx_Init failed" || fail "no PMIx_Init error"
    has "PMIX_NAMESPACE=bogus" || fail "the error does not name the namespace"
    has "unset the PMIX_\* variables" || fail "the error does not say what to do"
    ;;
mismatch)
    [ $status -ne 0 ] || fail "status 0 although +p disagrees with the job's size"
    has "+p$((npes + 1)) disagrees with PMIx (namespace .*)'s job of $npes PEs" ||
        fail "no error naming both PE counts"
    ;;
exit-thread)
    [ $status -eq 3 ] || fail "not the status 3 of the last PE's exit(3)"
    has "abort_check: PE $((npes - 1)) of $npes calls exit(3) from a thread" ||
        fail "the last PE did not reach its exit(3)"
    has "PE $((npes - 1)) called exit(3) before the job's end" ||
        fail "no text naming the PE and its exit(3)"
    ;;
no-pmix)
    [ $status -ne 0 ] || fail "status 0 although every task ran alone"
    has "without PMIx" || fail "no 'without PMIx' error"
    has "srun --mpi=pmix" || fail "the error does not say what to do"
    ;;
esac

# No process of the job may outlive its launcher (allow a moment for the last to exit).
left=$(wait_job_end "$mark")
if [ -n "$left" ]; then
    for pid in $left; do kill -9 "$pid" 2>/dev/null; done
    fail "processes left behind: $left"
fi
if [ -n "${private_shm:-}" ] && [ -s "$private_shm" ]; then
    fail "the job left its shared-memory names in /dev/shm: $(tr '\n' ' ' <"$private_shm")"
fi
echo "pmix_check.sh: $launcher $npes PEs $want: $(grep -m1 -e ' ok$' -e 'aborted' -e 'failed' -e 'without PMIx' -e 'disagrees' "$out") ok"
