#!/usr/bin/env bash
# Start-up against the job size, side by side in ONE interleaved run: a trivial program
# (start, barrier, exit: tests/startup/barrier_exit.c, and tools/bench/mpi_barrier_exit.c
# for Open MPI) on N = 2 ... 256 PEs of this host, R repetitions (default 3), and in each
# repetition every job size and every implementation once, in an order that rotates:
#   lazy    coverse-run --timings -n N startup_barrier_exit -rss -times   (CONNECT=lazy)
#   eager   the same with ++set CONNECT=eager (every pair at start-up)
#   mpirun  mpirun --oversubscribe -np N mpi_barrier_exit -rss -times (Open MPI's defaults)
# Each run gives its wall time (the launcher's start to its exit), each process's peak RSS
# (VmHWM, printed by the program: the mean over the job's processes), when PE 0 was done
# starting and when it passed the barrier (from the program's -times, against the launch),
# and for coverse the launcher's phases (--timings: every PE started, every PE registered,
# the first exit). Two tables of medians over the repetitions: the three side by side, and
# the phases of each. A run that fails or exceeds --timeout is
# left out and said on stderr; an implementation whose tool is missing is skipped with why.
#
# With --hosts H the PEs run on H hosts made of network namespaces (tests/hosts/testbed.sh:
# one namespace per host on a bridge, made at the start and removed at the end, also on
# failure or Ctrl-C; needs root, exits 77 saying why where namespaces cannot be made), N / H
# PEs on each (every N a multiple of H), every launcher in host h0:
#   lazy    coverse-run ++nodelist (h0 ... hH-1) ++remote-shell tests/hosts/hosts_shell.sh
#           ++ppn N/H --fan-out F, the same program
#   eager   the same with ++set CONNECT=eager
#   mpirun  mpirun --host h0:N/H,...,hH-1:N/H --map-by slot --bind-to none, its daemons
#           started through an rsh agent that enters the namespaces (as tests/hosts
#           pmix_hosts.sh does), TCP and out-of-band traffic on the hosts' eth0
# coverse-run's remote starts are not timed (the phases' "all started" is -).
#
# Usage: scripts/bench-startup.sh [options]
#   --pes LIST         job sizes, comma-separated (default 2,4,8,16,32,64,128,256;
#                      with --hosts H those that are multiples of H)
#   --impls LIST       implementations, comma-separated (default lazy,eager,mpirun)
#   --reps R           repetitions (default 3)
#   --max-eager N      largest job to run eager (default 256)
#   --max-mpirun N     largest job to run under mpirun (default 128: 256 ranks take minutes)
#   --hosts H          run across H namespace hosts, N / H PEs on each (root only)
#   --fan-out F        with --hosts: coverse-run's --fan-out (default 32, this script's own;
#                      the namespace hosts' shell is not sshd, so MaxStartups is no limit)
#   --timeout S        give up on one run after S seconds (default 300)
#   --out FILE         raw results, one line per run (default BUILD/bench-startup-DATE.tsv)
#   --build-dir DIR    the build to use (default build/release, built with its preset)
#   --no-build         use the binaries as they are
#   --install-mpi      install Debian's Open MPI (apt-get) when mpirun or mpicc is missing
#   -h, --help         this text
# Examples: scripts/bench-startup.sh --reps 5 --pes 2,16,64,256
#           scripts/bench-startup.sh --hosts 4 --pes 4,16,64 --impls lazy,mpirun
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib-bench.sh

bench_cli bench-startup

pes_list=
impls_list=lazy,eager,mpirun
reps=3
max_eager=256
max_mpirun=128
timeout_s=300
out=
build=build/release
do_build=1
install_mpi=0
hosts=0
fan_out=32
while [ $# -gt 0 ]; do
    case "$1" in
    --pes) pes_list=${2:?--pes needs a list}; shift 2 ;;
    --impls) impls_list=${2:?--impls needs a list}; shift 2 ;;
    --reps) reps=${2:?--reps needs a count}; shift 2 ;;
    --max-eager) max_eager=${2:?--max-eager needs a count}; shift 2 ;;
    --max-mpirun) max_mpirun=${2:?--max-mpirun needs a count}; shift 2 ;;
    --timeout) timeout_s=${2:?--timeout needs seconds}; shift 2 ;;
    --out) out=${2:?--out needs a file}; shift 2 ;;
    --build-dir) build=${2:?--build-dir needs a directory}; shift 2 ;;
    --no-build) do_build=0; shift ;;
    --install-mpi) install_mpi=1; shift ;;
    --hosts) hosts=${2:?--hosts needs a count}; shift 2 ;;
    --fan-out) fan_out=${2:?--fan-out needs a count}; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
    esac
