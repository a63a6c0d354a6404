#!/bin/sh
# expect_order.sh: runs printf_order on <PEs> PEs and checks that each PE's lines came out
# in program order: printf 0, CmiPrintf 0, printf 1, ... then "last printf".
# Usage: expect_order.sh <PEs> <command...>
set -u
if [ $# -lt 2 ]; then
    echo "usage: expect_order.sh <PEs> <command...>" >&2
    exit 2
fi
npes=$1
shift
out=$("$@" 2>&1 </dev/null)
status=$?
if [ "$status" -ne 0 ]; then
    printf 'expect_order.sh: status %s\n%s\n' "$status" "$out" >&2
    exit 1
fi
pe=0
while [ "$pe" -lt "$npes" ]; do
    got=$(printf '%s\n' "$out" | grep "^printf_order: PE $pe " | sed "s/^printf_order: PE $pe //" |
        tr '\n' ',')
    want="printf 0,CmiPrintf 0,printf 1,CmiPrintf 1,printf 2,CmiPrintf 2,printf 3,CmiPrintf 3,printf 4,CmiPrintf 4,last printf,"
    if [ "$got" != "$want" ]; then
        printf 'expect_order.sh: PE %s printed\n  %s\nexpected\n  %s\nwhole output:\n%s\n' \
            "$pe" "$got" "$want" "$out" >&2
        exit 1
    fi
    pe=$((pe + 1))
done
echo "expect_order.sh: printf and CmiPrintf lines in program order on $npes PEs ok"
