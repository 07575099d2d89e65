"""Runs every line of the documentation that loads a checkpoint into a
PyTorch model (`model.load_state_dict(...)` in README.md and docs/*.md) on
a real cdl-train checkpoint, so a line a reader copies works: a training
checkpoint also holds optimizer.* tensors, which a strict load refuses.
The line's quoted path becomes CKPT; `model` is the matching LeNet, `sd`
the file's tensors (the name the docs give them).
Usage: doc_load_lines.py SRCDIR CKPT"""
import glob
import os
import re
import sys

import safetensors.torch
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures"))
from torch_ref import LeNet  # noqa: E402


def doc_lines(srcdir):
    """(file:line, code) of each model.load_state_dict call in the docs:
    an indented or fenced line, or the inline code span holding it."""
    for path in [os.path.join(srcdir, "README.md")] + sorted(glob.glob(f"{srcdir}/docs/*.md")):
        with open(path, encoding="utf-8") as f:
            for no, line in enumerate(f, 1):
                if "model.load_state_dict(" not in line:
                    continue
                spans = [s for s in re.findall(r"`([^`]*)`", line) if "model.load_state_dict(" in s]
                code = spans[0] if spans else line.strip()
                yield f"{os.path.relpath(path, srcdir)}:{no}", code


def main():
    srcdir, ckpt = sys.argv[1], sys.argv[2]
    found = bad = 0
    for where, code in doc_lines(srcdir):
        found += 1
        code = re.sub(r'"[^"]*\.safetensors"', repr(ckpt), code)
        model = LeNet(1, 2, 10)
        env = {"model": model, "safetensors": safetensors, "torch": torch,
               "load_file": safetensors.torch.load_file,
               "sd": safetensors.torch.load_file(ckpt)}
        try:
            exec(code, env)
            ok = torch.equal(model.fc3.weight.detach(), env["sd"]["fc3.weight"])
        except Exception as e:  # noqa: BLE001  (any failure is the finding)
            print(f"{where}: {code}\n  fails on a cdl-train checkpoint: {' '.join(str(e).split())[:300]}")
            bad += 1
            continue
        if not ok:
            print(f"{where}: {code}\n  did not load the checkpoint's weights")
            bad += 1
    if found < 3:
        print(f"only {found} load_state_dict lines found in the docs: the search is broken")
        return 1
    print(f"{found} documented load_state_dict lines, {bad} failing")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
