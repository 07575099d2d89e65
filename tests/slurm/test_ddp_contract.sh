#!/bin/bash
# srun --cdl-ddp on a real Slurm: the rank contract on every task.
set -u
. "${top_srcdir:-.}/tests/slurm/lib.sh"
require_cluster_tools
start_cluster

# Each task prints its contract next to Slurm's own view of it.
user_script show.sh <<'EOF'
#!/bin/sh
echo "T$SLURM_PROCID procid=$SLURM_PROCID localid=$SLURM_LOCALID nodeid=$SLURM_NODEID" \
  "node=$SLURMD_NODENAME job=$SLURM_JOB_ID step=$SLURM_STEP_ID" \
  "RANK=${RANK-unset} WORLD_SIZE=${WORLD_SIZE-unset} LOCAL_RANK=${LOCAL_RANK-unset}" \
  "LOCAL_WORLD_SIZE=${LOCAL_WORLD_SIZE-unset} GROUP_RANK=${GROUP_RANK-unset}" \
  "NODE_RANK=${NODE_RANK-unset} MASTER_ADDR=${MASTER_ADDR-unset} MASTER_PORT=${MASTER_PORT-unset}" \
  "CDL_NNODES=${CDL_NNODES-unset} CDL_REPLICAS_PER_GPU=${CDL_REPLICAS_PER_GPU-unset}" \
  "CDL_JOB_ID=${CDL_JOB_ID-unset} CDL_LAUNCHER=${CDL_LAUNCHER-unset}" \
  "OMP_NUM_THREADS=${OMP_NUM_THREADS-unset} TOKEN=${CDL_STORE_TOKEN-unset}"
EOF

field() { echo "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"; }

# check_contract OUTPUT NTASKS NNODES TASKS_PER_NODE MASTER OMP
check_contract() {
    local out=$1 n=$2 nn=$3 per=$4 master=$5 omp=$6 ports line t ok=1
    [ "$(echo "$out" | grep -c '^T')" = "$n" ] || { echo "want $n tasks:"; echo "$out"; return 1; }
    for t in $(seq 0 $((n - 1))); do
        line=$(echo "$out" | grep "^T$t ")
        [ "$(field "$line" RANK)" = "$t" ] || { echo "RANK: $line"; ok=0; }
        [ "$(field "$line" WORLD_SIZE)" = "$n" ] || { echo "WORLD_SIZE: $line"; ok=0; }
        [ "$(field "$line" LOCAL_RANK)" = "$(field "$line" localid)" ] || { echo "LOCAL_RANK: $line"; ok=0; }
        [ "$(field "$line" LOCAL_WORLD_SIZE)" = "$per" ] || { echo "LOCAL_WORLD_SIZE: $line"; ok=0; }
        [ "$(field "$line" GROUP_RANK)" = "$(field "$line" nodeid)" ] || { echo "GROUP_RANK: $line"; ok=0; }
        [ "$(field "$line" NODE_RANK)" = "$(field "$line" nodeid)" ] || { echo "NODE_RANK: $line"; ok=0; }
        [ "$(field "$line" MASTER_ADDR)" = "$master" ] || { echo "MASTER_ADDR: $line"; ok=0; }
        [ "$(field "$line" CDL_NNODES)" = "$nn" ] || { echo "CDL_NNODES: $line"; ok=0; }
        [ "$(field "$line" CDL_REPLICAS_PER_GPU)" = 1 ] || { echo "CDL_REPLICAS_PER_GPU: $line"; ok=0; }
        [ "$(field "$line" CDL_JOB_ID)" = "$(field "$line" job).$(field "$line" step)" ] ||
            { echo "CDL_JOB_ID: $line"; ok=0; }
        [ "$(field "$line" CDL_LAUNCHER)" = slurm ] || { echo "CDL_LAUNCHER: $line"; ok=0; }
        [ "$(field "$line" OMP_NUM_THREADS)" = "$omp" ] || { echo "OMP_NUM_THREADS: $line"; ok=0; }
    done
    ports=$(for t in $(seq 0 $((n - 1))); do field "$(echo "$out" | grep "^T$t ")" MASTER_PORT; done | sort -u)
    [ "$(echo "$ports" | wc -l)" = 1 ] || { echo "MASTER_PORT differs between tasks: $ports"; ok=0; }
    # The harness's admin range (no ports reserved by Slurm in this cluster).
    [ "$ports" -ge "$CDL_PORT_LO" ] && [ "$ports" -le "$CDL_PORT_HI" ] ||
        { echo "MASTER_PORT $ports outside $CDL_PORT_LO-$CDL_PORT_HI"; ok=0; }
    [ "$ok" = 1 ]
}