done
for n in $reps $max_eager $max_mpirun $timeout_s $fan_out; do
    [[ $n =~ ^[1-9][0-9]*$ ]] || die "'$n' is not a positive whole number (see --help)"
done
if [ -z "$pes_list" ]; then
    # The default sizes; with --hosts H those that split evenly over H hosts.
    pes_list=2,4,8,16,32,64,128,256
    if [[ $hosts =~ ^[1-9][0-9]*$ ]]; then
        pes_list=$(tr , '\n' <<<"$pes_list" | awk -v h="$hosts" '$1 % h == 0' | paste -sd,)
        [ -n "$pes_list" ] || die "--hosts $hosts: no default job size splits evenly over $hosts hosts; give --pes"
    fi
fi
IFS=, read -r -a pes <<<"$pes_list"
IFS=, read -r -a impls <<<"$impls_list"
for n in "${pes[@]}"; do
    [[ $n =~ ^[1-9][0-9]*$ ]] && [ "$n" -le 65536 ] || die "--pes: '$n' is not a PE count"
done
if [ "$hosts" != 0 ]; then
    [[ $hosts =~ ^[1-9][0-9]*$ ]] && [ "$hosts" -le 250 ] || die "--hosts: '$hosts' is not a host count of 1 to 250"
    for n in "${pes[@]}"; do
        [ $((n % hosts)) = 0 ] ||
            die "--pes: $n PEs do not split evenly over $hosts hosts; give --pes with multiples of $hosts"
    done
fi
for i in "${impls[@]}"; do
    case "$i" in lazy | eager | mpirun) ;; *) die "--impls: unknown implementation '$i'" ;; esac
done

