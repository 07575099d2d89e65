#!/bin/bash
# templates/lm-gpt.sbatch as a multi-day language-model run is used: a GPT
# on 2 ranks (DEVICE=cpu), stopped before its time limit three times
# (SIGUSR1 to the batch script, what #SBATCH --signal=B:USR1@300 does),
# requeued and resumed each time, then run to MAX_STEPS. The run must be the
# one never stopped: every step record once and in order (the template wrote
# none: a corpus that never ends an epoch showed no training loss or
# tokens/s), an evaluation at every EVAL_EVERY steps once, the learning rate
# of the schedule at each step, and a TensorBoard event file per start
# whose scalars cover each step once.
set -u
. "${top_srcdir:-.}/tests/slurm/lib.sh"
PY=${CDL_TEST_PYTHON:-/usr/bin/python3}
require_cluster_tools
[ -x "$PY" ] || skip "no $PY"
CDL_TRAIN_BIN=$(readlink -f "$top_builddir/cli/cdl-train" 2>/dev/null)
[ -n "$CDL_TRAIN_BIN" ] && [ -x "$CDL_TRAIN_BIN" ] || skip "cli/cdl-train is not built"
runuser -u "$CDL_TEST_USER" -- test -x "$CDL_TRAIN_BIN" ||
    skip "$CDL_TEST_USER cannot run $CDL_TRAIN_BIN (a build under a private directory)"
start_cluster
install -m 0644 "$top_srcdir/templates/lm-gpt.sbatch" "$WORK/lm-gpt.sbatch"
for i in $(seq 3000); do echo "line $i of a small text, with some words $((i * 7 % 13))"; done \
    >"$WORK/lm.txt"
chmod 0644 "$WORK/lm.txt"

# Each of the first three runs is signalled once it has written a step
# record, and must still be training when the signal arrives: with 600
# steps in all (about 3 s of training under load), the third run trained
# its last 381 steps between its first record and the signal (the test,
# slurmctld, slurmd and the batch script all take their turn first), ended
# "finished with status 0" and the job was never requeued a third time.
# 3000 steps leave each signal seconds of training to meet.
MAX=3000
# MODEL through sbatch's environment: --export would cut it at its commas.
id=$(as_user_env MODEL=gpt:n_layer=2,n_head=2,n_embd=32 -- sbatch --parsable \
     --export="ALL,CDL_TRAIN=$CDL_TRAIN_BIN,DEVICE=cpu,DATA=text:lm.txt,BLOCK=64,BATCH=8,ACCUM=2,MAX_STEPS=$MAX,WARMUP=20,EVAL_EVERY=25,METRICS_EVERY=5,RUN_DIR=runs/lm" \
     --gres=gpu:2 --ntasks-per-node=2 --cpus-per-task=1 -o lm.out ./lm-gpt.sbatch | cut -d';' -f1)
