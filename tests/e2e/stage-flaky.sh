#!/usr/bin/env bash
# A shared file system that fails to answer a stat() (EIO, ESTALE, a
# server's timeout) does not lose a file in silence: --stage left the file
# out of the copy and the image folder reader out of the data, and the run
# trained on less than the dataset without a word. Now both stop with an
# error naming the file and the reason. The failing stat() comes from the
# preloaded test double (CDL_TEST_STAT_FAIL_ON).
. "${top_srcdir:-.}/tests/e2e/common.sh"
preload=$(cd "$top_builddir" && pwd)/tests/e2e/.libs/signal-on-open.so
[ -f "$preload" ] || die "no $preload (make check builds it)"
png="$top_srcdir/tests/fuzz/corpus/fuzz_image/gray.png"
[ -f "$png" ] || die "$png missing"
for c in a b; do mkdir -p "$TMP/data/train/$c" "$TMP/data/test/$c"; done
for d in "$TMP"/data/*/*; do for i in 1 2; do cp "$png" "$d/$i.png"; done; done
mkdir "$TMP/st"
run() {   # run STATUS [ARGS]: a short run of the image folder, stat() of train/b/2.png failing
    CDL_TEST_STAT_FAIL_ON=train/b/2.png LD_PRELOAD=$preload expect_status "$1" "$CDL_TRAIN" \
        --dataset "imagefolder:$TMP/data" --model mlp --epochs 1 --max-steps 1 --batch-size 2 \
        --val-split 0 --threads 1 --no-progress "${@:2}"
}
run 1 --stage "$TMP/st"
expect_err "--stage: cannot stat $TMP/data/train/b/2.png: Input/output error"
run 1
expect_err "cannot stat $TMP/data/train/b/2.png in the image folder: Input/output error"
echo "PASS: stage-flaky"
