# Sourced by the floor benchmarks' tests (ring_bench_quick.sh, tcp_line_quick.sh) at their
# top, after setting $bench (the tool) and $test_name. Gives fail(), $err (a file for the
# tool's stderr) and $first (a process the EXIT trap kills, if set).
fail() {
    echo "$test_name: $*" >&2
    exit 1
}
err=$(mktemp)
first=
trap '[ -n "$first" ] && kill -KILL "$first" 2>/dev/null; rm -f "$err"' EXIT

# child_of PID: the pid of PID's child once it has one (up to 5 s), from /proc (procps need
# not be installed): field 4 of stat is the parent's pid (the name in field 2 has no spaces
# here). Empty when none came.
child_of() {
    for _ in $(seq 1 100); do
        for stat in /proc/[0-9]*/stat; do
            { read -r pid _ _ ppid _ <"$stat"; } 2>/dev/null || continue
            [ "$ppid" = "$1" ] && echo "$pid" && return
        done
        sleep 0.05
    done
}

# start_pair NAME [FLAGS...]: starts a run long enough never to end by itself; sets $name,
# $first (the first process) and $second (its child), and lets both get going.
start_pair() {
    name=$1
    shift
    "$bench" "$@" --sizes 8 --iters 100000000 >/dev/null 2>"$err" &
    first=$!
    second=$(child_of "$first")
    [ -n "$second" ] || fail "the second process did not start ($name $*)"
    sleep 0.2
}

# second_dies NAME [FLAGS...]: the second process dies mid-run; the first notices and gives up
# with status 1 and a reason within the test's timeout, instead of spinning for ever.
second_dies() {
    start_pair "$@"
    shift
    kill -KILL "$second"
    wait "$first"
    rc=$?
    first=
    [ "$rc" = 1 ] || fail "with its second process killed, $name $* ended with status $rc, not 1"
    grep -q "the other process stopped" "$err" || fail "no reason given ($*): $(cat "$err")"
}

# first_dies NAME [FLAGS...]: the first process dies mid-run; its second process goes with it
# (PR_SET_PDEATHSIG, or the end of what it reads) within a second instead of spinning on
# alone. A zombie left for a parent that does not reap (a container's PID 1) counts as gone.
first_dies() {
    start_pair "$@"
    shift
    kill -KILL "$first"
    wait "$first" 2>/dev/null
    first=
    for _ in $(seq 1 20); do
        state=$( { read -r _ _ s _ <"/proc/$second/stat"; } 2>/dev/null && echo "$s")
        [ -z "$state" ] || [ "$state" = Z ] && return 0
        sleep 0.05
    done
    kill -KILL "$second" 2>/dev/null
    fail "$name $*: the second process ($second) was still running 1 s after the first died"
}
