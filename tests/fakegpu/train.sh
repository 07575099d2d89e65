#!/bin/sh
# cdl-train --device cuda on the fake GPU (tests/fakegpu): the whole GPU
# training path (pipelined input, cuDNN plans, CUDA graphs, checkpoints) run
# on the CPU, against the CPU backend:
# - CUDA graphs on and off give bitwise the same weights and metrics, with
#   --clip-grad (clipped on the device inside the graph) and --accum-steps
#   (a graph per kind of micro-batch) too;
# - a run stopped by --max-steps and resumed equals one uninterrupted run,
#   bit for bit;
# - strict FP32 GPU training matches CPU training, one step at a time
#   (tests/dist/step_equiv.sh: the devices sum in other orders, and over a
#   whole run on random labels that difference grows until it depends on
#   the CPU's BLAS kernels): from the CPU's checkpoints a step on each
#   device, updates within STEP_TOL; at the epoch's end losses to 1e-4 and
#   accuracies to one prediction;
# - checkpoints move between devices: one the GPU wrote continues on
#   either device to the same step;
# - a resume with another --batch-size and --accum-steps starts with a
#   shorter step (the rest of a group): graphs and eager the same bits,
#   the step within STEP_TOL of the CPU's; --eval-every changes no bit;
#   --init of a batch-norm model (buffers too) steps as on the CPU, and
#   weights with a NaN or an infinity are refused naming the tensor;
# - with no GPU visible, --device cuda fails naming the fix and --device
#   auto trains on the CPU.
# 136 samples, 123 for training after the validation split (13), at
# batch 16: 7 full batches (graphs) and one partial of 11 (eager).
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
. "${top_srcdir:-.}/tests/dist/step_equiv.sh"
train() {   # train DIR ARGS...: one run of the fake-GPU cdl-train into DIR
    dir=$1; shift
    echo "+ cdl-train $* --ckpt-dir $dir"
    timeout 600 "$fake" $common --ckpt-dir "$tmp/$dir" --metrics "$tmp/$dir.json" "$@" \
        >"$tmp/$dir.out" 2>&1 ||
        { cat "$tmp/$dir.out"; fail "training into $dir"; }
}
metrics() { # metrics DIR: epoch, train loss and accuracy, val loss and accuracy per line
    sed -n '/^{"type":"epoch"/s/.*"epoch":\([0-9]*\).*"train_loss":\([^,]*\),"train_acc":\([^,]*\),"val_loss":\([^,]*\),"val_acc":\([^,]*\).*/\1 \2 \3 \4 \5/p' \
        "$tmp/$1.json"
}
same_metrics() {  # same_metrics A B [ACC]: the epochs' losses agree to 1e-4, accuracies to ACC [0]
    metrics "$1" >"$tmp/m.a"; metrics "$2" >"$tmp/m.b"
    [ -s "$tmp/m.a" ] && [ "$(wc -l <"$tmp/m.a")" -eq "$(wc -l <"$tmp/m.b")" ] ||
        fail "metrics of $1 and $2 have different epochs"
    paste -d' ' "$tmp/m.a" "$tmp/m.b" | awk -v a="$1" -v b="$2" -v acc="${3:-0}" '
        function d(x, y) { return x > y ? x - y : y - x }
        { print "  " a " vs " b " epoch " $1 ": train loss " $2 " / " $7 ", val loss " $4 " / " $9
          if ($1 != $6 || d($2, $7) > 1e-4 || d($4, $9) > 1e-4 || d($3, $8) > acc || d($5, $10) > acc) bad = 1 }
        END { exit bad }' || fail "losses or accuracies of $1 and $2 differ"
}
same_or_fail() {
    a=$1 b=$2; shift 2
    out=$("$cmp" "$tmp/$a/last.safetensors" "$tmp/$b/last.safetensors" "$@" 2>&1)
    rc=$?
    echo "  $a vs $b ($*): $out"
    [ $rc -eq 0 ] || fail "weights of $a and $b differ beyond $*"
}

train gpu --device cuda --epochs 2
grep -q "cuda backend" "$tmp/gpu.out" || { cat "$tmp/gpu.out"; fail "gpu run did not use the cuda backend"; }
grep -q "CUDA graphs on" "$tmp/gpu.out" || { cat "$tmp/gpu.out"; fail "gpu run did not use CUDA graphs"; }
train eager --device cuda --epochs 2 --cuda-graphs off
grep -q "CUDA graphs off" "$tmp/eager.out" || { cat "$tmp/eager.out"; fail "--cuda-graphs off"; }
same_or_fail gpu eager --bitwise
same_metrics gpu eager

