#!/usr/bin/env bash
# coverse beside the real peers in ONE interleaved run: R repetitions (default 5), and in each
# repetition every implementation once, in an order that rotates by one each repetition:
#   coverse-shm  coverse-run -n 2 --bind coverse-perf --json --tests pingpong,bw,rate
#                (same-host rings, cma rendezvous: the defaults)
#   coverse-tcp  the same with ++set SHM=off ++set RDMA_PROVIDER=tcp (TCP stream, TCP
#                rendezvous)
#   ompi-vader   mpirun -np 2 --bind-to core --mca pml ob1 --mca btl vader,self mpi_perf
#   ompi-tcp     mpirun -np 2 --bind-to core --mca pml ob1 --mca btl tcp,self (on lo) mpi_perf
#   ucx-shm      ucx_perftest server (taskset -c 0) and client (taskset -c 1) on 127.0.0.1,
#                UCX_TLS=posix,sysv,cma,self
#   ucx-tcp      the same with UCX_TLS=tcp,self UCX_NET_DEVICES=lo
#   pvr          pvr_bench: raw process_vm_readv, back to back (bw) and one call (get)
#   ring         ring_bench: coverse's shared-memory ring alone, a ping-pong of whole messages
#                between two pinned processes (no runtime): the floor under coverse-shm's
#                small-message latency (sizes up to 256 KiB; larger ones are skipped)
#   line         ring_bench --bare: no ring, the same messages through one fixed place each
#                way (copied in, a number stored last): the hardware's floor under any layer
#   tcpline      tcp_line: the same ping-pong over one loopback TCP connection, TCP_NODELAY,
#                one send() per message, the receiver spinning on recv(MSG_DONTWAIT): the
#                kernel's floor under any layer over TCP (coverse-tcp, ucx-tcp, ompi-tcp)
# An implementation whose tool is missing is skipped with the reason; a run that fails
# leaves its numbers out for that repetition, said on stderr. Then the table of medians
# with the ratios and issue 10's targets (scripts/bench-perf-table.py; FILE again later).
# The JSON lines, each with its repetition as "rep" and its implementation as "impl", go
# to the results file, with the cache-line floor between the two CPUs just before and after
# the run ("floor_us", "floor_after_us", tools/perf/placement_probe): the host moves the
# vCPUs, and the table also files the same-host results by that placement.
#
# ucx_perftest's numbers, per test and size (same sizes, same iteration counts as
# coverse-perf's schedule, docs/perf.md; scripts/ucx-perftest-json.py converts them):
#   pingpong  tag_lat -s N: "50.0%ile" is p50_us, "overall" latency lat_us; UCX halves the
#             round trip in its *_lat tests, so both are one-way like ours
#   bw        tag_bw -s N -O W: "overall" bandwidth; UCX's MB/s is 2^20 B/s, converted to
#             10^6 B/s. A sliding window of W outstanding sends, not W and an ack.
#   rate      tag_bw -s 8 -O W: "overall" message rate
#
# Usage: scripts/bench-perf.sh [options] [-- arguments for coverse-perf and mpi_perf]
#   --peers LIST       implementations to run, comma-separated (default: all ten above)
#   --install-peers    install what is missing from Debian: Open MPI and ucx-utils
#   --install-mpi      install Debian's Open MPI (apt-get) when mpirun or mpicc is missing
#   --reps R           repetitions (default 5)
#   --out FILE         results file (default BUILD/bench-perf-DATE.jsonl)
#   --svg FILE         also plot bandwidth and latency against size (bench-perf-table.py)
#   --build-dir DIR    the build to use (default build/release, built with its preset)
#   --launcher PATH    coverse-run to use (default BUILD/tools/run/coverse-run, then PATH)
#   --no-build         use the binaries as they are
#   --quick            few iterations everywhere (a smoke test of the script, not a measurement)
#   -h, --help         this text
# Of the arguments after --, --sizes, --window, --iters and --warmup also set ucx_perftest's
# sizes and counts, --sizes pvr_bench's, and --sizes, --iters and --warmup ring_bench's and
# tcp_line's. Default sizes: the programs' own (pingpong 8 B to 4 MiB, bw 4 KiB to 4 MiB,
# rate 8 B).
# Example: scripts/bench-perf.sh --install-peers --reps 5 -- --sizes 8,1K,64K,1M,4M
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib-bench.sh

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
die() {
    echo "bench-perf: $*" >&2
    exit 1
}
note() { echo "bench-perf: $*" >&2; }

