"""Loads a cdl LeNet checkpoint into torch.nn and evaluates Fashion-MNIST's
test set. Usage: torch_lenet.py CKPT DATA_DIR CDL_ACC CDL_LOSS"""
import gzip
import os
import sys

import numpy as np
import safetensors.torch
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures"))
from torch_ref import LeNet  # noqa: E402  (the one reference model of the tests)


def idx(path, offset):
    with gzip.open(path, "rb") as f:
        return np.frombuffer(f.read(), dtype=np.uint8, offset=offset)


def model_tensors(path):
    """The model's tensors of a safetensors file: a cdl checkpoint also
    holds the optimizer's state as optimizer.* tensors (docs/checkpoints.md)."""
    sd = safetensors.torch.load_file(path)
    return {k: v for k, v in sd.items() if not k.startswith("optimizer.")}


def main():
    ckpt, data, cdl_acc, cdl_loss = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
    model = LeNet(1, 2, 10)   # fashion-mnist: 28x28, padded
    model.load_state_dict(model_tensors(ckpt))  # strict: every key, no extras
    x = idx(f"{data}/t10k-images-idx3-ubyte.gz", 16).reshape(-1, 1, 28, 28)
    y = torch.from_numpy(idx(f"{data}/t10k-labels-idx1-ubyte.gz", 8).astype(np.int64))
    x = (torch.from_numpy(x.astype(np.float32)) / 255.0 - 0.2860) / 0.3530
    model.eval()
    with torch.no_grad():
        logits = model(x)
    loss = F.cross_entropy(logits, y).item()
    acc = (logits.argmax(1) == y).float().mean().item()
    print(f"torch: acc {acc:.6f} loss {loss:.6f}; cdl: acc {cdl_acc:.6f} loss {cdl_loss:.6f}")
    # Same weights, same data: only float rounding differs (a few argmax ties).
    ok = abs(acc - cdl_acc) <= 0.002 and abs(loss - cdl_loss) <= 1e-3 * max(1.0, cdl_loss)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
