#!/usr/bin/env bash
# cdl-predict CKPT TABLE.csv: new rows of a table, labelled or not, for a
# run trained on a CSV table. The checkpoint names the feature columns;
# the table's are matched to them by name (reordered, an extra column,
# the label column or none), the rows normalised with the run's statistics
# and predicted in row order, checked against PyTorch's computation of the
# same checkpoint. A spreadsheet's export (byte order mark, CRLF, quoted
# fields, a blank last line) reads as the plain file; a missing column, an
# empty or NaN cell and an older checkpoint are errors saying what to do.
. "${top_srcdir:-.}/tests/e2e/common.sh"
PY=/usr/bin/python3
"$PY" -c 'import torch, safetensors.torch' 2>/dev/null || { echo "SKIP: no torch"; exit 77; }

$PY - "$TMP" <<'PYEOF' || die "table fixture"
import csv, random, sys
d = sys.argv[1]
rnd = random.Random(1)
rows = []
for i in range(90):
    k = i % 3
    rows.append({"a": "%.3f" % (k + rnd.random()), "b": "%.3f" % (rnd.random() * 5),
                 "c": "%.3f" % (100 + 10 * rnd.random()), "d": "%.3f" % (-2 * k + rnd.random()),
                 "e": "%.3f" % rnd.random(), "kind": "xyz"[k]})
with open(d + "/train.csv", "w") as f:
    f.write("a,b,c,d,e,kind\n")
    for r in rows:
        f.write(",".join(r[c] for c in ("a", "b", "c", "d", "e", "kind")) + "\n")
# New rows as a spreadsheet exports them: another column order, an id
# column the model does not know (quoted, one with a line break), no
# label, byte order mark, CRLF, a blank last line.
order = ["id", "e", "c", "a", "d", "b"]
with open(d + "/rows.csv", "w", newline="") as f:
    f.write('\ufeffid,"e",c,a,d,"b"\r\n')
    for i, r in enumerate(rows[:13]):
        ident = '"row %d, ""new""%s"' % (i, "\r\nsecond line" if i == 4 else "")
        f.write(",".join([ident] + [r[c] for c in order[1:]]) + "\r\n")
    f.write("\r\n")
PYEOF

"$CDL_TRAIN" --device cpu --threads 1 --epochs 3 --batch-size 8 --seed 3 --quiet --no-progress \
    --model mlp --dataset "csv:$TMP/train.csv" --label-column kind --ckpt-dir "$TMP/ck" ||
    die "cdl-train on a table"
ck="$TMP/ck/last.safetensors"
pred() { "$CDL_PREDICT" "$ck" --threads 1 "$@"; }

# Unlabelled rows, columns in another order: PyTorch's probabilities.
expect_status 0 pred --top-k 3 "$TMP/rows.csv"
cp "$TMP/out" "$TMP/p.csv"
head -1 "$TMP/p.csv" | grep -qx 'index,class1,p1,class2,p2,class3,p3' ||
    die "header of unlabelled rows: $(head -1 "$TMP/p.csv")"
expect_err "note: $TMP/rows.csv: column 'id' is not among the model's feature columns: not read"
"$PY" "${top_srcdir:-.}/tests/e2e/torch_table.py" "$ck" "$TMP/rows.csv" "$TMP/p.csv" ||
    die "cdl-predict on a table's rows disagrees with PyTorch"
# Several loader threads, small batches: the same lines in row order.
pred --top-k 3 --workers 3 --batch-size 2 "$TMP/rows.csv" >"$TMP/pw.csv" 2>/dev/null ||
    die "cdl-predict --workers 3"
cmp -s "$TMP/p.csv" "$TMP/pw.csv" || die "--workers 3 changed the predictions or their order"
echo "PASS: rows of a spreadsheet's export, columns matched by name, as PyTorch computes them"

# Labelled rows (the training table itself): the label column is printed,
# not read as a feature; JSON lines too.
expect_status 0 pred --top-k 1 "$TMP/train.csv"
head -1 "$TMP/out" | grep -qx 'index,label,class1,p1' || die "labelled header: $(head -1 "$TMP/out")"
[ "$(sed -n 2p "$TMP/out" | cut -d, -f1-3)" = "0,x,x" ] || die "labelled row: $(sed -n 2p "$TMP/out")"
[ -s "$TMP/err" ] && die "a note for a labelled table of exactly the features: $(cat "$TMP/err")"
expect_status 0 pred --format jsonl --top-k 2 "$TMP/train.csv"
"$PY" - "$TMP/out" <<'PYEOF' || die "jsonl of a table: $(head -2 "$TMP/out")"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
assert len(lines) == 90 and [l["index"] for l in lines] == list(range(90)), len(lines)
assert lines[1]["label"] == "y" and len(lines[1]["top"]) == 2, lines[1]
PYEOF

