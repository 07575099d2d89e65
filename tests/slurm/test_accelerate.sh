#!/bin/bash
# Hugging Face Accelerate under --cdl-ddp on the CPU (gloo), on the two
# emulated nodes, with a plain Accelerate training loop (no launcher
# arguments, no accelerate config; tests/pytorch/accelerate_check.py, which
# tests/gpu/pytorch_templates.sh runs on GPUs):
#   1. `srun -N2 --ntasks-per-node=2 --cdl-ddp python acc.py`: Accelerate
#      takes the plugin's variables for a launch (MULTI_CPU, gloo), its
#      process index and count are the plugin's RANK and WORLD_SIZE, its
#      local index LOCAL_RANK; after 3 SGD steps on different data per rank
#      every rank holds the same weights, equal to one process trained on
#      the global batch (so the gradients were averaged, not just kept);
#   2. `srun --cdl-ddp accelerate launch acc.py` (2 nodes x 1 task): the
#      launcher runs the script once per task with the same contract.
#
# Accelerate comes from PyPI as Lightning does (test_lightning.sh): pinned
# to 0.32.1, the last release whose multi-CPU set-up runs on Debian's torch
# 1.13 (0.33 calls torch.cpu.device_count(), which 1.13 lacks), in a venv
# over the system site-packages with --no-deps plus the four modules it
# imports, cached in the build tree (tests/slurm/accelerate-venv, removed by
# make clean). Without PyPI the test is skipped, saying so.
set -u
. "${top_srcdir:-.}/tests/slurm/lib.sh"
PY=${CDL_TEST_PYTHON:-/usr/bin/python3}
PINS="accelerate==0.32.1 huggingface_hub==0.24.6 packaging==24.1 tqdm==4.66.5 filelock==3.15.4"
require_cluster_tools
"$PY" -c 'import torch.distributed as d, numpy, psutil, yaml, safetensors; assert d.is_gloo_available()' \
    2>/dev/null || skip "$PY lacks PyTorch with gloo, numpy, psutil, yaml or safetensors" \
    "(install python3-torch python3-numpy python3-psutil python3-yaml python3-safetensors)"

# shellcheck disable=SC2086
pypi_venv accelerate accelerate $PINS
"$venv/bin/python" -c 'import accelerate, torch; print("Accelerate", accelerate.__version__, "on torch", torch.__version__)'

start_cluster
# The check script is tests/pytorch/accelerate_check.py (shared with
# tests/gpu/pytorch_templates.sh), on the CPU by default.
user_script acc.py <"$top_srcdir/tests/pytorch/accelerate_check.py"
JOB_TIMEOUT=90
lines() { echo "$1" | grep '^A ' | sort; }
# "A R/N local L device cpu[:L] type MULTI_CPU backend gloo spread S vs_one
# D rank R local_rank L" with S = 0 and D < 1e-12 (float64: summation
# order only).
agree() {   # agree OUTPUT N: N such lines, R = 0..N-1, the plugin's ranks
    [ "$(lines "$1" | awk -v n="$2" '{split($2, r, "/")
         if (r[2] == n && $6 ~ /^cpu(:[0-9]+)?$/ && $8 == "MULTI_CPU" && $10 == "gloo" && $12 == 0 &&
             $14 < 1e-12 && $16 == r[1] && $18 == $4) print r[1]}' | tr '\n' ,)" = "$3" ]
}

echo "== 1. srun --cdl-ddp python acc.py, 2 nodes x 2 tasks ($SECONDS s)"
out=$(as_user srun -N2 --ntasks-per-node=2 --cdl-ddp "$venv/bin/python" acc.py 2>&1)
echo "$out" | grep -E '^A |Error|error' | head -20
check "Accelerate's process index/count are RANK/WORLD_SIZE, MULTI_CPU over gloo; all ranks hold the weights of one process trained on the global batch" \
    agree "$out" 4 "0,1,2,3,"
check "Accelerate's local process index is LOCAL_RANK: 0 and 1 on each node" \
    test "$(lines "$out" | awk '{print $4}' | sort | tr '\n' ,)" = "0,0,1,1,"

echo "== 2. srun --cdl-ddp accelerate launch acc.py, 2 nodes x 1 task ($SECONDS s)"
# Through the venv's python: the script's #! names the venv before its move.
out=$(as_user srun -N2 --ntasks-per-node=1 --cdl-ddp "$venv/bin/python" "$venv/bin/accelerate" \
      launch --cpu acc.py 2>&1)
echo "$out" | grep -E '^A |Error|error' | head -20
check "accelerate launch runs the script once per task with the same contract and result" \
    agree "$out" 2 "0,1,"
echo "($SECONDS s)"
finish
