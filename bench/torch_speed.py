#!/usr/bin/python3
"""Training speed of ResNet-20 in PyTorch, every mode a user could pick:
the counterpart of `bench_cnn --model resnet20` in bench/run_resnet_speed.sh.

The network is cdl's built-in resnet20 on 3x32x32 (the PyTorch module of
tests/fixtures/make_resnet_fixture.py), cross-entropy, SGD with momentum 0.9
and weight decay 1e-4, synthetic batches kept in memory; the median, min and
max images/s of --runs timed runs of --steps steps after warm-up.

  --mode eager          NCHW tensors, as a model is written
  --mode channels_last  model and inputs in torch.channels_last (oneDNN's
                        preferred layout on CPUs)
  --mode compile        torch.compile(model) (inductor; PyTorch 2.x only)

OPENBLAS_NUM_THREADS=1 is set before torch loads and torch.set_num_threads(T)
after, so the process runs T threads. Prints a report and one line
"RESULT impl=torch-VERSION-MODE key=value ..."; exits 3 when torch cannot be
imported or the mode is not available in this version (with a RESULT line
saying error=...).
"""
import argparse
import os
import resource
import sys
import time

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("--batch", type=int, default=128)
parser.add_argument("--threads", type=int, default=1)
parser.add_argument("--steps", type=int, default=4, help="steps per timed run")
parser.add_argument("--runs", type=int, default=5)
parser.add_argument("--mode", choices=["eager", "channels_last", "compile"], default="eager")
args = parser.parse_args()
os.environ["OPENBLAS_NUM_THREADS"] = "1"   # must precede the import


def fail(why):
    print(f"torch {args.mode}: {why}")
    print(f"RESULT impl=torch-{args.mode} batch={args.batch} threads={args.threads} error={why}")
    sys.exit(3)


try:
    import torch
    import torch.nn as nn
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                    "fixtures"))
    from make_resnet_fixture import ResNet20
except ImportError as e:
    fail(f"no-torch ({e})".replace(" ", "_"))
if args.mode == "compile" and not hasattr(torch, "compile"):
    fail("no-torch.compile")

torch.set_num_threads(args.threads)
torch.manual_seed(1)
n = args.batch
model = ResNet20(3, 10)
xs = [torch.rand(n, 3, 32, 32) * 2 - 1 for _ in range(4)]
ys = [torch.randint(0, 10, (n,)) for _ in range(4)]
if args.mode == "channels_last":
    model = model.to(memory_format=torch.channels_last)
    xs = [x.contiguous(memory_format=torch.channels_last) for x in xs]
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
loss_fn = nn.CrossEntropyLoss()
run_model = torch.compile(model) if args.mode == "compile" else model

step = 0


def train(steps):
    global step, loss
    for _ in range(steps):
        x, y = xs[step % 4], ys[step % 4]
        step += 1
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(run_model(x), y)
        loss.backward()
        opt.step()


t = time.perf_counter()
train(2)   # compiles (compile mode) and warms the allocator
warm_s = time.perf_counter() - t
ips = []
runs = max(3, args.runs)
for run in range(-1, runs):   # run -1 warms up
    t = time.perf_counter()
    train(args.steps)
    t = time.perf_counter() - t
    if run >= 0:
        ips.append(n * args.steps / t)
ips.sort()
median = ips[len(ips) // 2]
rss_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
impl = f"torch-{torch.__version__.split('+')[0]}-{args.mode}"
print(f"{impl}: {torch.get_num_threads()} thread(s), batch {n}, {runs} runs x {args.steps} steps "
      f"(first 2 steps {warm_s:.1f} s)")
print(f"  images/s: median {median:.0f}  min {ips[0]:.0f}  max {ips[-1]:.0f}; last loss {loss.item():.4f}")
print(f"RESULT impl={impl} batch={n} threads={args.threads} img_s={median:.0f} "
      f"min={ips[0]:.0f} max={ips[-1]:.0f} rss_kb={rss_kb}")
