#!/usr/bin/python3
"""One op at a time in PyTorch: the counterpart of bench/bench_ops.c in
bench/run_cpu_ops.sh. Same case syntax, same output line per case:
  OP SHAPE fwd_ms bwd_ms
the fastest of --runs calls after 2 warm-up calls (as bench_ops.c), NCHW
float32 tensors.
  dw:N,C,H,W,K,S,P       nn.Conv2d(C, C, K, S, P, groups=C); bwd = dx, dW, db
  conv:N,C,H,W,OC,K,S,P  nn.Conv2d(C, OC, K, S, P); bwd = dx, dW, db
  bn:N,C,H,W             F.batch_norm(training=True); bwd = dx, dgamma, dbeta
  bneval:N,C,H,W         F.batch_norm(training=False), fwd only
  maxpool:N,C,H,W,K,S,P  F.max_pool2d (with indices, as training keeps them)
The backward is timed as torch.autograd.grad of the saved graph's output
(retain_graph), so the forward is not in it. OPENBLAS_NUM_THREADS=1 is set
before torch loads, torch.set_num_threads(T) after.
"""
import argparse
import os
import sys
import time

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("--threads", type=int, default=1)
parser.add_argument("--runs", type=int, default=20)
parser.add_argument("--cpu", type=int, default=0,
                    help="1: the process's CPU time instead of the wall clock (as bench_ops)")
parser.add_argument("cases", nargs="+")
args = parser.parse_args()
os.environ["OPENBLAS_NUM_THREADS"] = "1"   # must precede the import
import torch   # noqa: E402
import torch.nn.functional as F   # noqa: E402

torch.set_num_threads(args.threads)
torch.manual_seed(1)


clock = time.process_time if args.cpu else time.perf_counter


def min_ms(fn):
    t = []
    for i in range(-2, args.runs):
        t0 = clock()
        fn()
        if i >= 0:
            t.append(1e3 * (clock() - t0))
    return min(t)


def fwd_bwd(fwd, inputs):
    with torch.no_grad():
        f = min_ms(fwd)
    out = fwd()
    if isinstance(out, tuple):
        out = out[0]
    g = torch.rand_like(out) * 2 - 1
    b = min_ms(lambda: torch.autograd.grad(out, inputs, g, retain_graph=True))
    return f, b


def run(case):
    """(fwd ms, bwd ms or None) of one case."""
    op, _, rest = case.partition(":")
    v = [int(s) for s in rest.split(",")]
    if op in ("dw", "conv"):
        if op == "dw":
            n, c, h, w, k, s, p = v
            oc, groups = c, c
        else:
            n, c, h, w, oc, k, s, p = v
            groups = 1
        x = torch.rand(n, c, h, w, requires_grad=True)
        wt = torch.rand(oc, c // groups, k, k, requires_grad=True)
        bias = torch.rand(oc, requires_grad=True)
        return fwd_bwd(lambda: F.conv2d(x, wt, bias, s, p, 1, groups), (x, wt, bias))
    if op in ("bn", "bneval"):
        n, c, h, w = v
        x = torch.rand(n, c, h, w, requires_grad=True)
        gamma = torch.rand(c, requires_grad=True)
        beta = torch.rand(c, requires_grad=True)
        rm, rv = torch.zeros(c), torch.ones(c)
        if op == "bn":
            return fwd_bwd(lambda: F.batch_norm(x, rm, rv, gamma, beta, True, 0.1, 1e-5),
                           (x, gamma, beta))
        with torch.no_grad():
            return min_ms(lambda: F.batch_norm(x, rm, rv, gamma, beta, False, 0.1, 1e-5)), None
    if op == "maxpool":
        n, c, h, w, k, s, p = v
        x = torch.rand(n, c, h, w, requires_grad=True)
        return fwd_bwd(lambda: F.max_pool2d(x, k, s, p, return_indices=True), (x,))
    sys.exit(f"torch_ops.py: case '{case}' not understood")


for case in args.cases:
    try:
        f, b = run(case)
    except (RuntimeError, ValueError) as e:   # a shape PyTorch refuses: "- -"
        print(f"torch_ops.py: {case}: {str(e).splitlines()[0]}", file=sys.stderr)
        print(f"{case} - -", flush=True)
        continue
    print(f"{case} {f:.3f} " + (f"{b:.3f}" if b is not None else "-"), flush=True)
