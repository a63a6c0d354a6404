#!/bin/bash
# multi_host.sh: coverse-run across hosts on the test bed (testbed.sh: one network namespace
# per host on a bridge, hosts_shell.sh as ++remote-shell). The launcher runs in host h0.
#   multi_host.sh SCENARIO SUBNET COVERSE_RUN LEGACY_DIR HOSTS_DIR [COVERSE_CRM]
# SCENARIO:
#   2x2, 3x2     H hosts x 2 PEs: ring, reduction, large_messages and topology pass; the
#                pairs each program talks over connect (CONNECT=lazy), no others; every such
#                pair on one host takes the shm ring + cma, every other pair the connection +
#                tcp (from ++verbose), and each PE listens on its host's address, the
#                launcher on h0's
#   host_id      two hosts given one HOST_ID: one physical node, the same-host path
#                between them (shared memory crosses network namespaces)
#   unreachable  host h1 prefers an address the others cannot route to: the job stops
#                with an error naming the PE, its address and NETWORK_INTERFACE
#   bad_host     a nodelist host with no namespace: the remote shell exits 255, is tried
#                3 times, then the error names the host; nothing is left running
#   bad_shell    a remote shell that exits 1, one that does not exist: errors, statuses
#   crm_2x2      no launcher: coverse-crm listens on h0's address and 4 processes started by
#                hand, 2 in each host, register with it; the same checks as 2x2 (each PE
#                on its host's address, same-host pairs on the ring, the others on tcp)
#   crm_loopback the same 4 processes, all in h0, with the CRM on 127.0.0.1: a one-host job
#                listens on loopback only
# SUBNET is the third octet of the scenario's 10.99.SUBNET.0/24 (one range per test).
set -u
scenario="$1"
subnet="$2"
run="$3"
legacy="$4"
here="$5"
crm="${6:-}"
. "$(dirname "$0")/testbed.sh"
. "$(dirname "$0")/paths.sh"
testbed_init "hosts-$scenario"
LOG="$TB_DIR/log"

make_hosts() {
    local i
    for ((i = 0; i < $1; ++i)); do
        testbed_host "h$i" "$(addr_of "h$i")/24" || fail "could not make host h$i"
    done
    {
        echo "group main"
        for ((i = 0; i < $1; ++i)); do echo "host h$i"; done
    } >"$TB_DIR/nodes"
}

# job PES PPN PROGRAM ARGS...: runs the job from h0 with ++verbose; status in $status.
job() {
    local pes="$1" ppn="$2"
    shift 2
    testbed_exec h0 "$run" ++verbose ++nodelist "$TB_DIR/nodes" ++remote-shell "$(testbed_shell)" \
        ++ppn "$ppn" +p"$pes" --timeout 30 "$@" >"$LOG" 2>&1
    status=$?
}

