#!/bin/sh
# in_host.sh: runs a command in one host of the test bed as that host's own process would
# run: in the network namespace PREFIX-HOST and in a UTS namespace whose host name is HOST.
#   in_host.sh PREFIX HOST CMD...
# It replaces itself (exec) by CMD, so the caller's PID is CMD's. Exits 255 (ssh's "could
# not connect") when there is no such namespace. Used for mpirun in host h0 and by the rsh
# agent testbed.sh writes for mpirun's daemons (testbed_rsh_agent).
if [ $# -lt 3 ]; then
    echo "usage: in_host.sh PREFIX HOST CMD..." >&2
    exit 255
fi
prefix="$1"
host="$2"
shift 2
if ! ip netns list | grep -q "^$prefix-$host\( \|$\)"; then
    echo "in_host.sh: no host '$host' (no network namespace $prefix-$host)" >&2
    exit 255
fi
exec ip netns exec "$prefix-$host" unshare --uts /bin/sh -c 'hostname "$0" && exec "$@"' "$host" "$@"
