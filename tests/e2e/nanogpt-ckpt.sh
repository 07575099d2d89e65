#!/usr/bin/env bash
# nanoGPT's ckpt.pt to cdl and back (templates/pytorch/nanogpt_ckpt.py,
# docs/transformers.md), on a character-level GPT as nanoGPT saves it under
# PyTorch 1.13 ('_orig_mod.' names, both names of the tied weight, the
# causal-mask buffers) with its corpus' meta.pkl:
#   - to-cdl: cdl-eval gives PyTorch's validation loss, and cdl-generate
#     (no --model) writes PyTorch's greedy text through the itos table;
#   - cdl-train --init takes it and trains on; to-nanogpt: the result loads
#     strictly into nanoGPT's model (sample.py) and its AdamW state into
#     nanoGPT's two parameter groups (train.py's resume), with cdl-eval's
#     loss and cdl-generate's text, iter_num = cdl's steps;
#   - the same weights without metadata (the one-line conversion cdl-train
#     prints for a ckpt.pt): cdl-generate no longer takes the corpus' ids
#     for bytes, which printed control characters and refused "the" ('t' is
#     116, past a vocabulary of 30); it asks for --prompt-tokens or the
#     itos table, and prints ids.
. "${top_srcdir:-.}/tests/e2e/common.sh"
# The checks run in TMP (nanoGPT's paths are relative: data/DATASET/meta.pkl).
top_srcdir=$(cd "$top_srcdir" && pwd) top_builddir=$(cd "$top_builddir" && pwd)
CDL_TRAIN="$top_builddir/cli/cdl-train" CDL_EVAL="$top_builddir/cli/cdl-eval"
GEN="$top_builddir/cli/cdl-generate"
py=/usr/bin/python3
$py -c 'import torch, numpy, safetensors.torch' 2>/dev/null ||
    { echo "SKIP: no python3-torch, python3-numpy or python3-safetensors"; exit 77; }
CONV="$top_srcdir/templates/pytorch/nanogpt_ckpt.py"
HELP="$top_srcdir/tests/e2e/nanogpt_ckpt.py"
mkdir "$TMP/ng" && cd "$TMP/ng" || die "no $TMP/ng"   # TMP/out is expect_status's
$py "$HELP" make . || die "making nanoGPT's checkpoint failed"

# ---- to cdl
$py "$CONV" to-cdl out/ckpt.pt ng.safetensors >conv.log 2>&1 || die "to-cdl failed: $(cat conv.log)"
grep -q "itos from data/char/meta.pkl" conv.log || die "to-cdl did not find meta.pkl: $(cat conv.log)"
loss_of() { "$CDL_EVAL" "$1" --dataset tokens:data/char --device cpu --json |
    $py -c 'import json, sys; print("%.6f" % json.load(sys.stdin)["loss"])'; }
close() { $py -c "import sys; sys.exit(abs($1 - $2) > 1e-4 * abs($2))"; }
l=$(loss_of ng.safetensors) || die "cdl-eval on the converted ckpt.pt failed"
close "$l" "$(cat ref.loss)" || die "cdl-eval's loss $l differs from PyTorch's $(cat ref.loss)"
echo "to-cdl: cdl-eval's validation loss $l is PyTorch's"
l=$("$CDL_EVAL" ng.safetensors --device cpu --json |
    $py -c 'import json, sys; print("%.6f" % json.load(sys.stdin)["loss"])') ||
    die "cdl-eval without --dataset did not find the corpus beside meta.pkl"
close "$l" "$(cat ref.loss)" || die "cdl-eval without --dataset: loss $l, not $(cat ref.loss)"
echo "to-cdl: cdl-eval finds the corpus beside meta.pkl without --dataset"
"$GEN" ng.safetensors --prompt "the " --temperature 0 --max-tokens 30 --device cpu >gen.txt ||
    die "cdl-generate on the converted ckpt.pt failed"
head -c "$(wc -c <ref.txt)" gen.txt | cmp -s - ref.txt ||
    die "greedy text '$(cat gen.txt)' is not nanoGPT's '$(cat ref.txt)'"
echo "to-cdl: cdl-generate writes nanoGPT's greedy text with the corpus' itos"

# ---- train on in cdl, back to nanoGPT
"$CDL_TRAIN" --device cpu --threads 1 --quiet --model gpt:n_layer=2,n_head=2,n_embd=32,bias=false \
    --init ng.safetensors --dataset tokens:data/char --block-size 16 --batch-size 8 \
    --optimizer adamw --lr 1e-3 --beta2 0.99 --max-steps 7 --epochs 100 --ckpt-dir run \
    >train.log 2>&1 || die "cdl-train --init from the converted ckpt.pt failed: $(cat train.log)"
$py "$CONV" to-nanogpt run/last.safetensors back.pt >conv.log 2>&1 ||
    die "to-nanogpt failed: $(cat conv.log)"
$py "$HELP" load back.pt . >load.log 2>&1 || die "nanoGPT cannot load to-nanogpt's file: $(cat load.log)"
cat load.log
l=$(loss_of run/last.safetensors)
close "$(sed -n 's/^loss //p' load.log)" "$l" ||
    die "nanoGPT's loss on the converted weights is not cdl-eval's $l"
grep -q "^iter_num 7 dataset char step 7 exp_avg_sq_wte [0-9]" load.log ||
    die "iter_num, dataset or the AdamW state are not cdl's"
"$GEN" run/last.safetensors --prompt "the " --temperature 0 --max-tokens 30 --device cpu |
    tr '\n' '|' >gen.txt
[ "text $(cat gen.txt)" = "$(grep '^text ' load.log)|" ] ||
    die "nanoGPT's greedy text from to-nanogpt's file differs from cdl-generate's '$(cat gen.txt)'"
echo "to-nanogpt: strict load, cdl's loss, text, steps and AdamW state in nanoGPT's groups"

# ---- without metadata (the one-liner): ids, not bytes
$py -c "import torch, safetensors.torch as st; sd = torch.load('out/ckpt.pt', map_location='cpu'); sd = sd.get('model', sd); st.save_file({k.removeprefix('_orig_mod.'): v.contiguous() for k, v in sd.items() if not k.endswith('lm_head.weight')}, 'plain.safetensors')" ||
    die "the one-line conversion failed"
M=gpt:n_layer=2,n_head=2,n_embd=32,bias=false,block_size=16
expect_status 1 "$GEN" plain.safetensors --model "$M" --prompt "the " --device cpu
expect_err "has a vocabulary of 30 token ids and no itos table"
expect_err "nanogpt_ckpt.py to-cdl"
"$GEN" plain.safetensors --model "$M" --prompt-tokens 21,9,6,1 --temperature 0 --max-tokens 5 \
    --device cpu >ids.txt || die "--prompt-tokens on the plain file failed"
grep -qx '21,9,6,1\(,[0-9]\{1,2\}\)\{5\}' ids.txt || die "not token ids: $(od -c ids.txt | head -2)"
echo "a GPT PyTorch saved with a vocabulary of 30: token ids in and out, text refused with the way"
echo PASS
