#!/usr/bin/env bash
# --stage DIR on a node-local disk too small for the dataset: an error giving
# both sizes before anything is copied, not a copy that runs until the disk
# is full; with room, the copy is made. Needs root to mount a small tmpfs
# (removed at the end); skips otherwise.
. "${top_srcdir:-.}/tests/e2e/common.sh"

data=/usr/share/datasets/fashion-mnist
[ -f "$data/train-images-idx3-ubyte.gz" ] || { echo "SKIP: $data missing"; exit 77; }
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root to mount a tmpfs"; exit 77; }
mkdir "$TMP/local"
mount -t tmpfs -o size=4M tmpfs "$TMP/local" 2>/dev/null ||
    { echo "SKIP: cannot mount a tmpfs"; exit 77; }
trap 'umount "$TMP/local" 2>/dev/null; rm -rf "$TMP"' EXIT

common=(--model mlp --data-dir "$data" --epochs 1 --max-steps 1 --val-split 0 --threads 1 --quiet)
expect_status 1 "$CDL_TRAIN" "${common[@]}" --stage "$TMP/local"
expect_err "--stage: copying $data needs 30.9 MB but $TMP/local has 4.2 MB free: free space there, give another --stage DIR, or use --stage off"
[ -z "$(ls -A "$TMP/local")" ] || die "files were copied to a disk too small: $(ls -AR "$TMP/local")"

mount -o remount,size=40M "$TMP/local" || die "cannot enlarge the tmpfs"
expect_status 0 "$CDL_TRAIN" "${common[@]}" --stage "$TMP/local"
for f in "$data"/*; do
    cmp -s "$f" "$TMP"/local/fashion-mnist-*/"$(basename "$f")" || die "staged $(basename "$f") differs"
done
echo "PASS: stage-full"