M=$WORK/runs/lm/metrics.jsonl
last_step() { sed -n 's/.*"type":"step".*"step":\([0-9]*\),.*/\1/p' "$M" 2>/dev/null | tail -n 1; }
# Whether start N (its config record) has written a step record: it trains.
trains() { awk -v n="$1" '/"type":"config"/ { c++ } c == n && /"type":"step"/ { f = 1 }
                          END { exit !f }' "$M" 2>/dev/null; }
for n in 1 2 3; do
    # A step record of this start: it is training.
    wait_until 120 trains "$n" || { cat "$WORK/lm.out"; fail "run $n wrote no step record"; break; }
    scancel --signal=USR1 --batch "$id"
    wait_until 60 sh -c "[ \$(grep -c 'checkpointed: requeueing' '$WORK/lm.out') = $n ]"
    # Slurm holds a requeued job two minutes; the test starts it 2 s on.
    start_requeued "$id"
done
state=$(JOB_TIMEOUT=240 wait_job "$id")
check "lm-gpt.sbatch: requeued 3 times, then completed ($state)" \
    eval '[ "${state%% *}" = JobState=COMPLETED ] && grep -q "^run 4 of job" "$WORK/lm.out" &&
          grep -q "finished with status 0" "$WORK/lm.out"' || cat "$WORK/lm.out"
check "lm-gpt.sbatch: one TensorBoard event file per start" \
    eval '[ "$(ls "$WORK/runs/lm/tb" | grep -c "^events\.out\.tfevents\.")" = 4 ]' ||
    ls -la "$WORK/runs/lm/tb"
for f in "$WORK"/runs/lm/tb/events.out.tfevents.*; do
    "$PY" "$top_srcdir/tests/e2e/tfevents_read.py" "$f" || fail "tfevents_read.py rejects $f"
    echo   # one JSON object a line (blank lines are skipped)
done >"$WORK/tb.jsonl"
check "lm-gpt.sbatch: the metrics and TensorBoard of the resumed run are those of one run" \
    "$PY" - "$M" "$WORK/tb.jsonl" "$MAX" <<'PY'
import json, math, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
events = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
top = int(sys.argv[3])
starts = [r["start_step"] for r in recs if r["type"] == "config"]
assert len(starts) == 4 and starts[0] == 0 and starts == sorted(set(starts)), starts
steps = [r for r in recs if r["type"] == "step"]
want = list(range(5, top + 1, 5))
assert [r["step"] for r in steps] == want, [r["step"] for r in steps]
assert len({r["run_id"] for r in recs}) == 1, "the run id changed"
for r in steps:   # warm-up over 20 steps, then a cosine to 0 at MAX_STEPS
    s = r["step"] - 1
    lr = 6e-4 * (s + 1) / 20 if s < 20 else 3e-4 * (1 + math.cos(math.pi * (s - 20) / (top - 20)))
    assert abs(r["lr"] - lr) <= 1e-6 * 6e-4 + 1e-5 * lr, (r["step"], r["lr"], lr)
    assert r["tokens_per_sec"] > 0 and "grad_norm" in r, r
# Every 25 steps a validation, once: an eval record, or the epoch record
# where an epoch ends (its own validation), and best.safetensors kept.
spe = recs[0]["steps_per_epoch"]
evals = [r["step"] for r in recs if r["type"] == "eval"]
assert evals == [s for s in range(25, top, 25) if s % spe], evals
ends = [r["step"] for r in recs if r["type"] == "epoch"]
assert ends == list(range(spe, top + 1, spe)), ends
# TensorBoard: each start's file begins its session after the step it
# resumed at, and holds that start's steps, so all files together cover
# each step once.
got = {}
for ev, start in zip(events, starts):
    assert ev["starts"] == [start + 1], (ev["starts"], start)
    for tag, pts in ev["scalars"].items():
        got.setdefault(tag, []).extend(s for s, _ in pts)
assert got["step/loss"] == want, got["step/loss"]
assert got["step/tokens_per_sec"] == want
assert got["eval/val_loss"] == evals, got["eval/val_loss"]
assert got["epoch/val_loss"] == ends, got["epoch/val_loss"]
PY

# Trained on past its MAX_STEPS with another learning rate: a new job with
# the same RUN_DIR refuses the changed --lr and --decay-steps (and says how
# to go on: a plain sbatch would start from step 0 in a new RUN_DIR), then
# goes on with RESUME_ALLOW from step $MAX.
more="ALL,CDL_TRAIN=$CDL_TRAIN_BIN,DEVICE=cpu,DATA=text:lm.txt,BLOCK=64,BATCH=8,ACCUM=2,WARMUP=20,EVAL_EVERY=25,RUN_DIR=runs/lm,MAX_STEPS=$((MAX + 20)),LR=3e-4"
id=$(as_user_env MODEL=gpt:n_layer=2,n_head=2,n_embd=32 -- sbatch --parsable --export="$more" \
     --gres=gpu:2 --ntasks-per-node=2 --cpus-per-task=1 -o more.out ./lm-gpt.sbatch | cut -d';' -f1)
wait_job "$id" >/dev/null
check "lm-gpt.sbatch: a refused resume says how to continue that run" \
    eval 'grep -q -- "--lr 0.0006 -> 0.0003" "$WORK/more.out" &&
          grep -q "to continue this run once that is fixed: sbatch --export=ALL,RUN_DIR=runs/lm lm-gpt.sbatch" "$WORK/more.out"' ||
    cat "$WORK/more.out"
id=$(as_user_env MODEL=gpt:n_layer=2,n_head=2,n_embd=32 RESUME_ALLOW=lr,decay-steps -- \
     sbatch --parsable --export="$more" \
     --gres=gpu:2 --ntasks-per-node=2 --cpus-per-task=1 -o more2.out ./lm-gpt.sbatch | cut -d';' -f1)
state=$(wait_job "$id")
check "lm-gpt.sbatch: RESUME_ALLOW=lr,decay-steps goes on from step $MAX ($state)" \
    eval '[ "${state%% *}" = JobState=COMPLETED ] && grep -q "\"start_step\":$MAX," "$M" &&
          [ "$(last_step)" = $((MAX + 20)) ]' || cat "$WORK/more2.out"
finish
