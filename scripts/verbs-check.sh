#!/usr/bin/env bash
# verbs-check: the verbs provider on a machine with an RDMA device. Checks that a port is
# ACTIVE (sysfs or ibv_devinfo, then coverse-info, which asks make_verbs_provider), builds the
# release preset, runs the rdma ctest label, the verbs unit tests and the eager channels
# written by RDMA WRITE (rdma_eager_tests, put/*verbs*) with every peer forced onto verbs
# (COVERSE_RDMA_PROVIDER=verbs), then 2-PE coverse-perf runs through coverse-run on verbs
# (pingpong and bandwidth by rendezvous; small pingpongs over the connection, SHM=off, whose
# eager channel is written by put), and prints one table: test, result, figure.
#
# Usage: scripts/verbs-check.sh [options]
#   --build-dir DIR   the build to use (default build/release, built with its preset)
#   --no-build        use the binaries as they are (how ctest runs it)
#   --sizes LIST      coverse-perf sizes (default 64K,1M)
#   --quick           coverse-perf --quick: a smoke test, not a measurement
#   -h, --help        this text
# Exit status: 0 every check passed; 1 a check failed; 2 a bad command line;
# 77 no usable RDMA device here (the reason is printed): a skip, not a pass.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
skip() {
    echo "verbs-check: skipped: $*" >&2
    exit 77
}
die() {
    echo "verbs-check: $*" >&2
    exit 1
}

build=build/release
do_build=1
sizes=64K,1M
quick=()
while [ $# -gt 0 ]; do
    case "$1" in
        --build-dir) build=${2:?--build-dir needs a directory}; shift ;;
        --no-build) do_build=0 ;;
        --sizes) sizes=${2:?--sizes needs a list}; shift ;;
        --quick) quick=(--quick) ;;
        -h | --help) usage; exit 0 ;;
        *) echo "verbs-check: unknown argument \"$1\"" >&2; usage >&2; exit 2 ;;
    esac
    shift
done

# 1. Is there an active port? The kernel's view first: it costs no build.
active=
for state in /sys/class/infiniband/*/ports/*/state; do
    if [ -r "$state" ] && grep -q ACTIVE "$state"; then
        active=${state#/sys/class/infiniband/}
        active=${active%/state}
    fi
done
if [ -z "$active" ] && command -v ibv_devinfo >/dev/null &&
    ibv_devinfo 2>/dev/null | grep -q 'state:.*PORT_ACTIVE'; then
    active="(ibv_devinfo)"
fi
if [ -z "$active" ]; then
    if [ -d /sys/class/infiniband ]; then
        skip "no RDMA port is ACTIVE (port states: $(cat /sys/class/infiniband/*/ports/*/state \
            2>/dev/null | tr '\n' ' ')); ibv_devinfo shows them: check the link, and on" \
            "InfiniBand that a subnet manager runs"
    fi
    skip "no RDMA device: /sys/class/infiniband does not exist (the kernel has no RDMA" \
        "support or no RDMA driver is loaded)"
fi
echo "verbs-check: active port $active"

# 2. Build, and ask coverse itself (list_verbs_devices, make_verbs_provider).
if [ "$do_build" = 1 ]; then
    if [ "$build" = build/release ]; then nice -n 10 cmake --preset release >/dev/null; fi
    nice -n 10 cmake --build "$build" -j "${BUILD_JOBS:-2}"
fi
info=$build/tools/info/coverse-info
run=$build/tools/run/coverse-run
perf=$build/tools/perf/coverse-perf
unit=$build/tests/rdma/rdma_verbs_tests
eager=$build/tests/rdma/rdma_eager_tests
for bin in "$info" "$run" "$perf" "$unit" "$eager"; do
    [ -x "$bin" ] || die "$bin is missing: build the release preset or drop --no-build"
done
verbs=$("$info" | sed -n 's/^verbs  *//p')
case "$verbs" in
    usable:*) echo "verbs-check: coverse-info: verbs $verbs" ;;
    *) skip "coverse cannot use verbs here: ${verbs:-coverse-info printed no verbs line}" ;;
esac

