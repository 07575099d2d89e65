#!/bin/bash
# A node lost in the middle of a requeue-template job (templates/
# long-requeue.sbatch), and what happens to the user's work.
#   1. n2's slurmd, the step's slurmstepd there and rank 1 die at once (as
#      when the node fails): rank 0 on n1 names the lost rank and exits 76
#      (CDL_EXIT_PEER_LOST), srun exits 76; the script waits while n2 does
#      not answer (slurmctld would only mark it down after SlurmdTimeout),
#      requeues the job once it does, and the second run resumes from the
#      last checkpoint and finishes: the job ends COMPLETED. It used to exit
#      1 ("rank 1 lost its connection") and the job ended FAILED, the rest
#      of the run lost.
#   2. A bad input (status 1 on every rank) is not requeued: FAILED.
#   3. A rank lost in every run is requeued MAX_LOST_REQUEUES times in a
#      row, then the job stops, saying how to continue.
#   4. The same for PyTorch (templates/pytorch-requeue.sbatch running
#      pytorch/train_ddp.py, gloo): rank 0 sees "Connection closed by
#      peer" (or "reset by peer"), names the loss and exits 76; the job
#      is requeued and resumes from last.pt. It used to print gloo's
#      traceback and exit 1: the job ended FAILED. A rank that fails on
#      its own (an exception) still ends the job FAILED: the others see
#      its mark in the store and exit 1.
set -u
. "${top_srcdir:-.}/tests/slurm/lib.sh"
CDL_TRAIN_BIN=${CDL_TRAIN_BIN:-$(readlink -f "$top_builddir/cli/cdl-train" 2>/dev/null)}
[ -n "$CDL_TRAIN_BIN" ] && [ -x "$CDL_TRAIN_BIN" ] || skip "cli/cdl-train is not built yet"
require_cluster_tools
start_cluster
runuser -u "$CDL_TEST_USER" -- test -x "$CDL_TRAIN_BIN" || skip "$CDL_TRAIN_BIN not executable by $CDL_TEST_USER"
JOB_TIMEOUT=240
install -m 0644 "$top_srcdir/templates/long-requeue.sbatch" "$WORK/long-requeue.sbatch"
DATA=/usr/share/datasets/fashion-mnist
[ -s "$DATA/train-images-idx3-ubyte.gz" ] || [ -s "$DATA/train-images-idx3-ubyte" ] ||
    skip "no Fashion-MNIST in $DATA (dataset-fashion-mnist)"
# Checkpoints every 10 steps and step records, so the test sees both. The
# first run trains until the test kills n2; a requeued one stops at the
# step the test writes into max-steps (--max-steps may change on resume).
user_script train.sh <<EOF
#!/bin/sh
more=
[ -n "\${SLURM_RESTART_COUNT:-}" ] && [ -s max-steps ] && more="--max-steps \$(cat max-steps)"
exec "$CDL_TRAIN_BIN" "\$@" --ckpt-every 10 --metrics-every 2 \$more
EOF
# start_now ID: a requeued job waits two minutes before Slurm starts it
# (start_requeued, lib.sh, says why not "now").
start_now() { start_requeued "$1"; }

echo "== 1. n2 dies mid-run"
id=$(submit -N2 --ntasks-per-node=1 --cpus-per-task=1 -o lost.out \
     --export="ALL,CDL_TRAIN=./train.sh,DATA_DIR=$DATA,EPOCHS=50,MAX_STEPS=0,RUN_DIR=runs/lost" \
     ./long-requeue.sbatch)
wait_until 120 test -s "$WORK/runs/lost/ckpt/last.safetensors"
# Rank 1's process (its environment names the job and the rank), and the
# slurmstepd it runs under, on n2.
rank1() {
    local p e
    for p in $(pgrep -u "$CDL_TEST_USER"); do
        e=$(tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null) || continue
        echo "$e" | grep -qx "SLURM_JOB_ID=$id" && echo "$e" | grep -qx "SLURM_PROCID=1" &&
            case "$(readlink "/proc/$(awk '{print $4}' "/proc/$p/stat")/exe")" in
            */slurmstepd*) echo "$p"; return 0 ;;
            esac
    done
    return 1
}
task=$(rank1)
stepd=$([ -n "$task" ] && awk '{print $4}' "/proc/$task/stat")
slurmd=$(cat "$CDL_CLUSTER_DIR/run/harness.slurmd.n2.pid")
check "rank 1 runs on n2 under its slurmstepd (task ${task:-none}, stepd ${stepd:-none})" \
    eval '[ -n "$task" ] && tr "\0" "\n" <"/proc/$task/environ" | grep -qx SLURMD_NODENAME=n2 &&
          case "$(readlink "/proc/$stepd/exe")" in */slurmstepd*) true ;; *) false ;; esac' || finish
