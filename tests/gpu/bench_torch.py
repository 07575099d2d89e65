"""PyTorch eager reference for tests/gpu/bench_lenet.c: the same seed CNN
(LeNet for 3x32x32), loss, optimizer and batch, one fixed random batch on the
GPU, PyTorch's default TF32 settings (convolutions yes, matmuls no) like cdl.

Usage: bench_torch.py [--batch N] [--seconds S] [--benchmark] [--device cuda|cpu]
--benchmark sets torch.backends.cudnn.benchmark (timing-based algorithm
choice). The last line is "images_per_sec X"; exit 1 without a GPU (--device
cpu only checks the script itself)."""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures"))
from torch_ref import LeNet  # noqa: E402  (the one reference model of the tests)
from bench_timing import train_speed  # noqa: E402  (beside this file)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--benchmark", action="store_true")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    a = ap.parse_args()
    if a.device == "cuda" and not torch.cuda.is_available():
        print("bench_torch: no CUDA GPU visible to PyTorch", file=sys.stderr)
        sys.exit(1)
    torch.backends.cudnn.benchmark = a.benchmark
    dev = torch.device(a.device)
    sync = torch.cuda.synchronize if a.device == "cuda" else (lambda: None)
    torch.manual_seed(0)
    model = LeNet(3, 0, 10).to(dev)   # the seed CNN: 3x32x32
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    x = torch.rand(a.batch, 3, 32, 32, device=dev) * 2 - 1
    y = torch.arange(a.batch, device=dev) * 7919 % 10

    ips, steps, dt, loss0, loss = train_speed(model, opt, x, y, a.seconds, sync, warmup=20)
    mode = "eager cudnn.benchmark" if a.benchmark else "eager"
    print(f"torch {torch.__version__} {mode} batch {a.batch}: {ips:.0f} images/s "
          f"({steps} steps in {dt:.2f} s), loss {loss0:.4f} -> {loss:.4f}")
    print(f"images_per_sec {ips:.1f}")


if __name__ == "__main__":
    main()
