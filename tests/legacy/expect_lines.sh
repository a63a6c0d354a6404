#!/bin/sh
# expect_lines.sh: runs a job that must succeed and passes only if its output holds the text
# TEXT exactly COUNT times (a notice said once per PE, not once per peer or per message) and
# the text OK at least once (the program's own success line).
# Usage: expect_lines.sh <COUNT> <TEXT> <OK> <command...>
set -u
if [ $# -lt 4 ]; then
    echo "usage: expect_lines.sh <COUNT> <TEXT> <OK> <command...>" >&2
    exit 2
fi
count=$1
text=$2
ok=$3
shift 3
out=$("$@" 2>&1 </dev/null)
status=$?
if [ "$status" -ne 0 ]; then
    printf 'expect_lines.sh: the job failed with status %s:\n%s\n' "$status" "$out" >&2
    exit 1
fi
seen=$(printf '%s\n' "$out" | grep -c -- "$text")
if [ "$seen" -ne "$count" ]; then
    printf 'expect_lines.sh: "%s" appears %s times, expected %s:\n%s\n' "$text" "$seen" "$count" "$out" >&2
    exit 1
fi
case $out in
*"$ok"*) ;;
*)
    printf 'expect_lines.sh: the output lacks "%s":\n%s\n' "$ok" "$out" >&2
    exit 1
    ;;
esac
echo "expect_lines.sh: \"$text\" $count times, \"$ok\" seen, status 0"