[ "$do_build" = 1 ] && { bench_build "$build" coverse-run startup_barrier_exit >&2 || die "the build failed"; }
run=$build/tools/run/coverse-run
prog=$build/tests/startup/startup_barrier_exit
[ -x "$run" ] || die "no $run (build the release preset, or give --build-dir)"
[ -x "$prog" ] || die "no $prog (build the target startup_barrier_exit)"
mkdir -p "$build"
[ -n "$out" ] || out=$build/bench-startup-$(date +%Y%m%d-%H%M%S).tsv
work=$(mktemp -d)
launcher_pid=
cleanup() {
    [ -n "$launcher_pid" ] && kill -9 -- "-$launcher_pid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT

if [ "$hosts" != 0 ]; then
    # The test bed's helpers (testbed_*, addr_of); its trap is replaced by ours, which calls
    # its clean-up last: the namespaces (and every process left in them, by PID), the bridge.
    # shellcheck source-path=SCRIPTDIR source=../tests/hosts/testbed.sh
    . tests/hosts/testbed.sh
    # shellcheck source-path=SCRIPTDIR source=../tests/hosts/paths.sh
    . tests/hosts/paths.sh
    # shellcheck disable=SC2034 # read by addr_of (paths.sh); the bridge is ours alone
    subnet=250
    testbed_init bench-startup
    trap 'set +e; cleanup; testbed_cleanup' EXIT
    names=()
    for ((h = 0; h < hosts; ++h)); do
        testbed_host "h$h" "$(addr_of "h$h")/24" || die "could not make host h$h"
        names+=("h$h=$(addr_of "h$h")")
    done
    testbed_names "${names[@]}" || die "cannot write /etc/netns/$TB-h*/hosts"
    testbed_rsh_agent "$work/rsh-agent" || die "cannot write the rsh agent"
    {
        echo "group main"
        for ((h = 0; h < hosts; ++h)); do echo "host h$h"; done
    } >"$work/nodes"
    note "$hosts hosts: network namespaces $TB-h0 ... $TB-h$((hosts - 1)) on bridge ${TB}b"
fi

mpi_prog=
if [[ " ${impls[*]} " == *" mpirun "* ]]; then
    [ "$install_mpi" = 1 ] && bench_install_mpi bench-startup
    if bench_have_mpi; then
        mpi_prog=$build/mpi_barrier_exit
        mpicc -O2 -o "$mpi_prog" tools/bench/mpi_barrier_exit.c || die "mpicc could not build mpi_barrier_exit"
    else
        note "skipping mpirun: Open MPI (mpirun, mpicc, mpi.h) is not installed (--install-mpi adds it)"
        impls=("${impls[@]/mpirun/}")
    fi
fi
mpi_root=()
if [ "$(id -u)" -eq 0 ]; then
    mpi_root=(--allow-run-as-root)
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi

now() { date +%s.%N; }

# one IMPL N REP: runs one job, appends its line to $out (- where a column does not apply):
#   rep impl pes seconds rss_kib_mean started registered pe0_started barrier first_end
one() {
    local impl=$1 n=$2 rep=$3 log=$work/log cmd=() t0 t1 rc=0 spread=() hostlist h
    if [ "$hosts" != 0 ]; then
        # Every launcher in host h0, under its name.
        cmd=(tests/hosts/in_host.sh "$TB" h0)
        spread=(++nodelist "$work/nodes" ++remote-shell "$(testbed_shell)" ++ppn $((n / hosts)) --fan-out "$fan_out")
        hostlist=
        for ((h = 0; h < hosts; ++h)); do hostlist+="${hostlist:+,}h$h:$((n / hosts))"; done
    fi
    case "$impl" in
    lazy) cmd+=("$run" --timings "${spread[@]}" -n "$n" "$prog" -rss -times) ;;
    eager) cmd+=("$run" --timings "${spread[@]}" -n "$n" "$prog" -rss -times ++set CONNECT=eager) ;;
    mpirun)
        if [ "$hosts" = 0 ]; then
            cmd+=(mpirun "${mpi_root[@]}" --oversubscribe -np "$n" "$mpi_prog" -rss -times)
        else
            cmd+=(mpirun "${mpi_root[@]}" --host "$hostlist" -np "$n" --map-by slot --bind-to none
                --mca plm_rsh_agent "$work/rsh-agent" --mca oob_tcp_if_include eth0
                --mca btl_tcp_if_include eth0 --mca orte_tmpdir_base "$work/ompi" "$mpi_prog" -rss -times)
        fi
        ;;
    esac
    t0=$(now)
    # Its own process group, so a run that times out takes every PE with it.
    setsid timeout -k 5 "$timeout_s" "${cmd[@]}" >"$log" 2>&1 </dev/null &
    launcher_pid=$!
    wait "$launcher_pid" || rc=$?
    launcher_pid=
    t1=$(now)
    if [ "$rc" -ne 0 ] || ! grep -q "barrier_exit: $n PEs passed the barrier" "$log"; then
        note "$impl on $n PEs (repetition $rep) failed (status $rc): $(grep -v 'peak RSS' "$log" | tail -3 | tr '\n' ' ')"
        return 0
    fi
    local rss launcher pe0
    rss=$(sed -n 's/.*barrier_exit: PE [0-9]* peak RSS \([0-9]*\) KiB.*/\1/p' "$log" |
        awk -v n="$n" '{ s += $1; c++ } END { if (c == n) printf "%.0f", s / c; else print "-" }')
    # started registered first_end, from the launcher (coverse only)
    # (remote starts are not timed: "started by (remote starts, not timed)", then -)
    launcher=$(sed -n 's/^coverse-run: timings: .* started by \([0-9.]* s\|(remote starts, not timed)\), registered by \([0-9.]*\) s; the first ended at \([0-9.]*\) s, .*/\1 \2 \3/p' "$log" |
        sed 's/^\([0-9.]*\) s /\1 /; s/^(remote starts, not timed) /- /')
    set -- ${launcher:-- - -}
    local started=$1 registered=$2 first_end=$3
    # PE 0's start-up done and barrier passed, against the launch
    pe0=$(sed -n 's/.*barrier_exit: PE 0 started at \([0-9.]*\), passed the barrier at \([0-9.]*\).*/\1 \2/p' "$log" |
        awk -v t0="$t0" '{ printf "%.3f %.3f", $1 - t0, $2 - t0 }')
    set -- ${pe0:-- -}
    echo "$rep $impl $n $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }') $rss $started $registered $1 $2 $first_end" >>"$out"
}