# crm_job BIND HOSTS... -- PROGRAM ARGS...: a CRM in h0 on BIND (a free port), then one
# process per HOSTS word (the host it runs in), registering by hand under one key with
# ++node-context i and ++verbose; waits for each, stops the CRM by its PID. The processes'
# output goes to $LOG, PE by PE; status is the first non-zero exit status (0 when all ended
# well).
crm_job() {
    local bind="$1" i=0 h pid port
    local -a where=() pids=()
    shift
    while [ "$1" != -- ]; do where+=("$1"); shift; done
    shift
    rm -f "$TB_DIR/crm.port"
    # ip netns exec, not testbed_exec: a backgrounded function is a subshell, and $! must be
    # the process itself (ip netns exec execs it) to stop it by its PID.
    ip netns exec "$TB-h0" "$crm" --bind "$bind" --port 0 --port-file "$TB_DIR/crm.port" --timeout 30 \
        >"$TB_DIR/crm.out" 2>&1 &
    local crm_pid=$!
    until [ -s "$TB_DIR/crm.port" ]; do
        kill -0 "$crm_pid" 2>/dev/null || fail "coverse-crm did not start: $(cat "$TB_DIR/crm.out")"
        [ $i -lt 100 ] || fail "coverse-crm wrote no port file"
        sleep 0.1
        i=$((i + 1))
    done
    port="$(cat "$TB_DIR/crm.port")"
    i=0
    for h in "${where[@]}"; do
        ip netns exec "$TB-$h" timeout 60 "$@" ++verbose ++crm "$bind:$port" ++key "crm-$TB" \
            ++node-context "$i" +p"${#where[@]}" >"$TB_DIR/pe$i.out" 2>&1 </dev/null &
        pids+=($!)
        i=$((i + 1))
    done
    status=0
    for pid in "${pids[@]}"; do
        wait "$pid"
        h=$?
        [ "$status" = 0 ] && status=$h
    done
    kill "$crm_pid" 2>/dev/null
    wait "$crm_pid" 2>/dev/null
    for ((i = 0; i < ${#where[@]}; ++i)); do cat "$TB_DIR/pe$i.out"; done >"$LOG"
}

# check_job_paths PES PPN KIND...: check_paths (paths.sh) for PEs in blocks of PPN per host
# (h0 first), and the launcher listened on h0's address.
check_job_paths() {
    local pes="$1" ppn="$2" i
    shift 2
    # shellcheck disable=SC2034 # read by check_paths (paths.sh)
    HOST_OF=()
    # shellcheck disable=SC2034
    for ((i = 0; i < pes; ++i)); do HOST_OF[i]="h$((i / ppn))"; done
    check_paths "$pes" "$@"
    [ -n "$crm" ] || grep -q "control socket 10.99.$subnet.1:[0-9]*, eth0" "$LOG" ||
        fail "the launcher did not listen on h0's address"
}

case "$scenario" in
2x2 | 3x2)
    hosts="${scenario%x2}"
    pes=$((hosts * 2))
    make_hosts "$hosts"
    job "$pes" 2 "$legacy/legacy_ring" -laps 20
    expect_ok ring "ring: 20 laps on $pes PEs ok"
    check_job_paths "$pes" 2 ring tree
    job "$pes" 2 "$here/hosts_topology" -hosts "$hosts" -ppn 2
    expect_ok topology "topology: ok on $pes PEs, $hosts hosts"
    job "$pes" 2 "$legacy/legacy_reduction"
    [ "$status" = 0 ] || fail "reduction: exit status $status"
    job "$pes" 2 "$legacy/legacy_large_messages" -flag "$TB_DIR/large"
    [ "$status" = 0 ] || fail "large_messages: exit status $status"
    check_job_paths "$pes" 2 ring star tree
    nothing_left
    ;;
host_id)
    make_hosts 2
    # One HOST_ID on both namespaces: coverse takes them for one host.
    export HOSTS_SHELL_ENV_h0="COVERSE_HOST_ID=shared-box" HOSTS_SHELL_ENV_h1="COVERSE_HOST_ID=shared-box"
    job 4 2 "$here/hosts_topology" -hosts 1 -ppn 4
    expect_ok topology "topology: ok on 4 PEs, 1 hosts"
    grep -qx "coverse: PE 0 -> PE 3: same host, stream by shm ring, one-sided by cma; connected on first use, dialed by PE [03]" "$LOG" ||
        fail "PEs of one HOST_ID in two namespaces did not take the same-host path"
    grep -q "host identity HOST_ID=shared-box (COVERSE_HOST_ID)" "$LOG" ||
        fail "++verbose did not say where the host identity came from"
    job 4 2 "$legacy/legacy_ring" -laps 20
    expect_ok ring "ring: 20 laps on 4 PEs ok"
    nothing_left
    ;;
unreachable)
    make_hosts 3
    # h1 also has an address on a subnet nobody else routes to, and prefers it.
    ip -n "$TB-h1" addr add "10.98.$subnet.2/24" dev eth0 || fail "could not add an address"
    # PE 0 dials PE 1 (its first message: the token) and gives up after 3 s; PE 1 itself
    # waits longer (its COVERSE_ beats the job's CMI_VMI_ spelling), so PE 0's report is the
    # one that ends the job.
    export HOSTS_SHELL_ENV_h1="COVERSE_NETWORK_INTERFACE=10.98.$subnet.0/24 COVERSE_CONNECTION_TIMEOUT=60"
    CMI_VMI_CONNECTION_TIMEOUT=3 testbed_exec h0 "$run" ++nodelist "$TB_DIR/nodes" \
        ++remote-shell "$(testbed_shell)" ++ppn 1 +p3 --timeout 30 "$legacy/legacy_ring" >"$LOG" 2>&1
    status=$?
    [ "$status" != 0 ] || fail "a job with an unreachable PE exited 0"
    grep -q "PE 1 (10.98.$subnet.2:[0-9]*): we could not connect to it (last attempt: Network is unreachable)" "$LOG" ||
        fail "the error does not name PE 1, its address and why"
    grep -q "each host picks its PEs' data addresses by NETWORK_INTERFACE (on this host: NETWORK_INTERFACE (unset)" "$LOG" ||
        fail "the error does not name the interface setting"
    nothing_left
    ;;
