#!/bin/sh
# slurm_bed.sh: a single-host Slurm of the test's own (slurmctld + slurmd in the foreground,
# config, state and logs in a temp dir; no munge: auth/none, cred/none), runs one command
# with SLURM_CONF pointing at it, then stops both daemons by their PIDs and removes the dir.
# Exit status: the command's; 77 (skip) with the reason when Slurm cannot be started here.
# Usage: slurm_bed.sh <command...>   (the command runs srun itself, under a timeout)
# Checked settings and pitfalls: /work/shared/SLURM.md (docs/startup.md "Slurm").
set -u
for tool in slurmctld slurmd srun sinfo; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "slurm_bed.sh: SKIP: $tool is not installed (scripts/setup.sh installs slurmctld, slurmd, slurm-client)"
        exit 77
    fi
done
if [ "$(id -u)" != 0 ]; then
    echo "slurm_bed.sh: SKIP: slurmd must run as root here (SlurmdUser=root); this is uid $(id -u)"
    exit 77
fi
if ! ls /usr/lib/x86_64-linux-gnu/slurm-wlm/mpi_pmix*.so >/dev/null 2>&1; then
    echo "slurm_bed.sh: SKIP: Slurm has no mpi_pmix plugin (Debian's slurm-wlm-basic-plugins ships it)"
    exit 77
fi

dir=$(mktemp -d /tmp/coverse-slurm.XXXXXX)
ctld_pid=
slurmd_pid=
cleanup() {
    for pid in $slurmd_pid $ctld_pid; do
        kill "$pid" 2>/dev/null
    done
    for pid in $slurmd_pid $ctld_pid; do
        # The daemons stop within a second; a stuck one is killed, never left behind.
        i=0
        while kill -0 "$pid" 2>/dev/null && [ $i -lt 50 ]; do
            sleep 0.1
            i=$((i + 1))
        done
        kill -9 "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
    done
    rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Two free ports next to each other above the ephemeral range's usual start.
free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
ctld_port=$(free_port)
slurmd_port=$(free_port)
node=$(hostname -s)
mkdir -p "$dir/spool/$node" "$dir/state" "$dir/log" "$dir/run" "$dir/tmp/$node"
conf=$dir/slurm.conf
. "$(dirname "$0")/slurm_conf.sh"
slurm_conf "$conf" "$dir" "coverse-test-$$" "$node" 127.0.0.1 "$ctld_port" "$slurmd_port" \
    "$node=127.0.0.1"

slurmctld -D -f "$conf" >"$dir/log/slurmctld.out" 2>&1 &
ctld_pid=$!
slurmd -D -f "$conf" >"$dir/log/slurmd.out" 2>&1 &
slurmd_pid=$!
export SLURM_CONF=$conf

# Ready when the node is idle (about 1 s here).
i=0
until [ "$(sinfo -h -n "$node" -o %t 2>/dev/null)" = idle ]; do
    if ! kill -0 "$ctld_pid" 2>/dev/null || ! kill -0 "$slurmd_pid" 2>/dev/null || [ $i -ge 150 ]; then
        echo "slurm_bed.sh: SKIP: the test's Slurm did not come up (node state '$(sinfo -h -n "$node" -o %t 2>/dev/null)'); logs:"
        tail -n 5 "$dir/log/"*.log "$dir/log/"*.out 2>/dev/null
        exit 77
    fi
    sleep 0.1
    i=$((i + 1))
done

"$@"
status=$?
if [ $status -ne 0 ]; then
    echo "slurm_bed.sh: the command exited with $status; slurmd log tail:" >&2
    tail -n 15 "$dir/log/slurmd-$node.log" >&2 2>/dev/null
fi
exit $status
