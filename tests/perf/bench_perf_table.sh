#!/bin/sh
# scripts/bench-perf-table.py reads a results file of every implementation (one --quick
# repetition, tests/perf/data/) and prints the table, the ratio columns and a line per
# target, and --svg writes an SVG. Checks the shape of the output, never the numbers.
# Usage: bench_perf_table.sh SOURCE-DIR PYTHON3
set -u
src=$1
svg=$(mktemp)
svg_tcpline=$(mktemp)
trap 'rm -f "$svg" "$svg_tcpline"' EXIT

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

# The TCP floor (tests/perf/data/bench-perf-tcpline.jsonl: coverse-tcp, ucx-tcp and tcpline at
# 8 B and 1 KiB, one repetition close and one apart, and a same-host pair beside them):
# tcpline is a column with its ratio over ucx-tcp, the TCP 8 B target says where the floor
# stands (4.80 / 5.20 us), tcpline is filed by placement with the TCP layers and not with the
# same-host ones, and the plot draws it dashed in its colour.
tcpline=$("$2" "$src/scripts/bench-perf-table.py" --svg "$svg_tcpline" \
    "$src/tests/perf/data/bench-perf-tcpline.jsonl") || exit 1
printf '%s\n' "$tcpline"
expect "$tcpline" '| coverse-tcp | ompi-vader | ucx-tcp | tcpline | shm/vader | tcp/ucx-tcp | tcpline/ucx-tcp |' \
    '| 5.20 ±23% | 4.80 ±25% | 0.87 | 1.06 | 0.92 |' \
    '| pingpong | 1 KiB | µs one-way p50 | lower | — | 5.90 ±29% | — | 5.80 ±24% | 5.20 ±23% | — | 1.02 | 0.90 |' \
    'so tcpline/ucx-tcp is the lowest tcp/ucx-tcp any layer' \
    'TCP 8 B one-way latency vs UCX TCP: coverse-tcp / ucx-tcp = 1.06 (target <= 0.90) (the bare TCP exchange, tcpline, is 0.92x ucx-tcp)' \
    '| test | size | placement | coverse-shm | ompi-vader | shm/vader |' \
    '| test | size | placement | coverse-tcp | ucx-tcp | tcpline | tcp/ucx-tcp |' \
    '| pingpong | 8 B | close | 3.80 (1) | 4.00 (1) | 3.60 (1) | 0.95 |' \
    '| pingpong | 1 KiB | apart | 7.60 (1) | 7.20 (1) | 6.40 (1) | 1.06 |'
grep -q 'stroke="#9467bd" stroke-width="2" stroke-dasharray="6,4"' "$svg_tcpline" || {
    echo "bench_perf_table: the plot has no dashed tcpline in its colour" >&2
    exit 1
}
# Without a tcpline result the TCP target says nothing of a floor: the line ends at the target.
printf '%s\n' "$placed" |
    grep -qxF -- '- MISS TCP 8 B one-way latency vs UCX TCP: coverse-tcp / ucx-tcp = 1.71 (target <= 0.90)' || {
    echo "bench_perf_table: the TCP target without a tcpline result is not the plain line" >&2
    exit 1
}

if ! grep -q '^<svg ' "$svg" || ! grep -q '</svg>' "$svg"; then
    echo "bench_perf_table: --svg wrote no SVG" >&2
    exit 1
fi
