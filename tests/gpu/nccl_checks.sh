#!/bin/bash
# Data-parallel checks that mean most on two real GPUs with NCCL (real
# streams, real ncclBroadcast and ncclCommAbort); tests/gpu/run.sh step 6
# runs them when it has 2 or more GPUs, tests/fakegpu (ddp.sh,
# nccl_stall.sh) checks the same host code on fake GPUs in make check:
# 1. --clip-grad with --shard-optimizer gives the weights without it, bit
#    for bit: the sharded step is queued on NCCL's stream like the
#    unsharded one and the norm is computed the same way on the device
#    (docs/data-parallel.md);
# 2. rank 1 stopped (SIGSTOP) in the middle of training: rank 0 fails
#    within CDL_TIMEOUT (cdlrun --timeout 10) with an error naming the step
#    and what to do, cdlrun exits non-zero, and no rank process is left.
# Usage (in the build directory, with launcher/cdlrun and
# tests/dist/weights_cmp built): nccl_checks.sh TRAIN_BINARY LOG_DIR
# Prints one "LABEL|RESULT" line per check; exits 1 when one failed.
set -u
train=$1 logs=$2
cdlrun=launcher/cdlrun
data=(--dataset synthetic --synthetic-size 2048 --batch-size 64 --no-progress --device cuda)
rc=0
say() { printf '%s|%s\n' "$1" "$2"; }

# 1. sharded against unsharded, with --clip-grad (every step clips at 0.05)
ok=1
for s in plain shard; do
    extra=()
    [ $s = shard ] && extra=(--shard-optimizer)
    rm -rf "$logs/clip-$s"
    timeout -k 10 300 "$cdlrun" -n 2 --timeout 60 "$train" "${data[@]}" --epochs 1 \
        --max-steps 12 --clip-grad 0.05 --ckpt-dir "$logs/clip-$s" "${extra[@]}" \
        >"$logs/clip-$s.log" 2>&1 || { say "6 --clip-grad, $s" "FAIL  see $logs/clip-$s.log"; ok=0 rc=1; }
done
if [ $ok = 1 ]; then
    if tests/dist/weights_cmp "$logs/clip-plain/last.safetensors" "$logs/clip-shard/last.safetensors" \
        --bitwise >"$logs/clip-cmp.log" 2>&1; then
        say "6 --clip-grad, --shard-optimizer vs not" "PASS  bitwise equal"
    else
        say "6 --clip-grad, --shard-optimizer vs not" "FAIL  $(tail -1 "$logs/clip-cmp.log" | cut -c1-90)"
        rc=1
    fi
fi

# 2. a stopped rank
out=$logs/stall.log
rm -rf "$logs/stall"
timeout -k 10 300 "$cdlrun" -n 2 -v --label --timeout 10 "$train" "${data[@]}" --epochs 1000 \
    --shard-optimizer --clip-grad 0.05 --ckpt-dir "$logs/stall" --ckpt-every 5 >"$out" 2>&1 &
pid=$!
i=0
while [ ! -s "$logs/stall/last.safetensors" ] && kill -0 $pid 2>/dev/null && [ $i -lt 1200 ]; do
    i=$((i + 1))   # bounded: 120 s for the first checkpoint
    sleep 0.1
done
victim=$(sed -n 's/^cdlrun: rank 1: pid \([0-9]*\),.*/\1/p' "$out")
if [ ! -s "$logs/stall/last.safetensors" ] || [ -z "$victim" ]; then
    kill -9 $pid 2>/dev/null
    wait $pid 2>/dev/null
    say "6 rank 1 stopped: rank 0 times out" "FAIL  training did not reach a checkpoint (see $out)"
    exit 1
fi
kill -STOP "$victim"
wait $pid
st=$?
kill -9 "$victim" 2>/dev/null   # only if cdlrun failed to: checked below
pids=$(sed -n 's/^cdlrun: rank [0-9]*: pid \([0-9]*\),.*/\1/p' "$out")
left=
for p in $pids; do kill -0 "$p" 2>/dev/null && left="$left $p"; done
if [ $st = 124 ] || [ $st = 137 ]; then
    say "6 rank 1 stopped: rank 0 times out" "FAIL  hung until killed after 300 s (see $out)"
    rc=1
elif [ $st = 0 ] || ! grep -q "rank 0: error: step [0-9]* did not finish within 10 s (CDL_TIMEOUT).*waits for a rank that died or hangs" "$out"; then
    say "6 rank 1 stopped: rank 0 times out" "FAIL  exit $st, no timeout error from rank 0 (see $out)"
    rc=1
elif [ -n "$left" ]; then
    say "6 rank 1 stopped: rank 0 times out" "FAIL  processes left:$left (see $out)"
    rc=1
else
    say "6 rank 1 stopped: rank 0 times out" "PASS  exit $st, $(grep -o 'step [0-9]* did not finish within 10 s' "$out" | head -1)"
fi
exit $rc
