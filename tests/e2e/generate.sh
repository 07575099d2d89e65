#!/usr/bin/env bash
# cdl-generate: its option errors; its greedy text equals PyTorch's on the
# same weights (tests/fixtures/gpt_ref.py), from a prompt shorter than the
# block and one longer (the window slides); a tiny GPT trained on a counting text
# ("0123456789" over and over) continues a prompt greedily with the digits
# that follow, past its block size (the window slides) and from a prompt
# shorter than it (the padding after the context changes nothing); the same
# seed gives the same text and another seed another; a model of a larger
# vocabulary than bytes refuses text and takes and prints token ids; a
# checkpoint that is no language model is refused with a message saying so.
# cdl-eval and cdl-generate take the GPT as PyTorch saved it (no cdl
# metadata) given its --model.
. "${top_srcdir:-.}/tests/e2e/common.sh"
GEN="$top_builddir/cli/cdl-generate"

expect_status 2 "$GEN"
expect_err "give a checkpoint"
expect_status 2 "$GEN" x.safetensors --temperature -1
expect_err "--temperature"
expect_status 2 "$GEN" x.safetensors --prompt a --prompt-tokens 1
expect_err "exclude each other"
expect_status 1 "$GEN" "$TMP/none.safetensors"
expect_err "none.safetensors"

# Weights near the float range (NaN weights themselves are refused at
# load), so every logit overflows: an error, not NUL bytes (id 0 sampled
# for ever) and exit 0. A tiny spec language model written here without
# PyTorch.
printf 'input 4x1x1\nembedding 256 2 name=wte\nlinear 256 name=head\n' >"$TMP/nan.spec"
/usr/bin/python3 - "$TMP/nan.safetensors" <<'PY' || die "writing an overflowing safetensors file"
import json, struct, sys
t = {"wte.weight": ([256, 2], 1.0), "head.weight": ([256, 2], 3.4e38), "head.bias": ([256], 0.0)}
h, data = {}, b""
for name, (shape, value) in t.items():
    n = shape[0] * (shape[1] if len(shape) > 1 else 1)
    h[name] = {"dtype": "F32", "shape": shape, "data_offsets": [len(data), len(data) + 4 * n]}
    data += struct.pack("<%df" % n, *([value] * n))
hb = json.dumps(h).encode()
hb += b" " * (-len(hb) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(hb)) + hb + data)
PY
expect_status 1 "$GEN" "$TMP/nan.safetensors" --model "$TMP/nan.spec" --prompt ab --threads 1
expect_err "the logits for token 1 are NaN or infinite"
echo "PASS: a model whose logits overflow is an error, not NUL bytes"
# cdl-eval of that model: no token of NaN logits is predicted. NaN
# compares false with everything, so top-5 counted every token as a hit
# ("top5":1.000000) beside a null loss.
mkdir "$TMP/tok" && /usr/bin/python3 - "$TMP/tok" <<'PY' || die "writing tokens"
import pickle, struct, sys
for name in ("train.bin", "val.bin"):
    open(f"{sys.argv[1]}/{name}", "wb").write(struct.pack("<64H", *[i * 7 % 256 for i in range(64)]))
pickle.dump({"vocab_size": 256, "itos": {i: chr(i) for i in range(256)}},
            open(f"{sys.argv[1]}/meta.pkl", "wb"))
PY
expect_status 0 "$CDL_EVAL" "$TMP/nan.safetensors" --model "$TMP/nan.spec" --dataset "tokens:$TMP/tok" \
    --threads 1 --json
grep -q '"loss":null,"perplexity":null,"accuracy":0.000000,"top5":0.000000,"nonfinite":60}' \
    "$TMP/out" || die "cdl-eval counts tokens of NaN logits as predicted: $(cat "$TMP/out")"
echo "PASS: cdl-eval of a language model whose logits overflow predicts no token"

