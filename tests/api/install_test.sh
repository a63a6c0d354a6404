#!/bin/sh
# Installs the build tree into a temporary prefix and builds a legacy Converse program
# against it three ways: cc with pkg-config, c++ with pkg-config, and a CMake project with
# find_package(coverse). Each runs on 2 PEs through the installed coverse-run.
# usage: install_test.sh <build-dir> <source-file> [sanitizer flags]
set -eu
build=$1
src=$2
san=${3:-}
tmp=$(mktemp -d)
trap '[ -n "${KEEP_TMP:-}" ] || rm -rf "$tmp"' EXIT
fail() { echo "install_test: $*" >&2; exit 1; }

cmake --install "$build" --prefix "$tmp/prefix" >/dev/null || fail "cmake --install failed"
[ -x "$tmp/prefix/bin/coverse-run" ] || fail "bin/coverse-run was not installed"
[ -f "$tmp/prefix/include/converse.h" ] || fail "include/converse.h was not installed"
# Every installed tool starts from the prefix alone (coverse-perf once could not find
# libcoverse.so: it had no run path).
tools=0
for tool in "$tmp/prefix/bin/"*; do
    out=$(env -u LD_LIBRARY_PATH "$tool" --help 2>&1) || fail "$tool --help failed: $out"
    tools=$((tools + 1))
done
[ "$tools" -ge 4 ] || fail "expected at least 4 installed tools, found $tools"
out=$(env -u LD_LIBRARY_PATH "$tmp/prefix/bin/coverse-run" -n 2 "$tmp/prefix/bin/coverse-perf" \
    --help 2>&1) || fail "coverse-perf did not run on 2 PEs from the prefix: $out"
pc=$(find "$tmp/prefix" -name coverse.pc | head -n 1)
[ -n "$pc" ] || fail "coverse.pc was not installed"
export PKG_CONFIG_PATH=$(dirname "$pc")
flags=$(pkg-config --cflags --libs coverse) || fail "pkg-config does not know coverse"

cc $san -std=c11 -Wall -Wextra -Werror "$src" $flags -o "$tmp/ring_c" || fail "cc build failed"
cp "$src" "$tmp/ring.cpp"
c++ $san -Wall -Wextra -Werror "$tmp/ring.cpp" $flags -o "$tmp/ring_cxx" || fail "c++ build failed"

mkdir "$tmp/proj"
cp "$src" "$tmp/proj/ring.c"
cat > "$tmp/proj/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.25)
project(uses_coverse C)
enable_testing()
find_package(coverse REQUIRED)
add_executable(ring ring.c)
target_link_libraries(ring PRIVATE coverse::coverse)
# A user's multi-PE tests, one line each; "broken" must fail (an unknown setting), so a
# passing ctest run cannot be one that ran nothing.
coverse_add_test(NAME ring COMMAND ring PES 1 2 4 TIMEOUT 60 SET MAXIMUM_HANDLES=100
                 LABELS outside)
coverse_add_test(NAME broken COMMAND ring PES 2 TIMEOUT 60 SET NO_SUCH_SETTING=1)
CMAKE
cmake -S "$tmp/proj" -B "$tmp/proj/build" -DCMAKE_PREFIX_PATH="$tmp/prefix" \
    -DCMAKE_C_FLAGS="$san" -DCMAKE_EXE_LINKER_FLAGS="$san" >/dev/null || fail "find_package(coverse) failed"
cmake --build "$tmp/proj/build" >/dev/null || fail "the find_package project did not build"

# coverse_add_test: ring_1, ring_2, ring_4 pass with their label and timeout; broken_2 fails.
out=$(cd "$tmp/proj/build" && ctest -L outside 2>&1) || fail "coverse_add_test entries failed: $out"
echo "$out" | grep -q "100% tests passed, 0 tests failed out of 3" || fail "ctest -L outside: $out"
for t in ring_1 ring_2 ring_4; do
    (cd "$tmp/proj/build" && ctest -R "^$t\$" --show-only=json-v1) | grep -q '"TIMEOUT"' ||
        fail "$t has no TIMEOUT property"
done
if out=$(cd "$tmp/proj/build" && ctest -R '^broken_2$' 2>&1); then
    fail "broken_2 (an unknown ++set) passed: $out"
fi

for prog in "$tmp/ring_c" "$tmp/ring_cxx" "$tmp/proj/build/ring"; do
    out=$("$tmp/prefix/bin/coverse-run" -n 2 "$prog") || fail "$prog failed on 2 PEs: $out"
    echo "$out" | grep -q "install_ring: 3 laps on 2 PEs ok" || fail "$prog printed: $out"
done
echo "install_test: pkg-config (cc, c++) and find_package builds run on 2 PEs"
