#!/bin/bash
# torchrun started inside `srun --cdl-ddp` (one task per node, torchrun
# spawning the workers, as some cluster guides do), with Debian's
# python3-torch on the CPU (gloo), on the two emulated nodes:
#   1. `srun -N2 --ntasks-per-node=1 -c2 --cdl-ddp torchrun --nproc_per_node=2
#      w.py`, no address options: one world of 4 workers (ranks 0..3,
#      torchrun's LOCAL_RANK and GROUP_RANK), at the plugin's MASTER_ADDR
#      and port (torchrun reads the plugin's PET_* defaults; without them
#      each node would form a world of its own at 127.0.0.1:29500), each
#      worker with half the task's threads; --cdl-bind=closest binds the
#      task as with cores; with 1 CPU a note says the workers share it;
#   2. the form the guides write (static rendezvous, --nnodes, --node_rank,
#      --master_addr, --master_port from the step's variables) and the c10d
#      rendezvous at $MASTER_ADDR:$MASTER_PORT form the same world;
#   3. layouts torchrun cannot run as one job fail at once with a message
#      saying what to run: --standalone on 2 nodes, --nnodes=2 with 2 tasks
#      per node (4 torchruns).
#
# Debian 12's torchrun 1.13 fails under Python 3.11 before it starts a
# worker (its Std.from_str("0") returns None, as 3.11 no longer lists
# IntFlag's zero member); the test's `torchrun` is Debian's with that one
# function mended, under the name users type.
set -u
. "${top_srcdir:-.}/tests/slurm/lib.sh"
PY=${CDL_TEST_PYTHON:-/usr/bin/python3}
require_cluster_tools
"$PY" -c 'import torch.distributed.run, torch.distributed as d; assert d.is_gloo_available()' \
    2>/dev/null || skip "$PY has no PyTorch with gloo and torchrun (install python3-torch)"
start_cluster
mkdir -p "$WORK/bin"
cat >"$WORK/bin/torchrun" <<EOF
#!$PY
import sys
import torch.distributed.elastic.multiprocessing.api as api
_from_str = api.Std.from_str.__func__
api.Std.from_str = classmethod(lambda cls, vm: api.Std(int(vm)) if vm in ("0", "1", "2", "3")
                               else _from_str(cls, vm))
from torch.distributed.run import main
sys.exit(main())
EOF
chmod 0755 "$WORK/bin/torchrun"
user_script w.py <<'EOF'
import os, torch, torch.distributed as dist
e = os.environ.get
dist.init_process_group("gloo")
t = torch.ones(1)
dist.all_reduce(t)
# One write per line: the two workers of a task share its stdout.
os.write(1, f"W {dist.get_rank()}/{dist.get_world_size()} local {e('LOCAL_RANK')}/{e('LOCAL_WORLD_SIZE')} "
      f"group {e('GROUP_RANK')} sum {t.item():g} master {e('MASTER_ADDR')}:{e('MASTER_PORT')} "
      f"omp {e('OMP_NUM_THREADS')} mkl {e('MKL_NUM_THREADS')} torch {torch.get_num_threads()}\n"
         .encode())
EOF
JOB_TIMEOUT=60
# torchrun's log directories (one per agent, in TMPDIR) stay in the cluster's.
tr_srun() { as_user_env TMPDIR="$WORK" -- srun "$@"; }
workers() { echo "$1" | grep '^W ' | sort; }
# "W R/4 local L/2 group G sum 4 ...", R = 2G + L, for R = 0..3.
one_world() {
    [ "$(workers "$1" | awk '{split($2, r, "/"); split($4, l, "/");
         if (r[2] == 4 && r[1] == 2 * $6 + l[1] && l[2] == 2 && $8 == 4) print r[1]}' |
         tr '\n' ,)" = "0,1,2,3," ]
}
in_range() { [ "${1%%:*}" = n1 ] && [ "${1#n1:}" -ge "$CDL_PORT_LO" ] && [ "${1#n1:}" -le "$CDL_PORT_HI" ]; }

echo "== 1. srun --cdl-ddp torchrun --nproc_per_node=2, nothing else ($SECONDS s)"
out=$(tr_srun -N2 --ntasks-per-node=1 -c2 --gres=gpu:2 --cdl-ddp --cdl-bind=closest,verbose \
      bin/torchrun --monitor_interval=0.5 --nproc_per_node=2 w.py 2>&1)
