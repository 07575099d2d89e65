#!/bin/bash
# The GPU path of the PyTorch templates (templates/pytorch/train_ddp.py, as
# run by pytorch-ddp.sbatch and pytorch-mps-pack.sbatch), on a machine with
# an NVIDIA GPU and a CUDA build of PyTorch. No Slurm is needed: the ranks
# get the variables `srun --cdl-ddp` exports (docs/pytorch.md) from this
# script, and CDL_REPLICAS_PER_GPU as --cdl-mps would set it. Within about two
# minutes it checks
#   1. NCCL DDP, one GPU per rank (all GPUs, at least 1): weights equal on
#      every rank and to one process on the global batch (float64, 1e-6);
#   2. 4 replicas packed on GPU 0 with gloo on CUDA tensors (the
#      pytorch-mps-pack template's backend), under a private MPS daemon
#      when nvidia-cuda-mps-control exists (else time-sliced, said so):
#      the same equality;
# and prints one row per check. Exit status 0 when all pass, 1 otherwise
# or when no GPU is usable. tests/gpu/run.sh may call it.
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
    ngpus=$("$python" -c 'import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)' 2>/dev/null)
    if [ -z "$ngpus" ] || [ "$ngpus" = 0 ]; then
        echo "pytorch_templates.sh: $python has no PyTorch with a usable CUDA GPU" \
             "(install a CUDA build: python3 -m venv V && V/bin/pip install torch)" >&2
        exit 1
    fi
    device=cuda backend=nccl
fi

# launch N ENV... -- ARGS...: N local ranks of train_ddp.py with the
# variables srun --cdl-ddp exports (torchrun's names; Debian's torchrun 1.13
# does not start under Python 3.11, so the ranks are started here). The
# port is picked by binding port 0 just before: a race only with something
# grabbing that very port in the next instant, on a test machine.
launch() {
    local n=$1 envs=() pids=() r rc=0 port
    shift
    while [ "$1" != -- ]; do envs+=("$1"); shift; done
    shift
    port=$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    for ((r = 0; r < n; r++)); do
        timeout 300 env "${envs[@]}" RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r LOCAL_WORLD_SIZE=$n \
            GROUP_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" OMP_NUM_THREADS=1 \
            "$python" "$train" --device "$device" "$@" &
        pids+=($!)
    done
    for r in "${pids[@]}"; do wait "$r" || rc=1; done
    return "$rc"
}

# same_weights PATTERN SINGLE N: every rank's file equals rank 0's and SINGLE.
same_weights() {
    "$python" - "$1" "$2" "$3" <<'EOF'
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
    if ! launch "$n" "$@" -- --backend "$be" --double --epochs 2 --samples 1024 \
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
       nvidia-cuda-mps-control -d >"$logs/mps-start.log" 2>&1; then
        trap 'echo quit | CUDA_MPS_PIPE_DIRECTORY=$mps/pipe nvidia-cuda-mps-control >/dev/null 2>&1; rm -rf "$mps"' EXIT
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

exit "$failed"