# Greedy (temperature 0) against PyTorch on a GPT PyTorch wrote.
py=/usr/bin/python3
if $py -c 'import torch, safetensors.torch' 2>/dev/null; then
    long="Once upon a time there were"   # 27 bytes, the block is 16
    $py "$top_srcdir/tests/e2e/generate_torch.py" "$TMP/ref.safetensors" 40 "$long" "$TMP/ta" \
        Hi "$TMP/tb" || die "generate_torch.py failed"
    for p in a b; do
        prompt=$long
        [ $p = b ] && prompt=Hi
        "$GEN" "$TMP/ref.safetensors" --prompt "$prompt" --temperature 0 --max-tokens 40 \
            --device cpu >"$TMP/g$p" || die "cdl-generate on PyTorch's GPT failed"
        head -c "$(wc -c <"$TMP/t$p")" "$TMP/g$p" | cmp -s - "$TMP/t$p" ||
            die "greedy text from '$prompt' differs from PyTorch's: $(od -c "$TMP/g$p" | head -3)"
    done
    echo "cdl-generate's greedy text equals PyTorch's from a short and a long prompt"
    # The same weights as PyTorch saves them (no cdl metadata): cdl-eval
    # takes --model and a text --dataset, and measures the validation
    # windows of the model's block (there is no test split of text).
    $py -c 'import sys, safetensors.torch as st; st.save_file(st.load_file(sys.argv[1]), sys.argv[2])' \
        "$TMP/ref.safetensors" "$TMP/plain.safetensors" || die "re-saving without metadata failed"
    seq 1000 >"$TMP/text.txt"
    "$top_builddir/cli/cdl-eval" "$TMP/plain.safetensors" --dataset "text:$TMP/text.txt" \
        --model gpt:n_layer=2,n_head=2,n_embd=32,block_size=16 --device cpu >"$TMP/ev" 2>&1 ||
        die "cdl-eval on PyTorch's GPT failed: $(cat "$TMP/ev")"
    grep -q "on text val (.* windows of 16 tokens" "$TMP/ev" || die "unexpected: $(cat "$TMP/ev")"
    echo "cdl-eval measures PyTorch's GPT on text (its validation split, windows of its block)"
    # cdl-generate takes it with --model too: the window is the block of
    # its position table; the text is PyTorch's.
    "$GEN" "$TMP/plain.safetensors" --model gpt:n_layer=2,n_head=2,n_embd=32 --prompt "$long" \
        --temperature 0 --max-tokens 40 --device cpu >"$TMP/gp" ||
        die "cdl-generate on PyTorch's GPT without metadata failed"
    head -c "$(wc -c <"$TMP/ta")" "$TMP/gp" | cmp -s - "$TMP/ta" ||
        die "greedy text of the GPT without metadata differs from PyTorch's"
    echo "cdl-generate continues a GPT as PyTorch saved it, as PyTorch does"
else
    echo "note: no python3-torch/safetensors: the comparison with PyTorch is skipped"
fi

if ! "$CDL_TRAIN" --help | grep -q 'text:'; then
    [ -s "$TMP/ga" ] || { echo "SKIP: no PyTorch, and cdl-train has no text data yet"; exit 77; }
    echo "PASS (partly): cdl-train has no text data yet: training checks skipped"; exit 0
fi
train() { "$CDL_TRAIN" --device cpu --threads 1 --seed 5 --quiet "$@" >"$TMP/train.log" 2>&1 ||
    { cat "$TMP/train.log" >&2; die "cdl-train $* failed"; }; }

# Not a language model.
train --model mlp --dataset synthetic --synthetic-size 64 --batch-size 16 --max-steps 1 \
    --ckpt-dir "$TMP/mlp"
expect_status 1 "$GEN" "$TMP/mlp/last.safetensors"
expect_err "language model"

# Byte-level: learns the successor of each digit.
for i in $(seq 400); do printf 0123456789; done >"$TMP/count.txt"
train --model gpt:n_layer=1,n_head=2,n_embd=32 --dataset "text:$TMP/count.txt" --block-size 16 \
    --batch-size 16 --optimizer adamw --lr 0.01 --epochs 1000 --max-steps 150 \
    --ckpt-dir "$TMP/count"
ck="$TMP/count/last.safetensors"
# cdl-eval measures a language model per token on the run's validation
# split (its block size, its last 10 %), giving cdl-train's own figures;
# it has no test split; cdl-predict sends the user to these two tools.
"$CDL_TRAIN" --device cpu --threads 1 --seed 5 --model gpt:n_layer=1,n_head=2,n_embd=32 \
    --dataset "text:$TMP/count.txt" --block-size 16 --batch-size 16 --optimizer adamw \
    --epochs 1 --max-steps 5 --ckpt-dir "$TMP/lm" --metrics "$TMP/lm.jsonl" --quiet ||
    die "training the model for cdl-eval failed"