echo "$out" | grep -v '^\*\|^WARNING:torch\|^Setting OMP\|^$'
check "one world of 4 workers over both nodes (all-reduce of ones gives 4)" one_world "$out"
# closest would bind the task to the cores of its local rank's GPU only.
check "--cdl-bind=closest binds a torchrun task as with cores (its workers use all its GPUs)" \
    test "$(echo "$out" | grep -c "^cdl: --cdl-bind=closest: task [01] .*torchrun: its workers use all the task's GPUs, bound as with cores")" = 2
master=$(workers "$out" | awk '{print $10}' | sort -u)
check "the workers' MASTER_ADDR:PORT is the plugin's ($master: n1, the admin range)" \
    eval '[ "$(echo "$master" | wc -l)" = 1 ] && in_range "$master"'
w=1   # the task's 2 CPUs (-c2) over 2 workers
check "each worker has half the task's threads: OMP=MKL=torch=$w" \
    test "$(workers "$out" | awk -v w="$w" '$12 == w && $14 == w && $16 == w' | wc -l)" = 4

# Slurm's default of 1 CPU per task: the plugin says the workers share it.
out=$(tr_srun -N1 -n1 --cdl-ddp bin/torchrun --monitor_interval=0.5 --nproc_per_node=2 \
      --no_python true 2>&1)
echo "$out" | grep '^cdl:'
check "torchrun with 2 workers in a 1-CPU task: a note says they share it, names --cpus-per-task" \
    eval 'echo "$out" | grep -q "^cdl: torchrun starts 2 workers in a task of 1 CPU: .*--cpus-per-task"'

echo "== 2. the guides' forms ($SECONDS s)"
out=$(tr_srun -N2 --ntasks-per-node=1 --cdl-ddp bash -c 'exec bin/torchrun --monitor_interval=0.5 --nnodes=2 \
      --nproc_per_node=2 --node_rank=$SLURM_NODEID --master_addr=$MASTER_ADDR \
      --master_port=$MASTER_PORT w.py' 2>&1)
workers "$out"
check "static rendezvous with --node_rank=\$SLURM_NODEID and the step's address: one world of 4" \
    one_world "$out"
# c10d: the agent whose host is the endpoint serves the store; the two
# emulated nodes are one host named neither n1 nor n2, so say which.
out=$(tr_srun -N2 --ntasks-per-node=1 --cdl-ddp bash -c 'exec bin/torchrun --monitor_interval=0.5 --nnodes=2 \
      --nproc_per_node=2 --rdzv_backend=c10d --rdzv_endpoint=$MASTER_ADDR:$MASTER_PORT \
      --rdzv_id=$SLURM_JOB_ID --rdzv_conf=is_host=$((SLURM_NODEID == 0)) w.py' 2>&1)
workers "$out"
check "c10d rendezvous at \$MASTER_ADDR:\$MASTER_PORT: one world of 4" one_world "$out"

echo "== 3. layouts torchrun cannot run as one job ($SECONDS s)"
out=$(tr_srun -N2 --ntasks-per-node=1 --cdl-ddp bin/torchrun --monitor_interval=0.5 --standalone \
      --nproc_per_node=2 w.py 2>&1); rc=$?
echo "$out" | grep cdl: | head -2
check "--standalone on 2 nodes fails (rc $rc), saying to drop --standalone, and starts no worker" \
    eval '[ "$rc" != 0 ] && [ "$rc" != 124 ] && echo "$out" | grep -q "Drop --standalone" &&
          ! echo "$out" | grep -q "^W "'
out=$(tr_srun -N2 --ntasks-per-node=2 --cdl-ddp bin/torchrun --monitor_interval=0.5 --nnodes=2 \
      --nproc_per_node=2 w.py 2>&1); rc=$?
echo "$out" | grep cdl: | head -2
check "--nnodes=2 with 2 tasks per node fails (rc $rc), naming --ntasks-per-node=1" \
    eval '[ "$rc" != 0 ] && [ "$rc" != 124 ] &&
          echo "$out" | grep -q "torchrun --nnodes=2, but this step has 4 tasks (2 on this node).*--ntasks-per-node=1" &&
          ! echo "$out" | grep -q "^W "'
echo "($SECONDS s)"
finish
