#!/bin/bash
# A throw-away Slurm cluster on this host: munged, slurmctld and two slurmd
# emulating nodes n1 and n2, everything (keys, state, spool, logs, sockets,
# TmpFS, the plugin's runtime directory) under one directory.
#
#   cluster.sh start DIR   create DIR, start the daemons, wait until both
#                          nodes are idle, write DIR/env.sh for clients
#   cluster.sh stop DIR    stop the daemons by their pid files, remove DIR
#                          (kept when CDL_KEEP_CLUSTER=1)
#   cluster.sh restart DIR NODE
#                          stop NODE's slurmd and start it again (it re-reads
#                          plugstack.conf); fails unless it comes back
#
# The machine is left as found: the node names n1, n2 resolve (unless they
# already do) through a hosts file of the cluster's own, bind-mounted over
# /etc/hosts in a private mount namespace of each slurmd (so its steps and
# tasks see it too); /etc/hosts itself is not edited. Jobs run as an existing unprivileged
# user (nobody by default), so no account is created.
#
# Inputs (environment):
# Run it from the build tree (where configure ran): the two inputs below
# default to the files there (`make tests/slurm/fake-mps-control` builds the
# fake; make check does too).
#
#   CDL_SPANK_SO        the built plugin (.libs/cdl_spank.so; default
#                       spank/.libs/cdl_spank.so); loaded through
#                       PlugStackConfig, "required" so a broken plugin fails
#                       every srun instead of being skipped
#   CDL_FAKE_MPS        the fake nvidia-cuda-mps-control (default
#                       tests/slurm/fake-mps-control); installed as
#                       DIR/bin/nvidia-cuda-mps-control and named in the
#                       plugin's admin configuration
#   CDL_PLUGSTACK_ARGS  extra plugstack arguments (key=value ...)
#   CDL_PORT_RANGE      the plugin's port_range (default: CDL_PORT_SPAN ports
#                       at a random place in 10000-19999, away from every
#                       other cluster's (choose); env.sh exports CDL_PORT_LO/HI)
#   CDL_PORT_SPAN       the width of that default range (1-100, default 100)
#   CDL_TEST_USER       the unprivileged user jobs run as (default nobody;
#                       it must exist: the harness creates no account)
#   CDL_RESV_PORTS=1    configure MpiParams=ports=... so that Slurm reserves
#                       ports for every step (SLURM_STEP_RESV_PORTS)
#   CDL_TASK_PLUGIN     slurm.conf's TaskPlugin (default task/none; most sites
#                       run task/affinity, which binds tasks by itself)
#   CDL_TASK_PLUGIN_PARAM  its TaskPluginParam (e.g. autobind=threads)
#   CDL_CPUS=N          CPUs= of each node line (default 4, or under
#                       CDL_CGROUP the host's, at most 4); N = the host's
#                       CPUs makes Slurm's core numbers the host's cores
#                       (S_STEP_ALLOC_CORES, read by --cdl-bind)
#   CDL_CGROUP=1        the cgroup plugins most sites run: TaskPlugin=
#                       task/cgroup,task/affinity, ProctrackType=proctrack/
#                       cgroup, cgroup.conf with ConstrainCores and
#                       ConstrainRAMSpace (tried on cgroup v1 only: Slurm
#                       22.05's cgroup/v2 wants systemd), CR_CPU_Memory (--mem is allocated and
#                       enforced; DefMemPerCPU gives a node's 4000 MB to its
#                       CPUs). Each node has the host's CPUs (at most 4): a
#                       cpuset cannot name CPUs the host lacks.
#   CDL_FIRST_JOB_ID    the first job id (default: random, 1000-3000900, and
#                       10000 or more away from every other cluster's on this
#                       host: choose); env.sh exports it. Clusters running
#                       side by side then never share job ids, so nothing
#                       named by job id (ports, /dev/shm, runtime_dir) meets.
#   CDL_GPUS=N          N fake GPUs per node (default 2; not with CDL_HETERO),
#                       for steps that give each task several GPUs
#                       (srun --gpus-per-task=2 with 4 tasks on a node: 8)
#   CDL_HETERO=1        a heterogeneous site: n1 has 4 CPUs on 2 sockets and two
#                       GPUs of type a100 (fake devices nvidia0, nvidia1), n2
#                       2 CPUs on one socket and one GPU of type t4 (nvidia2);
#                       partitions all (both nodes, the default), big (n1)
#                       and small (n2). GPUs need File= in gres.conf: with
#                       Count= alone Debian 12's Slurm (22.05) counts 0 of
#                       them and marks the node INVAL ("gres/gpu count
#                       reported lower than configured (0 < 1)"). Not with
#                       CDL_CGROUP (a cpuset cannot name CPUs the host lacks)
#   CDL_PREEMPT=1       partition preemption: jobs of partition `high` (both
#                       nodes, PriorityTier 10) requeue those of `debug` after
#                       a GraceTime of 60 s (SIGTERM to the tasks first)
#
# Needs root (slurmd and slurmstepd must be able to become the job user).
# No sleeps as synchronisation: every wait polls a condition with a deadline.
set -eu

