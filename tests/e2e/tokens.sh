#!/usr/bin/env bash
# cdl-train's token data (text:FILE, tokens:DIR): the Debian corpus loads,
# and hostile files fail with one line naming the file and what is wrong:
# before training, or (an id past the vocabulary: loading reads none of the
# file) at the first batch that holds it. The unit test test_tokens checks
# the windows themselves.
. "${top_srcdir:-.}/tests/e2e/common.sh"

# Little-endian uint16 ids from the shell: bin FILE ID...
bin() {
    local f=$1; shift
    : >"$f"
    for v in "$@"; do printf "\\x$(printf %02x $((v & 255)))\\x$(printf %02x $((v >> 8)))" >>"$f"; done
}
mkdir -p "$TMP/bad" "$TMP/odd"
bin "$TMP/bad/train.bin" 1 2 3 4 5 6 7 100 8 9 10 11
mkdir -p "$TMP/badid"
bin "$TMP/badid/train.bin" 1 2 3 4 100 5 6 7 8   # every window of 4 (+1) holds token 4
bin "$TMP/badid/val.bin" 1 2 3 4 5 6 7 8 9
bin "$TMP/bad/val.bin" 1 2 3 4 5 6 7 8 9
printf 'abc' >"$TMP/odd/train.bin"

train() { expect_status "$1" "$CDL_TRAIN" --device cpu --threads 1 --epochs 1 --quiet "${@:2}"; }
train 1 --dataset "tokens:$TMP/badid" --vocab-size 100 --block-size 4 --batch-size 2 \
    --model gpt:n_layer=1,n_head=1,n_embd=8
expect_err "$TMP/badid/train.bin: token 100 at token offset 4 (byte 8) is not below the vocabulary size 100"
train 1 --dataset "tokens:$TMP/odd" --block-size 4
expect_err "3 bytes is not a whole number of uint16 tokens"
train 1 --dataset tokens --data-dir "$TMP" --block-size 4
expect_err "$TMP/train.bin"
train 2 --dataset "tokens:$TMP/bad" --vocab-size 65537
expect_err "--vocab-size"
# val.bin is the validation split: a --val-split would be ignored; a short
# val.bin is made longer, not the --val-split it does not have.
train 1 --dataset "tokens:$TMP/bad" --vocab-size 200 --block-size 4 --val-split 0.5
expect_err "--dataset tokens:$TMP/bad holds val.bin, the validation split: --val-split applies to"
train 1 --dataset "tokens:$TMP/bad" --vocab-size 200 --block-size 9
expect_err "$TMP/bad/val.bin: the validation split holds 9 tokens, fewer than --block-size 9 + 1 (a window and the token after it): use a smaller --block-size or a longer val.bin"
train 2 --dataset "text:$TMP/x" --block-size 0
expect_err "--block-size"
# nanoGPT's char-level prepare.py writes meta.pkl: its vocab_size (27
# here; pickle protocol 4 of {'vocab_size': 27}) sizes the model, not
# GPT-2's 50257 (the unit test test_tokens checks the reader itself).
mkdir -p "$TMP/char"
bin "$TMP/char/train.bin" 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 0
bin "$TMP/char/val.bin" 1 2 3 4 5 6 7 8 9
printf '\x80\x04}\x94(\x8c\x0avocab_size\x94K\x1bu.' >"$TMP/char/meta.pkl"
expect_status 0 "$CDL_TRAIN" --device cpu --threads 1 --model gpt:n_layer=1,n_head=1,n_embd=2 \
    --dataset "tokens:$TMP/char" --block-size 4 --max-steps 1
expect_err "vocabulary 27 from $TMP/char/meta.pkl"
# A language model on the CPU: the run's header comes first, and the MFU
# note after it fits a CPU (it came first, calling the CPU "not in the
# table of GPU peaks").
head -1 "$TMP/err" | grep -q '^cdl [0-9.]*: gpt' || die "the run's header is not its first line: $(cat "$TMP/err")"
expect_err "MFU n/a on the CPU: --peak-tflops X, the CPU's peak TFLOP/s, reports one"
grep -q 'GPU' "$TMP/err" && die "a CPU run's notes speak of GPUs: $(cat "$TMP/err")"
# ... also for one of its .bin files (tokens:FILE.bin), the meta.pkl beside it.
# (--vocab-size 20: ids 1..19 train, the first validation window holds 20.)
train 1 --dataset "tokens:$TMP/char/train.bin" --block-size 4 --vocab-size 20 --val-split 8 \
    --model gpt:n_layer=1,n_head=1,n_embd=2
expect_err "$TMP/char/train.bin: token 20 at token offset 19 (byte 38)"
expect_status 0 "$CDL_TRAIN" --device cpu --threads 1 --model gpt:n_layer=1,n_head=1,n_embd=2 \
    --dataset "tokens:$TMP/char/train.bin" --block-size 4 --val-split 8 --max-steps 1
