#!/usr/bin/env bash
# Weights trained in PyTorch on one's own pictures, in cdl: cdl-predict
# gives PyTorch's probabilities on the same files with --normalize (the
# file stores no normalisation, and without it cdl-predict says so);
# --init takes the weights as PyTorch users save them (F16, BF16, F64
# files, no num_batches_tracked), and names the wrapper's prefix
# (DDP's module., torch.compile's _orig_mod.) with the fix. And back: a
# cdl checkpoint in PyTorch, as docs/pytorch-models.md loads it.
. "${top_srcdir:-.}/tests/e2e/common.sh"
py=/usr/bin/python3
$py -c 'import torch, torchvision, safetensors.torch' 2>/dev/null ||
    { echo "SKIP: python3-torch, python3-torchvision or safetensors not importable"; exit 77; }
fix="$(cd "$top_srcdir" && pwd)/tests/e2e/torch_pictures.py"
train="$(cd "$top_builddir" && pwd)/cli/cdl-train"
predict="$(cd "$top_builddir" && pwd)/cli/cdl-predict"
eval="$(cd "$top_builddir" && pwd)/cli/cdl-eval"
cd "$TMP" || die "cd $TMP"
$py "$fix" make . || die "the PyTorch fixture failed"
cat >net.spec <<'SPEC'
input 3x16x16
conv2d 8 kernel=3 padding=1
batchnorm2d
relu
maxpool2d 2
flatten
linear 3
SPEC
files=$(ls pics/test/*/*.png | sort)

# No stored normalisation: an error saying what to give, not a guess.
expect_status 1 "$predict" torch.safetensors --model net.spec $files
expect_err "torch.safetensors does not store the normalisation its weights were trained with (not written by cdl-train): give --normalize"
for k in torch:f32 f16:f16 bf16:bf16 f64:f32 nobt:f32; do
    "$predict" "${k%%:*}.safetensors" --model net.spec --normalize 0.5,0.25 --format jsonl \
        --top-k 3 $files >pred.jsonl || die "cdl-predict ${k%%:*}.safetensors failed"
    $py "$fix" check . "${k#*:}" pred.jsonl || die "cdl-predict disagrees with PyTorch on ${k%%:*}"
done
# Pictures of another size: torchvision's Resize(16) + CenterCrop(16).
"$predict" torch.safetensors --model net.spec --normalize 0.5,0.25 --format jsonl --top-k 3 \
    $(ls pics/resize/*/*.png | sort) >pred.jsonl || die "cdl-predict on pics/resize failed"
