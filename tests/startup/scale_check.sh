#!/bin/sh
# scale_check.sh: start-up at scale. Runs the trivial program (barrier_exit: start, barrier,
# exit) on N PEs through coverse-run ++verbose and checks from each PE's "connections at
# exit" line how many connections the job made:
#   lazy:  at most MAX per PE (a spanning-tree neighbourhood: a parent and up to 4 children)
#          and fewer than 2 N in all, against N (N - 1) / 2 for every pair;
#   eager: exactly N - 1 per PE (every pair), which shows the count itself is right.
# Times are not checked (scripts/bench-startup.sh measures them).
# Usage: scale_check.sh lazy|eager <PEs> <MAX per PE> <coverse-run> <barrier_exit>
set -u
if [ $# -ne 5 ]; then
    echo "usage: scale_check.sh lazy|eager <PEs> <max per PE> <coverse-run> <barrier_exit>" >&2
    exit 2
fi
mode=$1 n=$2 max=$3 run=$4 prog=$5
dir=$(mktemp -d)
out=$dir/out
launcher=
cleanup() {
    [ -n "$launcher" ] && kill -9 "$launcher" 2>/dev/null
    rm -rf "$dir"
}
trap cleanup EXIT
fail() {
    echo "scale_check.sh ($mode, $n PEs): $*" >&2
    grep -v "registered from\|listens on\| started, pid\| -> PE " "$out" | tail -40 >&2
    exit 1
}
"$run" --verbose -n "$n" "$prog" ++set CONNECT="$mode" >"$out" 2>&1 </dev/null &
launcher=$!
wait "$launcher"
status=$?
launcher=
[ "$status" -eq 0 ] || fail "the job exited with status $status"
grep -q "barrier_exit: $n PEs passed the barrier" "$out" || fail "PE 0 did not pass the barrier"
lines=$(grep -c "^coverse: PE [0-9]*: [0-9]* connections at exit (.*CONNECT=$mode)" "$out")
[ "$lines" -eq "$n" ] || fail "$lines of $n PEs reported their connections at exit"
# Each connection has two ends, each PE counts its own.
summary=$(sed -n "s/^coverse: PE [0-9]*: \([0-9]*\) connections at exit.*/\1/p" "$out" |
    awk -v max="$max" -v mode="$mode" -v n="$n" '
        { ends += $1; if ($1 > most) most = $1; if (mode == "eager" && $1 != n - 1) bad++ }
        END { printf "%d %d %d %d\n", ends / 2, most, (most > max) || (ends / 2 >= 2 * n), bad }')
set -- $summary
total=$1 most=$2 over=$3 wrong=$4
all=$((n * (n - 1) / 2))
if [ "$mode" = eager ]; then
    [ "$wrong" -eq 0 ] || fail "$wrong PEs did not count $((n - 1)) connections under CONNECT=eager"
    [ "$total" -eq "$all" ] || fail "$total connections, expected every pair: $all"
else
    [ "$over" -eq 0 ] || fail "$total connections, $most at the busiest PE (allowed: $max per PE, under $((2 * n)) in all)"
fi
echo "scale_check.sh: $n PEs, CONNECT=$mode: started, passed the barrier and exited; $total connections ($most at the busiest PE; every pair would be $all) ok"
