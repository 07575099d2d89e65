#!/bin/bash
# The job shapes users submit beyond one sbatch:
#  1. a sweep as a job array with several tasks on one node: each task is a
#     job of its own id, and their --cdl-ddp steps used to hash those ids to
#     independent MASTER_PORTs, so two tasks met with a chance of 1 in the
#     port range per pair (one failing at rendezvous). Four tasks on n1 in a
#     range of 4 ports now get 4 different ports (before: all different
#     about 1 time in 10). lr-sweep.sbatch refuses a task id past its values.
#  2. templates/chain.sbatch: a run longer than the time limit as a chain
#     (A, then B with --dependency=afterok:A, then C with singleton). A is
#     signalled as at its limit (scancel --batch --signal=USR1), checkpoints
#     and ends COMPLETED; B resumes from A's step and finishes the training;
#     C finds nothing to train. A job of the chain stopped with scancel
#     --signal=TERM ends with 75 and the next waits (DependencyNeverSatisfied);
#     one preempted with a GraceTime checkpoints, ends COMPLETED, and the
#     next resumes.
set -u
. "${top_srcdir:-.}/tests/slurm/lib.sh"
require_cluster_tools
# CDL_PREEMPT: partition `high` preempts `debug` with a GraceTime (cluster.sh).
# A port range of 4, placed by cluster.sh away from every other cluster's
# ports (it was 20000 + RANDOM % 1000 * 4, among the ports cluster.sh gives
# other clusters' slurmctld and slurmd: chain.sbatch's 2-rank store then
# found its port or the alternates above it taken by another test's daemon).
CDL_PREEMPT=1 CDL_PORT_SPAN=4 start_cluster

echo "== 1. four array tasks on one node"
user_script port.sh <<'EOF'
#!/bin/sh
srun --cdl-ddp sh -c 'echo "$MASTER_PORT" >"port.$SLURM_ARRAY_TASK_ID"'
EOF
id=$(submit --array=0-3 -w n1 -n1 -c1 -o /dev/null ./port.sh)
state=$(wait_job "$id")
ports=$(cat "$WORK"/port.[0-3] 2>/dev/null | sort -u | tr '\n' ' ')
check "4 tasks ran ($state), 4 different ports in $CDL_PORT_LO-$CDL_PORT_HI: $ports" \
    test "$(echo $ports | wc -w)" = 4

install -m 0644 "$top_srcdir/templates/lr-sweep.sbatch" "$WORK/lr-sweep.sbatch"
id=$(submit --array=5 -c1 -o sweep5.out --export=ALL,CDL_TRAIN=/bin/false ./lr-sweep.sbatch)
state=$(wait_job "$id")
check "lr-sweep.sbatch: task 5 of 5 values fails saying so ($state)" \
    eval 'echo "$state" | grep -q "ExitCode=2:0" &&
          grep -q "array task .5. has no value: LRS has 5 (submit with sbatch --array=0-4" "$WORK/sweep5.out"' ||
    cat "$WORK/sweep5.out"

echo "== 2. a chain of jobs"
CDL_TRAIN_BIN=${CDL_TRAIN_BIN:-$(readlink -f "$top_builddir/cli/cdl-train" 2>/dev/null)}
if [ -z "$CDL_TRAIN_BIN" ] || ! runuser -u "$CDL_TEST_USER" -- test -x "$CDL_TRAIN_BIN"; then
    echo "SKIP part 2: cli/cdl-train is not built"
    finish
fi
# A small copy of Fashion-MNIST: 6400 training pictures, 50 steps an epoch
# at 2 ranks x 64.
mkdir -p "$WORK/data"
/usr/bin/python3 - "$WORK/data" <<'EOF' || { fail "cannot write the small data set"; finish; }
import gzip, struct, sys
src, dst = "/usr/share/datasets/fashion-mnist", sys.argv[1]
for name, n in (("train", 6400), ("t10k", 640)):
    for kind, item in (("images-idx3", 784), ("labels-idx1", 1)):
        raw = gzip.open(f"{src}/{name}-{kind}-ubyte.gz").read()
        head = 16 if item > 1 else 8
        out = raw[:4] + struct.pack(">I", n) + raw[8:head] + raw[head:head + n * item]
        with gzip.open(f"{dst}/{name}-{kind}-ubyte.gz", "wb") as f:
            f.write(out)
EOF
chmod -R a+rX "$WORK/data"
install -m 0644 "$top_srcdir/templates/chain.sbatch" "$WORK/chain.sbatch"
# 40 epochs of 50 steps: the signals below come after the first epoch's
# record, 39 epochs before the end.
EXPORTS="ALL,CDL_TRAIN=$CDL_TRAIN_BIN,DATA_DIR=$WORK/data,EPOCHS=40,RUN_DIR=runs/chain"
a=$(submit --export="$EXPORTS" --job-name=chain1 -c1 -o chain-%j.out ./chain.sbatch)
b=$(submit --export="$EXPORTS" --job-name=chain1 -c1 -o chain-%j.out --dependency=afterok:"$a" ./chain.sbatch)
c=$(submit --export="$EXPORTS" --job-name=chain1 -c1 -o chain-%j.out --dependency=singleton ./chain.sbatch)
# A's first epoch is recorded: A is in its second epoch. Then A's limit
# comes (the signal --signal=B:USR1@300 would send).
epoch1() { grep -q '"type":"epoch"' "$WORK/runs/chain/metrics.jsonl"; }
check "A trained its first epoch" wait_until "$JOB_TIMEOUT" epoch1 || tail -n 5 "$WORK/chain-$a.out"
as_user scancel --batch --signal=USR1 "$a"
JOB_TIMEOUT=180
state=$(wait_job "$a")
check "A checkpointed and ended COMPLETED ($state)" \
    eval 'echo "$state" | grep -q "JobState=COMPLETED ExitCode=0:0" &&
          grep -q "checkpointed (time limit or preemption)" "$WORK/chain-$a.out"' || tail -n 5 "$WORK/chain-$a.out"
