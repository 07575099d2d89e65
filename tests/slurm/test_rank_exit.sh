#!/bin/bash
# A rank of a --cdl-ddp step that fails ends the step, as under cdlrun:
# Slurm alone (without srun --kill-on-bad-exit) leaves the other ranks
# running, and they wait for the dead one (PyTorch's init_process_group
# 30 minutes, cdl-train CDL_TIMEOUT) until the job's time limit.
#   1. rank 1 exits with 3 on the second node while rank 0 would run for
#      ever: srun ends at once, the message names rank 1, its node and code
#      (the cluster's first srun: step $CDL_FIRST_JOB_ID.0);
#      ranks that all exit with 2 (a bad option) keep srun's status 2;
#   2. a rank killed with SIGKILL stops the step too, without a cdl line;
#   3. PyTorch: rank 1 fails before init_process_group, rank 0 does not
#      wait for it;
#   4. a step without --cdl-ddp is left to Slurm (rank 0 finishes its work),
#      and so is one whose user exported SLURM_KILL_BAD_EXIT=0;
#      a rank that ends with 75 (checkpointed, requeue) stops nothing (the
#      requeue templates in test_templates/test_pytorch depend on it);
#   5. cdl-train ranks started with other settings (a wrapper giving rank 1
#      another --batch-size) all fail before training, naming the difference.
set -u
. "${top_srcdir:-.}/tests/slurm/lib.sh"
PY=${CDL_TEST_PYTHON:-/usr/bin/python3}
require_cluster_tools
start_cluster
# Each srun below would run until this limit without the plugin's stop.
JOB_TIMEOUT=40

user_script rank1.sh <<'EOF2'
#!/bin/sh
# rank1.sh HOW: rank 1 ends as HOW says; every other rank waits for ever,
# as a rank waiting for a dead peer does.
if [ "$SLURM_PROCID" = 1 ]; then
    case $1 in
    exit*) exit "${1#exit}" ;;
    kill) kill -KILL $$ ;;
    esac
fi
[ "$1" = exit75 ] && [ "$SLURM_PROCID" = 0 ] && { echo "rank 0 went on"; exit 75; }
exec sleep 600
EOF2

echo "== 1. rank 1 exits with 3"
out=$(as_user srun -N2 --ntasks-per-node=1 --cdl-ddp ./rank1.sh exit3 2>&1); rc=$?
echo "$out"
check "srun ended instead of waiting for rank 0 (rc $rc, not 124 from timeout)" \
    eval '[ "$rc" != 0 ] && [ "$rc" != 124 ]'
# The plugin's line reaches srun through slurmstepd's output, which srun
# may stop reading once the step is cancelled (seen under load): the node's
# log has it for certain, srun's own line names the task and the code.
log=$CDL_CLUSTER_DIR/log/slurmd.n2.log
check "n2's slurmstepd says why: rank 1 exited with code 3, stopping the step" \
    eval 'grep -q "cdl: --cdl-ddp: rank 1 on n2 exited with code 3: stopping step $CDL_FIRST_JOB_ID.0 (its other ranks" "$log"'
check "... once" test "$(grep -c 'cdl: --cdl-ddp:' "$log")" = 1
check "srun names the task that failed" eval 'echo "$out" | grep -q "n2: task 1: Exited with exit code 3"'

# Ranks that all fail the same way (a bad option: cdl-train exits 2) keep
# their own status: the plugin waits a grace period (3 s) before it kills.
# They fail together, as ranks parsing the same options do: each waits
# (bounded) until all 4 have started. Without that, a node whose tasks
# start more than 3 s after the other node's have ended (a slow
# slurmstepd under load) has them killed, and srun exits 137.
user_script bad-option.sh <<'EOF2'
#!/bin/sh
touch "started.$SLURM_JOB_ID.$SLURM_PROCID"
i=0
while [ "$(ls started.$SLURM_JOB_ID.* | wc -l)" -lt "$SLURM_NTASKS" ] && [ $i -lt 600 ]; do
    i=$((i + 1)); sleep 0.05
done
echo "bad option" >&2
exit 2
EOF2
out=$(as_user srun -N2 --ntasks-per-node=2 --cdl-ddp ./bad-option.sh 2>&1); rc=$?
check "every rank exiting with 2: srun exits 2, not 137 (rc $rc)" test "$rc" = 2 || echo "$out"

# A step the plugin refuses fails every task with the plugin's reason,
# and nothing else.
out=$(as_user srun -N1 -n4 --overcommit --gres=gpu:2 --cdl-mps=1 true 2>&1)
check "a refused step (--cdl-mps=1, 4 tasks, 2 GPUs) says why, with no stop line" \
    eval 'echo "$out" | grep -q "need 4 GPUs, the step has 2" && ! echo "$out" | grep -q "stopping step"' ||
    echo "$out"

