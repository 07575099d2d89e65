#!/usr/bin/env python3
"""PyTorch Lightning under `srun --cdl-ddp`, strategy "ddp".

    srun --cdl-ddp python3 train_lightning.py [--epochs N] [--accelerator cpu|gpu|auto]

Lightning's SLURMEnvironment takes the ranks from Slurm (SLURM_PROCID,
SLURM_LOCALID, SLURM_NODEID, SLURM_NTASKS: the same numbers as the plugin's
RANK, LOCAL_RANK, GROUP_RANK, WORLD_SIZE) and MASTER_ADDR/MASTER_PORT from
the environment when they are set, which --cdl-ddp does. Without them it
would take the first node of the *job* (SLURM_NODELIST) and the port
15000 + the last 4 digits of the job id, the same for every step of the
job (docs/pytorch.md). devices and num_nodes must match Slurm's layout:
they are read from the plugin's LOCAL_WORLD_SIZE and CDL_NNODES here, so
the script follows whatever the job script asks for. Where a task sees only
its own GPU (CDL_GPU_BIND=task) or replicas share one (--cdl-mps), each
rank is given its GPU by hand (lightning_devices).

Each rank prints one line "lightning rank R/W local L node N master A:P
env CLASS dist_rank R device D" from inside the fit, and rank 0 "finished"
at the end.
"""
import argparse
import os
import sys

import torch
from torch.utils.data import DataLoader, TensorDataset

try:
    import lightning.pytorch as pl  # the "lightning" package
except ImportError:
    import pytorch_lightning as pl  # the "pytorch-lightning" package


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=32, help="per rank")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--samples", type=int, default=2048)
    p.add_argument("--accelerator", default="auto")
    p.add_argument("--root-dir", default=".", help="Lightning's default_root_dir")
    return p.parse_args()


class Net(pl.LightningModule):
    def __init__(self, lr):
        super().__init__()
        self.lr = lr
        self.net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(),
                                       torch.nn.Linear(64, 10))

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.cross_entropy(self(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)

    def _register_sharded_tensor_state_dict_hooks_if_available(self):
        # Lightning < 2.1 calls this from LightningModule.__init__ on torch <
        # 2.1; it imports torch.distributed._shard, which Debian 12's torch
        # 1.13 cannot import under Python 3.11 ("mutable default ... for
        # field tensor_properties"). Plain DDP has no ShardedTensors: skip.
        try:
            super()._register_sharded_tensor_state_dict_hooks_if_available()
        except ValueError:
            pass

    def on_fit_start(self):
        t = self.trainer
        env = t.strategy.cluster_environment
        print(f"lightning rank {t.global_rank}/{t.world_size} local {t.local_rank} "
              f"node {t.node_rank} master {env.main_address}:{env.main_port} "
              f"env {type(env).__name__} dist_rank {torch.distributed.get_rank()} "
              f"device {t.strategy.root_device}", flush=True)


def check_layout():
    """Lightning runs only layouts with the same number of tasks on every
    node (devices x num_nodes) and refuses a step without
    SLURM_NTASKS_PER_NODE; its own messages then advise
    --ntasks-per-node=WORLD_SIZE, which asks for WORLD_SIZE tasks on every
    node. Name the layout and the option that works instead."""
    e = os.environ.get
    if "WORLD_SIZE" not in os.environ:
        return
    world, nodes = int(e("WORLD_SIZE")), int(e("CDL_NNODES", "1"))
    local = int(e("LOCAL_WORLD_SIZE", str(world)))
    me = f"{os.path.basename(sys.argv[0])}: "
    if local * nodes != world:
        sys.exit(f"{me}this step has {world} tasks on {nodes} nodes, {local} on this node "
                 f"({e('SLURMD_NODENAME', 'node ' + e('GROUP_RANK', '?'))}): Lightning needs the "
                 f"same number on every node. Ask for -N{nodes} --ntasks-per-node=N (N tasks "
                 f"per node), or run pytorch/train_ddp.py, which takes any layout")
    if "SLURM_STEP_ID" in os.environ and "SLURM_NTASKS_PER_NODE" not in os.environ:
        sys.exit(f"{me}Lightning needs --ntasks-per-node under Slurm (it refuses a bare "
                 f"--ntasks): ask for -N{nodes} --ntasks-per-node={local} instead of "
                 f"--ntasks={world}")


def lightning_devices(accelerator, local_world, visible, env=os.environ):
    """Trainer's devices and DDP's parallel_devices and process group
    backend for this node's tasks, as (devices, [GPU index per local rank]
    or None, "gloo" or None). Lightning opens cuda:LOCAL_RANK of the
    devices=LOCAL_WORLD_SIZE GPUs it asks the task to see: right where every
    task sees all the node's GPUs, one task each. Under CDL_GPU_BIND=task
    (--gpus-per-task=1, --gpu-bind=map_gpu) a task sees its own GPU only,
    and Lightning refused at start ("You requested gpu: [0, 1] But your
    machine only has: [0]"); under packed replicas (--cdl-mps=N,
    --ntasks-per-gpu) local rank l belongs on GPU l / CDL_REPLICAS_PER_GPU,
    and NCCL refuses two ranks on one GPU ("Duplicate GPU detected"). Then
    each local rank is given its GPU as rank contract 5 says
    (docs/rank-contract.md): devices=1 (a GPU the task sees), and
    parallel_devices one entry per task of the node (Lightning checks their
    count against --ntasks-per-node and opens entry LOCAL_RANK), with gloo
    for packed replicas. Read in pytorch-lightning 2.2.5
    (accelerator_connector.py, strategies/ddp.py, device_parser.py)."""
    if accelerator == "cpu" or visible == 0 or "TORCHELASTIC_RUN_ID" in env:
        return local_world, None, None
    per_gpu = max(int(env.get("CDL_REPLICAS_PER_GPU", "1")), 1)
    if env.get("CDL_GPU_BIND") == "task":
        slots = [0] * local_world
    else:
        slots = [(l // per_gpu) % visible for l in range(local_world)]
    if slots == list(range(local_world)) and local_world <= visible:
        return local_world, None, None   # Lightning's own choice is right
    return 1, slots, "gloo" if per_gpu > 1 else None


def main():
    args = parse_args()
    check_layout()
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    devices, slots, pg = lightning_devices(args.accelerator, local_world,
                                           torch.cuda.device_count())
    strategy = "ddp"
    if slots is not None:
        strategy = pl.strategies.DDPStrategy(
            parallel_devices=[torch.device("cuda", i) for i in slots], process_group_backend=pg)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(args.samples, 32, generator=g)
    y = (x @ torch.randn(32, 10, generator=g)).argmax(dim=1)
    loader = DataLoader(TensorDataset(x, y), batch_size=args.batch_size, shuffle=True)
    trainer = pl.Trainer(
        accelerator=args.accelerator,
        devices=devices, num_nodes=int(os.environ.get("CDL_NNODES", "1")),
        strategy=strategy, max_epochs=args.epochs, default_root_dir=args.root_dir,
        enable_progress_bar=False, enable_model_summary=False, logger=False)
    trainer.fit(Net(args.lr), loader)
    # Leave together: Lightning keeps the process group open, and a rank
    # whose gloo peers have already exited can abort at interpreter exit.
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
    if trainer.global_rank == 0:
        print("finished", flush=True)


if __name__ == "__main__":
    main()