expect_err "vocabulary 27 from $TMP/char/meta.pkl"
# ... also from a --stage copy: the file's meta.pkl is staged with it (the
# staged run read no meta.pkl and built GPT-2's 50257 rows).
mkdir "$TMP/stage"
expect_status 0 "$CDL_TRAIN" --device cpu --threads 1 --model gpt:n_layer=1,n_head=1,n_embd=2 \
    --dataset "tokens:$TMP/char/train.bin" --block-size 4 --val-split 8 --max-steps 1 \
    --stage "$TMP/stage"
expect_err "vocabulary 27 from $TMP/stage/tokens-"
expect_err "/meta.pkl"
printf '\x80\x04}\x94.' >"$TMP/char/meta.pkl"
train 1 --dataset "tokens:$TMP/char" --block-size 4
expect_err "$TMP/char/meta.pkl has no vocab_size entry: give the vocabulary with --vocab-size N"
# An embedding reads token ids: only token data has them, and only below
# the embedding's vocabulary (else the lookup would index outside it).
printf 'a,b,label\n1,2,0\n3,4,1\n5,6,0\n7,8,1\n' >"$TMP/t.csv"
printf 'embedding 10 8\nflatten\nlinear 2\n' >"$TMP/emb.spec"
train 1 --model "$TMP/emb.spec" --dataset "csv:$TMP/t.csv" --val-split 1
expect_err "layer 1 (embedding) reads token ids, but dataset csv holds no tokens"
printf 'hello world, hello tokens\n' >"$TMP/small.txt"
train 1 --model "$TMP/emb.spec" --dataset "text:$TMP/small.txt" --block-size 4 --val-split 0.3
expect_err "layer 1 (embedding) has a vocabulary of 10 but dataset text has token ids up to 255"
# ... and token ids are not values: a model without an embedding would
# convolve the ids as numbers.
train 1 --model lenet --dataset "text:$TMP/small.txt" --block-size 4 --val-split 0.3
expect_err "lenet: dataset text holds token ids (windows of 4), which only an embedding layer reads"

# A run started on a relative path (text:t.txt): cdl-eval and cdl-predict
# read the data path from the checkpoint, and from another directory they
# must still find it (it was written as given: 'cannot open t.txt').
mkdir -p "$TMP/rel"
for i in 1 2 3 4 5 6 7 8; do printf 'hello relative paths, hello tokens\n'; done >"$TMP/rel/t.txt"
cli=$(cd "$top_builddir/cli" && pwd)
(cd "$TMP/rel" && "$cli/cdl-train" --device cpu --threads 1 --quiet --dataset text:t.txt \
    --model gpt:n_layer=1,n_head=1,n_embd=4 --block-size 8 --max-steps 1 --ckpt-dir ck) ||
    die "training on text:t.txt failed"
(cd / && expect_status 0 "$cli/cdl-eval" --device cpu --threads 1 "$TMP/rel/ck/last.safetensors")
grep -q "on text val" "$TMP/out" || die "cdl-eval from / did not evaluate the validation windows"

# The Debian corpus (fortunes-min, scripts/install-deps.sh).
if "$top_srcdir/scripts/fortunes-corpus.sh" "$TMP/corpus.txt" 2>"$TMP/corpus.err"; then
    [ "$(wc -c <"$TMP/corpus.txt")" -gt 50000 ] || die "the fortunes corpus is short"
    train 1 --dataset "text:$TMP/corpus.txt" --val-split 0
    expect_err "--val-split 0 leaves nothing to validate on"
    train 1 --dataset "text:$TMP/corpus.txt" --block-size 9000 --val-split 0.05
    expect_err "the validation split holds 4920 tokens, fewer than --block-size 9000 + 1"
    # A char GPT trains on it for a few steps, T from the model's block_size.
    train 0 --model gpt:n_layer=1,n_head=2,n_embd=16,block_size=16 --dataset "text:$TMP/corpus.txt" \
        --batch-size 8 --max-steps 4 --metrics "$TMP/m.json"
    grep -q '"steps_per_epoch":692,' "$TMP/m.json" || die "not ceil(((98399 - 9840) - 1) / 16 / 8) steps"
    grep -q '"val_loss"' "$TMP/m.json" || die "no validation on the corpus"
    train 1 --dataset "text:$TMP/corpus.txt" --vocab-size 50257
    expect_err "byte-level"
else
    echo "SKIP: the fortunes corpus: $(cat "$TMP/corpus.err")"
fi
# --summary trains nothing: GPT-2 small's shape at the default batch of 64
# (whose logits, 64x1024x50257, are refused as a batch to train) prints.
mkdir "$TMP/zeros" && head -c 8192 /dev/zero >"$TMP/zeros/train.bin"
expect_status 0 "$CDL_TRAIN" --dataset "tokens:$TMP/zeros" --val-split 0.5 --summary \
    --model gpt:n_layer=12,n_head=12,n_embd=768,block_size=1024
grep -qE '^ +[0-9]+  lm_head +linear 50257 bias=false tie +1024x50257 seq' "$TMP/out" ||
    die "no --summary of GPT-2 small: $(tail -n 3 "$TMP/out" "$TMP/err")"
echo "tokens: errors name the file and the offset"
