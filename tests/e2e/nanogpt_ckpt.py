"""The PyTorch side of tests/e2e/nanogpt-ckpt.sh: nanoGPT's checkpoints as
nanoGPT writes and reads them, with the reference GPT of the tree
(tests/fixtures/gpt_ref.py) in nanoGPT's shape under PyTorch 1.13: each
block's attention holds nanoGPT's causal-mask buffer (attn.bias, registered
when scaled_dot_product_attention is missing) and the state dict is the
one train.py saves, raw_model.state_dict() of a torch.compile'd model
('_orig_mod.' names, lm_head.weight and transformer.wte.weight both).

    nanogpt_ckpt.py make DIR        DIR/data/char/{train,val}.bin, meta.pkl;
                                    DIR/out/ckpt.pt (40 AdamW steps taken);
                                    DIR/ref.loss (the val loss over cdl's
                                    windows), DIR/ref.txt (greedy text)
    nanogpt_ckpt.py load CKPT DIR   sample.py's and train.py's resume load,
                                    strict; prints the val loss, the greedy
                                    text and iter_num
"""
import os
import pickle
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures"))
from gpt_ref import GPT, GPTConfig  # noqa: E402

CHARS = "\n abcdefghijklmnopqrstuvwxyz.,"   # id 0 is a line break, as in shakespeare_char
T = 16


def nanogpt_model(args):
    """GPT(GPTConfig(**model_args)) as nanoGPT's model.py builds it here."""
    m = GPT(GPTConfig(**{k: v for k, v in args.items()}))
    if not hasattr(torch.nn.functional, "scaled_dot_product_attention"):
        bs = args["block_size"]
        for blk in m.transformer.h:
            blk.attn.register_buffer("bias", torch.tril(torch.ones(bs, bs)).view(1, 1, bs, bs))
    return m


def configure_optimizers(m, wd, lr, betas):
    """nanoGPT's GPT.configure_optimizers."""
    pd = {n: p for n, p in m.named_parameters() if p.requires_grad}
    return torch.optim.AdamW([{"params": [p for p in pd.values() if p.dim() >= 2], "weight_decay": wd},
                              {"params": [p for p in pd.values() if p.dim() < 2], "weight_decay": 0.0}],
                             lr=lr, betas=betas)


def val_loss(m, d):
    """The mean loss over the windows cdl-eval reads: offsets 0, T, 2T, ..."""
    val = np.fromfile(os.path.join(d, "data", "char", "val.bin"), dtype=np.uint16).astype(np.int64)
    n = (len(val) - 1) // T
    x = torch.tensor(np.stack([val[i * T:i * T + T] for i in range(n)]))
    y = torch.tensor(np.stack([val[i * T + 1:i * T + T + 1] for i in range(n)]))
    with torch.no_grad():
        return m(x, y)[1].item()


def greedy(m, prompt, n):
    """nanoGPT's generate at temperature -> 0 (argmax), decoded with itos."""
    idx = torch.tensor([[CHARS.index(c) for c in prompt]])
    with torch.no_grad():
        for _ in range(n):
            logits, _ = m(idx[:, -T:])
            idx = torch.cat([idx, logits[:, -1, :].argmax(-1, keepdim=True)], dim=1)
    return "".join(CHARS[i] for i in idx[0].tolist())


def make(d):
    os.makedirs(os.path.join(d, "data", "char"), exist_ok=True)
    os.makedirs(os.path.join(d, "out"), exist_ok=True)
    text = "the cat sat on the mat, and the dog sat on the log.\n" * 40
    ids = np.array([CHARS.index(c) for c in text], dtype=np.uint16)
    ids[:int(len(ids) * 0.9)].tofile(os.path.join(d, "data", "char", "train.bin"))
    ids[int(len(ids) * 0.9):].tofile(os.path.join(d, "data", "char", "val.bin"))
    with open(os.path.join(d, "data", "char", "meta.pkl"), "wb") as f:
        pickle.dump({"vocab_size": len(CHARS), "itos": dict(enumerate(CHARS)),
                     "stoi": {c: i for i, c in enumerate(CHARS)}}, f)
    torch.manual_seed(3)
    args = dict(n_layer=2, n_head=2, n_embd=32, block_size=T, bias=False,
                vocab_size=len(CHARS), dropout=0.0)
    m = nanogpt_model(args)
    m.init_gpt2()
    opt = configure_optimizers(m, 0.1, 1e-2, (0.9, 0.99))
    x = torch.tensor(ids[:T * 8].astype(np.int64)).view(8, T)
    y = torch.tensor(ids[1:T * 8 + 1].astype(np.int64)).view(8, T)
    for _ in range(40):   # enough to write words, not only spaces
        opt.zero_grad()
        m(x, y)[1].backward()
        opt.step()
    sd = {"_orig_mod." + k: v for k, v in m.state_dict().items()}   # compiled
    torch.save({"model": sd, "optimizer": opt.state_dict(), "model_args": args,
                "iter_num": 40, "best_val_loss": torch.tensor(9.0),
                "config": {"dataset": "char"}}, os.path.join(d, "out", "ckpt.pt"))
    with open(os.path.join(d, "ref.loss"), "w") as f:
        f.write(f"{val_loss(m, d):.6f}\n")
    with open(os.path.join(d, "ref.txt"), "w") as f:
        f.write(greedy(m, "the ", 30))


def load(path, d):
    """sample.py's load, then train.py's init_from='resume' optimizer load."""
    ck = torch.load(path, map_location="cpu")
    m = nanogpt_model(ck["model_args"])
    sd = ck["model"]
    for k in list(sd):
        if k.startswith("_orig_mod."):
            sd[k[len("_orig_mod."):]] = sd.pop(k)
    m.load_state_dict(sd)   # strict, as sample.py
    opt = configure_optimizers(m, 0.1, 1e-3, (0.9, 0.99))
    opt.load_state_dict(ck["optimizer"])
    st = opt.state[m.transformer.wte.weight]
    print(f"loss {val_loss(m, d):.6f}")
    print(f"iter_num {ck['iter_num']} dataset {ck['config']['dataset']} "
          f"step {int(st['step'])} exp_avg_sq_wte {st['exp_avg_sq'].sum().item():.6g}")
    print("text " + greedy(m, "the ", 30).replace("\n", "|"))


if __name__ == "__main__":
    {"make": lambda: make(sys.argv[2]), "load": lambda: load(sys.argv[2], sys.argv[3])}[sys.argv[1]]()
