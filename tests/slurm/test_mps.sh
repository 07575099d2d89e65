#!/bin/bash
# --cdl-mps on a real Slurm with the fake nvidia-cuda-mps-control named in
# the admin config (cluster.sh): one daemon per node per step, run as the job
# user with a clean environment, private directories, answered before the
# tasks start, gone after the step, after scancel, after SIGKILL of a task
# and (through the job epilog) after slurmstepd itself was killed.
set -u
. "${top_srcdir:-.}/tests/slurm/lib.sh"
require_cluster_tools
start_cluster
FAKE=$CDL_CLUSTER_DIR/bin/nvidia-cuda-mps-control

user_script task.sh <<EOF
#!/bin/sh
d=\$CUDA_MPS_PIPE_DIRECTORY
echo "T\$SLURM_PROCID node=\$SLURMD_NODENAME local=\$SLURM_LOCALID cvd=\$CUDA_VISIBLE_DEVICES" \\
  "rpg=\$CDL_REPLICAS_PER_GPU pct=\$CUDA_MPS_ACTIVE_THREAD_PERCENTAGE rank=\$RANK" \\
  "pipe=\$d log=\$CUDA_MPS_LOG_DIRECTORY" \\
  "modes=\$(stat -c '%U:%a' "\${d%/pipe}" "\$d" "\$CUDA_MPS_LOG_DIRECTORY" | tr '\n' ,)" \\
  "answer=\$(echo get_server_list | $FAKE >/dev/null 2>&1 && echo yes || echo no)"
EOF
field() { echo "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"; }

# 1. Two nodes, two tasks each, one GPU per node: both tasks of a node share it.
out=$(as_user srun -N2 --ntasks-per-node=2 --gres=gpu:1 --cdl-mps ./task.sh)
echo "$out"
job=$(as_user squeue -h -o %i 2>/dev/null | head -1)   # nothing left running
check "4 tasks ran" test "$(echo "$out" | grep -c '^T')" = 4
check "every task found the daemon answering" test "$(echo "$out" | grep -c 'answer=yes')" = 4
check "CUDA_VISIBLE_DEVICES=0, 2 replicas per GPU, 50% threads each" \
    test "$(echo "$out" | grep -c 'cvd=0 rpg=2 pct=50 ')" = 4
check "pipe/log dirs owned by the user, 0700 (step dir, pipe, log)" \
    test "$(echo "$out" | grep -c "modes=$CDL_TEST_USER:700,$CDL_TEST_USER:700,$CDL_TEST_USER:700,")" = 4
check "one pipe directory per node, under the admin runtime_dir" \
    test "$(echo "$out" | sed -n 's/.*node=\(n[12]\) .*pipe=\([^ ]*\) .*/\1 \2/p' | sort -u |
            sed "s|$RUNTIME/[0-9]*\.0\.||" | tr '\n' ' ')" = "n1 n1/pipe n2 n2/pipe "
check "one daemon per node per step (2 starts, 2 daemons)" \
    test "$(count_records start)$(count_records daemon)" = 22
check "one daemon per node: n1 and n2" \
    test "$(count_records daemon '\.0\.n1/pipe$')$(count_records daemon '\.0\.n2/pipe$')" = 11
check "daemons ran as the job user (real, effective, saved uid and gid)" \
    test "$(count_records daemon "^uid=$TEST_UID\$")$(count_records daemon "^suid=$TEST_UID\$")$(count_records daemon "^sgid=$TEST_GID\$")" = 222
check "no daemon ran with root anywhere in its ids" \
    test "$(count_records daemon '^[es]*[ug]id=0$')" = 0
check "daemon environment: exactly PATH, the two MPS dirs, CUDA_VISIBLE_DEVICES" \
    test "$(for f in "$RECORDS"/rec.*; do head -1 "$f" | grep -qx mode=daemon && grep -c '^env=' "$f"; done | sort -u)" = 4
check "daemon: no_new_privs, only fds 0-2, cwd /" \
    test "$(count_records daemon 'NoNewPrivs:.1')$(count_records daemon '^fds=0,1,2$')$(count_records daemon '^cwd=/$')" = 222
check "quit sent once per node at the end of the step" test "$(count_records cmd:quit)" = 2
check "directories gone after the step" runtime_empty
check "no daemon left" no_user_daemon

# 2. Packing on one node: 4 tasks, 2 GPUs.
out=$(as_user srun -N1 -n4 --gres=gpu:2 --cdl-mps=2 ./task.sh)
check "--cdl-mps=2 on 2 GPUs: local ranks 0,1 on GPU 0 and 2,3 on GPU 1" \
    test "$(echo "$out" | sed -n 's/.*local=\([0-9]\) cvd=\([0-9]\) rpg=2 pct=50 .*/\1\2/p' | sort | tr '\n' ' ')" = "00 10 21 31 "
