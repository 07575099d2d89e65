#!/usr/bin/env bash
# cdl's built-in resnet18/34/50 are torchvision's: weights that PyTorch
# saved from torchvision.models.resnetNN load strictly into them (every
# name and shape) and give the same class probabilities in evaluation mode,
# with the ImageNet stem (7x7 stride-2 conv1 and max-pool, chosen by
# stem=imagenet or by auto for pictures above 64 pixels) and the CIFAR one.
. "${top_srcdir:-.}/tests/e2e/common.sh"
py=/usr/bin/python3
$py -c 'import numpy, torch, torchvision, safetensors.torch' 2>/dev/null ||
    { echo "SKIP: python3-torchvision or safetensors not importable (scripts/install-deps.sh --test installs them)"; exit 77; }

# check MODEL ARCH STEM SIZE: torchvision's ARCH with STEM on SIZE pictures
# against cdl-predict --model MODEL.
check() {
    local model=$1 arch=$2 stem=$3 size=$4 dir=$TMP/$1-$4
    mkdir -p "$dir"
    $py "$top_srcdir/tests/e2e/torch_resnets.py" write "$dir" "$arch" "$stem" "$size" ||
        die "torchvision's $arch could not be written"
    "$CDL_PREDICT" "$dir/weights.safetensors" --model "$model" --dataset "npy:$dir" --top-k 10 \
        --format jsonl --threads 2 >"$dir/pred.jsonl" || die "cdl-predict --model $model failed"
    $py "$top_srcdir/tests/e2e/torch_resnets.py" check "$dir" "$dir/pred.jsonl" ||
        die "cdl's $model disagrees with torchvision's $arch ($stem stem, ${size}x$size)"
    rm -rf "$dir"
    echo "PASS: $model on ${size}x$size pictures is torchvision's $arch with the $stem stem"
}
check resnet18 resnet18 imagenet 72           # auto: above 64 pixels, ImageNet's stem
check resnet34:stem=cifar resnet34 cifar 32
check resnet50:stem=imagenet resnet50 imagenet 64
check resnet50 resnet50 cifar 32              # auto: CIFAR's stem

# A checkpoint of cdl's resnet50 loads strictly into torchvision's.
"$CDL_TRAIN" --model resnet50:stem=imagenet --dataset synthetic --synthetic-size 8 --batch-size 4 \
    --epochs 1 --max-steps 1 --lr 1e-3 --ckpt-dir "$TMP/ckpt" --no-progress -q ||
    die "training resnet50 failed"
$py - "$TMP/ckpt/last.safetensors" <<'PY' || die "the resnet50 checkpoint does not load strictly into torchvision"
import sys
import safetensors.torch
import torchvision
model = torchvision.models.resnet50(num_classes=10)
state = {k: v for k, v in safetensors.torch.load_file(sys.argv[1]).items()
         if not k.startswith("optimizer.")}
model.load_state_dict(state)   # strict
print(f"PASS: {len(state)} tensors of cdl's resnet50 load strictly into torchvision's")
PY

# Fine-tuning as docs/model-spec.md shows it: torchvision's weights for
# 1000 classes (random here: no download), a fresh head for the data's 10.
dir=$TMP/finetune
mkdir -p "$dir"
$py "$top_srcdir/tests/e2e/torch_resnets.py" write "$dir" resnet18 imagenet 72 >/dev/null ||
    die "torchvision's resnet18 could not be written"
$py -c 'import sys, torchvision, safetensors.torch as st
st.save_file(torchvision.models.resnet18().state_dict(), sys.argv[1])' "$dir/imagenet.safetensors" ||
    die "torchvision's 1000-class resnet18 could not be written"
"$CDL_TRAIN" --model resnet18 --init "$dir/imagenet.safetensors" --init-ignore 'fc.*' \
    --dataset "npy:$dir" --val-split 0 --batch-size 4 --epochs 1 --max-steps 1 --lr 1e-3 \
    --no-progress >"$TMP/out" 2>&1 || die "fine-tuning torchvision's resnet18 with a new head failed"
# The first line says which stem stem=auto took for the 72-pixel pictures.
grep -q "^cdl .*: resnet18 (ImageNet stem: 7x7/2 conv, max-pool) on npy " "$TMP/out" ||
    die "the first line does not name the ImageNet stem: $(head -2 "$TMP/out")"
grep -q "^weights from .*imagenet.safetensors (--init), except 2 tensors left fresh by --init-ignore 'fc.\*': fc.weight, fc.bias$" "$TMP/out" ||
    die "no line says which tensors --init left fresh: $(head -3 "$TMP/out")"
# A resumed run says its checkpoint's weights win over --init's.
for steps in 1 2; do
    "$CDL_TRAIN" --model resnet18 --init "$dir/imagenet.safetensors" --init-ignore 'fc.*' \
        --dataset "npy:$dir" --val-split 0 --batch-size 4 --epochs 1 --max-steps $steps \
        --lr 1e-3 --ckpt-dir "$dir/ck" --ckpt-every 1 --no-progress >"$TMP/out" 2>&1 ||
        die "fine-tuning with --ckpt-dir failed ($steps steps): $(tail -3 "$TMP/out")"
done
grep -q "^resuming from .*, step 1 (its weights replace --init's)$" "$TMP/out" ||
    die "a resumed --init run does not say whose weights it took: $(grep resum "$TMP/out")"
expect_status 1 "$CDL_TRAIN" --model resnet18 --init "$dir/imagenet.safetensors" \
    --dataset "npy:$dir" --val-split 0 --max-steps 1 -q
expect_err "fc.weight"
# The same weights on 32-pixel pictures, where resnet18 takes the CIFAR
# stem: the error points at the ImageNet stem, not at leaving conv1 fresh.
mkdir -p "$dir/small"
$py "$top_srcdir/tests/e2e/torch_resnets.py" write "$dir/small" resnet18 cifar 32 >/dev/null ||
    die "32-pixel pictures could not be written"
expect_status 1 "$CDL_TRAIN" --model resnet18 --init "$dir/imagenet.safetensors" \
    --init-ignore 'fc.*' --dataset "npy:$dir/small" --val-split 0 --max-steps 1 -q
expect_err "ImageNet's 7x7 stem, but the model resnet18 has the CIFAR stem (64, 3, 3, 3) (chosen for small pictures): use --model resnet18:stem=imagenet"
echo "PASS: torchvision's 1000-class weights start a 10-class run with --init-ignore 'fc.*'"

expect_status 1 "$CDL_TRAIN" --model resnet50:stem=big --dataset synthetic --max-steps 1 -q
expect_err "model resnet50:stem=big: unknown option 'stem=big': use stem=auto"
echo "PASS: an unknown stem is named with the choices"
