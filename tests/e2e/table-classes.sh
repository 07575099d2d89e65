#!/usr/bin/env bash
# The classes of a train.csv/test.csv pair read by name (--columns) for
# weights that store no class names (PyTorch's; no PyTorch needed here).
#
# The outputs' names were the test table's own labels, sorted: a test.csv
# without one of the training classes stopped cdl-eval and cdl-predict
# ("the csv data has 2 classes, the model 3 outputs"), and a test.csv whose
# labels differed otherwise (w, y, z for x, y, z) was numbered by them in
# silence (w taken for output 0, x). They are the training table's labels,
# sorted (LabelEncoder fitted on the training data, as cdl's reader numbers
# a test table by position), and a test label train.csv lacks is an error
# naming the file, the row's line in it and the label, saying what to do:
# cdl-eval and cdl-predict named the row's number (3), which a blank line
# or a quoted field over two lines before it makes another than its line
# (5), the one a text editor shows.
. "${top_srcdir:-.}/tests/e2e/common.sh"
PY=/usr/bin/python3
[ -x "$PY" ] || { echo "SKIP: python3"; exit 77; }

"$PY" - "$TMP" <<'PYEOF' || die "table fixture"
import os, random, sys
d = sys.argv[1]
rnd = random.Random(11)
def row(k):
    return "%.3f,%.3f,%.3f,%s\n" % (k + rnd.random(), 3 * rnd.random() - k, 10 + rnd.random(),
                                      "xyz"[k])
head = "a,b,c,kind\n"
train = [row(i % 3) for i in range(60)]
test = [row(k) for k in (0, 2) * 8]            # no row of class y
for name, rows in (("tab", train), ("two", train), ("odd", train)):
    os.mkdir(os.path.join(d, name))
    open(os.path.join(d, name, "train.csv"), "w").write(head + "".join(rows))
open(os.path.join(d, "tab", "test.csv"), "w").write(head + "".join(row(i % 3) for i in range(18)))
open(os.path.join(d, "two", "test.csv"), "w").write(head + "".join(test))
# Three labels as train.csv has, one of them (w, row 3, line 5 after a
# blank line) not its: numbered on their own, w y z would be 0 1 2 as x y z
# are.
odd = [row(1), "\n", row(2), row(0).replace(",x\n", ",w\n")] + test
open(os.path.join(d, "odd", "test.csv"), "w").write(head + "".join(odd))
# The same rows with a note column, the first row's note over two lines
# (quoted): w is on line 5 again. Read by name, the note is not read.
os.mkdir(os.path.join(d, "noted"))
open(os.path.join(d, "noted", "train.csv"), "w").write(head + "".join(train))
noted = ['"two\nlines",' + odd[0]] + ["n," + r for r in odd[2:]]
open(os.path.join(d, "noted", "test.csv"), "w").write("note," + head + "".join(noted))
PYEOF
printf 'input 3x1x1\nflatten\nlinear 32\nrelu\nlinear 3\n' >"$TMP/net.spec"
"$CDL_TRAIN" --device cpu --threads 1 --epochs 3 --batch-size 8 --seed 3 --quiet --no-progress \
    --model "$TMP/net.spec" --dataset "csv:$TMP/tab" --label-column kind --ckpt-dir "$TMP/ck" ||
    die "cdl-train on tab/train.csv"
ck="$TMP/ck/last.safetensors"
# The weights as PyTorch writes them (no metadata), and the run's statistics.
"$PY" "$top_srcdir/tests/e2e/strip_ckpt.py" "$ck" "$TMP/w.safetensors" "$TMP/norm" x,y,z ||
    die "stripping the checkpoint"
norm=$(cat "$TMP/norm")
w() { local p=$1; shift; "$p" "$TMP/w.safetensors" --threads 1 --model "$TMP/net.spec" \
    --normalize "$norm" --label-column kind "$@"; }
