#!/usr/bin/env bash
# --init from GPT weights PyTorch users have: a nanoGPT model saved under
# PyTorch < 2.0 (its blocks' causal masks, transformer.h.N.attn.bias, are
# in the state dict) starts a run; a file in Hugging Face's GPT-2 layout
# (no 'transformer.' prefix, Conv1D weights transposed, attn.masked_bias)
# is refused naming the layout, and docs/transformers.md's conversion of
# it gives back the weights cdl-eval scores as the original.
. "${top_srcdir:-.}/tests/e2e/common.sh"
py=/usr/bin/python3
$py -c 'import torch, safetensors.torch' 2>/dev/null ||
    { echo "SKIP: python3-torch or safetensors not importable (scripts/install-deps.sh --test installs them)"; exit 77; }

for i in $(seq 40); do echo "line $i: the quick brown fox jumps over the lazy dog"; done >"$TMP/t.txt"
gpt=gpt:n_layer=2,n_head=2,n_embd=16,block_size=16
run=(--device cpu --threads 1 --quiet --dataset "text:$TMP/t.txt" --block-size 16)
"$CDL_TRAIN" "${run[@]}" --model $gpt --max-steps 3 --ckpt-dir "$TMP/ck" || die "training failed"

# The checkpoint's weights in nanoGPT's (PyTorch 1.13) and Hugging Face's layouts.
$py - "$TMP" <<'PY' || die "writing the PyTorch files failed"
import sys, torch, safetensors.torch as st
tmp = sys.argv[1]
sd = {k: v for k, v in st.load_file(f"{tmp}/ck/last.safetensors").items()
      if not k.startswith("optimizer.") and k != "lm_head.weight"}
mask = torch.tril(torch.ones(16, 16)).view(1, 1, 16, 16)
nano = dict(sd)
for i in range(2):
    nano[f"transformer.h.{i}.attn.bias"] = mask.clone()
st.save_file(nano, f"{tmp}/nanogpt.safetensors")
conv1d = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
hf = {}
for k, v in nano.items():
    hf[k[len("transformer."):]] = v.t().contiguous() if k.endswith(conv1d) else v
for i in range(2):
    hf[f"h.{i}.attn.masked_bias"] = torch.tensor(-1e4)
st.save_file(hf, f"{tmp}/model.safetensors")
# Only the prefix added: the transposition is what is left wrong.
st.save_file({"transformer." + k: v for k, v in hf.items()}, f"{tmp}/prefixed.safetensors")
PY

"$CDL_TRAIN" "${run[@]}" --model $gpt --max-steps 1 --init "$TMP/nanogpt.safetensors" \
    --ckpt-dir "$TMP/nano" || die "--init refused nanoGPT's causal-mask buffers (attn.bias)"
expect_status 1 "$CDL_TRAIN" "${run[@]}" --model $gpt --max-steps 1 --init "$TMP/model.safetensors"
expect_err "the file has Hugging Face's GPT2Model names, without the prefix 'transformer.'"
expect_status 1 "$CDL_TRAIN" "${run[@]}" --model $gpt --max-steps 1 --init "$TMP/prefixed.safetensors"
expect_err "has shape (16, 48), the transpose of the model's (48, 16): a Hugging Face GPT-2 file"
expect_status 1 "$CDL_EVAL" --device cpu --threads 1 "$TMP/prefixed.safetensors" --model $gpt \
    --dataset "text:$TMP/t.txt"
expect_err "the transpose of the model's (48, 16)"

# The documentation's conversion, run as it is printed (in $TMP, where it
# finds model.safetensors and writes gpt2.safetensors).
$py - "$top_srcdir/docs/transformers.md" >"$TMP/convert.py" <<'PY' || die "no conversion in docs/transformers.md"
import re, sys
blocks = re.findall(r"```python\n(.*?)```", open(sys.argv[1], encoding="utf-8").read(), re.S)
code = [b for b in blocks if "conv1d" in b and "gpt2.safetensors" in b]
sys.exit("no block" if len(code) != 1 else print(code[0], end=""))
PY
(cd "$TMP" && $py convert.py) || die "the documented conversion fails"
"$CDL_EVAL" --device cpu --threads 1 "$TMP/ck/last.safetensors" --json >"$TMP/a.json" ||
    die "cdl-eval of the checkpoint failed"
"$CDL_EVAL" --device cpu --threads 1 "$TMP/gpt2.safetensors" --model $gpt \
    --dataset "text:$TMP/t.txt" --json >"$TMP/b.json" || die "cdl-eval of the converted file failed"
loss() { sed 's/.*"loss":\([0-9.e+-]*\).*/\1/' "$1"; }
[ "$(loss "$TMP/a.json")" = "$(loss "$TMP/b.json")" ] ||
    die "converted weights score $(loss "$TMP/b.json"), the checkpoint $(loss "$TMP/a.json")"
echo "PASS: nanoGPT's and (converted) Hugging Face's GPT weights load; the loss is the checkpoint's"
