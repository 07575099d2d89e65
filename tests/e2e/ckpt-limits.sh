#!/usr/bin/env bash
# Checkpoints on a full disk and a read-only mount (small tmpfs mounts,
# removed at the end; needs root, skips otherwise): a checkpoint that does
# not fit stops the run with exit 1 and an error saying what to do, the
# previous last.safetensors stays as it was and loads, no temporary file is
# left; a read-only --ckpt-dir is refused before the first step, saying so
# (not "fix its permissions"); TensorBoard event files on a full disk stop
# the run saying what to do (not only "is the disk full?"); a --metrics or
# --tensorboard file system that fills mid-run stops the run with exit 1
# and a checkpoint at that step (before: none, the steps since the last one
# were lost), from which --resume auto ends as an uninterrupted run does.
. "${top_srcdir:-.}/tests/e2e/common.sh"

[ "$(id -u)" = 0 ] || { echo "SKIP: needs root to mount a tmpfs"; exit 77; }
mkdir "$TMP/full" "$TMP/ro" "$TMP/tbfull" "$TMP/mfull"
mount -t tmpfs -o size=16M tmpfs "$TMP/full" 2>/dev/null ||
    { echo "SKIP: cannot mount a tmpfs"; exit 77; }
trap 'umount "$TMP/full" 2>/dev/null; umount "$TMP/ro" 2>/dev/null; umount "$TMP/tbfull" 2>/dev/null
      umount "$TMP/mfull" 2>/dev/null; rm -rf "$TMP"' EXIT

# mlp's checkpoint with SGD momentum on 3x32x32 samples is 6.6 MB: last and best fit, a third
# (a new one is written before the old is replaced) does not.
common=(--model mlp --dataset synthetic --synthetic-size 256 --batch-size 32 --epochs 4
        --val-split 0 --threads 1 --workers 0 --quiet --seed 3)
expect_status 0 "$CDL_TRAIN" "${common[@]}" --max-steps 3 --ckpt-dir "$TMP/full"
cp "$TMP/full/last.safetensors" "$TMP/step3.safetensors"
cp "$TMP/full/best.safetensors" "$TMP/best3.safetensors"
expect_status 1 "$CDL_TRAIN" "${common[@]}" --max-steps 6 --ckpt-dir "$TMP/full"
expect_err ".safetensors: writing $TMP/full/."
expect_err "No space left on device: the file system of $TMP/full is full or over quota: free space there or write checkpoints to another directory"
cmp -s "$TMP/full/last.safetensors" "$TMP/step3.safetensors" ||
    die "the previous last.safetensors changed"
cmp -s "$TMP/full/best.safetensors" "$TMP/best3.safetensors" ||
    die "the previous best.safetensors changed"
[ -z "$(ls -A "$TMP/full" | grep -v '^\.lock$' | grep -v '^last\.safetensors$' | grep -v '^best\.safetensors$')" ] ||
    die "files left behind: $(ls -A "$TMP/full")"
expect_status 0 "$CDL_EVAL" "$TMP/full/last.safetensors"

mount -t tmpfs -o size=1M,ro tmpfs "$TMP/ro" || die "cannot mount a read-only tmpfs"
expect_status 1 "$CDL_TRAIN" "${common[@]}" --max-steps 1 --ckpt-dir "$TMP/ro"
expect_err "--ckpt-dir $TMP/ro is on a read-only file system: name a directory on a writable one"

mount -t tmpfs -o size=64k tmpfs "$TMP/tbfull" || die "cannot mount a small tmpfs"
dd if=/dev/zero of="$TMP/tbfull/fill" bs=4k 2>/dev/null   # until it is full
expect_status 1 "$CDL_TRAIN" "${common[@]}" --max-steps 1 --tensorboard "$TMP/tbfull/tb"
expect_err "failed: No space left on device: its file system is full or over quota: free space there or give --tensorboard another directory, then resume"

# Records on a file system of 12 KiB: full after some 60 step records of 128.
long=(--model mlp --dataset synthetic --synthetic-size 256 --batch-size 8 --epochs 4
      --val-split 0 --threads 1 --workers 0 --quiet --seed 3 --metrics-every 1)
expect_status 0 "$CDL_TRAIN" "${long[@]}" --metrics "$TMP/ref.jsonl"
for what in metrics tensorboard; do
    mount -t tmpfs -o size=12k tmpfs "$TMP/mfull" || die "cannot mount a small tmpfs"
    rm -rf "$TMP/ck"
    if [ $what = metrics ]; then
        out=("--metrics" "$TMP/mfull/run.jsonl")
    else
        out=("--metrics" "$TMP/run.jsonl" "--tensorboard" "$TMP/mfull/tb")
    fi
    rm -f "$TMP/run.jsonl"
    expect_status 1 "$CDL_TRAIN" "${long[@]}" "${out[@]}" --ckpt-dir "$TMP/ck"
    expect_err "No space left on device"
    expect_err "no more records are written; the run stops after this step"
    grep -q "with a checkpoint in $TMP/ck (--resume auto goes on from it)" "$TMP/err" ||
        die "$what on a full disk: no checkpoint said: $(cat "$TMP/err")"
    step=$(sed -n 's/.*(step \([0-9]*\)) with a checkpoint.*/\1/p' "$TMP/err")
    [ -n "$step" ] && [ "$step" -gt 1 ] && [ "$step" -lt 128 ] ||
        die "$what on a full disk: stopped at step '$step'"
    [ $what = metrics ] && cp "$TMP/mfull/run.jsonl" "$TMP/run.jsonl"
    umount "$TMP/mfull"
    # Room again (the records go on in a file on another file system).
    expect_status 0 "$CDL_TRAIN" "${long[@]}" --metrics "$TMP/run.jsonl" --ckpt-dir "$TMP/ck" \
        --resume auto
    want=$(grep '"type":"epoch"' "$TMP/ref.jsonl" | tail -1 | grep -o '"val_loss":[^,]*')
    got=$(grep '"type":"epoch"' "$TMP/run.jsonl" | tail -1 | grep -o '"val_loss":[^,]*')
    [ -n "$want" ] && [ "$got" = "$want" ] ||
        die "$what on a full disk: resumed run ends with $got, uninterrupted with $want"
done
echo "PASS: ckpt-limits"
