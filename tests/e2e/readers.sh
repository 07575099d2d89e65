#!/usr/bin/env bash
# cdl-train on users' data: a .npz and a .npy folder written by NumPy, a
# CSV table; the --dataset spellings, did-you-mean and one-line errors.
. "${top_srcdir:-.}/tests/e2e/common.sh"
PY=/usr/bin/python3   # Debian's, with python3-numpy
$PY -c 'import numpy' 2>/dev/null || { echo "SKIP: no python3-numpy"; exit 77; }

$PY - "$TMP" <<'PYEOF' || die "numpy fixture"
import sys, numpy as np
d = sys.argv[1]
r = np.random.default_rng(1)
y = r.integers(0, 3, 96)
x = (r.integers(0, 40, (96, 8, 8)) + 60 * y[:, None, None]).astype(np.uint8)
np.savez_compressed(d + "/small.npz", x_train=x[:64], y_train=y[:64], x_test=x[64:], y_test=y[64:])
import os
os.mkdir(d + "/npy")
np.save(d + "/npy/x.npy", x.reshape(96, 8, 8, 1))      # (n,h,w,c), no test split
np.save(d + "/npy/y.npy", y.astype(np.int32))
os.mkdir(d + "/npy9")   # 9 samples, no test split: 10% of them is none
np.save(d + "/npy9/x.npy", x[:9]); np.save(d + "/npy9/y.npy", y[:9])
os.mkdir(d + "/npy2")   # a test split of another sample shape than training's
np.save(d + "/npy2/x_train.npy", x[:64]); np.save(d + "/npy2/y_train.npy", y[:64])
np.save(d + "/npy2/x_test.npy", x[64:, :4, :4]); np.save(d + "/npy2/y_test.npy", y[64:])
os.mkdir(d + "/npy3")   # test labels without test samples (x_test misnamed)
np.save(d + "/npy3/x_train.npy", x[:64]); np.save(d + "/npy3/y_train.npy", y[:64])
np.save(d + "/npy3/X_test.npy", x[64:]); np.save(d + "/npy3/y_test.npy", y[64:])
np.savez(d + "/ylone.npz", x_train=x[:64], y_train=y[:64], X_test=x[64:], y_test=y[64:])
with open(d + "/t.csv", "w") as f:
    f.write('f1,"f 2",kind\n')
    for i in range(96):
        f.write('%.3f,%d,"%s"\n' % (x[i].mean(), i % 2, ["a, x", "b", "c"][y[i]]))
with open(d + "/t-reordered.csv", "w") as f:   # the same table, columns in another order
    f.write('kind,"f 2",f1\n')
    for i in range(96):
        f.write('"%s",%d,%.3f\n' % (["a, x", "b", "c"][y[i]], i % 2, x[i].mean()))
PYEOF

run() { expect_status 0 "$CDL_TRAIN" --device cpu --threads 1 --epochs 1 --batch-size 16 --quiet "$@"; }
run --model mlp --dataset "npz:$TMP/small.npz" --metrics "$TMP/m.json"
grep -q '"val_acc"' "$TMP/m.json" || die "no metrics for the npz run"
run --model mlp --dataset npz --data-dir "$TMP/small.npz" --augment crop+flip --normalize 0.5,0.25

# No test split: validation is carved from training; without it, an error.
run --model mlp --dataset "npy:$TMP/npy"
expect_status 1 "$CDL_TRAIN" --device cpu --model mlp --dataset "npy:$TMP/npy" --val-split 0
expect_err "has no test split"
# Too few samples for the default 10%: the message says it was the default.
expect_status 1 "$CDL_TRAIN" --device cpu --model mlp --dataset "npy:$TMP/npy9"
expect_err "the default validation split (10%) of its 9 training samples is empty: give --val-split as a count"
run --model mlp --dataset "npy:$TMP/npy9" --val-split 1

# Test labels without their samples: a test split was meant, not none.
expect_status 1 "$CDL_TRAIN" --device cpu --model mlp --dataset "npy:$TMP/npy3"
expect_err "$TMP/npy3/y_test.npy is there but $TMP/npy3/x_test.npy is not"
expect_status 1 "$CDL_TRAIN" --device cpu --model mlp --dataset "npz:$TMP/ylone.npz"
expect_err "ylone.npz holds y_test but no x_test"
# A mistyped archive: its path does not exist, and the hint fits the
# npz:FILE form the user gave (it said to pass the file as --data-dir).
expect_status 1 "$CDL_TRAIN" --device cpu --model mlp --dataset "npz:$TMP/smal.npz"
expect_err "smal.npz: No such file or directory: the path does not exist"
expect_err "give the archive itself: --dataset npz:FILE.npz"

# The model takes one sample shape: a test split of another is an error.
expect_status 1 "$CDL_TRAIN" --device cpu --model mlp --dataset "npy:$TMP/npy2"
expect_err "the test split's samples are 1x4x4 (c,h,w) but the training split's are 1x8x8"

