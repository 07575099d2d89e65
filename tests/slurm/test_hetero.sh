#!/bin/bash
# A heterogeneous site (cluster.sh with CDL_HETERO=1): n1 has 4 CPUs and two
# a100 GPUs, n2 2 CPUs and one t4; partitions all (both), big (n1), small
# (n2). What --cdl-ddp and --cdl-mps give when nodes differ and ranks are
# spread unevenly, and that training does not depend on the placement:
#  - the contract of uneven layouts (-n3 on two nodes, block and cyclic,
#    -m plane, a one-partition step, GPUs typed --gres=gpu:a100:2);
#  - --cdl-mps on nodes with different GPU counts (--gpus=3 over both);
#  - srun --ntasks-per-gpu=2 --cdl-ddp: Slurm puts two tasks on each GPU
#    itself; the contract says CDL_REPLICAS_PER_GPU=2 (it said 1, and
#    cdl-train refused the ranks sharing a GPU, telling the user to set a
#    variable the contract replaces), and cdl-train on fake GPUs trains;
#  - --cdl-bind=closest near the GPU Slurm gave each task (--gpu-bind=
#    map_gpu, --ntasks-per-gpu);
#  - 3 ranks of cdl-train, 2 on n1 and 1 on n2 (block, cyclic), take the
#    same step as 3 ranks on one node and as one process with their global
#    batch (tests/dist/step_equiv.sh);
#  - hand-exported variables (no --cdl-ddp) of 2+1 ranks: without
#    CDL_NNODES an error that names it, with it training;
#  - a heterogeneous job (#SBATCH hetjob, #SBATCH --cdl-mps for its GPU
#    component): a step of one component gets the contract, the CPU
#    component's steps run (they failed, asking for GPUs), a step over
#    both is refused with the reason.
set -u
. "${top_srcdir:-.}/tests/slurm/lib.sh"
CDL_TRAIN_BIN=${CDL_TRAIN_BIN:-$(readlink -f "$top_builddir/cli/cdl-train" 2>/dev/null)}
FAKE_TRAIN=$(readlink -f "$top_builddir/tests/fakegpu/cdl-train" 2>/dev/null)
[ -n "$CDL_TRAIN_BIN" ] && [ -x "$CDL_TRAIN_BIN" ] || skip "cli/cdl-train is not built yet"
require_cluster_tools
CDL_HETERO=1 start_cluster
runuser -u "$CDL_TEST_USER" -- test -x "$CDL_TRAIN_BIN" || skip "$CDL_TRAIN_BIN not executable by $CDL_TEST_USER"

user_script show.sh <<'EOF'
#!/bin/sh
echo "T$SLURM_PROCID node=$SLURMD_NODENAME localid=$SLURM_LOCALID nodeid=$SLURM_NODEID" \
  "RANK=${RANK-unset} WORLD_SIZE=${WORLD_SIZE-unset} LOCAL_RANK=${LOCAL_RANK-unset}" \
  "LOCAL_WORLD_SIZE=${LOCAL_WORLD_SIZE-unset} NODE_RANK=${NODE_RANK-unset}" \
  "MASTER_ADDR=${MASTER_ADDR-unset} CDL_NNODES=${CDL_NNODES-unset}" \
  "CDL_REPLICAS_PER_GPU=${CDL_REPLICAS_PER_GPU-unset} CVD=${CUDA_VISIBLE_DEVICES-unset}" \
  "MPS=${CUDA_MPS_PIPE_DIRECTORY:+yes}"
EOF

field() { echo "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"; }

# layout OUTPUT: "RANK:node:LOCAL_RANK/LOCAL_WORLD_SIZE:NODE_RANK:WORLD_SIZE:MASTER_ADDR:NNODES
# ..." in task order, each checked against Slurm's own ids first.
layout() {
    local line out=
    while read -r line; do
        [ "T$(field "$line" RANK)" = "${line%% *}" ] ||
            { echo "RANK is not SLURM_PROCID: $line"; return 1; }
        [ "$(field "$line" LOCAL_RANK)" = "$(field "$line" localid)" ] ||
            { echo "LOCAL_RANK is not SLURM_LOCALID: $line"; return 1; }
        [ "$(field "$line" NODE_RANK)" = "$(field "$line" nodeid)" ] ||
            { echo "NODE_RANK is not SLURM_NODEID: $line"; return 1; }
        out="$out$(field "$line" RANK):$(field "$line" node):$(field "$line" LOCAL_RANK)/$(field "$line" LOCAL_WORLD_SIZE)"
        out="$out:$(field "$line" NODE_RANK):$(field "$line" WORLD_SIZE):$(field "$line" MASTER_ADDR):$(field "$line" CDL_NNODES) "
    done < <(echo "$1" | grep '^T' | sort -k1.2n)
    echo "$out"
}

