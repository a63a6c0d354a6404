#!/bin/sh
# run_with_input.sh: runs print_scan with known stdin and checks what it printed.
# Usage: run_with_input.sh <PEs> <command...>   e.g. run_with_input.sh 2 coverse-run -n 2 ./print_scan
# Checks: exit status 0; on stdout "scanned 17 42 hello" once, the summary once, and each
# PE's LINES numbered lines and PARTIALS partial lines exactly once and whole (right field
# count, body of the announced length made of the expected letter, " end" last); on stderr
# each PE's ERRORS lines exactly once. Any line mentioning print_scan that does not parse is
# an interleaving. Exits non-zero with the reason and the start of both streams on failure.
# The counts must match print_scan.c.
set -u
LINES=40
PARTIALS=10
ERRORS=6

if [ $# -lt 2 ]; then
    echo "usage: run_with_input.sh <PEs> <command...>" >&2
    exit 2
fi
npes=$1
shift
out=$(mktemp) || exit 2
err=$(mktemp) || exit 2
trap 'rm -f "$out" "$err"' EXIT

printf '17 42 hello\nthis second line is never read\n' | "$@" >"$out" 2>"$err"
status=$?

fail() {
    echo "run_with_input.sh: $*" >&2
    echo "----- stdout (first 3000 bytes) -----" >&2
    head -c 3000 "$out" >&2
    echo "----- stderr (first 3000 bytes) -----" >&2
    head -c 3000 "$err" >&2
    exit 1
}

[ "$status" -eq 0 ] || fail "the program exited with status $status, expected 0"

why=$(awk -v npes="$npes" -v lines="$LINES" -v partials="$PARTIALS" -v errors="$ERRORS" '
    function letter(pe, line) { return substr("abcdefghijklmnopqrstuvwxyz", (pe * 7 + line) % 26 + 1, 1) }
    function num(field, key,    v) {
        if (index(field, key "=") != 1) return -1
        v = substr(field, length(key) + 2)
        return v ~ /^[0-9]+$/ ? v + 0 : -1
    }
    function bad(text) { if (problem == "") problem = "line " NR ": " text }
    $0 == "scanned 17 42 hello" { ++scanned; next }
    /^print_scan: [0-9]+ lines, / {
        if ($0 == "print_scan: " lines " lines, " partials " partial lines and " errors " error lines from each of " npes " PEs ok") ++summary
        else bad("unexpected summary: " $0)
        next
    }
    /print_scan|scanned/ {
        pe = num($2, "pe")
        if ($1 != "print_scan:" || pe < 0 || pe >= npes) { bad("garbled (interleaved?): " substr($0, 1, 200)); next }
        if ($3 ~ /^line=/) {
            line = num($3, "line"); len = num($4, "len"); body = $5
            if (NF != 6 || line < 0 || line >= lines || len != length(body) || $6 != "end") {
                bad("garbled numbered line: " substr($0, 1, 200)); next
            }
            if (gsub(letter(pe, line), "", body) != len) { bad("wrong letters in the body of " $2 " " $3); next }
            ++seen[pe, line]
        } else if ($3 ~ /^partial=/) {
            p = num($3, "partial")
            if (NF != 7 || p < 0 || p >= partials || $4 != "a" || $5 != "b" || $6 != "c" || $7 != "end") {
                bad("garbled partial line: " substr($0, 1, 200)); next
            }
            ++part[pe, p]
        } else bad("garbled: " substr($0, 1, 200))
        next
    }
    END {
        if (problem != "") { print problem; exit 1 }
        if (scanned != 1) { print "\"scanned 17 42 hello\" came out " scanned + 0 " times, expected once"; exit 1 }
        if (summary != 1) { print "the summary line came out " summary + 0 " times, expected once"; exit 1 }
        for (pe = 0; pe < npes; ++pe) {
            for (l = 0; l < lines; ++l)
                if (seen[pe, l] != 1) { print "PE " pe " line " l " came out " seen[pe, l] + 0 " times, expected once"; exit 1 }
            for (p = 0; p < partials; ++p)
                if (part[pe, p] != 1) { print "PE " pe " partial line " p " came out " part[pe, p] + 0 " times, expected once"; exit 1 }
        }
    }' "$out") || fail "stdout: $why"

why=$(awk -v npes="$npes" -v errors="$ERRORS" '
    /print_scan/ {
        if (NF != 4 || $1 != "print_scan:" || $2 !~ /^pe=[0-9]+$/ || $3 !~ /^error=[0-9]+$/ || $4 != "end") {
            if (problem == "") problem = "line " NR ": garbled (interleaved?): " substr($0, 1, 200)
            next
        }
        ++seen[substr($2, 4) + 0, substr($3, 7) + 0]
    }
    END {
        if (problem != "") { print problem; exit 1 }
        for (pe = 0; pe < npes; ++pe)
            for (e = 0; e < errors; ++e)
                if (seen[pe, e] != 1) { print "PE " pe " error line " e " came out " seen[pe, e] + 0 " times, expected once"; exit 1 }
    }' "$err") || fail "stderr: $why"

echo "run_with_input.sh: print_scan output on $npes PEs ok"
