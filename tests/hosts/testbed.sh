# shellcheck shell=bash
# testbed.sh: hosts on one machine for the multi-host tests, sourced by each test script.
# A host is a network namespace with one veth interface (eth0) on a bridge the test makes;
# every name carries the test's PID, so tests run side by side (ctest -j, other worktrees).
# The bridge has no address and the namespaces' subnets live only inside them, so two tests
# may use the same subnet without meeting. Everything is removed on exit, also on failure
# (trap): first the processes left in each namespace (by their own PIDs), then the
# namespaces, then the bridge. Where namespaces cannot be made the test exits 77 (skip).
#
#   testbed_init NAME        unique prefix; skips (77) when namespaces cannot be made
#   testbed_host H ADDR/LEN [BRIDGE [GATEWAY]]
#                            namespace "$TB-H" with eth0 ADDR on the bridge ("b", the
#                            first; testbed_bridge makes more), lo up, and a default route
#                            via GATEWAY when given
#   testbed_bridge SUFFIX    another bridge, "$TB$SUFFIX"
#   testbed_link H IF ADDR/LEN BRIDGE
#                            one more interface IF in host H, on BRIDGE
#   testbed_exec H CMD...    runs CMD in host H
#   testbed_shell            the ++remote-shell value: "hosts_shell.sh PREFIX"
#   testbed_names H=ADDR...  the names H resolve to ADDR in every host of the list, as on a
#                            cluster: /etc/netns/$TB-H/hosts, which `ip netns exec` mounts
#                            over /etc/hosts (removed on exit, /etc/netns too if we made it)
#   testbed_rsh_agent FILE   writes FILE, an rsh agent for Open MPI's plm_rsh_agent:
#                            `FILE HOST WORDS...` runs the words with /bin/sh in host HOST
#                            under the host name HOST, as ssh would (in_host.sh)
#   testbed_exec_named H CMD...
#                            runs CMD in host H under the host name H: mpirun there
#                            (in_host.sh, which a caller runs itself where CMD's PID must
#                            be its $!, or under timeout)
#   testbed_left             prints the PIDs still running in any of our namespaces
set -u

TB=""
TB_HOSTS=()
TB_LINKS=()
TB_BRIDGES=()
TB_NETNS_DIRS=()
TB_DIR=""
TB_HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

# Every step goes on when one fails (a veth is gone with its namespace already), also
# under a caller's `set -e`, which a trap runs with.
testbed_cleanup() {
    local h pid l
    for h in "${TB_HOSTS[@]}"; do
        for pid in $(ip netns pids "$TB-$h" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null || :; done
    done
    for h in "${TB_HOSTS[@]}"; do ip netns del "$TB-$h" 2>/dev/null || :; done
    for l in "${TB_LINKS[@]}"; do ip link del "$l" 2>/dev/null || :; done
    for l in "${TB_BRIDGES[@]}"; do ip link del "$TB$l" 2>/dev/null || :; done
    for l in "${TB_NETNS_DIRS[@]}"; do rm -rf "$l" || :; done
    [ -z "$TB_DIR" ] || rm -rf "$TB_DIR" || :
    return 0
}

testbed_skip() {
    echo "SKIP: $*" >&2
    testbed_cleanup
    exit 77
}

testbed_init() {
    command -v ip >/dev/null || testbed_skip "no 'ip' command (iproute2) to make network namespaces"
    # Interface names have at most 15 characters: "cv" + 6 digits of our PID + a suffix.
    TB="cv$(printf '%06d' $(($$ % 1000000)))"
    trap testbed_cleanup EXIT
    trap 'exit 130' INT TERM
    TB_DIR="$(mktemp -d "/tmp/coverse-$1.XXXXXX")"
    if ! ip netns add "$TB-probe" 2>"$TB_DIR/err"; then
        testbed_skip "cannot make a network namespace ($(cat "$TB_DIR/err")); run as root"
    fi
    ip netns del "$TB-probe"
    ip link add "${TB}b" type bridge 2>"$TB_DIR/err" ||
        testbed_skip "cannot make a bridge ($(cat "$TB_DIR/err"))"
    TB_BRIDGES+=(b)
    ip link set "${TB}b" up
}

testbed_bridge() {
    ip link add "$TB$1" type bridge || return 1
    TB_BRIDGES+=("$1")
    ip link set "$TB$1" up
}

testbed_link() {
    local h="$1" ifname="$2" addr="$3" bridge="$4" n="${#TB_LINKS[@]}"
    ip link add "${TB}v$n" type veth peer name "${TB}p$n" || return 1
    TB_LINKS+=("${TB}v$n")
    ip link set "${TB}p$n" netns "$TB-$h" || return 1
    ip -n "$TB-$h" link set "${TB}p$n" name "$ifname" || return 1
    ip -n "$TB-$h" addr add "$addr" dev "$ifname" || return 1
    ip -n "$TB-$h" link set "$ifname" up || return 1
    ip link set "${TB}v$n" master "$TB$bridge" || return 1
    ip link set "${TB}v$n" up || return 1
}

testbed_host() {
    local h="$1" addr="$2" bridge="${3:-b}" gateway="${4:-}"
    ip netns add "$TB-$h" || return 1
    TB_HOSTS+=("$h")
    ip -n "$TB-$h" link set lo up || return 1
    testbed_link "$h" eth0 "$addr" "$bridge" || return 1
    if [ -n "$gateway" ]; then ip -n "$TB-$h" route add default via "$gateway" || return 1; fi
}

testbed_exec() {
    local h="$1"
    shift
    ip netns exec "$TB-$h" "$@"
}

testbed_shell() {
    echo "$TB_HERE/hosts_shell.sh $TB"
}

testbed_names() {
    local entry h e
    # /etc/netns itself goes too if we made it; the hosts' folders go first.
    [ -d /etc/netns ] || TB_NETNS_DIRS+=(/etc/netns)
    for entry in "$@"; do
        h="${entry%%=*}"
        TB_NETNS_DIRS=("/etc/netns/$TB-$h" "${TB_NETNS_DIRS[@]}")
        mkdir -p "/etc/netns/$TB-$h" || return 1
        {
            echo "127.0.0.1 localhost"
            for e in "$@"; do echo "${e#*=} ${e%%=*}"; done
        } >"/etc/netns/$TB-$h/hosts" || return 1
    done
}

# mpirun runs `AGENT HOST orted ARGS...` with the words quoted for a remote shell, as ssh
# would join and hand them to one; the agent runs them with /bin/sh in host HOST, named HOST
# (in_host.sh), as mpirun itself runs in testbed_exec_named.
testbed_rsh_agent() {
    printf '#!/bin/sh\nhost="$1"\nshift\nexec "%s" "%s" "$host" /bin/sh -c "$*"\n' \
        "$TB_HERE/in_host.sh" "$TB" >"$1" || return 1
    chmod +x "$1"
}

testbed_exec_named() {
    "$TB_HERE/in_host.sh" "$TB" "$@"
}

testbed_left() {
    local h
    for h in "${TB_HOSTS[@]}"; do ip netns pids "$TB-$h" 2>/dev/null; done
}

# fail MESSAGE: print it with the log and exit 1 (the trap cleans up).
fail() {
    echo "FAIL: $*" >&2
    [ -n "${LOG:-}" ] && [ -f "$LOG" ] && sed 's/^/  | /' "$LOG" >&2
    exit 1
}
