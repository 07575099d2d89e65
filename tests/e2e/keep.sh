#!/usr/bin/env bash
# --keep-last N, --keep-every N: a long campaign keeps numbered checkpoints
# (step-NNNNNNNN.safetensors) beside last.safetensors, the multiples of
# --keep-every for good and the N newest others, and removes the rest after
# each checkpoint; only files of that name cdl wrote, never last, best, the
# file a run resumed from, a link or another file. Before, cdl kept only
# last and best: a campaign that wanted history copied checkpoints in its
# job script until the quota filled. A chain of runs (--max-steps, as jobs
# stopped at their time limit) keeps the same set as one run; a resumed run
# that goes back to an older checkpoint removes the abandoned steps first;
# under data parallelism rank 0 alone keeps and removes.
. "${top_srcdir:-.}/tests/e2e/common.sh"

common=(--model mlp --dataset synthetic --synthetic-size 256 --batch-size 32 --epochs 3
        --val-split 0 --threads 1 --workers 0 --quiet --seed 3 --ckpt-every 2)
numbered() { (cd "$1" && ls -d step-*.safetensors 2>/dev/null | tr '\n' ' '); }
expect_set() {   # expect_set DIR "FILES ": the numbered checkpoints in DIR
    [ "$(numbered "$1")" = "$2" ] || die "$1 holds '$(numbered "$1")', expected '$2'"
}

# One run of 24 steps (8 per epoch), a checkpoint every 2: 6 12 18 24 for
# good, and the 2 newest others, 20 and 22.
expect_status 0 "$CDL_TRAIN" "${common[@]}" --ckpt-dir "$TMP/one" --keep-last 2 --keep-every 6
expect_set "$TMP/one" "step-00000006.safetensors step-00000012.safetensors step-00000018.safetensors step-00000020.safetensors step-00000022.safetensors step-00000024.safetensors "
cmp -s "$TMP/one/last.safetensors" "$TMP/one/step-00000024.safetensors" ||
    die "step-00000024.safetensors is not the last checkpoint"
[ "$(stat -c %i "$TMP/one/last.safetensors")" = "$(stat -c %i "$TMP/one/step-00000024.safetensors")" ] ||
    die "the newest numbered checkpoint is a second copy, not a link to last"
expect_status 0 "$CDL_EVAL" "$TMP/one/step-00000012.safetensors"

# The same as a chain of jobs of 5 steps each; files that are not cdl's
# numbered checkpoints stay, whatever their names.
mkdir "$TMP/chain"
echo mine >"$TMP/chain/step-2.safetensors"
echo mine >"$TMP/chain/notes.txt"
ln -s notes.txt "$TMP/chain/step-00000004.safetensors"
mkdir "$TMP/chain/step-00000008.safetensors"
for m in 5 10 15 20 0; do
    expect_status 0 "$CDL_TRAIN" "${common[@]}" --ckpt-dir "$TMP/chain" --keep-last 2 \
        --keep-every 6 --max-steps $m
done
# A --max-steps stop writes its own checkpoint: 5, 10, 15, 20 among the others.
expect_set "$TMP/chain" "step-00000004.safetensors step-00000006.safetensors step-00000008.safetensors step-00000012.safetensors step-00000018.safetensors step-00000020.safetensors step-00000022.safetensors step-00000024.safetensors step-2.safetensors "
[ -f "$TMP/chain/step-2.safetensors" ] && [ -f "$TMP/chain/notes.txt" ] &&
    [ -L "$TMP/chain/step-00000004.safetensors" ] && [ -d "$TMP/chain/step-00000008.safetensors" ] ||
    die "a file cdl did not write was removed: $(ls "$TMP/chain")"
cmp -s "$TMP/chain/last.safetensors" "$TMP/chain/step-00000024.safetensors" ||
    die "the chain's step-00000024.safetensors is not its last checkpoint"

