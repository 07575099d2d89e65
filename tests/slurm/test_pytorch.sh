#!/bin/bash
# PyTorch jobs under the plugin (docs/pytorch.md), with Debian's
# python3-torch on the CPU (gloo), on the two emulated nodes:
#   1. templates/pytorch/train_ddp.py on 2 nodes x 2 tasks under --cdl-ddp
#      ends with the same weights on every rank, equal to one process
#      trained on the global batch (float64: rounding differences between
#      summation orders stay at 1e-16 and do not grow in a few SGD steps);
#   2. two PyTorch jobs running at the same time on the same nodes get
#      different MASTER_PORTs, and both rendezvous;
#   3. --cdl-mps=4 with the fake MPS control: 4 PyTorch replicas on one
#      fake GPU see the pipe directory and 25 % of the threads, pick gloo;
#      the daemon is gone after the step and after scancel;
#   4. threads: OMP_NUM_THREADS, MKL_NUM_THREADS and torch.get_num_threads()
#      are the task's CPU share; --cdl-bind=cores masks are what
#      os.sched_getaffinity() reports, disjoint between tasks;
#   5. the templates pytorch-ddp, pytorch-mps-pack run to completion, and
#      pytorch-requeue checkpoints on SIGUSR1, requeues, resumes, finishes.
set -u
. "${top_srcdir:-.}/tests/slurm/lib.sh"
PY=${CDL_TEST_PYTHON:-/usr/bin/python3}
require_cluster_tools
"$PY" -c 'import torch.distributed as d; assert d.is_gloo_available()' 2>/dev/null ||
    skip "$PY has no PyTorch with gloo (install python3-torch)"
