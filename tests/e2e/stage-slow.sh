#!/usr/bin/env bash
# A --stage copy that takes longer than CDL_TIMEOUT (a large dataset on
# busy shared storage) is waited for: the copying rank tells the others it
# is at work every few seconds, so they wait as long as the copy
# progresses. Before, the node's other ranks gave up after CDL_TIMEOUT
# (300 s by default: any copy of more than about 30 GB) and every rank
# failed. The slowness comes from the preloaded test double (each read of
# the marked file takes 1.4 s longer, 17 s in all, twice CDL_TIMEOUT of 8 s;
# a beat comes at least every 3.4 s: 4.6 s to spare for a loaded machine,
# and the two ranks' start within CDL_TIMEOUT too); nothing waits on a time.
. "${top_srcdir:-.}/tests/e2e/common.sh"
preload=$(cd "$top_builddir" && pwd)/tests/e2e/.libs/signal-on-open.so
[ -f "$preload" ] || die "no $preload (make check builds it)"
mkdir "$TMP/slowfs" "$TMP/st"
head -c 6000000 /dev/urandom >"$TMP/slowfs/corpus.txt"   # 6 reads of 1 MB, twice
CDL_TIMEOUT=8 CDL_TEST_SLOW_ON=slowfs CDL_TEST_SLOW_MS=1400 LD_PRELOAD=$preload \
    expect_status 0 timeout 120 "$CDLRUN" -n 2 "$CDL_TRAIN" --dataset "text:$TMP/slowfs/corpus.txt" \
    --model gpt:n_layer=1,n_head=1,n_embd=8 --block-size 8 --max-steps 1 --threads 1 \
    --no-progress --stage "$TMP/st"
cat "$TMP/out" "$TMP/err" | grep -q "staged $TMP/slowfs/corpus.txt to $TMP/st/text-" ||
    die "no staging report: $(cat "$TMP/err")"
cmp -s "$TMP/slowfs/corpus.txt" "$TMP"/st/text-*/corpus.txt || die "the copy differs"
# The same for an image folder, whose files the copying threads copy while
# the rank's main thread keeps the others told: 6 files by 2 threads, 3
# files each of 2 slow reads, about 11 s.
png="$top_srcdir/tests/fuzz/corpus/fuzz_image/gray.png"
mkdir -p "$TMP/slowfs/img/train/a" "$TMP/slowfs/img/test/a" "$TMP/st2"
for i in 1 2 3; do cp "$png" "$TMP/slowfs/img/train/a/$i.png"; cp "$png" "$TMP/slowfs/img/test/a/$i.png"; done
CDL_STAGE_THREADS=2 CDL_TIMEOUT=8 CDL_TEST_SLOW_ON=slowfs CDL_TEST_SLOW_MS=1800 LD_PRELOAD=$preload \
    expect_status 0 timeout 120 "$CDLRUN" -n 2 "$CDL_TRAIN" --dataset "imagefolder:$TMP/slowfs/img" \
    --model mlp --epochs 1 --max-steps 1 --batch-size 2 --val-split 0 --threads 1 --no-progress \
    --stage "$TMP/st2"
cat "$TMP/out" "$TMP/err" | grep -q "staged $TMP/slowfs/img to $TMP/st2/imagefolder-[0-9a-f]*: 6 files" ||
    die "no staging report for the image folder: $(cat "$TMP/err")"
echo "PASS: stage-slow"