# Back to an older checkpoint (as after a divergence) with --keep-last 1:
# the file resumed from stays (a requeued job given the same --resume PATH
# finds it), the abandoned steps after it go first, then the older new ones.
mkdir "$TMP/back"
expect_status 0 "$CDL_TRAIN" "${common[@]}" --ckpt-dir "$TMP/back" --keep-last 3 --max-steps 12
expect_set "$TMP/back" "step-00000008.safetensors step-00000010.safetensors step-00000012.safetensors "
expect_status 0 "$CDL_TRAIN" "${common[@]}" --ckpt-dir "$TMP/back" --keep-last 1 \
    --resume "$TMP/back/step-00000008.safetensors" --max-steps 12
expect_set "$TMP/back" "step-00000008.safetensors step-00000012.safetensors "
cmp -s "$TMP/back/last.safetensors" "$TMP/back/step-00000012.safetensors" ||
    die "step-00000012.safetensors is the abandoned run's, not the resumed one's"

# Data parallelism: rank 0 writes and removes, the other ranks touch nothing.
if "$CDLRUN" -n 2 true >/dev/null 2>&1; then
    expect_status 0 "$CDLRUN" -n 2 "$CDL_TRAIN" "${common[@]}" --batch-size 16 \
        --ckpt-dir "$TMP/ddp" --keep-last 2 --keep-every 6
    expect_set "$TMP/ddp" "step-00000006.safetensors step-00000012.safetensors step-00000018.safetensors step-00000020.safetensors step-00000022.safetensors step-00000024.safetensors "
fi

# What a temporary file of a killed writer left is removed at the next start.
touch "$TMP/one/.step-00000030.safetensors.tmp.AbC123" "$TMP/one/.step-00000030.safetensors.tmp.link"
expect_status 0 "$CDL_TRAIN" "${common[@]}" --ckpt-dir "$TMP/one" --keep-last 2 --keep-every 6
[ -z "$(ls -A "$TMP/one" | grep tmp)" ] || die "temporary files left: $(ls -A "$TMP/one")"

# --summary writes nothing, and takes the options of the run it shows.
expect_status 0 "$CDL_TRAIN" "${common[@]}" --ckpt-dir "$TMP/sum" --keep-last 2 --summary
[ ! -e "$TMP/sum" ] || die "--summary made the checkpoint directory"

# Options named in their errors.
expect_status 1 "$CDL_TRAIN" "${common[@]}" --keep-last 2
expect_err "--keep-last 2, --keep-every 0 keep older checkpoints of --ckpt-dir: give --ckpt-dir DIR"
expect_status 2 "$CDL_TRAIN" "${common[@]}" --ckpt-dir "$TMP/x" --keep-every -1
expect_err "--keep-every"
# 0 turns either off, as the defaults (a later job of a chain that stops keeping).
expect_status 0 "$CDL_TRAIN" "${common[@]}" --ckpt-dir "$TMP/off" --keep-every 0 --keep-last 0 --max-steps 2
expect_set "$TMP/off" ""
expect_status 2 "$CDL_TRAIN" "${common[@]}" --ckpt-dir "$TMP/x" --keep-last -1
expect_err "--keep-last"
# A quota the kept checkpoints fill (a 16 MB tmpfs, mlp's checkpoint 6.6 MB:
# the second checkpoint does not fit beside the first, kept): the error names
# the file and says what frees room. Needs root; skipped otherwise.
if [ "$(id -u)" = 0 ] && mkdir "$TMP/full" && mount -t tmpfs -o size=16M tmpfs "$TMP/full" 2>/dev/null; then
    trap 'umount "$TMP/full" 2>/dev/null; rm -rf "$TMP"' EXIT
    expect_status 1 "$CDL_TRAIN" "${common[@]}" --ckpt-dir "$TMP/full" --keep-last 2 --max-steps 4
    expect_err "writing $TMP/full/."
    expect_err "is full or over quota: free space there or write checkpoints to another directory; the numbered checkpoints of --keep-last 2 --keep-every 0 take room there too: remove old step-*.safetensors files or keep fewer"
    expect_set "$TMP/full" "step-00000002.safetensors "
    cmp -s "$TMP/full/last.safetensors" "$TMP/full/step-00000002.safetensors" || die "last changed"
    [ -z "$(ls -A "$TMP/full" | grep tmp)" ] || die "temporary files left: $(ls -A "$TMP/full")"
    umount "$TMP/full"
fi
exit 0
