#!/usr/bin/env bash
# A one-node SLURM cluster on this machine, for `make test-slurm` and CI (Debian/Ubuntu, as root).
#
#   slurm/local_cluster.sh up      # install (apt) what is missing, write configs, start, health-check
#   slurm/local_cluster.sh status  # daemons, sinfo, accounting
#   slurm/local_cluster.sh down    # stop the daemons this script started (configs and packages stay)
#
# Daemons: munged (authentication), mariadbd + slurmdbd (accounting: the Snakemake executor reads job
# states with sacct), slurmctld and slurmd on one node. They run as plain background processes (no
# systemd); their pid files are in $STATE. No cgroups: proctrack/pgid, task/none.
# The cluster has one partition, `debug` (default), and one account, `oar_test`, holding root. The
# node also declares one GPU of type `testgpu` with no device behind it (File=/dev/null in gres.conf),
# so that `--gpus` requests are scheduled and accounted on a machine without a GPU; nothing may use it.
#
# `up` is idempotent: it installs only missing packages, rewrites only the files it owns (each
# starts with $MARK) and starts only daemons that are not running. It refuses to touch a
# slurm.conf it did not write.
#
# Exit codes: 0 done; 77 cannot run here (not root, no apt-get, foreign slurm.conf): a skip, with
# the reason on stderr; anything else is a failure.
set -euo pipefail

SKIP=77
MARK="# written by oar slurm/local_cluster.sh"
STATE=/run/oar-slurm                 # pid files of the daemons started here
LOGS=/var/log/oar-slurm
CLUSTER=oar
PARTITION=debug
ACCOUNT=oar_test
DB_NAME=slurm_acct_db
DB_USER=slurm
PACKAGES=(munge mariadb-server slurmdbd slurmctld slurmd slurm-client)

say() { echo "[local_cluster] $*" >&2; }
skip() { say "SKIP: $*"; exit "$SKIP"; }
die() { say "ERROR: $*"; exit 1; }

# ------------------------------------------------------------------------------------------- checks

require_root() {
  [[ $(id -u) -eq 0 ]] || skip "needs root (installs packages, writes /etc/slurm, starts daemons)"
}

own_or_absent() {  # a config file is ours to (re)write only if absent or written by this script
  [[ ! -e $1 ]] || head -n1 "$1" | grep -qxF "$MARK" \
    || skip "$1 exists and was not written by this script: not touching a real SLURM installation"
}

# ------------------------------------------------------------------------------------------ install

