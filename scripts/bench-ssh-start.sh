#!/usr/bin/env bash
# The cost of starting a process through ssh on this machine (t_ssh in docs/scale.md), from
# a private sshd of the script's own on a loopback port: its config, host key, client key
# and authorized_keys in a temp dir (never /etc/ssh or the user's ~/.ssh), key
# authentication only, stopped by its PID at the end, also on failure or Ctrl-C.
#   1. COUNT sequential `ssh -p PORT 127.0.0.1 true` (after one warm-up): a new connection,
#      key exchange, authentication and a remote command each; median, mean and p90 in ms.
#      sshd runs the command with the user's login shell, and bash reads ~/.bashrc when sshd
#      starts it, so this includes whatever the user's rc does; the same COUNT again with
#      SHLVL=1 sent along (bash then takes itself for a nested shell and skips the rc) gives
#      ssh's own cost, and once more with the key exchange curve25519-sha256 instead of
#      OpenSSH 9's default sntrup761x25519 (post-quantum, costly in CPU at both ends). Each
#      line also gives the ssh client's own CPU time per command (the launcher's host pays
#      it for every remote start).
#   2. coverse-run starting the trivial program (tests/startup/barrier_exit.c) on PES PEs
#      through that ssh (`++nodelist` with host 127.0.0.1, `++remote-shell "ssh -p PORT
#      ..."`) with --fan-out 1 (one remote start at a time: the per-start cost in series)
#      and with the default fan-out 32, beside the same job started locally (`-n PES`,
#      fork and exec); medians of REPS runs, and the per-PE cost of the serial ssh start.
# Needs sshd (Debian's openssh-server; --install adds it with apt-get) and the user's login
# shell to run commands (root's does). sshd's own start is not timed.
#
# Usage: scripts/bench-ssh-start.sh [options]
#   --count N          sequential ssh commands to time (default 100)
#   --pes N            PEs of the coverse-run jobs (default 16; 0 skips part 2)
#   --reps R           repetitions of each coverse-run job (default 3)
#   --port P           the sshd's loopback port (default: a free one)
#   --build-dir DIR    the build to use (default build/release, built with its preset)
#   --no-build         use the binaries as they are
#   --install          install openssh-server and openssh-client (apt-get) when missing
#   -h, --help         this text
# Example: scripts/bench-ssh-start.sh --count 200 --pes 32
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib-bench.sh

bench_cli bench-ssh-start

count=100
pes=16
reps=3
port=
build=build/release
do_build=1
install=0
while [ $# -gt 0 ]; do
    case "$1" in
    --count) count=${2:?--count needs a number}; shift 2 ;;
    --pes) pes=${2:?--pes needs a number}; shift 2 ;;
    --reps) reps=${2:?--reps needs a number}; shift 2 ;;
    --port) port=${2:?--port needs a port}; shift 2 ;;
    --build-dir) build=${2:?--build-dir needs a directory}; shift 2 ;;
    --no-build) do_build=0; shift ;;
    --install) install=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
    esac
done
for n in $count $reps; do
    [[ $n =~ ^[1-9][0-9]*$ ]] || die "'$n' is not a positive whole number (see --help)"
done
[[ $pes =~ ^[0-9]+$ ]] && [ "$pes" -le 4096 ] || die "--pes: '$pes' is not a PE count of 0 to 4096"
[ -z "$port" ] || { [[ $port =~ ^[1-9][0-9]*$ ]] && [ "$port" -le 65535 ]; } ||
    die "--port: '$port' is not a port number"

if [ "$install" = 1 ] && ! { [ -x /usr/sbin/sshd ] && command -v ssh >/dev/null; }; then
    note "installing openssh-server openssh-client"
    sudo=
    [ "$(id -u)" -ne 0 ] && sudo=sudo
    $sudo apt-get update -qq
    # Debian's package would start a system sshd where services start; ours is private.
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
        openssh-server openssh-client >/dev/null
fi
[ -x /usr/sbin/sshd ] || die "no /usr/sbin/sshd: install openssh-server (or give --install)"
for tool in ssh ssh-keygen; do
    command -v "$tool" >/dev/null || die "no $tool: install openssh-client (or give --install)"