figures() { "$PY" -c 'import json, sys; d = json.load(open(sys.argv[1]))
print(d["samples"], "%.6f" % d["loss"], "%.6f" % d["accuracy"], ",".join(d["classes"]), d["confusion"])' "$1"; }

# A test.csv of all the classes, then one without y: by name as by position
# and as the run's own checkpoint (which stores the names) scores it.
for t in tab two; do
    expect_status 0 "$CDL_EVAL" "$ck" --threads 1 --json --dataset "csv:$TMP/$t"
    figures "$TMP/out" >"$TMP/want"
    grep -q ' x,y,z ' "$TMP/want" || die "$t: the run's classes: $(cat "$TMP/want")"
    expect_status 0 w "$CDL_EVAL" --json --dataset "csv:$TMP/$t"
    figures "$TMP/out" >"$TMP/pos"
    cmp -s "$TMP/want" "$TMP/pos" || die "$t by position: $(cat "$TMP/pos"), the run's: $(cat "$TMP/want")"
    expect_status 0 w "$CDL_EVAL" --json --columns a,b,c --dataset "csv:$TMP/$t"
    figures "$TMP/out" >"$TMP/got"
    cmp -s "$TMP/want" "$TMP/got" || die "$t --columns: $(cat "$TMP/got"), the run's: $(cat "$TMP/want")"
done
# cdl-predict of the test split names the outputs by train.csv's labels.
expect_status 0 w "$CDL_PREDICT" --columns a,b,c --top-k 3 --dataset "csv:$TMP/two"
[ "$(sed 1d "$TMP/out" | cut -d, -f3,5,7 | tr ',' '\n' | sort -u | tr '\n' ' ')" = "x y z " ] ||
    die "cdl-predict --columns on two/: $(head -3 "$TMP/out")"
# Given names are taken as before.
expect_status 0 w "$CDL_EVAL" --json --columns a,b,c --classes x,y,z --dataset "csv:$TMP/two"
figures "$TMP/out" >"$TMP/got"
cmp -s "$TMP/want" "$TMP/got" || die "--classes x,y,z: $(cat "$TMP/got")"
echo "PASS: a test.csv's classes are the training table's, read by name"

# A test label the training table lacks: an error naming file, line, label.
for t in odd noted; do
    for prog in "$CDL_EVAL" "$CDL_PREDICT"; do
        expect_status 1 w "$prog" --columns a,b,c --dataset "csv:$TMP/$t"
        expect_err "$TMP/$t/test.csv:5: the label 'w' is not a class of the training table $TMP/$t/train.csv, whose 3 distinct labels, sorted as LabelEncoder numbers them, name the outputs of $TMP/w.safetensors (it stores no class names): correct the label or drop the row, or give the training's class names in the order of the outputs with --classes FILE|A,B,..."
    done
done
# By position (the reader's own test split): the file's line, and train.csv.
expect_status 1 w "$CDL_EVAL" --dataset "csv:$TMP/odd"
expect_err "$TMP/odd/test.csv:5: label 'w' is not a class of the training table $TMP/odd/train.csv, whose 3 classes ('x', 'y', 'z') number the model's outputs"
expect_err "correct the label or drop the row"
# The run's checkpoint names its classes: the same line, told by them.
for t in odd noted; do
    expect_status 1 "$CDL_EVAL" "$ck" --threads 1 --dataset "csv:$TMP/$t"
    expect_err "$TMP/$t/test.csv:5: the label 'w' is not one of the 3 classes $ck was trained on (its class_names): evaluate on rows of those classes: correct the label or drop the row"
done
# A train.csv without the label column cannot name the outputs: said, and
# --classes reads the test table alone.
sed -i '1s/kind/kinds/' "$TMP/two/train.csv"
expect_status 1 w "$CDL_EVAL" --columns a,b,c --dataset "csv:$TMP/two"
expect_err "$TMP/two/train.csv:1: the header has no label column 'kind': $TMP/w.safetensors stores no class names, which are then the training table's labels, sorted: give --label-column, or the training's class names with --classes FILE|A,B,..."
expect_status 0 w "$CDL_EVAL" --json --columns a,b,c --classes x,y,z --dataset "csv:$TMP/two"
figures "$TMP/out" >"$TMP/got"
cmp -s "$TMP/want" "$TMP/got" || die "--classes x,y,z, train.csv unread: $(cat "$TMP/got")"
echo "PASS: a test label the training table lacks is an error naming it"

# A validation split of one file: the run's split, by name, its classes.
"$CDL_TRAIN" --device cpu --threads 1 --epochs 2 --batch-size 8 --seed 5 --quiet --no-progress \
    --model "$TMP/net.spec" --dataset "csv:$TMP/tab/train.csv" --label-column kind \
    --val-split 15 --ckpt-dir "$TMP/ckv" || die "cdl-train with a validation split"
"$CDL_EVAL" "$TMP/ckv/last.safetensors" --threads 1 --json --split val >"$TMP/val.json" ||
    die "cdl-eval --split val"
grep -q '"split":"val","samples":15,' "$TMP/val.json" || die "val split: $(cat "$TMP/val.json")"
grep -q '"classes":\["x","y","z"\]' "$TMP/val.json" || die "val classes: $(cat "$TMP/val.json")"
echo "PASS: a single file's validation split keeps the run's classes"
