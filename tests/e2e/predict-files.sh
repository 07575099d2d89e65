#!/usr/bin/env bash
# cdl-eval and cdl-predict on runs trained from users' data: an image folder
# and a CSV table (the reader options and normalisation come from the
# checkpoint), and cdl-predict on PNG files given by name.
. "${top_srcdir:-.}/tests/e2e/common.sh"
PY=/usr/bin/python3

# 3 classes of 12x10 RGB pictures (train 12 each, test 4 each), one colour
# channel brighter per class; PNGs written with zlib (no imaging library).
$PY - "$TMP" <<'PYEOF' || die "picture fixture"
import os, random, struct, sys, zlib
d = sys.argv[1]
def png(path, w, h, rows, colour=2):   # colour type 2: RGB, 0: gray
    raw = b"".join(b"\0" + bytes(r) for r in rows)
    def chunk(t, b):
        return struct.pack(">I", len(b)) + t + b + struct.pack(">I", zlib.crc32(t + b) & 0xffffffff)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, colour, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
rnd = random.Random(1)
for split, n in (("train", 12), ("test", 4)):
    for k, cls in enumerate(("blue", "green", "red")):
        os.makedirs("%s/img/%s/%s" % (d, split, cls))
        for i in range(n):
            rows = [[(90 if c == 2 - k else 60) + rnd.randrange(100) for x in range(12) for c in range(3)]
                    for y in range(10)]
            png("%s/img/%s/%s/%02d.png" % (d, split, cls, i), 12, 10, rows)
# The same folder, but the test split's first picture (the one a reader
# would take the size and channels from) is a gray 7x15 one.
import shutil
shutil.copytree(d + "/img", d + "/mix")
png(d + "/mix/test/blue/00.png", 7, 15, [[rnd.randrange(256) for x in range(7)] for y in range(15)], 0)
with open(d + "/t.csv", "w") as f:
    f.write("a,b,kind\n")
    for i in range(60):
        k = i % 3
        f.write("%.3f,%.3f,%s\n" % (k + rnd.random(), rnd.random() * 5, "xyz"[k]))
PYEOF

train() { "$CDL_TRAIN" --device cpu --threads 1 --epochs 1 --batch-size 8 --seed 3 --quiet \
              --no-progress "$@" || die "cdl-train $*"; }
# acc_equal METRICS EVAL_JSON: cdl-eval's accuracy is the run's final test accuracy.
acc_equal() {
    $PY - "$1" "$2" <<'PYEOF' || die "cdl-eval disagrees with cdl-train ($1, $2)"
import json, sys
test = [json.loads(l) for l in open(sys.argv[1]) if '"test_acc"' in l][-1]
ev = json.load(open(sys.argv[2]))
print("cdl-train test_acc", test["test_acc"], "cdl-eval accuracy", ev["accuracy"])
sys.exit(abs(test["test_acc"] - ev["accuracy"]) > 1e-6)
PYEOF
}

# An image folder read at 8x8 (scaled and centre-cropped from 12x10).
if ! "$CDL_TRAIN" --device cpu --model mlp --dataset "imagefolder:$TMP/img" --epochs 1 --max-steps 1 -q \
        --no-progress 2>"$TMP/err" >/dev/null && grep -q "built without libpng" "$TMP/err"; then
    echo "SKIP: cdl was built without libpng"; exit 77
fi
train --model mlp --dataset "imagefolder:$TMP/img" --image-size 8 --ckpt-dir "$TMP/ck" \
    --metrics "$TMP/m.jsonl"
ck="$TMP/ck/last.safetensors"
"$CDL_EVAL" "$ck" --json >"$TMP/eval.json" || die "cdl-eval on an image-folder run"
acc_equal "$TMP/m.jsonl" "$TMP/eval.json"
# Decoded by the loader's workers as batches need them: the same training,
# loss for loss, and the same evaluation.
train --model mlp --dataset "imagefolder:$TMP/img" --image-size 8 --metrics "$TMP/ms.jsonl" \
    --decode stream --workers 2
