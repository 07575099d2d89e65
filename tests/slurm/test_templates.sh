#!/bin/bash
# templates/: every sbatch script parses (bash -n) and is accepted by sbatch
# (--test-only, with its #SBATCH --cdl-* lines) on the test cluster; the
# CPU templates run with `sbatch` when cdl-train is built, the requeue one
# is interrupted with SIGUSR1 and shown to resume and finish. The PyTorch
# templates run in test_pytorch.sh and test_lightning.sh.
set -u
. "${top_srcdir:-.}/tests/slurm/lib.sh"
TEMPLATES="single-gpu ddp-multinode mps-pack cpu-ddp long-requeue lr-sweep
           pytorch-ddp pytorch-mps-pack lightning pytorch-requeue lm-gpt finetune-resnet chain"

for t in $TEMPLATES; do
    check "bash -n templates/$t.sbatch" bash -n "$top_srcdir/templates/$t.sbatch"
done

require_cluster_tools
CDL_PREEMPT=1 start_cluster   # partition `high` preempts `debug` (cluster.sh)
for t in $TEMPLATES; do
    install -m 0644 "$top_srcdir/templates/$t.sbatch" "$WORK/$t.sbatch"
done

# Resources shrunk to the test cluster (2 nodes x 4 CPUs x 2 GPUs); the
# command line overrides the #SBATCH lines, the --cdl-* lines stay.
fit() {
    case $1 in
    single-gpu) echo "--cpus-per-task=1" ;;
    ddp-multinode|pytorch-ddp|lightning|lm-gpt|finetune-resnet) echo "--gres=gpu:2 --ntasks-per-node=2 --cpus-per-task=1" ;;
    mps-pack|pytorch-mps-pack) echo "--ntasks=4 --cpus-per-task=1" ;;
    *) echo "--cpus-per-task=1" ;;
    esac
}
for t in $TEMPLATES; do
    # shellcheck disable=SC2046
    err=$(as_user sbatch --test-only $(fit "$t") "./$t.sbatch" 2>&1)
    rc=$?
    check "sbatch --test-only accepts templates/$t.sbatch" \
        eval '[ $rc = 0 ] && echo "$err" | grep -q "to start at"' || echo "$err"
done

# Running them needs cdl-train (cli/, another area of the project); until it
# is built, tests/slurm/fake-train.sh stands in for it: it records the rank
# contract and checkpoints/exits 75 on SIGUSR1 like cdl-train, so the
# templates' own logic (options, --cdl-* lines, signal forwarding, requeue,
# resume) is exercised on Slurm either way.
CDL_TRAIN_BIN=${CDL_TRAIN_BIN:-$(readlink -f "$top_builddir/cli/cdl-train" 2>/dev/null)}
if [ -z "$CDL_TRAIN_BIN" ] || ! runuser -u "$CDL_TEST_USER" -- test -x "$CDL_TRAIN_BIN" ||
   ! "$CDL_TRAIN_BIN" --help 2>&1 | grep -q -- '--resume'; then
    install -m 0755 "$SLURM_TESTS_DIR/fake-train.sh" "$CDL_CLUSTER_DIR/bin/fake-train"
    CDL_TRAIN_BIN=$CDL_CLUSTER_DIR/bin/fake-train
    FAKE_TRAIN=1
    echo "NOTE: cli/cdl-train is not built: running the templates with tests/slurm/fake-train.sh"
else
    FAKE_TRAIN=0
fi
DATA=/usr/share/datasets/fashion-mnist
CDL_PLOT_BIN=$(readlink -f "$top_builddir/cli/cdl-plot" 2>/dev/null)
EXPORTS="ALL,CDL_TRAIN=$CDL_TRAIN_BIN,CDL_PLOT=${CDL_PLOT_BIN:-cdl-plot},DATA_DIR=$DATA,EPOCHS=1,MAX_STEPS=20"

# Two epochs: cpu-ddp.sbatch warms up for one, and cdl-train refuses a
# cosine with no steps left after its warm-up (MAX_STEPS ends it anyway).
id=$(submit --export="${EXPORTS/EPOCHS=1/EPOCHS=2},RUN_DIR=runs/cpu" --cpus-per-task=1 -o cpu.out ./cpu-ddp.sbatch)
state=$(wait_job "$id")
check "cpu-ddp.sbatch ran to completion ($state)" test "${state%% *}" = JobState=COMPLETED ||
    tail -n 20 "$WORK/cpu.out"
