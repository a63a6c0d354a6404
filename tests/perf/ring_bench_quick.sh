#!/bin/sh
# ring_bench (coverse's shared-memory ring alone) runs and says what it should, never how
# fast: a ping-pong line per size that fits the ring, "impl":"ring" with p50_us; a size over
# the ring's largest record skipped with a note; a bad argument refused (status 2); and a run
# whose second process is killed ends with status 1 instead of spinning for ever. The same for
# --bare ("impl":"line": no ring, one fixed place each way).
# Usage: ring_bench_quick.sh PATH-TO-RING_BENCH
set -u
bench=$1
test_name=ring_bench_quick
. "$(dirname "$0")/floor_bench_lib.sh"

# Runs ring_bench --quick with the flags given, then expects a ping-pong line of IMPL (first
# argument) for 8 B and 1 KiB, each with a p50; the output is left in $out.
quick_lines() {
    impl=$1
    shift
    out=$("$bench" --quick "$@" 2>"$err") || fail "--quick $* failed: $(cat "$err")"
    printf '%s\n' "$out"
    for bytes in 8 1024; do
        want="\"test\":\"pingpong\",\"impl\":\"$impl\",\"bytes\":$bytes,\"lat_us\":"
        printf '%s\n' "$out" | grep -F "{$want" | grep -q '"p50_us":[0-9]' ||
            fail "$*: no line starting {$want with a p50_us"
    done
}
quick_lines ring --sizes 8,1K,300K
printf '%s\n' "$out" | grep -q '"bytes":307200' && fail "300K should not fit the ring"
grep -q "307200 B is skipped" "$err" || fail "no note for the skipped size: $(cat "$err")"
quick_lines line --bare --sizes 8,1K
printf '%s\n' "$out" | grep -q '"impl":"ring"' && fail "--bare printed a ring line"

"$bench" --sizes 8 --window 4 >/dev/null 2>"$err"
rc=$?
[ "$rc" = 2 ] || fail "an unknown flag gave status $rc, not 2"
grep -q 'unknown argument "--window"' "$err" || fail "the refusal does not name the flag"
"$bench" --sizes 0 >/dev/null 2>"$err"
[ $? = 2 ] || fail "--sizes 0 was not refused"

second_dies ring_bench
second_dies ring_bench --bare
first_dies ring_bench
echo "ring_bench_quick: ok"
