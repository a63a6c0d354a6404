#!/bin/sh
# expect_peer_lost.sh: runs coro_peer_lost_pe through coverse-run on N PEs; the last PE
# dies (by itself, or killed here by its pid with `pid`) while the others wait on it.
#   report: every survivor must catch peer_lost naming it, finish, and exit 0 (coverse-run
#           --verbose says so for each); the job's status is the victim's (non-zero). The
#           exit scenario has nothing to catch: survivors finish and exit 0 (the exit vote
#           went on without the victim).
#   abort:  (the default ON_PEER_LOST) the job must stop non-zero, naming the victim.
# Usage: expect_peer_lost.sh report|abort self|pid <PEs> <coverse-run> <program> <scenario> [++set ...]
set -u
if [ $# -lt 6 ]; then
    echo "usage: expect_peer_lost.sh report|abort self|pid <PEs> <coverse-run> <program> <scenario> [args...]" >&2
    exit 2
fi
mode=$1 killer=$2 npes=$3 run=$4 prog=$5 scenario=$6
shift 6
victim=$((npes - 1))
dir=$(mktemp -d)
out=$dir/out
launcher=
cleanup() {
    [ -f "$dir/victim.pid" ] && kill -9 "$(cat "$dir/victim.pid")" 2>/dev/null
    [ -n "$launcher" ] && kill -9 "$launcher" 2>/dev/null
    rm -rf "$dir"
}
trap cleanup EXIT
fail() {
    echo "expect_peer_lost.sh ($mode, $killer, $npes PEs, $scenario): $*" >&2
    cat "$out" >&2
    exit 1
}
set -- "$run" --verbose -n "$npes" "$prog" "$scenario" "$@"
[ "$mode" = report ] && set -- "$@" ++set ON_PEER_LOST=report
# PEER_LOST_DIR: where the victim says it stopped serving (and, with `pid`, its pid).
if [ "$killer" = pid ]; then
    PEER_LOST_DIR=$dir PEER_LOST_PID=1 "$@" >"$out" 2>&1 </dev/null &
else
    PEER_LOST_DIR=$dir "$@" >"$out" 2>&1 </dev/null &
fi
launcher=$!
if [ "$killer" = pid ]; then
    i=0
    while [ ! -f "$dir/victim.pid" ]; do
        i=$((i + 1))
        [ $i -gt 600 ] && fail "the victim did not write its pid within 60 s"
        kill -0 "$launcher" 2>/dev/null || fail "the job ended before the victim wrote its pid"
        sleep 0.1
    done
    sleep 0.3  # the survivors are waiting by now (not required: they also fail at once)
    kill -9 "$(cat "$dir/victim.pid")"
fi
wait "$launcher"
status=$?
launcher=
[ "$status" -ne 0 ] || fail "the job exited with status 0 although PE $victim died"
grep -q "PE $victim of $npes.*SIGKILL" "$out" || fail "the output does not name PE $victim and SIGKILL"
if [ "$mode" = abort ]; then
    grep -q "caught peer_lost" "$out" && fail "a PE caught peer_lost without ON_PEER_LOST=report"
    echo "expect_peer_lost.sh: $scenario, $npes PEs, default: the job stopped (status $status) naming PE $victim ok"
    exit 0
fi
s=0
while [ $s -lt $victim ]; do
    [ "$scenario" = exit ] || grep -q "PE $s caught peer_lost from PE $victim" "$out" ||
        fail "PE $s did not catch peer_lost from PE $victim"
    grep -q "PE $s finished $scenario" "$out" || fail "PE $s did not finish"
    grep -q "PE $s of $npes (pid [0-9]*) exited with status 0" "$out" || fail "PE $s did not exit with status 0"
    s=$((s + 1))
done
echo "expect_peer_lost.sh: $scenario, $npes PEs, ON_PEER_LOST=report, victim killed by $killer: every survivor caught peer_lost and exited 0 ok"
