# Sourced by the floor benchmarks' tests (ring_bench_quick.sh, tcp_line_quick.sh). Expects
# $bench (the tool), $err (a file for its stderr), fail() and $first (the EXIT trap kills it).

# second_dies NAME [FLAGS...]: the second process dies mid-run; the first notices and gives up
# with status 1 and a reason within the test's timeout, instead of spinning for ever.
second_dies() {
    name=$1
    shift
    "$bench" "$@" --sizes 8 --iters 100000000 >/dev/null 2>"$err" &
    first=$!
    second=
    for _ in $(seq 1 100); do
        # The child of $first, from /proc (procps need not be installed): field 4 of stat is
        # the parent's pid (the name in field 2 has no spaces here).
        for stat in /proc/[0-9]*/stat; do
            { read -r pid _ _ ppid _ <"$stat"; } 2>/dev/null || continue
            [ "$ppid" = "$first" ] && second=$pid && break
        done
        [ -n "$second" ] && break
        sleep 0.05
    done
    [ -n "$second" ] || {
        kill "$first" 2>/dev/null
        fail "the second process did not start ($*)"
    }
    sleep 0.2
    kill -KILL "$second"
    wait "$first"
    rc=$?
    first=
    [ "$rc" = 1 ] || fail "with its second process killed, $name $* ended with status $rc, not 1"
    grep -q "the other process stopped" "$err" || fail "no reason given ($*): $(cat "$err")"
}
