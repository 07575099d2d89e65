#!/bin/bash
# The Hugging Face Trainer under --cdl-ddp on the CPU (gloo), on the two
# emulated nodes, with templates/pytorch/train_hf.py (a small BERT built
# from a config, random tokens; nothing downloaded):
#   1. `srun -N2 --ntasks-per-node=2 --cdl-ddp python train_hf.py`: the
#      Trainer's process index, world size and local index are the plugin's
#      RANK, WORLD_SIZE and LOCAL_RANK; in one epoch the four ranks see
#      disjoint shards that together are the whole data set, and end with
#      the same weights;
#   2. an uneven layout (`-N2 -n3`: 2 ranks on n1, 1 on n2): 3 ranks, local
#      world sizes 2 and 1, every sample seen;
#   3. plain `srun -n2` without --cdl-ddp is refused by the script, naming
#      --cdl-ddp (each task would otherwise train the whole data alone);
#   0. (before the cluster) `cdlrun -n 2 python train_hf.py`: the same
#      without Slurm: 2 ranks, disjoint shards covering the data;
#   0b. a rank lost mid-run (rank 1 of 2 started by hand kills itself with
#      SIGKILL after step 2, as a dead node's rank): rank 0 names the loss
#      and exits 76, as train_ddp.py does, so that pytorch-requeue.sbatch
#      requeues the job; before, gloo's traceback and 1 (job FAILED);
#   0c. the GPU Accelerate opens, CUDA faked (no GPU needed): a rank with
#      LOCAL_RANK 1 that sees one GPU (CDL_GPU_BIND=task: --gpus-per-task)
#      gets cuda:0 from train_ddp.pin_accelerate_gpu, as TrainingArguments'
#      device, the current device and DDP without device_ids; without it,
#      cuda:1 and device_ids [1] (on a GPU: "invalid device ordinal");
#   4. templates/pytorch-requeue.sbatch with TRAIN_PY=pytorch/train_hf.py:
#      SIGUSR1 -> every rank stops after the same step -> the Trainer's
#      checkpoint -> exit 75 -> requeue -> resume_from_checkpoint, and the
#      final weights are bit for bit those of a run never interrupted.
#
# The packages: CDL_TEST_HF_VENV names a venv with transformers and
# accelerate over a PyTorch with gloo (e.g. one with PyTorch 2); otherwise
# a venv in the build tree (tests/slurm/hf-venv, removed by make clean)
# over Debian's python3-torch 1.13, with transformers 4.44.2 and accelerate
# 0.32.1 from PyPI (the last releases that run on torch 1.13 on the CPU).
# Without PyPI the test is skipped, saying so.
set -u
. "${top_srcdir:-.}/tests/slurm/lib.sh"
PY=${CDL_TEST_PYTHON:-/usr/bin/python3}
PINS="transformers==4.44.2 accelerate==0.32.1 huggingface_hub==0.24.6 tokenizers==0.19.1
      regex==2024.7.24 tqdm==4.66.5 filelock==3.15.4 packaging==24.1 fsspec==2024.6.1"
require_cluster_tools
if [ -n "${CDL_TEST_HF_VENV:-}" ]; then
    venv=$CDL_TEST_HF_VENV
    "$venv/bin/python" -c 'import transformers, accelerate' 2>/dev/null ||
        skip "CDL_TEST_HF_VENV=$venv has no transformers and accelerate"
else
    "$PY" -c 'import torch.distributed as d, numpy, psutil, yaml, safetensors, requests
assert d.is_gloo_available()' 2>/dev/null ||
        skip "$PY lacks PyTorch with gloo, numpy, psutil, yaml, safetensors or requests" \
             "(install python3-torch python3-numpy python3-psutil python3-yaml" \
             "python3-safetensors python3-requests), or set CDL_TEST_HF_VENV"
    # shellcheck disable=SC2086
    pypi_venv hf transformers $PINS
fi
"$venv/bin/python" -c 'import transformers, accelerate, torch
print("transformers", transformers.__version__, "accelerate", accelerate.__version__, "torch", torch.__version__)'

ranks() { echo "$1" | grep '^hf rank ' | sort -k3; }
# "hf rank R/W local L/LW device D steps S samples I,J,..."
# every_sample OUTPUT N: the ranks' samples are disjoint and are 0..N-1
every_sample() {
    [ "$(ranks "$1" | awk '{print $NF}' | tr ',' '\n' | sort -n | tr '\n' ' ')" = \
      "$(seq 0 $(($2 - 1)) | tr '\n' ' ')" ]
}