expect_status 0 "$CDL_EVAL" "$TMP/lm/last.safetensors" --json --threads 1
got=$(grep -o '"loss":[0-9.]*,"perplexity":[0-9.e+]*,"accuracy":[0-9.]*' "$TMP/out") ||
    die "cdl-eval --json of a language model: $(cat "$TMP/out")"
want=$(grep '"type":"epoch"' "$TMP/lm.jsonl" | tail -1 | grep -o '"val_loss":[0-9.]*,"val_acc":[0-9.]*')
[ "$(echo "$got" | sed 's/,"perplexity":[^,]*//; s/"loss"/"val_loss"/; s/"accuracy"/"val_acc"/')" = "$want" ] ||
    die "cdl-eval's loss and accuracy ($got) are not cdl-train's validation ($want)"
grep -q '"split":"val","windows":[1-9][0-9]*,' "$TMP/out" || die "not the validation windows: $(cat "$TMP/out")"
expect_status 1 "$CDL_EVAL" "$TMP/lm/last.safetensors" --split test
expect_err "use --split val"
expect_status 1 "$CDL_PREDICT" "$TMP/lm/last.safetensors"
expect_err "is a language model"
echo "PASS: cdl-eval gives a language model's validation loss and accuracy per token as cdl-train did"
expect_status 0 "$GEN" "$ck" --prompt 3456 --temperature 0 --max-tokens 30
want=3456789012345678901234567890123456
[ "$(cat "$TMP/out")" = "$want" ] ||
    die "greedy continuation of 3456: '$(cat "$TMP/out")', expected '$want'"
# The same seed, the same text; another seed, another (temperature 5: the
# draws are nearly uniform); prompt + max-tokens bytes and a line break.
"$GEN" "$ck" --prompt 0 --temperature 5 --max-tokens 60 --seed 7 >"$TMP/a" || die "seed 7"
"$GEN" "$ck" --prompt 0 --temperature 5 --max-tokens 60 --seed 7 >"$TMP/b" || die "seed 7 again"
"$GEN" "$ck" --prompt 0 --temperature 5 --max-tokens 60 --seed 8 --top-k 256 >"$TMP/c" ||
    die "seed 8"
cmp -s "$TMP/a" "$TMP/b" || die "--seed 7 twice gave two texts"
cmp -s "$TMP/a" "$TMP/c" && die "--seed 7 and --seed 8 gave the same text"
[ "$(head -c 61 "$TMP/a" | wc -c)" -eq 61 ] && [ "$(wc -c <"$TMP/a")" -le 62 ] ||
    die "prompt + 60 tokens should be 61 bytes and a line break: $(wc -c <"$TMP/a") bytes"
# Started as 2 ranks (cdlrun, srun in a 2-task job), the text once, as
# from one process (each rank printed it, interleaved).
"$CDLRUN" -n 2 "$GEN" "$ck" --prompt 0 --temperature 5 --max-tokens 60 --seed 7 >"$TMP/d" \
    2>"$TMP/err" || die "cdl-generate under cdlrun -n 2 failed"
cmp -s "$TMP/a" "$TMP/d" || die "cdlrun -n 2 cdl-generate: '$(cat "$TMP/d")', not the text of one process"
expect_err "started as 2 ranks: rank 0 writes the text"
# --top-k 1 is greedy whatever the temperature.
expect_status 0 "$GEN" "$ck" --prompt 3456 --temperature 5 --top-k 1 --max-tokens 30
[ "$(cat "$TMP/out")" = "$want" ] || die "--top-k 1 is not greedy: '$(cat "$TMP/out")'"

