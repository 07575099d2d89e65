"""PyTorch's DataLoader + torchvision's ImageFolder (PIL) on an image folder:
one shuffled epoch, the transforms matching cdl's (resize the shorter side,
centre crop, grayscale when asked, ToTensor, Normalize). Prints one RESULT
line like bench/bench_readers. Usage:
  torch_loader.py DIR IMAGE_SIZE WORKERS GRAY(0|1) [BATCH]"""
import sys
import time

import torch
from torch.utils.data import DataLoader
from torchvision import datasets, transforms


def main():
    root, size, workers, gray = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
    batch = int(sys.argv[5]) if len(sys.argv) > 5 else 256
    torch.set_num_threads(1)
    t = [transforms.Resize(size), transforms.CenterCrop(size)]
    if gray:
        t.append(transforms.Grayscale(1))
    t += [transforms.ToTensor(), transforms.Normalize([0.5] * (1 if gray else 3),
                                                      [0.25] * (1 if gray else 3))]
    t0 = time.perf_counter()
    ds = datasets.ImageFolder(root, transform=transforms.Compose(t))
    loader = DataLoader(ds, batch_size=batch, shuffle=True, num_workers=workers)
    sink = 0.0
    for x, _ in loader:
        sink += float(x[0, 0, 0, 0])
    dt = time.perf_counter() - t0
    print("RESULT n=%d workers=%d epoch_s=%.3f img_s=%.0f" % (len(ds), workers, dt, len(ds) / dt))


if __name__ == "__main__":
    main()