bad_host)
    make_hosts 2
    printf 'group main\nhost h0\nhost nosuch\n' >"$TB_DIR/nodes"
    testbed_exec h0 "$run" ++verbose ++nodelist "$TB_DIR/nodes" ++remote-shell "$(testbed_shell)" \
        +p2 --timeout 30 "$legacy/legacy_ring" >"$LOG" 2>&1
    status=$?
    [ "$status" = 255 ] || fail "unknown host: exit status $status, expected 255"
    [ "$(grep -c "no host 'nosuch'" "$LOG")" = 3 ] || fail "the remote shell was not tried 3 times"
    grep -q "trying again in 0.250 s (attempt 2 of 3)" "$LOG" || fail "no first backoff"
    grep -q "trying again in 0.500 s (attempt 3 of 3)" "$LOG" || fail "the backoff did not double"
    grep -q "PE 1 of 2 (pid [0-9]*) on host 'nosuch' ($TB_DIR/nodes:3) exited with status 255 .*after 3 attempts: the remote shell could not reach the host" "$LOG" ||
        fail "the error does not name the host and the cause"
    nothing_left
    ;;
bad_shell)
    make_hosts 2
    testbed_exec h0 "$run" ++nodelist "$TB_DIR/nodes" ++remote-shell false +p2 --timeout 30 \
        "$legacy/legacy_ring" >"$LOG" 2>&1
    status=$?
    [ "$status" = 1 ] || fail "remote shell 'false': exit status $status, expected 1"
    # Whichever PE ends first names its host; the other one is then stopped.
    grep -q "on host 'h[01]' ($TB_DIR/nodes:[23]) exited with status 1 before registering" "$LOG" ||
        fail "remote shell 'false': the error does not name the host"
    testbed_exec h0 "$run" ++nodelist "$TB_DIR/nodes" ++remote-shell /nonexistent/rsh +p2 \
        "$legacy/legacy_ring" >"$LOG" 2>&1
    status=$?
    [ "$status" = 127 ] || fail "a missing remote shell: exit status $status, expected 127"
    grep -q "cannot run the remote shell '/nonexistent/rsh' for PE 0 on host 'h0'" "$LOG" ||
        fail "a missing remote shell: no error naming it"
    nothing_left
    ;;
crm_2x2)
    [ -n "$crm" ] || fail "crm_2x2 needs the coverse-crm path"
    make_hosts 2
    crm_job "10.99.$subnet.1" h0 h0 h1 h1 -- "$legacy/legacy_ring" -laps 20
    expect_ok ring "ring: 20 laps on 4 PEs ok"
    check_job_paths 4 2 ring tree
    grep -q "^coverse: PE 2 listens on 10.99.$subnet.2:[0-9]* (eth0, the interface that reaches the launcher or the CRM; the CRM is on 10.99.$subnet.1)" "$LOG" ||
        fail "PE 2 does not say it chose the interface on the route to the CRM"
    crm_job "10.99.$subnet.1" h0 h0 h1 h1 -- "$here/hosts_topology" -hosts 2 -ppn 2
    expect_ok topology "topology: ok on 4 PEs, 2 hosts"
    crm_job "10.99.$subnet.1" h0 h0 h1 h1 -- "$legacy/legacy_large_messages" -flag "$TB_DIR/large"
    [ "$status" = 0 ] || fail "large_messages: exit status $status"
    check_job_paths 4 2 ring star tree
    nothing_left
    ;;
crm_loopback)
    [ -n "$crm" ] || fail "crm_loopback needs the coverse-crm path"
    make_hosts 1
    crm_job 127.0.0.1 h0 h0 h0 h0 -- "$here/hosts_topology" -hosts 1 -ppn 4
    expect_ok topology "topology: ok on 4 PEs, 1 hosts"
    [ "$(grep -c "^coverse: PE [0-3] listens on 127.0.0.1:[0-9]* (loopback: the CRM is on loopback)" "$LOG")" = 4 ] ||
        fail "a one-host CRM job did not listen on loopback only"
    nothing_left
    ;;
*)
    fail "unknown scenario '$scenario'"
    ;;
esac
echo "multi_host $scenario: ok"
