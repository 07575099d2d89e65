#!/usr/bin/env python3
"""PyTorch DistributedDataParallel under `srun --cdl-ddp` (or --cdl-mps).

    srun --cdl-ddp python3 train_ddp.py [--epochs N] [--ckpt-dir DIR] ...

What the cluster guides' scripts did by hand, the plugin does per task:
RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR (the node of
this step's task 0) and MASTER_PORT (free of collisions between steps) are
in the environment, so init_process_group("env://") needs no argument, and
OMP_NUM_THREADS / MKL_NUM_THREADS already hold this task's share of the CPUs
(PyTorch reads them: no torch.set_num_threads). Without srun the script runs
as one process without torch.distributed; a Slurm step of several tasks
without --cdl-ddp (no WORLD_SIZE) is refused, as each task would train
alone. The GPU a rank opens follows rank contract 5 (cuda_slot).

Data: a synthetic classification set (inputs N(0,1), labels from a fixed
random linear "teacher"), the same for every seed, so the script needs no
download. --save writes this rank's final weights, --double trains in
float64 (results independent of the machine's BLAS kernels).

Checkpoint-restart (--ckpt-dir): resumes from DIR/last.pt when it exists;
rank 0 writes it atomically at the end of every epoch. On SIGUSR1 or
SIGTERM every rank stops after the same step (the ranks agree with a
one-element all-reduce each step), rank 0 saves, and all exit with 75 so
that the job script requeues the job (templates/pytorch-requeue.sbatch).

A rank lost mid-run (its node or process died, or it stopped answering for
--peer-timeout seconds): the ranks left fail their next collective, name
the loss and exit with 76, as cdl-train's ranks do (CDL_EXIT_PEER_LOST);
pytorch-requeue.sbatch requeues the job and the next run resumes from the
last checkpoint. Without this they printed gloo's traceback and exited 1,
and the job ended FAILED with the rest of the run lost.
"""
import signal

# SIGUSR1 (Slurm's --signal=B:USR1@LEAD) and SIGTERM can come while torch
# still loads: a job given less time than the lead, a scancel as it starts.
# They are caught from here on and acted on once the script knows whether
# it checkpoints (main, train). Before, the default action killed the task
# (status 138: the job failed, no requeue), and a signal during set-up
# trained one step and saved it, so a job signalled at every start crept on
# a step per requeue. A launcher that held them blocked across exec gets
# them delivered now.
ASKED = []


def ask_stop(signum, frame):
    ASKED.append(signum)


signal.signal(signal.SIGUSR1, ask_stop)
signal.signal(signal.SIGTERM, ask_stop)
signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGUSR1, signal.SIGTERM])

import argparse  # noqa: E402 (after the handlers: torch takes seconds to load)
import datetime  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import sys  # noqa: E402

# One write per output line. The ranks of cdlrun (without --label) share
# its stdout and stderr; under PYTHONUNBUFFERED (-u), print writes its text
# and its newline apart, so two ranks printing at once made one line of
# two ("hf rank 1/2 ... samples ...hf rank 0/2 ...") and a rank's report
# went missing. Line-buffered, each line leaves in one write (atomic on a
# pipe up to PIPE_BUF); srun relays whole lines per task either way.
for _stream in (sys.stdout, sys.stderr):
    if hasattr(_stream, "reconfigure"):
        _stream.reconfigure(line_buffering=True, write_through=False)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402
from torch.utils.data.distributed import DistributedSampler  # noqa: E402

EXIT_REQUEUE = 75  # like cdl-train: "checkpoint written, requeue me"
EXIT_PEER_LOST = 76  # like cdl-train: "a rank was lost; resume from the last checkpoint"


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=32, help="per rank")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--samples", type=int, default=4096)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    p.add_argument("--backend", choices=["auto", "nccl", "gloo"], default="auto",
                   help="auto: nccl for one GPU per rank, gloo on CPU or when "
                        "replicas share a GPU (CDL_REPLICAS_PER_GPU > 1)")
    p.add_argument("--double", action="store_true", help="train in float64")
    p.add_argument("--ckpt-dir", help="resume from and save to DIR/last.pt")
    p.add_argument("--save", help="write this rank's final weights; {rank} is replaced")
    p.add_argument("--peer-timeout", type=float, default=600,
                   help="seconds a collective waits for a silent rank before it counts as "
                        "lost (gloo; NCCL only with NCCL_BLOCKING_WAIT=1, from PyTorch 2.2 "
                        "TORCH_NCCL_BLOCKING_WAIT=1) [600; PyTorch's default is 1800]")
    return p.parse_args()


