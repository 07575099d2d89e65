#!/usr/bin/env bash
# A checkpoint of a model spec file carries the file's text (metadata
# model_spec): cdl-eval, cdl-predict and cdl-generate build the model the
# run trained from any directory, and after the file was edited, without
# being told the path; --model FILE still takes the file as it is now, and
# a --model whose weights do not fit is named as such. cdl-train refuses to
# resume the run with the edited file (or a built-in's other dropout) unless
# told so, and a language model
# that flattens its positions is told what to change.
. "${top_srcdir:-.}/tests/e2e/common.sh"
CDL_GENERATE="$top_builddir/cli/cdl-generate"
case $CDL_TRAIN in /*) ;; *) CDL_TRAIN=$PWD/$CDL_TRAIN CDL_EVAL=$PWD/$CDL_EVAL
    CDL_PREDICT=$PWD/$CDL_PREDICT CDL_GENERATE=$PWD/$CDL_GENERATE ;; esac
mkdir "$TMP/run" "$TMP/elsewhere"
cat >"$TMP/run/net.spec" <<'SPEC'
input 3x32x32
conv2d 4 kernel=3 stride=2 name=c
relu
flatten
linear 10
SPEC
train() { (cd "$TMP/run" && "$CDL_TRAIN" "$@" --epochs 1 --threads 1 --no-progress -q); }
train --model net.spec --dataset synthetic --synthetic-size 128 --ckpt-dir ck ||
    die "training the spec failed"
ck=$TMP/run/ck/last.safetensors
(cd "$TMP/run" && "$CDL_EVAL" "$ck" --threads 1 --json) >"$TMP/trained.json" ||
    die "cdl-eval in the run's directory failed"

# Another directory: the relative path net.spec is not there.
(cd "$TMP/elsewhere" && "$CDL_EVAL" "$ck" --threads 1 --json) >"$TMP/elsewhere.json" ||
    die "cdl-eval from another directory failed: $(cat "$TMP/elsewhere.json")"
cmp -s "$TMP/trained.json" "$TMP/elsewhere.json" || die "cdl-eval from another directory differs"
(cd "$TMP/elsewhere" && "$CDL_PREDICT" "$ck" --threads 1 --top-k 2) >"$TMP/pred.csv" ||
    die "cdl-predict from another directory failed"
echo "PASS: a spec file's checkpoint evaluates from another directory"

# Output to a full disk is an error, not a silent success.
for tool in "$CDL_EVAL" "$CDL_PREDICT"; do
    "$tool" "$ck" --threads 1 >/dev/full 2>"$TMP/err" && die "$tool to a full disk exited 0"
    grep -q "to standard output failed: No space left on device" "$TMP/err" ||
        die "$tool to a full disk: $(cat "$TMP/err")"
done
echo "PASS: cdl-eval and cdl-predict fail on a full disk"

# The file edited after the run (relu -> tanh, the same parameters): the
# saved spec is still the one evaluated; --model takes the edited file.
sed -i 's/^relu$/tanh/' "$TMP/run/net.spec"
(cd "$TMP/run" && "$CDL_EVAL" "$ck" --threads 1 --json) >"$TMP/edited.json" ||
    die "cdl-eval after the edit failed"
cmp -s "$TMP/trained.json" "$TMP/edited.json" ||
    die "cdl-eval took the edited spec file instead of the trained model"
(cd "$TMP/run" && "$CDL_EVAL" "$ck" --model net.spec --threads 1 --json) \
    >"$TMP/explicit.json" || die "cdl-eval --model net.spec failed"
cmp -s "$TMP/trained.json" "$TMP/explicit.json" && die "cdl-eval --model ignored the file"
# ... but not silently: the weights fit, the function is another.
for prog in "$CDL_EVAL" "$CDL_PREDICT"; do
    (cd "$TMP/run" && expect_status 0 "$prog" "$ck" --model net.spec --threads 1)
    expect_err "warning: --model net.spec is not the model $ck was trained as, though its tensors fit: net.spec:3: 'tanh', where the run's net.spec has 'relu'"
done
echo "PASS: the trained spec is evaluated after the file changed; --model takes the file, with a warning"

# Resuming the run with the edited file: refused, naming the line, unless
# allowed (the same command would otherwise continue another model).
expect_status 1 train --model net.spec --dataset synthetic --synthetic-size 128 --ckpt-dir ck
expect_err "model-spec line 3 'relu' -> 'tanh'"
expect_status 0 train --model net.spec --dataset synthetic --synthetic-size 128 --ckpt-dir ck \
    --resume-allow model-spec
echo "PASS: a resume with an edited spec file is refused unless --resume-allow model-spec"

# --model of another model: the tensor is named, with advice for cdl-eval
# (not cdl-train's --init-ignore, which cdl-eval does not have).
for prog in "$CDL_EVAL" "$CDL_PREDICT"; do
    expect_status 1 "$prog" "$ck" --model mlp --threads 1
    expect_err "tensor 'c.weight' is not in the model mlp: the checkpoint holds another model than --model mlp: leave --model out (the run's model is 'net.spec')"
    grep -q -- "--init-ignore" "$TMP/err" && die "$prog advises cdl-train's --init-ignore"
done
echo "PASS: cdl-eval --model of another model says so, without cdl-train's advice"

# Data of another shape than the run's: said as such, not as advice to fix
# the input line of a spec file the user may not have.
if [ -f /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz ]; then
    expect_status 1 "$CDL_EVAL" "$ck" --dataset fashion-mnist --threads 1
    expect_err "the run's samples were 3x32x32 (c,h,w), these are 1x28x28"
    grep -q "input line" "$TMP/err" && die "cdl-eval advises fixing the spec's input line"
    echo "PASS: data of another shape is named as the misfit"
fi

# A language model of a spec file: cdl-generate from another directory.
text=$TMP/run/text.txt
for i in $(seq 40); do echo "the quick brown fox jumps over the lazy dog $i"; done >"$text"
echo 'gpt n_layer=1 n_head=2 n_embd=8' >"$TMP/run/lm.spec"
train --model lm.spec --dataset "text:$text" --block-size 8 --max-steps 2 --ckpt-dir lm ||
    die "training the gpt spec failed"
(cd "$TMP/run" && "$CDL_GENERATE" lm/last.safetensors --max-tokens 8 --threads 1) >"$TMP/g1" ||
    die "cdl-generate failed"
rm "$TMP/run/lm.spec"
(cd "$TMP/elsewhere" && "$CDL_GENERATE" "$TMP/run/lm/last.safetensors" --max-tokens 8 \
    --threads 1) >"$TMP/g2" || die "cdl-generate without the spec file failed"
cmp -s "$TMP/g1" "$TMP/g2" || die "cdl-generate wrote other text without the spec file"
echo "PASS: cdl-generate needs no spec file"

# --model of the same gpt with other heads (no tensor tells them apart):
# said; the same gpt as a built-in with dropout (off at inference) is not.
lm=$TMP/run/lm/last.safetensors
expect_status 0 "$CDL_GENERATE" "$lm" --max-tokens 4 --threads 1 --model gpt:n_layer=1,n_head=1,n_embd=8
expect_err "'attention heads=1', where the run's lm.spec has 'attention heads=2'"
expect_status 0 "$CDL_GENERATE" "$lm" --max-tokens 4 --threads 1 \
    --model gpt:n_embd=8,n_head=2,n_layer=1,dropout=0.2
grep -q warning "$TMP/err" && die "cdl-generate warned of a model that computes the same: $(cat "$TMP/err")"
echo "PASS: a --model gpt with other heads is warned of"

# A flatten before the head of a language model: one prediction per window
# for data of a label per position; the advice is to keep the positions.
printf 'embedding 256 8\nflatten\nlinear 256\n' >"$TMP/run/flat.spec"
expect_status 1 train --model flat.spec --dataset "text:$text" --block-size 8 --max-steps 1
expect_err "has 8 labels per sample: a language model predicts at every position: leave out the flatten"
echo "PASS: a flattened language model is told to keep its positions"

# An input line's window against an explicit --block-size: drop the option.
printf 'input 16x1x1\ngpt n_layer=1 n_head=2 n_embd=8\n' >"$TMP/run/win.spec"
expect_status 1 train --model win.spec --dataset "text:$text" --block-size 8 --max-steps 1
expect_err "the model's input is 16x1x1 but dataset text has 8x1x1 samples: fix the 'input' line or drop --block-size"
echo "PASS: an input line at odds with --block-size names the option"

# A FIFO as the spec (no writer): refused at once, not a wait for ever.
mkfifo "$TMP/run/fifo.spec"
timeout 60 "$CDL_TRAIN" --model "$TMP/run/fifo.spec" --max-steps 1 >"$TMP/out" 2>"$TMP/err"
rc=$?
[ "$rc" = 1 ] || die "--model FIFO: exit $rc (124: it waited for a writer)"
grep -q "is not a regular file (a FIFO, device or socket): name a spec file" "$TMP/err" ||
    die "--model FIFO: $(cat "$TMP/err")"
echo "PASS: a FIFO as the model spec is refused"

# A built-in's option that keeps every tensor (gpt's dropout): the same.
gpt=gpt:n_layer=1,n_head=2,n_embd=8,block_size=8
expect_status 0 train --model "$gpt,dropout=0.1" --dataset "text:$text" --max-steps 2 --ckpt-dir gd
expect_status 1 train --model "$gpt" --dataset "text:$text" --max-steps 3 --ckpt-dir gd
expect_err "another configuration: --model gpt:...,dropout=0.1 -> gpt:..."
expect_status 0 train --model "$gpt" --dataset "text:$text" --max-steps 3 --ckpt-dir gd \
    --resume-allow model
echo "PASS: a resume with another gpt dropout is refused unless --resume-allow model"