$PY - "$TMP/m.jsonl" "$TMP/ms.jsonl" <<'PYEOF' || die "--decode stream trains differently"
import json, sys
keys = ("loss", "train_loss", "val_loss", "val_acc", "test_loss", "test_acc")
def losses(p):
    return [[r.get(k) for k in keys] for r in map(json.loads, open(p)) if "val_loss" in r]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
print("memory", a, "stream", b)
sys.exit(not a or a != b)
PYEOF
"$CDL_EVAL" "$ck" --json --decode stream >"$TMP/eval-s.json" || die "cdl-eval --decode stream"
cmp -s "$TMP/eval.json" "$TMP/eval-s.json" || die "cdl-eval --decode stream differs"
# A held-out folder of one's own, class folders only (no test/ inside):
# all of it is evaluated, normalised with the run's statistics. Here the
# run's test pictures again, so the figures are the test split's.
cp -r "$TMP/img/test" "$TMP/hold"
expect_status 0 "$CDL_EVAL" "$ck" --dataset "imagefolder:$TMP/hold" --json
expect_err "$TMP/hold has no test split and is not the run's data: taking all its 12 samples as held-out data"
sed "s|$TMP/hold|$TMP/img|; s|\"checkpoint\":[^,]*,||" "$TMP/out" >"$TMP/hold.json"
sed 's|"checkpoint":[^,]*,||' "$TMP/eval.json" | cmp -s - "$TMP/hold.json" ||
    die "cdl-eval of a held-out folder: $(cat "$TMP/out") is not the test split's $(cat "$TMP/eval.json")"
expect_status 0 "$CDL_PREDICT" "$ck" --dataset "imagefolder:$TMP/hold" --top-k 1
[ "$(wc -l <"$TMP/out")" -eq 13 ] || die "cdl-predict of a held-out folder: $(cat "$TMP/out")"
# cdl-predict says so in its own words: it evaluates nothing (it said
# "evaluating all its 12 samples", cdl-eval's message).
expect_err "$TMP/hold has no test split and is not the run's data: taking all its 12 samples as held-out data"
! grep -q evaluating "$TMP/err" || die "cdl-predict speaks of evaluating: $(cat "$TMP/err")"
expect_status 2 "$CDL_TRAIN" --decode lazy; expect_err "--decode"

# Without --image-size the samples take the first training picture's size
# and channels (3x10x12); the test split is fitted to them too, not to its
# own first picture (gray 7x15), in cdl-train and in cdl-eval.
train --model mlp --dataset "imagefolder:$TMP/mix" --ckpt-dir "$TMP/ckm" --metrics "$TMP/mm.jsonl"
grep -aq '"input_shape":"3,10,12"' "$TMP/ckm/last.safetensors" ||
    die "the run's samples are not 3x10x12"
"$CDL_EVAL" "$TMP/ckm/last.safetensors" --json >"$TMP/evalm.json" ||
    die "cdl-eval on a run that took the first picture's size"
