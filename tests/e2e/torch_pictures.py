"""Weights a PyTorch user brings to cdl (tests/e2e/torch-pictures.sh).

make DIR: a picture folder DIR/pics/{train,test}/{blue,green,red}/*.png
(RGB; train/ 24x20 and resize/ 27x20, so Resize(16) + CenterCrop(16) both
act, test/ 16x16; DIR/gray: grayscale pictures), a small CNN trained
on it with torchvision's transforms and Normalize(0.5, 0.25), saved with
safetensors as a PyTorch user saves it: DIR/torch.safetensors, and the
same weights as DDP's (module.), torch.compile's (_orig_mod.), in F16,
BF16 and F64, without num_batches_tracked, and as nn.Sequential names them. DIR/ref.json: PyTorch's
class probabilities for every test picture, for the F32 weights and for
the F16 and BF16 ones (each rounded as that file holds it), and for the
resize/ pictures, and for the JPEGs of jpeg/ (160x120, decoded by PIL).

check DIR REF_KEY PRED.jsonl: cdl-predict's probabilities (jsonl, top-k
= all classes) equal PyTorch's within 2e-6 (cdl prints 6 decimals), or
5e-3 for the resized pictures (REF_KEY resize or jpeg).

eval DIR OUT.json: cdl-eval's loss and accuracy on resize/ are PyTorch's.

back CKPT PRED.jsonl: the other way, a cdl-train checkpoint loaded as
docs/pytorch-models.md shows gives cdl-predict's probabilities.
"""
import json
import os
import sys

import numpy as np
import torch
import torch.nn as nn


class Net(nn.Module):
    """The spec tests/e2e/torch-pictures.sh writes, as a torch.nn module."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.fc1 = nn.Linear(8 * 8 * 8, 3)

    def forward(self, x):
        x = nn.functional.max_pool2d(torch.relu(self.bn1(self.conv1(x))), 2)
        return self.fc1(torch.flatten(x, 1))


def transform():
    import torchvision.transforms as T
    return T.Compose([T.Resize(16), T.CenterCrop(16), T.ToTensor(),
                      T.Normalize((0.5, 0.5, 0.5), (0.25, 0.25, 0.25))])


def make(d):
    from PIL import Image
    from safetensors.torch import save_file
    import torchvision.datasets as D
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    # test/ at the model's size (the weights compared exactly), resize/
    # larger and not square, so Resize(16) + CenterCrop(16) both act.
    for split, n, h, w in (("train", 12, 20, 24), ("test", 4, 16, 16), ("resize", 2, 20, 27)):
        for c, name in enumerate(["red", "green", "blue"]):
            os.makedirs(f"{d}/pics/{split}/{name}", exist_ok=True)
            for i in range(n):
                a = rng.integers(0, 200, (h, w, 3), dtype=np.uint8)
                a[..., c] = np.clip(a[..., c].astype(int) + 40, 0, 255).astype(np.uint8)
                Image.fromarray(a).save(f"{d}/pics/{split}/{name}/{i}.png")
    # jpeg/: detailed 160x120 JPEGs, which cdl decodes at a DCT scale
    # (2/8) unless told --jpeg-decode full, PIL whole.
    for c, name in enumerate(["red", "green", "blue"]):
        os.makedirs(f"{d}/pics/jpeg/{name}", exist_ok=True)
        for i in range(2):
            # sharp edges: blocks of 10x10 pixels, where DCT scaling
            # differs most from a full decode + resize
            a = np.kron(rng.integers(0, 2, (12, 16, 3)) * 200, np.ones((10, 10, 1)))
            a = a.astype(np.uint8)
            a[..., c] = np.clip(a[..., c].astype(int) + 40, 0, 255).astype(np.uint8)
            Image.fromarray(a).save(f"{d}/pics/jpeg/{name}/{i}.jpg", quality=90)
    for split in ("train", "test"):   # grayscale pictures (cdl: 1 channel)
        for name in ("a", "b"):
            os.makedirs(f"{d}/gray/{split}/{name}", exist_ok=True)
            for i in range(2):
                Image.fromarray(rng.integers(0, 256, (16, 16), dtype=np.uint8)).save(
                    f"{d}/gray/{split}/{name}/{i}.png")
    train = D.ImageFolder(f"{d}/pics/train", transform())
    m = Net()
    opt = torch.optim.SGD(m.parameters(), lr=0.01)
    for x, y in torch.utils.data.DataLoader(train, batch_size=12, shuffle=True):
        opt.zero_grad()
        nn.functional.cross_entropy(m(x), y).backward()
        opt.step()
    m.eval()
    sd = {k: v.clone() for k, v in m.state_dict().items()}   # not the live tensors
    flt = lambda conv: {k: conv(v) if v.is_floating_point() else v for k, v in sd.items()}
    save_file(sd, f"{d}/torch.safetensors")
    save_file({"module." + k: v for k, v in sd.items()}, f"{d}/ddp.safetensors")
    save_file({"_orig_mod." + k: v for k, v in sd.items()}, f"{d}/compiled.safetensors")
    save_file(flt(lambda v: v.half()), f"{d}/f16.safetensors")
    save_file(flt(lambda v: v.bfloat16()), f"{d}/bf16.safetensors")
    save_file(flt(lambda v: v.double()), f"{d}/f64.safetensors")
    save_file({k: v for k, v in sd.items() if "num_batches" not in k}, f"{d}/nobt.safetensors")
    # The same module written as nn.Sequential(conv, bn, ReLU, MaxPool, Flatten, Linear).
    seq = {"conv1": "0", "bn1": "1", "fc1": "5"}
    save_file({seq[k.split(".")[0]] + k[k.index("."):]: v for k, v in sd.items()},
              f"{d}/seq.safetensors")
    test = D.ImageFolder(f"{d}/pics/test", transform())
    x = torch.stack([test[i][0] for i in range(len(test))])
    ref = {"files": [os.path.relpath(p, d) for p, _ in test.samples]}
    for key, conv in (("f32", lambda v: v), ("f16", lambda v: v.half().float()),
                      ("bf16", lambda v: v.bfloat16().float())):
        m.load_state_dict(flt(conv))
        with torch.no_grad():
            ref[key] = m(x).softmax(1).tolist()
    for key in ("resize", "jpeg"):
        pics = D.ImageFolder(f"{d}/pics/{key}", transform())
        x = torch.stack([pics[i][0] for i in range(len(pics))])
        ref[key + "_files"] = [os.path.relpath(p, d) for p, _ in pics.samples]
        with torch.no_grad():
            ref[key] = m(x).softmax(1).tolist()
    with open(f"{d}/ref.json", "w") as f:
        json.dump(ref, f)


def check(d, key, pred):
    ref = json.load(open(f"{d}/ref.json"))
    lines = [json.loads(l) for l in open(pred)]
    files = ref[key + "_files" if key in ("resize", "jpeg") else "files"]
    if len(lines) != len(files):
        sys.exit(f"{len(lines)} predictions for {len(files)} pictures")
    # PIL resizes in two 8-bit passes, cdl in float: a pixel may differ by
    # one level (a crop a pixel off, as cdl's was, moves them by ~0.08).
    tol = 5e-3 if key in ("resize", "jpeg") else 2e-6
    worst = 0.0
    classes = sorted({f.split("/")[-2] for f in files})   # ImageFolder's classes
    for line, path, p in zip(lines, files, ref[key]):
        if line["file"] != path:
            sys.exit(f"prediction for {line['file']}, expected {path}")
        for t in line["top"]:   # an index, or a name (--classes)
            c = t["class"]
            worst = max(worst, abs(t["p"] - p[int(c) if c.isdigit() else classes.index(c)]))
    if worst > tol:
        sys.exit(f"{key}: cdl-predict's probabilities differ from PyTorch's by {worst}")
    print(f"{key}: cdl-predict = PyTorch within {worst:.1e}")


def evaluate(d, out):
    """cdl-eval's --json loss and accuracy on the resize/ pictures equal
    PyTorch's (loss within 2e-3: resized pixels may differ by a level)."""
    ref = json.load(open(f"{d}/ref.json"))
    files = ref["resize_files"]
    classes = sorted({f.split("/")[-2] for f in files})
    y = [classes.index(f.split("/")[-2]) for f in files]
    p = np.array(ref["resize"])
    loss = float(-np.log(p[np.arange(len(y)), y]).mean())
    acc = float((p.argmax(1) == np.array(y)).mean())
    got = json.load(open(out))
    if abs(got["loss"] - loss) > 2e-3 or abs(got["accuracy"] - acc) > 1e-6:
        sys.exit(f"cdl-eval: loss {got['loss']} accuracy {got['accuracy']}, PyTorch {loss} {acc}")
    print(f"cdl-eval = PyTorch: loss {loss:.6f}, accuracy {acc:.4f}")


