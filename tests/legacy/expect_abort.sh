#!/bin/sh
# expect_abort.sh: runs abort_check and passes only if the job failed the way a CmiAbort
# should make it fail: a non-zero exit status and the abort message of the last PE in its
# output (a hang is caught by the ctest timeout).
# Usage: expect_abort.sh <PEs> <command...>
set -u
if [ $# -lt 2 ]; then
    echo "usage: expect_abort.sh <PEs> <command...>" >&2
    exit 2
fi
npes=$1
shift
out=$("$@" 2>&1 </dev/null)
status=$?
want="abort_check: deliberate abort on PE $((npes - 1)) of $npes"
if [ "$status" -eq 0 ]; then
    printf 'expect_abort.sh: the job exited with status 0 after a CmiAbort; expected non-zero\n%s\n' "$out" >&2
    exit 1
fi
case $out in
*"$want"*) ;;
*)
    printf 'expect_abort.sh: status %s, but the output lacks "%s":\n%s\n' "$status" "$want" "$out" >&2
    exit 1
    ;;
esac
echo "expect_abort.sh: CmiAbort on PE $((npes - 1)) of $npes ended the job with status $status ok"