echo "== 0. cdlrun -n 2 python train_hf.py ($SECONDS s)"
scratch=$(mktemp -d /tmp/cdl-hf.XXXXXX)
cdlrun=$(cd "$top_builddir/launcher" && pwd)/cdlrun
script=$(cd "$top_srcdir/templates/pytorch" && pwd)/train_hf.py
out=$(cd "$scratch" && timeout 120 "$cdlrun" -n 2 "$venv/bin/python" "$script" --epochs 1 \
      --samples 128 2>&1)
rm -rf "$scratch"
ranks "$out" | cut -c1-80
check "cdlrun: the Trainer's ranks are 0/2 and 1/2, each its own half of the 128 samples" \
    eval '[ "$(ranks "$out" | awk "{print \$3, \$5}" | tr "\n" ,)" = "0/2 0/2,1/2 1/2," ] &&
          every_sample "$out" 128'

echo "== 0b. a rank lost mid-run: the other exits 76 ($SECONDS s)"
scratch=$(mktemp -d /tmp/cdl-hf.XXXXXX)
cat >"$scratch/kill1.py" <<'PY'
import os, signal, sys
sys.path.insert(0, os.path.dirname(sys.argv[1]))
sys.argv = sys.argv[1:]
import train_hf
if os.environ["RANK"] == "1":   # dies as a lost node's rank does: no word, sockets closed
    step_end = train_hf.StopOnSignal.on_step_end
    def die(self, args, state, control, **kw):
        if state.global_step == 2:
            os.kill(os.getpid(), signal.SIGKILL)
        return step_end(self, args, state, control, **kw)
    train_hf.StopOnSignal.on_step_end = die
train_hf.main()
PY
port=$(free_port)
for r in 0 1; do
    (cd "$scratch" && exec env WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 \
        MASTER_PORT="$port" OMP_NUM_THREADS=1 RANK=$r LOCAL_RANK=$r timeout 120 \
        "$venv/bin/python" kill1.py "$script" --epochs 1 --samples 256 --ckpt-dir ck \
        >"$scratch/r$r.out" 2>&1) &
    pids[r]=$!
done
wait "${pids[0]}"; rc0=$?
wait "${pids[1]}" 2>/dev/null; rc1=$?
tail -n 2 "$scratch/r0.out"
check "rank 1 killed ($rc1): rank 0 named the loss and its address and exited 76 ($rc0), not 1" \
    eval '[ "$rc1" = 137 ] && [ "$rc0" = 76 ] &&
          grep -q "^rank 0: a rank of this run was lost at 127.0.0.1:[0-9]* (its process or node died" "$scratch/r0.out" &&
          grep -q "^rank 0: exit status 76; start the run again" "$scratch/r0.out"'
rm -rf "$scratch"

echo "== 0c. the GPU Accelerate opens under per-task binding, CUDA faked ($SECONDS s)"
scratch=$(mktemp -d /tmp/cdl-hf.XXXXXX)
cat >"$scratch/acc.py" <<'PY'
import os, sys
import torch
sys.path.insert(0, sys.argv[1])
import train_ddp
current, ddp = [], []
torch.cuda.is_available = lambda: True
torch.cuda.device_count = lambda: 1
torch.cuda.set_device = lambda d: current.append(str(torch.device("cuda", d) if isinstance(d, int) else d))
torch.cuda.get_device_name = lambda *a: "fake"
torch.cuda.get_device_capability = lambda *a: (8, 0)
class FakeDDP(torch.nn.Module):
    def __init__(self, module, device_ids=None, output_device=None, **kw):
        super().__init__()
        ddp.append(device_ids)
torch.nn.parallel.DistributedDataParallel = FakeDDP
if sys.argv[2] == "pinned":   # what train_hf.py does before TrainingArguments
    train_ddp.pin_accelerate_gpu(int(os.environ["LOCAL_RANK"]), torch.cuda.device_count())
