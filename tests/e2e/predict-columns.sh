#!/usr/bin/env bash
# Tables for weights that do not name their columns, and a run's tables
# read once, by name (no PyTorch needed).
#
# 1. Weights PyTorch wrote (a cdl checkpoint with its metadata stripped, as
#    safetensors.torch.save_file writes a state dict) could not predict on
#    a CSV table's rows at all ("trained on unknown data, not a CSV
#    table"): --columns names the feature columns in the model's input
#    order; without it the error says to give it. With it (and the run's
#    --normalize) the probabilities are the checkpoint's own.
# 2. cdl-eval on the run's own train.csv/test.csv read each table twice (by
#    position against train.csv, then again by name): a test.csv with a
#    column more than train.csv (an id) was refused by the first read,
#    though the rows read by name were fine. One read, by name, now.
# 3. The run's table given as the folder holding it (csv:DIR for a run of
#    csv:DIR/train.csv) was taken for a table of one's own: all its rows,
#    the trained-on ones too, as held-out data, where the file's name gave
#    the run's validation split. Both are the run's data now.
# 4. A label of such a table the run lacks was told by its row's number
#    (row 3), which a quoted field over two lines (an id column's) before
#    it makes another than the line a text editor shows (5): its line now.
. "${top_srcdir:-.}/tests/e2e/common.sh"
PY=/usr/bin/python3
[ -x "$PY" ] || { echo "SKIP: no python3"; exit 77; }

"$PY" - "$TMP" <<'PYEOF' || die "table fixture"
import random, sys
d = sys.argv[1]
rnd = random.Random(7)
rows = []
for i in range(60):
    k = i % 3
    rows.append((k + rnd.random(), 3 * rnd.random() - k, 10 + rnd.random(), "xyz"[k]))
with open(d + "/train.csv", "w") as f:
    f.write("a,b,c,kind\n")
    for r in rows:
        f.write("%.3f,%.3f,%.3f,%s\n" % r)
# New rows: another column order, an id column, no label.
with open(d + "/rows.csv", "w") as f:
    f.write("id,c,a,b\n")
    for i, r in enumerate(rows[:12]):
        f.write("r%d,%.3f,%.3f,%.3f\n" % (i, r[2], r[0], r[1]))
# The same rows labelled by class index, as a PyTorch training numbers them.
with open(d + "/own.csv", "w") as f:
    f.write("b,label,a,c\n")
    for r in rows[:12]:
        f.write("%.3f,%d,%.3f,%.3f\n" % (r[1], "xyz".index(r[3]), r[0], r[2]))
PYEOF
printf 'input 3x1x1\nflatten\nlinear 256\nrelu\nlinear 128\nrelu\nlinear 3\n' >"$TMP/net.spec"

"$CDL_TRAIN" --device cpu --threads 1 --epochs 2 --batch-size 8 --seed 3 --quiet --no-progress \
    --model "$TMP/net.spec" --dataset "csv:$TMP/train.csv" --label-column kind \
    --ckpt-dir "$TMP/ck" || die "cdl-train on a table"
ck="$TMP/ck/last.safetensors"

# The weights as PyTorch writes them: no metadata, no optimizer state. The
# run's statistics, which the training's transform would have applied.
"$PY" "$top_srcdir/tests/e2e/strip_ckpt.py" "$ck" "$TMP/w.safetensors" "$TMP/norm" ||
    die "stripping the checkpoint"
