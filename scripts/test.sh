#!/usr/bin/env bash
# Builds and runs the whole ctest suite in each preset given, in order.
# Usage: scripts/test.sh [preset...]
#   (no preset)          release: the README's test command and CI (docs/testing.md)
#   asan release         Debug + ASan/UBSan, then Release: before a change is called done
set -euo pipefail
cd "$(dirname "$0")/.."

case "${1:-}" in
-h | --help)
    sed -n '2,5p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
    ;;
esac
presets=("$@")
[ ${#presets[@]} -eq 0 ] && presets=(release)
# Every name is checked before the first build starts: a typo after a 20-minute asan run
# would waste it. The names are CMakePresets.json's configure presets.
known=$(cmake --list-presets 2>/dev/null | sed -n 's/^ *"\([^"]*\)".*/\1/p' | tr '\n' ' ')
if [ -z "$known" ]; then
    echo "scripts/test.sh: 'cmake --list-presets' names no preset: is cmake installed? (./scripts/setup.sh)" >&2
    exit 2
fi
for preset in "${presets[@]}"; do
    case " $known" in
    *" $preset "*) ;;
    *)
        echo "scripts/test.sh: unknown preset '$preset' (CMakePresets.json has: ${known% }; --help)" >&2
        exit 2
        ;;
    esac
done
jobs=$(nproc)

for preset in "${presets[@]}"; do
    echo "== coverse: configure, build and test preset '$preset' =="
    cmake --preset "$preset" >/dev/null
    cmake --build --preset "$preset" -j "$jobs"
    ctest --preset "$preset" -j "$jobs"
done