echo "== 2. rank 1 killed by SIGKILL"
out=$(as_user srun -N1 -n3 --cdl-ddp ./rank1.sh kill 2>&1); rc=$?
echo "$out"
check "srun ended (rc $rc)" eval '[ "$rc" != 0 ] && [ "$rc" != 124 ]'
step=$(echo "$out" | sed -n 's/.* STEP \([0-9]*\.0\) ON .*/\1/p' | head -n 1)
check "no cdl line: srun's own 'Killed' says it (step $step)" \
    eval '[ -n "$step" ] && ! echo "$out" | grep -q "cdl: --cdl-ddp:" &&
          ! grep -q "cdl: --cdl-ddp:.*step $step " "$CDL_CLUSTER_DIR"/log/slurmd.n*.log'

echo "== 3. PyTorch"
if "$PY" -c 'import torch.distributed as d; assert d.is_gloo_available()' 2>/dev/null; then
    user_script early.py <<'EOF2'
import os, sys
import torch.distributed as dist
if os.environ["RANK"] == "1":
    sys.exit("rank 1: cannot read its data")
dist.init_process_group("gloo", init_method="env://")
EOF2
    out=$(as_user srun -N2 --ntasks-per-node=1 --cdl-ddp "$PY" early.py 2>&1); rc=$?
    echo "$out"
    check "PyTorch rank 0 did not wait in init_process_group for the failed rank 1 (rc $rc)" \
        eval '[ "$rc" != 0 ] && [ "$rc" != 124 ] && echo "$out" | grep -q "rank 1: cannot read its data"'
else
    echo "SKIP part 3: $PY has no PyTorch with gloo"
fi

echo "== 5. ranks that disagree (cdl-train)"
# A wrapper that gives rank 1 another --batch-size: the ranks took
# different numbers of steps, one rank's gradient all-reduce met another's
# validation sums, and the run trained on mixed numbers until a rank died
# ("rank 1 died: allreduce #36 ...") without naming the cause.
CDL_TRAIN_BIN=$(readlink -f "$top_builddir/cli/cdl-train" 2>/dev/null)
if [ -n "$CDL_TRAIN_BIN" ] && runuser -u "$CDL_TEST_USER" -- test -x "$CDL_TRAIN_BIN"; then
    user_script disagree.sh <<EOF2
#!/bin/sh
bs=64; [ "\$RANK" = 1 ] && bs=32
exec $CDL_TRAIN_BIN --dataset synthetic --synthetic-size 2000 --epochs 1 --workers 0 -q --batch-size \$bs
EOF2
    out=$(as_user srun -N2 --ntasks-per-node=1 --cdl-ddp ./disagree.sh 2>&1); rc=$?
    echo "$out"
    check "ranks with another --batch-size fail before training (rc $rc)" \
        eval '[ "$rc" != 0 ] && [ "$rc" != 124 ] && ! echo "$out" | grep -q "died"'
    check "... rank 1 names the difference, rank 0 points at rank 1" \
        eval 'echo "$out" | grep -q "rank 1: error: rank 1 runs with other settings or data than rank 0 (rank 0.s -> this rank.s): --batch-size 64 -> 32" &&
              echo "$out" | grep -q "rank 0: error: 1 rank (rank 1) runs with other settings"'
else
    echo "SKIP part 5: cli/cdl-train is not built"
fi

echo "== 4. left alone"
out=$(as_user srun -N2 --ntasks-per-node=1 --cdl-ddp ./rank1.sh exit75 2>&1); rc=$?
echo "$out"
check "rank 1 ending with 75 stops nothing: rank 0 went on, srun exits 75 (rc $rc)" \
    eval '[ "$rc" = 75 ] && echo "$out" | grep -q "rank 0 went on"'
user_script plain.sh <<'EOF2'
#!/bin/sh
[ "$SLURM_PROCID" = 1 ] && exit 3
echo "rank 0 finished"
EOF2
out=$(as_user srun -N2 --ntasks-per-node=1 ./plain.sh 2>&1); rc=$?
echo "$out"
check "without --cdl-ddp Slurm decides: rank 0 finished (rc $rc)" \
    eval 'echo "$out" | grep -q "rank 0 finished" && ! echo "$out" | grep -q "cdl:"'
user_script waits.sh <<'EOF2'
#!/bin/sh
# Rank 0 finishes once rank 1 has failed (its file), unless it is stopped.
[ "$SLURM_PROCID" = 1 ] && { touch failed.$SLURM_JOB_ID; exit 3; }
while [ ! -e failed.$SLURM_JOB_ID ]; do sleep 0.05; done
exec sleep 5   # past the plugin's 3 s grace: stopped unless opted out
EOF2
out=$(as_user_env SLURM_KILL_BAD_EXIT=0 -- srun -N2 --ntasks-per-node=1 --cdl-ddp ./waits.sh 2>&1); rc=$?
echo "$out"
check "SLURM_KILL_BAD_EXIT=0 exported: rank 1's failure stops nothing, srun exits 3 (rc $rc)" \
    eval '[ "$rc" = 3 ] && ! echo "$out" | grep -q "stopping step"'

finish
