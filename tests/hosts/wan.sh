#!/bin/bash
# wan.sh: clusters across a WAN. Two groups of hosts (namespaces a0, a1 on one bridge, b0, b1
# on another) reach each other only through a router namespace whose delay_router holds
# every packet between the groups DELAY ms (policy routing sends what arrives from either
# group's link into its TUN device). A job of 4 hosts x 2 PEs probes latencies at start-up
# (PROBE_CLUSTERS=1) with WAN_LATENCY=1000 µs: CmiGetCluster must put PEs 0-3 (group a) in
# one cluster and PEs 4-7 (group b) in the other — clusters -block 4 checks it on every PE.
#   wan.sh SUBNET COVERSE_RUN HOSTS_DIR DELAY_ROUTER [DELAY_MS]
set -u
subnet="$1"
run="$2"
here="$3"
router="$4"
delay="${5:-2}"
. "$(dirname "$0")/testbed.sh"
testbed_init "hosts-wan"
LOG="$TB_DIR/log"
[ -c /dev/net/tun ] || testbed_skip "no /dev/net/tun for the delay router"
a="10.97.$subnet"
b="10.96.$subnet"

testbed_bridge a || fail "bridge a"
testbed_bridge z || fail "bridge z"
ip netns add "$TB-r" || fail "router namespace"
TB_HOSTS+=(r)
ip -n "$TB-r" link set lo up
testbed_link r etha "$a.254/24" a || fail "router link to group a"
testbed_link r ethb "$b.254/24" z || fail "router link to group b"
testbed_host a0 "$a.1/24" a "$a.254" || fail "host a0"
testbed_host a1 "$a.2/24" a "$a.254" || fail "host a1"
testbed_host b0 "$b.1/24" z "$b.254" || fail "host b0"
testbed_host b1 "$b.2/24" z "$b.254" || fail "host b1"

for k in net.ipv4.ip_forward=1 net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0; do
    testbed_exec r sysctl -qw "$k" || fail "sysctl $k in the router"
done
testbed_exec r "$router" dly0 "$delay" >"$TB_DIR/router.log" 2>&1 &
for _ in $(seq 50); do
    ip -n "$TB-r" link show dly0 >/dev/null 2>&1 && break
    sleep 0.1
done
ip -n "$TB-r" link show dly0 >/dev/null 2>&1 || fail "the delay router made no TUN device: $(cat "$TB_DIR/router.log")"
testbed_exec r sysctl -qw net.ipv4.conf.dly0.rp_filter=0
ip -n "$TB-r" link set dly0 up || fail "dly0 up"
ip -n "$TB-r" route add default dev dly0 table 100 || fail "route to the TUN device"
ip -n "$TB-r" rule add iif etha lookup 100 || fail "rule for etha"
ip -n "$TB-r" rule add iif ethb lookup 100 || fail "rule for ethb"


printf 'group main\nhost a0\nhost a1\nhost b0\nhost b1\n' >"$TB_DIR/nodes"
testbed_exec a0 "$run" ++nodelist "$TB_DIR/nodes" ++remote-shell "$(testbed_shell)" ++ppn 2 +p8 \
    --timeout 60 "$here/hosts_clusters" -block 4 ++set PROBE_CLUSTERS=1 ++set WAN_LATENCY=1000 \
    >"$LOG" 2>&1
status=$?
[ "$status" = 0 ] || fail "the clusters job exited with status $status"
grep -q "clusters: ok, 8 PEs in clusters of 4" "$LOG" || fail "no 'clusters: ok'"
# The router really held the packets: every cross-group latency is at least the delay.
for p in 0 1 2 3; do
    row="$(grep "^clusters: PE $p cluster 0 latencies" "$LOG")" || fail "no latency row for PE $p"
    for q in 4 5 6 7; do
        # "clusters: PE p cluster c latencies (us): l0 l1 ...": l_q is field 8 + q.
        l="$(echo "$row" | awk -v q="$q" '{print $(8 + q)}')"
        [ "$l" -ge $((delay * 1000)) ] || fail "PE $p -> PE $q: $l µs, under the router's $delay ms"
    done
done
sed 's/^/  /' "$LOG"
echo "wan: ok"