done

if [ "$pes" -gt 0 ]; then
    [ "$do_build" = 1 ] && { bench_build "$build" coverse-run startup_barrier_exit >&2 || die "the build failed"; }
    run=$build/tools/run/coverse-run
    prog=$(cd "$build" && pwd)/tests/startup/startup_barrier_exit
    [ -x "$run" ] || die "no $run (build the release preset, or give --build-dir)"
    [ -x "$prog" ] || die "no $prog (build the target startup_barrier_exit)"
fi

work=$(mktemp -d /tmp/coverse-ssh.XXXXXX)
sshd_pid=
job_pid=
made_run_sshd=0
cleanup() {
    [ -n "$job_pid" ] && kill -- "-$job_pid" 2>/dev/null
    if [ -n "$sshd_pid" ]; then
        kill "$sshd_pid" 2>/dev/null
        wait "$sshd_pid" 2>/dev/null
        # Its per-connection processes outlive it for a moment: the ones that still hold a
        # connection on our port, by their PIDs.
        local i pids
        for ((i = 0; i < 50; ++i)); do
            pids=$(ss -Htnp "( sport = :$port )" 2>/dev/null | grep -o 'pid=[0-9]*' | cut -d= -f2 | sort -u)
            [ -z "$pids" ] && break
            # shellcheck disable=SC2086 # one PID a word
            kill $pids 2>/dev/null
            sleep 0.1
        done
    fi
    [ "$made_run_sshd" = 1 ] && rmdir /run/sshd 2>/dev/null
    rm -rf "$work"
    return 0
}
trap 'set +e; cleanup' EXIT
trap 'exit 130' INT TERM

# sshd wants its privilege-separation directory; made here (and removed) only if missing.
if [ ! -d /run/sshd ]; then
    mkdir -m 0755 /run/sshd || die "cannot make /run/sshd (sshd's privilege-separation directory); run as root"
    made_run_sshd=1
fi
ssh-keygen -q -t ed25519 -N '' -f "$work/host_key" || die "ssh-keygen failed"
ssh-keygen -q -t ed25519 -N '' -f "$work/client_key" || die "ssh-keygen failed"
cp "$work/client_key.pub" "$work/authorized_keys"
chmod 600 "$work/authorized_keys"
if [ -z "$port" ]; then
    # A free port: ask the kernel for one, then give it to sshd (a race nobody else runs).
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
fi
cat >"$work/sshd_config" <<CONF
Port $port
ListenAddress 127.0.0.1
HostKey $work/host_key
PidFile $work/sshd.pid
AuthorizedKeysFile $work/authorized_keys
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
AcceptEnv SHLVL
UsePAM no
StrictModes no
# The default 10:30:100 drops connections at random once 10 are unauthenticated at once:
# coverse-run's default fan-out (32) starts more than that (docs/hosts.md).
MaxStartups 200
LogLevel ERROR
CONF
/usr/sbin/sshd -D -e -f "$work/sshd_config" 2>"$work/sshd.log" &
sshd_pid=$!
ssh_cmd=(ssh -F /dev/null -p "$port" -i "$work/client_key" -o BatchMode=yes -o IdentitiesOnly=yes
    -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR)
i=0
until "${ssh_cmd[@]}" 127.0.0.1 true 2>"$work/ssh.err"; do
    kill -0 "$sshd_pid" 2>/dev/null || die "sshd ended at start-up: $(cat "$work/sshd.log")"
    [ $i -lt 50 ] || die "no ssh connection to the private sshd on port $port in 5 s: $(cat "$work/ssh.err") $(cat "$work/sshd.log")"
    sleep 0.1
    i=$((i + 1))
done
note "private sshd (pid $sshd_pid) on 127.0.0.1:$port; $(ssh -V 2>&1)"