start_cluster
mkdir -p "$WORK/pytorch"
install -m 0644 "$top_srcdir"/templates/pytorch/*.py "$WORK/pytorch/"
for t in pytorch-ddp pytorch-mps-pack pytorch-requeue; do
    install -m 0644 "$top_srcdir/templates/$t.sbatch" "$WORK/$t.sbatch"
done
chown -R "$CDL_TEST_USER" "$WORK/pytorch"
JOB_TIMEOUT=120
banners() { echo "$1" | grep '^rank [0-9]'; }

# ---------------------------------------------------------------- 1. DDP
echo "== 1. DDP ($SECONDS s)"
out=$(as_user srun -N2 --ntasks-per-node=2 --cdl-ddp "$PY" pytorch/train_ddp.py --double \
      --epochs 2 --samples 1024 --batch-size 32 --save 'ddp-{rank}.pt' 2>&1)
echo "$out"
check "4 ranks started: 0/4..3/4, two per node" \
    test "$(banners "$out" | awk '{print $2, $4, $6}' | sort | tr '\n' ,)" = \
         "0/4 0/2 0,1/4 1/2 0,2/4 0/2 1,3/4 1/2 1,"
# n1:PORT with PORT in this cluster's port_range (cluster.sh's env.sh).
in_range() { [ "${1%%:*}" = n1 ] && [ "${1#n1:}" -ge "$CDL_PORT_LO" ] && [ "${1#n1:}" -le "$CDL_PORT_HI" ]; }
master=$(banners "$out" | awk '{print $8}' | sort -u)
check "every rank has the same MASTER_ADDR:PORT ($master): n1 and a port of the admin range" \
    eval '[ "$(echo "$master" | wc -l)" = 1 ] && in_range "$master"'
as_user "$PY" pytorch/train_ddp.py --double --epochs 2 --samples 1024 --batch-size 128 \
    --save single.pt >/dev/null 2>&1
cmp=$(cd "$WORK" && "$PY" - <<'EOF'
import torch
one = torch.load("single.pt")
ranks = [torch.load(f"ddp-{r}.pt") for r in range(4)]
between = max((w[k] - ranks[0][k]).abs().max().item() for w in ranks for k in one)
vs_one = max((w[k] - one[k]).abs().max().item() for w in ranks for k in one)
print(f"{between:.3g} {vs_one:.3g}")
EOF
)
echo "max |w_rank - w_rank0| and max |w_rank - w_single|: ${cmp:-none}"
read -r between vs_one <<<"${cmp:-9 9}"
check "weights equal on all ranks (max difference $between)" \
    "$PY" -c "import sys; sys.exit(not $between <= 1e-12)"
check "DDP weights equal to one process with the global batch (max difference $vs_one <= 1e-6)" \
    "$PY" -c "import sys; sys.exit(not $vs_one <= 1e-6)"

# --------------------------------------------------- 2. two jobs at once
echo "== 2. two jobs at once ($SECONDS s)"
# Each job's rank 0 holds its rendezvous port (TCPStore) from
# init_process_group until it has seen the other job's port file: the two
# stores are bound at the same time, on the same host.
user_script pytorch/overlap.py <<'EOF'
import os, sys, time
import torch, torch.distributed as dist
me, other = sys.argv[1], sys.argv[2]
dist.init_process_group("gloo", init_method="env://")
if dist.get_rank() == 0:
    with open(f"port.{me}.tmp", "w") as f:
        f.write(os.environ["MASTER_PORT"])
    os.replace(f"port.{me}.tmp", f"port.{me}")
deadline = time.monotonic() + 60
while not os.path.exists(f"port.{other}"):
    if time.monotonic() > deadline:
        sys.exit(f"job {me}: job {other} never ran at the same time")
    time.sleep(0.05)
t = torch.ones(1)
dist.all_reduce(t)
assert t.item() == dist.get_world_size()
dist.barrier()
print(f"job {me} rank {dist.get_rank()} done")
EOF
user_script overlap.sh <<EOF
#!/bin/sh
srun $PY pytorch/overlap.py "\$1" "\$2"
EOF
rm -f "$WORK"/port.*
ida=$(submit -N2 --ntasks-per-node=1 --cdl-ddp -o overlap-a.out ./overlap.sh a b)
idb=$(submit -N2 --ntasks-per-node=1 --cdl-ddp -o overlap-b.out ./overlap.sh b a)
sa=$(wait_job "$ida")
sb=$(wait_job "$idb")
pa=$(cat "$WORK/port.a" 2>/dev/null) pb=$(cat "$WORK/port.b" 2>/dev/null)
echo "concurrent jobs $ida ($sa) port $pa, $idb ($sb) port $pb"
cat "$WORK/overlap-a.out" "$WORK/overlap-b.out"
check "two concurrent PyTorch jobs on n1,n2 both rendezvoused and completed" \
    eval '[ "${sa%% *}" = JobState=COMPLETED ] && [ "${sb%% *}" = JobState=COMPLETED ]'
check "... with different MASTER_PORTs" eval '[ -n "$pa" ] && [ -n "$pb" ] && [ "$pa" != "$pb" ]'

# ---------------------------------------------------------------- 3. MPS
echo "== 3. MPS ($SECONDS s)"
user_script mps_task.sh <<EOF
#!/bin/sh
# The replica checks its pipe directory, then trains.
[ -d "\$CUDA_MPS_PIPE_DIRECTORY" ] && echo "pipe-dir-ok \$SLURM_PROCID"
exec $PY pytorch/train_ddp.py "\$@"
EOF
out=$(as_user srun -N1 -n4 --gres=gpu:1 --cdl-mps=4 ./mps_task.sh --epochs 1 --samples 512 2>&1)
echo "$out"
check "4 replicas on one GPU, each found its MPS pipe directory" \
    test "$(echo "$out" | grep -c '^pipe-dir-ok')" = 4
check "each sees 4 replicas per GPU, 25 % of the threads, the step's pipe dir, gloo" \
    test "$(banners "$out" | grep -cE "replicas_per_gpu 4 mps_pipe $RUNTIME/[0-9]+\.0\.n1/pipe mps_pct 25 device cpu backend gloo")" = 4
check "one daemon for the step; quit sent at its end" \
    test "$(count_records daemon)$(count_records cmd:quit)" = 11
check "MPS step: directories gone" runtime_empty
check "MPS step: no daemon left" no_user_daemon
control_up() { ls "$RUNTIME"/*/pipe/control >/dev/null 2>&1; }
as_user srun -N1 -n4 --gres=gpu:1 --cdl-mps=4 -o mps-long.out ./mps_task.sh --epochs 100000 \
    --samples 512 >/dev/null 2>&1 &
wait_until 60 sh -c "[ \$(grep -c '^rank' '$WORK/mps-long.out' 2>/dev/null) = 4 ]"
job=$(running_job)
check "scancel: 4 replicas training, daemon up" eval '[ -n "$job" ] && control_up && ! no_user_daemon'
scancel "$job"
check "scancel: directories gone" wait_until 30 runtime_empty
check "scancel: daemon gone" wait_until 30 no_user_daemon
wait

# ------------------------------------------------------- 4. threads, binding
echo "== 4. threads, binding ($SECONDS s)"
user_script pytorch/threads.py <<'EOF'
import os, torch
e = os.environ.get
print(f"T {e('SLURM_PROCID')} omp {e('OMP_NUM_THREADS')} mkl {e('MKL_NUM_THREADS')} "
      f"torch {torch.get_num_threads()} cpus {','.join(map(str, sorted(os.sched_getaffinity(0))))}")
