#!/usr/bin/env bash
# SIGUSR1 or SIGTERM that reaches cdl-train before it is ready for it: a
# Slurm job whose --signal=B:USR1@T lead is longer than the time it has
# left, or a scancel as it starts. The default action killed the process
# (status 138 or 143: the job failed and was not requeued, a chain broke),
# and a signal its launcher held blocked was never seen (the run trained to
# its end). Now the signal stops the run at its set-up with status 75, as a
# signal during set-up does, leaving the checkpoint there as it was. The
# signal is sent and held pending before cdl-train is started (blocked,
# it survives exec): no timing.
. "${top_srcdir:-.}/tests/e2e/common.sh"
PY=${CDL_TEST_PYTHON:-/usr/bin/python3}
[ -x "$PY" ] || PY=python3
signalled() {   # signalled SIG CMD...: CMD started with SIG already pending
    "$PY" -c 'import os, signal, sys
s = getattr(signal, sys.argv[1])
signal.pthread_sigmask(signal.SIG_BLOCK, [s])
os.kill(os.getpid(), s)
os.execv(sys.argv[2], sys.argv[2:])' "$@"
}
common=(--model mlp --dataset synthetic --synthetic-size 256 --batch-size 32 --epochs 2
        --val-split 0 --threads 1 --workers 0 --seed 3)

# The first job of a chain: nothing trained, nothing written; the next goes on.
expect_status 75 signalled SIGUSR1 "$CDL_TRAIN" "${common[@]}" --ckpt-dir "$TMP/ck"
grep -qF "stopped by a signal while loading the data, before the first step" "$TMP/out" "$TMP/err" ||
    { cat "$TMP/out" "$TMP/err" >&2; die "no word of the early stop"; }
[ ! -e "$TMP/ck/last.safetensors" ] || die "a checkpoint was written"
# A later job: its checkpoint stays as it was.
expect_status 0 "$CDL_TRAIN" "${common[@]}" --ckpt-dir "$TMP/ck" --max-steps 3 -q
cp "$TMP/ck/last.safetensors" "$TMP/step3.safetensors"
expect_status 75 signalled SIGTERM "$CDL_TRAIN" "${common[@]}" --ckpt-dir "$TMP/ck" -q
cmp -s "$TMP/ck/last.safetensors" "$TMP/step3.safetensors" || die "last.safetensors changed"
expect_status 0 "$CDL_TRAIN" "${common[@]}" --ckpt-dir "$TMP/ck" -q
# Nothing to resume from: an error that says so, not a requeue.
expect_status 1 signalled SIGUSR1 "$CDL_TRAIN" "${common[@]}"
expect_err "with no --ckpt-dir: a restart would begin again"
exit 0
