#!/usr/bin/env bash
# coverse-perf beside Open MPI's TCP path, in the same run: R repetitions (default 5) of
#   coverse-run -n 2 --bind coverse-perf --json --tests pingpong,bw,rate
#   mpirun -np 2 --bind-to core (ob1, tcp,self BTLs on lo) mpi_perf --tests pingpong,bw,rate
# alternating which goes first, then a table of the medians per test and size with the ratio
# coverse / Open MPI (target: small-message latency at most 0.8x). The JSON lines, each
# with its repetition as "rep", go to a results file (scripts/bench-perf-table.py FILE
# prints the table again).
#
# Usage: scripts/bench-perf.sh [options] [-- arguments for both programs]
#   --install-mpi      install Debian's Open MPI (apt-get) when mpirun or mpicc is missing
#   --reps R           repetitions of each (default 5)
#   --out FILE         results file (default BUILD/bench-perf-DATE.jsonl)
#   --build-dir DIR    the build to use (default build/release, built with its preset)
#   --launcher PATH    coverse-run to use (default BUILD/tools/run/coverse-run, then PATH)
#   --no-build         use the binaries as they are
#   --quick            pass --quick to both (a smoke test of the script, not a measurement)
#   -h, --help         this text
# Example: scripts/bench-perf.sh --install-mpi --reps 10 -- --sizes 8,1K,64K,1M
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib-bench.sh

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
die() {
    echo "bench-perf: $*" >&2
    exit 1
}

build=build/release
reps=5
out=
launcher=
install_mpi=0
do_build=1
quick=()
args=()
while [ $# -gt 0 ]; do
    case "$1" in
        --install-mpi) install_mpi=1 ;;
        --reps) reps=${2:?--reps needs a count}; shift ;;
        --out) out=${2:?--out needs a file}; shift ;;
        --build-dir) build=${2:?--build-dir needs a directory}; shift ;;
        --launcher) launcher=${2:?--launcher needs a path}; shift ;;
        --no-build) do_build=0 ;;
        --quick) quick=(--quick) ;;
        -h | --help) usage; exit 0 ;;
        --) shift; args=("$@"); break ;;
        *) echo "bench-perf: unknown argument \"$1\"" >&2; usage >&2; exit 2 ;;
    esac
    shift
done
[[ "$reps" =~ ^[1-9][0-9]*$ ]] || die "--reps needs a count of 1 or more, got \"$reps\""
command -v python3 >/dev/null || die "python3 is needed for the comparison table"

if [ "$install_mpi" = 1 ]; then bench_install_mpi bench-perf; fi
if [ "$do_build" = 1 ]; then bench_build "$build" coverse-perf coverse-run; fi

perf=$build/tools/perf/coverse-perf
[ -x "$perf" ] || die "$perf is missing: build it (cmake --build --preset release) or drop --no-build"
if [ -z "$launcher" ]; then
    if [ -x "$build/tools/run/coverse-run" ]; then
        launcher=$build/tools/run/coverse-run
    else
        launcher=$(command -v coverse-run) ||
            die "coverse-run not found in $build/tools/run or on PATH; build it or pass --launcher PATH"
    fi
fi

mpi_perf=
if bench_have_mpi; then
    mpi_perf=$build/tools/perf/mpi_perf
    mpicc -O2 -o "$mpi_perf" tools/perf/mpi_perf.c
else
    echo "bench-perf: Open MPI not installed: coverse only, no ratio (--install-mpi adds it)" >&2
fi

[ -n "$out" ] || out=$build/bench-perf-$(date +%Y%m%d-%H%M%S).jsonl
mkdir -p "$(dirname "$out")"
: >"$out"
raw=$(mktemp)
trap 'rm -f "$raw"' EXIT

# run_one IMPL REP: one run of IMPL; its JSON lines, tagged with the repetition, go to $out.
run_one() {
    local impl=$1 rep=$2
    echo "bench-perf: repetition $rep/$reps: $impl" >&2
    if [ "$impl" = coverse ]; then
        "$launcher" -n 2 --bind "$perf" --json --tests pingpong,bw,rate \
            ${quick[@]+"${quick[@]}"} ${args[@]+"${args[@]}"} >"$raw" ||
            die "coverse-perf failed (status $?) in repetition $rep"
    else
        bench_mpirun_tcp 2 "$mpi_perf" --tests pingpong,bw,rate \
            ${quick[@]+"${quick[@]}"} ${args[@]+"${args[@]}"} >"$raw" ||
            die "mpi_perf failed (status $?) in repetition $rep"
    fi
    grep '^{' "$raw" | sed "s/^{/{\"rep\":$rep,/" >>"$out" ||
        die "$impl printed no results in repetition $rep"
}

# Alternate the order, so a drift of the machine (the host moves vCPUs, MEASURED.md) does not
# always favour the same side.
for ((rep = 1; rep <= reps; ++rep)); do
    if [ -z "$mpi_perf" ]; then
        run_one coverse "$rep"
    elif ((rep % 2)); then
        run_one coverse "$rep"
        run_one mpi "$rep"
    else
        run_one mpi "$rep"
        run_one coverse "$rep"
    fi
done

echo
python3 scripts/bench-perf-table.py "$out"
echo "bench-perf: JSON lines in $out" >&2
