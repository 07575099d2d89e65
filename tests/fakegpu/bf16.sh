#!/bin/sh
# --precision bf16 on the fake GPU (tests/fakegpu), against fp32:
# - the bf16 matrix products within the bounds of bf16's rounding, graph
#   steps, the weight cache, the workspace and the CPU's refusal
#   (tests/gpu/ops_bf16.c, which derives the bounds); attention on the
#   emulated tensor cores (attn_bf16.cu) forward and backward within its
#   bounds;
# - one training step from the same checkpoint: the bf16 update of every
#   tensor within BF16_STEP_TOL of the fp32 update (relative to the
#   tensor's largest update, weights_cmp --base), and not equal to it;
# - a few epochs of training: bf16's losses within BF16_LOSS_TOL of
#   fp32's (relative);
# - bf16 on the CPU, or on auto without a GPU, fails naming --precision.
# The tolerances are derived in docs/cuda.md ("bf16"), where the measured
# values are too.
set -u
if [ "${CDL_TEST_SCOPE:-}" = unit ]; then
    echo "SKIP: end-to-end test in a unit-only pass"; exit 77
fi
builddir=${top_builddir:-.}
fake=$builddir/tests/fakegpu/cdl-train
cmp=$builddir/tests/dist/weights_cmp
tmp=$(mktemp -d /tmp/cdl-fakegpu-bf16.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAILED: $*"; exit 1; }
BF16_STEP_TOL=${BF16_STEP_TOL:-5e-2}
BF16_LOSS_TOL=${BF16_LOSS_TOL:-1e-2}

timeout 300 "$builddir/tests/fakegpu/ops_bf16" >"$tmp/ops.out" 2>&1
rc=$?
grep -E '^(FAIL|fakegpu:)' "$tmp/ops.out"
tail -n 1 "$tmp/ops.out"
[ $rc -eq 0 ] || fail "ops_bf16 on the fake GPU exited $rc"
grep -q '^fakegpu:' "$tmp/ops.out" && fail "the fake GPU reported a misuse"

. "${top_srcdir:-.}/tests/dist/step_equiv.sh"
common="--dataset synthetic --synthetic-size 136 --batch-size 16 --schedule constant --lr 0.01 --threads 1 --tf32 off --no-progress --device cuda"
train() {   # train DIR ARGS...
    dir=$1; shift
    echo "+ cdl-train $* --ckpt-dir $dir"
    timeout 600 "$fake" $common --ckpt-dir "$tmp/$dir" --metrics "$tmp/$dir.json" "$@" \
        >"$tmp/$dir.out" 2>&1 ||
        { cat "$tmp/$dir.out"; fail "training into $dir"; }
}

# One step from the same checkpoint (the smooth LeNet of step_equiv.sh:
# no branch to flip, so the step's difference is the products' rounding).
sm="--model $STEP_MODEL --epochs 1"
train base $sm --max-steps 1 --precision fp32
for p in fp32 bf16; do
    train step-$p $sm --max-steps 2 --precision $p --resume "$tmp/base/last.safetensors"
done
grep -q '"precision":"bf16"' "$tmp/step-bf16.json" || fail "the metrics do not say precision bf16"
grep -q "precision bf16: matrix products" "$tmp/step-bf16.out" || { cat "$tmp/step-bf16.out"; fail "the run does not say it trains in bf16"; }
out=$("$cmp" "$tmp/step-bf16/last.safetensors" "$tmp/step-fp32/last.safetensors" \
    --base "$tmp/base/last.safetensors" --rel "$BF16_STEP_TOL" 2>&1)
rc=$?
echo "  one step, bf16 vs fp32 update: $out"
[ $rc -eq 0 ] || fail "the bf16 step's update differs from fp32's beyond $BF16_STEP_TOL"
"$cmp" "$tmp/step-bf16/last.safetensors" "$tmp/step-fp32/last.safetensors" \
    --base "$tmp/base/last.safetensors" --rel 1e-5 >/dev/null 2>&1 &&
    fail "the bf16 step's update equals fp32's to 1e-5: bf16 did not reach the products"

# A few epochs of the MLP: the losses stay within BF16_LOSS_TOL.
for p in fp32 bf16; do
    train mlp-$p --model mlp --epochs 3 --precision $p
done
losses() {  # epoch, train loss, val loss per line
    sed -n '/^{"type":"epoch"/s/.*"epoch":\([0-9]*\).*"train_loss":\([^,]*\),.*"val_loss":\([^,]*\),.*/\1 \2 \3/p' \
        "$tmp/$1.json"
}
losses mlp-fp32 >"$tmp/l.a"; losses mlp-bf16 >"$tmp/l.b"
[ "$(wc -l <"$tmp/l.a")" -eq 3 ] && [ "$(wc -l <"$tmp/l.b")" -eq 3 ] ||
    fail "the MLP runs did not report 3 epochs each"
paste -d' ' "$tmp/l.a" "$tmp/l.b" | awk -v tol="$BF16_LOSS_TOL" '
    function rel(x, y) { d = x > y ? x - y : y - x; return d / (y > 0 ? y : -y) }
    { print "  mlp epoch " $1 ": train loss fp32 " $2 " bf16 " $5 " (" rel($5, $2) "), val loss fp32 " $3 " bf16 " $6 " (" rel($6, $3) ")"
      if (rel($5, $2) > tol || rel($6, $3) > tol) bad = 1 }
    END { exit bad }' || fail "bf16 losses differ from fp32's beyond $BF16_LOSS_TOL"

# The CPU refuses bf16, naming the option.
"$fake" $common --device cpu --epochs 1 --precision bf16 >"$tmp/cpu.out" 2>&1 &&
    fail "--device cpu --precision bf16 succeeded"
grep -q -- "--precision fp32" "$tmp/cpu.out" || { cat "$tmp/cpu.out"; fail "the CPU's refusal does not name --precision fp32"; }
CDL_FAKE_GPUS=0 "$fake" $common --device auto --epochs 1 --precision bf16 >"$tmp/auto.out" 2>&1 &&
    fail "--device auto --precision bf16 without a GPU succeeded"
grep -q -- "--precision fp32" "$tmp/auto.out" || { cat "$tmp/auto.out"; fail "auto without a GPU: the refusal does not name --precision fp32"; }
"$fake" $common --epochs 1 --precision fp16 >"$tmp/bad.out" 2>&1
[ $? -eq 2 ] || { cat "$tmp/bad.out"; fail "--precision fp16 is not a usage error"; }
echo "PASS: bf16 on the fake GPU within its tolerances of fp32"
