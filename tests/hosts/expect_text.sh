#!/bin/sh
# expect_text.sh TEXT COMMAND...: COMMAND must exit 0 and print TEXT (stdout or stderr).
text="$1"
shift
out="$("$@" 2>&1)"
status=$?
printf '%s\n' "$out"
[ "$status" = 0 ] || { echo "FAIL: exit status $status" >&2; exit 1; }
printf '%s\n' "$out" | grep -qF -- "$text" || { echo "FAIL: no '$text' in the output" >&2; exit 1; }
