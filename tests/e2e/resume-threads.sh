#!/usr/bin/env bash
# A resumed run is bitwise the run never stopped only on the same number of
# compute threads (the CPU splits a step's sums by thread). A job requeued
# onto a node with another CPU count (the default --threads is the CPUs)
# gave other weights without a word; the checkpoint now records the count
# (compute_threads) and the resume says what was given up.
. "${top_srcdir:-.}/tests/e2e/common.sh"

a=(--dataset synthetic --synthetic-size 600 --epochs 2 --batch-size 32 --workers 0
   --val-split 100 --no-progress)
weights() {   # the checkpoint's tensors, without the header (its metadata differs)
    tail -c +$(($(od -An -tu8 -N8 "$1") + 9)) "$1" | cksum
}
"$CDL_TRAIN" "${a[@]}" --threads 1 --ckpt-dir "$TMP/full" -q || die "the full run failed"
grep -q '"compute_threads":"1"' "$TMP/full/last.safetensors" ||
    die "the checkpoint does not record its compute threads"

# The same count: bitwise, no note.
"$CDL_TRAIN" "${a[@]}" --threads 1 --ckpt-dir "$TMP/same" --max-steps 7 -q || die "part 1"
expect_status 0 "$CDL_TRAIN" "${a[@]}" --threads 1 --ckpt-dir "$TMP/same"
grep -q "compute thread" "$TMP/err" && die "a note on threads at the same count: $(cat "$TMP/err")"
[ "$(weights "$TMP/full/last.safetensors")" = "$(weights "$TMP/same/last.safetensors")" ] ||
    die "a resume on the same thread count is not bitwise the run never stopped"

# Another count: the note names both and the option that keeps the bits.
"$CDL_TRAIN" "${a[@]}" --threads 1 --ckpt-dir "$TMP/other" --max-steps 7 -q || die "part 1"
expect_status 0 "$CDL_TRAIN" "${a[@]}" --threads 2 --ckpt-dir "$TMP/other"
expect_err "note: $TMP/other/last.safetensors was written by a run on 1 compute thread, this one has 2: a step's sums split otherwise, so the weights will not be bitwise those of a run never stopped (--threads 1 keeps them)"
echo "PASS: a resume on another thread count says it gives up bitwise reproducibility"

# --fast-conv likewise (the checkpoint's fast_conv): on this CPU's kernels
# (AVX2 or AVX-512: F(4x4) on both), a resnet20 run with it on trains to
# other weights than with it off, resumes bitwise with it on, and a resume
# that changes it says so.
r=(--model resnet20 --dataset synthetic --synthetic-size 96 --epochs 2 --batch-size 16
   --workers 0 --val-split 16 --no-progress --threads 1)
"$CDL_TRAIN" "${r[@]}" --fast-conv on --ckpt-dir "$TMP/fon" -q || die "the --fast-conv on run failed"
grep -q '"fast_conv":"1"' "$TMP/fon/last.safetensors" ||
    die "the checkpoint does not record --fast-conv on"
"$CDL_TRAIN" "${r[@]}" --ckpt-dir "$TMP/foff" -q || die "the --fast-conv off run failed"
grep -q '"fast_conv":"0"' "$TMP/foff/last.safetensors" ||
    die "the checkpoint does not record --fast-conv off"
if grep -qw avx2 /proc/cpuinfo; then
    [ "$(weights "$TMP/fon/last.safetensors")" != "$(weights "$TMP/foff/last.safetensors")" ] ||
        die "--fast-conv on trained to the weights of --fast-conv off: F(4x4) did not run"
fi
"$CDL_TRAIN" "${r[@]}" --fast-conv on --ckpt-dir "$TMP/fsame" --max-steps 7 -q || die "part 1"
expect_status 0 "$CDL_TRAIN" "${r[@]}" --fast-conv on --ckpt-dir "$TMP/fsame"
grep -q "note:.*fast-conv" "$TMP/err" && die "a note on --fast-conv at the same setting: $(cat "$TMP/err")"
[ "$(weights "$TMP/fon/last.safetensors")" = "$(weights "$TMP/fsame/last.safetensors")" ] ||
    die "a resume with --fast-conv on is not bitwise the run never stopped"
"$CDL_TRAIN" "${r[@]}" --fast-conv on --ckpt-dir "$TMP/fother" --max-steps 7 -q || die "part 1"
expect_status 0 "$CDL_TRAIN" "${r[@]}" --ckpt-dir "$TMP/fother"
expect_err "note: $TMP/fother/last.safetensors was written by a run with --fast-conv on, this one has it off: its convolutions round otherwise, so the weights will not be bitwise those of a run never stopped (--fast-conv on keeps them)"
echo "PASS: --fast-conv is recorded, resumes bitwise, and a resume that changes it says so"