from transformers import TrainingArguments
from accelerate import Accelerator
targs = TrainingArguments(output_dir="o", use_cpu=False, ddp_backend="gloo", report_to=[])
Accelerator().prepare_model(torch.nn.Linear(2, 2), device_placement=False)
print(f"device {targs.device} current {','.join(current)} ddp_device_ids {ddp[0]}")
PY
gpu() {
    (cd "$scratch" && env RANK=0 WORLD_SIZE=1 LOCAL_RANK=1 LOCAL_WORLD_SIZE=2 CDL_GPU_BIND=task \
        MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" timeout 120 "$venv/bin/python" acc.py \
        "$(dirname "$script")" "$1" 2>&1 | tail -n 1)
}
port=$(free_port)
plain=$(gpu plain)
pinned=$(gpu pinned)
echo "Accelerate alone: $plain; pinned: $pinned"
check "Accelerate alone opens LOCAL_RANK's cuda:1 (what the fix is for)" \
    test "$plain" = "device cuda:1 current cuda:1 ddp_device_ids [1]"
check "pinned: the task's own GPU, cuda:0, current, and DDP on the module's device" \
    test "$pinned" = "device cuda:0 current cuda:0 ddp_device_ids None"
rm -rf "$scratch"

echo "== 0d. a signal before the first step ($SECONDS s)"
# A signal that reaches the script before its first step (a --signal lead
# longer than the job's time, a scancel as it starts; sent here held
# pending across exec, so no timing): with --ckpt-dir every rank exits 75
# at once and nothing is written. It trained a step and saved it (a job
# signalled at every start crept on by a step per requeue); and SIGUSR1
# or SIGTERM during the seconds of `import transformers` killed the task
# (138, not requeued) before the handlers were installed, now the first
# thing the script does. Without --ckpt-dir the signal ends the task, as
# in train_ddp.py: it was caught and ignored, and a SIGTERM (scancel) left
# it training until Slurm's SIGKILL.
scratch=$(mktemp -d /tmp/cdl-hf.XXXXXX)
# signalled.py SIG CMD...: CMD started with SIG already pending
cat >"$scratch/signalled.py" <<'PYEOF'
import os, signal, sys
s = getattr(signal, sys.argv[1])
signal.pthread_sigmask(signal.SIG_BLOCK, [s])
os.kill(os.getpid(), s)
os.execv(sys.argv[2], sys.argv[2:])
PYEOF
signalled() { timeout 120 "$PY" "$scratch/signalled.py" "$@"; }
rc=0
out=$(cd "$scratch" && signalled SIGUSR1 "$venv/bin/python" "$script" --epochs 1 \
      --samples 128 --ckpt-dir "$scratch/ck" 2>&1) || rc=$?
check "a SIGUSR1 before the first step: exit 75 ($rc), nothing trained or written" \
    eval '[ "$rc" = 75 ] && [ -z "$(ls "$scratch/ck" 2>/dev/null)" ] &&
          echo "$out" | grep -q "signal before the first step: nothing trained"' ||
    echo "$out" | tail -5
rc=0
out=$(cd "$scratch" && signalled SIGTERM "$venv/bin/python" "$script" --epochs 1 \
      --samples 128 2>&1) || rc=$?
check "a SIGTERM without --ckpt-dir ends the task ($rc, 143 = killed by SIGTERM), not ignored" \
    eval '[ "$rc" = 143 ] && ! echo "$out" | grep -q "^hf rank "' || echo "$out" | tail -5
rm -rf "$scratch"

start_cluster
mkdir -p "$WORK/pytorch"
install -m 0644 "$top_srcdir"/templates/pytorch/train_hf.py "$top_srcdir"/templates/pytorch/train_ddp.py \
    "$WORK/pytorch/"
install -m 0644 "$top_srcdir/templates/pytorch-requeue.sbatch" "$WORK/"
chown -R "$CDL_TEST_USER" "$WORK/pytorch"
JOB_TIMEOUT=150
HF="$venv/bin/python pytorch/train_hf.py"

echo "== 1. srun -N2 --ntasks-per-node=2 --cdl-ddp python train_hf.py ($SECONDS s)"
# 256 samples, 16 per rank and step: 4 steps of 64, each rank 64 samples.
out=$(as_user srun -N2 --ntasks-per-node=2 --cdl-ddp $HF --epochs 1 --samples 256 \
      --save w.safetensors 2>&1)
ranks "$out" | cut -c1-80
echo "$out" | grep -E 'Error|error' | head -20
check "the Trainer's ranks are the plugin's: 0/4..3/4, local 0/2 and 1/2 on each node, CPU" \
    test "$(ranks "$out" | awk '{print $3, $5, $7}' | tr '\n' ,)" = \
         "0/4 0/2 cpu,1/4 1/2 cpu,2/4 0/2 cpu,3/4 1/2 cpu,"
check "each rank trained on its own quarter of every global batch: 4 steps, disjoint shards, all 256 samples" \
    eval 'every_sample "$out" 256 && [ "$(ranks "$out" | awk "{print \$9}" | sort -u)" = 4 ]'
check "rank 0 wrote the final weights" test -s "$WORK/w.safetensors"

echo "== 2. uneven: srun -N2 -n3 --cdl-ddp ($SECONDS s)"
# 288 samples = 6 steps of 3 x 16.
out=$(as_user srun -N2 -n3 --cdl-ddp $HF --epochs 1 --samples 288 2>&1)
ranks "$out" | cut -c1-80
echo "$out" | grep -E 'Error|error' | head -20
check "3 ranks, 2 on n1 and 1 on n2 (local world sizes 2, 2, 1)" \
    test "$(ranks "$out" | awk '{print $3, $5}' | tr '\n' ,)" = "0/3 0/2,1/3 1/2,2/3 0/1,"
check "the 3 ranks' shards are disjoint and cover the 288 samples" every_sample "$out" 288

echo "== 3. plain srun -n2 without --cdl-ddp ($SECONDS s)"
out=$(as_user srun -N1 -n2 $HF --epochs 1 --samples 64 2>&1)
rc=$?
echo "$out" | tail -3
check "refused (status $rc), naming --cdl-ddp, before any training" \
    eval '[ "$rc" != 0 ] && echo "$out" | grep -q "start it with srun --cdl-ddp" &&
          ! echo "$out" | grep -q "^hf rank"'

echo "== 4. pytorch-requeue.sbatch with TRAIN_PY=pytorch/train_hf.py ($SECONDS s)"
# The uninterrupted reference: the template's own arguments, 2 tasks on n1.
ARGS="--epochs 12 --batch-size 64 --lr 0.05 --samples 2048 --device auto"
out=$(as_user srun -N1 -n2 --cdl-ddp $HF $ARGS --ckpt-dir runs/ref/ckpt 2>&1)
echo "$out" | grep -E 'Error|error' | head
id=$(submit --export="ALL,PYTHON=$venv/bin/python,TRAIN_PY=pytorch/train_hf.py,EPOCHS=12,SAMPLES=2048,RUN_DIR=runs/long" \
     --cpus-per-task=1 -o tlong.out ./pytorch-requeue.sbatch)
# SIGUSR1 to the batch script (what --signal=B:USR1 does before the limit)
# once the first epoch's checkpoint is there: 11 epochs are left.
wait_until 120 sh -c "ls -d '$WORK'/runs/long/ckpt/checkpoint-* >/dev/null 2>&1"
state=$(requeue_on_usr1 "$id" tlong.out)
grep -vE "^\{'(loss|train_runtime)'|^hf rank" "$WORK/tlong.out"
check "SIGUSR1 -> every rank stopped after the same step -> checkpoint -> exit 75 -> requeue" \
    eval 'grep -q "^signal: checkpoint at step [0-9]* written, exiting with 75" "$WORK/tlong.out" &&
          grep -q "checkpointed: requeueing" "$WORK/tlong.out"'
check "run 2 resumed from the Trainer's checkpoint and finished ($state)" \
    eval 'grep -q "^resuming from runs/long/ckpt/checkpoint-[0-9]*$" "$WORK/tlong.out" &&
          grep -q "finished with status 0" "$WORK/tlong.out" && [ "${state%% *}" = JobState=COMPLETED ]'
last() { find "$WORK/runs/$1/ckpt" -name model.safetensors | sort -V | tail -n 1; }
echo "final: $(last ref) $(last long)"
check "the requeued run's final weights are bit for bit the uninterrupted run's" \
    eval '[ -n "$(last ref)" ] && [ "${last_ref:=$(last ref)}" != "$(last long)" ] &&
          [ "${last_ref##*/checkpoint-}" = "$(last long | sed "s|.*/checkpoint-||")" ] &&
          cmp "$(last ref)" "$(last long)"'
echo "($SECONDS s)"
finish
