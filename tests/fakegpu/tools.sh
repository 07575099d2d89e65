#!/bin/sh
# cdl-eval, cdl-predict and cdl-generate --device cuda on the fake GPU
# (tests/fakegpu), on checkpoints the GPU wrote, against the same programs
# on the CPU:
# - a batch-norm model (evaluation uses the running statistics the GPU
#   trained): cdl-eval's loss within 1e-5 and the same accuracy and
#   confusion matrix; cdl-predict the same classes, probabilities within
#   1e-5, whatever its --batch-size; --tf32 and CDL_TF32 reach their
#   convolutions, and cdl-eval --tf32 off gives the run's validation loss;
# - a small GPT trained in bf16, its step records with tokens_per_sec and
#   an mfu that is those tokens' FLOPs over --peak-tflops: cdl-eval's loss
#   per token within 1e-5, cdl-generate's greedy text the same, past the
#   block size;
# - with no GPU visible, --device cuda fails naming --device cpu.
set -u
if [ "${CDL_TEST_SCOPE:-}" = unit ]; then
    echo "SKIP: end-to-end test in a unit-only pass"; exit 77
fi
builddir=${top_builddir:-.}
fake=$builddir/tests/fakegpu
cli=$builddir/cli
tmp=$(mktemp -d /tmp/cdl-fakegpu-tools.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAILED: $*"; exit 1; }
train() {  # train DIR ARGS...: the fake-GPU cdl-train into DIR
    dir=$1; shift
    echo "+ cdl-train --device cuda $* --ckpt-dir $dir"
    timeout 600 "$fake/cdl-train" --device cuda --threads 1 --tf32 off --no-progress \
        --ckpt-dir "$tmp/$dir" --metrics "$tmp/$dir.json" "$@" >"$tmp/$dir.out" 2>&1 ||
        { cat "$tmp/$dir.out"; fail "training into $dir"; }
}
both() {  # both NAME TOOL ARGS...: TOOL on the GPU into NAME.cuda, on the CPU into NAME.cpu
    name=$1 tool=$2; shift 2
    echo "+ $tool $* (cuda, cpu)"
    timeout 300 "$fake/$tool" --device cuda --threads 1 "$@" >"$tmp/$name.cuda" 2>"$tmp/$name.err" ||
        { cat "$tmp/$name.err"; fail "$tool --device cuda $*"; }
    timeout 300 "$cli/$tool" --device cpu --threads 1 "$@" >"$tmp/$name.cpu" 2>"$tmp/$name.err" ||
        { cat "$tmp/$name.err"; fail "$tool --device cpu $*"; }
}
close() {  # close NAME TOL: NAME.cuda and NAME.cpu have the same words, numbers within TOL
    tr ',:[]{}' '      ' <"$tmp/$1.cuda" | tr -s ' ' '\n' >"$tmp/w.cuda"
    tr ',:[]{}' '      ' <"$tmp/$1.cpu" | tr -s ' ' '\n' >"$tmp/w.cpu"
    [ -s "$tmp/w.cuda" ] && [ "$(wc -l <"$tmp/w.cuda")" -eq "$(wc -l <"$tmp/w.cpu")" ] ||
        { cat "$tmp/$1.cuda" "$tmp/$1.cpu"; fail "$1: the GPU's and the CPU's outputs differ in length"; }
    paste -d' ' "$tmp/w.cuda" "$tmp/w.cpu" | awk -v tol="$2" -v name="$1" '
        function num(s) { return s ~ /^-?[0-9.]+(e[-+]?[0-9]+)?$/ }
        { if (num($1) && num($2)) { d = $1 - $2; if (d < 0) d = -d; if (d > max) max = d
                                    if (d > tol) bad = 1 }
          else if ($1 != $2) { print name ": " $1 " vs " $2; bad = 1 } }
        END { printf "  %s: cuda vs cpu, largest difference %g\n", name, max; exit bad }' ||
        fail "$1: the GPU's output differs from the CPU's beyond $2"
}

# A batch-norm model trained on the GPU: the tools read its running
# statistics. Smooth (no ReLU): a rounding difference cannot flip a class.
bn=$tmp/bn.spec
printf 'conv2d 6 kernel=5 bias=false\nbatchnorm2d\navgpool2d 4\nflatten\nlinear 10\n' >"$bn"
train bn --model "$bn" --dataset synthetic --synthetic-size 136 --batch-size 16 --epochs 1 \
    --lr 0.05
ck=$tmp/bn/last.safetensors
both eval cdl-eval "$ck" --json
grep -q '"accuracy"' "$tmp/eval.cuda" || { cat "$tmp/eval.cuda"; fail "cdl-eval --json has no accuracy"; }
close eval 1e-5
both predict cdl-predict "$ck"
[ "$(wc -l <"$tmp/predict.cuda")" -eq 28 ] || { cat "$tmp/predict.cuda"; fail "cdl-predict: not 27 test samples"; }
close predict 1e-5
both predict5 cdl-predict "$ck" --batch-size 5
cp "$tmp/predict.cpu" "$tmp/predict5.cpu"
close predict5 1e-5

# --tf32 and CDL_TF32 reach the tools' GPU (they were ignored: TF32
# convolutions always). The run trained with --tf32 off: cdl-eval --tf32
# off of its validation split gives its last validation loss (TF32 was
# 6e-6 off here, and a real GPU's TF32 error is larger).
tf32() {  # tf32 WANT TOOL ARGS...: TOOL's convolutions run with TF32 WANT (on, off)
    want=$1 tool=$2; shift 2
    CDL_LOG=cudnn "$fake/$tool" "$ck" --device cuda --threads 1 "$@" >"$tmp/tf32.out" 2>"$tmp/tf32.err" ||
        { cat "$tmp/tf32.err"; fail "$tool $*"; }
    grep -q "(TF32 $want," "$tmp/tf32.err" && ! grep -q "(TF32 $([ $want = on ] && echo off || echo on)," "$tmp/tf32.err" ||
        { cat "$tmp/tf32.err"; fail "$tool $* ${CDL_TF32:+(CDL_TF32=$CDL_TF32)}: convolutions not with TF32 $want"; }
}
for tool in cdl-eval cdl-predict; do
    tf32 on $tool
    tf32 off $tool --tf32 off
    CDL_TF32=off tf32 off $tool
    CDL_TF32=off tf32 on $tool --tf32 on
done
tf32 off cdl-eval --split val --json --tf32 off
val=$(sed -n 's/^{"type":"epoch".*"val_loss":\([^,]*\).*/\1/p' "$tmp/bn.json")
got=$(sed -n 's/.*"loss":\([^,]*\).*/\1/p' "$tmp/tf32.out")
awk -v a="$val" -v b="$got" 'BEGIN { d = a - b; exit !(d <= 1e-6 && d >= -1e-6) }' ||
    fail "cdl-eval --tf32 off: validation loss $got, the run's was $val"
echo "  cdl-eval --tf32 off: val loss $got, the run's $val"
CDL_TF32=bad "$fake/cdl-eval" "$ck" --device cuda >"$tmp/bad.out" 2>&1 && fail "CDL_TF32=bad was taken"
grep -q "CDL_TF32 'bad': use on" "$tmp/bad.out" || { cat "$tmp/bad.out"; fail "CDL_TF32=bad: no error naming it"; }

# A GPT of one layer trained in bf16 on the digits 0-9 repeated: step
# records hold tokens_per_sec and mfu = FLOPs per token (the run's first
# lines) x tokens_per_sec / --peak-tflops (one device).
i=0
while [ $i -lt 100 ]; do printf 0123456789; i=$((i + 1)); done >"$tmp/count.txt"
train gpt --model gpt:n_layer=1,n_head=2,n_embd=32 --dataset "text:$tmp/count.txt" --block-size 16 \
    --batch-size 8 --optimizer adamw --lr 0.01 --epochs 2 --seed 5 --precision bf16 \
    --metrics-every 2 --peak-tflops 0.001
gflop=$(sed -n 's/^MFU: \([0-9.e+-]*\) GFLOP per token .*--peak-tflops.*/\1/p' "$tmp/gpt.out")
[ -n "$gflop" ] || { cat "$tmp/gpt.out"; fail "the gpt run does not say its FLOPs per token"; }
grep '^{"type":"step"' "$tmp/gpt.json" | awk -v gflop="$gflop" '
    { tps = $0; sub(/.*"tokens_per_sec":/, "", tps); sub(/[,}].*/, "", tps)
      mfu = $0; sub(/.*"mfu":/, "", mfu); sub(/[,}].*/, "", mfu)
      if ($0 !~ /"tokens_per_sec":/ || $0 !~ /"mfu":/ || !(tps > 0)) { print "no tokens/s or mfu: " $0; bad = 1; next }
      # GFLOP/s over 0.001 TFLOP/s; to 1 %: the GFLOP line has 3 digits
      want = gflop * tps; d = mfu - want; if (d < 0) d = -d
      if (d > 1e-2 * want + 1e-6) { print "mfu " mfu ", expected " want ": " $0; bad = 1 }
      n++ }
    END { printf "  gpt: %d step records, tokens/s and mfu consistent\n", n; exit bad || n != 7 }' ||
    fail "the GPU's step records lack tokens/s or MFU, or they disagree"