check "cpu-ddp.sbatch wrote metrics" test -s "$WORK/runs/cpu/metrics.jsonl"
if [ "$FAKE_TRAIN" = 1 ]; then
    check "cpu-ddp.sbatch: the step had the contract (rank 0 of 4, 1 thread)" \
        grep -q '"rank":"0","world":"4","omp":"1"' "$WORK/runs/cpu/metrics.jsonl"
fi

id=$(submit --export="$EXPORTS,RUN_DIR=runs/sweep" --array=0-1 --cpus-per-task=1 -o sweep-%a.out ./lr-sweep.sbatch)
wait_job "${id}" >/dev/null
check "lr-sweep.sbatch: one run per array task" \
    eval '[ -s "$WORK/runs/sweep/lr-0.01/metrics.jsonl" ] && [ -s "$WORK/runs/sweep/lr-0.02/metrics.jsonl" ]'
if [ "$FAKE_TRAIN" = 0 ] && command -v gnuplot >/dev/null; then
    # Both tasks plot; the last to end drew both runs.
    check "lr-sweep.sbatch ends by drawing its runs (sweep.png, sweep.svg)" \
        eval 'head -c 8 "$WORK/runs/sweep/sweep.png" | od -An -tx1 | tr -d " \n" | grep -qx 89504e470d0a1a0a &&
              grep -q ">lr-0.01 train<" "$WORK/runs/sweep/sweep.svg" && grep -q ">lr-0.02 train<" "$WORK/runs/sweep/sweep.svg"' ||
        tail -n 5 "$WORK"/sweep-*.out
fi

# The requeue template: SIGUSR1 to the batch script (what --signal=B:USR1
# does before the limit), checkpoint + exit 75, requeue, resume, finish.
id=$(submit --export="ALL,CDL_TRAIN=$CDL_TRAIN_BIN,DATA_DIR=$DATA,EPOCHS=2,MAX_STEPS=0,RUN_DIR=runs/long" \
     --cpus-per-task=1 -o long.out ./long-requeue.sbatch)
wait_until 60 sh -c "grep -q '^run 1 ' '$WORK/long.out' && ls '$WORK/runs/long' >/dev/null"
# The first epoch's record (fake-train: its start line), so the resumed
# run has one epoch left.
wait_until 90 grep -qE '"type":"epoch"|"event":"start"' "$WORK/runs/long/metrics.jsonl"
scancel --signal=USR1 --batch "$id"
# Slurm delays a requeued job's start by two minutes; the test need not wait
# (but starts it 2 s on: slurmd refuses a credential made in the second the
# job's old one was revoked, and the job would end FAILED).
requeued() { scontrol show job "$1" 2>/dev/null | grep -q 'JobState=PENDING'; }
wait_until 60 sh -c "grep -q 'checkpointed: requeueing' '$WORK/long.out'"
start_requeued "$id"
wait_until 120 grep -q '^run 2 ' "$WORK/long.out"
state=$(wait_job "$id")
cat "$WORK/long.out"
check "long-requeue.sbatch: checkpointed and requeued on SIGUSR1" grep -q 'checkpointed: requeueing' "$WORK/long.out"
check "long-requeue.sbatch: second run resumed and finished" \
    eval 'grep -q "^run 2 " "$WORK/long.out" && grep -q "finished with status 0" "$WORK/long.out"'
check "long-requeue.sbatch: job completed ($state)" test "${state%% *}" = JobState=COMPLETED
if [ "$FAKE_TRAIN" = 1 ]; then
    check "long-requeue.sbatch: the second run resumed from the checkpoint (restart count 1)" \
        eval 'grep -q "\"restart\":\"1\"" "$WORK/runs/long/metrics.jsonl" && grep -q "\"event\":\"resumed\",\"from\":\"step-123\"" "$WORK/runs/long/metrics.jsonl"'
fi

