#!/usr/bin/env bash
# A shared file system that fails to answer a stat() (EIO, ESTALE, a
# server's timeout) does not lose a file in silence: --stage left the file
# out of the copy and the image folder reader out of the data, and the run
# trained on less than the dataset without a word; an idx file's .gz
# was taken for missing and the error named the file without .gz instead (a train/ or test/ whose
# stat() failed was taken for missing, and so was a corpus's meta.pkl).
# Now both stop with an
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
# A split folder whose stat() fails was taken for missing: without test/
# the run trained with no test set, without train/ it read train/ and
# test/ as two classes.
for split in test train; do
    CDL_TEST_STAT_FAIL_ON=data/$split LD_PRELOAD=$preload expect_status 1 "$CDL_TRAIN" \
        --dataset "imagefolder:$TMP/data" --model mlp --epochs 1 --max-steps 1 --batch-size 2 \
        --val-split 0 --threads 1 --no-progress
    expect_err "cannot stat $TMP/data/$split in the image folder: Input/output error"
done
# The meta.pkl beside a corpus whose stat() fails was taken for missing:
# the run built a GPT-2-sized model (50257 rows) for 60 symbols. Now it is
# read (and a failure to read it names it); --stage names it.
mkdir "$TMP/lm"
awk 'BEGIN { for (i = 0; i < 2000; i++) printf "%c%c", (i * 13 + 7) % 60, 0 }' >"$TMP/lm/train.bin"
/usr/bin/env python3 -c 'import pickle,sys; pickle.dump({"vocab_size": 60}, open(sys.argv[1], "wb"))' \
    "$TMP/lm/meta.pkl" 2>/dev/null || die "python3 cannot write meta.pkl"
lm() {   # lm STATUS [ARGS]: a short run of the corpus, stat() of its meta.pkl failing
    CDL_TEST_STAT_FAIL_ON=meta.pkl LD_PRELOAD=$preload expect_status "$1" "$CDL_TRAIN" \
        --dataset "tokens:$TMP/lm/train.bin" --model gpt:n_layer=1,n_head=1,n_embd=8 \
        --block-size 8 --val-split 100 --max-steps 1 --threads 1 --no-progress "${@:2}"
}
lm 0
cat "$TMP/out" "$TMP/err" | grep -q "vocabulary 60 from $TMP/lm/meta.pkl" ||
    die "the meta.pkl was not read: $(cat "$TMP/err")"
lm 1 --stage "$TMP/st"
expect_err "--stage: $TMP/lm/meta.pkl: Input/output error"
# An idx file's .gz whose stat() fails: the reader fell back to the name
# without .gz and reported that one missing, hiding the .gz's error.
fm=/usr/share/datasets/fashion-mnist
if [ -f "$fm/train-images-idx3-ubyte.gz" ] && [ ! -e "$fm/train-images-idx3-ubyte" ]; then
    CDL_TEST_STAT_FAIL_ON=train-images-idx3-ubyte.gz LD_PRELOAD=$preload expect_status 1 \
        "$CDL_TRAIN" --dataset fashion-mnist --data-dir "$fm" --model mlp --epochs 1 \
        --max-steps 1 --threads 1 --no-progress
    expect_err "cannot stat $fm/train-images-idx3-ubyte.gz: Input/output error (the file without .gz is not read in its place): retry when the file system answers"
else
    echo "note: no gzipped Fashion-MNIST alone in $fm; the idx case is not run"
fi
echo "PASS: stage-flaky"
