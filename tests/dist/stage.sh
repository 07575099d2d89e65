#!/usr/bin/env bash
# --stage: with 2 ranks (cdlrun), local rank 0 copies the dataset's files to
# --stage DIR and verifies them, both ranks read from there and train; a
# second run finds the verified copy and copies nothing, a damaged copy is
# copied again; --stage auto leaves data on a local file system where it is.
. "${top_srcdir:-.}/tests/dist/common.sh"
data=/usr/share/datasets/fashion-mnist
[ -f "$data/train-images-idx3-ubyte.gz" ] || { echo "SKIP: $data missing"; exit 77; }
fail() { echo "FAILED: $*"; cat "$tmp/out" 2>/dev/null | tail -20; exit 1; }
common="--model mlp --epochs 1 --max-steps 2 --threads 1 --no-progress --val-split 0"
mkdir "$tmp/stage"
run() {   # run ARGS...: 2 ranks into $tmp/out
    timeout 300 "$cdlrun" -n 2 "$train" $common "$@" >"$tmp/out" 2>&1 || fail "training with $*"
}
run --stage "$tmp/stage"
grep -q "staged $data to $tmp/stage/fashion-mnist-[0-9a-f]*: 4 files, .* (4 copied)" "$tmp/out" ||
    fail "no staging report"
st=$(echo "$tmp"/stage/fashion-mnist-*)
for f in "$data"/*; do
    cmp -s "$f" "$st/$(basename "$f")" || fail "staged $(basename "$f") differs"
done
ls "$st" | grep -q tmp && fail "temporary files left"
run --stage "$tmp/stage"
grep -q "(0 copied)" "$tmp/out" || fail "a verified copy was copied again"
truncate -s 1000 "$st/t10k-labels-idx1-ubyte.gz"
run --stage "$tmp/stage"
grep -q "(1 copied)" "$tmp/out" || fail "a damaged copy was not replaced"
cmp -s "$data/t10k-labels-idx1-ubyte.gz" "$st/t10k-labels-idx1-ubyte.gz" ||
    fail "the damaged copy is still damaged"
TMPDIR=$tmp/stage run --stage auto
grep -q "is on a local file system: read where it is" "$tmp/out" || fail "auto staged local data"
timeout 300 "$cdlrun" -n 2 "$train" $common --stage "$tmp/nowhere" >"$tmp/out" 2>&1 &&
    fail "a missing --stage DIR was accepted"
grep -q "nowhere is not a directory" "$tmp/out" || fail "no error naming the missing DIR"
echo "staging with 2 ranks passed"