# All three stop at once, then die: none can report the others' end.
kill -STOP "$slurmd" "$stepd" "$task"
kill -KILL "$slurmd" "$stepd" "$task"
# The resumed run trains 20 steps past the last one recorded, then ends.
last=$(grep '"type":"step"' "$WORK/runs/lost/metrics.jsonl" | tail -n 1 | sed -n 's/.*"step":\([0-9]*\),.*/\1/p')
echo $((${last:-0} + 20)) >"$WORK/max-steps"
chown "$CDL_TEST_USER" "$WORK/max-steps"
wait_until 60 grep -q "do not answer" "$WORK/lost.out"
check "rank 0 names the lost rank and exits 76; the script waits for n2" \
    eval 'grep -q "rank 0: a rank of this run was lost .*exit status 76" "$WORK/lost.out" &&
          grep -q "rank 1 on n2 lost its connection" "$WORK/lost.out" &&
          grep -q "node(s) n2 do not answer" "$WORK/lost.out"' || cat "$WORK/lost.out"
"$SLURM_TESTS_DIR/cluster.sh" restart "$CDL_CLUSTER_DIR" n2 || fail "n2 did not come back"
wait_until 90 grep -q "requeueing job $id" "$WORK/lost.out"
start_now "$id"
state=$(wait_job "$id")
cat "$WORK/lost.out"
check "... then requeues the job (1 of at most 3 in a row)" \
    grep -q "a rank was lost: requeueing job $id (1 of at most 3 in a row); it resumes from the last checkpoint" "$WORK/lost.out"
at=$(grep '"type":"config"' "$WORK/runs/lost/metrics.jsonl" | tail -n 1 | sed -n 's/.*"start_step":\([0-9]*\),.*/\1/p')
check "the second run resumed from the last checkpoint (step ${at:-none}) and finished ($state)" \
    eval '[ "${state%% *}" = JobState=COMPLETED ] && grep -q "^run 2 " "$WORK/lost.out" &&
          grep -q "finished with status 0" "$WORK/lost.out" && [ "${at:-0}" -ge 10 ]'

echo "== 2. a bad input is not requeued"
id=$(submit -N2 --ntasks-per-node=1 --cpus-per-task=1 -o bad.out \
     --export="ALL,CDL_TRAIN=./train.sh,DATA_DIR=$WORK/no-such-dir,EPOCHS=1,RUN_DIR=runs/bad" \
     ./long-requeue.sbatch)
state=$(wait_job "$id")
check "a missing --data-dir fails the job, not requeued ($state)" \
    eval '[ "${state%% *}" = JobState=FAILED ] && ! grep -q "requeueing" "$WORK/bad.out" &&
          [ "$(scontrol show job "$id" | grep -o "Restarts=[0-9]*")" = Restarts=0 ]' ||
    cat "$WORK/bad.out"

echo "== 3. a rank lost in every run"
user_script lost-always.sh <<'EOF'
#!/bin/sh
echo "rank $SLURM_PROCID: a rank was lost (test double)" >&2
exit 76
EOF
id=$(submit -N1 -n2 --cpus-per-task=1 -o always.out \
     --export="ALL,CDL_TRAIN=./lost-always.sh,MAX_LOST_REQUEUES=1,RUN_DIR=runs/always" \
     ./long-requeue.sbatch)
wait_until 60 grep -q "requeueing job $id" "$WORK/always.out"
start_now "$id"
state=$(wait_job "$id")
cat "$WORK/always.out"
check "requeued once, then stopped (MAX_LOST_REQUEUES=1) saying how to continue ($state)" \
    eval '[ "$(grep -c "requeueing job" "$WORK/always.out")" = 1 ] &&
          grep -q "a rank was lost again after 1 requeue(s) without a new checkpoint (MAX_LOST_REQUEUES=1): not requeueing; to continue, sbatch --export=ALL,RUN_DIR=runs/always long-requeue.sbatch" "$WORK/always.out" &&
          [ "${state%% *}" = JobState=FAILED ]'

