#!/usr/bin/env bash
# Bring up a single-node SLURM (munged, slurmctld, slurmd) on 127.0.0.1, as root, on Debian.
# Everything it writes lives in $GRADLANES_SLURM_DIR (default /tmp/gradlanes-slurm); the daemons'
# PIDs go to $GRADLANES_SLURM_DIR/pids so slurm-down.sh stops exactly these and nothing else.
# Prints the SLURM_CONF to export for sbatch/squeue/scontrol.
set -euo pipefail

state=${GRADLANES_SLURM_DIR:-/tmp/gradlanes-slurm}
if [ "$(id -u)" != 0 ]; then
    echo "slurm-up.sh: run as root (it starts munged, slurmctld and slurmd)" >&2
    exit 1
fi
if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
    echo "slurm-up.sh: installing slurm-wlm and munge from Debian" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null
fi

# Daemons left running by an earlier run that never reached slurm-down.sh: stop them first.
if [ -s "$state/pids" ]; then
    bash "$(dirname "$0")/slurm-down.sh" >&2
fi
# A fresh state every time: jobs saved by an earlier run that was killed (a CI try cut short, a
# session that ended mid-test) would otherwise be restored as running and hold the node "alloc".
rm -rf "$state"/ctld "$state"/spool "$state"/log
mkdir -p "$state"/{ctld,spool,log}
: > "$state/pids"
host=$(hostname -s)
# Leave 2 GiB of the machine's memory to the operating system and the submitting snakemake.
mem_mb=$(( $(awk '/MemTotal/ {print int($2 / 1024)}' /proc/meminfo) - 2048 ))
# Twice the cores: the profile gives each job 2 CPUs, and a job spends much of its time starting
# (srun, Python, imports) or waiting for SLURM's next status check. Two at once keep the cores
# busy; on a node of exactly `nproc` CPUs the DAG's 20-odd jobs would run one by one.
cpus=$(( 2 * $(nproc) ))

# munge: a key if the package did not make one, its socket folder, the daemon as user munge.
if [ ! -s /etc/munge/munge.key ]; then
    mkdir -p /etc/munge
    dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key status=none
fi
chown munge:munge /etc/munge/munge.key
chmod 400 /etc/munge/munge.key
mkdir -p /run/munge /var/lib/munge /var/log/munge
chown munge:munge /run/munge /var/lib/munge /var/log/munge
chmod 755 /run/munge
if ! munge -n >/dev/null 2>&1; then
    runuser -u munge -- /usr/sbin/munged --pid-file=/run/munge/gradlanes-munged.pid
    for _ in $(seq 50); do munge -n >/dev/null 2>&1 && break; sleep 0.1; done
    echo "munged $(cat /run/munge/gradlanes-munged.pid)" >> "$state/pids"
fi

cat > "$state/slurm.conf" <<CONF
ClusterName=gradlanes
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$state/ctld
SlurmdSpoolDir=$state/spool
SlurmctldPidFile=$state/slurmctld.pid
SlurmdPidFile=$state/slurmd.pid
SlurmctldLogFile=$state/log/slurmctld.log
SlurmdLogFile=$state/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/filetxt
JobCompLoc=$state/log/jobcomp.txt
GresTypes=gpu
# Finished jobs stay visible to squeue/scontrol for 10 minutes: the executor checks every few seconds.
MinJobAge=600
# A job that names no memory gets 1 GiB per CPU, not the whole node.
DefMemPerCPU=1024
ReturnToService=2
SchedulerType=sched/backfill
# The node declares more CPUs than the hardware has (above): slurmd takes the configured count.
SlurmdParameters=config_overrides
MpiDefault=none
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem_mb Gres=gpu:1 State=UNKNOWN
PartitionName=local Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
# A counted (not device-backed) GPU, so a lane that asks for one is scheduled; JAX still sees none.
printf "AutoDetect=off\nNodeName=%s Name=gpu Count=1 File=/dev/null\n" "$host" > "$state/gres.conf"
# Jobs start srun with a cleaned SLURM_* environment, so SLURM_CONF does not reach them: the
# configuration must be at the default path. Link it there, unless a real cluster's config is.
for name in slurm.conf gres.conf; do
    target=/etc/slurm/$name
    if [ -e "$target" ] && [ "$(readlink "$target")" != "$state/$name" ]; then
        echo "slurm-up.sh: $target exists and is not ours; not touching a real cluster's config" >&2
        exit 1
    fi
    mkdir -p /etc/slurm
    ln -sfn "$state/$name" "$target"
    echo "link $target" >> "$state/pids"
done
export SLURM_CONF="$state/slurm.conf"

# -c: start with no jobs and no node state, whatever StateSaveLocation holds.
slurmctld -f "$SLURM_CONF" -c -i
slurmd -f "$SLURM_CONF"
for _ in $(seq 100); do
    [ -s "$state/slurmctld.pid" ] && [ -s "$state/slurmd.pid" ] && break
    sleep 0.1
done
echo "slurmctld $(cat "$state/slurmctld.pid")" >> "$state/pids"
echo "slurmd $(cat "$state/slurmd.pid")" >> "$state/pids"
for _ in $(seq 100); do
    if sinfo -h -o %T 2>/dev/null | grep -qE '^(idle|mixed)'; then
        echo "export SLURM_CONF=$SLURM_CONF"
        exit 0
    fi
    scontrol update nodename="$host" state=resume >/dev/null 2>&1 || true
    sleep 0.2
done
echo "slurm-up.sh: the node did not become idle; see $state/log/" >&2
sinfo >&2 || true
squeue --states=all >&2 || true
tail -n 20 "$state/log/slurmctld.log" "$state/log/slurmd.log" >&2 || true
exit 1