def synthetic_data(samples, seed, dtype):
    """(x, y): x is (samples, 32), y in 0..9 from a fixed linear teacher."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(samples, 32, generator=g, dtype=torch.float64)
    teacher = torch.randn(32, 10, generator=g, dtype=torch.float64)
    y = (x @ teacher).argmax(dim=1)
    return TensorDataset(x.to(dtype), y)


def make_model(seed, dtype):
    torch.manual_seed(seed)  # every rank starts from the same weights
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(),
                               torch.nn.Linear(64, 10)).to(dtype)


def banner(rank, world, device, backend):
    """One line per rank: what the plugin handed this process."""
    e = os.environ.get
    print(f"rank {rank}/{world} local {e('LOCAL_RANK', '0')}/{e('LOCAL_WORLD_SIZE', '1')} "
          f"node {e('GROUP_RANK', '0')} master {e('MASTER_ADDR', '-')}:{e('MASTER_PORT', '-')} "
          f"threads {torch.get_num_threads()} omp {e('OMP_NUM_THREADS', '-')} "
          f"mkl {e('MKL_NUM_THREADS', '-')} cpus {len(os.sched_getaffinity(0))} "
          f"replicas_per_gpu {e('CDL_REPLICAS_PER_GPU', '1')} "
          f"mps_pipe {e('CUDA_MPS_PIPE_DIRECTORY', '-')} "
          f"mps_pct {e('CUDA_MPS_ACTIVE_THREAD_PERCENTAGE', '-')} "
          f"device {device} backend {backend or '-'}", flush=True)


def main():
    args = parse_args()
    if not args.ckpt_dir:
        # Nothing to checkpoint: a signal ends the task, as it always did.
        for s in (signal.SIGUSR1, signal.SIGTERM):
            signal.signal(s, signal.SIG_DFL)
        if ASKED:
            signal.raise_signal(ASKED[0])
    check_launch()
    try:
        return train(args)
    except Exception as e:
        exit_if_peer_lost(e, args.ckpt_dir)
        raise


def exit_if_peer_lost(e, ckpt_dir):
    """Called with the exception that ended training. A collective that
    failed because another rank is gone: say so and exit 76 at once (the
    process group cannot be torn down with a peer gone: it would wait for
    it; the last checkpoint stays whole). Any other failure of a launched
    rank is marked in the store (mark_failed) and returns, to be raised."""
    launched = dist.is_available() and dist.is_initialized()
    if not launched or not isinstance(e, RuntimeError) or not peer_lost(e) or peer_failed():
        if launched:
            mark_failed()
        return
    rank = os.environ.get("RANK", "?")
    print(f"rank {rank}: a rank of this run was lost{lost_peer(e)} (its process or node died, "
          f"or it stopped answering): {e}", file=sys.stderr)
    print(f"rank {rank}: exit status {EXIT_PEER_LOST}; start the run again to continue "
          f"from the last checkpoint{' in ' + ckpt_dir if ckpt_dir else ''} "
          f"(pytorch-requeue.sbatch does)", file=sys.stderr, flush=True)
    sys.stdout.flush()
    os._exit(EXIT_PEER_LOST)


def lost_peer(e):
    """" at ADDR:PORT" from gloo's message ("Read error
    [ADDR]:PORT: Connection reset by peer", "Connection closed by peer
    [ADDR]:PORT"): the lost rank's node; else ""."""
    m = re.search(r"\[([0-9A-Fa-f.:]+)\]:(\d+)", str(e))
    return f" at {m.group(1)}:{m.group(2)}" if m else ""


# A rank that fails on its own (a bug, a bad input) says so in the store
# before it exits: the others, whose collectives then fail, exit 1 with it
# rather than 76, so that the job is not requeued to fail again. (A failure
# of rank 0, which holds the store, still reads as lost to the others:
# pytorch-requeue.sbatch's MAX_LOST_REQUEUES bounds those requeues.)
FAILED_KEY = "train_ddp/failed"


def mark_failed():
    try:
        dist.distributed_c10d._get_default_store().add(FAILED_KEY, 1)
    except Exception:
        pass


def peer_failed():
    try:
        # add(key, 0) reads a counter without waiting (PyTorch 1.13's
        # PrefixStore has no check()).
        return dist.distributed_c10d._get_default_store().add(FAILED_KEY, 0) > 0
    except Exception:
        return False


