#!/usr/bin/env python3
"""tests/e2e/generate.sh: a GPT of tests/fixtures/gpt_ref.py with PyTorch's
default initialisation (wide logits, so that no two are near a tie), saved
as a safetensors file with the metadata cdl-generate reads, and its greedy
continuation of prompts: the last `block` tokens as context, as
cdl-generate does.
Usage: generate_torch.py CKPT.safetensors N PROMPT TEXT_FILE [PROMPT TEXT_FILE]..."""
import os
import sys

import torch
from safetensors.torch import save_file

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures"))
import gpt_ref  # noqa: E402

BLOCK, LAYERS, HEADS, EMBD = 16, 2, 2, 32


def main():
    out, n = sys.argv[1], int(sys.argv[2])
    torch.manual_seed(0)
    cfg = gpt_ref.GPTConfig(n_layer=LAYERS, n_head=HEADS, n_embd=EMBD, block_size=BLOCK,
                            vocab_size=256, bias=True, dropout=0.0)
    model = gpt_ref.GPT(cfg).eval()
    state = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    save_file(state, out, metadata={"model": f"gpt:n_layer={LAYERS},n_head={HEADS},n_embd={EMBD}",
                                    "input_shape": f"{BLOCK},1,1", "classes": "256"})
    for prompt, path in zip(sys.argv[3::2], sys.argv[4::2]):
        ids = list(prompt.encode())
        with torch.no_grad():
            for _ in range(n):
                logits, _ = model(torch.tensor([ids[-BLOCK:]]))
                ids.append(int(torch.argmax(logits[0, -1])))
        with open(path, "wb") as f:
            f.write(bytes(ids))

if __name__ == "__main__":
    main()
