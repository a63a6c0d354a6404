#!/bin/sh
# hosts_shell.sh: the test bed's ++remote-shell. coverse-run calls it as
#   hosts_shell.sh PREFIX HOST 'command line'
# (PREFIX comes from the ++remote-shell value itself) and it runs the command line in the
# network namespace PREFIX-HOST, the way ssh runs it on a host: with /bin/sh, replacing
# itself (exec) so the PE is the process coverse-run started and stops. Like ssh, it exits
# with 255 when it cannot reach the host (no such namespace), which coverse-run retries.
# HOSTS_SHELL_ENV_<HOST>="NAME=VALUE ..." sets extra variables on that host only (the
# tests use it to give one host its own HOST_ID or NETWORK_INTERFACE).
if [ $# -ne 3 ]; then
    echo "usage: hosts_shell.sh PREFIX HOST 'command line'" >&2
    exit 255
fi
prefix="$1"
host="$2"
if ! ip netns list | grep -q "^$prefix-$host\( \|$\)"; then
    echo "hosts_shell.sh: no host '$host' (no network namespace $prefix-$host)" >&2
    exit 255
fi
extra=$(printenv "HOSTS_SHELL_ENV_$host" 2>/dev/null || true)
# shellcheck disable=SC2086 # the extra variables are separate words
exec ip netns exec "$prefix-$host" env $extra /bin/sh -c "$3"