expect_layout() {   # expect_layout WHAT WANT SRUN-ARGS...
    local what=$1 want=$2 out got; shift 2
    out=$(as_user srun "$@" --cdl-ddp ./show.sh 2>&1)
    got=$(layout "$out")
    check "$what" test "$got" = "$want" || { echo "want: $want"; echo "got:  $got"; echo "$out"; }
}

expect_layout "-N2 -n3: 2 ranks on n1, 1 on n2, LOCAL_WORLD_SIZE per node" \
    "0:n1:0/2:0:3:n1:2 1:n1:1/2:0:3:n1:2 2:n2:0/1:1:3:n1:2 " -N2 -n3
expect_layout "-N2 -n3 -m cyclic: rank 1 alone on n2, rank 2 local 1 on n1" \
    "0:n1:0/2:0:3:n1:2 1:n2:0/1:1:3:n1:2 2:n1:1/2:0:3:n1:2 " -N2 -n3 -m cyclic
expect_layout "-N2 -n4 -m plane=3: 3 on n1, 1 on n2" \
    "0:n1:0/3:0:4:n1:2 1:n1:1/3:0:4:n1:2 2:n1:2/3:0:4:n1:2 3:n2:0/1:1:4:n1:2 " -N2 -n4 -m plane=3
expect_layout "-p small -n2: a step of the small partition, MASTER_ADDR its node" \
    "0:n2:0/2:0:2:n2:1 1:n2:1/2:0:2:n2:1 " -p small -n2

# GPUs by type: the a100s of n1.
out=$(as_user srun -p big -n2 --gres=gpu:a100:2 --cdl-ddp ./show.sh 2>&1)
check "--gres=gpu:a100:2: both tasks see n1's two GPUs, one replica per GPU" \
    test "$(echo "$out" | grep -c 'CDL_REPLICAS_PER_GPU=1 CVD=0,1 ')" = 2 || echo "$out"

# --cdl-mps over nodes with different GPU counts: 3 tasks on n1's 2 GPUs pack
# two to a GPU, n2's one task has its GPU alone (no daemon there).
out=$(as_user srun -N2 -n4 --gpus=3 --cdl-mps ./show.sh 2>&1)
echo "$out"
got=$(echo "$out" | grep '^T' | sort -k1.2n | while read -r l; do
          printf '%s:%s:%s:%s ' "$(field "$l" node)" "$(field "$l" CDL_REPLICAS_PER_GPU)" \
              "$(field "$l" CVD)" "$(field "$l" MPS)"; done)
check "--gpus=3 --cdl-mps: n1 packs 2 per GPU under MPS, n2 runs alone without" \
    test "$got" = "n1:2:0:yes n1:2:0:yes n1:2:1:yes n2:1:0: "

# srun --ntasks-per-gpu=2: Slurm shares each GPU between two consecutive
# tasks itself; the contract must say so.
out=$(as_user srun -p big -n4 --ntasks-per-gpu=2 --cdl-ddp ./show.sh 2>&1)
echo "$out"
got=$(echo "$out" | grep '^T' | sort -k1.2n | while read -r l; do
          printf '%s:%s ' "$(field "$l" CDL_REPLICAS_PER_GPU)" "$(field "$l" CVD)"; done)
check "--ntasks-per-gpu=2 --cdl-ddp: CDL_REPLICAS_PER_GPU=2, tasks 0,1 on GPU 0 and 2,3 on GPU 1" \
    test "$got" = "2:0 2:0 2:1 2:1 "
# --cdl-bind=closest binds near the GPU each task has: Slurm's, where Slurm
# bound GPUs to tasks (map_gpu: task 0 has GPU 1, and was bound near GPU 0;
# --ntasks-per-gpu: tasks 2 and 3 were bound as if they had none).
gpus_bound() {   # the "task T ... GPU G" pairs of --cdl-bind=closest,verbose
    sed -n 's/.*cdl: --cdl-bind=closest: task \([0-9]*\) (local [0-9]*, GPU \(-*[0-9]*\)).*/\1:\2/p' "$1" |
        sort -n | tr '\n' ' '
}
as_user srun -p big -n2 --gres=gpu:2 --gpu-bind=map_gpu:1,0 --cdl-ddp --cdl-bind=closest,verbose \
    ./show.sh >"$WORK/out" 2>"$WORK/err"
check "--gpu-bind=map_gpu:1,0 --cdl-bind=closest: task 0 near GPU 1, task 1 near GPU 0" \
    test "$(gpus_bound "$WORK/err")" = "0:1 1:0 " || cat "$WORK/err"