# Features: --augment is refused for a table, the label column is chosen.
run --model mlp --dataset "csv:$TMP/t.csv"
mkdir "$TMP/tab" && cp "$TMP/t.csv" "$TMP/tab/train.csv" && cp "$TMP/t.csv" "$TMP/tab/test.csv"
run --model mlp --dataset "csv:$TMP/tab" --label-column kind
expect_status 1 "$CDL_TRAIN" --device cpu --model mlp --dataset "csv:$TMP/tab" --augment flip
expect_err "--augment none"
expect_status 1 "$CDL_TRAIN" --device cpu --model mlp --dataset "csv:$TMP/tab" --label-column kin
expect_err "no column named 'kin'"
# A table with the default model (lenet, a picture model) said only "conv2d
# kernel 5 is larger than its 2x1x1 input"; it now says what to use.
expect_status 1 "$CDL_TRAIN" --device cpu --dataset "csv:$TMP/tab" --summary
expect_err "lenet reads pictures, but dataset csv holds 2 features per sample: use --model mlp or a spec file"
# cdl-predict's CSV quotes class names that hold commas or quotes.
run --model mlp --dataset "csv:$TMP/tab" --ckpt-dir "$TMP/ckq"
"$CDL_PREDICT" "$TMP/ckq/last.safetensors" --top-k 3 >"$TMP/pq.csv" || die "cdl-predict on a table"
$PY - "$TMP/pq.csv" <<'PYEOF' || { head -3 "$TMP/pq.csv" >&2; die "cdl-predict's CSV does not parse"; }
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
names = {"a, x", "b", "c"}
sys.exit(len(rows) != 97 or any(len(r) != 8 or r[1] not in names or r[2] not in names
                                for r in rows[1:]))
PYEOF
# A test table's columns are matched to the training table's by name: the
# same rows with the columns in another order evaluate the same.
mkdir "$TMP/tab2" && cp "$TMP/t.csv" "$TMP/tab2/train.csv" &&
    cp "$TMP/t-reordered.csv" "$TMP/tab2/test.csv" || die "tab2"
run --model mlp --dataset "csv:$TMP/tab" --metrics "$TMP/t1.json"
run --model mlp --dataset "csv:$TMP/tab2" --metrics "$TMP/t2.json"
score() { grep -o '"test_loss".*' "$1"; }
[ "$(score "$TMP/t1.json")" = "$(score "$TMP/t2.json")" ] ||
    die "reordered test columns: $(score "$TMP/t1.json") against $(score "$TMP/t2.json")"
# A model file's outputs must match the classes: 10 against 3.
printf 'flatten\nlinear 10\n' >"$TMP/ten.spec"
expect_status 1 "$CDL_TRAIN" --device cpu --model "$TMP/ten.spec" --dataset "npz:$TMP/small.npz"
expect_err "3 classes"

# Option values: did-you-mean, NAME:PATH only for formats, one line each.
expect_status 2 "$CDL_TRAIN" --dataset imagefoldr;  expect_err "did you mean imagefolder?"
expect_status 2 "$CDL_TRAIN" --dataset folder;      expect_err "use imagefolder"
expect_status 2 "$CDL_TRAIN" --dataset mnist:/x;    expect_err "--data-dir"
expect_status 2 "$CDL_TRAIN" --augment crop+flop;   expect_err "expected one of"
expect_status 2 "$CDL_TRAIN" --normalize 0.5;       expect_err "as many standard deviations"
expect_status 2 "$CDL_TRAIN" --normalize 0.5,0;     expect_err "must be > 0"
expect_status 2 "$CDL_TRAIN" --channels 2;          expect_err "--channels '2'"
[ "$(wc -l <"$TMP/err")" -eq 1 ] || die "error is not one line"
# A reader option for a dataset whose reader does not take it would be
# ignored (arrays are not resized): an error naming it and the format.
expect_status 2 "$CDL_TRAIN" --dataset "npz:$TMP/small.npz" --image-size 4
expect_err "--image-size applies to --dataset imagefolder only, and this run reads --dataset npz"
expect_status 2 "$CDL_TRAIN" --dataset "npy:$TMP/npy" --label-column kind
expect_err "--label-column applies to --dataset csv only"
expect_status 2 "$CDL_TRAIN" --dataset "csv:$TMP/t.csv" --vocab-size 10
expect_err "--vocab-size applies to --dataset text and tokens only"
expect_status 2 "$CDL_TRAIN" --dataset "text:$TMP/t.csv" --normalize none
expect_err "--normalize does not apply to token ids (--dataset text)"
expect_status 2 "$CDL_TRAIN" --dataset mnist --decode stream
expect_err "--decode applies to --dataset imagefolder only"
# A damaged archive names the file.
head -c 300 "$TMP/small.npz" >"$TMP/cut.npz"
expect_status 1 "$CDL_TRAIN" --device cpu --dataset "npz:$TMP/cut.npz"; expect_err "cut.npz"
exit 0
