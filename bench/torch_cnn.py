#!/usr/bin/python3
"""Training speed of the seed CNN in PyTorch, the counterpart of bench_cnn.c.

Same network (conv 6@5x5, relu, maxpool 2, conv 16@5x5, relu, maxpool 2,
fc 120, relu, fc 84, relu, fc 10 on 3x32x32), cross-entropy, SGD with momentum
0.9 and weight decay 1e-4, synthetic batches kept in memory; the median, min
and max images/s of --runs timed runs of --steps steps after one warm-up run.

  --mode tuned    OPENBLAS_NUM_THREADS=1 (set before torch loads) and
                  torch.set_num_threads(T): no second thread pool.
  --mode default  only torch.set_num_threads(T), as a user asking for T
                  threads gets it (OpenBLAS keeps its own threads).

Prints a report and one line "RESULT impl=torch-MODE key=value ..." for
bench/run_cnn.sh; if torch cannot be imported, says so and exits 3.
"""
import argparse
import os
import resource
import sys
import time

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("--batch", type=int, default=512)
parser.add_argument("--threads", type=int, default=1)
parser.add_argument("--steps", type=int, default=0, help="steps per run (default ~1 s)")
parser.add_argument("--runs", type=int, default=7)
parser.add_argument("--mode", choices=["tuned", "default"], default="tuned")
args = parser.parse_args()

if args.mode == "tuned":
    os.environ["OPENBLAS_NUM_THREADS"] = "1"   # must precede the import

try:
    import torch
    import torch.nn as nn
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                    "fixtures"))
    from torch_ref import LeNet
except ImportError as e:
    print(f"torch is not importable with {sys.executable}: {e}")
    print(f"RESULT impl=torch-{args.mode} batch={args.batch} threads={args.threads} error=no-torch")
    sys.exit(3)

start_threads = torch.get_num_threads()
torch.set_num_threads(args.threads)
torch.manual_seed(1)

model = LeNet(3, 0, 10)   # the seed CNN, as cdl's lenet on 3x32x32
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
loss_fn = nn.CrossEntropyLoss()

n = args.batch
steps = args.steps or max(4, 16384 // n)
runs = max(5, args.runs)
xs = [torch.rand(n, 3, 32, 32) * 2 - 1 for _ in range(4)]
ys = [torch.randint(0, 10, (n,)) for _ in range(4)]

ips = []
step = 0
for run in range(-1, runs):   # run -1 warms up
    t = time.perf_counter()
    for _ in range(steps):
        x, y = xs[step % 4], ys[step % 4]
        step += 1
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
    t = time.perf_counter() - t
    if run >= 0:
        ips.append(n * steps / t)

ips.sort()
median = ips[len(ips) // 2]
rss_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(f"torch {torch.__version__} ({args.mode}: OPENBLAS_NUM_THREADS="
      f"{os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}, torch threads {start_threads} -> "
      f"{torch.get_num_threads()}), batch {n}, {runs} runs x {steps} steps")
print(f"  images/s: median {median:.0f}  min {ips[0]:.0f}  max {ips[-1]:.0f}")
print(f"  peak RSS {rss_kb // 1024} MiB, last loss {loss.item():.4f}")
print(f"RESULT impl=torch-{args.mode} batch={n} threads={args.threads} img_s={median:.0f} "
      f"min={ips[0]:.0f} max={ips[-1]:.0f} rss_kb={rss_kb} version={torch.__version__}")