out=$(as_user srun -N2 --ntasks-per-node=2 --cdl-ddp ./show.sh)
echo "$out"
check "srun -N2 --ntasks-per-node=2 --cdl-ddp: contract on every task" \
    check_contract "$out" 4 2 2 n1 1
check "tasks 0,1 on n1 and 2,3 on n2" \
    test "$(echo "$out" | grep -E '^T[01] ' | grep -c node=n1)$(echo "$out" | grep -E '^T[23] ' | grep -c node=n2)" = 22

tokens() { echo "$1" | tr ' ' '\n' | sed -n 's/^TOKEN=//p' | sort -u; }
tok1=$(tokens "$out")
check "a two-node step: one store secret on every task, 64 hex digits (issue 13 item 1)" \
    eval '[ "$(echo "$tok1" | wc -l)" = 1 ] && echo "$tok1" | grep -Eq "^[0-9a-f]{64}$"'

out=$(as_user srun -N2 --ntasks-per-node=1 -c 2 --cdl-ddp ./show.sh)
check "-c 2: OMP_NUM_THREADS=2 (CPUs per task)" check_contract "$out" 2 2 1 n1 2
check "another step: another secret" eval '[ -n "$(tokens "$out")" ] && [ "$(tokens "$out")" != "$tok1" ]'
out=$(as_user_env CDL_STORE_TOKEN=guessable -- srun -N1 -n2 --cdl-ddp ./show.sh)
check "a one-node step: a random secret, not one from the submit shell" \
    eval '[ "$(tokens "$out" | wc -l)" = 1 ] && tokens "$out" | grep -Eq "^[0-9a-f]{32}$"'

out=$(as_user srun -N2 --ntasks-per-node=2 -m cyclic --cdl-ddp ./show.sh)
check "-m cyclic: RANK is the global task id, LOCAL_RANK Slurm's local id" \
    check_contract "$out" 4 2 2 n1 1
check "-m cyclic: task 1 on n2" test "$(field "$(echo "$out" | grep '^T1 ')" node)" = n2

out=$(as_user srun -N1 -n1 ./show.sh)
check "without --cdl-ddp nothing is exported" \
    test "$(field "$out" RANK)$(field "$out" MASTER_ADDR)$(field "$out" CDL_LAUNCHER)" = unsetunsetunset

# A contract variable exported in the submit shell does not survive (two
# tasks would share RANK=5); stale store sockets are removed; the tuning knob
# OMP_NUM_THREADS is the user's.
out=$(as_user_env RANK=5 MASTER_PORT=3456 CDL_STORE_FD=7 OMP_NUM_THREADS=7 -- \
      srun -N2 --ntasks-per-node=1 --cdl-ddp sh -c './show.sh; echo "T$SLURM_PROCID FD=${CDL_STORE_FD-unset}"')
echo "$out"
check "RANK and MASTER_PORT from the submit shell are replaced" \
    eval 'test "$(echo "$out" | grep -c "RANK=[01] WORLD_SIZE=2")" = 2 && ! echo "$out" | grep -q "MASTER_PORT=3456"'