EOF
ncpu=$(nproc)
share() { local s=$1; [ $((ncpu / $2)) -lt "$s" ] && s=$((ncpu / $2)); [ "$s" -lt 1 ] && s=1; echo "$s"; }
out=$(as_user srun -N1 -n1 -c2 --cdl-ddp "$PY" pytorch/threads.py)
echo "$out"
w=$(share 2 1)
check "-c2, one task: OMP=MKL=torch threads=$w (the CPU share)" \
    eval 'echo "$out" | grep -q "^T 0 omp $w mkl $w torch $w "'
out=$(as_user srun -N1 -n2 -c2 --cdl-ddp --cdl-bind=cores "$PY" pytorch/threads.py)
echo "$out"
# "T RANK omp N mkl N torch N cpus LIST": every count must be min(share, |LIST|).
bound_ok() {
    local n=0 _t _r _o omp _m mkl _p torch _c cpus want
    while read -r _t _r _o omp _m mkl _p torch _c cpus; do
        want=$(share 2 2)
        [ "$(echo "$cpus" | tr ',' '\n' | wc -l)" -lt "$want" ] && want=$(echo "$cpus" | tr ',' '\n' | wc -l)
        [ "$omp/$mkl/$torch" = "$want/$want/$want" ] || return 1
        n=$((n + 1))
    done < <(echo "$out" | grep '^T ')
    [ "$n" = 2 ]
}
check "--cdl-bind=cores: each task's threads = min(share, its CPUs), as PyTorch sees them" bound_ok
check "--cdl-bind=cores: os.sched_getaffinity() masks of the two tasks are disjoint" \
    test "$(echo "$out" | awk '/^T/ {print $10}' | tr ',' '\n' | sort | uniq -d | wc -l)" = 0
out=$(as_user_env OMP_NUM_THREADS=3 -- srun -N1 -n1 --cdl-ddp "$PY" pytorch/threads.py)
check "a user's OMP_NUM_THREADS is kept" eval 'echo "$out" | grep -q "^T 0 omp 3 "'

# ------------------------------------------------------------ 5. templates
echo "== 5. templates ($SECONDS s)"
EXPORTS="ALL,PYTHON=$PY,EPOCHS=1"
id=$(submit --export="$EXPORTS,RUN_DIR=runs/ddp" --gres=gpu:2 --ntasks-per-node=2 \
     --cpus-per-task=1 -o tddp.out ./pytorch-ddp.sbatch)
state=$(wait_job "$id")
check "pytorch-ddp.sbatch ran on 2 nodes x 2 tasks ($state)" \
    eval '[ "${state%% *}" = JobState=COMPLETED ] && [ "$(grep -c "^rank [0-3]/4" "$WORK/tddp.out")" = 4 ]' ||
    cat "$WORK/tddp.out"
id=$(submit --export="$EXPORTS,RUN_DIR=runs/mps" --ntasks=4 --cpus-per-task=1 -o tmps.out \
     ./pytorch-mps-pack.sbatch)
state=$(wait_job "$id")
check "pytorch-mps-pack.sbatch ran 4 replicas on one GPU with gloo ($state)" \
    eval '[ "${state%% *}" = JobState=COMPLETED ] && [ "$(grep -c "replicas_per_gpu 4 .* backend gloo" "$WORK/tmps.out")" = 4 ]' ||
    cat "$WORK/tmps.out"
# Requeue: SIGUSR1 to the batch script (what --signal=B:USR1 does before the
# limit) once the first epoch is done; the run (12 epochs) is far from its
# end then, so the signal certainly meets a running step.
id=$(submit --export="ALL,PYTHON=$PY,EPOCHS=12,SAMPLES=8192,RUN_DIR=runs/long" \
     --cpus-per-task=1 -o tlong.out ./pytorch-requeue.sbatch)
wait_until 90 grep -q "^epoch 1/12" "$WORK/tlong.out"
state=$(requeue_on_usr1 "$id" tlong.out)
cat "$WORK/tlong.out"
check "pytorch-requeue.sbatch: SIGUSR1 -> checkpoint by every rank -> exit 75 -> requeue" \
    eval 'grep -q "^signal: checkpoint at epoch" "$WORK/tlong.out" && grep -q "checkpointed: requeueing" "$WORK/tlong.out"'
check "pytorch-requeue.sbatch: run 2 resumed from the checkpoint and finished ($state)" \
    eval 'grep -q "^resumed from runs/long/ckpt/last.pt" "$WORK/tlong.out" && grep -q "^epoch 12/12" "$WORK/tlong.out" &&
          grep -q "finished with status 0" "$WORK/tlong.out" && [ "${state%% *}" = JobState=COMPLETED ]'

finish