def back(ckpt, pred):
    """A cdl-train checkpoint in PyTorch, as docs/pytorch-models.md loads
    it (weights, normalisation, class names): cdl-predict's probabilities
    on the 16x16 test pictures within 2e-6."""
    from PIL import Image
    from safetensors.torch import load_file, safe_open
    import torchvision.transforms as T
    sd = load_file(ckpt)
    model = Net()
    model.load_state_dict({k: v for k, v in sd.items() if not k.startswith("optimizer.")}, strict=True)
    meta = safe_open(ckpt, "pt").metadata()
    mean = [float(v) for v in meta["norm_mean"].split(",")]
    std = [float(v) for v in meta["norm_std"].split(",")]
    names = meta["class_names"].split("\n")
    tf = T.Compose([T.Resize(16), T.CenterCrop(16), T.ToTensor(), T.Normalize(mean, std)])
    model.eval()
    worst = 0.0
    for line in map(json.loads, open(pred)):
        with torch.no_grad():
            p = model(tf(Image.open(line["file"]).convert("RGB")).unsqueeze(0)).softmax(1)[0]
        for t in line["top"]:
            worst = max(worst, abs(p[names.index(t["class"])].item() - t["p"]))
    if worst > 2e-6:
        sys.exit(f"PyTorch's probabilities with cdl's checkpoint differ from cdl-predict's by {worst}")
    print(f"cdl checkpoint in PyTorch = cdl-predict within {worst:.1e}")


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2])
    elif sys.argv[1] == "eval":
        evaluate(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "back":
        back(sys.argv[2], sys.argv[3])
    else:
        check(sys.argv[2], sys.argv[3], sys.argv[4])