as_user srun -p big -n4 --ntasks-per-gpu=2 --cdl-ddp --cdl-bind=closest,verbose \
    ./show.sh >"$WORK/out" 2>"$WORK/err"
check "--ntasks-per-gpu=2 --cdl-bind=closest: tasks 0,1 near GPU 0, 2,3 near GPU 1" \
    test "$(gpus_bound "$WORK/err")" = "0:0 1:0 2:1 3:1 " || cat "$WORK/err"
if [ -n "$FAKE_TRAIN" ] && [ -x "$FAKE_TRAIN" ]; then
    out=$(as_user_env OPENBLAS_NUM_THREADS=1 CDL_FAKE_GPUS=2 -- srun -p big -n4 --ntasks-per-gpu=2 \
          --cdl-ddp "$FAKE_TRAIN" --dataset synthetic --synthetic-size 64 --epochs 1 --workers 0 \
          --threads 1 --batch-size 8 --device cuda --no-progress 2>&1)
    rc=$?
    check "--ntasks-per-gpu=2 --cdl-ddp: cdl-train (fake GPUs) trains, reducing per GPU first" \
        eval '[ $rc = 0 ] && echo "$out" | grep -q "collectives over hier:nccl"' || echo "$out" | tail -n 5
else
    echo "skipped: cdl-train on fake GPUs (tests/fakegpu/cdl-train not built)"
fi

# Training: the placement of 3 ranks does not change the step. One process
# trains STEPS steps with the global batch; from its checkpoint each layout
# takes one step.
STEPS=5
B=16
builddir=$top_builddir tmp=$WORK
. "$top_srcdir/tests/dist/step_equiv.sh"
chmod 0644 "$STEP_MODEL"
common="--model $STEP_MODEL --dataset fashion-mnist --data-dir /usr/share/datasets/fashion-mnist
        --device cpu --epochs 1
        --lr 0.01 --optimizer sgd --momentum 0.9 --weight-decay 0 --schedule constant
        --warmup-epochs 0 --threads 1 --workers 0 --seed 7 -q"
# shellcheck disable=SC2086
as_user_env OPENBLAS_NUM_THREADS=1 -- srun -n1 "$CDL_TRAIN_BIN" $common --batch-size $((3 * B)) \
    --max-steps $STEPS --resume never --ckpt-dir base >"$WORK/base.log" 2>&1
check "one process trained $STEPS steps" test $? = 0 || tail -n 20 "$WORK/base.log"
from="--max-steps $((STEPS + 1)) --resume-allow batch-size --resume $WORK/base/last.safetensors"
train_step() {   # train_step DIR SRUN-ARGS...: one step of 3 ranks into DIR
    local dir=$1; shift
    # shellcheck disable=SC2086
    as_user_env OPENBLAS_NUM_THREADS=1 -- srun "$@" "$CDL_TRAIN_BIN" $common --batch-size $B $from \
        --ckpt-dir "$dir" >"$WORK/$dir.log" 2>&1
    check "3 ranks ($*) took the step" test $? = 0 || tail -n 20 "$WORK/$dir.log"
}
# shellcheck disable=SC2086
as_user_env OPENBLAS_NUM_THREADS=1 -- srun -n1 "$CDL_TRAIN_BIN" $common --batch-size $((3 * B)) $from \
    --ckpt-dir single >"$WORK/single.log" 2>&1
check "one process took the step" test $? = 0 || tail -n 20 "$WORK/single.log"
train_step one -p big -n3 --cdl-ddp
train_step block -N2 -n3 --cdl-ddp
train_step cyclic -N2 -n3 -m cyclic --cdl-ddp
for run in one block cyclic; do
    step_same single $run "$WORK/base"
done
# Block placement adds n1's two ranks, then n2's: the same association as
# one node's left-to-right sum, so the same bits.
step_same one block "$WORK/base" 0

# A cluster guide's export script instead of --cdl-ddp, 2 ranks on n1 and 1
# on n2. Without CDL_NNODES a rank cannot tell the node count: n1's ranks
# took themselves for the only node ("LOCAL_WORLD_SIZE=2 differs from
# WORLD_SIZE=3 but there is one node (CDL_NNODES=1...)", a value nobody set).
user_script exports.sh <<EOF
#!/bin/sh
export RANK=\$SLURM_PROCID WORLD_SIZE=\$SLURM_NTASKS LOCAL_RANK=\$SLURM_LOCALID
export NODE_RANK=\$SLURM_NODEID MASTER_ADDR=\$(echo "\$SLURM_STEP_NODELIST" | sed 's/\[\([0-9]*\).*/\1/')
export LOCAL_WORLD_SIZE=\$(echo "\$SLURM_STEP_TASKS_PER_NODE" | tr ',' '\n' | sed -n "\$((SLURM_NODEID + 1))p" | sed 's/(.*//')
export MASTER_PORT=\$((CDL_PORT_LO + 50)) CDL_STORE_TOKEN=00112233445566778899aabbccddeeff
exec "$CDL_TRAIN_BIN" --dataset synthetic --synthetic-size 96 --epochs 1 --workers 0 --threads 1 \\
    --batch-size 8 --device cpu -q
