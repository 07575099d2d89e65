"""The timing loop of the GPU benches against PyTorch (bench_torch.py,
bench_resnet_torch.py): training steps on one fixed batch (x, y) with
cross-entropy, warm-up steps first, then steps in tens until SECONDS have
passed, the GPU synchronised before each clock read."""
import time

import torch.nn.functional as F


def train_speed(model, opt, x, y, seconds, sync, warmup):
    """Returns (images/s, steps timed, elapsed seconds, first loss, last loss)."""
    def step():
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    for _ in range(warmup):
        loss0 = step()
    sync()
    steps, t0 = 0, time.perf_counter()
    t = t0
    while t - t0 < seconds:
        for _ in range(10):
            loss = step()
        steps += 10
        sync()
        t = time.perf_counter()
    return steps * x.shape[0] / (t - t0), steps, t - t0, loss0.item(), loss.item()