die() { echo "cluster.sh: $*" >&2; exit 1; }

# wait_for SECONDS COMMAND...: run COMMAND until it succeeds or time runs out.
wait_for() {
    local deadline=$((SECONDS + $1)); shift
    until "$@" >/dev/null 2>&1; do
        [ "$SECONDS" -lt "$deadline" ] || return 1
        sleep 0.05   # poll interval only: the condition decides, not the pause
    done
}

# ports_in_use LO HI: true if a TCP socket of this host (any state, any
# address) has a local port in LO..HI.
ports_in_use() {
    local lo=$1 hi=$2 port
    while read -r _ port _; do
        port=$((16#${port##*:}))
        [ "$port" -ge "$lo" ] && [ "$port" -le "$hi" ] && return 0
    done < <(tail -q -n +2 /proc/net/tcp /proc/net/tcp6 2>/dev/null)
    return 1
}

# lock_clusters DIR: opens FD lk on DIR's parent, the folder where the
# clusters running side by side on this host have their directories
# (lib.sh: mktemp -d /tmp/cdl-slurm.XXXXXX), and locks it with flock, for
# the caller's shell (not in a subshell: the lock would go with it). The
# parent, not this script: the gcc and clang stages, or two checkouts, run
# different copies of cluster.sh beside each other.
lock_clusters() {
    local parent
    parent=$(dirname "$1")
    exec {lk}<"$parent"
    flock -w 60 "$lk" || { echo "cluster.sh: no lock on $parent within 60 s" >&2; return 1; }
}

# choose DIR SPAN: under lock_clusters, what this cluster shares with the
# others of this host, chosen at random but never one another cluster holds:
#  - the plugin's port window (unless CDL_PORT_RANGE is set): SPAN ports at a
#    random place in 10000-19999. A rank 0 that cannot bind its port moves up
#    to 64 ports above (lib/dist/store_proto.h), and test_hostile.sh's
#    squatter holds those too, so a window takes LO..LO+163: no socket may
#    use one of those ports, and no other cluster's window starts within 164;
#  - slurmctld's and the two slurmd's ports, in 20000-32767: above the port
#    windows and below the kernel's ephemeral ports (32768-60999), which an
#    outgoing connection could take while a test restarts a slurmd on its
#    port; none in use, none another cluster chose (its daemons may not have
#    bound them yet: two clusters starting together could both find a port
#    free, about 1 time in 1400 for two starts that overlap);
#  - the first job id (unless CDL_FIRST_JOB_ID is set), 10000 or more away
#    from every other cluster's: /dev/shm segments and the epilog's sweep of
#    them are named by job id, host-wide. Drawn from 30000 values alone, two
#    clusters shared their ids about 1 time in 30000.
# Records WINDOW (0 without one) in DIR/ports, the one number older copies
# of this script read there (and fail on anything else), "PCTL P1 P2
# FIRST-JOB" in DIR/chosen; prints "WINDOW PCTL P1 P2 FIRST-JOB".
choose() {
    local dir=$1 span=$2 lk f rec lo=0 pctl p1 p2 first ok tries
    local wins=() used=" " jobs=()
    lock_clusters "$dir" || return 1
    for f in "$(dirname "$dir")"/*/ports; do
        [ -f "$f" ] && [ "$f" != "$dir/ports" ] || continue
        rec=()
        read -r -a rec <"$f" 2>/dev/null || [ "${#rec[@]}" -gt 0 ] || continue
        case "${rec[*]}" in '' | *[!0-9]*) ;; *) wins+=("${rec[0]}") ;; esac
        rec=()
        read -r -a rec <"${f%/ports}/chosen" 2>/dev/null || [ "${#rec[@]}" -gt 0 ] || continue
        case "${rec[*]}" in *[!0-9\ ]*) continue ;; esac
        [ "${#rec[@]}" = 4 ] || continue
        used="$used${rec[0]} ${rec[1]} ${rec[2]} "
        jobs+=("${rec[3]}")
    done
    if [ -z "${CDL_PORT_RANGE:-}" ]; then
        for tries in $(seq 200); do
            lo=$((10000 + RANDOM % 99 * 100)) ok=1   # below the daemons' 20000
            for f in "${wins[@]}"; do
                [ "$f" = 0 ] || [ $((lo > f ? lo - f : f - lo)) -ge 164 ] || ok=0
            done
            [ $ok = 1 ] && ! ports_in_use "$lo" $((lo + span + 63)) && break
            ok=0
        done
        [ $ok = 1 ] || { echo "cluster.sh: no free window of $((span + 64)) ports in 10000-19963 after $tries tries" >&2; return 1; }
    fi
    daemon_port() {
        local p
        while :; do
            p=$((20000 + RANDOM % 12768))
            case $used in *" $p "*) continue ;; esac
            ports_in_use "$p" "$p" || { echo "$p"; return; }
        done
    }
    pctl=$(daemon_port); used="$used$pctl "
    p1=$(daemon_port); used="$used$p1 "
    p2=$(daemon_port)
    first=${CDL_FIRST_JOB_ID:-}
    if [ -z "$first" ]; then
        for tries in $(seq 200); do
            first=$((1000 + RANDOM % 30000 * 100)) ok=1
            for f in "${jobs[@]}"; do
                [ $((first > f ? first - f : f - first)) -ge 10000 ] || ok=0
            done
            [ $ok = 1 ] && break
        done
    fi
    echo "$pctl $p1 $p2 $first" >"$dir/chosen"
    echo "$lo" >"$dir/ports"
    exec {lk}<&-
    echo "$lo $pctl $p1 $p2 $first"
}

ensure_user() {
    local u=$1
    [ "$(id -u "$u" 2>/dev/null)" ] || die "test user $u does not exist (the harness creates no account: set CDL_TEST_USER to an unprivileged user)"
    [ "$(id -u "$u")" != 0 ] || die "test user $u is root: it must be unprivileged"
}

# start_slurmd DIR NODE: slurmd in a mount namespace of its own where the
# cluster's hosts file stands for /etc/hosts (see the top).
start_slurmd() {
    local dir=$1 n=$2
    if [ -f "$dir/etc/hosts" ]; then
        unshare --mount --propagation private -- /bin/sh -c \
            'mount --bind "$0" /etc/hosts && exec "$@"' "$dir/etc/hosts" \
            slurmd -D -N "$n" -f "$dir/etc/slurm.conf" </dev/null >>"$dir/log/slurmd.$n.out" 2>&1 &
    else
        slurmd -D -N "$n" -f "$dir/etc/slurm.conf" </dev/null >>"$dir/log/slurmd.$n.out" 2>&1 &
    fi
    echo $! >"$dir/run/harness.slurmd.$n.pid"
}

start() {
    local dir=$1
    [ "$(id -u)" = 0 ] || die "must run as root"
    # The documented command runs it from the build tree with no variables.
    CDL_SPANK_SO=${CDL_SPANK_SO:-spank/.libs/cdl_spank.so}
    CDL_FAKE_MPS=${CDL_FAKE_MPS:-tests/slurm/fake-mps-control}
    [ -f "$CDL_SPANK_SO" ] || die "no plugin at $CDL_SPANK_SO: run this from the build tree after make, or set CDL_SPANK_SO"
    [ -x "$CDL_FAKE_MPS" ] || die "no fake MPS control at $CDL_FAKE_MPS: run 'make tests/slurm/fake-mps-control' in the build tree, or set CDL_FAKE_MPS"
    CDL_SPANK_SO=$(readlink -f "$CDL_SPANK_SO")   # slurmstepd runs elsewhere
    local user=${CDL_TEST_USER:-nobody}
    ensure_user "$user"
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    [ -z "$(ls -A "$dir")" ] || die "$dir is not empty"
    # The job user must traverse DIR (munge socket, work dir); nothing in it
    # is writable by that user except work/, tmp/ and the fake's record dir
    # bin/mps-records/. The plugin creates its runtime_dir (DIR/cdl) itself.
    chmod 0755 "$dir"
    mkdir -p "$dir"/{etc,state,log,run,munge,bin/mps-records,spool/n1,spool/n2,tmp/n1,tmp/n2,work}
    chmod 0700 "$dir/munge"
    chmod 1777 "$dir/tmp/n1" "$dir/tmp/n2" "$dir/bin/mps-records"
    chown "$user" "$dir/work"
    install -m 0755 "$CDL_FAKE_MPS" "$dir/bin/nvidia-cuda-mps-control"
    # CDL_GPUS fake GPUs per node (two by default, three in all under
    # CDL_HETERO): gres/gpu wants character devices, so make copies of
    # /dev/null (named like NVIDIA's, so Slurm numbers them 0, 1, ...).
    local ngpus=${CDL_GPUS:-2} g
    [ "${CDL_HETERO:-0}" != 1 ] || ngpus=3
    case $ngpus in [1-9] | [1-5][0-9] | 6[0-4]) ;; *) die "CDL_GPUS=$ngpus: want 1-64" ;; esac
    mkdir -p "$dir/dev"
    for ((g = 0; g < ngpus; g++)); do
        mknod -m 0666 "$dir/dev/nvidia$g" c 1 3 ||
            die "mknod failed: the harness needs CAP_MKNOD for its fake GPU devices"
    done

    # munge
    mungekey -c -f -k "$dir/munge/munge.key" >/dev/null
    munged -F --force -S "$dir/munge/munge.sock" --key-file="$dir/munge/munge.key" \
        --pid-file="$dir/munge/munged.pid" --log-file="$dir/log/munged.log" \
        --seed-file="$dir/munge/munged.seed" </dev/null >/dev/null 2>&1 &
    echo $! >"$dir/run/munged.pid"
    wait_for 10 test -S "$dir/munge/munge.sock" || die "munged did not start ($dir/log/munged.log)"
    chmod 0711 "$dir/munge"

    local cpus=4 proctrack=proctrack/pgid task=${CDL_TASK_PLUGIN:-task/none} select=CR_CPU
    cpus=${CDL_CPUS:-$cpus}
    case $cpus in [1-9] | [1-9][0-9]) ;; *) die "CDL_CPUS=$cpus: want 1-99" ;; esac
    if [ "${CDL_CGROUP:-0}" = 1 ]; then
        if [ -z "${CDL_CPUS:-}" ]; then
            cpus=$(nproc)
            [ "$cpus" -le 4 ] || cpus=4
        fi
        proctrack=proctrack/cgroup
        task=${CDL_TASK_PLUGIN:-task/cgroup,task/affinity}
        # Memory is allocated (sbatch --mem), so that the cgroup limits it.
        select="CR_CPU_Memory
DefMemPerCPU=$((4000 / cpus))"
        # Written before choose takes its lock: a cluster stopping meanwhile
        # then sees that this one uses the host's slurm_n1 and slurm_n2
        # cgroups (stop_cgroups).
        printf '%s\n' CgroupPlugin=autodetect ConstrainCores=yes ConstrainRAMSpace=yes \
            AllowedRAMSpace=100 >"$dir/etc/cgroup.conf"
    fi

    local host plo pctl p1 p2 pres span=${CDL_PORT_SPAN:-100} prange=${CDL_PORT_RANGE:-} first_job chosen
    host=$(hostname -s)
    case $span in [1-9] | [1-9][0-9] | 100) ;; *) die "CDL_PORT_SPAN=$span: want 1-100" ;; esac
    chosen=$(choose "$dir" "$span") || exit 1
    read -r plo pctl p1 p2 first_job <<<"$chosen"
    # The plugin's MASTER_PORT range: a window of SPAN in 10000-19999, away
    # from the ports above, and from other clusters' windows (choose).
    [ -n "$prange" ] || prange=$plo-$((plo + span - 1))
    pres=$((30000 + RANDOM % 20000))   # MpiParams=ports= range for --resv-ports

    # The emulated nodes' names must resolve, as node names do on a real
    # cluster: MASTER_ADDR is task 0's node name (master_addr=hostname).
    # Unless they already do, only the slurmd see them (start_slurmd).
    if ! getent hosts n1 >/dev/null || ! getent hosts n2 >/dev/null; then
        { cat /etc/hosts; echo "127.0.0.1 n1 n2"; } >"$dir/etc/hosts"
        chmod 0644 "$dir/etc/hosts"
        unshare --mount --propagation private -- /bin/sh -c \
            'mount --bind "$0" /etc/hosts && getent hosts n1' "$dir/etc/hosts" >/dev/null 2>&1 ||
            die "n1 and n2 do not resolve and slurmd cannot get a private /etc/hosts (unshare --mount and mount --bind need CAP_SYS_ADMIN): run as full root, or make n1 and n2 resolve to 127.0.0.1"
    fi

    cat >"$dir/etc/plugstack.conf" <<EOF
required $CDL_SPANK_SO mps_control=$dir/bin/nvidia-cuda-mps-control runtime_dir=$dir/cdl port_range=$prange secret_key=$dir/munge/munge.key ${CDL_PLUGSTACK_ARGS:-}
EOF
    # Node lines: alike, or (CDL_HETERO) of different sizes and GPU types.
    local node1="CPUs=$cpus RealMemory=4000 Gres=gpu:$ngpus" node2 parts
    node2=$node1
    parts="PartitionName=debug Nodes=n1,n2 Default=YES MaxTime=INFINITE State=UP"
    if [ "${CDL_HETERO:-0}" = 1 ]; then
        node1="CPUs=4 Sockets=2 CoresPerSocket=2 ThreadsPerCore=1 RealMemory=4000 Gres=gpu:a100:2"
        node2="CPUs=2 Sockets=1 CoresPerSocket=2 ThreadsPerCore=1 RealMemory=4000 Gres=gpu:t4:1"
        parts="PartitionName=all Nodes=n1,n2 Default=YES MaxTime=INFINITE State=UP
PartitionName=big Nodes=n1 MaxTime=INFINITE State=UP
PartitionName=small Nodes=n2 MaxTime=INFINITE State=UP"
        cat >"$dir/etc/gres.conf" <<EOF
NodeName=n1 Name=gpu Type=a100 File=$dir/dev/nvidia[0-1]
NodeName=n2 Name=gpu Type=t4 File=$dir/dev/nvidia2
EOF
    else
        cat >"$dir/etc/gres.conf" <<EOF
NodeName=n[1-2] Name=gpu File=$dir/dev/nvidia[0-$((ngpus - 1))]
EOF
    fi
    cat >"$dir/etc/slurm.conf" <<EOF
ClusterName=cdltest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$pctl
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.sock
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd.%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.%n.log
SlurmdDebug=verbose
ProctrackType=$proctrack
TaskPlugin=$task
FirstJobId=$first_job
$( [ -n "${CDL_TASK_PLUGIN_PARAM:-}" ] && echo "TaskPluginParam=$CDL_TASK_PLUGIN_PARAM" )
SelectType=select/cons_tres
# A backfill pass each second (30 s by default): a requeued job whose start
# a test moved to now+2 starts then, not up to 30 s later, past the tests'
# waits (test_idle_requeue.sh failed so in CI).
SchedulerParameters=bf_interval=1
SelectTypeParameters=$select
MpiDefault=none
$( [ "${CDL_RESV_PORTS:-0}" = 1 ] && echo "MpiParams=ports=$pres-$((pres + 99))" )
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
MailProg=/bin/true
PlugStackConfig=$dir/etc/plugstack.conf
ReturnToService=2
KillWait=2
MinJobAge=10
InactiveLimit=0
SlurmdParameters=config_overrides
TmpFS=$dir/tmp/%n
GresTypes=gpu
NodeName=n1 NodeHostname=$host NodeAddr=127.0.0.1 Port=$p1 $node1
NodeName=n2 NodeHostname=$host NodeAddr=127.0.0.1 Port=$p2 $node2
$parts$( [ "${CDL_PREEMPT:-0}" = 1 ] && echo " PriorityTier=1 GraceTime=60 PreemptMode=REQUEUE" )
$( [ "${CDL_PREEMPT:-0}" = 1 ] && printf '%s\n' "PartitionName=high Nodes=n1,n2 MaxTime=INFINITE State=UP PriorityTier=10 PreemptMode=OFF" \
   "PreemptType=preempt/partition_prio" "PreemptMode=REQUEUE" )
EOF
    cat >"$dir/env.sh" <<EOF
export SLURM_CONF=$dir/etc/slurm.conf
export CDL_CLUSTER_DIR=$dir
export CDL_TEST_USER=$user
export CDL_PORT_LO=${prange%-*} CDL_PORT_HI=${prange#*-}
export CDL_FIRST_JOB_ID=$first_job
EOF
    export SLURM_CONF=$dir/etc/slurm.conf

    slurmctld -D -c -i -f "$SLURM_CONF" </dev/null >>"$dir/log/slurmctld.out" 2>&1 &
    echo $! >"$dir/run/harness.slurmctld.pid"
    local n
    for n in n1 n2; do
        start_slurmd "$dir" "$n"
    done
    wait_for 30 nodes_idle || { sinfo -N >&2 || true; die "nodes did not become idle (logs in $dir/log)"; }
}

nodes_idle() {
    local out
    out=$(sinfo -h -N -o '%N %T' 2>/dev/null) || return 1
    [ "$(echo "$out" | grep ' idle$' | sort -u | wc -l)" = 2 ]   # a node per partition
}

# stop_pids FILE...: TERM every daemon named in the files at once (each takes
# about 2 s to exit), then KILL those still there after 10 s.

stop_pids() {
    local f pid pids=()
    for f in "$@"; do
        [ -s "$f" ] || continue
        pid=$(cat "$f")
        case $pid in ''|*[!0-9]*) continue ;; esac
        kill -TERM "$pid" 2>/dev/null && pids+=("$pid")
    done
    for pid in "${pids[@]}"; do
        wait_for 10 sh -c "! kill -0 $pid" || kill -KILL "$pid" 2>/dev/null || true
    done
}

# Fake MPS daemons a failed test may have left: only processes whose
# executable is this cluster's fake (named by the fake's own records).
stop_fake_daemons() {
    local dir=$1 rec pid
    for rec in "$dir"/bin/mps-records/rec.*; do
        [ -f "$rec" ] && grep -qx 'mode=daemon' "$rec" || continue
        pid=$(sed -n 's/^pid=//p' "$rec")
        case $pid in ''|*[!0-9]*) continue ;; esac
        [ "$(readlink "/proc/$pid/exe" 2>/dev/null)" = "$dir/bin/nvidia-cuda-mps-control" ] &&
            kill -KILL "$pid" 2>/dev/null || true
    done
}

# job_pids DIR: the processes of this cluster's jobs: its slurmstepd (they
# inherit slurmd's environment, which names DIR's slurm.conf) and the tasks
# they started (the job's environment names it too, and Slurm adds the
# cluster's name). Neither this shell nor its callers (a test script
# exports SLURM_CONF too) are ever listed.
job_pids() {
    local conf="SLURM_CONF=$1/etc/slurm.conf" p mine=" ${BASHPID:-$$} " a=$$
    while [ "$a" -gt 1 ] 2>/dev/null; do
        mine="$mine$a "
        a=$(awk '{print $4}' "/proc/$a/stat" 2>/dev/null) || break
    done
    for p in /proc/[0-9]*; do
        p=${p#/proc/}
        case $mine in *" $p "*) continue ;; esac
        grep -qzxF "$conf" "/proc/$p/environ" 2>/dev/null || continue
        case $(readlink "/proc/$p/exe" 2>/dev/null) in
        */slurmstepd | */slurmstepd-*) echo "$p"; continue ;;
        esac
        if grep -qzx 'SLURM_CLUSTER_NAME=cdltest' "/proc/$p/environ" 2>/dev/null; then echo "$p"; fi
    done
    return 0
}
no_job_pids() { [ -z "$(job_pids "$1")" ]; }

# kill_jobs DIR: KILL what is left of the cluster's jobs, and say so.
kill_jobs() {
    local pids
    pids=$(job_pids "$1")
    [ -n "$pids" ] || return 0
    echo "cluster.sh: killing job processes left after scancel: $(echo $pids)" >&2
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null || true
    wait_for 10 no_job_pids "$1" ||
        echo "cluster.sh: job processes still there: $(job_pids "$1" | tr '\n' ' ')" >&2
}

# cancel_jobs DIR: scancel every job while slurmctld and slurmd still run (a
# slurmstepd whose slurmd is gone never ends) and wait up to 30 s for their
# steps to end; then KILL what is left (a test that timed out with a job
# still running leaves nothing behind).
cancel_jobs() {
    local dir=$1 ids
    if [ -s "$dir/run/harness.slurmctld.pid" ] &&
       kill -0 "$(cat "$dir/run/harness.slurmctld.pid")" 2>/dev/null; then
        ids=$(SLURM_CONF=$dir/etc/slurm.conf timeout 10 squeue -h -o %A 2>/dev/null) || ids=
        # shellcheck disable=SC2086
        [ -z "$ids" ] || SLURM_CONF=$dir/etc/slurm.conf timeout 10 scancel $ids 2>/dev/null || true
    fi
    wait_for 30 no_job_pids "$dir" || kill_jobs "$dir"
}

# stop_cgroups DIR: task/cgroup leaves its per-node groups (cgroup v1:
# slurm_<node> under each controller, named by the node alone: Slurm 22.05
# has no setting for another prefix), and the machine is left as found. But
# every cluster of this host names its nodes n1 and n2: another cluster with
# cgroup.conf whose daemons run shares those groups, and a group it has just
# made for a step (empty until the task is moved in) would go from under
# it, failing that step. So the groups are removed only by the last such
# cluster, under lock_clusters (a cluster starting writes its cgroup.conf,
# then takes that lock before its slurmd run). A group in use cannot be
# removed (rmdir fails), so nothing running is touched.
stop_cgroups() {
    local dir=$1 lk f g pid
    [ -f "$dir/etc/cgroup.conf" ] || return 0
    lock_clusters "$dir" || return 0
    for f in "$(dirname "$dir")"/*/etc/cgroup.conf; do
        [ -f "$f" ] && [ "$f" != "$dir/etc/cgroup.conf" ] || continue
        pid=$(cat "${f%/etc/cgroup.conf}/run/munged.pid" 2>/dev/null) || continue
        case $pid in ''|*[!0-9]*) continue ;; esac
        if kill -0 "$pid" 2>/dev/null; then
            echo "cluster.sh: slurm_n1 and slurm_n2 cgroups left to ${f%/etc/cgroup.conf}, which still runs" >&2
            exec {lk}<&-
            return 0
        fi
    done
    for g in /sys/fs/cgroup/*/slurm_n1 /sys/fs/cgroup/*/slurm_n2; do
        [ -d "$g" ] && find "$g" -depth -type d -exec rmdir {} + 2>/dev/null
    done
    exec {lk}<&-
    return 0
}

stop() {
    local dir=$1
    [ -d "$dir" ] || return 0
    stop_fake_daemons "$dir"
    cancel_jobs "$dir"
    stop_pids "$dir"/run/harness.slurmd.n1.pid "$dir"/run/harness.slurmd.n2.pid \
              "$dir"/run/harness.slurmctld.pid "$dir"/run/munged.pid
    # A step started while the daemons stopped.
    kill_jobs "$dir"
    stop_cgroups "$dir"
    if [ "${CDL_KEEP_CLUSTER:-0}" = 1 ]; then
        echo "cluster.sh: kept $dir" >&2
    else
        rm -rf "$dir"
    fi
}

# restart DIR NODE: a new slurmd for NODE; it must register with slurmctld
# again (slurmd with a `required` plugin whose init fails does not start).
slurmd_start_time() {
    scontrol show node "$1" 2>/dev/null | tr ' ' '\n' | sed -n 's/^SlurmdStartTime=//p'
}
registered_since() {   # registered_since NODE OLD-START-TIME PID
    kill -0 "$3" 2>/dev/null || return 0   # exited: stop waiting
    local now
    now=$(slurmd_start_time "$1")
    [ -n "$now" ] && [ "$now" != "$2" ]
}
restart() {
    local dir=$1 n=$2 before pid
    export SLURM_CONF=$dir/etc/slurm.conf
    before=$(slurmd_start_time "$n")
    stop_pids "$dir/run/harness.slurmd.$n.pid"
    start_slurmd "$dir" "$n"
    pid=$(cat "$dir/run/harness.slurmd.$n.pid")
    wait_for 60 registered_since "$n" "$before" "$pid" ||
        die "slurmd $n did not register again within 60 s (logs in $dir/log/slurmd.$n.log)"
    kill -0 "$pid" 2>/dev/null || die "slurmd $n exited at start (logs in $dir/log/slurmd.$n.log)"
}

case ${1:-} in
start) [ $# = 2 ] || die "usage: cluster.sh start DIR"; start "$2" ;;
stop)  [ $# = 2 ] || die "usage: cluster.sh stop DIR"; stop "$2" ;;
restart) [ $# = 3 ] || die "usage: cluster.sh restart DIR NODE"; restart "$2" "$3" ;;
*) die "usage: cluster.sh start|stop|restart DIR [NODE]" ;;
esac