# cdl-eval on a labelled table of one's own (no test.csv beside it): all
# its rows, columns matched by name (a note column, another order), the
# label texts matched to the run's classes; the same probabilities as
# cdl-predict's rows, so the same accuracy as the labels say.
"$PY" - "$TMP" <<'PYEOF' || die "own table"
import csv, sys
d = sys.argv[1]
rows = list(csv.DictReader(open(d + "/train.csv")))[:30]
with open(d + "/own.csv", "w") as f:
    f.write("note,kind,e,c,a,d,b\n")
    for r in rows:
        f.write(",".join(["n"] + [r[c] for c in ("kind", "e", "c", "a", "d", "b")]) + "\n")
PYEOF
expect_status 0 "$CDL_EVAL" "$ck" --threads 1 --json --dataset "csv:$TMP/own.csv"
expect_err "taking all its 30 rows as held-out data"
cp "$TMP/out" "$TMP/own.json"
expect_status 0 pred --top-k 1 "$TMP/own.csv"
"$PY" - "$TMP/own.json" "$TMP/out" <<'PYEOF' || die "cdl-eval on a table of one's own"
import csv, json, sys
e = json.load(open(sys.argv[1]))
p = list(csv.DictReader(open(sys.argv[2])))
acc = sum(r["label"] == r["class1"] for r in p) / len(p)
print("cdl-eval", e["samples"], e["accuracy"], "cdl-predict's rows", len(p), acc)
sys.exit(e["samples"] != 30 or abs(e["accuracy"] - acc) > 1e-9)
PYEOF
sed 's/,z,/,q,/' "$TMP/own.csv" >"$TMP/ownq.csv"
expect_status 1 "$CDL_EVAL" "$ck" --dataset "csv:$TMP/ownq.csv"
expect_err "ownq.csv:4: the label 'q' is not one of the 3 classes $ck was trained on (its class_names): evaluate on rows of those classes: correct the label or drop the row"
expect_status 1 "$CDL_EVAL" "$ck" --dataset "csv:$TMP/rows.csv"
expect_err "has no label column 'kind': cdl-eval needs the labels"

# The run's own train.csv and test.csv with their columns moved since the
# training (reordered by a spreadsheet): cdl-eval reads them by the names
# the run trained on, so its test and validation figures do not change
# (by position they did, silently).
mkdir "$TMP/tab" && head -61 "$TMP/train.csv" >"$TMP/tab/train.csv" &&
    { head -1 "$TMP/train.csv"; tail -30 "$TMP/train.csv"; } >"$TMP/tab/test.csv"
"$CDL_TRAIN" --device cpu --threads 1 --epochs 1 --batch-size 8 --seed 5 --quiet --no-progress \
    --model mlp --dataset "csv:$TMP/tab" --label-column kind --ckpt-dir "$TMP/ckt" ||
    die "cdl-train on train.csv and test.csv"
for s in test val; do
    "$CDL_EVAL" "$TMP/ckt/last.safetensors" --threads 1 --json --split $s >"$TMP/before-$s.json" ||
        die "cdl-eval --split $s"
done
for f in train test; do
    awk -F, -v OFS=, '{ print $6, $5, $4, $3, $2, $1 }' "$TMP/tab/$f.csv" >"$TMP/moved.csv" &&
        mv "$TMP/moved.csv" "$TMP/tab/$f.csv"
done
for s in test val; do
    "$CDL_EVAL" "$TMP/ckt/last.safetensors" --threads 1 --json --split $s >"$TMP/after-$s.json" ||
        die "cdl-eval --split $s, columns moved"
    cmp -s "$TMP/before-$s.json" "$TMP/after-$s.json" ||
        die "columns moved in the run's tables change its $s figures: $(cat "$TMP/before-$s.json" "$TMP/after-$s.json")"
done
echo "PASS: the run's tables with their columns moved since give the same figures"

