# shellcheck shell=bash disable=SC2154 # status, LOG, TB_DIR, subnet, HOST_OF: set by the sourcing script
# paths.sh: the checks of a job's output on the test bed shared by multi_host.sh and
# pmix_hosts.sh, sourced after testbed.sh (they use fail, LOG, TB_DIR and testbed_left).
#
#   addr_of H              h0 -> 10.99.$subnet.1, h1 -> .2, ...: host H's eth0 address
#   pairs KIND... PES      the pairs a program connects on PES PEs
#   check_paths PES [KIND...]
#                          each PE listened on its host's address (HOST_OF[i]: the host PE i
#                          ran on, set by the caller) and the per-peer lines agree with
#                          HOST_OF; with KINDs, exactly those pairs connected
#   expect_ok WHAT TEXT    status 0 and TEXT in the output
#   nothing_left           no process left in the test bed's hosts

addr_of() { echo "10.99.$subnet.$((${1#h} + 1))"; }

# pairs KIND... PES: the pairs ("i:j", i < j) a program connects on PES PEs: ring (PE p and
# p + 1), tree (PE 0's spanning tree, fan-out 4: its broadcasts, CmiBarrier, ConverseExit's
# vote) and star (PE 0 and every other PE).
pairs() {
    local pes="${!#}" kind p q
    for kind in "${@:1:$#-1}"; do
        for ((p = 0; p < pes; ++p)); do
            case "$kind" in
            ring) q=$(((p + 1) % pes)) ;;
            tree) [ "$p" = 0 ] && continue; q=$(((p - 1) / 4)) ;;
            star) [ "$p" = 0 ] && continue; q=0 ;;
            esac
            [ "$p" = "$q" ] && continue
            if [ "$p" -lt "$q" ]; then echo "$p:$q"; else echo "$q:$p"; fi
        done
    done | sort -u
}

# check_paths PES [KIND...]: each PE listened on its own host's eth0 address; under
# CONNECT=lazy ++verbose prints a per-peer line at each end of each pair once the pair is
# set up, naming who dialed: each pair's lines are at both ends, once each, say same host
# exactly for PEs of one host (HOST_OF) and name a dialer of the pair; with KINDs, exactly
# the pairs the program talks over (pairs KIND...) have them.
check_paths() {
    local pes="$1" i j k path want addr
    shift
    for ((i = 0; i < pes; ++i)); do
        addr="$(addr_of "${HOST_OF[i]}")"
        grep -q "^coverse: PE $i listens on $addr:[0-9]* (eth0, " "$LOG" ||
            fail "PE $i (on ${HOST_OF[i]}) did not listen on $addr (its host's eth0): $(grep "^coverse: PE $i listens on" "$LOG")"
    done
    sed -n 's/^coverse: PE \([0-9]*\) -> PE \([0-9]*\): \(.*\); connected on first use, dialed by PE \([0-9]*\)$/\1 \2 \4 \3/p' \
        "$LOG" >"$TB_DIR/paths"
    [ "$(grep -c '^coverse: PE [0-9]* -> PE ' "$LOG")" = "$(wc -l <"$TB_DIR/paths")" ] ||
        fail "a per-peer path line without 'connected on first use, dialed by PE n'"
    # shellcheck disable=SC2094 # the loop and grep only read the file
    while read -r i j k path; do
        if [ "${HOST_OF[i]}" = "${HOST_OF[j]}" ]; then
            want="same host, stream by shm ring, one-sided by cma"
        else
            want="other host, stream by connection, one-sided by tcp"
        fi
        [ "$path" = "$want" ] ||
            fail "PE $i (${HOST_OF[i]}) -> PE $j (${HOST_OF[j]}): '$path', expected '$want'"
        [ "$k" = "$i" ] || [ "$k" = "$j" ] || fail "PE $i -> PE $j says PE $k dialed"
        grep -qx "$j $i $k .*" "$TB_DIR/paths" || fail "PE $i -> PE $j without PE $j -> PE $i (dialed by PE $k)"
    done <"$TB_DIR/paths"
    [ "$(sort "$TB_DIR/paths" | uniq -d | wc -l)" = 0 ] || fail "a pair's line printed twice"
    [ $# -gt 0 ] || return 0
    awk '{ if ($1 < $2) print $1 ":" $2; else print $2 ":" $1 }' "$TB_DIR/paths" | sort -u >"$TB_DIR/got"
    pairs "$@" "$pes" >"$TB_DIR/want"
    cmp -s "$TB_DIR/got" "$TB_DIR/want" ||
        fail "connected pairs $(tr '\n' ' ' <"$TB_DIR/got")differ from the program's ($*): $(tr '\n' ' ' <"$TB_DIR/want")"
}

expect_ok() {
    [ "$status" = 0 ] || fail "$1: exit status $status, expected 0"
    grep -q "$2" "$LOG" || fail "$1: no '$2' in the output"
}

nothing_left() {
    local left
    left="$(testbed_left)"
    [ -z "$left" ] || fail "processes left in the hosts: $(ps -o pid=,args= -p "$(echo "$left" | paste -sd,)")"
}
