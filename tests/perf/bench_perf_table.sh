#!/bin/sh
# scripts/bench-perf-table.py reads a results file of every implementation (one --quick
# repetition, tests/perf/data/) and prints the table, the ratio columns and a line per
# target, and --svg writes an SVG. Checks the shape of the output, never the numbers.
# Usage: bench_perf_table.sh SOURCE-DIR PYTHON3
set -u
src=$1
svg=$(mktemp)
trap 'rm -f "$svg"' EXIT
out=$("$2" "$src/scripts/bench-perf-table.py" --svg "$svg" \
    "$src/tests/perf/data/bench-perf-sample.jsonl") || exit 1
printf '%s\n' "$out"
for want in '| test | size | metric | better | coverse-shm | coverse-tcp | ompi-vader |' \
    'shm/vader | shm/pvr | tcp/ompi-tcp | tcp/best(ompi-tcp,ucx-tcp) |' \
    'same-host 1 MiB bandwidth vs Open MPI vader: coverse-shm / ompi-vader = ' \
    'n/a  same-host 4 MiB bandwidth vs Open MPI vader: no bw result at 4 MiB' \
    'TCP 1 MiB bandwidth vs the better of Open MPI TCP and UCX TCP: coverse-tcp / best('; do
    printf '%s\n' "$out" | grep -qF "$want" || {
        echo "bench_perf_table: no \"$want\" in the output" >&2
        exit 1
    }
done
if ! grep -q '^<svg ' "$svg" || ! grep -q '</svg>' "$svg"; then
    echo "bench_perf_table: --svg wrote no SVG" >&2
    exit 1
fi