export COVERSE_RDMA_PROVIDER=verbs
rows=()
failed=0
row() { rows+=("$1|$2|$3"); [ "$2" = pass ] || failed=1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# 3. The verbs unit tests and the eager matrix over channels written by RDMA WRITE (the
# put/*verbs* instantiation; the cases that need rings skip on any machine), case by case:
# with a device, the others may not skip.
gtest_rows() {  # $1: output of a gtest binary; $2: cases allowed to skip (a grep -E pattern)
    local before=${#rows[@]}
    while read -r status name ms; do
        case "$status" in
            OK) row "$name" pass "${ms//[()]/}" ;;
            FAILED) row "$name" fail "" ;;
            SKIPPED)
                if [ -n "$2" ] && grep -qE "$2" <<<"$name"; then
                    rows+=("$name|skip (needs rings)|")
                else
                    row "$name" "fail (skipped with a device)" ""
                fi
                ;;
        esac
    done < <(sed -n 's/^\[ *\(OK\|FAILED\|SKIPPED\) *\] \([A-Za-z0-9_.\/]*\) (\([0-9]* ms\))$/\1 \2 \3/p' "$1")
    [ ${#rows[@]} -gt "$before" ]
}
"$unit" >"$tmp/unit.txt" 2>&1 || true
gtest_rows "$tmp/unit.txt" "" || row rdma_verbs_tests "fail (no test ran)" ""
"$eager" --gtest_filter='put/*verbs*' >"$tmp/eager.txt" 2>&1 || true
gtest_rows "$tmp/eager.txt" 'a_burst_past_the_channel|receiver_initiated' ||
    row "rdma_eager_tests put/*verbs*" "fail (no test ran)" ""

# 4. The whole rdma label, forced onto verbs.
# (Without this script's own ctest entry, which would run this again.)
if (cd "$build" && ctest -L rdma -E '^verbs_check$' --output-on-failure >"$tmp/ctest.txt" 2>&1); then
    row "ctest -L rdma" pass "$(grep -o '[0-9]* tests passed\|[0-9]*% tests passed' "$tmp/ctest.txt" | head -1)"
else
    row "ctest -L rdma" fail "see: (cd $build && COVERSE_RDMA_PROVIDER=verbs ctest -L rdma --output-on-failure)"
fi

# coverse-perf --json prints one object a line: {"test":"pingpong",...,"bytes":65536,...}.
field() { sed -n "s/.*\"$1\":\"\{0,1\}\([^,\"}]*\).*/\1/p" <<<"$2"; }

# 5. Two PEs through coverse-run, large messages by rendezvous over verbs.
if "$run" -n 2 --timeout 60 "$perf" --tests pingpong,bw --sizes "$sizes" --json "${quick[@]}" \
    ++verbose >"$tmp/perf.txt" 2>&1; then
    if grep -q 'rndv/get/verbs' "$tmp/perf.txt"; then
        row "protocol table" pass "rndv/get/verbs"
    else
        row "protocol table" "fail (no rndv/get/verbs in ++verbose)" ""
    fi
    while read -r line; do
        test=$(field test "$line")
        bytes=$(field bytes "$line")
        if [ "$test" = pingpong ]; then
            row "coverse-perf pingpong $bytes B" pass "p50 $(field p50_us "$line") us"
        else
            row "coverse-perf $test $bytes B" pass "$(field mbps "$line") MB/s"
        fi
    done < <(grep '^{' "$tmp/perf.txt")
else
    row "coverse-run -n 2 coverse-perf" fail "$(tail -n 3 "$tmp/perf.txt" | tr '\n' ' ')"
fi

# 6. Small messages over the connection (SHM=off): EAGER_REMOTE=auto writes the eager channel
# of a verbs pair by RDMA WRITE; ++verbose says how many messages went that way. A pingpong
# is not busy enough for the default EAGER_THRESHOLD (1000 messages in 10 ms): 10 opens it.
if "$run" -n 2 --timeout 60 "$perf" --tests pingpong --sizes 8,1K --json "${quick[@]}" \
    ++verbose ++set SHM=off ++set EAGER_THRESHOLD=10 >"$tmp/put.txt" 2>&1; then
    puts=$(sed -n 's/.*PE 1 eager: .*by one-sided put: [0-9]* sent, \([0-9]*\) received.*/\1/p' \
        "$tmp/put.txt")
    if [ "${puts:-0}" -gt 0 ]; then
        row "eager channel by RDMA WRITE (SHM=off)" pass "$puts messages taken from slots"
    else
        row "eager channel by RDMA WRITE (SHM=off)" "fail (no message went by put)" ""
    fi
    while read -r line; do
        row "coverse-perf pingpong $(field bytes "$line") B, SHM=off" pass \
            "p50 $(field p50_us "$line") us"
    done < <(grep '^{' "$tmp/put.txt")
else
    row "coverse-run -n 2 coverse-perf SHM=off" fail "$(tail -n 3 "$tmp/put.txt" | tr '\n' ' ')"
fi

printf '\n%-76s  %-30s  %s\n' TEST RESULT FIGURE
for r in "${rows[@]}"; do
    IFS='|' read -r name result figure <<<"$r"
    printf '%-76s  %-30s  %s\n' "$name" "$result" "$figure"
done
if [ "$failed" = 1 ]; then
    echo "verbs-check: failed (the unit output: $unit with COVERSE_RDMA_PROVIDER=verbs)" >&2
    exit 1
fi
echo "verbs-check: passed"