# nanoGPT's character-level data: ids of "0123456789\n" (sorted: '\n' is
# 0, '0' is 1, ...) and its meta.pkl (pickle protocol 4 of {'vocab_size':
# 11, 'itos': ..., 'stoi': ...}). The prompt is encoded with the table
# and the output decoded, as nanoGPT's sample.py does (it printed ids).
mkdir "$TMP/char"
perl -e 'print pack("v*", map { ($_ + 1) % 11 } 0..4399)' >"$TMP/char/train.bin"
perl -e 'print pack("v*", map { ($_ + 1) % 11 } 0..439)' >"$TMP/char/val.bin"
printf '\x80\x04\x95\x98\x00\x00\x00\x00\x00\x00\x00}\x94(\x8c\x0avocab_size\x94K\x0b\x8c\x04itos\x94}\x94(K\x00\x8c\x01\x0a\x94K\x01\x8c\x010\x94K\x02\x8c\x011\x94K\x03\x8c\x012\x94K\x04\x8c\x013\x94K\x05\x8c\x014\x94K\x06\x8c\x015\x94K\x07\x8c\x016\x94K\x08\x8c\x017\x94K\x09\x8c\x018\x94K\x0a\x8c\x019\x94u\x8c\x04stoi\x94}\x94(h\x04K\x00h\x05K\x01h\x06K\x02h\x07K\x03h\x08K\x04h\x09K\x05h\x0aK\x06h\x0bK\x07h\x0cK\x08h\x0dK\x09h\x0eK\x0auu.' \
    >"$TMP/char/meta.pkl"
"$CDL_TRAIN" --device cpu --threads 1 --seed 5 --model gpt:n_layer=1,n_head=2,n_embd=32 \
    --dataset "tokens:$TMP/char" --block-size 16 --batch-size 16 --optimizer adamw --lr 0.01 \
    --epochs 1000 --max-steps 150 --ckpt-dir "$TMP/charck" >"$TMP/train.log" 2>&1 ||
    { cat "$TMP/train.log" >&2; die "training on the character-level corpus failed"; }
grep -q "vocabulary 11 from $TMP/char/meta.pkl (nanoGPT's; --vocab-size overrides it), and its itos table" \
    "$TMP/train.log" || die "the header does not name meta.pkl's itos: $(cat "$TMP/train.log")"
ck="$TMP/charck/last.safetensors"
expect_status 0 "$GEN" "$ck" --prompt 3456 --temperature 0 --max-tokens 12
[ "$(cat "$TMP/out")" = "$(printf '3456789\n01234567')" ] ||
    die "greedy continuation of 3456 by meta.pkl's itos: '$(cat "$TMP/out")'"
expect_status 0 "$GEN" "$ck" --prompt-tokens 4,5 --temperature 0 --max-tokens 3
[ "$(cat "$TMP/out")" = 34567 ] || die "--prompt-tokens 4,5 of a character model: '$(cat "$TMP/out")'"
expect_status 1 "$GEN" "$ck" --prompt 34a5
expect_err "--prompt: 'a' (byte 2) is not in the model's vocabulary of 11 symbols"
echo "PASS: a model of nanoGPT's character-level data reads and writes text by its meta.pkl"

# A vocabulary of 300 (uint16 .bin data): token ids in and out.
mkdir "$TMP/bin"
perl -e 'print pack("v*", map { $_ % 300 } 0..5999)' >"$TMP/bin/train.bin"
perl -e 'print pack("v*", map { $_ % 300 } 0..599)' >"$TMP/bin/val.bin"
train --model gpt:n_layer=1,n_head=2,n_embd=16 --dataset "tokens:$TMP/bin" --vocab-size 300 \
    --block-size 8 --batch-size 4 --max-steps 1 --ckpt-dir "$TMP/bpe"
ck="$TMP/bpe/last.safetensors"
expect_status 1 "$GEN" "$ck" --prompt hello
expect_err "cannot tokenize text"
expect_err "--prompt-tokens"
expect_status 1 "$GEN" "$ck" --prompt-tokens 1,300
expect_err "300"
expect_status 0 "$GEN" "$ck" --prompt-tokens 1,299 --max-tokens 12
grep -qxE '1,299(,[0-9]+){12}' "$TMP/out" || die "token ids out: '$(cat "$TMP/out")'"
tr ',' '\n' <"$TMP/out" | awk '$1 >= 300 { bad = 1 } END { exit bad }' ||
    die "a token id >= 300 in '$(cat "$TMP/out")'"
echo "PASS: cdl-generate continues a learnt sequence, is seeded, and takes token ids"
