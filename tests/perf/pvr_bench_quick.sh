#!/bin/sh
# pvr_bench --quick runs and prints its JSON lines, "impl":"pvr": a get line (p50_us) and a
# bw line (mbps) for each size. No timing is checked. Exit 77 from pvr_bench (the kernel
# refuses process_vm_readv here) passes through as ctest's skip.
# Usage: pvr_bench_quick.sh PATH-TO-PVR_BENCH
set -u
out=$("$1" --quick --sizes 8,64K) || exit $?
printf '%s\n' "$out"
for want in '"test":"get","impl":"pvr","bytes":8,"lat_us":' \
    '"test":"bw","impl":"pvr","bytes":65536,"mbps":'; do
    printf '%s\n' "$out" | grep -qF "{$want" || {
        echo "pvr_bench_quick: no line starting {$want" >&2
        exit 1
    }
done
