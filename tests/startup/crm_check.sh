#!/bin/sh
# crm_check.sh: start-up through coverse-crm with real processes started by hand.
#   crm_check.sh <coverse-crm> <case> <PEs> <program> [args...]
# ok:        PEs processes register under one key; each exits 0, PE 0 prints "on <PEs> PEs ok"
# conflict:  one process asks for <PEs>, one for <PEs>+1 under the same key: both fail with
#            the PE count conflict, naming both counts
# two-jobs:  2x<PEs> processes of +p<PEs> under one key: one job runs, the other <PEs> are
#            refused because the key already started a job
# timeout:   <PEs>-1 processes of +p<PEs> (CRM --timeout 1): each fails saying how many came
# dead-port: a CRM address where nothing listens: the process fails naming the address
# stale:     what a crashed job of the same key left in /dev/shm (PE 0's and PE 1's doorbells,
#            a ring and an eager channel of PE 0) is replaced: the job runs, every pair on
#            the shm ring, and nothing of that key is left; then a doorbell a running process
#            holds: PE 0 says so, names the key, and the job runs with PE 0 over TCP
# abort:     abort_check: the last PE's CmiAbort message, every process exits non-zero (the
#            others stop because that PE's connections drop, naming it)
# The CRM listens on a free loopback port (never 7777). Every case checks that no process
# is left behind and stops the CRM by its PID.
set -u
crm=$1 case=$2 npes=$3
shift 3
name=$(basename "$1")
name=${name#legacy_}
dir=$(mktemp -d /tmp/coverse-crm-check.XXXXXX)
mark="coverse_crm_check_$$_$(date +%s%N)"
crm_pid=
pids=
cleanup() {
    for pid in $pids $crm_pid; do kill -9 "$pid" 2>/dev/null; done
    for pid in $pids $crm_pid; do wait "$pid" 2>/dev/null; done
    rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

fail() {
    echo "crm_check.sh: $case, $npes PEs: $1" >&2
    for f in "$dir"/*.out; do
        [ -e "$f" ] || continue
        echo "--- $(basename "$f"):" >&2
        cat "$f" >&2
    done
    exit 1
}

timeout_arg=30
[ "$case" = timeout ] && timeout_arg=1
if [ "$case" = dead-port ]; then
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
else
    "$crm" --port 0 --bind 127.0.0.1 --port-file "$dir/port" --timeout $timeout_arg -v \
        >"$dir/crm.out" 2>&1 &
    crm_pid=$!
    i=0
    until [ -s "$dir/port" ]; do
        kill -0 "$crm_pid" 2>/dev/null || fail "coverse-crm did not start"
        [ $i -lt 100 ] || fail "coverse-crm wrote no port file"
        sleep 0.1
        i=$((i + 1))
    done
    port=$(cat "$dir/port")
fi

# launch <tag> <PE count> <key> [args]: one process in the background, output in
# $dir/<tag>.out, marked so a process left behind is found.
launch() {
    tag=$1 count=$2 key=$3
    shift 3
    STARTUP_TEST_MARK=$mark timeout 60 "$prog" "$@" ++crm "127.0.0.1:$port" ++key "$key" "+p$count" \
        >"$dir/$tag.out" 2>&1 </dev/null &
    pids="$pids $!"
    eval "pid_$tag=$!"
}
prog=$1
shift
args="$*"

# wait_for <tag>: its exit status
wait_for() {
    eval "wait \$pid_$1"
}

# job <tag> <key> [args]: <PEs> processes <tag>0.. of one job (++node-context i), each
# waited for; one that exits non-zero fails the test.
job() {
    job_tag=$1 job_key=$2
    shift 2
    j=0
    while [ $j -lt "$npes" ]; do
        launch "$job_tag$j" "$npes" "$job_key" ++node-context $j "$@"
        j=$((j + 1))
    done
    j=0
    while [ $j -lt "$npes" ]; do
        wait_for "$job_tag$j" || fail "process $job_tag$j exited with $?"
        j=$((j + 1))
    done
}

case $case in
ok)
    # shellcheck disable=SC2086
    job pe job-ok $args
    cat "$dir"/pe*.out | grep -q "^$name: .* on $npes PEs ok" || fail "no '$name: ... on $npes PEs ok' line"
    ;;
conflict)
    # shellcheck disable=SC2086
    launch small "$npes" job-conflict $args
    # The second only once the first waits in its job, so the conflict is between these two.
    i=0
    until grep -q "job .*: $npes PEs, first from" "$dir/crm.out"; do
        [ $i -lt 100 ] || fail "the first process never registered"
        sleep 0.1
        i=$((i + 1))
    done
    # shellcheck disable=SC2086
    launch big "$((npes + 1))" job-conflict $args
    for t in small big; do
        wait_for $t && fail "the $t process exited 0 despite the conflict"
        grep -q "PE count conflict" "$dir/$t.out" || fail "the $t process did not report the conflict"
        grep -q "job of $npes PEs" "$dir/$t.out" && grep -q "for $((npes + 1)) PEs" "$dir/$t.out" ||
            fail "the $t process's error does not name both PE counts"
        grep -q "same +pN" "$dir/$t.out" || fail "the $t process's error does not say what to do"
    done
    ;;
two-jobs)
    i=0
    while [ $i -lt $((2 * npes)) ]; do
        # shellcheck disable=SC2086
        launch "pe$i" "$npes" job-shared $args
        i=$((i + 1))
    done
    ok=0 refused=0
    i=0
    while [ $i -lt $((2 * npes)) ]; do
        if wait_for "pe$i"; then
            ok=$((ok + 1))
        elif grep -q "already started a job of $npes PEs" "$dir/pe$i.out" &&
            grep -q "its own ++key" "$dir/pe$i.out"; then
            refused=$((refused + 1))
        else
            fail "process $i failed for another reason"
        fi
        i=$((i + 1))
    done
    [ $ok -eq "$npes" ] && [ $refused -eq "$npes" ] ||
        fail "$ok processes ran and $refused were refused; expected $npes and $npes"
    ;;
timeout)
    i=0
    while [ $i -lt $((npes - 1)) ]; do
        # shellcheck disable=SC2086
        launch "pe$i" "$npes" job-short $args
        i=$((i + 1))
    done
    i=0
    while [ $i -lt $((npes - 1)) ]; do
        wait_for "pe$i" && fail "process $i exited 0 in a job that never filled"
        grep -q "only $((npes - 1)) of the $npes PEs" "$dir/pe$i.out" ||
            fail "process $i's error does not say how many came"
        grep -q "CRM_TIMEOUT" "$dir/pe$i.out" || fail "process $i's error does not name CRM_TIMEOUT"
        i=$((i + 1))
    done
    ;;
dead-port)
    # shellcheck disable=SC2086
    launch lone "$npes" job-dead $args
    wait_for lone && fail "the process exited 0 without a CRM"
    grep -q "cannot reach the CRM at 127.0.0.1:$port" "$dir/lone.out" || fail "the error does not name the address"
    grep -q "start coverse-crm there" "$dir/lone.out" || fail "the error does not say what to do"
    ;;
stale)
    # The shared-memory names carry the job key: FNV-1a 64 of the ++key text.
    shm_of() {
        python3 -c 'import sys
h = 0xcbf29ce484222325
for c in sys.argv[1].encode():
    h = ((h ^ c) * 0x100000001b3) % 2**64
print("/dev/shm/coverse-%016x" % h)' "$1"
    }
    key="job-stale-$$-$(date +%s%N)"
    shm=$(shm_of "$key")
    key2="$key-held"
    shm2=$(shm_of "$key2")
    cleanup_stale() { rm -f "$shm"-* "$shm2"-*; }
    trap 'cleanup_stale; cleanup' EXIT
    mkfifo "$shm-0.bell" "$shm-1.bell" || fail "cannot make the stale doorbells"
    : >"$shm-0-from-1"
    : >"$shm-0-eager-0"
    # shellcheck disable=SC2086
    job pe "$key" ++verbose $args
    grep -q "stream by connection\|use TCP" "$dir"/pe*.out && fail "a pair fell back to TCP"
    [ "$(cat "$dir"/pe*.out | grep -c "same host, stream by shm ring")" -ge 2 ] ||
        fail "no pair on the shm ring"
    left_files=$(ls "$shm"-* 2>/dev/null)
    [ -z "$left_files" ] || fail "files of the key left: $left_files"
    # A doorbell a running process holds open: not replaced, and said (another key: the
    # CRM refuses a second job under one key).
    mkfifo "$shm2-0.bell" || fail "cannot make the held doorbell"
    sleep 60 <>"$shm2-0.bell" &
    holder=$!
    pids="$pids $holder"
    # shellcheck disable=SC2086
    job held "$key2" $args
    grep -q "doorbell FIFO $shm2-0.bell belongs to a running process: another job with the same key" "$dir/held0.out" ||
        fail "PE 0 did not say that a running process holds its doorbell"
    grep -q "messages to and from this PE use TCP" "$dir/held0.out" || fail "PE 0 did not say it uses TCP"
    kill "$holder"
    wait "$holder" 2>/dev/null
    [ -p "$shm2-0.bell" ] || fail "the held doorbell was removed"
    ;;
abort)
    i=0
    while [ $i -lt "$npes" ]; do
        # shellcheck disable=SC2086
        launch "pe$i" "$npes" job-abort ++node-context $i $args
        i=$((i + 1))
    done
    last=$((npes - 1))
    i=0
    while [ $i -lt "$npes" ]; do
        wait_for "pe$i" && fail "process $i exited 0 in a job that aborted"
        i=$((i + 1))
    done
    grep -q "abort_check: deliberate abort on PE $last of $npes" "$dir/pe$last.out" ||
        fail "PE $last did not print its abort message"
    i=0
    while [ $i -lt "$last" ]; do
        grep -q "lost PE $last" "$dir/pe$i.out" || fail "PE $i did not name the PE it lost"
        i=$((i + 1))
    done
    ;;
*)
    echo "crm_check.sh: unknown case '$case'" >&2
    exit 2
    ;;
esac

if [ -n "$crm_pid" ]; then
    kill -0 "$crm_pid" 2>/dev/null || fail "coverse-crm died during the test"
    kill "$crm_pid"
    wait "$crm_pid"
    crm_status=$?
    crm_pid=
    [ $crm_status -eq 0 ] || fail "coverse-crm exited with $crm_status on SIGTERM"
fi
pids=
left=$(grep -l -s -a "STARTUP_TEST_MARK=$mark" /proc/[0-9]*/environ 2>/dev/null |
    grep -v "^/proc/$$/" | sed 's#/proc/\([0-9]*\)/environ#\1#' | tr '\n' ' ')
[ -z "$left" ] || fail "processes left behind: $left"
echo "crm_check.sh: $case with $npes PEs ok"