state=$(wait_job "$b")
check "B (afterok:A) resumed A's run and finished it ($state)" \
    eval 'echo "$state" | grep -q "JobState=COMPLETED ExitCode=0:0" &&
          grep -q "resuming from .*, step [1-9]" "$WORK/chain-$b.out" && grep -q "training is done" "$WORK/chain-$b.out"' ||
    tail -n 8 "$WORK/chain-$b.out"
state=$(wait_job "$c")
check "C (singleton) found nothing to train ($state)" \
    eval 'echo "$state" | grep -q "JobState=COMPLETED ExitCode=0:0" &&
          grep -q "nothing to train" "$WORK/chain-$c.out"' || tail -n 8 "$WORK/chain-$c.out"
check "40 epoch records, one per epoch" \
    test "$(grep -c '"type":"epoch"' "$WORK/runs/chain/metrics.jsonl")" = 40

# Stopped by hand with its checkpoint: the chain stops.
EXPORTS="${EXPORTS%,RUN_DIR=*},RUN_DIR=runs/chain2"
a=$(submit --export="$EXPORTS" --job-name=chain2 -c1 -o chain-%j.out ./chain.sbatch)
b=$(submit --export="$EXPORTS" --job-name=chain2 -c1 -o chain-%j.out --dependency=afterok:"$a" ./chain.sbatch)
started() { grep -q '"type":"config"' "$WORK/runs/chain2/metrics.jsonl"; }
wait_until "$JOB_TIMEOUT" started
as_user scancel --signal=TERM "$a"
state=$(wait_job "$a")
check "scancel --signal=TERM: A ended with 75 ($state)" \
    eval 'echo "$state" | grep -q "ExitCode=75:0" && grep -q "the rest of the chain will not start" "$WORK/chain-$a.out"' ||
    tail -n 5 "$WORK/chain-$a.out"
never() { squeue -h -j "$b" -o %r 2>/dev/null | grep -q DependencyNeverSatisfied; }
check "B waits with DependencyNeverSatisfied" wait_until 30 never
scancel "$b"

# One task of a sweep continued in a new submission, as lr-sweep.sbatch's
# header says: the sweep's directory given, the task resumes.
SWEEP="ALL,CDL_TRAIN=$CDL_TRAIN_BIN,CDL_PLOT=/bin/true,DATA_DIR=$WORK/data,EPOCHS=2,RUN_DIR=runs/sweep"
id=$(submit --array=1 -c1 -o sweep1.out --export="$SWEEP,MAX_STEPS=10" ./lr-sweep.sbatch)
wait_job "$id" >/dev/null
id=$(submit --array=1 -c1 -o sweep1b.out --export="$SWEEP,MAX_STEPS=20" ./lr-sweep.sbatch)
state=$(wait_job "$id")
check "lr-sweep.sbatch: task 1 submitted again with the sweep's RUN_DIR resumes at step 10 ($state)" \
    eval 'echo "$state" | grep -q "JobState=COMPLETED ExitCode=0:0" &&
          grep -q "resuming from .*, step 10" "$WORK/sweep1b.out"' || tail -n 5 "$WORK/sweep1b.out"

# Preempted (a `high` job needs both nodes whole): the tasks alone get
# SIGTERM, as with scancel --signal=TERM, but the chain goes on.
EXPORTS="${EXPORTS%,RUN_DIR=*},RUN_DIR=runs/chain3"
a=$(submit --export="$EXPORTS" --job-name=chain3 -c1 -o chain-%j.out ./chain.sbatch)
b=$(submit --export="$EXPORTS" --job-name=chain3 -c1 -o chain-%j.out --dependency=afterok:"$a" ./chain.sbatch)
epoch3() { grep -q '"type":"epoch"' "$WORK/runs/chain3/metrics.jsonl"; }
wait_until "$JOB_TIMEOUT" epoch3
high=$(submit -p high -N2 --exclusive -o /dev/null --wrap true)
state=$(wait_job "$a")
check "preempted: A checkpointed and ended COMPLETED ($state)" \
    eval 'echo "$state" | grep -q "JobState=COMPLETED ExitCode=0:0" &&
          grep -q "checkpointed (time limit or preemption)" "$WORK/chain-$a.out"' || tail -n 5 "$WORK/chain-$a.out"
state=$(wait_job "$b")
check "... and B resumed and finished after the preempting job ($state)" \
    eval 'echo "$state" | grep -q "JobState=COMPLETED ExitCode=0:0" && grep -q "training is done" "$WORK/chain-$b.out"' ||
    tail -n 8 "$WORK/chain-$b.out"
wait_job "$high" >/dev/null

finish
