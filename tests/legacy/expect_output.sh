#!/bin/sh
# expect_output.sh: runs a job and passes only if it exits 0 and its output (stdout and
# stderr) has TEXT exactly COUNT times (a hang is caught by the ctest timeout).
# Usage: expect_output.sh <COUNT> <TEXT> <command...>
set -u
if [ $# -lt 3 ]; then
    echo "usage: expect_output.sh <COUNT> <TEXT> <command...>" >&2
    exit 2
fi
want_count=$1
text=$2
shift 2
out=$("$@" 2>&1 </dev/null)
status=$?
if [ "$status" -ne 0 ]; then
    printf 'expect_output.sh: the job exited with status %s; expected 0\n%s\n' "$status" "$out" >&2
    exit 1
fi
count=$(printf '%s\n' "$out" | grep -cF -- "$text")
if [ "$count" -ne "$want_count" ]; then
    printf 'expect_output.sh: "%s" appears %s times, expected %s:\n%s\n' "$text" "$count" \
        "$want_count" "$out" >&2
    exit 1
fi
echo "expect_output.sh: \"$text\" appears $count times ok"
