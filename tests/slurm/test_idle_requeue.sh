#!/bin/bash
# A requeuing template whose job is signalled before it can train (its
# --time shorter than the lead of --signal=B:USR1@300, e.g. a try with
# --time=00:04:00) used to requeue itself, or start the chain's next job,
# for ever without progress. Now MAX_IDLE_REQUEUES such ends in a row with
# no new checkpoint stop the job (FAILED, status 1) with a message saying
# why and how to continue; a checkpoint written in between starts the count
# again. The signal is `scancel --batch --signal=USR1`, what --signal does,
# sent once the tasks are up; the tasks stand in for cdl-train signalled
# during set-up: exit 75, nothing written.
# pytorch-requeue.sbatch with the Hugging Face Trainer (TRAIN_PY=
# pytorch/train_hf.py) checkpoints to ckpt/checkpoint-STEP, not last.pt:
# a stand-in that writes one every run, requeued twice at the limit and
# twice for a lost rank, must go on to the end; before, the template saw
# no checkpoint and stopped it as "signalled before it could train" (and
# after MAX_LOST_REQUEUES lost ranks in all).
set -u
. "${top_srcdir:-.}/tests/slurm/lib.sh"
REQUEUING="long-requeue chain lm-gpt finetune-resnet pytorch-requeue"

# The templates are copied one by one, so each has its own idle_stop: the
# copies must stay the same, and each handles a SIGUSR1 before srun.
fn() { sed -n '/^idle_stop() {/,/^}/p' "$top_srcdir/templates/$1.sbatch"; }
for t in $REQUEUING; do
    check "$t.sbatch has idle_stop, the same as long-requeue.sbatch's" \
        eval '[ -n "$(fn "$t")" ] && [ "$(fn "$t")" = "$(fn long-requeue)" ]'
    check "$t.sbatch handles a SIGUSR1 before srun started" \
        grep -q 'SIGUSR1 before training started' "$top_srcdir/templates/$t.sbatch"
done

require_cluster_tools
start_cluster
for t in long-requeue chain; do
    install -m 0644 "$top_srcdir/templates/$t.sbatch" "$WORK/$t.sbatch"
done
user_script setup-train.sh <<'EOS'
#!/bin/bash
trap 'kill $! 2>/dev/null; exit 75' USR1
touch "up.$SLURM_JOB_ID.${SLURM_RESTART_COUNT:-0}.$SLURM_PROCID"
sleep 300 & wait $!
exit 1
EOS
# SIGUSR1 to job $1's script once its run $2's two tasks are up.
signal_when_up() {
    wait_until "$JOB_TIMEOUT" eval "[ -e '$WORK/up.$1.$2.0' ] && [ -e '$WORK/up.$1.$2.1' ]" &&
        scancel --batch --signal=USR1 "$1"
}
EXPORTS="ALL,CDL_TRAIN=./setup-train.sh,MAX_IDLE_REQUEUES=1"

# long-requeue.sbatch: run 1 requeues (1 of at most 1), run 2 stops.
id=$(submit --export="$EXPORTS,RUN_DIR=runs/long" --cpus-per-task=1 -o long.out ./long-requeue.sbatch)
signal_when_up "$id" 0
wait_until 30 grep -q 'checkpointed: requeueing' "$WORK/long.out"
# Slurm delays a requeued job's start by two minutes: start it at once.
start_requeued "$id"
signal_when_up "$id" 1
# Before the fix: a second requeue, and so on for ever.
again() { [ "$(grep -c 'checkpointed: requeueing' "$WORK/long.out")" -ge 2 ]; }
wait_until 30 eval 'job_gone "$id" || again'
again && scancel "$id"
state=$(wait_job "$id")
check "long-requeue.sbatch: stopped after 1 idle requeue ($state)" \
    eval '[ "$(grep -c "checkpointed: requeueing" "$WORK/long.out")" = 1 ] &&
          [ "$state" = "JobState=FAILED ExitCode=1:0 " ] &&
          [ "$(scontrol show job "$id" | grep -o "Restarts=[0-9]*")" = Restarts=1 ]' ||
    cat "$WORK/long.out"
