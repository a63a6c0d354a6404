# shellcheck shell=bash
# Shell functions the benchmark scripts share (sourced, not run): installing Open MPI and the
# other peers, building release targets, and running mpirun over Open MPI's TCP and
# shared-memory paths as MEASURED.md compares them. Callers run from the repository root
# with `set -euo pipefail`.

# bench_cli NAME: defines, for the calling script, usage (its header comment, up to the
# `set -euo` line), die (NAME: message on stderr, exit 1) and note (NAME: message on stderr).
bench_cli() {
    bench_cli_name=$1
    usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
    die() {
        echo "$bench_cli_name: $*" >&2
        exit 1
    }
    note() { echo "$bench_cli_name: $*" >&2; }
}

# bench_install_mpi PREFIX: installs Debian's Open MPI (mpirun, mpicc, mpi.h) unless it is
# all there.
bench_install_mpi() {
    bench_have_mpi && return 0
    echo "$1: installing openmpi-bin libopenmpi-dev" >&2
    local sudo=
    [ "$(id -u)" -ne 0 ] && sudo=sudo
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
        openmpi-bin libopenmpi-dev >/dev/null
}

# bench_install_peers PREFIX: installs what every peer of bench-perf.sh needs from Debian:
# Open MPI (mpirun, mpicc) and UCX's ucx_perftest, each only when it is missing. The SVG
# plot is written by hand, so nothing is needed for it (librsvg2-bin's rsvg-convert only
# turns it into a PNG to look at).
bench_install_peers() {
    local want=()
    bench_have_mpi || want+=(openmpi-bin libopenmpi-dev)
    command -v ucx_perftest >/dev/null || want+=(ucx-utils)
    [ ${#want[@]} -eq 0 ] && return 0
    echo "$1: installing ${want[*]}" >&2
    local sudo=
    [ "$(id -u)" -ne 0 ] && sudo=sudo
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
        "${want[@]}" >/dev/null
}

# bench_have_mpi: true when mpirun and mpicc are on PATH and mpicc finds mpi.h (mpicc comes
# with openmpi-bin, mpi.h with libopenmpi-dev: a machine may have only the first).
bench_have_mpi() {
    command -v mpirun >/dev/null && command -v mpicc >/dev/null &&
        echo '#include <mpi.h>' | mpicc -E -x c - >/dev/null 2>&1
}

# bench_build BUILD_DIR TARGET...: configures (the release preset when BUILD_DIR is
# build/release) and builds the targets that exist in that build; a target the build does
# not define (coverse-run before the launcher lands) is left out, never faked.
bench_build() {
    local dir=$1
    shift
    if [ "$dir" = build/release ]; then
        cmake --preset release >/dev/null
    elif [ ! -f "$dir/CMakeCache.txt" ]; then
        echo "bench: $dir is not a configured build directory" >&2
        return 1
    fi
    local known targets=()
    known=$(cmake --build "$dir" --target help 2>/dev/null)
    for t in "$@"; do
        grep -q "^$t:" <<<"$known" && targets+=("$t")
    done
    [ ${#targets[@]} -eq 0 ] && return 0
    cmake --build "$dir" -j "${BENCH_JOBS:-$(nproc)}" --target "${targets[@]}"
}

# bench_mpirun_ob1 NP BTLS MPIRUN-ARGS... PROGRAM ARGS...: runs PROGRAM on NP ranks bound to
# cores over Open MPI's ob1 PML with the BTLS given. The pml is pinned to ob1: Debian's Open
# MPI would otherwise pick UCX, and the BTL list would be ignored. As root (containers),
# mpirun needs both the flag and the environment variables.
bench_mpirun_ob1() {
    local np=$1 btls=$2
    shift 2
    local root=()
    if [ "$(id -u)" -eq 0 ]; then
        root=(--allow-run-as-root)
        export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    fi
    mpirun "${root[@]}" --oversubscribe -np "$np" --bind-to core --mca pml ob1 --mca btl "$btls" "$@"
}

# bench_mpirun_tcp NP PROGRAM ARGS...: Open MPI's TCP path as MEASURED.md compares it (the
# tcp and self BTLs, on loopback).
bench_mpirun_tcp() {
    local np=$1
    shift
    bench_mpirun_ob1 "$np" tcp,self --mca btl_tcp_if_include lo "$@"
}

# bench_mpirun_vader NP PROGRAM ARGS...: Open MPI's shared-memory path (the vader and self
# BTLs; vader moves large messages with its single-copy mechanism, CMA on this kernel).
bench_mpirun_vader() {
    local np=$1
    shift
    bench_mpirun_ob1 "$np" vader,self "$@"
}
