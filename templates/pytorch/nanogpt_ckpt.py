#!/usr/bin/env python3
"""Convert between nanoGPT's ckpt.pt and cdl's safetensors checkpoints.

    python3 nanogpt_ckpt.py to-cdl out/ckpt.pt gpt.safetensors [--meta META]
    python3 nanogpt_ckpt.py to-nanogpt runs/x/best.safetensors out/ckpt.pt [--dataset NAME]

to-cdl: nanoGPT's torch.save checkpoint ({'model', 'model_args', ...}, or a
bare state_dict) becomes a safetensors file that cdl-train --init,
cdl-eval and cdl-generate take without --model:
  - the '_orig_mod.' (torch.compile) and 'module.' (DDP) prefixes go;
  - the tied lm_head.weight is written once, as transformer.wte.weight;
  - the causal masks of PyTorch < 2.0 (transformer.h.N.attn.bias) go;
  - model_args become cdl's metadata (the model, its block and vocabulary),
    and the itos table of the corpus' meta.pkl (--meta, else nanoGPT's
    data/DATASET/meta.pkl of the checkpoint's config, as sample.py finds
    it) goes with them, so cdl-generate reads and writes the corpus' text,
    and so does the corpus' directory, where cdl-eval finds val.bin.
    Without it a character-level model's ids are not bytes: cdl-generate
    then takes --prompt-tokens and prints ids.

to-nanogpt: a cdl checkpoint becomes the ckpt.pt that nanoGPT's sample.py
and train.py (init_from='resume') read: 'model' (both names of the tied
weight, the causal masks when this PyTorch has no
scaled_dot_product_attention, as nanoGPT's model then registers them),
'model_args', 'iter_num' (cdl's optimizer steps), 'best_val_loss',
'optimizer' (the AdamW moments in nanoGPT's two parameter groups), and
'config' with 'dataset' (--dataset, else the name of the run's data
directory) for sample.py's meta.pkl.

Needs torch and safetensors (Debian: python3-torch, python3-safetensors).
tests/e2e/nanogpt-ckpt.sh runs both directions against a nanoGPT model.
"""
import argparse
import json
import os
import pickle
import re
import sys

import torch
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import load_file, save_file

MASK = re.compile(r"^transformer\.h\.\d+\.attn\.bias$")  # the causal-mask buffer


def fail(msg):
    sys.exit(f"nanogpt_ckpt.py: {msg}")


def escape(s):
    """cdl's "itos" metadata line: '\\' as two, a line break as '\\n'."""
    return s.replace("\\", "\\\\").replace("\n", "\\n")


def to_cdl(args):
    ck = torch.load(args.src, map_location="cpu")
    if not isinstance(ck, dict):
        fail(f"{args.src}: not a checkpoint dict or state_dict")
    sd = ck.get("model", ck)
    out = {}
    for k, v in sd.items():
        for prefix in ("_orig_mod.", "module."):
            if k.startswith(prefix):
                k = k[len(prefix):]
        if not torch.is_tensor(v):
            fail(f"{args.src}: '{k}' is not a tensor: is this nanoGPT's ckpt.pt?")
        if MASK.match(k):
            continue
        out[k] = v
    wte = out.get("transformer.wte.weight")
    head = out.pop("lm_head.weight", None)
    if wte is None:
        fail(f"{args.src} has no transformer.wte.weight: not a nanoGPT GPT")
    if head is not None and not torch.equal(head, wte):
        fail(f"{args.src}: lm_head.weight differs from transformer.wte.weight; "
             "cdl's gpt ties them as nanoGPT does")
    out = {k: v.float().contiguous() for k, v in out.items()}

    vocab, n_embd = wte.shape
    block = out["transformer.wpe.weight"].shape[0]
    n_layer = len({k.split(".")[2] for k in out if k.startswith("transformer.h.")})
    margs = ck.get("model_args", {}) if "model" in ck else {}
    n_head = margs.get("n_head")
    if n_head is None:
        if args.n_head is None:
            fail(f"{args.src} has no model_args (a bare state_dict): give --n-head")
        n_head = args.n_head
    bias = "transformer.ln_f.bias" in out
    meta = {"model": f"gpt:n_layer={n_layer},n_head={n_head},n_embd={n_embd},"
                     f"bias={'true' if bias else 'false'}",
            "input_shape": f"{block},1,1", "block_size": str(block),
            "vocab_size": str(vocab), "classes": str(vocab), "tokens": "uint16"}
    meta_pkl = args.meta
    if meta_pkl is None and isinstance(ck.get("config"), dict) and "dataset" in ck["config"]:
        guess = os.path.join("data", ck["config"]["dataset"], "meta.pkl")
        meta_pkl = guess if os.path.exists(guess) else None
    if meta_pkl:
        with open(meta_pkl, "rb") as f:
            m = pickle.load(f)
        itos = m.get("itos")
        if m.get("vocab_size") != vocab or not isinstance(itos, dict) or \
                sorted(itos) != list(range(vocab)):
            fail(f"{meta_pkl}: its vocab_size {m.get('vocab_size')} and itos do not "
                 f"describe the model's vocabulary of {vocab}")
        meta["itos"] = "\n".join(escape(itos[i]) for i in range(vocab))
    # The corpus beside meta.pkl: cdl-eval then needs no --dataset.
    data_dir = os.path.dirname(os.path.abspath(meta_pkl)) if meta_pkl else None
    if data_dir and os.path.exists(os.path.join(data_dir, "val.bin")):
        meta.update(dataset="tokens", data_dir=data_dir)
    save_file(out, args.dst, metadata=meta)
    print(f"{args.dst}: {meta['model']}, block {block}, vocabulary {vocab}"
          + (f", itos from {meta_pkl}" if meta_pkl else ", no itos (cdl-generate: "
             "--prompt-tokens; give --meta for text)"))


