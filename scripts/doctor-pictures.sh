#!/usr/bin/env bash
# Regenerates the hang-report examples in docs/doctor.md: runs the test programs that hang
# on purpose (tests/tools/doctor_hang_pe) under coverse-run --report-stuck-after, keeps
# each text report, and renders each wait-for graph (DOT) to SVG with Graphviz.
#   scripts/doctor-pictures.sh [BUILD_DIR]      (default build/release)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build/release}
run=$build/tools/run/coverse-run
pe=$build/tests/tools/doctor_hang_pe
out=$root/docs/doctor
command -v dot >/dev/null || { echo "doctor-pictures: needs Graphviz (scripts/setup.sh installs it)" >&2; exit 1; }
mkdir -p "$out"
for mode in barrier:4 reply-cycle:2 endless-handler:2 rndv-unfetched:2; do
    name=${mode%%:*} pes=${mode##*:}
    rm -f "$out/$name.txt"
    status=0
    "$run" -n "$pes" --report-stuck-after 1s --report-to "$out/$name.txt" --dot "$out/$name.dot" \
        "$pe" "$name" 2>/dev/null || status=$?
    [ "$status" -eq 124 ] || { echo "doctor-pictures: $name ended with $status, not 124" >&2; exit 1; }
    dot -Tsvg "$out/$name.dot" -o "$out/$name.svg"
    echo "docs/doctor/$name.txt, $name.dot, $name.svg"
done
