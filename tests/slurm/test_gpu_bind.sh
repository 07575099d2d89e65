#!/bin/bash
# Slurm's own per-task GPU binding under --cdl-ddp and --cdl-mps, on nodes
# of 8 fake GPUs (cluster.sh with CDL_GPUS=8):
#  - srun -n4 --gpus-per-task=2 --cdl-ddp: each task sees its own two GPUs
#    and the contract says CDL_GPU_BIND=task; cdl-train (fake GPUs) opens
#    each task's first GPU and trains. It picked by LOCAL_RANK, and ranks
#    2 and 3 failed: "needs GPU 2, but only 2 are visible";
#  - tasks that see all of the step's GPUs (--gres=gpu:4): no CDL_GPU_BIND,
#    and a value exported in the submit shell is removed;
#  - --cdl-bind=closest near each task's first GPU under --gpus-per-task;
#  - --gpu-bind=mask_gpu (masks may overlap): the slot rule, no CDL_GPU_BIND;
#  - --cdl-mps with the user's --gpu-bind=map_gpu:... : refused with the
#    reason (the plugin's packing replaced the binding without a word).
set -u
. "${top_srcdir:-.}/tests/slurm/lib.sh"
FAKE_TRAIN=$(readlink -f "$top_builddir/tests/fakegpu/cdl-train" 2>/dev/null)
require_cluster_tools
CDL_GPUS=8 start_cluster

user_script show.sh <<'EOF'
#!/bin/sh
echo "T$SLURM_LOCALID CVD=${CUDA_VISIBLE_DEVICES-unset} BIND=${CDL_GPU_BIND-unset}" \
  "MPS=${CUDA_MPS_PIPE_DIRECTORY:+yes}"
EOF
tasks() { echo "$1" | grep '^T' | sort -k1.2n | tr '\n' ' '; }

out=$(as_user srun -w n1 -n4 --gpus-per-task=2 --cdl-ddp ./show.sh 2>&1)
check "--gpus-per-task=2 --cdl-ddp: each task its own 2 GPUs, CDL_GPU_BIND=task" \
    test "$(tasks "$out")" = "T0 CVD=0,1 BIND=task MPS= T1 CVD=2,3 BIND=task MPS= \
T2 CVD=4,5 BIND=task MPS= T3 CVD=6,7 BIND=task MPS= " || echo "$out"

# --cdl-bind=closest binds each task near the GPU it opens, its first:
# task 2 has GPUs 4 and 5 (it was bound near GPU 2, the slot rule's).
as_user srun -w n1 -n4 --gpus-per-task=2 --cdl-ddp --cdl-bind=closest,verbose ./show.sh \
    >"$WORK/out" 2>"$WORK/err"
check "--gpus-per-task=2 --cdl-bind=closest: tasks near GPUs 0, 2, 4, 6" \
    test "$(sed -n 's/.*cdl: --cdl-bind=closest: task \([0-9]*\) (local [0-9]*, GPU \(-*[0-9]*\)).*/\1:\2/p' \
            "$WORK/err" | sort -n | tr '\n' ' ')" = "0:0 1:2 2:4 3:6 " || cat "$WORK/err"

# Masks may overlap: both tasks see GPUs 0 and 1, and the slot rule (not
# "the first") keeps them apart.
out=$(as_user srun -w n1 -n2 --gres=gpu:2 --gpu-bind=mask_gpu:0x3,0x3 --cdl-ddp ./show.sh 2>&1)
check "--gpu-bind=mask_gpu:0x3,0x3: both tasks see GPUs 0,1, no CDL_GPU_BIND" \
    test "$(tasks "$out")" = "T0 CVD=0,1 BIND=unset MPS= T1 CVD=0,1 BIND=unset MPS= " || echo "$out"

out=$(as_user_env CDL_GPU_BIND=task -- srun -w n1 -n2 --gres=gpu:4 --cdl-ddp ./show.sh 2>&1)
check "--gres=gpu:4: tasks see the step's GPUs, a CDL_GPU_BIND from the shell is removed" \
    test "$(tasks "$out")" = "T0 CVD=0,1,2,3 BIND=unset MPS= T1 CVD=0,1,2,3 BIND=unset MPS= " ||
    echo "$out"

if [ -n "$FAKE_TRAIN" ] && [ -x "$FAKE_TRAIN" ]; then
    out=$(as_user_env OPENBLAS_NUM_THREADS=1 CDL_FAKE_GPUS=8 -- srun -w n1 -n4 --gpus-per-task=2 \
          --cdl-ddp "$FAKE_TRAIN" --dataset synthetic --synthetic-size 64 --epochs 1 --workers 0 \
          --threads 1 --batch-size 8 --device cuda --no-progress 2>&1)
    rc=$?
    check "--gpus-per-task=2 --cdl-ddp: cdl-train (fake GPUs) on 4 ranks trains" \
        eval '[ $rc = 0 ] && ! echo "$out" | grep -q "needs GPU"' || echo "$out" | tail -n 8
else
    echo "skipped: cdl-train on fake GPUs (tests/fakegpu/cdl-train not built)"
fi

# --cdl-mps packs tasks itself; the user's own map is refused, not dropped.
out=$(as_user srun -w n1 -n4 --gres=gpu:2 --gpu-bind=map_gpu:1,0,1,0 --cdl-mps ./show.sh 2>&1)
rc=$?
check "--cdl-mps --gpu-bind=map_gpu:1,0,1,0: refused, naming both, no task ran" \
    eval '[ $rc != 0 ] && ! echo "$out" | grep -q "^T" &&
          echo "$out" | grep -q "cdl: --cdl-mps packs 2 tasks per GPU itself and would replace srun --gpu-bind=map_gpu:1,0,1,0"' ||
    echo "$out"
wait_until 30 runtime_empty
check "the refused step's MPS daemon is gone" no_user_daemon
out=$(as_user srun -w n1 -n4 --gres=gpu:2 --cdl-mps ./show.sh 2>&1)
check "--cdl-mps without --gpu-bind still packs 2 per GPU under MPS" \
    test "$(tasks "$out")" = "T0 CVD=0 BIND=unset MPS=yes T1 CVD=0 BIND=unset MPS=yes \
T2 CVD=1 BIND=unset MPS=yes T3 CVD=1 BIND=unset MPS=yes " || echo "$out"

finish
