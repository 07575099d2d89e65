#!/bin/bash
# PyTorch Lightning under --cdl-ddp (templates/lightning.sbatch with
# templates/pytorch/train_lightning.py), strategy "ddp" on the CPU, 2 nodes
# x 2 tasks: Lightning picks SLURMEnvironment, its ranks agree with the
# plugin's and torch.distributed's, it uses the plugin's MASTER_ADDR and
# MASTER_PORT (not its own job-id-derived port), and training finishes.
# Steps Lightning cannot run (-N2 -n3: 2 + 1 tasks; -N2 -n2 without
# --ntasks-per-node) are refused by the script with the options that work.
# Under per-task GPU binding or packed replicas (a task sees one GPU),
# Lightning accepts the script's GPU settings (a Trainer built with one
# CUDA device faked on the CPU, before the cluster starts).
#
# Lightning comes from PyPI, pinned to the last release for Debian's torch
# 1.13, into a venv over the system site-packages (so that Debian's torch
# is used) with --no-deps, so that pip never pulls a new torch. The venv is
# cached in the build tree (tests/slurm/lightning-venv, removed by make
# clean): CI installs once. Without PyPI the test is skipped, saying so.
set -u
. "${top_srcdir:-.}/tests/slurm/lib.sh"
PY=${CDL_TEST_PYTHON:-/usr/bin/python3}
PINS="pytorch-lightning==2.2.5 torchmetrics==1.4.3 lightning-utilities==0.11.9 fsspec==2024.6.1
      tqdm==4.66.5 packaging==24.1"
require_cluster_tools
"$PY" -c 'import torch.distributed as d; assert d.is_gloo_available()' 2>/dev/null ||
    skip "$PY has no PyTorch with gloo (install python3-torch)"

# shellcheck disable=SC2086
pypi_venv lightning pytorch_lightning $PINS
"$venv/bin/python" -c 'import pytorch_lightning, torch; print("Lightning", pytorch_lightning.__version__, "on torch", torch.__version__)'

# Lightning's GPU settings under cdl's per-task binding, with no GPU: a
# Trainer built on the CPU with Lightning told that CUDA_VISIBLE_DEVICES
# shows 1 GPU (CDL_GPU_BIND=task, or --cdl-mps=4), for local rank 2 of 4
# tasks on the node. devices=LOCAL_WORLD_SIZE was refused ("You requested
# gpu: [0, 1, 2, 3] But your machine only has: [0]"); lightning_devices'
# settings are accepted, rank 2 on the task's cuda:0, gloo when packed.
pl_gpus() {   # pl_gpus VAR=VALUE...: "root device, processes, backend" or the refusal
    env SLURM_JOB_NAME=t SLURM_JOB_ID=1 SLURM_NODELIST=n1 SLURM_NTASKS=4 SLURM_NTASKS_PER_NODE=4 \
        SLURM_NNODES=1 SLURM_NODEID=0 SLURM_PROCID=2 SLURM_LOCALID=2 WORLD_SIZE=4 LOCAL_WORLD_SIZE=4 \
        RANK=2 LOCAL_RANK=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=1 "$@" \
        "$venv/bin/python" - "$top_srcdir/templates/pytorch" 2>/dev/null <<'PY'
import os, sys, torch
from unittest import mock
sys.path.insert(0, sys.argv[1])
import train_lightning as tl
import pytorch_lightning as pl
devices, slots, pg = tl.lightning_devices("gpu", 4, 1)
with mock.patch("torch.cuda.device_count", return_value=1), \
        mock.patch("torch.cuda.is_available", return_value=True), \
        mock.patch("lightning_fabric.accelerators.cuda.num_cuda_devices", return_value=1):
    strategy = "ddp" if slots is None else pl.strategies.DDPStrategy(
        parallel_devices=[torch.device("cuda", i) for i in slots], process_group_backend=pg)
    try:
        s = pl.Trainer(accelerator="gpu", devices=devices, strategy=strategy, logger=False).strategy
        s.cluster_environment.validate_settings(num_devices=s.num_processes, num_nodes=1)
        print(s.root_device, s.num_processes, s.global_rank, s._get_process_group_backend())
    except Exception as e:
        print("refused:", str(e).split("\n")[0])
PY
}
got=$(pl_gpus CDL_GPU_BIND=task)
check "CDL_GPU_BIND=task, 1 GPU seen: Lightning accepts devices=1 and rank 2 on cuda:0 ($got)" \
    test "$got" = "cuda:0 4 2 nccl"
