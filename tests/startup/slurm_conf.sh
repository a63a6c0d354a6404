# shellcheck shell=sh
# slurm_conf.sh: the slurm.conf of the tests' own Slurms (slurm_bed.sh: one node on
# loopback; tests/hosts/pmix_hosts.sh: one slurmd per network-namespace host), sourced.
# The settings and why: /work/shared/SLURM.md (no munge: auth/none, cred/none; proctrack/pgid;
# MpiDefault=pmix; every daemon as root; state, spool, pid, log and TmpFS under DIR).
#
#   slurm_conf FILE DIR CLUSTER CONTROLLER CONTROLLER_ADDR CTLD_PORT SLURMD_PORT NODE=ADDR...
#
# writes FILE: cluster CLUSTER, slurmctld on host CONTROLLER at CONTROLLER_ADDR, and one
# 2-CPU node per NODE=ADDR, all in partition "test". POSIX sh; its variables start with sc_.
slurm_conf() {
    sc_file=$1 sc_dir=$2 sc_cluster=$3 sc_ctld=$4 sc_ctld_addr=$5 sc_ctld_port=$6 sc_slurmd_port=$7
    shift 7
    sc_nodes=
    {
        cat <<CONF
ClusterName=$sc_cluster
SlurmctldHost=$sc_ctld($sc_ctld_addr)
SlurmctldPort=$sc_ctld_port
SlurmdPort=$sc_slurmd_port
AuthType=auth/none
CredType=cred/none
ProctrackType=proctrack/pgid
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=pmix
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmUser=root
SlurmdUser=root
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
StateSaveLocation=$sc_dir/state
SlurmdSpoolDir=$sc_dir/spool/%n
SlurmctldPidFile=$sc_dir/run/slurmctld.pid
SlurmdPidFile=$sc_dir/run/slurmd-%n.pid
SlurmctldLogFile=$sc_dir/log/slurmctld.log
SlurmdLogFile=$sc_dir/log/slurmd-%n.log
TmpFS=$sc_dir/tmp/%n
ReturnToService=2
CONF
        for sc_node in "$@"; do
            echo "NodeName=${sc_node%%=*} NodeAddr=${sc_node#*=} CPUs=2 RealMemory=1000 State=UNKNOWN"
            sc_nodes="$sc_nodes${sc_nodes:+,}${sc_node%%=*}"
        done
        echo "PartitionName=test Nodes=$sc_nodes Default=YES MaxTime=INFINITE State=UP"
    } >"$sc_file"
}
