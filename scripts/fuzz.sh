#!/usr/bin/env bash
# Builds the libFuzzer targets for what coverse parses from a peer with clang++ (ASan + UBSan)
# and runs each for the given seconds over its committed seed corpus:
#   frame_reader   net's frame reader (every frame type's header and payload)
#   eager_footer   rdma's eager footer decoders (shared-memory slots and put slots)
# Usage: scripts/fuzz.sh [seconds] [target]   (default 30 seconds, every target)
# Env: COVERSE_FUZZ_CXX (default clang++), COVERSE_FUZZ_BUILD_DIR (default build/fuzz),
#      COVERSE_FUZZ_SKIP_EXIT: exit code when clang++ is missing (default 0; ctest uses 77).
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-30}
only=${2:-all}
cxx=${COVERSE_FUZZ_CXX:-clang++}
out=${COVERSE_FUZZ_BUILD_DIR:-build/fuzz}

case "$only" in
    all | frame_reader | eager_footer) ;;
    *) echo "fuzz: unknown target \"$only\" (frame_reader, eager_footer or all)" >&2; exit 2 ;;
esac

if ! command -v "$cxx" >/dev/null 2>&1; then
    echo "fuzz: skipped: $cxx not found (scripts/setup.sh installs clang)"
    exit "${COVERSE_FUZZ_SKIP_EXIT:-0}"
fi

# Compiled straight from the sources: the g++ CMake build cannot link libFuzzer. A clang
# without libFuzzer's runtime fails here, loudly; that is a broken setup, not a skip.
build() {
    local name=$1
    shift
    if ! "$cxx" -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined \
        -fno-sanitize-recover=undefined -fno-omit-frame-pointer \
        -Wall -Wextra -Wpedantic -Werror \
        -I net/include -I runtime/include -I rdma/include -I alloc/include \
        "$@" "tests/fuzz/fuzz_$name.cpp" -o "$out/fuzz_$name"; then
        echo "fuzz_$name: FAILED to build with $cxx -fsanitize=fuzzer" \
            "(is libclang-rt-14-dev installed? run scripts/setup.sh)" >&2
        exit 1
    fi
}

# New inputs go to the first directory (inside the build tree); the committed seeds stay
# untouched. Crash reproducers land in $out as crash-*.
run() {
    local name=$1
    local seeds=tests/fuzz/corpus/$name
    mkdir -p "$out/corpus_$name"
    echo "fuzz_$name: running for ${seconds}s"
    "$out/fuzz_$name" -max_total_time="$seconds" -print_final_stats=1 \
        -artifact_prefix="$out/" -rss_limit_mb=2048 "$out/corpus_$name" "$seeds"
}

mkdir -p "$out"
if [ "$only" = all ] || [ "$only" = frame_reader ]; then
    build frame_reader net/src/wire.cpp net/src/frame_reader.cpp
    run frame_reader
fi
if [ "$only" = all ] || [ "$only" = eager_footer ]; then
    build eager_footer rdma/src/eager_segment.cpp rdma/src/shm_names.cpp
    run eager_footer
fi
