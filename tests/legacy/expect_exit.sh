#!/bin/sh
# expect_exit.sh: runs abort_check -exit, whose last PE calls exit(3) in a handler while the
# other PEs wait in the scheduler, and passes only if the job stopped with status 3 and the
# launcher named that PE and its exit(3) (a hang is caught by the ctest timeout: a PE that
# calls exit() used to wait in the exit vote for PEs that never came).
# Usage: expect_exit.sh <PEs> <command...>
set -u
if [ $# -lt 2 ]; then
    echo "usage: expect_exit.sh <PEs> <command...>" >&2
    exit 2
fi
npes=$1
shift
last=$((npes - 1))
out=$("$@" 2>&1 </dev/null)
status=$?
fail() {
    printf 'expect_exit.sh: %s:\n%s\n' "$1" "$out" >&2
    exit 1
}
[ "$status" -eq 3 ] || fail "the job's status is $status, not the exit(3) of PE $last"
case $out in
*"abort_check: PE $last of $npes calls exit(3)"*) ;;
*) fail "PE $last did not reach its exit(3)" ;;
esac
case $out in
*"PE $last aborted: PE $last called exit(3) before the job's end"*) ;;
*) fail "coverse-run does not name PE $last and its exit(3)" ;;
esac
echo "expect_exit.sh: exit(3) on PE $last of $npes stopped the job with status 3 ok"
