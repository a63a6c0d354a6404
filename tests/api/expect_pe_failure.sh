#!/bin/sh
# expect_pe_failure.sh: runs coro_entry_failure_pe through coverse-run on N PEs; the last
# PE's program fails (its entry task or a spawned task throws) while the others wait on it.
#   abort:  (the default ON_PEER_LOST) the job must stop non-zero, coverse-run naming the PE
#           and the exception; no PE may finish.
#   report: every other PE must get the message it sent just before it failed, learn of
#           its loss, finish and exit 0; the failed PE says why, and the job's status is
#           its (non-zero).
# A hang is the bug this guards against: ctest's timeout fails it.
# `exit`: the last PE calls exit(3) from its entry task instead: the same, and the failed
# PE's status is 3 (the job's too, when it stops).
# On 1 PE a failed entry is not a job's failure to stop: run() returns 1 (after saying why);
# exit(3) from the entry ends the PE with that status. `exit0`: every PE calls exit(0) from
# its entry task (with a task of its own still waiting): the job must end with status 0.
# Usage: expect_pe_failure.sh abort|report <PEs> <coverse-run> <program> entry|task|exit|exit0 [++set ...]
set -u
if [ $# -lt 5 ]; then
    echo "usage: expect_pe_failure.sh abort|report <PEs> <coverse-run> <program> entry|task|exit|exit0 [++set ...]" >&2
    exit 2
fi
mode=$1 npes=$2 run=$3 prog=$4 scenario=$5
shift 5
failing=$((npes - 1))
out=$(mktemp)
trap 'rm -f "$out"' EXIT
fail() {
    echo "expect_pe_failure.sh ($mode, $npes PEs, $scenario): $*" >&2
    cat "$out" >&2
    exit 1
}
set -- "$run" --verbose -n "$npes" "$prog" "$scenario" "$@"
[ "$mode" = report ] && set -- "$@" ++set ON_PEER_LOST=report
"$@" >"$out" 2>&1 </dev/null
status=$?
if [ "$scenario" = exit0 ]; then
    [ "$status" -eq 0 ] || fail "the job's status is $status, not exit(0)'s"
    s=0
    while [ $s -lt "$npes" ]; do
        grep -q "PE $s calls exit(0)" "$out" || fail "PE $s did not reach its exit(0)"
        s=$((s + 1))
    done
    grep -q "did not stop\|aborted" "$out" && fail "a PE waited for its tasks or aborted"
    # Each PE shut down (it says so under --verbose), not merely vanished with status 0.
    if [ "$npes" -gt 1 ]; then
        s=0
        while [ $s -lt "$npes" ]; do
            grep -q "PE $s: [0-9]* connections at exit" "$out" || fail "PE $s did not shut down"
            s=$((s + 1))
        done
    fi
    echo "expect_pe_failure.sh: exit(0) from every entry task, $npes PEs: status 0 ok"
    exit 0
fi
[ "$status" -ne 0 ] || fail "the job exited with status 0 although PE $failing failed"
if [ "$scenario" = exit ] && [ "$npes" -eq 1 ]; then
    [ "$status" -eq 3 ] || fail "the PE's status is $status, not exit(3)'s"
    echo "expect_pe_failure.sh: exit(3) from the entry task, 1 PE: status 3 ok"
    exit 0
fi
case $scenario in
    entry) why="the entry task failed: PE $failing gave up" ;;
    task) why="spawned task 'giving-up task' failed: PE $failing gave up" ;;
    *) why="PE $failing called exit(3) before the job's end (ConverseExit ends it on every PE)" ;;
esac
if [ "$npes" -eq 1 ] && [ "$scenario" = entry ]; then
    [ "$status" -eq 1 ] || fail "the job's status is $status, not run()'s 1"
    grep -q "coverse: PE 0: $why" "$out" || fail "PE 0 does not say: $why"
    echo "expect_pe_failure.sh: entry, 1 PE: run() returned 1 and said why ok"
    exit 0
fi
if [ "$mode" = abort ] || [ "$npes" -eq 1 ]; then
    grep -q "PE $failing aborted: $why" "$out" || fail "coverse-run does not say: PE $failing aborted: $why"
    grep -q "finished" "$out" && fail "a PE finished although the job should have stopped"
    if [ "$scenario" = exit ]; then
        [ "$status" -eq 3 ] || fail "the job's status is $status, not the failed PE's exit(3)"
    fi
    echo "expect_pe_failure.sh: $scenario, $npes PEs, $mode: the job stopped (status $status) naming PE $failing and why ok"
    exit 0
fi
grep -q "PE $failing failed: $why; ON_PEER_LOST=report" "$out" || fail "PE $failing does not say: $why"
if [ "$scenario" = exit ]; then
    grep -q "PE $failing of $npes (pid [0-9]*) exited with status 3" "$out" ||
        fail "PE $failing did not exit with exit(3)'s status"
fi
s=0
while [ $s -lt $failing ]; do
    grep -q "PE $s got PE $failing's last message" "$out" || fail "PE $s did not get PE $failing's last message"
    grep -q "PE $s learnt PE $failing was lost" "$out" || fail "PE $s did not learn of PE $failing's loss"
    grep -q "PE $s finished" "$out" || fail "PE $s did not finish"
    grep -q "PE $s of $npes (pid [0-9]*) exited with status 0" "$out" || fail "PE $s did not exit with status 0"
    s=$((s + 1))
done
echo "expect_pe_failure.sh: $scenario, $npes PEs, report: every other PE learnt of the loss and exited 0 ok"
