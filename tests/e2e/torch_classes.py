"""A small MLP trained in PyTorch on a CSV table whose labels are text
("dog", "cat", "emu"), numbered as sklearn's LabelEncoder numbers them
(sorted), saved as PyTorch users save it (save_file of the state dict).
Usage:
  torch_classes.py make DIR   tables, weights (w.safetensors), classes.txt,
                              PyTorch's test accuracy (acc) and probabilities
  torch_classes.py check DIR PREDICT_CSV   cdl-predict's top classes and
                              probabilities on DIR/test.csv are PyTorch's"""
import csv
import random
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import save_file

KINDS = ["dog", "cat", "emu"]   # the order of appearance; the classes are sorted


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 16)
        self.fc2 = nn.Linear(16, 3)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


def read(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    x = torch.tensor([[float(r[c]) for c in "abcd"] for r in rows], dtype=torch.float32)
    return x, [r["label"] for r in rows]


def make(d):
    rnd = random.Random(11)
    for name, n in (("train", 240), ("test", 90)):
        with open(f"{d}/{name}.csv", "w") as f:
            f.write("a,b,c,d,label\n")
            for i in range(n):
                k = i % 3
                # Overlapping clouds: PyTorch's accuracy is not 100%.
                v = [rnd.gauss(1.0 * k * (j % 2 * 2 - 1), 1.0) for j in range(4)]
                f.write("%.4f,%.4f,%.4f,%.4f,%s\n" % (*v, KINDS[k]))
    x, y = read(f"{d}/train.csv")
    classes = sorted(set(y))   # LabelEncoder().fit(y).classes_
    t = torch.tensor([classes.index(v) for v in y])
    torch.manual_seed(0)
    net = Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    for _ in range(200):
        opt.zero_grad()
        F.cross_entropy(net(x), t).backward()
        opt.step()
    save_file(net.state_dict(), f"{d}/w.safetensors")
    with open(f"{d}/classes.txt", "w") as f:
        f.write("\n".join(classes) + "\n")
    x, y = read(f"{d}/test.csv")
    with torch.no_grad():
        pred = net(x).argmax(1)
    acc = sum(int(p) == classes.index(v) for p, v in zip(pred, y)) / len(y)
    assert 0.5 < acc < 1, acc
    with open(f"{d}/acc", "w") as f:
        f.write("%.6f\n" % acc)
    print(f"torch_classes: PyTorch's test accuracy {acc:.6f}, classes {classes}")


def check(d, pred_csv):
    from safetensors.torch import load_file
    net = Net()
    net.load_state_dict(load_file(f"{d}/w.safetensors"))
    classes = open(f"{d}/classes.txt").read().split()
    x, _ = read(f"{d}/test.csv")
    with torch.no_grad():
        p = F.softmax(net(x), 1)
    with open(pred_csv, newline="") as f:
        pred = list(csv.DictReader(f))
    bad = [] if len(pred) == len(x) else [f"{len(pred)} lines for {len(x)} rows"]
    for i, line in enumerate(pred):
        for j in (1, 2, 3):
            cls = line[f"class{j}"]
            if cls not in classes:
                bad.append(f"row {i}: class{j} '{cls}' is not a class name")
                continue
            want = p[i, classes.index(cls)].item()
            if abs(float(line[f"p{j}"]) - want) > 2e-5:
                bad.append(f"row {i}: p({cls}) {line[f'p{j}']} != torch's {want}")
        if line["class1"] != classes[int(p[i].argmax())]:
            bad.append(f"row {i}: top class {line['class1']}, torch's {classes[int(p[i].argmax())]}")
    print(f"torch_classes: {len(pred)} rows checked: {'ok' if not bad else bad[:5]}")
    return 1 if bad else 0


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2])
    else:
        sys.exit(check(sys.argv[2], sys.argv[3]))