EOF
out=$(as_user_env OPENBLAS_NUM_THREADS=1 CDL_TIMEOUT=20 CDL_PORT_LO="$CDL_PORT_LO" -- \
      srun -N2 -n3 --kill-on-bad-exit=1 ./exports.sh 2>&1)
rc=$?
check "hand-exported contract, 2+1 ranks, no CDL_NNODES: refused, naming CDL_NNODES" \
    eval '[ $rc != 0 ] && echo "$out" | grep -q "LOCAL_WORLD_SIZE=2 does not divide WORLD_SIZE=3.*export CDL_NNODES"' ||
    echo "$out" | tail -n 5
out=$(as_user_env OPENBLAS_NUM_THREADS=1 CDL_TIMEOUT=20 CDL_PORT_LO="$CDL_PORT_LO" CDL_NNODES=2 -- \
      srun -N2 -n3 --kill-on-bad-exit=1 ./exports.sh 2>&1)
check "... with CDL_NNODES=2 the 3 ranks train" test $? = 0 || echo "$out" | tail -n 5

# A heterogeneous job: GPU replicas packed under MPS in component 0, CPU
# workers in component 1. A step of one component is an ordinary step:
# sbatch's --cdl-mps reaches component 1 too, whose steps of two tasks
# failed ("the step has no GPUs on this node: request them"); it has none
# to share. A step over both components is refused with the reason, and
# none of its tasks runs.
cat >"$WORK/het.sbatch" <<'EOF'
#!/bin/bash
#SBATCH -p big -n2 --gres=gpu:1
#SBATCH --cdl-mps
#SBATCH hetjob
#SBATCH -p small -n2
srun ./show.sh
echo "--- cpu"
srun --het-group=1 ./show.sh
echo "--- cpu rc=$?"
echo "--- both"
srun --het-group=0,1 ./show.sh
echo "--- rc=$?"
EOF
chmod 0644 "$WORK/het.sbatch"
id=$(submit -o het.out het.sbatch)
state=$(wait_job "$id")
out=$(cat "$WORK/het.out" 2>/dev/null)
echo "$state"; echo "$out"
gpu=$(echo "$out" | sed '/^--- cpu$/,$d')
cpu=$(echo "$out" | sed -n '/^--- cpu$/,/^--- both$/p')
both=$(echo "$out" | sed -n '/^--- both$/,$p')
check "hetjob: srun (component 0) gets the contract of its 2 tasks on n1, packed on its GPU" \
    eval '[ "$(layout "$gpu")" = "0:n1:0/2:0:2:n1:1 1:n1:1/2:0:2:n1:1 " ] &&
          [ "$(echo "$gpu" | grep -c "CDL_REPLICAS_PER_GPU=2 CVD=0 MPS=yes")" = 2 ]'
check "hetjob: sbatch's --cdl-mps in the GPU-less component: 2 tasks run, no MPS" \
    eval '[ "$(layout "$cpu")" = "0:n2:0/2:0:2:n2:1 1:n2:1/2:0:2:n2:1 " ] &&
          [ "$(echo "$cpu" | grep -c "CDL_REPLICAS_PER_GPU=1 CVD=unset MPS=$")" = 2 ] &&
          echo "$cpu" | grep -q "^--- cpu rc=0"'
check "hetjob: srun --het-group=0,1 --cdl-ddp is refused with the reason, no task ran" \
    eval 'echo "$both" | grep -q "heterogeneous steps .*not supported: Slurm shows the plugin only its own component" &&
          ! echo "$both" | grep -q "^T" && echo "$both" | grep -q "^--- rc=[1-9]"'
# Outside a heterogeneous job a step without GPUs under --cdl-mps is still
# refused: there the user can request them.
err=$(as_user srun -p small -n2 --cdl-mps ./show.sh 2>&1)
rc=$?
check "-n2 --cdl-mps without GPUs, not a hetjob: refused, asking for GPUs" \
    eval '[ $rc != 0 ] && echo "$err" | grep -q "the step has no GPUs on this node"'

finish