check "CDL_STORE_FD from the submit shell is removed" test "$(echo "$out" | grep -c 'FD=unset')" = 2
check "the user's OMP_NUM_THREADS is kept" test "$(echo "$out" | grep -c 'OMP_NUM_THREADS=7')" = 2

# MASTER_ADDR is the node of task 0 of this step, not of the job: a job on
# both nodes whose step runs on the second one only.
user_script step_on_n2.sh <<'EOF'
#!/bin/sh
srun -N1 -n1 -w n2 --cdl-ddp ./show.sh
EOF
out=$(as_user salloc -N2 -n2 ./step_on_n2.sh 2>/dev/null)
echo "$out"
check "a step on n2 inside a job on n[1-2] gets MASTER_ADDR=n2" \
    test "$(field "$(echo "$out" | grep '^T0 ')" MASTER_ADDR)" = n2

# An srun inside a --cdl-ddp step: its tasks inherit the outer contract
# (RANK=1 of 2, CDL_LAUNCHER=slurm, the outer CDL_JOB_ID), which is replaced.
user_script nested.sh <<'EOF'
#!/bin/sh
[ "$RANK" = 1 ] || exit 0
srun --overlap -N1 -n1 --cdl-ddp ./show.sh
EOF
out=$(as_user salloc -N1 -n2 srun -n2 --cdl-ddp ./nested.sh 2>/dev/null)
echo "$out"
line=$(echo "$out" | grep '^T0 ')
check "a step inside a --cdl-ddp step gets its own contract (RANK=0 of 1)" \
    test "$(field "$line" RANK)/$(field "$line" WORLD_SIZE)/$(field "$line" CDL_JOB_ID)" = \
    "0/1/$(field "$line" job).$(field "$line" step)"

# A heterogeneous step: each component numbers its tasks from 0 (two tasks
# had RANK=0); refused with a message, as -m arbitrary is. Component 0's
# task must not run either: it used to start alone with WORLD_SIZE=1.
err=$(as_user salloc -n1 -w n1 : -n1 -w n2 srun --het-group=0,1 --cdl-ddp ./show.sh 2>&1)
rc=$?
echo "$err" | tail -5
check "a heterogeneous step fails with a message naming it" \
    eval '[ $rc != 0 ] && echo "$err" | grep -q "heterogeneous steps"'
check "... and no task of any component ran (component 0's neither)" \
    eval '! echo "$err" | grep -q "^T"'
err=$(as_user srun -n1 -w n1 --cdl-ddp ./show.sh : -n2 -w n2 ./show.sh 2>&1)
rc=$?
check "srun A : B --cdl-ddp: refused, no task ran" \
    eval '[ $rc != 0 ] && echo "$err" | grep -q "heterogeneous steps" && ! echo "$err" | grep -q "^T"'
# A homogeneous step inside a heterogeneous job (SLURM_HET_SIZE is in its
# environment) is an ordinary step. (Its CDL_JOB_ID names the component's
# own job id, which SLURM_JOB_ID, the leader's, does not show.)
out=$(as_user salloc -n1 -w n1 : -n2 -w n2 srun --het-group=1 --cdl-ddp ./show.sh 2>/dev/null)
echo "$out"
check "a one-component step of a heterogeneous job gets the contract" \
    test "$(echo "$out" | grep '^T' | sort | while read -r line; do
                echo "$(field "$line" RANK)/$(field "$line" WORLD_SIZE)/$(field "$line" MASTER_ADDR)"
            done | tr '\n' ' ')" = "0/2/n2 1/2/n2 "

# -m arbitrary: refused with a message (no node can tell where task 0 is).
printf 'n2\nn1\n' >"$WORK/hosts"
chmod 0644 "$WORK/hosts"
err=$(as_user_env SLURM_HOSTFILE="$WORK/hosts" -- srun -N2 -n2 -m arbitrary --cdl-ddp ./show.sh 2>&1)
rc=$?
check "-m arbitrary fails with a message naming it" \
    eval '[ $rc != 0 ] && echo "$err" | grep -q "with -m arbitrary"'

finish
