#!/usr/bin/env bash
# Trains LeNet on the real Fashion-MNIST (Debian's dataset-fashion-mnist) for
# two epochs with the default recipe (5,000 training images held out for
# validation) and checks the stated accuracy: at least 88% on the 10000 test
# images after two epochs (the full default run
# of ten epochs ends above 89%, see README). Also checks the metrics file
# and the checkpoints it leaves. The threshold is an outcome of training,
# not an equivalence: rounding (OpenBLAS's kernels, the thread count) sends
# the run on another trajectory, and it ended at 0.8914, 0.8921 and 0.8922
# with the Haswell, Sandybridge and Prescott kernels; 0.88 is well below.
. "${top_srcdir:-.}/tests/e2e/common.sh"
data=/usr/share/datasets/fashion-mnist
[ -f "$data/train-images-idx3-ubyte.gz" ] || { echo "SKIP: $data missing (apt-get install dataset-fashion-mnist)"; exit 77; }

"$CDL_TRAIN" --epochs 2 --ckpt-dir "$TMP/ckpt" --metrics "$TMP/metrics.jsonl" --no-progress \
    >"$TMP/out" 2>"$TMP/err" || { cat "$TMP/out" "$TMP/err"; die "training failed"; }
cat "$TMP/out"
head -n 1 "$TMP/metrics.jsonl" | grep -q '^{"type":"config","run_id":"[0-9a-f]\{32\}","rank":0,' ||
    die "the metrics file does not start with the run's configuration"
[ "$(grep -c '^{"type":"epoch"' "$TMP/metrics.jsonl")" -eq 2 ] || die "expected 2 epoch records"
for key in run_id rank epoch step train_loss train_acc val_loss val_acc images_per_sec seconds; do
    grep '^{"type":"epoch"' "$TMP/metrics.jsonl" | grep -q "\"$key\":" || die "metrics lack $key"
done
tail -n 1 "$TMP/metrics.jsonl" | grep -q '^{"type":"test",.*"test_samples":10000' ||
    die "the metrics file does not end with the test set's record"
acc=$(tail -n 1 "$TMP/metrics.jsonl" | sed 's/.*"test_acc":\([0-9.]*\).*/\1/')
awk -v a="$acc" 'BEGIN { exit !(a >= 0.88) }' || die "test accuracy $acc after 2 epochs is below 0.88"
[ -f "$TMP/ckpt/last.safetensors" ] && [ -f "$TMP/ckpt/best.safetensors" ] || die "checkpoints missing"
ls -a "$TMP/ckpt" | grep -q tmp && die "temporary files left in the checkpoint directory"
echo "PASS: Fashion-MNIST test accuracy $acc after 2 epochs"
