#!/bin/sh
# scripts/bench-perf-table.py reads a results file of every implementation (one --quick
# repetition, tests/perf/data/) and prints the table, the ratio columns and a line per
# target, and --svg writes an SVG. Checks the shape of the output, never the numbers.
# Usage: bench_perf_table.sh SOURCE-DIR PYTHON3
set -u
src=$1
svg=$(mktemp)
trap 'rm -f "$svg"' EXIT

# expect OUTPUT LINE...: each LINE is in OUTPUT, or the test fails naming it.
expect() {
    text=$1
    shift
    for want in "$@"; do
        printf '%s\n' "$text" | grep -qF "$want" || {
            echo "bench_perf_table: no \"$want\" in the output" >&2
            exit 1
        }
    done
}

out=$("$2" "$src/scripts/bench-perf-table.py" --svg "$svg" \
    "$src/tests/perf/data/bench-perf-sample.jsonl") || exit 1
printf '%s\n' "$out"
expect "$out" '| test | size | metric | better | coverse-shm | coverse-tcp | ompi-vader |' \
    '| ucx-tcp | pvr | ring | shm/vader | shm/pvr | shm/ring | tcp/ompi-tcp | tcp/best(ompi-tcp,ucx-tcp) |' \
    'same-host 1 MiB bandwidth vs Open MPI vader: coverse-shm / ompi-vader = ' \
    'n/a  same-host 4 MiB bandwidth vs Open MPI vader: no bw result at 4 MiB' \
    'TCP 1 MiB bandwidth vs the better of Open MPI TCP and UCX TCP: coverse-tcp / best('
if [ "$(printf '%s\n' "$out" | grep -c 'By placement')" != 0 ]; then
    echo "bench_perf_table: a by-placement table for runs without placement probes" >&2
    exit 1
fi

# Runs probed in two placements (tests/perf/data/bench-perf-placed.jsonl: one repetition
# close, one apart, and a coverse-tcp run of 9.9 us whose placement moved) are filed in a
# same-host and a TCP table by placement; the moved run is in neither.
placed=$("$2" "$src/scripts/bench-perf-table.py" "$src/tests/perf/data/bench-perf-placed.jsonl") ||
    exit 1
printf '%s\n' "$placed"
expect "$placed" '| test | size | placement | coverse-shm | ompi-vader | ucx-shm | ring | shm/vader |' \
    '| pingpong | 8 B | close | 0.16 (1) | 0.19 (1) | 0.15 (1) | 0.09 (1) | 0.84 |' \
    '| test | size | placement | coverse-tcp | ompi-tcp | ucx-tcp | tcp/ucx-tcp |' \
    '| pingpong | 8 B | close | 3.60 (1) | 3.70 (1) | 2.90 (1) | 1.24 |' \
    '| pingpong | 8 B | apart | 7.92 (1) | 8.14 (1) | 6.38 (1) | 1.24 |'

# Three placements (tests/perf/data/bench-perf-placed3.jsonl: close, between and apart, as
# this machine's probe reads them, and a vader run whose placement moved from between to
# apart): a row for each, and the moved run (0.99 us) in none. Between and apart are too near
# for a rule on the gaps between floors; the bands file them.
placed3=$("$2" "$src/scripts/bench-perf-table.py" "$src/tests/perf/data/bench-perf-placed3.jsonl") ||
    exit 1
printf '%s\n' "$placed3"
expect "$placed3" '| pingpong | 8 B | close | 0.12 (1) | 0.14 (1) | 0.86 |' \
    '| pingpong | 8 B | between | 0.22 (1) | 0.29 (1) | 0.76 |' \
    '| pingpong | 8 B | apart | 0.35 (1) | 0.41 (1) | 0.85 |'
if printf '%s\n' "$placed3" | sed -n '/By placement/,$p' | grep -q '0\.99'; then
    echo "bench_perf_table: a run whose placement moved was filed by placement" >&2
    exit 1
fi
# Other bands file the same runs elsewhere: with 0.1,0.3 the close vader run and the far one
# are between, beside the between coverse-shm run.
rebanded=$("$2" "$src/scripts/bench-perf-table.py" --bands 0.1,0.3 \
    "$src/tests/perf/data/bench-perf-placed3.jsonl") || exit 1
expect "$rebanded" '| pingpong | 8 B | between | 0.22 (1) | 0.64 (2) | 0.34 |'
# Bands that are not two increasing numbers are a usage error (exit 2), naming the option.
bad=$("$2" "$src/scripts/bench-perf-table.py" --bands 0.2,0.1 \
    "$src/tests/perf/data/bench-perf-placed3.jsonl" 2>&1)
status=$?
if [ "$status" != 2 ] || ! printf '%s\n' "$bad" | grep -q -- '--bands 0.2,0.1'; then
    echo "bench_perf_table: --bands 0.2,0.1 gave status $status: $bad" >&2
    exit 1
fi

if ! grep -q '^<svg ' "$svg" || ! grep -q '</svg>' "$svg"; then
    echo "bench_perf_table: --svg wrote no SVG" >&2
    exit 1
fi
