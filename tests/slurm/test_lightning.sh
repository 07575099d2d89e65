#!/bin/bash
# PyTorch Lightning under --cdl-ddp (templates/lightning.sbatch with
# templates/pytorch/train_lightning.py), strategy "ddp" on the CPU, 2 nodes
# x 2 tasks: Lightning picks SLURMEnvironment, its ranks agree with the
# plugin's and torch.distributed's, it uses the plugin's MASTER_ADDR and
# MASTER_PORT (not its own job-id-derived port), and training finishes.
# Steps Lightning cannot run (-N2 -n3: 2 + 1 tasks; -N2 -n2 without
# --ntasks-per-node) are refused by the script with the options that work.
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
out=$(as_user srun -N2 -n3 --cdl-ddp "$venv/bin/python" pytorch/train_lightning.py --epochs 1 \
      --accelerator cpu 2>&1)
echo "$out" | grep -E 'train_lightning|HINT' | head -3
check "-N2 -n3 (2 + 1 tasks): refused, naming the layout, --ntasks-per-node and train_ddp.py" \
    eval 'echo "$out" | grep -q "this step has 3 tasks on 2 nodes, 2 on this node (n1): Lightning needs the same number on every node. Ask for -N2 --ntasks-per-node=N" &&
          ! echo "$out" | grep -q "^lightning rank"'
out=$(as_user srun -N2 -n2 --cdl-ddp "$venv/bin/python" pytorch/train_lightning.py --epochs 1 \
      --accelerator cpu 2>&1)
echo "$out" | grep -E 'train_lightning|HINT' | head -3
check "-N2 -n2 (1 + 1 tasks) without --ntasks-per-node: told -N2 --ntasks-per-node=1" \
    eval 'echo "$out" | grep -q "ask for -N2 --ntasks-per-node=1 instead of --ntasks=2"'
finish
