#!/usr/bin/env bash
# Builds and runs the whole ctest suite twice: Debug + ASan/UBSan, then Release.
# Usage: scripts/test.sh [preset...]   (default: asan release)
set -euo pipefail
cd "$(dirname "$0")/.."

presets=("$@")
[ ${#presets[@]} -eq 0 ] && presets=(asan release)
jobs=$(nproc)

for preset in "${presets[@]}"; do
    echo "== coverse: configure, build and test preset '$preset' =="
    cmake --preset "$preset" >/dev/null
    cmake --build --preset "$preset" -j "$jobs"
    ctest --preset "$preset" -j "$jobs"
done
