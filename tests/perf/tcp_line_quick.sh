#!/bin/sh
# tcp_line (the bare loopback TCP ping-pong) runs and says what it should, never how fast:
# exactly one ping-pong line per size, "impl":"tcpline" with ring_bench's fields in
# ring_bench's order and the schedule's round trips; a bad argument refused with status 2 and
# the flag named; and a run whose second process is killed ends with status 1 and a reason
# instead of spinning for ever.
# Usage: tcp_line_quick.sh PATH-TO-TCP_LINE
set -u
bench=$1
test_name=tcp_line_quick
. "$(dirname "$0")/floor_bench_lib.sh"

# line BYTES ITERS: the whole line tcp_line prints for that size, timings as any number.
line() {
    printf '^\\{"test":"pingpong","impl":"tcpline","bytes":%s,"lat_us":[0-9]+\\.[0-9]{3},"p50_us":[0-9]+\\.[0-9]{3},"iters":%s,"pes":2\\}$' "$1" "$2"
}
# expect_lines FLAGS... -- BYTES:ITERS...: tcp_line FLAGS prints exactly these lines, in order.
expect_lines() {
    flags=
    while [ "$1" != -- ]; do
        flags="$flags $1"
        shift
    done
    shift
    # shellcheck disable=SC2086
    out=$("$bench" $flags 2>"$err") || fail "$flags failed: $(cat "$err")"
    printf '%s\n' "$out"
    [ "$(printf '%s\n' "$out" | wc -l)" = $# ] || fail "$flags: not $# lines"
    n=0
    for want in "$@"; do
        n=$((n + 1))
        got=$(printf '%s\n' "$out" | sed -n "${n}p")
        printf '%s\n' "$got" | grep -Eq "$(line "${want%:*}" "${want#*:}")" ||
            fail "$flags: line $n is not the pingpong line of ${want%:*} B, ${want#*:} round trips: $got"
        # A one-way time is a positive number (never checked against any bound).
        printf '%s\n' "$got" | grep -q '"p50_us":0\.000' && fail "$flags: a p50 of zero: $got"
    done
}
# --quick: the schedule's 50 round trips for every size; --iters overrides it.
expect_lines --quick --sizes 8,1K -- 8:50 1024:50
expect_lines --sizes 64K --iters 7 --warmup 0 --json -- 65536:7

help=$("$bench" --help) || fail "--help exited with status $?"
printf '%s\n' "$help" | grep -q '^Usage: tcp_line' || fail "--help prints no usage"
# refused FLAGS... -- TEXT: status 2 and TEXT (naming the flag) on stderr.
refused() {
    flags=
    while [ "$1" != -- ]; do
        flags="$flags $1"
        shift
    done
    # shellcheck disable=SC2086
    "$bench" $flags >/dev/null 2>"$err"
    rc=$?
    [ "$rc" = 2 ] || fail "$flags gave status $rc, not 2"
    grep -qF -- "$2" "$err" || fail "$flags: the refusal does not say \"$2\": $(cat "$err")"
}
refused --sizes 8 --window 4 -- 'unknown argument "--window"'
refused --bare -- 'unknown argument "--bare"'
refused --sizes 0 -- '--sizes: "0" is not a size'
refused --cpus 1 -- '--cpus: "1" is not two CPU numbers'
refused --iters -- '--iters needs a value'

# The second process dies mid-run: the first reads the end of the stream (or a reset).
second_dies tcp_line
first_dies tcp_line
echo "tcp_line_quick: ok"
