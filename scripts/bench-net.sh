#!/usr/bin/env bash
# Ping-pong over loopback between two processes, all in one run: coverse's mesh on
# io_uring and on Asio, a blocking-socket baseline, and Open MPI's TCP path when mpirun is
# installed (--install-mpi installs Debian's openmpi-bin). Prints a Markdown table.
# Usage: scripts/bench-net.sh [--install-mpi] [--build-dir DIR] [bench_net args...]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib-bench.sh

build=build/release
install_mpi=0
args=()
while [ $# -gt 0 ]; do
    case "$1" in
        --install-mpi) install_mpi=1 ;;
        --build-dir) build=$2; shift ;;
        -h|--help) sed -n '2,5p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) args+=("$1") ;;
    esac
    shift
done

if [ "$install_mpi" = 1 ]; then bench_install_mpi bench-net; fi

if [ ! -x "$build/tools/bench/bench_net" ]; then
    cmake --preset release >/dev/null && cmake --build --preset release --target bench_net
    build=build/release
fi

out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$build/tools/bench/bench_net" --json "${args[@]}" >"$out"

if bench_have_mpi; then
    mpicc -O2 -o "$build/mpi_pingpong" tools/bench/mpi_pingpong.c
    echo "bench-net: running openmpi-tcp ..." >&2
    bench_mpirun_tcp 2 "$build/mpi_pingpong" >>"$out"
else
    echo "bench-net: Open MPI not installed: no MPI column (--install-mpi adds it)" >&2
fi

python3 - "$out" <<'PY'
import json, sys
rows = {}
for line in open(sys.argv[1]):
    line = line.strip()
    if not line.startswith("{"): continue
    r = json.loads(line)
    d = rows.setdefault(r["impl"], {})
    d["bw" if r["test"] == "bw" else r["bytes"]] = r.get("mbps", r.get("lat_us"))
print("| impl | 8 B p50 µs | 1 KiB p50 µs | 64 KiB p50 µs | 1 MiB MB/s |")
print("|---|---:|---:|---:|---:|")
for impl, d in rows.items():
    f = lambda k: ("%.2f" % d[k]) if k in d else "—"
    print(f"| {impl} | {f(8)} | {f(1024)} | {f(65536)} | {('%.0f' % d['bw']) if 'bw' in d else '—'} |")
if "openmpi-tcp" in rows and "io_uring" in rows:
    ours, mpi = rows["io_uring"].get(8), rows["openmpi-tcp"].get(8)
    if ours and mpi:
        print(f"\n8 B latency, io_uring / Open MPI TCP: {ours / mpi:.2f} (target: at most 1.25, i.e. at least 0.8x its speed)")
PY