# What a spreadsheet gets wrong, said with the line and the column.
cut -d, -f1-4,6 "$TMP/train.csv" >"$TMP/miss.csv"
expect_status 1 pred "$TMP/miss.csv"
expect_err "miss.csv:1: the header lacks 1 of the 5 feature columns the model was trained on: 'e'"
sed '3s/^[^,]*,/NaN,/' "$TMP/train.csv" >"$TMP/nan.csv"
expect_status 1 pred "$TMP/nan.csv"
expect_err "nan.csv:3: column 'a' holds 'NaN', not a finite number"
sed '4s/,[^,]*,/,  ,/' "$TMP/train.csv" >"$TMP/empty.csv"
expect_status 1 pred "$TMP/empty.csv"
expect_err "empty.csv:4: column 'b' is empty (a missing value)"
# The same cell in a training table: read as 0 before.
expect_status 1 "$CDL_TRAIN" --dataset "csv:$TMP/empty.csv" --label-column kind -q
expect_err "empty.csv:4: column 'b' is empty (a missing value)"
tr ',' ';' <"$TMP/train.csv" >"$TMP/semi.csv"
expect_status 1 pred "$TMP/semi.csv"
expect_err "its fields are separated by ';'"
expect_status 1 pred "$TMP/rows.csv" "$TMP/train.csv"
expect_err "give one CSV table"
expect_status 1 pred "$TMP/rows.csv" "$TMP/x.png"
expect_err "give pictures or one CSV table, not both"

# pandas' to_csv with its row index: a first column without a name. It is
# trained on (a warning says so) and stored as an empty name, which the
# rows' own unnamed column matches (the names were joined without it).
awk 'NR == 1 { print "," $0; next } { print NR - 2 "," $0 }' "$TMP/train.csv" >"$TMP/idx.csv"
expect_status 0 "$CDL_TRAIN" --device cpu --threads 1 --epochs 1 --batch-size 8 --no-progress \
    --model mlp --dataset "csv:$TMP/idx.csv" --label-column kind --ckpt-dir "$TMP/cki" -q
expect_err "warning: feature column 1 of the table has no name (pandas writes its row index"
expect_err 'trained on as a feature (in --columns of cdl-eval and cdl-predict it is "")'
awk -F, 'NR <= 6 { print $1 "," $7 "," $3 "," $2 "," $4 "," $5 "," $6 }' "$TMP/idx.csv" \
    >"$TMP/idx-rows.csv"
expect_status 0 "$CDL_PREDICT" "$TMP/cki/last.safetensors" --threads 1 "$TMP/idx-rows.csv"
[ "$(wc -l <"$TMP/out")" -eq 6 ] || die "5 rows with an unnamed column: $(cat "$TMP/out")"
cut -d, -f2- "$TMP/idx-rows.csv" >"$TMP/noidx.csv"
expect_status 1 "$CDL_PREDICT" "$TMP/cki/last.safetensors" "$TMP/noidx.csv"
expect_err "the column without a name is most often pandas' row index"

# A header in a legacy encoding (Excel's CSV on Windows: cp1252): the run
# trains and saves (the first save failed: metadata is UTF-8 JSON), with a
# warning that the names are not stored.
{ printf 'Gr\xf6\xdfe,b,kind\n'; tail -n +2 "$TMP/train.csv" | cut -d, -f1,2,6; } >"$TMP/cp1252.csv"
expect_status 0 "$CDL_TRAIN" --device cpu --threads 1 --epochs 1 --batch-size 8 --no-progress \
    --model mlp --dataset "csv:$TMP/cp1252.csv" --label-column kind --ckpt-dir "$TMP/ck1252" -q
expect_err "the table's column names are not UTF-8 text"
expect_status 1 "$CDL_PREDICT" "$TMP/ck1252/last.safetensors" "$TMP/cp1252.csv"
expect_err "does not store its table's column names"

# A checkpoint of an older cdl (no column names, no checksums): cdl-eval
# still reads it; rows cannot be matched by name, and it says so.
"$PY" - "$ck" "$TMP/old.safetensors" <<'PYEOF' || die "writing an older checkpoint"
import json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
for k in ("feature_columns", "label_name", "cdl_checksum"):
    del h["__metadata__"][k]
hb = json.dumps(h).encode()
hb += b" " * (-len(hb) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(hb)) + hb + b[8 + n:])
PYEOF
expect_status 0 "$CDL_EVAL" "$TMP/old.safetensors" --threads 1 --dataset "csv:$TMP/train.csv" \
    --split train
expect_status 1 "$CDL_PREDICT" "$TMP/old.safetensors" "$TMP/rows.csv"
expect_err "does not store its table's column names (written by an older cdl"
expect_status 1 "$CDL_EVAL" "$TMP/old.safetensors" --dataset "csv:$TMP/own.csv" --split test
expect_err "has no test split: use --split val or train"
# A model of other data.
"$CDL_TRAIN" --dataset synthetic --synthetic-size 40 --batch-size 8 --epochs 1 --threads 1 \
    --workers 0 --ckpt-dir "$TMP/ck0" -q || die "training on synthetic data"
expect_status 1 "$CDL_PREDICT" "$TMP/ck0/last.safetensors" "$TMP/rows.csv"
expect_err "was trained on synthetic data, not a CSV table"
echo "PASS: missing columns, empty and NaN cells, mixed files and older checkpoints are errors"
exit 0
