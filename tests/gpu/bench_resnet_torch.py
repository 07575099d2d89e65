"""PyTorch reference for tests/gpu/run.sh step 9: cdl's resnet18 (the CIFAR
variant: torchvision's resnet18 with a 3x3 stride-1 stem and no max-pool)
training on 3x32x32 batches, as a user would run it fast in eager mode:
channels_last, cudnn.benchmark, TF32 for convolutions and matmuls. The same
loss and optimizer as cdl-train's defaults (cross-entropy; SGD, momentum
0.9, weight decay 5e-4); one fixed random batch on the GPU, so the data
path is not measured on either side.

Usage: bench_resnet_torch.py [--batch N] [--seconds S] [--layout nchw|nhwc]
                             [--device cuda|cpu]
The last line is "images_per_sec X"; exit 1 without a GPU (--device cpu only
checks the script itself)."""
import argparse
import sys

import torch
import torchvision

from bench_timing import train_speed  # beside this file


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--layout", default="nhwc", choices=["nchw", "nhwc"])
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    a = ap.parse_args()
    if a.device == "cuda" and not torch.cuda.is_available():
        print("bench_resnet_torch: no CUDA GPU visible to PyTorch", file=sys.stderr)
        sys.exit(1)
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cuda.matmul.allow_tf32 = True
    dev = torch.device(a.device)
    fmt = torch.channels_last if a.layout == "nhwc" else torch.contiguous_format
    sync = torch.cuda.synchronize if a.device == "cuda" else (lambda: None)
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10)
    model.conv1 = torch.nn.Conv2d(3, 64, 3, 1, 1, bias=False)
    model.maxpool = torch.nn.Identity()
    model = model.to(dev, memory_format=fmt).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    x = (torch.rand(a.batch, 3, 32, 32, device=dev) * 2 - 1).contiguous(memory_format=fmt)
    y = torch.arange(a.batch, device=dev) * 7919 % 10

    # cudnn.benchmark's search happens in the warm-up.
    ips, steps, dt, loss0, loss = train_speed(model, opt, x, y, a.seconds, sync, warmup=15)
    print(f"torch {torch.__version__} resnet18 eager {a.layout} TF32 cudnn.benchmark batch {a.batch}: "
          f"{ips:.0f} images/s ({steps} steps in {dt:.2f} s), "
          f"loss {loss0:.4f} -> {loss:.4f}")
    print(f"images_per_sec {ips:.1f}")


if __name__ == "__main__":
    main()
