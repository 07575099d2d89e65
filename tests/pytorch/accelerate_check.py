# A plain Hugging Face Accelerate training loop that checks the gradient
# averaging, shared by tests/slurm/test_accelerate.sh (srun --cdl-ddp on the
# CPU, gloo) and tests/gpu/pytorch_templates.sh (step 4, on GPUs): 3 SGD
# steps of a linear model in float64, rank r on rows r::world of each
# global batch, a reference model (no Accelerate) on the whole batch.
#
# Options (the callers' differences):
#   --device cpu|cuda   Accelerator(cpu=True) or the GPU (default cpu);
#   --pin DIR           import train_ddp from DIR (templates/pytorch) and,
#                       on cuda, pin the rank's GPU first as docs/pytorch.md
#                       advises (train_ddp.pin_accelerate_gpu), with gloo
#                       for replicas packed on one GPU (NCCL refuses them);
#   --hard-exit         after every rank printed, leave with os._exit(0),
#                       without the process group's teardown.
#
# Prints one line (one write, so ranks' lines do not interleave):
#   A R/N local L device D type T backend B spread S vs_one V rank RANK local_rank LOCAL_RANK
# R/N: Accelerate's process index and count, L its local index, D its
# device, T and B its distributed type and backend; S: the largest
# difference between the ranks' weights (0 when they agree); V: between
# this rank's weights and the reference's (summation order only: < 1e-9);
# RANK and LOCAL_RANK as the environment gave them ("-" when unset).
import argparse
import copy
import os
import sys

ap = argparse.ArgumentParser(description="Accelerate's DDP gradient averaging check")
ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
ap.add_argument("--pin", metavar="DIR", help="import train_ddp from DIR and pin the GPU first")
ap.add_argument("--hard-exit", action="store_true", help="os._exit(0) once every rank printed")
args = ap.parse_args()
cpu = args.device == "cpu"

import torch

packed = False
if args.pin:
    sys.path.insert(0, args.pin)
    import train_ddp
    if not cpu:
        train_ddp.pin_accelerate_gpu(int(os.environ["LOCAL_RANK"]), torch.cuda.device_count())
        packed = train_ddp.packed()

from accelerate import Accelerator

kwargs = None
if packed:
    from accelerate.utils import InitProcessGroupKwargs
    # Replicas sharing a GPU: gloo (Accelerate's default, NCCL, refuses them).
    kwargs = [InitProcessGroupKwargs(backend="gloo")]
torch.set_default_dtype(torch.float64)
acc = Accelerator(cpu=cpu, kwargs_handlers=kwargs)
torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
ref = copy.deepcopy(model).to(acc.device)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
model, opt = acc.prepare(model, opt)
g = torch.Generator().manual_seed(1234)
n, r = acc.num_processes, acc.process_index
for step in range(3):
    x = torch.randn(8 * n, 8, generator=g).to(acc.device)
    y = torch.randn(8 * n, 1, generator=g).to(acc.device)
    acc.backward(torch.nn.functional.mse_loss(model(x[r::n]), y[r::n]))
    opt.step()
    opt.zero_grad()
    torch.nn.functional.mse_loss(ref(x), y).backward()
    ref_opt.step()
    ref_opt.zero_grad()
w = torch.cat([p.detach().flatten() for p in acc.unwrap_model(model).parameters()])
w_ref = torch.cat([p.detach().flatten() for p in ref.parameters()])
every = acc.gather(w.unsqueeze(0))
st = acc.state
os.write(1, (f"A {r}/{n} local {acc.local_process_index} device {acc.device} "
             f"type {st.distributed_type.value} backend {st.backend} "
             f"spread {(every - every[0]).abs().max().item():.3g} "
             f"vs_one {(w - w_ref).abs().max().item():.3g} "
             f"rank {os.environ.get('RANK', '-')} "
             f"local_rank {os.environ.get('LOCAL_RANK', '-')}\n").encode())
if args.hard_exit:
    acc.wait_for_everyone()
    os._exit(0)   # without the process group's teardown (train_ddp.leave)