# Stopping it by hand (docs/training.md, "Stopping a Slurm job"). `scancel
# --signal=TERM` reaches the tasks only: they checkpoint and exit 75, and
# the script used to requeue the job, which came back after the user had
# stopped it; now it ends COMPLETED, saying how to resume, and a new job
# with the same RUN_DIR resumes at the step it stopped at. A plain
# `scancel` (SIGTERM to the script as well) never requeues.
if [ "$FAKE_TRAIN" = 0 ]; then
    # Step records, so the test signals a run that has begun training.
    user_script train-steps.sh <<EOF
#!/bin/sh
exec "$CDL_TRAIN_BIN" "\$@" --metrics-every 2
EOF
    started='"type":"step"'
    TRAIN_STOP=$WORK/train-steps.sh
else
    started='"event":"start"'
    TRAIN_STOP=$CDL_TRAIN_BIN
fi
STOP_EXPORTS="ALL,CDL_TRAIN=$TRAIN_STOP,DATA_DIR=$DATA,EPOCHS=2,RUN_DIR=runs/stop"
id=$(submit --export="$STOP_EXPORTS,MAX_STEPS=0" --cpus-per-task=1 -o stop.out ./long-requeue.sbatch)
wait_until 90 grep -q "$started" "$WORK/runs/stop/metrics.jsonl"
scancel --signal=TERM "$id"
state=$(wait_job "$id")
cat "$WORK/stop.out"
check "long-requeue.sbatch: scancel --signal=TERM stops it, not requeued ($state)" \
    eval '[ "${state%% *}" = JobState=COMPLETED ] && ! grep -q "requeueing" "$WORK/stop.out" &&
          [ "$(scontrol show job "$id" | grep -o "Restarts=[0-9]*")" = Restarts=0 ]'
check "... it says how to resume" \
    grep -q "checkpointed and stopped: to continue, sbatch --export=ALL,RUN_DIR=runs/stop long-requeue.sbatch" "$WORK/stop.out"
if [ "$FAKE_TRAIN" = 0 ]; then
    at=$(sed -n 's/^stopped by signal at .* (step \([0-9]*\)): checkpoint written.*/\1/p' "$WORK/stop.out")
    check "... every rank stopped at one step with a checkpoint (step ${at:-none})" \
        eval '[ -n "$at" ] && [ -s "$WORK/runs/stop/ckpt/last.safetensors" ]'
    id=$(submit --export="$STOP_EXPORTS,MAX_STEPS=$((${at:-0} + 2))" --cpus-per-task=1 -o stop2.out ./long-requeue.sbatch)
    state=$(wait_job "$id")
    check "... a new job with that RUN_DIR resumes at step $at and finishes ($state)" \
        eval '[ "${state%% *}" = JobState=COMPLETED ] && grep -q "finished with status 0" "$WORK/stop2.out" &&
              grep "\"type\":\"config\"" "$WORK/runs/stop/metrics.jsonl" | tail -n 1 | grep -q "\"start_step\":$at,"' ||
        cat "$WORK/stop2.out"
fi
id=$(submit --export="${STOP_EXPORTS}2,MAX_STEPS=0" --cpus-per-task=1 -o cancel.out ./long-requeue.sbatch)
wait_until 90 grep -q "$started" "$WORK/runs/stop2/metrics.jsonl"
scancel "$id"
state=$(wait_job "$id")
check "long-requeue.sbatch: a plain scancel is not undone by a requeue ($state)" \
    eval '[ "${state%% *}" = JobState=CANCELLED ] && ! grep -q "requeueing job" "$WORK/cancel.out" &&
          grep -q "^Slurm ended the job (srun status [0-9]*): a requeued job, or a new one given RUN_DIR=runs/stop2, resumes" "$WORK/cancel.out" &&
          [ "$(scontrol show job "$id" | grep -o "Restarts=[0-9]*")" = Restarts=0 ]' || cat "$WORK/cancel.out"

# Preempted (a job of partition `high` needs both nodes whole): with a
# GraceTime Slurm sends SIGTERM to the tasks alone, as scancel --signal=TERM
# does, and a job that ends in its grace time is not requeued by Slurm:
# the script must requeue it, and it does (PreemptTime is set).
id=$(submit --export="${STOP_EXPORTS}3,MAX_STEPS=0" --cpus-per-task=1 -o preempt.out ./long-requeue.sbatch)
wait_until 90 grep -q "$started" "$WORK/runs/stop3/metrics.jsonl"
high=$(submit -p high -N2 --exclusive -o high.out --wrap true)
wait_until 90 grep -q "checkpointed: requeueing job $id" "$WORK/preempt.out"
check "long-requeue.sbatch: preempted, it checkpoints and requeues itself" \
    eval 'wait_until 30 requeued "$id" && grep -q "checkpointed: requeueing job $id" "$WORK/preempt.out"' ||
    cat "$WORK/preempt.out"