acc_equal "$TMP/mm.jsonl" "$TMP/evalm.json"
"$CDL_PREDICT" "$TMP/ckm/last.safetensors" >"$TMP/pdm.csv" || die "cdl-predict, first picture's size"
"$CDL_PREDICT" "$TMP/ckm/last.safetensors" "$TMP"/mix/test/*/*.png >"$TMP/pfm.csv" ||
    die "cdl-predict FILE..., first picture's size"
diff <(tail -n +2 "$TMP/pdm.csv" | cut -d, -f3-) <(tail -n +2 "$TMP/pfm.csv" | cut -d, -f2-) ||
    die "the test split is not read at the training split's size"

# ImageNet's statistics (3 pairs) on a folder whose first picture is gray
# and the others RGB: the RGB pictures were made gray in silence (and the
# statistics refused); now the first RGB one is named with --channels 3,
# which reads them all as RGB.
mkdir -p "$TMP/gray/a" "$TMP/gray/b" && cp "$TMP/mix/test/blue/00.png" "$TMP/gray/a/00.png" &&
    cp "$TMP"/img/train/red/0[0-4].png "$TMP/gray/b/" || die "gray fixture"
imagenet=0.485,0.456,0.406,0.229,0.224,0.225
expect_status 1 "$CDL_TRAIN" --device cpu --model mlp --dataset "imagefolder:$TMP/gray" --normalize "$imagenet"
expect_err "$TMP/gray/b/00.png is a colour picture, but the samples are grayscale because the first picture, $TMP/gray/a/00.png, is: pass --channels 3"
train --model mlp --dataset "imagefolder:$TMP/gray" --normalize "$imagenet" --channels 3 --val-split 1

# A .webp picture (torchvision's ImageFolder reads it) was left out in
# silence; now a warning names it, also under --quiet.
mkdir -p "$TMP/webp/a" "$TMP/webp/b" && cp "$TMP"/img/train/red/0[0-4].png "$TMP/webp/a/" &&
    cp "$TMP"/img/train/blue/0[0-4].png "$TMP/webp/b/" && cp "$TMP/webp/a/00.png" "$TMP/webp/b/x.webp" ||
    die "webp fixture"
train --model mlp --dataset "imagefolder:$TMP/webp" --val-split 1 2>"$TMP/err"
grep -q "cdl-train: warning: leaving out $TMP/webp/b/x.webp: cdl reads PNG and JPEG pictures only (torchvision's ImageFolder would read it)" "$TMP/err" ||
    die "no warning for the .webp left out: $(cat "$TMP/err")"

# One folder per class, no test/: cdl-eval evaluates the run's validation
# split, with a note, and gets the run's last validation accuracy.
train --model mlp --dataset "imagefolder:$TMP/img/train" --image-size 8 --ckpt-dir "$TMP/ckv" \
    --metrics "$TMP/mv.jsonl"
expect_status 0 "$CDL_EVAL" "$TMP/ckv/last.safetensors" --json
expect_err "has no test split: evaluating the run's validation split (--split val)"
$PY - "$TMP/mv.jsonl" "$TMP/out" <<'PYEOF' || die "cdl-eval's validation split differs from the run's"
import json, sys
val = [json.loads(l) for l in open(sys.argv[1]) if '"val_acc"' in l][-1]
ev = json.load(open(sys.argv[2]))
print("cdl-train val_acc", val["val_acc"], "cdl-eval", ev["split"], ev["accuracy"])
sys.exit(ev["split"] != "val" or abs(val["val_acc"] - ev["accuracy"]) > 1e-6)
PYEOF
expect_status 1 "$CDL_EVAL" "$TMP/ckv/last.safetensors" --split test
expect_err "no test split: use --split val or train"
# cdl-predict without --split: the same samples, not an error (it refused
# the run's data without a test split, which cdl-eval evaluated): its
# predictions score cdl-eval's accuracy.
"$CDL_EVAL" "$TMP/ckv/last.safetensors" --json >"$TMP/evalv.json" 2>/dev/null || die "cdl-eval, val"
expect_status 0 "$CDL_PREDICT" "$TMP/ckv/last.safetensors" --top-k 1
expect_err "has no test split: evaluating the run's validation split (--split val)"
$PY - "$TMP/evalv.json" "$TMP/out" <<'PYEOF' || die "cdl-predict's default split is not cdl-eval's"
import csv, json, sys
ev = json.load(open(sys.argv[1]))
p = list(csv.DictReader(open(sys.argv[2])))
acc = sum(r["label"] == r["class1"] for r in p) / len(p)
print("cdl-eval", ev["samples"], ev["accuracy"], "cdl-predict", len(p), acc)
sys.exit(ev["samples"] != len(p) or abs(ev["accuracy"] - acc) > 1e-6)
PYEOF

# Class names in UTF-8 line up by characters, and a long one is cut
# between characters (to 24), not inside one.
long=$(printf 'é%.0s' $(seq 25))
mkdir -p "$TMP/uni/dög" "$TMP/uni/$long" && cp "$TMP"/img/train/red/0[0-5].png "$TMP/uni/dög/" &&
    cp "$TMP"/img/train/blue/0[0-5].png "$TMP/uni/$long/" || die "uni fixture"
train --model mlp --dataset "imagefolder:$TMP/uni" --image-size 8 --ckpt-dir "$TMP/cku"
"$CDL_EVAL" "$TMP/cku/last.safetensors" >"$TMP/evalu.txt" 2>/dev/null || die "cdl-eval, UTF-8 classes"
$PY - "$TMP/evalu.txt" <<'PYEOF' || { cat "$TMP/evalu.txt" >&2; die "UTF-8 class names misaligned"; }
import sys
text = open(sys.argv[1], "rb").read().decode("utf-8")   # fails on a cut character
lines = text.splitlines()
rows = lines[lines.index("per-class accuracy:") + 2:][:2]
cm = lines[lines.index("confusion matrix (rows: true class, columns: predicted):") + 2:][:2]
print(rows, cm)
acc_end = {r.rindex(r.split()[-2]) + len(r.split()[-2]) for r in rows}   # "12.50%" or "n/a"
sys.exit(len(acc_end) != 1 or len({len(r) for r in cm}) != 1
         or "é" * 25 in text or "é" * 24 not in text)
PYEOF

# Predictions through the dataset and through the same files by name agree
# (classes and probabilities); the test split's order is class, then file.
"$CDL_PREDICT" "$ck" --top-k 2 >"$TMP/pd.csv" || die "cdl-predict --dataset"
"$CDL_PREDICT" "$ck" --top-k 2 "$TMP"/img/test/*/*.png >"$TMP/pf.csv" || die "cdl-predict FILE..."
head -1 "$TMP/pf.csv" | grep -qx 'file,class1,p1,class2,p2' || die "header: $(head -1 "$TMP/pf.csv")"
[ "$(wc -l <"$TMP/pf.csv")" -eq 13 ] || die "12 files, $(($(wc -l <"$TMP/pf.csv") - 1)) lines"
diff <(tail -n +2 "$TMP/pd.csv" | cut -d, -f3-) <(tail -n +2 "$TMP/pf.csv" | cut -d, -f2-) ||
    die "predictions on the files differ from those on the dataset"
