#!/usr/bin/env python3
"""Hugging Face Trainer under `srun --cdl-ddp` or `cdlrun -n N`.

    srun --cdl-ddp python3 train_hf.py [--epochs N] [--ckpt-dir DIR] ...
    cdlrun -n 2 python3 train_hf.py --ckpt-dir runs/hf

The Trainer needs no launcher: it reads the plugin's LOCAL_RANK (set means
"launched"), and Accelerate under it takes RANK, WORLD_SIZE,
LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT, so every task is one
process of one DistributedDataParallel world (gloo on CPUs, NCCL on GPUs)
and each rank trains on its own shard of every global batch. Without a
launcher the script runs as one process.

The model is a small BERT classifier built from a config (random weights,
nothing downloaded); the data are random token sequences labelled by a
fixed rule, the same for every seed. With a model and data of your own,
replace make_model() and Toy.

Checkpoint-restart (--ckpt-dir): the Trainer writes DIR/checkpoint-STEP at
the end of every epoch and resumes from the newest one
(resume_from_checkpoint: weights, optimizer, scheduler, each rank's RNG
state, and the position in the data). On SIGUSR1 or SIGTERM every rank
stops after the same step (the ranks agree through a one-element
all-reduce each step: a rank that stopped alone would leave the others
waiting in their next all-reduce), the Trainer writes a checkpoint, and
all exit with 75 so that the job script requeues the job
(templates/pytorch-requeue.sbatch with TRAIN_PY=pytorch/train_hf.py).

A rank lost mid-run (its node or process died): the ranks left name it
and exit with 76, as train_ddp.py's, and pytorch-requeue.sbatch requeues
the job, which resumes from the newest checkpoint.

GPUs: each rank opens train_ddp.py's cuda_slot (rank contract 5), also
where Accelerate's cuda:LOCAL_RANK is no GPU of the task's (per-task GPU
binding, --cdl-mps), and replicas sharing a GPU use gloo.

--save writes rank 0's final weights (safetensors) and each rank prints
"hf rank R/W local L/LW device D steps S samples N" with the data it saw.
"""
# Beside this script, and first: its import catches SIGUSR1 and SIGTERM
# before torch and transformers load (seconds), where the default action
# killed the task (status 138, not requeued); ASKED holds those caught.
# check_launch refuses a multi-task Slurm step without --cdl-ddp; the GPU a
# rank opens (rank contract 5) and a lost rank's exit status are as
# train_ddp.py's.
from train_ddp import ASKED, check_launch, exit_if_peer_lost, packed, pin_accelerate_gpu

import argparse  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from transformers import (BertConfig, BertForSequenceClassification, Trainer,  # noqa: E402
                          TrainerCallback, TrainingArguments)
from transformers.trainer_utils import get_last_checkpoint  # noqa: E402

EXIT_REQUEUE = 75  # like cdl-train: "checkpoint written, requeue me"
VOCAB, BLOCK = 64, 16


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    # The options of train_ddp.py, so that pytorch-requeue.sbatch runs either.
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=16, help="per rank")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--samples", type=int, default=1024)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    p.add_argument("--ckpt-dir", help="checkpoints in DIR/checkpoint-STEP; resumes from the newest")
    p.add_argument("--max-steps", type=int, default=-1, help="stop after this many steps")
    p.add_argument("--save", help="rank 0 writes the final weights to this safetensors file")
    p.add_argument("--peer-timeout", type=int, default=600,
                   help="seconds a collective waits for a silent rank before it counts as lost "
                        "(the Trainer's ddp_timeout) [600; the Trainer's default is 1800]")
    return p.parse_args()


class Toy(torch.utils.data.Dataset):
    """samples random sequences of BLOCK tokens; label: is token 0 < VOCAB/2."""

    def __init__(self, samples, seed):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randint(0, VOCAB, (samples, BLOCK), generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"input_ids": self.x[i], "labels": int(self.x[i, 0] < VOCAB // 2), "index": i}


def make_model(seed):
    torch.manual_seed(seed)  # the Trainer also broadcasts rank 0's weights (DDP)
    cfg = BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                     num_attention_heads=2, intermediate_size=64,
                     max_position_embeddings=BLOCK, num_labels=2)
    return BertForSequenceClassification(cfg)


class Collate:
    """Stacks a batch and remembers which samples this rank saw."""

    def __init__(self):
        self.seen = []

    def __call__(self, items):
        self.seen.extend(int(it["index"]) for it in items)
        ids = torch.stack([it["input_ids"] for it in items])
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids),
                "labels": torch.tensor([it["labels"] for it in items])}


class StopOnSignal(TrainerCallback):
    """SIGUSR1/SIGTERM: all ranks stop after the same step with a checkpoint."""

    def __init__(self, device):
        self.asked = bool(ASKED)
        self.stopped = False
        self.device = device
        signal.signal(signal.SIGUSR1, self.ask)
        signal.signal(signal.SIGTERM, self.ask)

    def ask(self, signum, frame):
        self.asked = True

    def agreed(self):
        """Whether any rank was signalled: every rank gets the same answer."""
        flag = torch.tensor([1.0 if self.asked else 0.0], device=self.device)
        if dist.is_available() and dist.is_initialized():
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return flag.item() > 0

    def on_step_end(self, args, state, control, **kwargs):
        if self.agreed():
            control.should_save = True
            control.should_training_stop = True
            self.stopped = True
        return control


