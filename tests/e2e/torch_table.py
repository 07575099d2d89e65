"""PyTorch's view of an mlp checkpoint trained on a CSV table, on the rows
of another table: the columns picked by the names the checkpoint stores
(feature_columns), normalised with its norm_mean / norm_std, checked
against cdl-predict's CSV of the same rows (every top-k class and
probability).
Usage: torch_table.py CKPT ROWS_CSV PREDICT_CSV"""
import csv
import json
import struct
import sys

import safetensors.torch
import torch
import torch.nn.functional as F


def main():
    ckpt, rows_csv, pred_csv = sys.argv[1:4]
    with open(ckpt, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        meta = json.loads(f.read(n))["__metadata__"]
    cols = meta["feature_columns"].split("\n")
    mean = torch.tensor([float(v) for v in meta["norm_mean"].split(",")])
    std = torch.tensor([float(v) for v in meta["norm_std"].split(",")])
    names = meta["class_names"].split("\n")
    sd = safetensors.torch.load_file(ckpt)
    # A spreadsheet's export: byte order mark, CRLF, quoted fields.
    with open(rows_csv, encoding="utf-8-sig", newline="") as f:
        rows = list(csv.DictReader(f))
    x = torch.tensor([[float(r[c]) for c in cols] for r in rows], dtype=torch.float32)
    x = (x - mean) / std
    h = F.relu(F.linear(x, sd["fc1.weight"], sd["fc1.bias"]))
    h = F.relu(F.linear(h, sd["fc2.weight"], sd["fc2.bias"]))
    p = F.softmax(F.linear(h, sd["fc3.weight"], sd["fc3.bias"]), 1)
    with open(pred_csv, newline="") as f:
        pred = list(csv.reader(f))
    head, body = pred[0], pred[1:]
    bad = []
    if len(body) != len(rows):
        bad.append(f"{len(body)} lines for {len(rows)} rows")
    k = sum(1 for c in head if c.startswith("class"))
    first = head.index("class1")
    for i, line in enumerate(body):
        if int(line[0]) != i:
            bad.append(f"line {i + 1}: index {line[0]}, not {i} (row order)")
        for j in range(k):
            cls, prob = line[first + 2 * j], float(line[first + 2 * j + 1])
            want = p[i, names.index(cls)].item()
            if abs(prob - want) > 2e-5:
                bad.append(f"row {i}: p({cls}) {prob} != torch's {want}")
            if j == 0 and p[i].max().item() - want > 2e-5:
                bad.append(f"row {i}: top class {cls}, torch's is {names[p[i].argmax()]}")
    print(f"torch_table: {len(rows)} rows, top-{k} checked: {'ok' if not bad else bad[:5]}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
