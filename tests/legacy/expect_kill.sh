#!/bin/sh
# expect_kill.sh: starts kill_check on N PEs, kills the last PE with SIGKILL while the ring
# runs, and passes only if the launcher exits non-zero within 1 s naming that PE and the
# signal, no PE process is left, and the job left no name in /dev/shm. With KILL_CHECK_OFFER
# set, the last PE holds a name of its own when it is killed; with KILL_CHECK_ALL set too,
# every other PE is killed right after it, so that no PE is left to remove the job's names
# and only the launcher can.
# Usage: expect_kill.sh <PEs> <coverse-run> <args...>
set -u
if [ $# -lt 3 ]; then
    echo "usage: expect_kill.sh <PEs> <coverse-run> <args...>" >&2
    exit 2
fi
npes=$1
shift
dir=$(mktemp -d)
out=$dir/out
cleanup() {
    for f in "$dir"/pe*.pid; do [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null; done
    [ -n "${launcher:-}" ] && kill -9 "$launcher" 2>/dev/null
    rm -rf "$dir"
}
trap cleanup EXIT
KILL_CHECK_DIR=$dir "$@" >"$out" 2>&1 </dev/null &
launcher=$!
victim=$((npes - 1))
i=0
while [ "$(ls "$dir" | grep -c '\.pid$')" -lt "$npes" ]; do
    i=$((i + 1))
    if [ $i -gt 300 ]; then
        echo "expect_kill.sh: the PEs did not start within 30 s:" >&2
        cat "$out" >&2
        exit 1
    fi
    sleep 0.1
done
sleep 0.2
start=$(date +%s%N)
kill -9 "$(cat "$dir/pe$victim.pid")"
if [ -n "${KILL_CHECK_ALL:-}" ]; then
    for f in "$dir"/pe*.pid; do kill -9 "$(cat "$f")" 2>/dev/null; done
fi
wait "$launcher"
status=$?
end=$(date +%s%N)
launcher=
ms=$(((end - start) / 1000000))
fail() {
    echo "expect_kill.sh: $*" >&2
    cat "$out" >&2
    exit 1
}
[ "$status" -ne 0 ] || fail "the launcher exited with status 0 after PE $victim was killed"
[ "$ms" -le 1000 ] || fail "the launcher took $ms ms to stop the job (limit 1000 ms)"
if [ -n "${KILL_CHECK_ALL:-}" ]; then
    # Every PE died: the launcher names the one it reaped first.
    grep -q "PE [0-9]* of $npes.*SIGKILL" "$out" || fail "the output names no PE killed by SIGKILL"
else
    grep -q "PE $victim of $npes.*SIGKILL" "$out" || fail "the output does not name PE $victim and SIGKILL"
fi
for f in "$dir"/pe*.pid; do
    if kill -0 "$(cat "$f")" 2>/dev/null; then fail "PE process $(cat "$f") ($f) is still alive"; fi
done
key=$(cat "$dir/key" 2>/dev/null) || fail "PE 0 wrote no job key to $dir/key"
[ -n "$key" ] || fail "the job key in $dir/key is empty"
left=$(ls /dev/shm | grep "^coverse-$key-")
[ -z "$left" ] || fail "the job left names in /dev/shm: $left"
echo "expect_kill.sh: kill -9 of PE $victim of $npes stopped the job in $ms ms with status $status ok"