state=$(wait_job "$high")
check "... and the preempting job ran ($state)" test "${state%% *}" = JobState=COMPLETED
scancel "$id"
wait_job "$id" >/dev/null

# lm-gpt.sbatch's MODEL holds commas: sbatch --export splits its list at
# them (the header's example used to, and trained another model), so the
# header passes it through sbatch's environment; it must arrive whole.
user_script show-args.sh <<'EOF'
#!/bin/sh
[ "$SLURM_PROCID" = 0 ] && echo "args: $*"
exit 0
EOF
spec=gpt:n_layer=2,n_head=2,n_embd=64
# shellcheck disable=SC2046
id=$(as_user_env MODEL=$spec DATA=text:/dev/null -- sbatch --parsable \
     --export="ALL,CDL_TRAIN=./show-args.sh" $(fit lm-gpt) -o gpt-env.out ./lm-gpt.sbatch)
wait_job "$id" >/dev/null
check "lm-gpt.sbatch: MODEL=$spec from sbatch's environment reaches cdl-train whole" \
    grep -q -- "--model $spec --dataset text:/dev/null " "$WORK/gpt-env.out" ||
    cat "$WORK/gpt-env.out"
# shellcheck disable=SC2046
id=$(submit --export="ALL,CDL_TRAIN=./show-args.sh,MODEL=$spec" $(fit lm-gpt) -o gpt-export.out \
     ./lm-gpt.sbatch)
wait_job "$id" >/dev/null
check "... while --export=ALL,MODEL=$spec cuts it at the first comma (why the header says so)" \
    grep -q -- "--model gpt:n_layer=2 " "$WORK/gpt-export.out"

# A template whose --cpus-per-task line the user removed (a default of one
# CPU per task is enough for them): `set -u` stopped the script at
# --threads "$SLURM_CPUS_PER_TASK" (unset without -c) and cdl-train never
# ran. Slurm's default of one CPU is used instead.
for t in cpu-ddp ddp-multinode long-requeue lr-sweep single-gpu lm-gpt; do
    sed '/^#SBATCH --cpus-per-task/d' "$WORK/$t.sbatch" >"$WORK/noc-$t.sbatch"
    arr=
    [ "$t" = lr-sweep ] && arr=--array=0
    # shellcheck disable=SC2046,SC2086
    id=$(as_user_env DATA=text:/dev/null -- sbatch --parsable --export="ALL,CDL_TRAIN=./show-args.sh,RUN_DIR=runs/noc-$t" \
         $(fit "$t" | sed 's/--cpus-per-task=1//') $arr -o "noc-$t.out" "./noc-$t.sbatch")
    wait_job "${id%%;*}" >/dev/null
    check "$t.sbatch without its --cpus-per-task line runs cdl-train with --threads 1" \
        grep -q -- "--threads 1 " "$WORK/noc-$t.out" || cat "$WORK/noc-$t.out"
done

# A test that times out leaves a job running: stopping the cluster cancels
# it, and neither its slurmstepd nor its task outlives the cluster.
user_script linger.sh <<'EOF'
#!/bin/sh
echo $$ >linger.pid
exec sleep 600
EOF
submit -o linger.out ./linger.sh >/dev/null
wait_until 30 test -s "$WORK/linger.pid"
task=$(cat "$WORK/linger.pid" 2>/dev/null)
stepd=$(awk '{print $4}' "/proc/$task/stat" 2>/dev/null)
check "a job runs when the cluster stops (task $task, its slurmstepd $stepd)" \
    eval 'case "$(readlink "/proc/$stepd/exe")" in */slurmstepd*) true ;; *) false ;; esac'
stop_cluster
check "stopping the cluster ended the job's slurmstepd and task" \
    eval '[ -n "$task" ] && [ ! -e "/proc/$task" ] && [ -n "$stepd" ] && [ ! -e "/proc/$stepd" ]'

finish
