#!/usr/bin/env bash
# A cdl-train checkpoint loads into the equivalent torch.nn LeNet with
# load_state_dict — strict, leaving out the optimizer.* tensors, as every
# such line of the documentation does (doc_load_lines.py runs them) — and
# PyTorch then computes the same test loss and accuracy that cdl reported;
# cdl-eval and cdl-predict agree with PyTorch on that checkpoint and on one
# PyTorch wrote (loss, accuracy, top-5, every prediction).
. "${top_srcdir:-.}/tests/e2e/common.sh"
py=/usr/bin/python3
data=/usr/share/datasets/fashion-mnist
[ -f "$data/t10k-images-idx3-ubyte.gz" ] || { echo "SKIP: $data missing"; exit 77; }
$py -c 'import torch, safetensors.torch' 2>/dev/null ||
    { echo "SKIP: python3-torch or safetensors not importable (scripts/install-deps.sh --test installs them)"; exit 77; }

"$CDL_TRAIN" --epochs 1 --max-steps 150 --ckpt-dir "$TMP/ckpt" --metrics "$TMP/m.jsonl" \
    --no-progress -q || die "training failed"
line=$(grep '"test_acc"' "$TMP/m.jsonl") || die "no test result in the metrics"
acc=$(echo "$line" | sed 's/.*"test_acc":\([0-9.]*\).*/\1/')
loss=$(echo "$line" | sed 's/.*"test_loss":\([0-9.]*\).*/\1/')
$py "$top_srcdir/tests/e2e/torch_lenet.py" "$TMP/ckpt/last.safetensors" "$data" "$acc" "$loss" ||
    die "PyTorch disagrees with cdl"
echo "PASS: checkpoint loads into torch.nn with load_state_dict; PyTorch agrees (acc $acc, loss $loss)"
$py "$top_srcdir/tests/e2e/doc_load_lines.py" "$top_srcdir" "$TMP/ckpt/last.safetensors" ||
    die "a documented load_state_dict line fails on a cdl-train checkpoint"
echo "PASS: the documentation's load_state_dict lines load a cdl-train checkpoint"

$py "$top_srcdir/tests/e2e/torch_eval.py" --write "$TMP/torch.safetensors" \
    "$TMP/ckpt/last.safetensors" || die "writing torch weights"
for ck in "$TMP/ckpt/last.safetensors" "$TMP/torch.safetensors"; do
    "$CDL_EVAL" "$ck" --model lenet --dataset fashion-mnist --json >"$TMP/eval.json" \
        2>"$TMP/err" || { cat "$TMP/err" >&2; die "cdl-eval $ck failed"; }
    # PyTorch's file stores no normalisation: the dataset's is named.
    case $ck in
    *torch.safetensors) expect_err "using fashion-mnist's published mean 0.286 and std 0.353; give --normalize if the training used others" ;;
    *) [ ! -s "$TMP/err" ] || die "cdl-eval on cdl's checkpoint printed: $(cat "$TMP/err")" ;;
    esac
    "$CDL_PREDICT" "$ck" --model lenet --dataset fashion-mnist --top-k 3 >"$TMP/pred.csv" ||
        die "cdl-predict $ck failed"
    $py "$top_srcdir/tests/e2e/torch_eval.py" "$ck" "$data" "$TMP/eval.json" "$TMP/pred.csv" ||
        die "PyTorch disagrees with cdl-eval/cdl-predict on $ck"
done
echo "PASS: cdl-eval and cdl-predict agree with PyTorch on a cdl and a PyTorch-written checkpoint"

# --init: PyTorch's weights start a run; another model's names are refused by name.
"$CDL_TRAIN" --init "$TMP/torch.safetensors" --epochs 1 --max-steps 2 --val-split 0 -q \
    --no-progress || die "cdl-train --init with PyTorch's weights failed"
# A glob that sets nothing aside (a typo, another model's names) is a
# warning: every tensor, the head too, came from the file.
"$CDL_TRAIN" --init "$TMP/torch.safetensors" --init-ignore 'head.*' --epochs 1 --max-steps 1 \
    --val-split 0 -q --no-progress 2>"$TMP/err" || die "cdl-train --init --init-ignore 'head.*' failed"
grep -q "warning: --init-ignore 'head.\*' matches none of the model's tensors: every tensor came from .* (the model's last is 'fc3.bias'; cdl-train --summary lists them)" "$TMP/err" ||
    die "no warning for an --init-ignore that matches nothing: $(cat "$TMP/err")"
expect_status 1 "$CDL_TRAIN" --model mlp --init "$TMP/torch.safetensors" --epochs 1 --max-steps 2 -q
expect_err "tensor 'conv1.bias' is not in the model mlp"
expect_status 1 "$CDL_TRAIN" --init "$TMP/torch.safetensors" --init-ignore 'fc*' --dataset synthetic \
    --synthetic-size 64 --epochs 1 --max-steps 1 -q
expect_err "tensor 'conv1.weight' has shape (6, 1, 5, 5) but the model's is (6, 3, 5, 5)"
echo "PASS: --init loads PyTorch's weights and names mismatched tensors"