all_impls=(coverse-shm coverse-tcp ompi-vader ompi-tcp ucx-shm ucx-tcp pvr ring line tcpline)
build=build/release
reps=5
out=
svg=
launcher=
peers=
install_mpi=0
install_peers=0
do_build=1
quick=()
args=()
while [ $# -gt 0 ]; do
    case "$1" in
        --install-mpi) install_mpi=1 ;;
        --install-peers) install_peers=1 ;;
        --peers) peers=${2:?--peers needs a list}; shift ;;
        --reps) reps=${2:?--reps needs a count}; shift ;;
        --out) out=${2:?--out needs a file}; shift ;;
        --svg) svg=${2:?--svg needs a file}; shift ;;
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

wanted=("${all_impls[@]}")
if [ -n "$peers" ]; then
    IFS=, read -r -a wanted <<<"$peers"
    for w in "${wanted[@]}"; do
        [[ " ${all_impls[*]} " == *" $w "* ]] ||
            die "--peers: unknown implementation \"$w\" (${all_impls[*]})"
    done
fi

# to_bytes SIZE: 8, 1K, 64k, 4M, 1G as coverse-perf reads them (powers of 1024).
to_bytes() {
    local s=$1 unit=1
    case "$s" in
        *[kK]) unit=1024 ;;
        *[mM]) unit=$((1024 * 1024)) ;;
        *[gG]) unit=$((1024 * 1024 * 1024)) ;;
    esac
    s=${s%[kKmMgG]}
    [[ "$s" =~ ^[1-9][0-9]*$ ]] || die "--sizes: \"$1\" is not a size"
    echo $((s * unit))
}

# What the arguments after -- say about sizes and counts, for the peers that do not read
# them (ucx_perftest, pvr_bench, ring_bench, tcp_line).
sizes=
window=64
iters=0
warmup=-1
for ((i = 0; i < ${#args[@]}; ++i)); do
    a=${args[i]}
    v=
    case "$a" in
        --sizes=* | --window=* | --iters=* | --warmup=*) v=${a#*=}; a=${a%%=*} ;;
        --sizes | --window | --iters | --warmup) v=${args[i + 1]:-}; ((++i)) ;;
        --quick) quick=(--quick) ;;
    esac
    case "$a" in
        --sizes) sizes=$v ;;
        --window) window=$v ;;
        --iters) iters=$v ;;
        --warmup) warmup=$v ;;
    esac
done
[[ "$window" =~ ^[1-9][0-9]*$ ]] || die "--window needs a count, got \"$window\""
[[ "$iters" =~ ^[0-9]+$ ]] || die "--iters needs a count, got \"$iters\""
[[ "$warmup" =~ ^-?[0-9]+$ ]] || die "--warmup needs a count, got \"$warmup\""
pp_sizes=() bw_sizes=()
if [ -n "$sizes" ]; then
    IFS=, read -r -a list <<<"$sizes"
    for s in "${list[@]}"; do pp_sizes+=("$(to_bytes "$s")"); done
    bw_sizes=("${pp_sizes[@]}")
else # coverse-perf's and mpi_perf's default lists (docs/perf.md)
    pp_sizes=(8 64 512 1024 4096 16384 65536 262144 1048576 4194304)
    bw_sizes=(4096 16384 65536 262144 1048576 4194304)
fi

if [ "$install_peers" = 1 ]; then
    bench_install_peers bench-perf
elif [ "$install_mpi" = 1 ]; then
    bench_install_mpi bench-perf
fi
has() { [[ " ${wanted[*]} " == *" $1 "* ]]; }
if [ "$do_build" = 1 ]; then
    targets=(coverse-perf coverse-run placement_probe)
    has pvr && targets+=(pvr_bench)
    { has ring || has line; } && targets+=(ring_bench)
    has tcpline && targets+=(tcp_line)
    bench_build "$build" "${targets[@]}"
fi

# Which of the wanted implementations this machine can run; the others are skipped, said why.
impls=()
skip() { note "skipping $1: $2"; }
perf=$build/tools/perf/coverse-perf
if [ -z "$launcher" ]; then
    if [ -x "$build/tools/run/coverse-run" ]; then
        launcher=$build/tools/run/coverse-run
    else
        launcher=$(command -v coverse-run || true)
    fi
