#!/usr/bin/env bash
# A cdl-train checkpoint loads into the equivalent torch.nn LeNet with
# model.load_state_dict(safetensors.torch.load_file(path)) — strict — and
# PyTorch then computes the same test loss and accuracy that cdl reported.
. "${top_srcdir:-.}/tests/e2e/common.sh"
py=/usr/bin/python3
data=/usr/share/datasets/fashion-mnist
[ -f "$data/t10k-images-idx3-ubyte.gz" ] || { echo "SKIP: $data missing"; exit 77; }
$py -c 'import torch, safetensors.torch' 2>/dev/null ||
    { echo "SKIP: python3-torch or safetensors not importable (scripts/install-deps.sh --test installs them)"; exit 77; }

"$CDL_TRAIN" --epochs 1 --max-steps 150 --ckpt-dir "$TMP/ckpt" --metrics "$TMP/m.jsonl" \
    --no-progress -q || die "training failed"
line=$(tail -n 1 "$TMP/m.jsonl")
acc=$(echo "$line" | sed 's/.*"val_acc":\([0-9.]*\).*/\1/')
loss=$(echo "$line" | sed 's/.*"val_loss":\([0-9.]*\).*/\1/')
$py "$top_srcdir/tests/e2e/torch_lenet.py" "$TMP/ckpt/last.safetensors" "$data" "$acc" "$loss" ||
    die "PyTorch disagrees with cdl"
echo "PASS: checkpoint loads into torch.nn with load_state_dict; PyTorch agrees (acc $acc, loss $loss)"
