#!/usr/bin/env python3
"""PyTorch side of bench/run_gpt.sh: the reference GPT of
tests/fixtures/gpt_ref.py (nanoGPT's module and parameter names).

  learn: from a cdl checkpoint's weights (loaded strictly), AdamW for the
         same steps as cdl-train on random windows of the first 90 % of a
         text file; then the validation loss, on every non-overlapping window
         of the last 10 %, of its own weights and of cdl's final ones.
  speed: training tokens/s of the same model, eager or torch.compile.

Prints one line "RESULT key=value ..." for run_gpt.sh to read."""
import argparse
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "fixtures"))
import gpt_ref  # noqa: E402  (the reference module, shared with the tests)


def make_model(a):
    cfg = gpt_ref.GPTConfig(block_size=a.block, vocab_size=256, n_layer=a.n_layer,
                            n_head=a.n_head, n_embd=a.n_embd, dropout=0.0, bias=True)
    return gpt_ref.GPT(cfg)


def logits_of(model, x):
    """(B, T, V) logits of every position."""
    out = model(x)
    return out[0] if isinstance(out, tuple) else out


def loss_of(model, x, y):
    z = logits_of(model, x)
    return F.cross_entropy(z.reshape(-1, z.size(-1)), y.reshape(-1), ignore_index=-1)


def load_strict(model, path):
    from safetensors.torch import load_file
    # cdl's checkpoints also hold the optimizer state ("optimizer.*").
    state = {k: v for k, v in load_file(path).items() if not k.startswith("optimizer.")}
    model.load_state_dict(state, strict=True)


def text(path):
    with open(path, "rb") as f:
        return torch.tensor(list(f.read()), dtype=torch.long)


def windows(data, starts, T):
    x = torch.stack([data[s:s + T] for s in starts])
    y = torch.stack([data[s + 1:s + 1 + T] for s in starts])
    return x, y


@torch.no_grad()
def val_loss(model, val, T, batch=64):
    """Mean cross-entropy over every position of the non-overlapping
    windows of the validation text."""
    model.eval()
    starts = list(range(0, len(val) - T - 1, T))
    total, count = 0.0, 0
    for k in range(0, len(starts), batch):
        x, y = windows(val, starts[k:k + batch], T)
        total += loss_of(model, x, y).item() * y.numel()
        count += y.numel()
    model.train()
    return total / count


def optimizer(model, lr, wd):
    """AdamW with decay on >= 2-D parameters only (nanoGPT's grouping)."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": wd},
                              {"params": rest, "weight_decay": 0.0}], lr=lr)


def step(model, opt, x, y, clip):
    loss = loss_of(model, x, y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    if clip > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    opt.step()
    return loss


def learn(a):
    data = text(a.data)
    cut = int(len(data) * 0.9)
    train, val = data[:cut], data[cut:]
    model = make_model(a)
    load_strict(model, a.init)
    opt = optimizer(model, a.lr, a.wd)
    g = torch.Generator().manual_seed(a.seed)
    t0 = time.time()
    for _ in range(a.steps):
        starts = torch.randint(0, len(train) - a.block - 1, (a.batch,), generator=g).tolist()
        step(model, opt, *windows(train, starts, a.block), a.clip)
    secs = time.time() - t0
    torch_val = val_loss(model, val, a.block)
    cdl_val = float("nan")
    if a.cdl_ckpt:
        load_strict(model, a.cdl_ckpt)
        cdl_val = val_loss(model, val, a.block)
    print(f"RESULT impl=torch-{torch.__version__.split('+')[0]} torch_val={torch_val:.4f} "
          f"cdl_val={cdl_val:.4f} seconds={secs:.1f}")


def speed(a):
    torch.manual_seed(a.seed)
    model = make_model(a)
    name = f"torch-{torch.__version__.split('+')[0]}-{a.impl}"
    opt = optimizer(model, a.lr, a.wd)
    run = model
    if a.impl == "compile":
        try:
            run = torch.compile(model)
        except Exception as e:  # torch 1.x, or no compiler
            print(f"RESULT impl={name} tokens_per_s=nan note={type(e).__name__}")
            return
    x = torch.randint(0, 256, (a.batch, a.block))
    y = torch.randint(0, 256, (a.batch, a.block))
    try:
        for _ in range(a.warmup):   # torch.compile compiles here
            step(run, opt, x, y, a.clip)
        t0 = time.time()
        for _ in range(a.steps):
            step(run, opt, x, y, a.clip)
        dt = time.time() - t0
    except Exception as e:
        print(f"RESULT impl={name} tokens_per_s=nan note={type(e).__name__}")
        return
    print(f"RESULT impl={name} tokens_per_s={a.steps * a.batch * a.block / dt:.0f}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["learn", "speed"])
    p.add_argument("--impl", choices=["eager", "compile"], default="eager")
    p.add_argument("--data")
    p.add_argument("--init")
    p.add_argument("--cdl-ckpt")
    p.add_argument("--n-layer", dest="n_layer", type=int, default=4)
    p.add_argument("--n-head", dest="n_head", type=int, default=4)
    p.add_argument("--n-embd", dest="n_embd", type=int, default=128)
    p.add_argument("--block", type=int, default=64)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--wd", type=float, default=0.1)
    p.add_argument("--clip", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    learn(a) if a.mode == "learn" else speed(a)


if __name__ == "__main__":
    main()