# --clip-grad clips on the device inside the graph steps (the norm read
# after the step): graphs on and off give the same weights and the same
# reported norms, bit for bit, and the limit is below the norms (it clips).
train clip --device cuda --epochs 1 --clip-grad 0.05 --metrics-every 1
grep -q "CUDA graphs on" "$tmp/clip.out" || { cat "$tmp/clip.out"; fail "--clip-grad turned CUDA graphs off"; }
train clipeager --device cuda --epochs 1 --clip-grad 0.05 --metrics-every 1 --cuda-graphs off
same_or_fail clip clipeager --bitwise
norms() { grep -o '"grad_norm":[^,}]*' "$tmp/$1.json"; }
[ "$(norms clip | wc -l)" -eq 8 ] && [ "$(norms clip)" = "$(norms clipeager)" ] ||
    { norms clip; norms clipeager; fail "the gradient norms of 8 steps differ with graphs on and off"; }
norms clip | awk -F: '$2 <= 0.05 { bad = 1 } END { exit bad }' ||
    fail "a gradient norm is not above --clip-grad 0.05: the test would not clip"
echo "  clip vs clipeager: 8 step norms equal, all above 0.05"
# --accum-steps 3: each kind of micro-batch (first, middle, last) is its
# own graph, all three replayed in epoch 2; the same weights as eager.
train accum --device cuda --epochs 2 --accum-steps 3 --clip-grad 0.05
grep -q "CUDA graphs on" "$tmp/accum.out" || { cat "$tmp/accum.out"; fail "--accum-steps turned CUDA graphs off"; }
train accumeager --device cuda --epochs 2 --accum-steps 3 --clip-grad 0.05 --cuda-graphs off
same_or_fail accum accumeager --bitwise
same_metrics accum accumeager

# Stopped after 5 steps (mid-epoch, graphs replaying), then resumed.
train stopped --device cuda --epochs 2 --max-steps 5
cp -r "$tmp/stopped" "$tmp/resumed"
train resumed --device cuda --epochs 2 --resume auto
same_or_fail resumed gpu --bitwise

# One step on each device from the CPU's checkpoints at steps 1, 8 (the
# epoch's last batch, partial: eager, not a graph) and 9 (epoch 2).
sm="--model $STEP_MODEL --epochs 2"
train b1 --device cpu $sm --max-steps 1
cp -r "$tmp/b1" "$tmp/b8" && train b8 --device cpu $sm --max-steps 8 --resume auto
cp -r "$tmp/b8" "$tmp/b9" && train b9 --device cpu $sm --max-steps 9 --resume auto
for s in 1 8 9; do
    for dev in cpu cuda; do
        train s$s-$dev --device $dev $sm --max-steps $((s + 1)) --resume "$tmp/b$s/last.safetensors"
    done
    step_same s$s-cpu s$s-cuda "$tmp/b$s"
done
grep -q "CUDA graphs on" "$tmp/s1-cuda.out" || { cat "$tmp/s1-cuda.out"; fail "s1-cuda did not use CUDA graphs"; }
# Step 9 ends epoch 1. Accuracies to one prediction: a logit tie within
# rounding may flip one of the 27 validation images (1/27 = 0.037).
same_metrics s8-cpu s8-cuda 0.04
# A checkpoint the GPU wrote (step 2), one step further on each device.
for dev in cpu cuda; do
    train g2$dev --device $dev $sm --max-steps 3 --resume "$tmp/s1-cuda/last.safetensors"
done
step_same g2cpu g2cuda "$tmp/s1-cuda"

# A resume with another --batch-size and --accum-steps (lib/train/
# realign.c): 3 steps of 16 samples resumed with 8 and 4 micro-batches go
# on at batch 6 of 16, inside the group [4, 8) of the new grid, whose rest
# (6, 7) is a first step shorter than the graphs' others. Graphs (one per
# kind of micro-batch, at the new size) give the bits of eager steps, and
# that shorter step equals the CPU's within STEP_TOL.
train rb --device cuda $sm --max-steps 3
for d in rbg rbe rbcpu rbcuda; do cp -r "$tmp/rb" "$tmp/$d"; done
ch="$sm --batch-size 8 --accum-steps 4 --resume-allow batch-size,accum-steps --resume auto"
train rbg --device cuda $ch
grep -q "epoch 1 continues at batch 6 of 16 after the same samples (step 1 of" "$tmp/rbg.out" ||
    { cat "$tmp/rbg.out"; fail "rbg did not resume at batch 6 (step 1) of the new settings"; }
grep -q "CUDA graphs on" "$tmp/rbg.out" || { cat "$tmp/rbg.out"; fail "rbg did not use CUDA graphs"; }
train rbe --device cuda $ch --cuda-graphs off
same_or_fail rbg rbe --bitwise
same_metrics rbg rbe
for dev in cpu cuda; do
    train rb$dev --device $dev $ch --max-steps 2