$py "$fix" check . resize pred.jsonl || die "cdl-predict resizes pictures otherwise than torchvision"
# JPEGs that shrink, as PIL decodes them (--jpeg-decode full): PyTorch's
# numbers. Without it (DCT scaling) the pixels are other ones, and so are
# the probabilities; before, there was no way to get PyTorch's.
jpegs=$(ls pics/jpeg/*/*.jpg | sort)
"$predict" torch.safetensors --model net.spec --normalize 0.5,0.25 --format jsonl --top-k 3 \
    --jpeg-decode full $jpegs >pred.jsonl || die "cdl-predict --jpeg-decode full failed"
$py "$fix" check . jpeg pred.jsonl || die "cdl-predict --jpeg-decode full is not PyTorch's"
"$predict" torch.safetensors --model net.spec --normalize 0.5,0.25 --format jsonl --top-k 3 \
    $jpegs >pred.jsonl || die "cdl-predict on JPEGs failed"
$py "$fix" check . jpeg pred.jsonl >/dev/null 2>&1 &&
    die "cdl-predict decoded the JPEGs as PIL does without --jpeg-decode full (the test is void)"
expect_status 2 "$predict" torch.safetensors --jpeg-decode fast $jpegs
expect_err "cdl-predict: --jpeg-decode 'fast': use scaled or full"
# cdl-eval on a folder of 27x20 pictures: fitted to the spec's input line.
mkdir ev && cp -r pics/resize ev/test && cp -r pics/train ev/train || die "copying pictures"
"$eval" torch.safetensors --model net.spec --dataset imagefolder:ev \
    --normalize 0.5,0.25 --json >eval.json 2>err || { cat err >&2; die "cdl-eval failed"; }
$py "$fix" eval . eval.json || die "cdl-eval disagrees with PyTorch"
# The outputs named (--classes): cdl-predict prints the names, with
# PyTorch's probabilities. A folder of two of the three classes was
# numbered by its own sorted names (green 0, red 1: the model's blue and
# green), silently: refused now without --classes, scored by name with it.
"$predict" torch.safetensors --model net.spec --normalize 0.5,0.25 --format jsonl --top-k 3 \
    --classes blue,green,red $files >pred.jsonl || die "cdl-predict --classes failed"
grep -q '"class":"green"' pred.jsonl || die "cdl-predict --classes: no names: $(head -2 pred.jsonl)"
$py "$fix" check . f32 pred.jsonl || die "cdl-predict --classes disagrees with PyTorch"
mkdir ev2 && cp -r pics/resize/green pics/resize/red ev2/ || die "copying two classes"
expect_status 1 "$eval" torch.safetensors --model net.spec --dataset imagefolder:ev2 \
    --normalize 0.5,0.25
expect_err "torch.safetensors stores no class names (not written by cdl-train) and the imagefolder data has 2 classes, the model 3 outputs"
printf 'blue\ngreen\nred\n' >classes.txt
expect_status 0 "$eval" torch.safetensors --model net.spec --dataset imagefolder:ev2 \
    --normalize 0.5,0.25 --classes classes.txt --json
$py - out <<'PYEOF' || die "cdl-eval --classes on two classes disagrees with PyTorch"
import json, sys
ref, got = json.load(open("ref.json")), json.load(open(sys.argv[1]))
rows = [(f.split("/")[-2], p) for f, p in zip(ref["resize_files"], ref["resize"])
        if f.split("/")[-2] != "blue"]
names = ["blue", "green", "red"]
acc = sum(max(range(3), key=p.__getitem__) == names.index(c) for c, p in rows) / len(rows)
assert got["classes"] == names and abs(got["accuracy"] - acc) < 1e-6, (got, acc)
print(f"two classes: cdl-eval = PyTorch, accuracy {acc:.4f}")
PYEOF
# The size from --image-size when the spec has no input line.
sed -i 1d net.spec
"$predict" torch.safetensors --model net.spec --image-size 16 --normalize 0.5,0.25 \
    --format jsonl --top-k 3 $files >pred.jsonl || die "cdl-predict --image-size failed"
$py "$fix" check . f32 pred.jsonl || die "cdl-predict --image-size disagrees with PyTorch"
expect_status 1 "$predict" torch.safetensors --model net.spec --normalize 0.5,0.25 $files
expect_err "give --image-size N"
echo "PASS: cdl-predict on PyTorch's weights (F32, F16, BF16, F64) equals PyTorch on the pictures"

run() { "$train" --model net.spec --dataset imagefolder:pics --image-size 16 --normalize 0.5,0.25 \
    --epochs 1 --max-steps 1 --val-split 0 --no-progress -q --ckpt-dir ck "$@"; }
# Fine-tuning PyTorch's weights on JPEGs with --jpeg-decode full: the
# checkpoint says so, and cdl-predict decodes as the run did.
mkdir -p jt/train jt/test && cp -r pics/jpeg/. jt/train/ && cp -r pics/jpeg/. jt/test/ ||
    die "copying the JPEGs"
"$train" --model net.spec --dataset imagefolder:jt --image-size 16 --normalize 0.5,0.25 \
    --epochs 1 --val-split 0 --no-progress -q --ckpt-dir jck --init torch.safetensors \
    --jpeg-decode full || die "cdl-train --jpeg-decode full failed"
$py -c "import json,struct,sys; f=open(sys.argv[1],'rb'); n=struct.unpack('<Q',f.read(8))[0]
sys.exit(json.loads(f.read(n))['__metadata__'].get('jpeg_decode')!='full')" jck/last.safetensors ||
    die "the checkpoint of --jpeg-decode full does not say jpeg_decode full"
for m in "" "--jpeg-decode full" "--jpeg-decode scaled"; do
    "$predict" jck/last.safetensors --format jsonl --top-k 3 $m $jpegs >"pred$m.jsonl" ||
        die "cdl-predict $m on the run's checkpoint failed"
done
cmp -s pred.jsonl "pred--jpeg-decode full.jsonl" ||
    die "cdl-predict did not decode the JPEGs as the run did (--jpeg-decode full)"
cmp -s pred.jsonl "pred--jpeg-decode scaled.jsonl" &&
    die "cdl-predict --jpeg-decode scaled is the same as full (the test is void)"
# Resuming it with the other pixels is a change of the run, refused
# unless allowed (as --image-size).
expect_status 1 "$train" --model net.spec --dataset imagefolder:jt --image-size 16 \
    --normalize 0.5,0.25 --epochs 2 --val-split 0 --no-progress -q --ckpt-dir jck --resume auto \
    --resume-allow epochs
expect_err "another configuration: --jpeg-decode full -> scaled"
echo "PASS: cdl-train --jpeg-decode full is stored, and cdl-predict follows it"
for f in f16 bf16 f64 nobt; do
    rm -rf ck
    run --init $f.safetensors 2>err || { cat err >&2; die "--init $f.safetensors failed"; }
done
expect_status 1 run --init ddp.safetensors
expect_err "tensor 'module.bn1.num_batches_tracked' is not in the model net.spec: its name starts with 'module.', which DistributedDataParallel (or DataParallel) adds"
expect_err "{k.removeprefix('module.'): v for k, v in sd.items()}"
expect_status 1 run --init compiled.safetensors
expect_err "its name starts with '_orig_mod.', which torch.compile adds"
# Fine-tuning for 2 classes: the advice names the layer, whose weight and
# bias both differ, and following it works.
mkdir -p two/train two/test
cp -r pics/train/blue pics/train/green two/train && cp -r pics/test/blue pics/test/green two/test
sed 's/^linear 3$/linear 2/' net.spec >net2.spec
run() { "$train" --model net2.spec --dataset imagefolder:two --image-size 16 --normalize 0.5,0.25 \
    --epochs 1 --max-steps 1 --val-split 0 --no-progress -q --ckpt-dir ck "$@"; }
expect_status 1 run --init torch.safetensors
expect_err "tensor 'fc1.weight' has shape (3, 512) but the model's is (2, 512) (a replaced layer? leave it out with --init-ignore 'fc1.*')"
rm -rf ck
run --init torch.safetensors --init-ignore 'fc1.*' 2>err || { cat err >&2; die "--init-ignore 'fc1.*' failed"; }
# Grayscale pictures, which cdl reads as 1 channel and torchvision as RGB:
# the error says --channels 3, which then works.
expect_status 1 run --init torch.safetensors --init-ignore 'fc1.*' --dataset imagefolder:gray
expect_err "tensor 'conv1.weight' has shape (8, 3, 3, 3) but the model's is (8, 1, 3, 3): the weights are for samples of 3 channels, the data has 1 (pictures of an image folder are read so with --channels 3; torchvision's ImageFolder reads every picture as RGB)"
rm -rf ck
run --init torch.safetensors --init-ignore 'fc1.*' --dataset imagefolder:gray --channels 3 2>err ||
    { cat err >&2; die "--channels 3 on grayscale pictures failed"; }
# nn.Sequential's names (0.weight) for a spec with the automatic ones.
expect_status 1 run --init seq.safetensors
expect_err "tensor '1.num_batches_tracked' is not in the model net2.spec, whose 'bn1.num_batches_tracked' is not in the file (a spec written from a PyTorch module needs the module's names: name=1 on this tensor's layer"
echo "PASS: --init takes F16/BF16/F64 weights and files without num_batches_tracked, and names DDP's and torch.compile's prefixes"

# The other way: cdl trains on the pictures; PyTorch, with the checkpoint's
# weights, statistics and class names as docs/pytorch-models.md reads them,
# predicts what cdl-predict does.
rm -rf ck
"$train" --model net.spec --dataset imagefolder:pics --image-size 16 --epochs 2 --no-progress -q \
    --ckpt-dir ck || die "cdl-train on the pictures failed"
"$predict" ck/last.safetensors --format jsonl --top-k 3 $files >pred.jsonl ||
    die "cdl-predict on cdl's checkpoint failed"
$py "$fix" back ck/last.safetensors pred.jsonl || die "PyTorch disagrees with cdl-predict"
echo "PASS: a cdl checkpoint loaded in PyTorch as the docs say predicts as cdl-predict"
