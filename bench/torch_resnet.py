#!/usr/bin/python3
"""ResNet-20 on Fashion-MNIST in PyTorch with cdl-train's recipe, the
counterpart of `cdl-train --model resnet20` in bench/run_resnet.sh.

The network is cdl's built-in resnet20 (tests/fixtures/make_resnet_fixture.py:
3x3 basic blocks, 16/32/64 channels, projection shortcuts); the recipe is
cdl-train's: SGD momentum 0.9, weight decay 5e-4 on every parameter, cosine
learning rate per step from --lr to 0, batch --batch, inputs (x/255 - 0.2860)
/ 0.3530, --augment as cdl's (crop: random 28x28 crop of the image padded by 4
zero pixels; flip: horizontal flip with p = 0.5), the 10,000 test images for
accuracy. Prints one
line per epoch and "RESULT impl=torch-VERSION acc=... epoch_s=...".
"""
import argparse
import gzip
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "fixtures"))
from make_resnet_fixture import ResNet20  # noqa: E402

p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
p.add_argument("--epochs", type=int, default=30)
p.add_argument("--batch", type=int, default=128)
p.add_argument("--lr", type=float, default=0.1)
p.add_argument("--threads", type=int, default=2)
p.add_argument("--max-steps", type=int, default=0, help="steps per epoch (0 = all)")
p.add_argument("--seed", type=int, default=1)
p.add_argument("--augment", default="none", choices=["none", "crop", "flip", "crop+flip"])
a = p.parse_args()


def idx(name, offset):
    with gzip.open(os.path.join(a.data, name), "rb") as f:
        return np.frombuffer(f.read(), dtype=np.uint8, offset=offset)


def images(name):
    x = idx(name, 16).reshape(-1, 1, 28, 28).astype(np.float32)
    return torch.from_numpy((x / 255.0 - 0.2860) / 0.3530)


torch.set_num_threads(a.threads)
torch.manual_seed(a.seed)
xtr, ytr = images("train-images-idx3-ubyte.gz"), torch.from_numpy(
    idx("train-labels-idx1-ubyte.gz", 8).astype(np.int64))
xte, yte = images("t10k-images-idx3-ubyte.gz"), torch.from_numpy(
    idx("t10k-labels-idx1-ubyte.gz", 8).astype(np.int64))
PAD = 4
ZERO = (0.0 - 0.2860) / 0.3530   # a zero pixel, normalised


def augment(x):
    """x (n, 1, 28, 28) normalised -> cropped and/or flipped copy."""
    n, h, w = x.shape[0], x.shape[2], x.shape[3]
    if "crop" in a.augment:
        padded = F.pad(x, (PAD, PAD, PAD, PAD), value=ZERO)
        dy = torch.randint(0, 2 * PAD + 1, (n,)).tolist()
        dx = torch.randint(0, 2 * PAD + 1, (n,)).tolist()
        x = torch.stack([padded[k, :, dy[k]:dy[k] + h, dx[k]:dx[k] + w] for k in range(n)])
    if "flip" in a.augment:
        flip = torch.rand(n) < 0.5
        x = torch.where(flip[:, None, None, None], x.flip(3), x)
    return x


model = ResNet20(1, 10)
opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9, weight_decay=5e-4)
steps = len(xtr) // a.batch if not a.max_steps else min(a.max_steps, len(xtr) // a.batch)
total, step, times, acc = a.epochs * steps, 0, [], 0.0
for epoch in range(a.epochs):
    model.train()
    perm = torch.randperm(len(xtr))
    t0 = time.perf_counter()
    for s in range(steps):
        for g in opt.param_groups:
            g["lr"] = a.lr * (1 + math.cos(math.pi * step / total)) / 2
        i = perm[s * a.batch:(s + 1) * a.batch]
        opt.zero_grad(set_to_none=True)
        xb = xtr[i] if a.augment == "none" else augment(xtr[i])
        F.cross_entropy(model(xb), ytr[i]).backward()
        opt.step()
        step += 1
    times.append(time.perf_counter() - t0)
    model.eval()
    with torch.no_grad():
        correct = sum((model(xte[j:j + 1000]).argmax(1) == yte[j:j + 1000]).sum().item()
                      for j in range(0, len(xte), 1000))
    acc = 100.0 * correct / len(xte)
    print(f"epoch {epoch + 1}/{a.epochs}  test acc {acc:.2f}%  {times[-1]:.1f} s", flush=True)
print(f"RESULT impl=torch-{torch.__version__} acc={acc:.2f} epoch_s={np.median(times):.2f}")