done
step_same rbcpu rbcuda "$tmp/rb"

# --eval-every between graph steps changes no bit of training; each
# validation is an eval record (steps 3, 6, 9, 12, 15).
train evalg --device cuda --epochs 2 --eval-every 3
same_or_fail evalg gpu --bitwise
[ "$(grep -c '^{"type":"eval"' "$tmp/evalg.json")" -eq 5 ] ||
    { cat "$tmp/evalg.json"; fail "--eval-every 3 did not write 5 eval records"; }

# --init of a batch-norm model (running statistics and counts are buffers,
# loaded besides the parameters) with its head left fresh: a step on the
# GPU equals the CPU's within STEP_TOL, buffers included. Smooth (no ReLU),
# convolutions without the bias that batch norm would cancel (a gradient
# of rounding noise only); --seed 2: another batch than the checkpoint's
# step, whose gradient would be nearly its own.
bn=$tmp/bn.spec
printf 'conv2d 6 kernel=5 bias=false\nbatchnorm2d\navgpool2d 4\nflatten\nlinear 10\n' >"$bn"
train bn0 --device cpu --model "$bn" --epochs 1 --max-steps 1
for dev in cpu cuda; do
    train bn$dev --device $dev --model "$bn" --epochs 1 --max-steps 1 --seed 2 \
        --init "$tmp/bn0/last.safetensors" --init-ignore 'fc1.*'
done
grep -q "except 2 tensors left fresh by --init-ignore 'fc1.\*': fc1.weight, fc1.bias" "$tmp/bncuda.out" ||
    { cat "$tmp/bncuda.out"; fail "bncuda does not name the tensors --init-ignore left fresh"; }
step_same bncpu bncuda "$tmp/bn0"

# --init of weights holding an infinity (a batch-norm's running variance,
# a buffer: read back from the GPU) is refused, naming the file and the
# tensor. It trained the epoch (validation normalising by the infinity:
# zeros), then its checkpoint was refused as "training diverged ... resume
# with a lower learning rate". The file: bn1's four tensors, zeros but
# for the infinity; --init-ignore '[cf]*' leaves conv1 and fc1 fresh.
h='{"bn1.weight":{"dtype":"F32","shape":[6],"data_offsets":[0,24]},"bn1.bias":{"dtype":"F32","shape":[6],"data_offsets":[24,48]},"bn1.running_mean":{"dtype":"F32","shape":[6],"data_offsets":[48,72]},"bn1.running_var":{"dtype":"F32","shape":[6],"data_offsets":[72,96]}}'
while [ $((${#h} % 8)) -ne 0 ]; do h="$h "; done
{ printf "\\$(printf %03o ${#h})\\$(printf %03o $((${#h} >> 8)))\\000\\000\\000\\000\\000\\000%s" "$h"
  head -c 72 /dev/zero; printf '\000\000\200\177'; head -c 20 /dev/zero; } >"$tmp/inf.safetensors"
"$fake" $common --device cuda --model "$bn" --epochs 1 --ckpt-dir "$tmp/inf" \
    --init "$tmp/inf.safetensors" --init-ignore '[cf]*' >"$tmp/inf.out" 2>&1 &&
    { cat "$tmp/inf.out"; fail "--init of an infinite running variance trained"; }
grep -q "$tmp/inf.safetensors: tensor 'bn1.running_var' holds 1 NaN or infinite value" \
    "$tmp/inf.out" || { cat "$tmp/inf.out"; fail "--init of non-finite weights: not the error naming them"; }
! grep -q "diverged; start\|lower --lr" "$tmp/inf.out" || { cat "$tmp/inf.out"; fail "--init of non-finite weights blamed --lr"; }
echo "  --init of an infinite running_var: refused"

# No GPU visible.
CDL_FAKE_GPUS=0 "$fake" $common --device cuda --epochs 1 >"$tmp/nogpu.out" 2>&1 &&
    fail "--device cuda without a GPU succeeded"
grep -q -- "--device cpu" "$tmp/nogpu.out" || { cat "$tmp/nogpu.out"; fail "no-GPU error does not name --device cpu"; }
CDL_FAKE_GPUS=0 "$fake" $common --device auto --epochs 1 >"$tmp/auto.out" 2>&1 ||
    { cat "$tmp/auto.out"; fail "--device auto without a GPU"; }
grep -q "cpu backend" "$tmp/auto.out" || { cat "$tmp/auto.out"; fail "--device auto did not fall back to the cpu"; }
echo "PASS: cdl-train on the fake GPU"