fi
mpi_perf=
for w in "${wanted[@]}"; do
    case "$w" in
        coverse-*)
            if [ ! -x "$perf" ]; then
                skip "$w" "$perf is missing (build it, or drop --no-build)"
            elif [ -z "$launcher" ] || [ ! -x "$launcher" ]; then
                skip "$w" "coverse-run not found in $build/tools/run or on PATH (--launcher PATH)"
            else
                impls+=("$w")
            fi
            ;;
        ompi-*)
            if ! bench_have_mpi; then
                skip "$w" "Open MPI (mpirun, mpicc, mpi.h) is not installed (--install-peers adds it)"
                continue
            fi
            if [ -z "$mpi_perf" ]; then
                mpi_perf=$build/tools/perf/mpi_perf
                mkdir -p "$(dirname "$mpi_perf")"
                mpicc -O2 -o "$mpi_perf" tools/perf/mpi_perf.c || die "mpicc could not build mpi_perf"
            fi
            impls+=("$w")
            ;;
        ucx-*)
            if ! command -v ucx_perftest >/dev/null; then
                skip "$w" "ucx_perftest is not installed (--install-peers adds ucx-utils)"
            elif ! command -v taskset >/dev/null; then
                skip "$w" "taskset (util-linux) is missing, needed to pin server and client"
            else
                impls+=("$w")
            fi
            ;;
        pvr)
            if [ -x "$build/tools/perf/pvr_bench" ]; then
                impls+=("$w")
            else
                skip "$w" "$build/tools/perf/pvr_bench is missing (build it, or drop --no-build)"
            fi
            ;;
        ring | line)
            if [ -x "$build/tools/perf/ring_bench" ]; then
                impls+=("$w")
            else
                skip "$w" "$build/tools/perf/ring_bench is missing (build it, or drop --no-build)"
            fi
            ;;
        tcpline)
            if [ -x "$build/tools/perf/tcp_line" ]; then
                impls+=("$w")
            else
                skip "$w" "$build/tools/perf/tcp_line is missing (build it, or drop --no-build)"
            fi
            ;;
    esac
done
[ ${#impls[@]} -gt 0 ] || die "none of ${wanted[*]} can run on this machine"

[ -n "$out" ] || out=$build/bench-perf-$(date +%Y%m%d-%H%M%S).jsonl
mkdir -p "$(dirname "$out")"
: >"$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

clamp() { # clamp V LO HI
    local v=$1
    ((v < $2)) && v=$2
    ((v > $3)) && v=$3
    echo "$v"
}
# The schedule of perf_options.cpp's plan_for (and mpi_perf.c's plan), for ucx_perftest:
# prints "ITERS WARMUP" for TEST and BYTES; bw and rate count windows.
plan() {
    local test=$1 bytes=$2 n q=${#quick[@]}
    case "$test" in
        pingpong)
            local base=10000 floor=100
            ((q)) && base=50 floor=5
            if ((bytes <= 4096)); then n=$base; else n=$(clamp $((base * 4096 / bytes)) $floor $base); fi
            ;;
        bw)
            if ((q)); then
                n=$(clamp $((16 * 1048576 / (bytes * window))) 2 20)
            else
                n=$(clamp $((512 * 1048576 / (bytes * window))) 4 1000)
            fi
            ;;
        rate) n=1000; ((q)) && n=20 ;;
    esac
    ((iters > 0)) && n=$iters
    local w=$warmup
    if ((w < 0)); then
        w=$((n / 10))
        ((w >= 1)) || w=1
    fi
    echo "$n $w"
}

# The batch file both ucx_perftest sides read: one line per test and size, named TEST_BYTES.
ucx_batch=$work/ucx-batch
{
    for b in "${pp_sizes[@]}"; do
        read -r n w < <(plan pingpong "$b")
        echo "pingpong_$b -t tag_lat -s $b -n $n -w $w"
    done
    for b in "${bw_sizes[@]}"; do
        read -r n w < <(plan bw "$b")
        echo "bw_$b -t tag_bw -s $b -n $((n * window)) -w $((w * window)) -O $window"
    done
    read -r n w < <(plan rate 8)
    echo "rate_8 -t tag_bw -s 8 -n $((n * window)) -w $((w * window)) -O $window"
} >"$ucx_batch"

# run_ucx TLS...: one ucx_perftest server/client pair over the batch file, the server pinned
# to CPU 0 and the client to CPU 1; the client's output on stdout.
run_ucx() {
    local port tries=0 server
    port=$((20000 + RANDOM % 20000))
    env "$@" taskset -c 0 ucx_perftest -p "$port" -b "$ucx_batch" >"$work/ucx-server" 2>&1 &
    server=$!
    # The client gives up at once when nobody listens yet: wait for the server's port.
    until ss -Hltn "sport = :$port" 2>/dev/null | grep -q .; do
        if ((++tries > 100)) || ! kill -0 "$server" 2>/dev/null; then
            kill "$server" 2>/dev/null || true
            wait "$server" 2>/dev/null || true
            echo "ucx_perftest's server did not listen on port $port:" >&2
            cat "$work/ucx-server" >&2
            return 1
        fi
        sleep 0.1
    done
    local rc=0
    env "$@" timeout 600 taskset -c 1 ucx_perftest 127.0.0.1 -p "$port" -b "$ucx_batch" -f ||
        rc=$?
    if ((rc)); then kill "$server" 2>/dev/null || true; fi
    if ! wait "$server"; then ((rc)) || rc=1; fi
    return "$rc"
}

