#!/usr/bin/env bash
# Builds the libFuzzer target of net's frame reader with clang++ (ASan + UBSan) and runs it
# for the given seconds over the committed seed corpus.
# Usage: scripts/fuzz.sh [seconds]   (default 30)
# Env: COVERSE_FUZZ_CXX (default clang++), COVERSE_FUZZ_BUILD_DIR (default build/fuzz),
#      COVERSE_FUZZ_SKIP_EXIT: exit code when clang++ is missing (default 0; ctest uses 77).
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-30}
cxx=${COVERSE_FUZZ_CXX:-clang++}
out=${COVERSE_FUZZ_BUILD_DIR:-build/fuzz}
seeds=tests/fuzz/corpus/frame_reader

if ! command -v "$cxx" >/dev/null 2>&1; then
    echo "fuzz_frame_reader: skipped: $cxx not found (scripts/setup.sh installs clang)"
    exit "${COVERSE_FUZZ_SKIP_EXIT:-0}"
fi

mkdir -p "$out/corpus"
# Compiled straight from the sources: the g++ CMake build cannot link libFuzzer. A clang
# without libFuzzer's runtime fails here, loudly; that is a broken setup, not a skip.
if ! "$cxx" -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined \
    -fno-sanitize-recover=undefined -fno-omit-frame-pointer \
    -Wall -Wextra -Wpedantic -Werror \
    -I net/include -I runtime/include \
    net/src/wire.cpp net/src/frame_reader.cpp tests/fuzz/fuzz_frame_reader.cpp \
    -o "$out/fuzz_frame_reader"; then
    echo "fuzz_frame_reader: FAILED to build with $cxx -fsanitize=fuzzer" \
        "(is libclang-rt-14-dev installed? run scripts/setup.sh)" >&2
    exit 1
fi

# New inputs go to the first directory (inside the build tree); the committed seeds stay
# untouched. Crash reproducers land in $out as crash-*.
echo "fuzz_frame_reader: running for ${seconds}s"
exec "$out/fuzz_frame_reader" -max_total_time="$seconds" -print_final_stats=1 \
    -artifact_prefix="$out/" -rss_limit_mb=2048 "$out/corpus" "$seeds"
