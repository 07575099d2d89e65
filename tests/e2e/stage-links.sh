#!/usr/bin/env bash
# --stage copies what the readers read: a train/ or class folder that is a
# symbolic link to a folder elsewhere is copied as a folder (it was left
# out, and the staged run trained on test/ as if it were its training
# split), and a link back up is an error naming it, not an endless copy.
. "${top_srcdir:-.}/tests/e2e/common.sh"
png="$top_srcdir/tests/fuzz/corpus/fuzz_image/gray.png"
[ -f "$png" ] || die "$png missing"
mkdir -p "$TMP/real/train/a" "$TMP/elsewhere/b" "$TMP/data/test/a" "$TMP/data/test/b" "$TMP/st"
for i in 1 2 3; do cp "$png" "$TMP/real/train/a/$i.png"; cp "$png" "$TMP/elsewhere/b/$i.png"; done
cp "$png" "$TMP/data/test/a/1.png"
cp "$png" "$TMP/data/test/b/1.png"
ln -s ../../elsewhere/b "$TMP/real/train/b"   # a class folder that is a link
ln -s ../real/train "$TMP/data/train"         # the training split that is a link
run() { expect_status "$1" "$CDL_TRAIN" --dataset "imagefolder:$TMP/data" --model mlp --epochs 1 \
    --max-steps 1 --batch-size 2 --val-split 0 --threads 1 --no-progress "${@:2}"; }
run 0
cat "$TMP/out" "$TMP/err" | grep -q "on imagefolder (6 train / 0 val / 2 test)" || die "unexpected: $(head -n 2 "$TMP/err")"
run 0 --stage "$TMP/st"
cat "$TMP/out" "$TMP/err" | grep -q "on imagefolder (6 train / 0 val / 2 test)" ||
    die "the staged copy is not the data: $(head -n 3 "$TMP/err")"
cat "$TMP/out" "$TMP/err" | grep -q "staged $TMP/data to $TMP/st/imagefolder-[0-9a-f]*: 8 files" || die "no staging report: $(head -n 3 "$TMP/err")"
st=$(echo "$TMP"/st/imagefolder-*)
[ -f "$st/train/b/3.png" ] && [ ! -L "$st/train/b" ] ||
    die "the linked class folder was not copied: $(ls -lR "$TMP/st")"
ln -s .. "$TMP/elsewhere/b/up"
run 1 --stage "$TMP/st"
expect_err "--stage: $TMP/data/train/b/up/b leads back to a folder above it (a symbolic link loop)"
echo "--stage copies linked folders as the readers read them"