# run_one IMPL REP: one run of IMPL; its JSON lines, tagged with the repetition and the
# implementation's name, go to $out. A failed run is reported and left out.
run_one() {
    local impl=$1 rep=$2 raw=$work/raw rc=0 floor=0 floor_after=0
    note "repetition $rep/$reps: $impl"
    floor=$(probe_floor)
    local common=(--json --tests "pingpong,bw,rate" ${quick[@]+"${quick[@]}"} ${args[@]+"${args[@]}"})
    case "$impl" in
        coverse-shm)
            timeout 600 "$launcher" -n 2 --bind "$perf" "${common[@]}" >"$raw" || rc=$?
            ;;
        coverse-tcp)
            timeout 600 "$launcher" -n 2 --bind "$perf" "${common[@]}" \
                ++set SHM=off ++set RDMA_PROVIDER=tcp >"$raw" || rc=$?
            ;;
        ompi-vader) timeout 600 bench_mpirun_vader 2 "$mpi_perf" "${common[@]}" >"$raw" || rc=$? ;;
        ompi-tcp) timeout 600 bench_mpirun_tcp 2 "$mpi_perf" "${common[@]}" >"$raw" || rc=$? ;;
        ucx-shm | ucx-tcp)
            local tls=("UCX_TLS=posix,sysv,cma,self")
            [ "$impl" = ucx-tcp ] && tls=("UCX_TLS=tcp,self" UCX_NET_DEVICES=lo)
            run_ucx "${tls[@]}" >"$work/ucx-client" || rc=$?
            if ((rc == 0)); then
                python3 scripts/ucx-perftest-json.py "$impl" "$window" <"$work/ucx-client" \
                    >"$raw" || rc=$?
            else
                cat "$work/ucx-client" >&2
            fi
            ;;
        pvr)
            local sz=()
            [ -n "$sizes" ] && sz=(--sizes "$sizes")
            timeout 600 "$build/tools/perf/pvr_bench" ${quick[@]+"${quick[@]}"} \
                ${sz[@]+"${sz[@]}"} >"$raw" || rc=$?
            ;;
        ring | line | tcpline)
            local rs=() tool=ring_bench
            [ "$impl" = line ] && rs+=(--bare)
            [ "$impl" = tcpline ] && tool=tcp_line
            [ -n "$sizes" ] && rs+=(--sizes "$sizes")
            ((iters > 0)) && rs+=(--iters "$iters")
            ((warmup >= 0)) && rs+=(--warmup "$warmup")
            timeout 600 "$build/tools/perf/$tool" ${quick[@]+"${quick[@]}"} \
                ${rs[@]+"${rs[@]}"} >"$raw" || rc=$?
            ;;
    esac
    floor_after=$(probe_floor)
    if ((rc)); then
        note "$impl failed (status $rc) in repetition $rep: its numbers for it are left out"
        return 0
    fi
    grep '^{' "$raw" |
        sed "s/^{/{\"rep\":$rep,\"floor_us\":$floor,\"floor_after_us\":$floor_after,/; s/\"impl\":\"[^\"]*\"/\"impl\":\"$impl\"/" \
        >>"$out" || note "$impl printed no results in repetition $rep"
}

# The cache-line floor between the two benchmark CPUs now (tools/perf/placement_probe): the
# host moves the vCPUs, and the table files each run by the placement it ran under. 0 when
# the probe is missing or fails (the run is then not filed by placement).
probe_floor() {
    local p=$build/tools/perf/placement_probe v
    [ -x "$p" ] || { echo 0; return; }
    v=$("$p" 2>/dev/null | sed -n 's/.*"one_way_us":\([0-9.]*\).*/\1/p')
    echo "${v:-0}"
}

# bench_mpirun_* are shell functions: timeout needs a command, so give it this script's shell.
export -f bench_mpirun_ob1 bench_mpirun_vader bench_mpirun_tcp
timeout() { command timeout "$1" bash -c '"$@"' bash "${@:2}"; }

# Rotate the order by one each repetition, so a drift of the machine (the host moves vCPUs,
# MEASURED.md; other jobs start and stop) does not always favour the same implementation.
k=${#impls[@]}
note "implementations: ${impls[*]}; $reps repetitions; results in $out"
for ((rep = 1; rep <= reps; ++rep)); do
    for ((j = 0; j < k; ++j)); do
        run_one "${impls[$(((rep - 1 + j) % k))]}" "$rep"
    done
done

echo
table=(python3 scripts/bench-perf-table.py)
[ -n "$svg" ] && table+=(--svg "$svg")
"${table[@]}" "$out"
note "JSON lines in $out"
