#!/bin/bash
# fan_out.sh: coverse-run --fan-out N bounds how many remote PEs are starting at once.
#   fan_out.sh COVERSE_RUN LEGACY_RING PES N [LAUNCH_FAN_OUT]
# Runs legacy_ring on PES PEs (a multiple of N) of a nodelist whose one host is localhost,
# through fan_out_shell.sh as the ++remote-shell, with --fan-out LAUNCH_FAN_OUT (default N).
# The shell counts the remote starts in progress (the first wait until N are, each holds
# 0.3 s). Passes when the most starts ever in progress at once is exactly N — not more (the
# bound) and not fewer (the launcher used its fan-out, so the check can fail both ways) —
# every PE was started once, and the ring completed. Counts only, no time is checked.
# LAUNCH_FAN_OUT above N shows the check failing when the bound is not honoured.
# No network namespace is needed: the remote shell runs the PEs on this host.
set -u
if [ $# -lt 4 ]; then
    echo "usage: fan_out.sh COVERSE_RUN LEGACY_RING PES N [LAUNCH_FAN_OUT]" >&2
    exit 2
fi
run="$1" prog="$2" pes="$3" n="$4" launch="${5:-$4}"
[ $((pes % n)) = 0 ] && [ "$pes" -gt "$n" ] ||
    { echo "fan_out.sh: PES ($pes) must be a multiple of N ($n) above it: every wave of starts fills up" >&2; exit 2; }
command -v flock >/dev/null || { echo "SKIP: no flock (util-linux) for the remote shell's counter" >&2; exit 77; }
dir="$(mktemp -d /tmp/coverse-fan-out.XXXXXX)"
launcher=
cleanup() {
    [ -n "$launcher" ] && kill "$launcher" 2>/dev/null && wait "$launcher" 2>/dev/null
    rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
fail() {
    echo "FAIL: $*" >&2
    sed 's/^/  | /' "$dir/log" >&2
    exit 1
}
echo 0 >"$dir/count"
: >"$dir/starts"
printf 'group main\nhost localhost\n' >"$dir/nodes"
"$run" ++nodelist "$dir/nodes" ++remote-shell "$(dirname "$0")/fan_out_shell.sh $dir $n" \
    --fan-out "$launch" +p"$pes" --timeout 60 "$prog" -laps 5 >"$dir/log" 2>&1 </dev/null &
launcher=$!
wait "$launcher"
status=$?
launcher=
[ "$status" = 0 ] || fail "coverse-run exited with status $status"
grep -q "ring: 5 laps on $pes PEs ok" "$dir/log" || fail "the ring did not complete"
started=$(wc -l <"$dir/starts")
[ "$started" = "$pes" ] || fail "$started remote starts for $pes PEs"
most=$(sort -n "$dir/starts" | tail -1)
echo "fan_out: $pes PEs, --fan-out $launch: at most $most remote starts in progress at once (counts in order: $(tr '\n' ' ' <"$dir/starts"))"
[ "$most" -le "$n" ] || fail "$most remote starts were in progress at once, more than the fan-out $n"
[ "$most" = "$n" ] || fail "at most $most remote starts were in progress at once, never the fan-out $n"
[ "$(cat "$dir/count")" = 0 ] || fail "the counter ended at $(cat "$dir/count"), not 0"
echo "fan_out: ok"