grep -q ',red,\|,green,\|,blue,' "$TMP/pf.csv" || die "no class names"
"$CDL_PREDICT" "$ck" --format jsonl "$TMP/img/test/red/00.png" >"$TMP/pf.jsonl" ||
    die "cdl-predict --format jsonl FILE"
grep -q "^{\"file\":\"$TMP/img/test/red/00.png\",\"top\":\[{\"class\":\"" "$TMP/pf.jsonl" ||
    die "JSON line: $(cat "$TMP/pf.jsonl")"
# Another folder with some of the run's classes (blue and red of blue,
# green, red): its labels are the run's classes by name, not by position
# in its own sorted list (red would be index 1, which the model calls
# green); a class the run did not have is an error.
for c in blue red; do
    mkdir -p "$TMP/sub/train/$c" "$TMP/sub/test/$c" && cp "$TMP/img/test/$c"/*.png "$TMP/sub/test/$c/" &&
        cp "$TMP/img/train/$c"/0[01].png "$TMP/sub/train/$c/" || die "sub fixture"
done
"$CDL_PREDICT" "$ck" --data-dir "$TMP/sub" --top-k 2 >"$TMP/psub.csv" || die "cdl-predict --data-dir sub"
[ "$(tail -n +2 "$TMP/psub.csv" | cut -d, -f2 | tr '\n' ' ')" = "blue blue blue blue red red red red " ] ||
    die "labels of a folder with 2 of the 3 classes: $(cut -d, -f2 "$TMP/psub.csv" | tr '\n' ' ')"
diff <(grep -E '^[0-9]+,(blue|red),' "$TMP/pd.csv" | cut -d, -f2-) <(tail -n +2 "$TMP/psub.csv" | cut -d, -f2-) ||
    die "predictions on a subset of the classes differ from those on the whole test split"
# (A class only its train/ has is no sample of its test split.)
mkdir -p "$TMP/sub/train/purple" && cp "$TMP/img/test/red/00.png" "$TMP/sub/train/purple/" || die "purple"
expect_status 0 "$CDL_EVAL" "$ck" --data-dir "$TMP/sub"
mkdir -p "$TMP/sub/test/purple" && cp "$TMP/img/test/red/00.png" "$TMP/sub/test/purple/" || die "purple"
expect_status 1 "$CDL_EVAL" "$ck" --data-dir "$TMP/sub"
expect_err "class 'purple' of the imagefolder data is not one of the 3 classes the run was trained on"

# The validation samples are drawn from the number of training samples:
# with a picture added since the run they would be others, so it is an
# error (the test split is still fine).
cp "$TMP/img/train/red/00.png" "$TMP/img/train/red/99.png" || die "cp"
expect_status 1 "$CDL_EVAL" "$ck" --split val
expect_err "holds 37 samples, the run's held 36 (33 trained on, 3 for validation)"
expect_status 0 "$CDL_EVAL" "$ck" --split test
rm "$TMP/img/train/red/99.png"
"$CDL_EVAL" "$ck" --split val >/dev/null || die "cdl-eval --split val on the run's data"
echo "PASS: cdl-eval matches cdl-train on an image folder; cdl-predict on files matches --dataset"

# A bad file is an error naming it, or left out and counted.
echo "not a picture" >"$TMP/bad.png"
expect_status 1 "$CDL_PREDICT" "$ck" "$TMP/img/test/red/00.png" "$TMP/bad.png"
expect_err "bad.png"
expect_err "--skip-bad-files"
# The readers' advice is for folders; a FILE was named on the command line.
expect_err "bad.png is neither a PNG nor a JPEG (wrong magic bytes): leave it out or pass --skip-bad-files"
# A folder among the FILEs: how to give its pictures, not "a dataset file
# must be a plain file".
expect_status 1 "$CDL_PREDICT" "$ck" "$TMP/img/test/red"
expect_err "$TMP/img/test/red is a folder: give the pictures in it ($TMP/img/test/red/*.jpg $TMP/img/test/red/*.png), or a folder of the run's class folders as --dataset imagefolder:$TMP/img/test/red"
expect_status 0 "$CDL_PREDICT" "$ck" --skip-bad-files "$TMP/img/test/red/00.png" "$TMP/bad.png"
expect_err "left out 1"
[ "$(wc -l <"$TMP/out")" -eq 2 ] || die "--skip-bad-files: $(cat "$TMP/out")"
# cdl-train names each file it leaves out (it gave only their count).
cp -r "$TMP/img" "$TMP/img2"
cp "$TMP/bad.png" "$TMP/img2/train/red/50.png"
: >"$TMP/img2/train/red/51.png"
expect_status 0 "$CDL_TRAIN" --device cpu --threads 1 --model mlp --dataset "imagefolder:$TMP/img2" \
    --epochs 1 --max-steps 1 --skip-bad-files --no-progress
expect_err "--skip-bad-files: leaving out $TMP/img2/train/red/50.png is neither a PNG nor a JPEG (wrong magic bytes)"
expect_err "--skip-bad-files: leaving out $TMP/img2/train/red/51.png is empty (0 bytes"
expect_err "--skip-bad-files: left out 2 unreadable files of $TMP/img2"
grep -q "pass --skip-bad-files" "$TMP/err" && die "advises the option given: $(cat "$TMP/err")"
expect_status 2 "$CDL_PREDICT" "$ck" --dataset mnist "$TMP/bad.png"
expect_err "exclude each other"
# Samples of another shape than the run's: the message says so (not the
# weights loader's advice for cdl-train, --init-ignore).
expect_status 1 "$CDL_PREDICT" "$ck" --image-size 6 "$TMP/img/test/red/00.png"
expect_err "the run's samples were 3x8x8 (c,h,w), these are 3x6x6"
expect_status 1 "$CDL_EVAL" "$ck" --channels 1
expect_err "these are 1x8x8"

# A CSV table with its label column chosen: read and normalised as the run did.
mkdir "$TMP/tab" && head -46 "$TMP/t.csv" >"$TMP/tab/train.csv" &&
    { head -1 "$TMP/t.csv"; tail -15 "$TMP/t.csv"; } >"$TMP/tab/test.csv"
train --model mlp --dataset "csv:$TMP/tab" --label-column kind --ckpt-dir "$TMP/ckc" \
    --metrics "$TMP/mc.jsonl"
"$CDL_EVAL" "$TMP/ckc/last.safetensors" --json >"$TMP/evalc.json" || die "cdl-eval on a CSV run"
acc_equal "$TMP/mc.jsonl" "$TMP/evalc.json"
"$CDL_EVAL" "$TMP/ckc/last.safetensors" --dataset "csv:$TMP/tab" --split val --json \
    >"$TMP/evalv.json" || die "cdl-eval --dataset csv:PATH --split val"
expect_status 1 "$CDL_PREDICT" "$TMP/ckc/last.safetensors" "$TMP/img/test/red/00.png"
expect_err "give its rows as a CSV table"
# A table of one's own without test.csv is held-out data, as an image
# folder is: its columns are matched to the run's by the names the
# checkpoint stores (an older one's refusal: tests/e2e/predict-table.sh).
expect_status 0 "$CDL_EVAL" "$TMP/ckc/last.safetensors" --dataset "csv:$TMP/t.csv" --split test
expect_err "taking all its 60 rows as held-out data"
# A table of 3 features (or 1) has the channels of a picture: the picture
# was squeezed to one pixel and "predicted".
mkdir "$TMP/tab3" && sed 's/^a,/c,a,/; 2,$s/^/0.5,/' "$TMP/tab/train.csv" >"$TMP/tab3/train.csv"
train --model mlp --dataset "csv:$TMP/tab3" --label-column kind --ckpt-dir "$TMP/ckc3"
expect_status 1 "$CDL_PREDICT" "$TMP/ckc3/last.safetensors" "$TMP/img/test/red/00.png"
expect_err "was trained on rows of 3 features (dataset csv), not pictures"
# Weights near the float range (a run at the edge of diverging; NaN
# weights themselves are refused at load): every logit overflows to
# infinity, so the loss and the probabilities are not finite. --json stays
# JSON (null, not -nan) and a warning says why.
printf 'flatten\nlinear 3\n' >"$TMP/lin.spec"
"$PY" - "$TMP/nan.safetensors" <<'PY' || die "writing a NaN safetensors file"
import json, struct, sys
h = {"fc1.weight": {"dtype": "F32", "shape": [3, 2], "data_offsets": [0, 24]},
     "fc1.bias": {"dtype": "F32", "shape": [3], "data_offsets": [24, 36]}}
hb = json.dumps(h).encode()
hb += b" " * (-len(hb) % 8)
data = struct.pack("<6f", 3.4e38, 3.4e38, 0, 0, 0, 0) + struct.pack("<3f", 3.4e38, 0, 0)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(hb)) + hb + data)
PY
nanrun() { "$1" "$TMP/nan.safetensors" --model "$TMP/lin.spec" --dataset "csv:$TMP/tab" \
    --label-column kind --normalize none --threads 1 "${@:2}"; }
expect_status 0 nanrun "$CDL_EVAL" --json
expect_err "warning: the loss is not finite (null in --json)"
"$PY" -c 'import json, sys; d = json.load(open(sys.argv[1])); assert d["loss"] is None, d' \
    "$TMP/out" || die "cdl-eval --json of a NaN loss is not JSON: $(cat "$TMP/out")"
# No sample of NaN logits is correct: NaN compares false, so the argmax
# said class 0 and top-5 counted them all (top5 1.000000).
"$PY" - "$TMP/out" <<'PY' || die "cdl-eval counts NaN logits as correct: $(cat "$TMP/out")"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["accuracy"] == 0 and d["top5"] == 0 and d["nonfinite"] == 15, d
assert sum(d["nonfinite_per_class"]) == 15 and not any(map(any, d["confusion"])), d
assert all(a in (0, None) for a in d["per_class_accuracy"]), d
PY
expect_status 0 nanrun "$CDL_EVAL"
grep -q '^not finite  15 samples: NaN or infinite logits, counted as wrong' "$TMP/out" ||
    die "cdl-eval's text does not count the NaN samples: $(cat "$TMP/out")"
grep -qE '^top-5 +0.00%' "$TMP/out" || die "cdl-eval's top-5 of NaN logits: $(cat "$TMP/out")"
expect_status 0 nanrun "$CDL_PREDICT" --format jsonl --top-k 2
expect_err "warning: 15 samples have logits that are NaN or infinite"
"$PY" -c '
import json, sys
for line in open(sys.argv[1]):
    top = json.loads(line)["top"]
    assert [t["p"] for t in top] == [None] * 2 and [t["class"] for t in top] == [None] * 2, line' \
    "$TMP/out" ||
    die "cdl-predict --format jsonl of NaN logits is not JSON: $(head -2 "$TMP/out")"
expect_status 0 nanrun "$CDL_PREDICT" --top-k 2
[ "$(sed -n 2p "$TMP/out" | cut -d, -f3-)" = ",nan,,nan" ] ||
    die "cdl-predict ranks classes of NaN logits: $(sed -n 2p "$TMP/out")"
echo "PASS: a diverged model's NaN loss and probabilities are null in JSON, with a warning"

# A class without samples in the split has no accuracy: n/a and null, not
# 0 % (as if the model missed them all). 8 test samples of 10 classes.
"$CDL_TRAIN" --dataset synthetic --synthetic-size 40 --batch-size 8 --epochs 1 --threads 1 \
    --workers 0 --ckpt-dir "$TMP/ck0" -q || die "training on 40 samples failed"
"$CDL_EVAL" "$TMP/ck0/last.safetensors" --threads 1 >"$TMP/e0.txt" || die "cdl-eval, empty classes"
grep -qE '^  [0-9] +n/a +0$' "$TMP/e0.txt" || { cat "$TMP/e0.txt"; die "no n/a for a class without samples"; }
grep -qE '^  [0-9] +[0-9.]+% +0$' "$TMP/e0.txt" && die "an accuracy for a class without samples"
"$CDL_EVAL" "$TMP/ck0/last.safetensors" --threads 1 --json >"$TMP/e0.json" || die "cdl-eval --json"
"$PY" - "$TMP/e0.json" <<'PY' || die "cdl-eval --json: a class without samples is not null"
import json, sys
d = json.load(open(sys.argv[1]))
rows = [sum(r) for r in d["confusion"]]
assert 0 in rows, rows
for n, a in zip(rows, d["per_class_accuracy"]):
    assert (a is None) == (n == 0), (rows, d["per_class_accuracy"])
PY
echo "PASS: cdl-eval matches cdl-train on a CSV run; KIND:PATH; files refused for a table's model"
exit 0
