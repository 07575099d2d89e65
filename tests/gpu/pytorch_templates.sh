#!/bin/bash
# The GPU path of the PyTorch templates (templates/pytorch/train_ddp.py, as
# run by pytorch-ddp.sbatch and pytorch-mps-pack.sbatch; train_hf.py,
# Accelerate through train_ddp.pin_accelerate_gpu, and train_lightning.py),
# on a machine with an NVIDIA GPU and a CUDA build of PyTorch. No Slurm is
# needed: the ranks get the variables `srun --cdl-ddp` exports
# (docs/pytorch.md) from this script, and CDL_REPLICAS_PER_GPU as
# --cdl-mps would set it. Within about three minutes it checks
#   1. NCCL DDP, one GPU per rank (all GPUs, at least 1): weights equal on
#      every rank and to one process on the global batch (float64, 1e-6);
#   2. 4 replicas packed on GPU 0 with gloo on CUDA tensors (the
#      pytorch-mps-pack template's backend), under a private MPS daemon
#      when nvidia-cuda-mps-control exists (else time-sliced, said so):
#      the same equality;
# and, each on 2 ranks whose LOCAL_RANK 1 must not open cuda:1 (each rank
# shown only its own GPU with CDL_GPU_BIND=task: with 2 or more GPUs as
# srun --gpus-per-task=1 --cdl-ddp, over NCCL; with 1 as srun
# --ntasks-per-gpu=2, both shown GPU 0, CDL_REPLICAS_PER_GPU=2, gloo),
# skipped when PYTHON lacks the package:
#   3. the Hugging Face Trainer (train_hf.py): every rank on its cuda:0,
#      disjoint shards that cover the data (transformers, accelerate);
#   4. a plain Accelerate loop after train_ddp.pin_accelerate_gpu
#      (tests/pytorch/accelerate_check.py, as tests/slurm/test_accelerate.sh
#      runs it on the CPU): every rank on cuda:0, its weights those of
#      every rank and of one process on the global batch (float64, 1e-9)
#      (accelerate);
#   5. Lightning (train_lightning.py, launched externally: Lightning's
#      LightningEnvironment): every rank on cuda:0, ranks as
#      torch.distributed's, training finished (lightning or
#      pytorch_lightning);
# and prints one row per check. Every rank runs under a timeout. Exit
# status 0 when all that ran pass, 1 otherwise or when no GPU is usable.
# tests/gpu/run.sh calls it (step 7).
#
# CDL_GPU_REHEARSAL=1 runs the same steps on the CPU with gloo (no GPU, no
# MPS), to check this script where there is no GPU.
#
# Usage: tests/gpu/pytorch_templates.sh   (PYTHON picks the interpreter with
# PyTorch, default python3; logs and weights in $CDL_GPU_LOGS/pytorch,
# default gpu-logs/pytorch in the source tree).
set -u
export LC_ALL=C
top=$(cd "$(dirname "$0")/../.." && pwd)
python=${PYTHON:-python3}
rehearsal=${CDL_GPU_REHEARSAL:-0}
logs=${CDL_GPU_LOGS:-$top/gpu-logs}/pytorch
mkdir -p "$logs" || { echo "pytorch_templates.sh: cannot create $logs" >&2; exit 1; }
train=$top/templates/pytorch/train_ddp.py
failed=0
row() { printf '%-58s %s\n' "$1" "$2"; }
bad() { row "$1" "FAILED: $2"; failed=1; }

if [ "$rehearsal" = 1 ]; then
    device=cpu backend=gloo ngpus=2
    echo "rehearsal on the CPU with gloo: the GPU is not exercised"
else
    ngpus=$(timeout 120 "$python" -c 'import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)' 2>/dev/null)
    if [ -z "$ngpus" ] || [ "$ngpus" = 0 ]; then
        echo "pytorch_templates.sh: $python has no PyTorch with a usable CUDA GPU" \
             "(install a CUDA build: python3 -m venv V && V/bin/pip install torch)" >&2
        exit 1
    fi
    device=cuda backend=nccl
fi