ck=$tmp/gpt/last.safetensors
both lmeval cdl-eval "$ck" --json
grep -q '"perplexity"' "$tmp/lmeval.cuda" || { cat "$tmp/lmeval.cuda"; fail "cdl-eval of the gpt"; }
close lmeval 1e-5
# 40 tokens from a 4-token prompt: past the block of 16, so the window slides.
both gen cdl-generate "$ck" --prompt 0123 --max-tokens 40 --temperature 0 --tf32 off
cmp -s "$tmp/gen.cuda" "$tmp/gen.cpu" || { cat "$tmp/gen.cuda" "$tmp/gen.cpu"; fail "cdl-generate: another text on the GPU"; }
echo "  gen: $(cat "$tmp/gen.cuda")"
grep -q '^0123456789012345678901234567890123456789' "$tmp/gen.cuda" ||
    fail "the gpt did not learn to count (the check would not tell a broken model)"
# No GPU visible: --device cuda is an error naming --device cpu, for each.
for tool in cdl-eval cdl-predict cdl-generate; do
    CDL_FAKE_GPUS=0 "$fake/$tool" "$ck" --device cuda >"$tmp/nogpu.out" 2>&1 &&
        fail "$tool --device cuda without a GPU succeeded"
    grep -q "no CUDA GPU is visible.*use --device cpu" "$tmp/nogpu.out" ||
        { cat "$tmp/nogpu.out"; fail "$tool: the no-GPU error does not name --device cpu"; }
done
echo "PASS: cdl-eval, cdl-predict and cdl-generate on the fake GPU"