install_packages() {
  local missing=()
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [[ ${#missing[@]} -eq 0 ]] && return
  command -v apt-get >/dev/null || skip "no apt-get to install: ${missing[*]}"
  say "installing ${missing[*]}"
  # A daemon that a package's postinst starts itself is found by its pid file below and kept.
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# ------------------------------------------------------------------------------------------ configs

node_line() {  # this host as slurmd sees it: CPUs and memory (a little kept back for the OS)
  local cpus mem
  cpus=$(slurmd -C | sed -n 's/.* CPUs=\([0-9]*\).*/\1/p')
  mem=$(slurmd -C | sed -n 's/.* RealMemory=\([0-9]*\).*/\1/p')
  echo "NodeName=$(hostname -s) CPUs=$cpus RealMemory=$((mem * 95 / 100)) Gres=gpu:testgpu:1 State=UNKNOWN"
}

CHANGED=0  # set by write_file when a config's content changed (running daemons must reread it)

write_file() {  # write_file PATH: stdin to PATH, if different from what is there
  local new
  new=$(cat)
  [[ -e $1 && $(cat "$1") == "$new" ]] && return
  printf '%s\n' "$new" > "$1"
  CHANGED=1
}

write_configs() {
  own_or_absent /etc/slurm/slurm.conf
  own_or_absent /etc/slurm/slurmdbd.conf
  own_or_absent /etc/slurm/gres.conf
  mkdir -p /etc/slurm "$STATE" "$LOGS" /var/spool/slurmctld /var/spool/slurmd
  chown slurm:slurm "$STATE" "$LOGS" /var/spool/slurmctld
  local host
  host=$(hostname -s)
  write_file /etc/slurm/slurm.conf <<EOF
$MARK
ClusterName=$CLUSTER
SlurmctldHost=$host
SlurmUser=slurm
AuthType=auth/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$LOGS/slurmctld.log
SlurmdLogFile=$LOGS/slurmd.log
# no cgroups: a job's processes are its process groups (linuxproc's /proc parent walk loses a process
# whose parent died first, and scancel then leaves it running), no task binding
ProctrackType=proctrack/pgid
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
# CPUs and memory are consumable, so --cpus-per-task and --mem limit how many jobs share the node
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=5
# short waits: the tests cancel jobs and run many tiny ones
KillWait=5
MinJobAge=600
# plain sbatch without --mem must not take the whole node
DefMemPerCPU=1000
ReturnToService=2
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStorageEnforce=associations
JobCompType=jobcomp/none
# sacct shows the executor's --comment (rule and wildcards of each job)
AccountingStoreFlags=job_comment
GresTypes=gpu
AccountingStorageTRES=gres/gpu
$(node_line)
PartitionName=$PARTITION Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
  write_file /etc/slurm/slurmdbd.conf <<EOF
$MARK
AuthType=auth/munge
DbdHost=localhost
SlurmUser=slurm
PidFile=$STATE/slurmdbd.pid
LogFile=$LOGS/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageLoc=$DB_NAME
StorageUser=$DB_USER
EOF
  write_file /etc/slurm/gres.conf <<EOF
$MARK
NodeName=$host Name=gpu Type=testgpu File=/dev/null Count=1
EOF
  chown slurm:slurm /etc/slurm/slurmdbd.conf
  chmod 600 /etc/slurm/slurmdbd.conf
}

# ---------------------------------------------------------------------------------------- daemons

running() {  # running PIDFILE: the process named in the pid file is alive
  [[ -s $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null
}

wait_for() {  # wait_for SECONDS WHAT COMMAND...: poll COMMAND until it succeeds
  local seconds=$1 what=$2
  shift 2
  for ((i = 0; i < seconds * 2; i++)); do
    "$@" >/dev/null 2>&1 && return
    sleep 0.5
  done
  die "$what did not come up in ${seconds}s (logs: $LOGS)"
}

start_munge() {
  [[ -s /etc/munge/munge.key ]] || mungekey --create
  chown munge:munge /etc/munge/munge.key
  chmod 400 /etc/munge/munge.key
  mkdir -p /run/munge
  chown munge:munge /run/munge
  running /run/munge/munged.pid && return
  say "starting munged"
  runuser -u munge -- /usr/sbin/munged
  wait_for 10 munged sh -c 'munge -n | unmunge'
}

start_mariadb() {
  running /run/mysqld/mysqld.pid && return
  say "starting mariadbd"
  mkdir -p /run/mysqld
  chown mysql:mysql /run/mysqld
  [[ -d /var/lib/mysql/mysql ]] || mariadb-install-db --user=mysql >/dev/null
  nohup /usr/sbin/mariadbd --user=mysql --pid-file=/run/mysqld/mysqld.pid \
    > "$LOGS/mariadbd.log" 2>&1 &
  wait_for 60 mariadbd mariadb -e 'select 1'
  # slurmdbd connects over the local socket as $DB_USER; only root (socket auth) can create it
  mariadb -e "CREATE USER IF NOT EXISTS '$DB_USER'@'localhost';
              CREATE DATABASE IF NOT EXISTS $DB_NAME;
              GRANT ALL ON $DB_NAME.* TO '$DB_USER'@'localhost';"
}

start_slurmdbd() {
  running "$STATE/slurmdbd.pid" && return
  say "starting slurmdbd"
  /usr/sbin/slurmdbd
  wait_for 60 slurmdbd sacctmgr -n list cluster
}

register_accounting() {  # cluster, account and root's association (AccountingStorageEnforce)
  sacctmgr -n -P list cluster format=cluster | grep -qx "$CLUSTER" \
    || sacctmgr -i add cluster "$CLUSTER" >/dev/null
  sacctmgr -n -P list account format=account | grep -qx "$ACCOUNT" \
    || sacctmgr -i add account "$ACCOUNT" cluster="$CLUSTER" description="oar tests" >/dev/null
  sacctmgr -n -P list assoc user=root account="$ACCOUNT" format=user | grep -qx root \
    || sacctmgr -i add user root account="$ACCOUNT" cluster="$CLUSTER" >/dev/null
}

node_ready() {  # the node takes jobs; a drain left over from an earlier configuration is lifted
  local state
  state=$(sinfo -h -N -o %t)
  [[ $state =~ ^(idle|mix|alloc)$ ]] && return
  [[ $state =~ ^drain ]] && scontrol update NodeName="$(hostname -s)" State=RESUME
  return 1
}

start_slurm() {
  if [[ $CHANGED == 1 ]] && running "$STATE/slurmctld.pid"; then
    # a node's resources change only with a restart of both daemons
    say "configuration changed: restarting slurmctld and slurmd"
    stop_pidfile slurmd "$STATE/slurmd.pid"
    stop_pidfile slurmctld "$STATE/slurmctld.pid"
  fi
  if ! running "$STATE/slurmctld.pid"; then
    say "starting slurmctld"
    /usr/sbin/slurmctld
  fi
  wait_for 30 slurmctld scontrol ping
  if ! running "$STATE/slurmd.pid"; then
    say "starting slurmd"
    /usr/sbin/slurmd
  fi
  wait_for 30 "node $(hostname -s)" node_ready
}

health_check() {
  sinfo
  local out id
  out=$(sbatch --parsable --wait -A "$ACCOUNT" -t 1 -o /dev/null --wrap 'hostname')
  id=${out%%;*}
  wait_for 30 "job $id in sacct" sh -c "sacct -n -X -P -j $id -o State | grep -qx COMPLETED"
  say "healthy: job $id COMPLETED in sacct"
}

# ------------------------------------------------------------------------------------------ down

stop_pidfile() {  # stop_pidfile NAME PIDFILE: TERM the process named in PIDFILE and wait for it
  local name=$1 pidfile=$2 pid
  running "$pidfile" || return 0
  pid=$(cat "$pidfile")
  say "stopping $name ($pid)"
  kill "$pid"
  for ((i = 0; i < 60; i++)); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.5; done
  die "$name ($pid) did not stop"
}

# -------------------------------------------------------------------------------------------- main

case "${1:-}" in
  up)
    require_root
    install_packages
    write_configs
    start_munge
    start_mariadb
    start_slurmdbd
    register_accounting
    start_slurm
    health_check
    ;;
  status)
    for d in munged:/run/munge/munged.pid mariadbd:/run/mysqld/mysqld.pid slurmdbd:$STATE/slurmdbd.pid \
             slurmctld:$STATE/slurmctld.pid slurmd:$STATE/slurmd.pid; do
      if running "${d#*:}"; then echo "${d%%:*}: running ($(cat "${d#*:}"))"; else echo "${d%%:*}: stopped"; fi
    done
    command -v sinfo >/dev/null || { echo "slurm: not installed"; exit 3; }
    sinfo && sacctmgr -n list cluster format=cluster
    ;;
  down)
    require_root
    stop_pidfile slurmd "$STATE/slurmd.pid"
    stop_pidfile slurmctld "$STATE/slurmctld.pid"
    stop_pidfile slurmdbd "$STATE/slurmdbd.pid"
    stop_pidfile mariadbd /run/mysqld/mysqld.pid
    stop_pidfile munged /run/munge/munged.pid
    ;;
  *)
    echo "usage: $0 up|status|down" >&2
    exit 2
    ;;
esac