def peer_lost(e):
    """A collective that failed because another rank is gone: gloo's
    "Connection closed by peer" / "Connection reset by peer" / "Broken
    pipe" / "Timed out" (--peer-timeout); NCCL's aborted communicator or,
    with blocking wait, "Caught collective operation timeout" (NCCL's
    asynchronous error handling ends the process instead: SIGABRT, 134)."""
    msg = str(e)
    return any(w in msg for w in ("Connection closed by peer", "Connection reset by peer",
                                  "Broken pipe", "Timed out", "timed out",
                                  "collective operation timeout",
                                  "NCCL communicator was aborted", "ncclRemoteError"))


def check_launch():
    """A multi-task Slurm step without --cdl-ddp (plain `srun python
    train_ddp.py`) has no RANK/WORLD_SIZE: every task would train the whole
    data alone as a world of one, all writing the same checkpoint. Refuse."""
    e = os.environ.get
    tasks = e("SLURM_STEP_NUM_TASKS", e("SLURM_NTASKS", "1"))
    if "WORLD_SIZE" not in os.environ and "SLURM_STEP_ID" in os.environ and \
            tasks.isdigit() and int(tasks) > 1:
        sys.exit(f"{os.path.basename(sys.argv[0])}: this Slurm step has {tasks} tasks but no "
                 f"WORLD_SIZE: each task would train alone; start it with srun --cdl-ddp "
                 f"(or #SBATCH --cdl-ddp)")


def cuda_slot(local_rank, visible):
    """The visible GPU this rank opens (rank contract 5, docs/rank-contract.md).
    CDL_GPU_BIND=task: Slurm gave each task GPUs of its own (--gpus-per-task,
    --gpu-bind=map_gpu, --ntasks-per-gpu): its first, near which the plugin
    bound its CPUs. Otherwise local rank l uses GPU l / CDL_REPLICAS_PER_GPU
    of those its node's tasks all see; under --cdl-mps that is the group's
    one GPU, device 0. A worker of torchrun (TORCHELASTIC_RUN_ID set) has
    torchrun's LOCAL_RANK among the workers of one task, and CDL_GPU_BIND
    and CDL_REPLICAS_PER_GPU describe that task: worker l uses the task's
    visible GPU l (before, under --gpus-per-task all took GPU 0)."""
    if "TORCHELASTIC_RUN_ID" in os.environ:
        return local_rank % visible
    if os.environ.get("CDL_GPU_BIND") == "task":
        return 0
    slot = local_rank // max(int(os.environ.get("CDL_REPLICAS_PER_GPU", "1")), 1)
    return slot % visible


def packed():
    """Whether replicas share a GPU (--cdl-mps=N, --ntasks-per-gpu): NCCL
    refuses two ranks on one GPU ("Duplicate GPU detected"); gloo works."""
    return int(os.environ.get("CDL_REPLICAS_PER_GPU", "1")) > 1


def accelerate_cuda_env(local_rank, visible):
    """The variables that make Hugging Face Accelerate (0.32; the Trainer's
    device) use this rank's GPU, cuda_slot(local_rank, visible), as
    {name: value}. Accelerate opens cuda:LOCAL_RANK and gives DDP
    device_ids=[LOCAL_RANK]: right only where every task of the node sees
    all its GPUs, one task per GPU. Under CDL_GPU_BIND=task (each task sees
    its own GPUs) or packed replicas that GPU does not exist ("invalid
    device ordinal") or is another rank's. ACCELERATE_TORCH_DEVICE names
    the device PartialState takes instead; ACCELERATE_BYPASS_DEVICE_MAP
    makes it wrap the model in DDP without device_ids (DDP then uses the
    module's own device; it also lifts Accelerate's refusal of a model
    spread over GPUs by device_map in a distributed run, which a
    data-parallel rank does not do). {} when LOCAL_RANK is already the
    right GPU. Read in accelerate 0.32.1 (state.py, accelerator.py)."""
    slot = cuda_slot(local_rank, visible)
    if slot == local_rank:
        return {}
    return {"ACCELERATE_TORCH_DEVICE": f"cuda:{slot}", "ACCELERATE_BYPASS_DEVICE_MAP": "true"}


def pin_accelerate_gpu(local_rank, visible):
    """Makes this rank's GPU the current one and Accelerate's (before
    TrainingArguments or Accelerator is made); a variable set by hand wins.
    Accelerate sets no current device when given one: torch.cuda's RNG
    state and NCCL follow the current device, so set it here."""
    for k, v in accelerate_cuda_env(local_rank, visible).items():
        os.environ.setdefault(k, v)
    torch.cuda.set_device(cuda_slot(local_rank, visible))