def cpu_device_workaround(targs):
    """Accelerate (before 0.34) gives rank r of a CPU world the device
    "cpu:r", which the Trainer passes to torch.load as map_location when it
    resumes; torch before 2.0 cannot map to it ("don't know how to restore
    data location of torch.storage.UntypedStorage (tagged with cpu:1)").
    There is one CPU device: name it "cpu"."""
    dev = targs.device
    if dev.type == "cpu" and dev.index is not None:
        cpu = torch.device("cpu")
        targs.distributed_state.device = cpu
        setattr(targs, "__cached__setup_devices", cpu)  # what TrainingArguments.device returns


def leave(code):
    """Every rank exits with code once all are done (their work and the
    checkpoint). No teardown: torch 1.13 can deadlock destroying the
    Trainer's DDP reducer and its gloo group at exit (the main thread joins
    a gloo thread that waits for the GIL the main thread holds; seen after
    a signal checkpoint under cdlrun, one rank never exited)."""
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main():
    args = parse_args()
    if not args.ckpt_dir:
        # Nothing to checkpoint: a signal ends the task, as in train_ddp.py
        # (caught and ignored, a SIGTERM or scancel left it training until
        # Slurm's KillWait ran out and SIGKILL came).
        for s in (signal.SIGUSR1, signal.SIGTERM):
            signal.signal(s, signal.SIG_DFL)
        if ASKED:
            signal.raise_signal(ASKED[0])
    check_launch()
    use_cpu = args.device == "cpu" or (args.device == "auto" and not torch.cuda.is_available())
    if not use_cpu and "LOCAL_RANK" in os.environ:
        # Accelerate would open cuda:LOCAL_RANK, which under per-task GPU
        # binding or --cdl-mps is no GPU of this task's, or another's.
        pin_accelerate_gpu(int(os.environ["LOCAL_RANK"]), torch.cuda.device_count())
    targs = TrainingArguments(
        output_dir=args.ckpt_dir or "hf-out", overwrite_output_dir=False,
        per_device_train_batch_size=args.batch_size, learning_rate=args.lr,
        num_train_epochs=args.epochs, max_steps=args.max_steps, seed=args.seed,
        save_strategy="epoch" if args.ckpt_dir else "no", save_total_limit=2,
        logging_steps=10, report_to=[], use_cpu=use_cpu, remove_unused_columns=False,
        ddp_backend="gloo" if packed() else None,  # NCCL refuses replicas sharing a GPU
        dataloader_num_workers=0, disable_tqdm=True,
        ddp_timeout=args.peer_timeout,
        ddp_find_unused_parameters=False)  # the Trainer's default (True) costs a graph walk a step
    cpu_device_workaround(targs)
    collate = Collate()
    stop = StopOnSignal(targs.device) if args.ckpt_dir else None
    trainer = Trainer(model=make_model(args.seed), args=targs,
                      train_dataset=Toy(args.samples, args.seed), data_collator=collate,
                      callbacks=[stop] if stop else [])
    e = os.environ.get
    last = get_last_checkpoint(args.ckpt_dir) if args.ckpt_dir and os.path.isdir(args.ckpt_dir) \
        else None
    if last and targs.process_index == 0:
        print(f"resuming from {last}", flush=True)
    # A signal during set-up: nothing trained, so nothing written (the
    # Trainer would train a step and save it, and a job signalled at every
    # start would creep on by a step per requeue).
    if stop and stop.agreed():
        if targs.process_index == 0:
            kept = f", {last} left as it was" if last else ""
            print(f"signal before the first step: nothing trained{kept}; "
                  f"exiting with {EXIT_REQUEUE}", flush=True)
        leave(EXIT_REQUEUE)
    try:
        trainer.train(resume_from_checkpoint=last)
    except Exception as err:
        # A lost rank: exit 76 (requeue and resume), as train_ddp.py; before,
        # gloo's traceback and 1, and the job ended FAILED.
        exit_if_peer_lost(err, args.ckpt_dir)
        raise
    print(f"hf rank {targs.process_index}/{targs.world_size} "
          f"local {targs.local_process_index}/{e('LOCAL_WORLD_SIZE', '1')} "
          f"device {targs.device} steps {trainer.state.global_step} "
          f"samples {','.join(map(str, sorted(collate.seen)))}", flush=True)
    if args.save and targs.process_index == 0:
        from safetensors.torch import save_file
        model = trainer.accelerator.unwrap_model(trainer.model)
        save_file({k: v.contiguous() for k, v in model.state_dict().items()}, args.save)
    if stop and stop.stopped:
        if targs.process_index == 0:
            print(f"signal: checkpoint at step {trainer.state.global_step} written, "
                  f"exiting with {EXIT_REQUEUE}", flush=True)
        leave(EXIT_REQUEUE)
    leave(0)


if __name__ == "__main__":
    main()