echo "== 4. PyTorch: n2 dies mid-run"
PY=${CDL_TEST_PYTHON:-/usr/bin/python3}
if ! "$PY" -c 'import torch.distributed as d; assert d.is_gloo_available()' 2>/dev/null; then
    echo "note: $PY has no PyTorch with gloo (python3-torch): the PyTorch part is skipped"
    finish
fi
mkdir -p "$WORK/pytorch"
install -m 0644 "$top_srcdir/templates/pytorch/train_ddp.py" "$WORK/pytorch/"
install -m 0644 "$top_srcdir/templates/pytorch-requeue.sbatch" "$WORK/pytorch-requeue.sbatch"
chown -R "$CDL_TEST_USER" "$WORK/pytorch"
id=$(submit -N2 --ntasks-per-node=1 --cpus-per-task=1 -o torch-lost.out \
     --export="ALL,PYTHON=$PY,EPOCHS=8,SAMPLES=32768,RUN_DIR=runs/torch-lost" \
     ./pytorch-requeue.sbatch)
wait_until 120 test -s "$WORK/runs/torch-lost/ckpt/last.pt"
task=$(rank1)
stepd=$([ -n "$task" ] && awk '{print $4}' "/proc/$task/stat")
slurmd=$(cat "$CDL_CLUSTER_DIR/run/harness.slurmd.n2.pid")
check "PyTorch rank 1 runs on n2 under its slurmstepd (task ${task:-none})" \
    eval '[ -n "$task" ] && [ -n "$stepd" ]' || finish
kill -STOP "$slurmd" "$stepd" "$task"
kill -KILL "$slurmd" "$stepd" "$task"
wait_until 60 grep -q "do not answer" "$WORK/torch-lost.out"
check "PyTorch rank 0 names the lost rank and exits 76; the script waits for n2" \
    eval 'grep -q "rank 0: a rank of this run was lost .*Connection \(closed\|reset\) by peer" "$WORK/torch-lost.out" &&
          grep -q "rank 0: exit status 76" "$WORK/torch-lost.out" &&
          grep -q "node(s) n2 do not answer" "$WORK/torch-lost.out"' || cat "$WORK/torch-lost.out"
"$SLURM_TESTS_DIR/cluster.sh" restart "$CDL_CLUSTER_DIR" n2 || fail "n2 did not come back"
wait_until 90 grep -q "requeueing job $id" "$WORK/torch-lost.out"
start_now "$id"
state=$(wait_job "$id")
cat "$WORK/torch-lost.out"
check "the PyTorch job was requeued, resumed from last.pt and finished ($state)" \
    eval 'grep -q "a rank was lost: requeueing job $id (1 of at most 3 in a row)" "$WORK/torch-lost.out" &&
          grep -q "^resumed from runs/torch-lost/ckpt/last.pt" "$WORK/torch-lost.out" &&
          grep -q "^epoch 8/8" "$WORK/torch-lost.out" && grep -q "finished with status 0" "$WORK/torch-lost.out" &&
          [ "${state%% *}" = JobState=COMPLETED ]'

# A rank that raises (here: rank 1 cannot write its --save file, after the
# last epoch; rank 0's directory exists) marks the store; rank 0, whose
# barrier then fails, exits 1, not 76.
install -d -o "$CDL_TEST_USER" "$WORK/w-0"
id=$(submit -N2 --ntasks-per-node=1 --cpus-per-task=1 --cdl-ddp -o torch-bug.out \
     --wrap="srun $PY pytorch/train_ddp.py --epochs 1 --samples 512 --save 'w-{rank}/w.pt'")
state=$(wait_job "$id")
cat "$WORK/torch-bug.out"
check "a PyTorch rank that raises ends the job FAILED, not as a lost rank ($state)" \
    eval '[ "${state%% *}" = JobState=FAILED ] && ! grep -q "exit status 76" "$WORK/torch-bug.out"'

finish