now() { date +%s.%N; }
# stats: median, mean and p90 of the numbers on stdin (seconds), in ms
stats() {
    sort -n | awk '{ v[++n] = $1; s += $1 }
        END { m = (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
              p = v[int(0.9 * n + 0.999)]
              printf "median %.1f ms, mean %.1f ms, p90 %.1f ms over %d", m * 1000, s / n * 1000, p * 1000, n }'
}

# children_cpu: the user + system CPU seconds of this shell's waited-for children so far
# (`times` runs in this shell, not in a command substitution's subshell)
children_cpu() {
    times >"$work/times.now"
    sed -n 2p "$work/times.now" | awk '{ for (i = 1; i <= 2; ++i) { split($i, a, /[ms]/); c += a[1] * 60 + a[2] } } END { printf "%.3f", c }'
}
# series FILE SSH-OPTIONS...: COUNT ssh commands in a row, each one's seconds into FILE; the
# client's CPU per command, in ms, into FILE.cpu
series() {
    local file=$1 i t0 t1
    shift
    : >"$file"
    children_cpu >"$file.cpu0"
    for ((i = 0; i < count; ++i)); do
        t0=$(now)
        "${ssh_cmd[@]}" "$@" 127.0.0.1 true || die "ssh $i failed"
        t1=$(now)
        awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.6f\n", b - a }' >>"$file"
    done
    # (the timing's date and awk are children too: about 2 ms a command, left in)
    children_cpu >"$file.cpu1"
    awk -v a="$(cat "$file.cpu0")" -v b="$(cat "$file.cpu1")" -v n="$count" 'BEGIN { printf "%.0f", (b - a) / n * 1000 }' >"$file.cpu"
}
series "$work/times"
echo "ssh -p $port 127.0.0.1 true, $count in a row: $(stats <"$work/times"); client CPU $(cat "$work/times.cpu") ms each"
series "$work/times-norc" -o SetEnv=SHLVL=1
echo "the same without the login shell's rc (SHLVL=1): $(stats <"$work/times-norc"); client CPU $(cat "$work/times-norc.cpu") ms each"
series "$work/times-kex" -o SetEnv=SHLVL=1 -o KexAlgorithms=curve25519-sha256
echo "the same with KexAlgorithms=curve25519-sha256: $(stats <"$work/times-kex"); client CPU $(cat "$work/times-kex.cpu") ms each"

[ "$pes" -gt 0 ] || exit 0

printf 'group main\nhost 127.0.0.1\n' >"$work/nodes"
# job ARGS...: the wall time of one coverse-run job (seconds) on stdout; fails on an error.
job() {
    local t0 t1 rc=0
    t0=$(now)
    setsid timeout -k 5 300 "$run" "$@" "$prog" >"$work/job.log" 2>&1 </dev/null &
    job_pid=$!
    wait "$job_pid" || rc=$?
    job_pid=
    t1=$(now)
    if [ "$rc" -ne 0 ] || ! grep -q "barrier_exit: $pes PEs passed the barrier" "$work/job.log"; then
        die "coverse-run $* failed (status $rc): $(tail -5 "$work/job.log")"
    fi
    awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.6f\n", b - a }'
}
: >"$work/local" && : >"$work/serial" && : >"$work/fan32"
for ((r = 0; r < reps; ++r)); do
    job -n "$pes" >>"$work/local"
    job ++nodelist "$work/nodes" ++remote-shell "${ssh_cmd[*]}" --fan-out 1 +p"$pes" >>"$work/serial"
    job ++nodelist "$work/nodes" ++remote-shell "${ssh_cmd[*]}" --fan-out 32 +p"$pes" >>"$work/fan32"
done
med() { sort -n "$1" | awk '{ v[++n] = $1 } END { printf "%.3f", (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2 }'; }
echo "coverse-run, $pes PEs, medians of $reps: local (-n $pes) $(med "$work/local") s;" \
    "through ssh --fan-out 1 $(med "$work/serial") s;" \
    "through ssh --fan-out 32 $(med "$work/fan32") s"
awk -v l="$(med "$work/local")" -v s="$(med "$work/serial")" -v p="$pes" \
    'BEGIN { printf "a serial remote start costs %.1f ms per PE more than a local one ((%.3f - %.3f) s / %d)\n", (s - l) / p * 1000, s, l, p }'