echo "# rep impl pes seconds rss_kib_mean started_s registered_s pe0_started_s barrier_s first_end_s" >"$out"
where="this host"
[ "$hosts" = 0 ] || where="$hosts namespace hosts"
note "$reps repetitions of ${impls[*]} on ${pes[*]} PEs on $where; raw results in $out"
for ((rep = 1; rep <= reps; ++rep)); do
    # Rotate the implementations each repetition, so none always runs on a warmer machine.
    order=()
    for ((k = 0; k < ${#impls[@]}; ++k)); do
        i=${impls[$(((k + rep - 1) % ${#impls[@]}))]}
        [ -n "$i" ] && order+=("$i")
    done
    for n in "${pes[@]}"; do
        for impl in "${order[@]}"; do
            [ "$impl" = eager ] && [ "$n" -gt "$max_eager" ] && continue
            [ "$impl" = mpirun ] && [ "$n" -gt "$max_mpirun" ] && continue
            one "$impl" "$n" "$rep"
        done
    done
    note "repetition $rep of $reps done"
done

# The tables: medians over the repetitions.
awk -v hosts="$hosts" '
    /^#/ { next }
    { key = $3 " " $2; seen[$3] = 1
      for (c = 4; c <= 10; ++c) col[key, c] = col[key, c] " " $c }
    function median(list,    a, b, n, m, i, j, t) {
        n = split(list, a, " "); m = 0
        for (i = 1; i <= n; ++i) if (a[i] != "-") b[++m] = a[i] + 0
        if (m == 0) return "-"
        for (i = 1; i <= m; ++i) for (j = i + 1; j <= m; ++j) if (b[j] < b[i]) { t = b[i]; b[i] = b[j]; b[j] = t }
        return (m % 2) ? b[(m + 1) / 2] : (b[m / 2] + b[m / 2 + 1]) / 2
    }
    function cell(key, c, scale,    v) {
        v = median(col[key, c])
        return v == "-" ? "-" : sprintf(scale ? "%.1f" : "%.2f", scale ? v / scale : v)
    }
    END {
        n = 0; for (p in seen) ps[++n] = p + 0
        for (i = 1; i <= n; ++i) for (j = i + 1; j <= n; ++j) if (ps[j] < ps[i]) { t = ps[i]; ps[i] = ps[j]; ps[j] = t }
        split("lazy eager mpirun", names, " ")
        print "Start, barrier, exit: seconds from the launch to the launcher'"'"'s exit, and peak RSS per process (MiB)" \
            (hosts > 0 ? "; PEs spread evenly over " hosts " namespace hosts" : "")
        print ""
        print "| PEs | coverse lazy s | coverse eager s | mpirun s | lazy MiB/PE | eager MiB/PE | mpirun MiB/PE |"
        print "|---:|---:|---:|---:|---:|---:|---:|"
        for (i = 1; i <= n; ++i) {
            line = "| " ps[i]
            for (k = 1; k <= 3; ++k) line = line " | " cell(ps[i] " " names[k], 4, 0)
            for (k = 1; k <= 3; ++k) line = line " | " cell(ps[i] " " names[k], 5, 1024)
            print line " |"
        }
        print ""
        print "Phases, seconds from the launch: every PE started and registered (coverse-run --timings), PE 0 done starting and past the barrier (the program), the first exit (coverse-run), the end"
        print ""
        print "| PEs | run | all started | all registered | PE 0 started | barrier passed | first exit | end |"
        print "|---:|---|---:|---:|---:|---:|---:|---:|"
        for (i = 1; i <= n; ++i)
            for (k = 1; k <= 3; ++k) {
                key = ps[i] " " names[k]
                if (median(col[key, 4]) == "-") continue
                print "| " ps[i] " | " names[k] " | " cell(key, 6, 0) " | " cell(key, 7, 0) " | " \
                    cell(key, 8, 0) " | " cell(key, 9, 0) " | " cell(key, 10, 0) " | " cell(key, 4, 0) " |"
            }
    }' "$out"
