"""PyTorch eager reference for tests/gpu/bench_lenet.c: the same seed CNN
(LeNet for 3x32x32), loss, optimizer and batch, one fixed random batch on the
GPU, PyTorch's default TF32 settings (convolutions yes, matmuls no) like cdl.

Usage: bench_torch.py [--batch N] [--seconds S] [--benchmark] [--device cuda|cpu]
--benchmark sets torch.backends.cudnn.benchmark (timing-based algorithm
choice). The last line is "images_per_sec X"; exit 1 without a GPU (--device
cpu only checks the script itself)."""
import argparse
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class LeNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 6, 5)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


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
    model = LeNet().to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    x = torch.rand(a.batch, 3, 32, 32, device=dev) * 2 - 1
    y = torch.arange(a.batch, device=dev) * 7919 % 10

    def step():
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    for _ in range(20):
        loss0 = step()
    sync()
    steps, t0 = 0, time.perf_counter()
    t = t0
    while t - t0 < a.seconds:
        for _ in range(10):
            loss = step()
        steps += 10
        sync()
        t = time.perf_counter()
    ips = steps * a.batch / (t - t0)
    mode = "eager cudnn.benchmark" if a.benchmark else "eager"
    print(f"torch {torch.__version__} {mode} batch {a.batch}: {ips:.0f} images/s "
          f"({steps} steps in {t - t0:.2f} s), loss {loss0.item():.4f} -> {loss.item():.4f}")
    print(f"images_per_sec {ips:.1f}")


if __name__ == "__main__":
    main()
