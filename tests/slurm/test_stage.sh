#!/bin/bash
# --stage on two emulated nodes: `srun -N2 --ntasks-per-node=1 --cdl-ddp
# cdl-train --stage DIR` has each node's local rank 0 copy and verify the
# dataset (the run reports the mean over 2 nodes), and both ranks train
# from the copy.
set -u
. "${top_srcdir:-.}/tests/slurm/lib.sh"
CDL_TRAIN_BIN=${CDL_TRAIN_BIN:-$(readlink -f "$top_builddir/cli/cdl-train" 2>/dev/null)}
[ -n "$CDL_TRAIN_BIN" ] && [ -x "$CDL_TRAIN_BIN" ] || skip "cli/cdl-train is not built yet"
data=/usr/share/datasets/fashion-mnist
[ -f "$data/train-images-idx3-ubyte.gz" ] || skip "$data missing"
require_cluster_tools
start_cluster
runuser -u "$CDL_TEST_USER" -- test -x "$CDL_TRAIN_BIN" || skip "$CDL_TRAIN_BIN not executable by $CDL_TEST_USER"

as_user mkdir stage
as_user_env OPENBLAS_NUM_THREADS=1 -- srun -N2 --ntasks-per-node=1 --cdl-ddp \
    "$CDL_TRAIN_BIN" --model mlp --device cpu --epochs 1 --max-steps 2 --threads 1 --no-progress \
    --val-split 0 --stage "$WORK/stage" >"$WORK/stage.log" 2>&1
check "2 nodes trained from the staged copy" test $? = 0 || tail -n 20 "$WORK/stage.log"
check "both nodes staged the data" grep -q "staged $data to $WORK/stage/fashion-mnist-[0-9a-f]*: 4 files.*mean of 2 nodes" "$WORK/stage.log" ||
    tail -n 20 "$WORK/stage.log"
check "the copy is the dataset's" cmp "$data/train-images-idx3-ubyte.gz" "$WORK"/stage/fashion-mnist-*/train-images-idx3-ubyte.gz
finish
