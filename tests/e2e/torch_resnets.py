"""torchvision's ResNets against cdl's built-ins of the same name.

  torch_resnets.py write DIR ARCH STEM SIZE
      DIR/weights.safetensors: torchvision.models.ARCH(num_classes=10) as
      PyTorch saves it (STEM cifar: conv1 3x3 stride 1 and no max-pool, as
      cdl's CIFAR stem), with batch-norm statistics and affine parameters
      drawn away from their initial 0/1 so that evaluation mode tests them;
      DIR/x_{train,test}.npy, y_{train,test}.npy: 4 pictures 3xSIZExSIZE,
      standardised per channel (population statistics, as cdl computes its
      normalisation: cdl's then changes them by float rounding only);
      DIR/expect.npy: PyTorch's class probabilities in evaluation mode.
  torch_resnets.py check DIR PREDICT.jsonl
      cdl-predict's probabilities (--top-k 10 --format jsonl) against
      DIR/expect.npy.
"""
import json
import sys

import numpy as np
import safetensors.torch
import torch
import torchvision

N, CLASSES = 4, 10
TOL = 2e-5   # probabilities: float32 sums over ~50 layers in another order (seen: 7e-7)


def write(out, arch, stem, size):
    torch.manual_seed(0)
    model = getattr(torchvision.models, arch)(num_classes=CLASSES)
    if stem == "cifar":
        model.conv1 = torch.nn.Conv2d(3, 64, 3, 1, 1, bias=False)
        model.maxpool = torch.nn.Identity()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.normal_(0.0, 0.2)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.uniform_(0.5, 1.0)
                m.bias.normal_(0.0, 0.1)
                m.num_batches_tracked.fill_(3)
    model.eval()
    x = np.random.default_rng(1).standard_normal((N, 3, size, size))
    mean = x.mean(axis=(0, 2, 3), keepdims=True)
    std = np.sqrt(((x - mean) ** 2).mean(axis=(0, 2, 3), keepdims=True))
    x = ((x - mean) / std).astype(np.float32)
    with torch.no_grad():
        # Logits spread by about 2 (a standard deviation): probabilities that
        # tell a wiring error, none of them rounded to 0 or 1.
        scale = 2.0 / model(torch.from_numpy(x)).std().item()
        model.fc.weight.mul_(scale)
        model.fc.bias.mul_(scale)
    y = np.array([0, 3, 6, 9], dtype=np.int64)   # 9: the data has 10 classes
    for split in ("train", "test"):
        np.save(f"{out}/x_{split}.npy", x)
        np.save(f"{out}/y_{split}.npy", y)
    safetensors.torch.save_file({k: v.contiguous() for k, v in model.state_dict().items()},
                                f"{out}/weights.safetensors")
    with torch.no_grad():
        prob = torch.softmax(model(torch.from_numpy(x)).double(), 1).numpy()
    np.save(f"{out}/expect.npy", prob)
    print(f"{arch} ({stem} stem, {size}x{size}): top probabilities "
          f"{', '.join(f'{p:.3f}' for p in prob.max(1))}")


def check(out, pred):
    expect = np.load(f"{out}/expect.npy")
    got = np.zeros_like(expect)
    with open(pred) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    if len(rows) != N:
        print(f"mismatch: {len(rows)} predictions, expected {N}")
        return 1
    for i, r in enumerate(rows):
        for t in r["top"]:
            got[i, int(t["class"])] = t["p"]
    diff = np.abs(got - expect).max()
    print(f"cdl-predict against torchvision: max probability difference {diff:.2g} "
          f"(allowed {TOL:g})")
    return 0 if diff <= TOL else 1


def main():
    if sys.argv[1] == "write":
        write(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
        return 0
    return check(sys.argv[2], sys.argv[3])


if __name__ == "__main__":
    sys.exit(main())