# A checkpoint of an older cdl: its metadata without the column names.
"$PY" - "$ck" "$TMP/old.safetensors" <<'PYEOF' || die "writing an older checkpoint"
import json, struct, sys
src, dst = sys.argv[1:3]
raw = open(src, "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
head = json.loads(raw[8:8 + n])
del head["__metadata__"]["feature_columns"], head["__metadata__"]["cdl_checksum"]
hb = json.dumps(head).encode()
hb += b" " * (-len(hb) % 8)
open(dst, "wb").write(struct.pack("<Q", len(hb)) + hb + raw[8 + n:])
PYEOF
norm=$(cat "$TMP/norm")
pt() { "$CDL_PREDICT" "$TMP/w.safetensors" --threads 1 --model "$TMP/net.spec" "$@"; }

expect_status 1 pt --normalize "$norm" "$TMP/rows.csv"
expect_err "does not store the names of the feature columns its model takes"
expect_err "give --columns A,B,..."
expect_status 0 pt --normalize "$norm" --columns a,b,c --top-k 3 "$TMP/rows.csv"
cp "$TMP/out" "$TMP/pt.csv"
expect_err "column 'id' is not among the model's feature columns"
expect_status 0 "$CDL_PREDICT" "$ck" --threads 1 --top-k 3 "$TMP/rows.csv"
cp "$TMP/out" "$TMP/cdl.csv"
# The same probabilities (PyTorch's weights name classes by index).
"$PY" - "$TMP/pt.csv" "$TMP/cdl.csv" <<'PYEOF' || die "--columns: other probabilities than the run's"
import csv, sys
a = list(csv.DictReader(open(sys.argv[1])))
b = list(csv.DictReader(open(sys.argv[2])))
assert len(a) == len(b) == 12, (len(a), len(b))
for x, y in zip(a, b):
    for j in (1, 2, 3):
        assert x["p%d" % j] == y["p%d" % j], (x, y)
        assert "xyz"[int(x["class%d" % j])] == y["class%d" % j], (x, y)
PYEOF
# A name the table lacks; names in another order are other inputs.
expect_status 1 pt --normalize "$norm" --columns a,b,q "$TMP/rows.csv"
expect_err "rows.csv:1: the header lacks 1 of the 3 feature columns the model was trained on: 'q'"
expect_status 2 pt --normalize "$norm" --columns a,,c "$TMP/rows.csv"
expect_err "--columns 'a,,c': column 2 is empty (a typing slip? a column without a name is \"\"): give the feature column names separated by commas"
# An older cdl's checkpoint: told to give --columns, which it then takes
# (checked against its samples' size).
old="$TMP/old.safetensors"
expect_status 1 "$CDL_PREDICT" "$old" --threads 1 "$TMP/rows.csv"
expect_err "give them with --columns A,B,... in the training table's order"
expect_status 1 "$CDL_PREDICT" "$old" --threads 1 --columns a,b "$TMP/rows.csv"
expect_err "--columns names 2 columns, but the samples $old was trained on were 3x1x1"
expect_status 0 "$CDL_PREDICT" "$old" --threads 1 --columns a,b,c --top-k 3 "$TMP/rows.csv"
cmp -s "$TMP/out" "$TMP/cdl.csv" || die "an older checkpoint with --columns: other predictions"
# A model of pictures: --columns does not make it one of a table.
"$CDL_TRAIN" --dataset synthetic --synthetic-size 40 --batch-size 8 --epochs 1 --threads 1 \
    --workers 0 --ckpt-dir "$TMP/cks" -q || die "training on synthetic data"
expect_status 1 "$CDL_PREDICT" "$TMP/cks/last.safetensors" --columns a,b,c "$TMP/rows.csv"
expect_err "was trained on synthetic data, not a CSV table: a .csv FILE holds rows for a model trained with --dataset csv (--columns names a table's columns)"
# A cdl-train checkpoint knows its columns: others are refused.
expect_status 1 "$CDL_PREDICT" "$ck" --columns b,a,c "$TMP/rows.csv"
expect_err "--columns b,a,c: $ck was trained on the columns a,b,c"
expect_status 0 "$CDL_PREDICT" "$ck" --threads 1 --columns a,b,c --top-k 3 "$TMP/rows.csv"
cmp -s "$TMP/out" "$TMP/cdl.csv" || die "--columns as the run's changed the predictions"
# cdl-eval on labelled rows of one's own: class indices, the run's figures.
expect_status 0 "$CDL_EVAL" "$TMP/w.safetensors" --threads 1 --json --model "$TMP/net.spec" \
    --normalize "$norm" --columns a,b,c --dataset "csv:$TMP/own.csv"
cp "$TMP/out" "$TMP/pt.json"
sed 's/,0,/,x,/; s/,1,/,y,/; s/,2,/,z,/; 1s/label/kind/' "$TMP/own.csv" >"$TMP/ownk.csv"
expect_status 0 "$CDL_EVAL" "$ck" --threads 1 --json --dataset "csv:$TMP/ownk.csv"
"$PY" - "$TMP/pt.json" "$TMP/out" <<'PYEOF' || die "cdl-eval with --columns: other figures"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
assert a["samples"] == b["samples"] == 12, (a, b)
assert abs(a["loss"] - b["loss"]) < 1e-9 and a["accuracy"] == b["accuracy"], (a, b)
PYEOF
echo "PASS: --columns for weights without column names"

# A label the run lacks, after an id spanning two lines: its line, not row.
awk 'NR == 1 { print "id," $0; next } NR == 2 { print "\"two\nlines\"," $0; next }
     NR == 4 { sub(/,[xyz],/, ",q,") } { print "n," $0 }' "$TMP/ownk.csv" >"$TMP/ownq.csv"
for cols in "" a,b,c; do
    expect_status 1 "$CDL_EVAL" "$ck" --threads 1 ${cols:+--columns "$cols"} --dataset "csv:$TMP/ownq.csv"
    expect_err "$TMP/ownq.csv:5: the label 'q' is not one of the 3 classes $ck was trained on (its class_names): evaluate on rows of those classes: correct the label or drop the row"
done
# Integer labels: one beyond a run's classes, that run trained on them.
"$CDL_TRAIN" --device cpu --threads 1 --epochs 1 --batch-size 4 --seed 3 --quiet --no-progress \
    --model "$TMP/net.spec" --dataset "csv:$TMP/own.csv" --ckpt-dir "$TMP/ckn" ||
    die "cdl-train on integer labels"
awk 'NR == 1 { print "id," $0; next } NR == 2 { print "\"two\nlines\"," $0; next }
     NR == 4 { sub(/,[0-9]+,/, ",7,") } { print "n," $0 }' "$TMP/own.csv" >"$TMP/own7.csv"
expect_status 1 "$CDL_EVAL" "$TMP/ckn/last.safetensors" --threads 1 --dataset "csv:$TMP/own7.csv"
expect_err "$TMP/own7.csv:5: the label '7' is not a class index of the run (0 to 2): correct the label or drop the row"
echo "PASS: a table's bad label named by its line"

# The run's train.csv and test.csv; test.csv with a column more (an id).
mkdir "$TMP/tab" && head -41 "$TMP/train.csv" >"$TMP/tab/train.csv" &&
    { echo "id,a,b,c,kind"; tail -20 "$TMP/train.csv" | sed 's/^/n,/'; } >"$TMP/tab/test.csv"
"$CDL_TRAIN" --device cpu --threads 1 --epochs 1 --batch-size 8 --seed 5 --quiet --no-progress \
    --model mlp --dataset "csv:$TMP/tab/train.csv" --label-column kind --ckpt-dir "$TMP/ckt" ||
    die "cdl-train on train.csv"
expect_status 0 "$CDL_EVAL" "$TMP/ckt/last.safetensors" --threads 1 --json \
    --dataset "csv:$TMP/tab"
expect_err "column 'id' is not among the model's feature columns"
grep -q '"samples":20' "$TMP/out" || die "test.csv with an id column: $(cat "$TMP/out")"
if command -v strace >/dev/null && strace -f -o /dev/null true 2>/dev/null; then
    strace -f -e trace=openat -o "$TMP/trace" "$CDL_EVAL" "$TMP/ckt/last.safetensors" \
        --threads 1 --dataset "csv:$TMP/tab" >/dev/null 2>&1 || die "cdl-eval under strace"
    n=$(grep -c 'tab/test.csv", O_RDONLY' "$TMP/trace")
    [ "$n" -eq 1 ] || die "cdl-eval opened test.csv $n times: $(grep csv "$TMP/trace")"
fi
echo "PASS: the run's test.csv read once, by name"

# A run of csv:DIR/train.csv without a test.csv; csv:DIR is the same table.
mkdir "$TMP/one" && cp "$TMP/train.csv" "$TMP/one/train.csv"
"$CDL_TRAIN" --device cpu --threads 1 --epochs 1 --batch-size 8 --seed 5 --quiet --no-progress \
    --model mlp --dataset "csv:$TMP/one/train.csv" --label-column kind --val-split 12 \
    --ckpt-dir "$TMP/ck1" || die "cdl-train on one table"
"$CDL_EVAL" "$TMP/ck1/last.safetensors" --threads 1 --json >"$TMP/file.json" 2>/dev/null ||
    die "cdl-eval of the run's table"
grep -q '"split":"val","samples":12,' "$TMP/file.json" || die "run's table: $(cat "$TMP/file.json")"
for prog in "$CDL_EVAL" "$CDL_PREDICT"; do
    expect_status 0 "$prog" "$TMP/ck1/last.safetensors" --threads 1 --dataset "csv:$TMP/one"
    expect_err "has no test split: evaluating the run's validation split (--split val)"
done
[ "$(wc -l <"$TMP/out")" -eq 13 ] || die "cdl-predict csv:DIR: $(wc -l <"$TMP/out") lines"
"$CDL_EVAL" "$TMP/ck1/last.safetensors" --threads 1 --json --dataset "csv:$TMP/one" \
    >"$TMP/dir.json" 2>/dev/null || die "cdl-eval csv:DIR"
cmp -s "$TMP/file.json" "$TMP/dir.json" || die "csv:DIR and csv:DIR/train.csv differ"
echo "PASS: the run's table named by its folder is the run's data"

# --columns for a model trained on pictures (or told to read them) names no
# column of anything read: it was silently ignored. Refused, saying why.
"$CDL_TRAIN" --device cpu --threads 1 --epochs 1 --batch-size 16 --seed 5 --quiet --no-progress \
    --dataset synthetic --synthetic-size 64 --val-split 16 --ckpt-dir "$TMP/pic" ||
    die "cdl-train on pictures"
for prog in "$CDL_EVAL" "$CDL_PREDICT"; do
    expect_status 1 "$prog" "$TMP/pic/last.safetensors" --threads 1 --columns a,b
    expect_err "--columns a,b: names the feature columns of a CSV table, but the data read is synthetic (the run's), not a table: leave --columns out"
done
printf 'not decoded' >"$TMP/a.png"
expect_status 1 "$CDL_PREDICT" "$TMP/pic/last.safetensors" --threads 1 --columns a,b "$TMP/a.png"
expect_err "--columns a,b: names the feature columns of a CSV table's rows, but $TMP/a.png is a picture: leave --columns out for pictures"
echo "PASS: --columns refused where no table is read"

# A training column without a name (pandas' row index, trained on with a
# warning) could not be named by --columns, where every name must be given
# (an empty one is a typing slip): weights without the stored names could
# not read such a table. "" names it, quoted as in a CSV header.
awk 'NR == 1 { print "," $0; next } { print NR - 2 "," $0 }' "$TMP/train.csv" >"$TMP/idx.csv"
"$CDL_TRAIN" --device cpu --threads 1 --epochs 1 --batch-size 8 --seed 3 --quiet --no-progress \
    --model mlp --dataset "csv:$TMP/idx.csv" --label-column kind --ckpt-dir "$TMP/cki" 2>/dev/null ||
    die "cdl-train on a table with pandas' index"
"$PY" - "$TMP/cki/last.safetensors" "$TMP/idx-old.safetensors" <<'PYEOF' || die "stripping the names"
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
head = json.loads(raw[8:8 + n])
assert head["__metadata__"]["feature_columns"] == "\na\nb\nc", head["__metadata__"]["feature_columns"]
del head["__metadata__"]["feature_columns"], head["__metadata__"]["cdl_checksum"]
hb = json.dumps(head).encode()
hb += b" " * (-len(hb) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(hb)) + hb + raw[8 + n:])
PYEOF
head -7 "$TMP/idx.csv" | cut -d, -f1-4 >"$TMP/idx-rows.csv"
expect_status 0 "$CDL_PREDICT" "$TMP/cki/last.safetensors" --threads 1 --top-k 3 "$TMP/idx-rows.csv"
cp "$TMP/out" "$TMP/idx-cdl.csv"
expect_status 2 "$CDL_PREDICT" "$TMP/idx-old.safetensors" --threads 1 --columns ,a,b,c "$TMP/idx-rows.csv"
expect_err "column 1 is empty (a typing slip? a column without a name is \"\")"
expect_status 0 "$CDL_PREDICT" "$TMP/idx-old.safetensors" --threads 1 --columns '"",a,b,c' \
    --top-k 3 "$TMP/idx-rows.csv"
cmp -s "$TMP/out" "$TMP/idx-cdl.csv" || die "--columns '\"\",a,b,c': other predictions than the run's"
# The run's own checkpoint takes its own names, the unnamed one included.
expect_status 0 "$CDL_PREDICT" "$TMP/cki/last.safetensors" --threads 1 --columns '"",a,b,c' \
    --top-k 3 "$TMP/idx-rows.csv"
cmp -s "$TMP/out" "$TMP/idx-cdl.csv" || die "--columns as the run's changed the predictions"
expect_status 2 "$CDL_PREDICT" "$TMP/idx-old.safetensors" --columns '"a,b' "$TMP/idx-rows.csv"
expect_err "column 1: a quote opened and not closed"
echo "PASS: a column without a name given to --columns as \"\""
