"""A 25M-parameter checkpoint with Adam state, read by PyTorch.

  big_adam.py CKPT CRCS

CKPT was written by tests/ckpt/big_adam (cdl-checkpoint-3), CRCS is its
output ("crc NAME XXXXXXXX" per tensor). Checks: every tensor reads with
safetensors.torch.load_file with the CRC-32 cdl computed (bit for bit);
the model loads with load_state_dict(strict=True) after dropping the
"optimizer." tensors (the line docs/checkpoints.md gives); the state
loads into torch.optim.Adam as docs/checkpoints.md shows, and one step
there runs. Prints "N passed, N failed"; exits non-zero on any failure.
"""
import sys
import zlib

import torch
from safetensors import safe_open
from safetensors.torch import load_file

CKPT, CRCS = sys.argv[1], sys.argv[2]
results = {"passed": 0, "failed": 0}


def check(cond, what):
    results["passed" if cond else "failed"] += 1
    print(("ok     " if cond else "FAILED ") + what)


want = {}
with open(CRCS) as f:
    for line in f:
        if line.startswith("crc "):
            _, name, crc = line.split()
            want[name] = int(crc, 16)

sd = load_file(CKPT)
with safe_open(CKPT, framework="pt") as f:
    meta = f.metadata()
check(meta.get("format") == "cdl-checkpoint-3", "format %r" % meta.get("format"))
check(sorted(sd) == sorted(want), "tensors %s" % sorted(sd))
for name, crc in want.items():
    t = sd.get(name)
    got = zlib.crc32(t.contiguous().numpy().tobytes()) if t is not None else None
    check(t is not None and t.dtype == torch.float32 and got == crc,
          "%s bit for bit (crc32 %08x)" % (name, crc))

model = torch.nn.Sequential()
model.add_module("fc1", torch.nn.Linear(5000, 5000))
model.load_state_dict({k: v for k, v in sd.items() if not k.startswith("optimizer.")}, strict=True)
check(torch.equal(model.fc1.weight.detach(), sd["fc1.weight"]), "load_state_dict(strict=True)")
check(sum(p.numel() for p in model.parameters()) == 25005000, "25,005,000 parameters")

params = dict(model.named_parameters())
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
opt.load_state_dict({"param_groups": opt.state_dict()["param_groups"],
                     "state": {i: {"step": torch.tensor(float(meta["optimizer_steps"])),
                                   "exp_avg": sd["optimizer.exp_avg." + n],
                                   "exp_avg_sq": sd["optimizer.exp_avg_sq." + n]}
                               for i, n in enumerate(params)}})
st = opt.state[model.fc1.weight]
check(torch.equal(st["exp_avg"], sd["optimizer.exp_avg.fc1.weight"]) and
      float(st["step"]) == 7.0, "torch.optim.Adam takes the state (step %s)" % float(st["step"]))
del sd
for p in model.parameters():
    p.grad = torch.zeros_like(p)
opt.step()
check(float(opt.state[model.fc1.weight]["step"]) == 8.0, "one Adam step from it")

print("%d passed, %d failed" % (results["passed"], results["failed"]))
sys.exit(1 if results["failed"] else 0)