got=$(pl_gpus CDL_REPLICAS_PER_GPU=4)
check "--cdl-mps=4, 1 GPU seen: Lightning accepts, rank 2 on cuda:0 over gloo ($got)" \
    test "$got" = "cuda:0 4 2 gloo"

start_cluster
mkdir -p "$WORK/pytorch"
install -m 0644 "$top_srcdir/templates/pytorch/train_lightning.py" "$WORK/pytorch/"
install -m 0644 "$top_srcdir/templates/lightning.sbatch" "$WORK/lightning.sbatch"
JOB_TIMEOUT=180
# The template's resources shrunk to the test cluster; its --cdl-* lines stay.
id=$(submit --export="ALL,PYTHON=$venv/bin/python,EPOCHS=2,ACCELERATOR=cpu,RUN_DIR=runs/pl" \
     --gres=gpu:2 --ntasks-per-node=2 --cpus-per-task=1 -o pl.out ./lightning.sbatch)
state=$(wait_job "$id")
out=$(cat "$WORK/pl.out")
echo "$out" | grep -E '^(lightning|finished)|Error|error' | head -40
lines=$(echo "$out" | grep '^lightning rank')
check "the job completed ($state)" test "${state%% *}" = JobState=COMPLETED
check "4 ranks, each 'rank R/4 local L node N' with R = 2N + L (Slurm's block layout)" \
    test "$(echo "$lines" | awk '{split($3, r, "/"); if (r[1] == 2 * $7 + $5 && r[2] == 4) print r[1]}' |
            sort | tr '\n' ,)" = "0,1,2,3,"
check "Lightning's global rank is torch.distributed's rank" \
    test "$(echo "$lines" | awk '{split($3, r, "/"); if (r[1] == $13) n++} END {print n + 0}')" = 4
check "Lightning detected SLURMEnvironment" test "$(echo "$lines" | grep -c 'env SLURMEnvironment ')" = 4
# Lightning alone would use 15000 + the last 4 digits of the job id.
master=$(echo "$lines" | awk '{print $9}' | sort -u)
own=$((15000 + 10#$(printf '%s' "$id" | tail -c 4)))
check "Lightning used the plugin's MASTER_ADDR:MASTER_PORT ($master: n1, the admin range), not its own $own" \
    eval '[ "$(echo "$master" | wc -l)" = 1 ] && [ "${master%%:*}" = n1 ] && p=${master#n1:} &&
          [ "$p" -ge "$CDL_PORT_LO" ] && [ "$p" -le "$CDL_PORT_HI" ] && [ "$p" != "$own" ]'
check "training finished on rank 0" eval 'echo "$out" | grep -qx finished'

# Layouts Lightning cannot run: train_lightning.py names the layout and
# the option that works. Lightning's own message advised
# --ntasks-per-node=3 for -N2 -n3 (6 tasks) and 2 for -N2 -n2 (4 tasks).
# Every rank refuses, naming its own node's count; the first to fail stops
# the step (--cdl-ddp), so under load n1's ranks, still importing
# Lightning, were killed before they said it and only n2's line came:
# either node's line will do.
out=$(as_user srun -N2 -n3 --cdl-ddp "$venv/bin/python" pytorch/train_lightning.py --epochs 1 \
      --accelerator cpu 2>&1)
echo "$out" | grep -E 'train_lightning|HINT' | head -3
check "-N2 -n3 (2 + 1 tasks): refused, naming the layout, --ntasks-per-node and train_ddp.py" \
    eval 'echo "$out" | grep -q "this step has 3 tasks on 2 nodes, \(2 on this node (n1)\|1 on this node (n2)\): Lightning needs the same number on every node. Ask for -N2 --ntasks-per-node=N" &&
          ! echo "$out" | grep -q "^lightning rank"'
out=$(as_user srun -N2 -n2 --cdl-ddp "$venv/bin/python" pytorch/train_lightning.py --epochs 1 \
      --accelerator cpu 2>&1)
echo "$out" | grep -E 'train_lightning|HINT' | head -3
check "-N2 -n2 (1 + 1 tasks) without --ntasks-per-node: told -N2 --ntasks-per-node=1" \
    eval 'echo "$out" | grep -q "ask for -N2 --ntasks-per-node=1 instead of --ntasks=2"'
finish
