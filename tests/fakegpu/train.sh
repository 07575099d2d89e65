#!/bin/sh
# cdl-train --device cuda on the fake GPU (tests/fakegpu): the whole GPU
# training path (pipelined input, cuDNN plans, CUDA graphs, checkpoints) run
# on the CPU, against the CPU backend:
# - strict FP32 GPU training matches CPU training: weights to 1e-5
#   relative, each epoch's losses to 1e-4, accuracies exactly;
# - CUDA graphs on and off give bitwise the same weights;
# - a run stopped by --max-steps and resumed equals one uninterrupted run,
#   bit for bit;
# - checkpoints move between devices: an epoch on one device, the next on
#   the other, ends where the CPU run ends;
# - with no GPU visible, --device cuda fails naming the fix and --device
#   auto trains on the CPU.
# 136 samples at batch 16: 8 full batches (graphs) and one partial (eager).
set -u
if [ "${CDL_TEST_SCOPE:-}" = unit ]; then
    echo "SKIP: end-to-end test in a unit-only pass"; exit 77
fi
builddir=${top_builddir:-.}
fake=$builddir/tests/fakegpu/cdl-train
cmp=$builddir/tests/dist/weights_cmp
tmp=$(mktemp -d /tmp/cdl-fakegpu.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
common="--dataset synthetic --synthetic-size 136 --batch-size 16 --schedule constant --lr 0.01 --threads 1 --tf32 off --no-progress"
fail() { echo "FAILED: $*"; exit 1; }
train() {   # train DIR ARGS...: one run of the fake-GPU cdl-train into DIR
    dir=$1; shift
    echo "+ cdl-train $* --ckpt-dir $dir"
    timeout 600 "$fake" $common --ckpt-dir "$tmp/$dir" --metrics "$tmp/$dir.json" "$@" \
        >"$tmp/$dir.out" 2>&1 ||
        { cat "$tmp/$dir.out"; fail "training into $dir"; }
}
metrics() { # metrics DIR: epoch, train loss and accuracy, val loss and accuracy per line
    sed 's/.*"epoch":\([0-9]*\).*"train_loss":\([^,]*\),"train_acc":\([^,]*\),"val_loss":\([^,]*\),"val_acc":\([^,]*\).*/\1 \2 \3 \4 \5/' \
        "$tmp/$1.json"
}
same_metrics() {  # same_metrics A B: the epochs' losses agree to 1e-4, accuracies exactly
    metrics "$1" >"$tmp/m.a"; metrics "$2" >"$tmp/m.b"
    [ -s "$tmp/m.a" ] && [ "$(wc -l <"$tmp/m.a")" -eq "$(wc -l <"$tmp/m.b")" ] ||
        fail "metrics of $1 and $2 have different epochs"
    paste -d' ' "$tmp/m.a" "$tmp/m.b" | awk -v a="$1" -v b="$2" '
        function d(x, y) { return x > y ? x - y : y - x }
        { print "  " a " vs " b " epoch " $1 ": train loss " $2 " / " $7 ", val loss " $4 " / " $9
          if ($1 != $6 || d($2, $7) > 1e-4 || d($4, $9) > 1e-4 || $3 != $8 || $5 != $10) bad = 1 }
        END { exit bad }' || fail "losses or accuracies of $1 and $2 differ"
}
same_or_fail() {
    a=$1 b=$2; shift 2
    out=$("$cmp" "$tmp/$a/last.safetensors" "$tmp/$b/last.safetensors" "$@" 2>&1)
    rc=$?
    echo "  $a vs $b ($*): $out"
    [ $rc -eq 0 ] || fail "weights of $a and $b differ beyond $*"
}

train cpu --device cpu --epochs 2
train gpu --device cuda --epochs 2
grep -q "cuda backend" "$tmp/gpu.out" || { cat "$tmp/gpu.out"; fail "gpu run did not use the cuda backend"; }
grep -q "CUDA graphs on" "$tmp/gpu.out" || { cat "$tmp/gpu.out"; fail "gpu run did not use CUDA graphs"; }
train eager --device cuda --epochs 2 --cuda-graphs off
grep -q "CUDA graphs off" "$tmp/eager.out" || { cat "$tmp/eager.out"; fail "--cuda-graphs off"; }
same_or_fail gpu cpu --rel 1e-5
same_metrics gpu cpu
same_or_fail gpu eager --bitwise
same_metrics gpu eager

# Stopped after 5 steps (mid-epoch, graphs replaying), then resumed.
train stopped --device cuda --epochs 2 --max-steps 5
cp -r "$tmp/stopped" "$tmp/resumed"
train resumed --device cuda --epochs 2 --resume auto
same_or_fail resumed gpu --bitwise

# Epoch 1 on one device, epoch 2 on the other.
train g2c --device cuda --epochs 1
train g2c --device cpu --epochs 2 --resume auto
same_or_fail g2c cpu --rel 1e-5
train c2g --device cpu --epochs 1
train c2g --device cuda --epochs 2 --resume auto
same_or_fail c2g cpu --rel 1e-5

# No GPU visible.
CDL_FAKE_GPUS=0 "$fake" $common --device cuda --epochs 1 >"$tmp/nogpu.out" 2>&1 &&
    fail "--device cuda without a GPU succeeded"
grep -q -- "--device cpu" "$tmp/nogpu.out" || { cat "$tmp/nogpu.out"; fail "no-GPU error does not name --device cpu"; }
CDL_FAKE_GPUS=0 "$fake" $common --device auto --epochs 1 >"$tmp/auto.out" 2>&1 ||
    { cat "$tmp/auto.out"; fail "--device auto without a GPU"; }
grep -q "cpu backend" "$tmp/auto.out" || { cat "$tmp/auto.out"; fail "--device auto did not fall back to the cpu"; }
echo "PASS: cdl-train on the fake GPU"