# launch N ENV... -- SCRIPT ARGS...: N local ranks of SCRIPT (train_ddp.py
# when "-") with the variables srun --cdl-ddp exports (torchrun's names;
# Debian's torchrun 1.13 does not start under Python 3.11, so the ranks are
# started here), each under a timeout of $rank_timeout s. With own_gpus
# set (a list of devices), rank r is shown only device r of it with
# CDL_GPU_BIND=task, as srun --gpus-per-task=1 --cdl-ddp shows each task.
# The port is picked by binding port 0 just before: a race only with
# something grabbing that very port in the next instant, on a test machine.
rank_timeout=300
own_gpus=
launch() {
    local n=$1 envs=() pids=() r rc=0 port script own
    shift
    while [ "$1" != -- ]; do envs+=("$1"); shift; done
    shift
    script=$1; shift
    [ "$script" = - ] && script=$train
    read -r -a own <<< "$own_gpus"
    port=$(timeout 60 "$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    for ((r = 0; r < n; r++)); do
        local bind=()
        [ ${#own[@]} -gt 0 ] && bind=(CUDA_VISIBLE_DEVICES="${own[r]}" CDL_GPU_BIND=task)
        timeout "$rank_timeout" env "${envs[@]}" "${bind[@]}" RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r \
            LOCAL_WORLD_SIZE=$n GROUP_RANK=0 NODE_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" \
            OMP_NUM_THREADS=1 "$python" "$script" "$@" &
        pids+=($!)
    done
    for r in "${pids[@]}"; do wait "$r" || rc=1; done
    return "$rc"
}

# same_weights PATTERN SINGLE N: every rank's file equals rank 0's and SINGLE.
same_weights() {
    timeout 120 "$python" - "$1" "$2" "$3" <<'EOF'
import sys, torch
pattern, single, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
one = torch.load(single, map_location="cpu")
ranks = [torch.load(pattern.replace("{rank}", str(r)), map_location="cpu") for r in range(n)]
between = max((w[k] - ranks[0][k]).abs().max().item() for w in ranks for k in one)
vs_one = max((w[k] - one[k]).abs().max().item() for w in ranks for k in one)
print(f"max difference between ranks {between:.3g}, to one process {vs_one:.3g}")
sys.exit(0 if between <= 1e-12 and vs_one <= 1e-6 else 1)
EOF
}

# check LABEL N BACKEND ENV...: N ranks of batch 32 against one process of
# batch 32 N, float64, 2 epochs of 1024 samples.
check() {
    local label=$1 n=$2 be=$3 log=$logs/$4
    shift 4
    rm -f "$logs"/w-*.pt "$logs/single.pt"
    if ! launch "$n" "$@" -- - --device "$device" --backend "$be" --double --epochs 2 --samples 1024 \
            --batch-size 32 --save "$logs/w-{rank}.pt" >"$log" 2>&1; then
        bad "$label" "the run failed (see $log)"
        return
    fi
    if ! timeout 300 "$python" "$train" --device "$device" --double --epochs 2 --samples 1024 \
            --batch-size $((32 * n)) --save "$logs/single.pt" >>"$log" 2>&1; then
        bad "$label" "the single-process run failed (see $log)"
        return
    fi
    local res
    if res=$(same_weights "$logs/w-{rank}.pt" "$logs/single.pt" "$n" 2>&1); then
        row "$label" "ok: $res"
    else
        bad "$label" "$res"
    fi
}

check "1. $backend DDP, $ngpus rank(s), one GPU each" "$ngpus" "$backend" ddp.log CDL_REPLICAS_PER_GPU=1

# 2. Four replicas on one device, gloo, under a private MPS daemon if any.
mps=
if [ "$rehearsal" = 0 ] && command -v nvidia-cuda-mps-control >/dev/null 2>&1; then
    mps=$(mktemp -d /tmp/cdl-torch-mps.XXXXXX)
    mkdir -p "$mps/pipe" "$mps/log"
    if CUDA_MPS_PIPE_DIRECTORY=$mps/pipe CUDA_MPS_LOG_DIRECTORY=$mps/log \
       timeout 60 nvidia-cuda-mps-control -d >"$logs/mps-start.log" 2>&1; then
        trap 'echo quit | CUDA_MPS_PIPE_DIRECTORY=$mps/pipe timeout 30 nvidia-cuda-mps-control >/dev/null 2>&1; rm -rf "$mps"' EXIT
        how="under MPS"
    else
        rm -rf "$mps"; mps=
        how="time-sliced (the MPS daemon did not start: $(head -1 "$logs/mps-start.log"))"
    fi
else
    how="time-sliced (no nvidia-cuda-mps-control)"
    [ "$rehearsal" = 1 ] && how="on the CPU (rehearsal)"
fi
envs=(CDL_REPLICAS_PER_GPU=4 CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0})
[ "$rehearsal" = 1 ] && envs=(CDL_REPLICAS_PER_GPU=4)
[ -n "$mps" ] && envs+=(CUDA_MPS_PIPE_DIRECTORY="$mps/pipe" CUDA_MPS_LOG_DIRECTORY="$mps/log"
                        CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25)
# The first visible GPU only: the replicas share it as --cdl-mps makes them.
[ "$rehearsal" = 0 ] && envs[1]=CUDA_VISIBLE_DEVICES=$(echo "${CUDA_VISIBLE_DEVICES:-0}" | cut -d, -f1)
echo "replicas: $how"
check "2. 4 replicas on one GPU, gloo on CUDA tensors" 4 gloo mps.log "${envs[@]}"
[ -n "$mps" ] && { echo quit | CUDA_MPS_PIPE_DIRECTORY=$mps/pipe timeout 30 nvidia-cuda-mps-control >/dev/null 2>&1
                   rm -rf "$mps"; mps=; trap - EXIT; }

# ---- 3-5: the frameworks, 2 ranks whose LOCAL_RANK 1 must open cuda:0
# (per-task binding) or share GPU 0 (packed), each rank bounded.
rank_timeout=150
fw_envs=()
if [ "$rehearsal" = 1 ]; then
    layout="on the CPU (rehearsal)" want_dev=cpu
elif [ "$ngpus" -ge 2 ]; then
    # The first two GPUs of the job, each rank shown its own.
    read -r -a gl <<< "$(echo "${CUDA_VISIBLE_DEVICES:-0,1}" | tr ',' ' ')"
    own_gpus="${gl[0]} ${gl[1]:-1}"
    layout="one GPU each (CDL_GPU_BIND=task), nccl" want_dev=cuda:0
else
    # As srun --ntasks-per-gpu=2 --cdl-ddp: each task shown the one GPU,
    # CDL_GPU_BIND=task, and packed (gloo: NCCL refuses a shared GPU).
    fw_envs=(CDL_GPU_BIND=task CDL_REPLICAS_PER_GPU=2
             CUDA_VISIBLE_DEVICES="$(echo "${CUDA_VISIBLE_DEVICES:-0}" | cut -d, -f1)")
    layout="on 1 GPU as --ntasks-per-gpu=2, gloo" want_dev=cuda:0
fi
# has MODULE...: PYTHON imports every MODULE
has() { local m; for m in "$@"; do timeout 120 "$python" -c "import $m" >/dev/null 2>&1 || return 1; done; }
ranks_ok() {   # ranks_ok LOG PATTERN: PATTERN matches one line of each of ranks 0 and 1
    [ "$(grep -Ec "$2" "$1")" = 2 ]
}

# 3. The Hugging Face Trainer: each rank prints "hf rank R/2 local L/2
# device D steps S samples I,J,...": D the rank's GPU, the shards disjoint
# and together the 256 samples.
label="3. HF Trainer (train_hf.py), 2 ranks $layout"
if ! has transformers accelerate; then
    row "$label" "skipped: $python has no transformers or accelerate"
else
    d=$logs/hf && rm -rf "$d" && mkdir -p "$d"
    if ! (cd "$d" && launch 2 "${fw_envs[@]}" -- "$top/templates/pytorch/train_hf.py" --device "$device" \
            --epochs 1 --samples 256 --batch-size 16 --peer-timeout 60) >"$d/out.log" 2>&1; then
        bad "$label" "the run failed (see $d/out.log)"
    elif ! ranks_ok "$d/out.log" "^hf rank [01]/2 local [01]/2 device $want_dev(:[01])? steps [1-9]"; then
        bad "$label" "not every rank on $want_dev (see $d/out.log)"
    elif [ "$(sed -n 's/^hf rank .* samples //p' "$d/out.log" | tr ',' '\n' | sort -n | uniq | tr '\n' ' ')" != \
            "$(seq 0 255 | tr '\n' ' ')" ] ||
            [ "$(sed -n 's/^hf rank .* samples //p' "$d/out.log" | tr ',' '\n' | grep -c .)" != 256 ]; then
        bad "$label" "the ranks' shards are not the 256 samples, each once (see $d/out.log)"
    else
        row "$label" "ok: $(grep -o '^hf rank [01]/2 .* device [^ ]*' "$d/out.log" | sed 's/^hf //; s/ local.* device / on /' | sort | tr '\n' ';' | sed 's/;$//; s/;/, /')"
    fi
fi

# 4. A plain Accelerate loop, the GPU pinned first as docs/pytorch.md
# advises for one's own script (tests/pytorch/accelerate_check.py --pin):
# 3 SGD steps in float64, rank r on rows r::2 of each global batch; every
# rank ends with the weights of one process trained on the whole batch.
# Its line: "A R/2 local L device D type T backend B spread S vs_one V ...".
label="4. Accelerate loop, pin_accelerate_gpu, 2 ranks $layout"
if ! has accelerate; then
    row "$label" "skipped: $python has no accelerate"
else
    d=$logs/accelerate && rm -rf "$d" && mkdir -p "$d"
    if ! launch 2 "${fw_envs[@]}" -- "$top/tests/pytorch/accelerate_check.py" --device "$device" \
            --pin "$top/templates/pytorch" --hard-exit >"$d/out.log" 2>&1; then
        bad "$label" "the run failed (see $d/out.log)"
    elif ! ranks_ok "$d/out.log" "^A [01]/2 local [01] device $want_dev(:[01])? type [A-Z_]+ backend [a-z]+ spread 0 vs_one "; then
        bad "$label" "not every rank on $want_dev, or the ranks' weights differ (see $d/out.log)"
    elif ! awk '/^A / { if ($14 + 0 > 1e-9) bad = 1 } END { exit bad }' "$d/out.log"; then
        bad "$label" "the weights are not one process's on the global batch (see $d/out.log)"
    else
        row "$label" "ok: $(grep '^A 0/2' "$d/out.log" | cut -d' ' -f5-14)"
    fi
fi

# 5. Lightning, started as cdlrun or srun would without Slurm's variables
# (LightningEnvironment: LOCAL_RANK, NODE_RANK, MASTER_ADDR, MASTER_PORT).
label="5. Lightning (train_lightning.py), 2 ranks $layout"
if ! has lightning.pytorch && ! has pytorch_lightning; then
    row "$label" "skipped: $python has no lightning or pytorch_lightning"
else
    d=$logs/lightning && rm -rf "$d" && mkdir -p "$d"
    acc=gpu
    [ "$rehearsal" = 1 ] && acc=cpu
    if ! launch 2 "${fw_envs[@]}" CDL_NNODES=1 -- "$top/templates/pytorch/train_lightning.py" \
            --epochs 1 --samples 256 --accelerator $acc --root-dir "$d" >"$d/out.log" 2>&1; then
        bad "$label" "the run failed (see $d/out.log)"
    elif ! ranks_ok "$d/out.log" "^lightning rank ([01])/2 local \1 node 0 .* dist_rank \1 device $want_dev(:[01])?\$"; then
        bad "$label" "not every rank on $want_dev as torch.distributed's rank (see $d/out.log)"
    elif ! grep -qx finished "$d/out.log"; then
        bad "$label" "rank 0 did not finish (see $d/out.log)"
    else
        row "$label" "ok: $(grep -o 'env [A-Za-z]*' "$d/out.log" | sort -u | tr '\n' ' ')finished"
    fi
fi

exit "$failed"