out=$(as_user srun -N1 -n4 --gres=gpu:2 --cdl-mps ./task.sh 2>&1)
check "--cdl-mps without N: local tasks / GPUs = 2" test "$(echo "$out" | grep -c 'rpg=2 pct=50')" = 4
check "... an even layout: no packing note" eval '! echo "$out" | grep -q "stays idle"'
# An uneven layout leaves part of a GPU idle: the note is for the user, so
# it must reach srun (it used to go only to the slurmd log), once per node.
# A node with one task of such a step has nothing to share: no daemon, no
# note there (its rank has the whole GPU).
err=$(as_user srun -N1 -n3 --gres=gpu:2 --cdl-mps=2 ./task.sh 2>&1)
echo "$err" | grep -v '^T'
check "3 tasks on 2 GPUs in groups of 2: srun shows the note once" \
    test "$(echo "$err" | grep -c 'stays idle')/$(echo "$err" | grep -c 'leave GPU 1 with 1 replica, each held to 50% of it: .* (on n[12])$')" = 1/1
err=$(as_user srun -N2 -n3 --gres=gpu:1 --cdl-mps=2 ./task.sh 2>&1)
check "3 tasks over 2 nodes (2+1): n2's lone task runs without MPS, whole GPU, no note" \
    eval '! echo "$err" | grep -q "stays idle" &&
          [ "$(echo "$err" | grep "node=n2 " | grep -c "rpg=1 pct= .*answer=no")" = 1 ] &&
          [ "$(echo "$err" | grep "node=n1 " | grep -c "rpg=2 pct=50 .*answer=yes")" = 2 ]' || echo "$err"
out=$(as_user_env CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=20 -- srun -N1 -n2 --gres=gpu:1 --cdl-mps ./task.sh)
check "the user's own CUDA_MPS_ACTIVE_THREAD_PERCENTAGE wins (docs/slurm-plugin.md)" \
    test "$(echo "$out" | grep -c 'rpg=2 pct=20 ')" = 2
err=$(as_user srun -N1 -n3 --gres=gpu:1 --cdl-mps=2 ./task.sh 2>&1)
rc=$?
check "3 tasks in groups of 2 on 1 GPU: refused with the numbers" \
    eval '[ $rc != 0 ] && echo "$err" | grep -q "need 2 GPUs, the step has 1"'
err=$(as_user srun -N1 -n2 --cdl-mps ./task.sh 2>&1)
rc=$?
check "--cdl-mps without GPUs: refused, saying how to ask for them" \
    eval '[ $rc != 0 ] && echo "$err" | grep -q "no GPUs on this node" && ! echo "$err" | grep -q "^T"'
check "nothing left after the refused steps" runtime_empty

# 2b. A job submitted with --cdl-mps: sbatch forwards the option to every
# step, but only steps that put several replicas on a GPU get a daemon. A
# set-up step (one task, or one task per node) and a step with a GPU per
# task start none (they used to start one per node each), and their tasks
# keep the step's GPUs and get no MPS variables.
rm -f "$RECORDS"/rec.*
user_script setup.sh <<'EOF2'
#!/bin/sh
echo "S$SLURM_STEP_ID.$SLURM_PROCID node=$SLURMD_NODENAME pipe=${CUDA_MPS_PIPE_DIRECTORY-unset} pct=${CUDA_MPS_ACTIVE_THREAD_PERCENTAGE-unset} rpg=$CDL_REPLICAS_PER_GPU"
EOF2
user_script mpsjob.sh <<'EOF2'
#!/bin/sh
srun -N1 -n1 ./setup.sh
srun -N2 -n2 --ntasks-per-node=1 ./setup.sh
srun --overlap -N1 -n1 --gres=gpu:1 ./setup.sh
srun --gres=gpu:2 ./setup.sh
srun --gres=gpu:1 ./task.sh
EOF2
id=$(submit -N2 --ntasks-per-node=2 --gres=gpu:2 --cdl-mps -o mpsjob.out ./mpsjob.sh)
state=$(wait_job "$id")
out=$(cat "$WORK/mpsjob.out")
echo "$out"
check "sbatch --cdl-mps job completed ($state)" test "${state%% *}" = JobState=COMPLETED
check "one-task and one-task-per-node steps: no MPS variables, one replica per GPU" \
    test "$(echo "$out" | grep -E '^S[012]\.' | grep -c 'pipe=unset pct=unset rpg=1$')" = 4
