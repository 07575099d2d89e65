"""PyTorch's view of a LeNet checkpoint on Fashion-MNIST's test set, checked
against cdl-eval's JSON and cdl-predict's CSV of the same file.
Usage: torch_eval.py CKPT DATA_DIR EVAL_JSON PREDICT_CSV
       torch_eval.py --write PATH SRC   (SRC's weights, moved a little, saved by torch)"""
import csv
import json
import os
import sys

import numpy as np
import safetensors.torch
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures"))
from torch_ref import LeNet  # noqa: E402
from torch_lenet import idx, model_tensors  # noqa: E402  (this folder)


def main():
    if sys.argv[1] == "--write":
        torch.manual_seed(7)
        sd = model_tensors(sys.argv[3])
        safetensors.torch.save_file({k: v + 0.01 * torch.randn_like(v) for k, v in sd.items()},
                                    sys.argv[2])
        return 0
    ckpt, data, ev, pred = sys.argv[1:5]
    model = LeNet(1, 2, 10)
    model.load_state_dict(model_tensors(ckpt))  # strict
    x = idx(f"{data}/t10k-images-idx3-ubyte.gz", 16).reshape(-1, 1, 28, 28)
    y = torch.from_numpy(idx(f"{data}/t10k-labels-idx1-ubyte.gz", 8).astype(np.int64))
    x = (torch.from_numpy(x.astype(np.float32)) / 255.0 - 0.2860) / 0.3530
    model.eval()
    with torch.no_grad():
        logits = model(x)
    loss = F.cross_entropy(logits, y).item()
    top1 = logits.argmax(1)
    acc = (top1 == y).float().mean().item()
    top5 = (logits.topk(5, 1).indices == y[:, None]).any(1).float().mean().item()
    prob = F.softmax(logits, 1)
    with open(ev) as f:
        e = json.load(f)
    bad = []
    if e["samples"] != len(y):
        bad.append(f"samples {e['samples']} != {len(y)}")
    if abs(e["loss"] - loss) > 1e-4 * max(1.0, loss):
        bad.append(f"loss {e['loss']} != {loss}")
    # Same weights, same data: only float rounding differs (a few argmax ties).
    if abs(e["accuracy"] - acc) > 0.002 or abs(e["top5"] - top5) > 0.002:
        bad.append(f"accuracy/top5 {e['accuracy']}/{e['top5']} != {acc}/{top5}")
    conf = np.array(e["confusion"])
    if conf.sum() != len(y) or abs(np.trace(conf) / len(y) - e["accuracy"]) > 1e-6:
        bad.append("confusion matrix does not add up")
    with open(pred) as f:
        rows = list(csv.DictReader(f))
    same = sum(int(r["class1"]) == int(top1[i]) for i, r in enumerate(rows))
    pdiff = max(abs(float(r["p1"]) - prob[i, int(r["class1"])].item()) for i, r in enumerate(rows))
    labels = all(int(r["label"]) == int(y[i]) for i, r in enumerate(rows))
    if len(rows) != len(y) or same < 0.998 * len(y) or pdiff > 1e-4 or not labels:
        bad.append(f"predictions: {len(rows)} rows, {same} same top-1, max p diff {pdiff}")
    print(f"torch: loss {loss:.6f} acc {acc:.4f} top5 {top5:.4f}; cdl-eval: loss {e['loss']:.6f} "
          f"acc {e['accuracy']:.4f} top5 {e['top5']:.4f}; cdl-predict: {same}/{len(y)} same "
          f"top-1, max p diff {pdiff:.2g}")
    for b in bad:
        print("mismatch:", b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
