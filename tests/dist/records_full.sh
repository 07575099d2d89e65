#!/usr/bin/env bash
# Rank 0's --metrics file system fills mid-run on 2 ranks (a 12 KiB tmpfs;
# needs root, skips otherwise): both ranks stop at the same step, agreed as
# a SIGUSR1 stop is, with last.safetensors written there and exit status 1
# (rank 1's error points at rank 0's); --resume auto then ends the run as
# the uninterrupted one does, bit for bit.
. "${top_srcdir:-.}/tests/dist/common.sh"
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root to mount a tmpfs"; exit 77; }
mkdir "$tmp/m"
mount -t tmpfs -o size=12k tmpfs "$tmp/m" 2>/dev/null || { echo "SKIP: cannot mount a tmpfs"; exit 77; }
trap 'umount "$tmp/m" 2>/dev/null; rm -rf "$tmp"' EXIT
common="--model mlp --dataset synthetic --synthetic-size 256 --batch-size 4 --epochs 4
        --val-split 0 --threads 1 --workers 0 --quiet --seed 3 --metrics-every 1"
timeout 300 "$cdlrun" -n 2 "$train" $common --ckpt-dir "$tmp/ref" --metrics "$tmp/ref.jsonl" \
    >"$tmp/out" 2>&1 || { cat "$tmp/out"; fail "the uninterrupted run"; }
timeout 300 "$cdlrun" -n 2 "$train" $common --ckpt-dir "$tmp/ck" --metrics "$tmp/m/run.jsonl" \
    >"$tmp/out" 2>&1 && fail "the run with a full --metrics disk exited 0"
cat "$tmp/out"
step=$(sed -n 's/.*rank 0: error: .*No space left on device.* (step \([0-9]*\)) with a checkpoint in.*/\1/p' "$tmp/out")
[ -n "$step" ] || fail "rank 0 did not say the step and checkpoint"
grep -q "rank 1: error: rank 0 could not write a --metrics or --tensorboard record (rank 0's error says why): stopped at epoch [0-9]*, batch [0-9]* (step $step) with a checkpoint" "$tmp/out" ||
    fail "rank 1 did not stop at step $step"
cp "$tmp/m/run.jsonl" "$tmp/run.jsonl"
umount "$tmp/m"
timeout 300 "$cdlrun" -n 2 "$train" $common --ckpt-dir "$tmp/ck" --metrics "$tmp/run.jsonl" \
    --resume auto >"$tmp/out" 2>&1 || { cat "$tmp/out"; fail "the resumed run"; }
bitwise ref ck
echo "PASS: records_full (stopped at step $step)"
