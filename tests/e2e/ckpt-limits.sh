#!/usr/bin/env bash
# Checkpoints on a full disk and a read-only mount (small tmpfs mounts,
# removed at the end; needs root, skips otherwise): a checkpoint that does
# not fit stops the run with exit 1 and an error saying what to do, the
# previous last.safetensors stays as it was and loads, no temporary file is
# left; a read-only --ckpt-dir is refused before the first step, saying so
# (not "fix its permissions"); TensorBoard event files on a full disk stop
# the run saying what to do (not only "is the disk full?").
. "${top_srcdir:-.}/tests/e2e/common.sh"

[ "$(id -u)" = 0 ] || { echo "SKIP: needs root to mount a tmpfs"; exit 77; }
mkdir "$TMP/full" "$TMP/ro" "$TMP/tbfull"
mount -t tmpfs -o size=16M tmpfs "$TMP/full" 2>/dev/null ||
    { echo "SKIP: cannot mount a tmpfs"; exit 77; }
trap 'umount "$TMP/full" 2>/dev/null; umount "$TMP/ro" 2>/dev/null; umount "$TMP/tbfull" 2>/dev/null
      rm -rf "$TMP"' EXIT

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
echo "PASS: ckpt-limits"