check "a step with a GPU per task (2 tasks, 2 GPUs a node): no MPS either" \
    test "$(echo "$out" | grep '^S3\.' | grep -c 'pipe=unset pct=unset rpg=1$')" = 4
check "the step sharing one GPU per node: 4 tasks reached their daemon" \
    test "$(echo "$out" | grep -c 'answer=yes')" = 4
check "daemons only for that step: one per node (2 starts, not one per step and node)" \
    test "$(count_records start)/$(count_records daemon)/$(count_records daemon "/$id\.4\.n[12]/pipe\$")" = 2/2/2
check "nothing left after the job" runtime_empty

# 3. scancel of a running step.
control_up() { ls "$RUNTIME"/*/pipe/control >/dev/null 2>&1; }
as_user srun -N1 -n2 --gres=gpu:1 --cdl-mps sleep 60 >/dev/null 2>&1 &
wait_until "$JOB_TIMEOUT" control_up
job=$(running_job)
check "scancel: daemon up while the step runs" eval '[ -n "$job" ] && ! no_user_daemon'
scancel "$job"
check "scancel: directories gone" wait_until 30 runtime_empty
check "scancel: daemon gone" wait_until 30 no_user_daemon
wait

# 3b. slurmd restarted (an upgrade) while the step runs: the step's own
# slurmstepd still stops the daemon and removes its directory at the end.
rm -f "$WORK/go"
user_script wait-go.sh <<EOF2
#!/bin/sh
i=0; while [ ! -e "$WORK/go" ] && [ \$i -lt 1200 ]; do sleep 0.05; i=\$((i + 1)); done
EOF2
as_user srun -N1 -n2 -w n1 --gres=gpu:1 --cdl-mps ./wait-go.sh >/dev/null 2>&1 &
wait_until "$JOB_TIMEOUT" control_up
check "slurmd restart: n1's slurmd comes back while the step runs" \
    "$SLURM_TESTS_DIR/cluster.sh" restart "$CDL_CLUSTER_DIR" n1
check "slurmd restart: the daemon still runs" eval '! no_user_daemon'
touch "$WORK/go"
wait
check "slurmd restart: directories gone at the step's end" wait_until 30 runtime_empty
check "slurmd restart: daemon gone" wait_until 30 no_user_daemon

# 4. SIGKILL of one task: the other still has the daemon; all gone after.
user_script kill_one.sh <<EOF
#!/bin/sh
if [ "\$SLURM_LOCALID" = 0 ]; then echo \$\$ > victim.pid; kill -9 \$\$; fi
i=0
until [ -s victim.pid ] && ! kill -0 "\$(cat victim.pid)" 2>/dev/null; do
    i=\$((i + 1)); [ \$i -lt 400 ] || exit 3; sleep 0.05
done
echo get_server_list | $FAKE >/dev/null 2>&1 && echo survivor-answered
EOF
rm -f "$WORK/victim.pid"
out=$(as_user srun -N1 -n2 --gres=gpu:1 --cdl-mps ./kill_one.sh 2>&1)
echo "$out"
check "after SIGKILL of task 0, task 1 still reaches the daemon" eval 'echo "$out" | grep -q survivor-answered'
check "SIGKILL of a task: directories gone after the step" wait_until 30 runtime_empty
check "SIGKILL of a task: daemon gone" wait_until 30 no_user_daemon

# 5. slurmstepd killed: the daemon is orphaned; the job epilog removes it.
as_user srun -N1 -n2 -w n1 --gres=gpu:1 --cdl-mps sleep 60 >/dev/null 2>&1 &
wait_until "$JOB_TIMEOUT" control_up
job=$(running_job)
tasks=$(scontrol listpids "$job" 2>/dev/null | awk 'NR > 1 && $1 ~ /^[0-9]+$/ {print $1}')
task=$(echo "$tasks" | head -1)
stepd=$(ps -o ppid= -p "${task:-0}" 2>/dev/null | tr -d ' ')
check "found the step's slurmstepd" eval '[ -n "$stepd" ] && [ "$(ps -o comm= -p "$stepd")" = slurmstepd ]'
[ -n "$stepd" ] && kill -KILL "$stepd"
check "after the crash the daemon is still there" eval '! no_user_daemon && ! runtime_empty'
scancel "$job"
check "epilog: directories of the crashed step gone" wait_until 30 runtime_empty
check "epilog: its daemon gone" wait_until 30 no_user_daemon
# shellcheck disable=SC2086
[ -n "$tasks" ] && kill -KILL $tasks 2>/dev/null   # the orphaned `sleep 60`s
wait
grep "cdl: epilog" "$CDL_CLUSTER_DIR/log/slurmd.n1.log"

finish