def train(args):
    dtype = torch.float64 if args.double else torch.float32
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    use_cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    if use_cuda:
        torch.cuda.set_device(cuda_slot(local_rank, torch.cuda.device_count()))
        device = torch.device("cuda", torch.cuda.current_device())
    else:
        device = torch.device("cpu")
    backend = args.backend
    if backend == "auto":
        backend = "nccl" if use_cuda and not packed() else "gloo"
    launched = "WORLD_SIZE" in os.environ  # by srun --cdl-ddp, cdlrun or torchrun
    if launched:
        dist.init_process_group(backend=backend, init_method="env://",
                                timeout=datetime.timedelta(seconds=args.peer_timeout))
        rank = dist.get_rank()
    else:
        rank, backend = 0, None
    banner(rank, world, device, backend)

    data = synthetic_data(args.samples, args.seed, dtype)
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True,
                                 seed=args.seed, drop_last=True)
    loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler, drop_last=True)
    model = make_model(args.seed, dtype).to(device)
    net = DDP(model, device_ids=[device.index] if use_cuda else None) if launched else model
    opt = torch.optim.SGD(net.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()

    ckpt = os.path.join(args.ckpt_dir, "last.pt") if args.ckpt_dir else None
    start_epoch, skip = 0, 0
    if ckpt and os.path.exists(ckpt):
        state = torch.load(ckpt, map_location=device)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start_epoch, skip = state["epoch"], state["step"]
        if rank == 0:
            print(f"resumed from {ckpt}: epoch {start_epoch} step {skip}", flush=True)

    def stop_agreed():
        """Whether any rank was signalled (ASKED): all ranks agree."""
        flag = torch.tensor([1.0 if ASKED else 0.0], device=device)
        if launched:
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return flag.item() > 0

    # A signal during set-up: nothing trained, so nothing written; the
    # checkpoint the run resumed from stays as it was.
    if ckpt and stop_agreed():
        if rank == 0:
            print(f"signal before the first step: nothing trained, {ckpt} left as it was; "
                  f"exiting with {EXIT_REQUEUE}", flush=True)
        return leave(launched, EXIT_REQUEUE)

    def save(epoch, step):
        """Rank 0 writes DIR/last.pt atomically; the others wait for it."""
        if rank == 0:
            os.makedirs(args.ckpt_dir, exist_ok=True)
            tmp = ckpt + ".tmp"
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(),
                        "epoch": epoch, "step": step}, tmp)
            os.replace(tmp, ckpt)
        if launched:
            dist.barrier()

    for epoch in range(start_epoch, args.epochs):
        sampler.set_epoch(epoch)  # one shuffle per epoch, the same on every rank
        total, steps = 0.0, 0
        for step, (x, y) in enumerate(loader):
            if step < skip:
                continue  # done before the restart
            x, y = x.to(device), y.to(device)
            loss = loss_fn(net(x), y)
            opt.zero_grad()
            loss.backward()  # DDP averages the gradients over the ranks here
            opt.step()
            total += loss.item()
            steps += 1
            if ckpt and stop_agreed():
                save(epoch, step + 1)
                if rank == 0:
                    print(f"signal: checkpoint at epoch {epoch} step {step + 1} "
                          f"written, exiting with {EXIT_REQUEUE}", flush=True)
                return leave(launched, EXIT_REQUEUE)
        skip = 0
        if rank == 0:
            print(f"epoch {epoch + 1}/{args.epochs} loss {total / max(steps, 1):.6f}", flush=True)
        if ckpt:
            save(epoch + 1, 0)

    if args.save:
        torch.save(model.state_dict(), args.save.replace("{rank}", str(rank)))
    if launched:
        dist.barrier()  # leave together: no rank tears down while a peer still talks
    return leave(launched, 0)


def leave(launched, code):
    """Ends a launched rank with code once its work is done, without tearing
    the process group down. torch 1.13 can deadlock in that teardown: the
    main thread, holding the GIL, joins a gloo thread that waits for it
    (seen under load in one run in four or five, in destroy_process_group
    or when the DDP model, train's last reference to the group, goes). No
    Python thread can run then, so a watchdog could only end the rank with
    faulthandler's status 1, and the job was reported failed, or its
    requeue lost, after all its work was done. Every rank has passed its
    last collective here (the final barrier, the checkpoint's, or the stop
    vote), so there is nothing left to say to the others: the process ends,
    and the kernel closes its sockets. A single process returns code."""
    if launched:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


if __name__ == "__main__":
    sys.exit(main())