check "... saying why and how to continue" \
    grep -q "signalled before it could train, 2 time(s) in a row (MAX_IDLE_REQUEUES=1): the job's --time is shorter than, or too close to, the lead of --signal=B:USR1@; raise --time or lower the lead, then to continue, sbatch --export=ALL,RUN_DIR=runs/long long-requeue.sbatch" \
    "$WORK/long.out"

# chain.sbatch: job 1 hands on to the next job, job 2 stops the chain; a
# checkpoint written since (a job that trained) starts the count again.
chain() {   # chain N: job N of the chain, signalled when up; prints its state
    local id
    id=$(submit --export="$EXPORTS,RUN_DIR=runs/chain" --cpus-per-task=1 -o "chain-$1.out" ./chain.sbatch)
    signal_when_up "$id" 0
    wait_job "$id"
}
state=$(chain 1)
check "chain.sbatch: job 1, signalled before training, lets the chain go on ($state)" \
    test "$state" = "JobState=COMPLETED ExitCode=0:0 " || cat "$WORK/chain-1.out"
state=$(chain 2)
check "chain.sbatch: job 2, signalled before training again, stops the chain ($state)" \
    eval '[ "$state" = "JobState=FAILED ExitCode=1:0 " ] &&
          grep -q "signalled before it could train, 2 time(s) in a row (MAX_IDLE_REQUEUES=1).* sbatch --export=ALL,RUN_DIR=runs/chain chain.sbatch" "$WORK/chain-2.out"' ||
    cat "$WORK/chain-2.out"
as_user sh -c 'mkdir -p runs/chain/ckpt && touch runs/chain/ckpt/last.safetensors'
state=$(chain 3)
check "chain.sbatch: after a new checkpoint the count starts again ($state)" \
    test "$state" = "JobState=COMPLETED ExitCode=0:0 " || cat "$WORK/chain-3.out"

# pytorch-requeue.sbatch with a Trainer's checkpoints (checkpoint-STEP).
install -m 0644 "$top_srcdir/templates/pytorch-requeue.sbatch" "$WORK/pytorch-requeue.sbatch"
user_script hf-train.sh <<'EOS'
#!/bin/bash
# Run r (0-based) writes DIR/checkpoint-(r+1) as the Trainer does, then:
# runs 0 and 1 exit 75 on SIGUSR1, runs 2 and 3 exit 76 (a lost rank), run 4 0.
trap 'kill $! 2>/dev/null; exit 75' USR1
dir=${!#} r=${SLURM_RESTART_COUNT:-0}
if [ "$SLURM_PROCID" = 0 ] && [ "$r" -lt 4 ]; then
    mkdir -p "$dir/checkpoint-$((r + 1))" && echo '{}' >"$dir/checkpoint-$((r + 1))/trainer_state.json"
fi
case $r in
    0|1) touch "up.$SLURM_JOB_ID.$r.$SLURM_PROCID"; sleep 300 & wait $!; exit 1 ;;
    2|3) exit 76 ;;
esac
exit 0
EOS
id=$(submit --export="ALL,PYTHON=bash,TRAIN_PY=./hf-train.sh,RUN_DIR=runs/hf,MAX_IDLE_REQUEUES=1,MAX_LOST_REQUEUES=1" \
     --cpus-per-task=1 -o hf.out ./pytorch-requeue.sbatch)
for r in 1 2 3 4; do
    [ "$r" -le 2 ] && signal_when_up "$id" $((r - 1))
    # Each requeue: started at once, not after Slurm's two minutes.
    wait_until 60 eval '[ "$(grep -c "requeueing" "$WORK/hf.out")" -ge $r ] || job_gone "$id"'
    job_gone "$id" && break
    start_requeued "$id"
done
state=$(JOB_TIMEOUT=120 wait_job "$id")
check "pytorch-requeue.sbatch with the Trainer's checkpoint-STEP: 2 requeues at the limit, 2 lost ranks, then done ($state)" \
    eval '[ "$state" = "JobState=COMPLETED ExitCode=0:0 " ] &&
          [ "$(grep -c "checkpointed: requeueing" "$WORK/hf.out")" = 2 ] &&
          [ "$(grep -c "a rank was lost: requeueing job $id (1 of at most 1 in a row)" "$WORK/hf.out")" = 2 ] &&
          grep -q "finished with status 0" "$WORK/hf.out"' ||
    cat "$WORK/hf.out"

check "no job is left" jobs_gone
finish