def to_nanogpt(args):
    sd = load_file(args.src)
    with safe_open(args.src, "pt") as f:
        meta = f.metadata() or {}
    weights = {k: v for k, v in sd.items() if not k.startswith("optimizer.")}
    wte = weights.get("transformer.wte.weight", weights.get("lm_head.weight"))
    if wte is None:
        fail(f"{args.src} has no transformer.wte.weight: not a GPT")
    weights["transformer.wte.weight"] = wte
    weights["lm_head.weight"] = wte
    vocab, n_embd = wte.shape
    block = weights["transformer.wpe.weight"].shape[0]
    n_layer = len({k.split(".")[2] for k in weights if k.startswith("transformer.h.")})
    keys = dict(kv.split("=", 1) for kv in meta.get("model", "gpt:").partition(":")[2].split(",")
                if "=" in kv)
    n_head = int(keys.get("n_head", args.n_head or 4))   # cdl's default: 4
    bias = "transformer.ln_f.bias" in weights
    model_args = dict(n_layer=n_layer, n_head=n_head, n_embd=n_embd, block_size=block,
                      bias=bias, vocab_size=vocab, dropout=float(keys.get("dropout", 0.0)))
    # nanoGPT's model registers the masks only without flash attention.
    if not hasattr(F, "scaled_dot_product_attention"):
        mask = torch.tril(torch.ones(block, block)).view(1, 1, block, block)
        for i in range(n_layer):
            weights[f"transformer.h.{i}.attn.bias"] = mask

    # nanoGPT's named_parameters() order (the tied weight once, as wte) and
    # its configure_optimizers groups: >= 2 dimensions decayed, the rest not.
    names = [k for k in weights if k != "lm_head.weight" and not MASK.match(k)]
    order = ["transformer.wte.weight", "transformer.wpe.weight"]
    for i in range(n_layer):
        for part in ("ln_1", "attn.c_attn", "attn.c_proj", "ln_2", "mlp.c_fc", "mlp.c_proj"):
            order += [f"transformer.h.{i}.{part}.{w}" for w in ("weight", "bias")]
    order += ["transformer.ln_f.weight", "transformer.ln_f.bias"]
    order = [n for n in order if n in names]
    if sorted(order) != sorted(names):
        fail(f"{args.src}: tensors {sorted(set(names) - set(order))} are not nanoGPT's GPT")
    cfg = json.loads(meta.get("config", "{}") or "{}")
    params = {n: torch.nn.Parameter(weights[n].clone()) for n in order}
    wd = float(cfg.get("weight_decay", 0.1))
    opt = torch.optim.AdamW(
        [{"params": [params[n] for n in order if params[n].dim() >= 2], "weight_decay": wd},
         {"params": [params[n] for n in order if params[n].dim() < 2], "weight_decay": 0.0}],
        lr=float(cfg.get("lr", 6e-4)),
        betas=(float(cfg.get("beta1", 0.9)), float(cfg.get("beta2", 0.95))),
        eps=float(cfg.get("eps", 1e-8)))
    steps = int(meta.get("optimizer_steps", meta.get("step", 0)) or 0)
    have_moments = all(f"optimizer.exp_avg.{n}" in sd for n in order)
    if have_moments and meta.get("optimizer") in ("adam", "adamw"):
        for n in order:
            opt.state[params[n]] = {"step": torch.tensor(float(steps)),
                                    "exp_avg": sd[f"optimizer.exp_avg.{n}"].clone(),
                                    "exp_avg_sq": sd[f"optimizer.exp_avg_sq.{n}"].clone()}
    dataset = args.dataset or os.path.basename(os.path.normpath(
        meta.get("data_dir", "") or cfg.get("data_dir", "") or "cdl"))
    best = meta.get("best_val_loss")
    ckpt = {"model": weights, "optimizer": opt.state_dict(), "model_args": model_args,
            "iter_num": steps, "best_val_loss": float(best) if best else 1e9,
            "config": {"dataset": dataset}}
    torch.save(ckpt, args.dst)
    print(f"{args.dst}: model_args {model_args}, iter_num {steps}, dataset '{dataset}'"
          + ("" if opt.state else " (no AdamW state in the file: the optimizer starts afresh)"))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("to-cdl", help="nanoGPT's ckpt.pt -> safetensors for cdl")
    a.add_argument("src")
    a.add_argument("dst")
    a.add_argument("--meta", help="the corpus' meta.pkl (its itos table) "
                                  "[data/DATASET/meta.pkl of the checkpoint's config]")
    a.add_argument("--n-head", type=int, help="for a bare state_dict without model_args")
    b = sub.add_parser("to-nanogpt", help="cdl's safetensors -> nanoGPT's ckpt.pt")
    b.add_argument("src")
    b.add_argument("dst")
    b.add_argument("--dataset", help="config['dataset'] for sample.py's data/DATASET/meta.pkl "
                                     "[the run's data directory's name]")
    b.add_argument("--n-head", type=int, help="when the file's metadata does not say [4]")
    args = p.parse_args()
    (to_cdl if args.cmd == "to-cdl" else to_nanogpt)(args)


if __name__ == "__main__":
    main()
