#!/usr/bin/env bash
# A cdl-train checkpoint of the built-in resnet18 loads strictly into
# torchvision's resnet18 with the CIFAR stem swapped in (conv1 3x3 stride
# 1, maxpool = Identity): the parameter and buffer names are torchvision's.
. "${top_srcdir:-.}/tests/e2e/common.sh"
py=/usr/bin/python3
$py -c 'import torch, torchvision, safetensors.torch' 2>/dev/null ||
    { echo "SKIP: python3-torchvision or safetensors not importable (scripts/install-deps.sh --test installs them)"; exit 77; }

# Two steps of batch 4 on synthetic 3x32x32 data: only the names matter.
"$CDL_TRAIN" --model resnet18 --dataset synthetic --synthetic-size 64 --batch-size 4 \
    --epochs 1 --max-steps 2 --ckpt-dir "$TMP/ckpt" --no-progress -q || die "training failed"
$py "$top_srcdir/tests/e2e/torch_resnet18.py" "$TMP/ckpt/last.safetensors" 3 ||
    die "the resnet18 checkpoint does not load strictly into torchvision"
