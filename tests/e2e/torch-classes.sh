#!/usr/bin/env bash
# Weights trained in PyTorch on a CSV table with text labels ("dog", "cat",
# "emu", numbered sorted as LabelEncoder does) store no class names. The
# table read by name (--columns) was refused by cdl-eval ("not a class
# index ... stores no class names to match texts to"), and cdl-predict
# printed class indices. Now the labels are numbered as LabelEncoder
# numbers them, --classes FILE|A,B,... names the outputs, cdl-eval's
# accuracy is PyTorch's and cdl-predict prints the names; --classes is
# refused where it cannot be right (counts, a cdl checkpoint's own names).
. "${top_srcdir:-.}/tests/e2e/common.sh"
py=/usr/bin/python3
$py -c 'import torch, safetensors.torch' 2>/dev/null ||
    { echo "SKIP: python3-torch or safetensors not importable"; exit 77; }
fix="$(cd "$top_srcdir" && pwd)/tests/e2e/torch_classes.py"
train="$(cd "$top_builddir" && pwd)/cli/cdl-train"
predict="$(cd "$top_builddir" && pwd)/cli/cdl-predict"
eval="$(cd "$top_builddir" && pwd)/cli/cdl-eval"
cd "$TMP" || die "cd $TMP"
$py "$fix" make . || die "the PyTorch fixture failed"
printf 'input 4x1x1\nflatten\nlinear 16\nrelu\nlinear 3\n' >net.spec
acc=$(cat acc)
w() { local p=$1; shift; "$p" w.safetensors --threads 1 --model net.spec --normalize none "$@"; }
accuracy() { $py -c 'import json,sys; d=json.load(open(sys.argv[1])); print("%.6f" % d["accuracy"], ",".join(d["classes"]))' "$1"; }

# cdl-eval: the table read by name, by position (a folder of train.csv and
# test.csv), and with the names given: PyTorch's accuracy, the sorted names.
mkdir tab && cp train.csv test.csv tab/ || die "copying the tables"
for how in "--columns a,b,c,d --dataset csv:test.csv" "--dataset csv:tab" \
    "--columns a,b,c,d --dataset csv:test.csv --classes classes.txt" \
    "--dataset csv:tab --classes cat,dog,emu"; do
    expect_status 0 w "$eval" --json $how
    [ "$(accuracy out)" = "$acc cat,dog,emu" ] ||
        die "cdl-eval $how: $(accuracy out), PyTorch's accuracy is $acc (classes cat,dog,emu)"
done
# A file as a Windows editor saves it: byte order mark, CRLF, no last line end.
printf '\357\273\277cat\r\ndog\r\nemu' >crlf.txt
expect_status 0 w "$eval" --json --dataset csv:tab --classes crlf.txt
[ "$(accuracy out)" = "$acc cat,dog,emu" ] || die "--classes crlf.txt: $(accuracy out)"
# Other names in another order: the labels follow them (emu is output 0).
expect_status 0 w "$eval" --json --columns a,b,c,d --dataset csv:test.csv --classes emu,cat,dog
[ "$(accuracy out | cut -d' ' -f2)" = emu,cat,dog ] || die "--classes emu,cat,dog: $(accuracy out)"
[ "$(accuracy out | cut -d' ' -f1)" != "$acc" ] || die "--classes in another order changed nothing"
echo "PASS: cdl-eval of PyTorch's weights on text labels is PyTorch's accuracy"

# cdl-predict: the names, with PyTorch's probabilities.
expect_status 0 w "$predict" --columns a,b,c,d --classes classes.txt --top-k 3 test.csv
$py "$fix" check . out || die "cdl-predict --classes disagrees with PyTorch"
cp out named.csv
# Without --classes: the rows' labels, sorted, name the outputs (said).
expect_status 0 w "$predict" --columns a,b,c,d --top-k 3 test.csv
expect_err "naming its 3 outputs by the sorted labels of test.csv"
cmp -s out named.csv || die "cdl-predict without --classes: other names than classes.txt's"
# Unlabelled rows: indices without --classes, names with it.
cut -d, -f1-4 test.csv >rows.csv
expect_status 0 w "$predict" --columns a,b,c,d --top-k 1 rows.csv
[ "$(sed -n 2p out | cut -d, -f2)" -ge 0 ] 2>/dev/null || die "no class index: $(sed -n 2p out)"
expect_status 0 w "$predict" --columns a,b,c,d --top-k 1 --classes classes.txt rows.csv
cut -d, -f2 out | sed 1d | sort -u | grep -qvxE 'cat|dog|emu' && die "rows.csv: $(head -3 out)"
echo "PASS: cdl-predict names the classes of PyTorch's weights"

# Bad input: each message names the option, the value and what to do.
expect_status 1 w "$predict" --columns a,b,c,d --classes a,b,c,d rows.csv
expect_err "--classes a,b,c,d names 4 classes, but the model has 3 outputs"
expect_status 2 w "$eval" --classes clases.txt
expect_err "--classes 'clases.txt': no such file, and not a list of names"
expect_err "give a file of one class name per line, or the names separated by commas"
expect_status 2 w "$predict" --classes cat,,emu rows.csv
expect_err "--classes 'cat,,emu': class 2 is empty (a typing slip?)"
expect_status 2 w "$predict" --classes cat,dog,cat rows.csv
expect_err "--classes 'cat,dog,cat': 'cat' is named twice (classes 1 and 3)"
printf 'cat\r\n\r\nemu\r\n' >gap.txt
expect_status 2 w "$predict" --classes gap.txt rows.csv
expect_err "--classes 'gap.txt': line 2 is empty"
expect_status 2 w "$predict" --classes . rows.csv
expect_err "--classes '.': a folder, not a file of class names"
expect_status 1 w "$eval" --columns a,b,c,d --dataset csv:test.csv --classes cat,dog,yak
expect_err "the label 'emu' is not one of the 3 classes w.safetensors was trained on (--classes): evaluate on rows of those classes"
# Labels of some of the classes: their sorted order is not the training's.
grep -v ',emu$' test.csv >two.csv
expect_status 1 w "$eval" --columns a,b,c,d --dataset csv:two.csv --classes cat,dog
expect_err "--classes cat,dog names 2 classes, but the model has 3 outputs: give one name per output"
expect_status 1 w "$eval" --columns a,b,c,d --dataset csv:two.csv
expect_err "w.safetensors stores no class names (not written by cdl-train) and the csv data has 2 classes, the model 3 outputs"
expect_err "give the training's class names with --classes FILE|A,B,..."
expect_status 0 w "$eval" --columns a,b,c,d --dataset csv:two.csv --classes classes.txt
# A cdl checkpoint names its classes: others are refused, its own taken.
"$train" --model net.spec --dataset csv:tab --epochs 1 --threads 1 --no-progress -q \
    --ckpt-dir ck || die "cdl-train on the table"
expect_status 1 "$eval" ck/last.safetensors --threads 1 --classes emu,cat,dog
expect_err "--classes emu,cat,dog: ck/last.safetensors stores its class names, cat,dog,emu (its metadata class_names), in the order of its outputs: leave --classes out"
expect_status 0 "$eval" ck/last.safetensors --threads 1 --classes classes.txt
echo "PASS: --classes refused where it cannot name the outputs"
