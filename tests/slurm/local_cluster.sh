#!/usr/bin/env bash
# Start / stop a one-node SLURM cluster on localhost for the SLURM executor test.
#   local_cluster.sh start DIR   -> writes DIR/slurm.conf, starts munged, slurmctld, slurmd
#   local_cluster.sh stop DIR
# Needs Debian's slurm-wlm (slurmctld, slurmd, munge). Prints "SLURM_CONF=DIR/slurm.conf" on success.
set -euo pipefail
cmd=${1:?start|stop}
dir=$(realpath -m "${2:?state dir}")
host=$(hostname -s)
if [ "$cmd" = stop ]; then
    for pid in "$dir"/slurmd.pid "$dir"/slurmctld.pid "$dir"/munged.pid; do
        [ -f "$pid" ] && kill "$(cat "$pid")" 2>/dev/null || true
    done
    # remove our copy in /etc: left behind, every later `scontrol` (which the SLURM executor
    # plugin runs when snakemake starts) waits 10 s for a controller that is gone
    if [ -f /etc/slurm/slurm.conf ] && grep -q '^ClusterName=clumpscout-local' /etc/slurm/slurm.conf; then
        rm -f /etc/slurm/slurm.conf
    fi
    exit 0
fi
mkdir -p "$dir"/{state,spool,munge,log}
# all CPUs (plain nproc honours OMP_NUM_THREADS); at least 2, the most any rule asks for
cpus=$(nproc --all)
[ "$cpus" -ge 2 ] || cpus=2
mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 / 2 ))
cat > "$dir/slurm.conf" <<CONF
ClusterName=clumpscout-local
SlurmctldHost=$host
SlurmctldPort=16817
SlurmdPort=16818
AuthType=auth/munge
CryptoType=crypto/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
ReturnToService=2
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmdSpoolDir=$dir/spool
StateSaveLocation=$dir/state
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
SlurmUser=root
SlurmdUser=root
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SlurmdParameters=config_overrides
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MinJobAge=86400
NodeName=$host CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=local Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
# Job steps (srun inside a job) look for the default /etc/slurm/slurm.conf: install ours
# there unless a real cluster's configuration is already in place.
if [ ! -f /etc/slurm/slurm.conf ] || grep -q '^ClusterName=clumpscout-local' /etc/slurm/slurm.conf; then
    mkdir -p /etc/slurm
    cp "$dir/slurm.conf" /etc/slurm/slurm.conf
fi
export SLURM_CONF="$dir/slurm.conf"
mkdir -p /run/munge /var/lib/munge /var/log/munge
if [ ! -s /etc/munge/munge.key ]; then
    dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null
fi
chmod 400 /etc/munge/munge.key
chown -R root:root /etc/munge /run/munge /var/lib/munge /var/log/munge 2>/dev/null || true
munged --force --pid-file="$dir/munged.pid" --socket=/run/munge/munge.socket.2 2>"$dir/log/munged.err" || true
slurmctld -f "$SLURM_CONF"
slurmd -f "$SLURM_CONF"
for _ in $(seq 1 30); do
    if sinfo -h -o %t 2>/dev/null | grep -qE '^(idle|mix|alloc)'; then
        echo "SLURM_CONF=$SLURM_CONF"
        exit 0
    fi
    sleep 1
done
echo "slurm did not come up; see $dir/log" >&2
exit 1
