#!/usr/bin/env bash
# A kept --stage DIR reused by later runs holds the data of this run only:
# - two image folders staged to one DIR each get their own copy (in one
#   DIR/imagefolder the second run trained on both folders' classes);
# - what the dataset no longer holds (a class folder deleted, the meta.pkl
#   of a corpus taken away) is removed from the copy, not read again;
# - a temporary file a killed copy left is removed, one of a live copy kept;
# - a later run takes the files of the copy that have their source's size
#   and modification time without reading the source again (it read the
#   whole dataset from the shared file system at every start); a source
#   rewritten at the same size is copied again;
# - the copy is private (0700), and a copy another account made at that
#   path is refused, not read;
# - a --stage DIR every account may write to without the sticky bit is
#   refused (anyone could swap the copy's folder); a sticky one is used.
. "${top_srcdir:-.}/tests/e2e/common.sh"
png="$top_srcdir/tests/fuzz/corpus/fuzz_image/gray.png"
[ -f "$png" ] || die "$png missing"
for c in a b; do mkdir -p "$TMP/one/train/$c" "$TMP/one/test/$c"; done
for c in x y z; do mkdir -p "$TMP/two/train/$c" "$TMP/two/test/$c"; done
for d in "$TMP"/one/*/* "$TMP"/two/*/*; do for i in 1 2; do cp "$png" "$d/$i.png"; done; done
mkdir "$TMP/st"
run() {   # run STATUS DATA [ARGS]: a short run of DATA staged to $TMP/st
    expect_status "$1" "$CDL_TRAIN" --dataset "$2" --model mlp --epochs 1 --max-steps 1 \
        --batch-size 2 --val-split 0 --threads 1 --no-progress --stage "$TMP/st" "${@:3}"
}
said() { cat "$TMP/out" "$TMP/err" | grep -qF -- "$1" || die "not said: '$1': $(cat "$TMP/err")"; }

run 0 "imagefolder:$TMP/two"
said "on imagefolder (6 train / 0 val / 6 test)"
run 0 "imagefolder:$TMP/one"
said "on imagefolder (4 train / 0 val / 4 test)"
[ "$(ls -d "$TMP"/st/imagefolder-* | wc -l)" = 2 ] || die "not one copy per folder: $(ls "$TMP/st")"
one=$(sed -n "s|.*staged $TMP/one to \($TMP/st/[^:]*\):.*|\1|p" "$TMP/err")
[ -d "$one" ] || die "no staging report: $(cat "$TMP/err")"
[ "$(stat -c %a "$one")" = 700 ] || die "the copy $one is open to others: $(stat -c %a "$one")"

# The next run reads no file of the source: the preloaded test double
# raises SIGTERM (exit 75) if it opens one. Nor after a touch, once the
# copy has been compared and given the new time.
preload=$(cd "$top_builddir" && pwd)/tests/e2e/.libs/signal-on-open.so
[ -f "$preload" ] || die "no $preload (make check builds it)"
CDL_TEST_SIGNAL_ON="$TMP/one/" LD_PRELOAD=$preload run 0 "imagefolder:$TMP/one"
said "staged $TMP/one to $one: 8 files, 0.0 MB (0 copied)"
touch "$TMP/one/train/a/1.png"
run 0 "imagefolder:$TMP/one"
said "(0 copied)"
CDL_TEST_SIGNAL_ON="$TMP/one/" LD_PRELOAD=$preload run 0 "imagefolder:$TMP/one"

# A class deleted from the dataset on the shared file system, and what a
# copy killed on this host left (a process that has ended) next to what a
# running one writes (this shell).
rm -r "$TMP/one/train/b" "$TMP/one/test/b"
host=$(hostname)
dead=$(sh -c 'echo $$')
touch "$one/train/a/.3.png.cdl-tmp.$host.$dead" "$one/train/a/.4.png.cdl-tmp.$host.$$"
run 0 "imagefolder:$TMP/one"
said "staged $TMP/one to $one: 4 files, 0.0 MB (0 copied, 2 removed that the dataset no longer holds)"
[ ! -e "$one/train/b" ] && [ ! -e "$one/test/b" ] || die "the deleted class is still in the copy"
[ ! -e "$one/train/a/.3.png.cdl-tmp.$host.$dead" ] || die "a killed copy's temporary file was left"
[ -e "$one/train/a/.4.png.cdl-tmp.$host.$$" ] || die "a live copy's temporary file was removed"

# One corpus file: its copy keeps the meta.pkl beside it only while the
# source has one (else the staged run had nanoGPT's 65 symbols for ever).
mkdir "$TMP/lm"
corpus() {   # corpus SEED: 2000 uint16 ids below 60
    awk -v s="$1" 'BEGIN { for (i = 0; i < 2000; i++) printf "%c%c", (i * s + 7) % 60, 0 }'
}
corpus 13 >"$TMP/lm/train.bin"
/usr/bin/env python3 -c 'import pickle,sys; pickle.dump({"vocab_size": 60}, open(sys.argv[1], "wb"))' \
    "$TMP/lm/meta.pkl" 2>/dev/null || die "python3 cannot write meta.pkl"
lm=(--model gpt:n_layer=1,n_head=1,n_embd=8 --block-size 8 --val-split 100)
run 0 "tokens:$TMP/lm/train.bin" "${lm[@]}"
said "vocabulary 60 from"
corpus 17 >"$TMP/lm/train.bin"   # other ids, same size
run 0 "tokens:$TMP/lm/train.bin" "${lm[@]}"
said "(1 copied)"
cmp -s "$TMP/lm/train.bin" "$TMP"/st/tokens-*/train.bin || die "the rewritten corpus was not copied"
rm "$TMP/lm/meta.pkl"
run 0 "tokens:$TMP/lm/train.bin" "${lm[@]}"
said "(0 copied, 1 removed that the dataset no longer holds)"
cat "$TMP/out" "$TMP/err" | grep -q "vocabulary 60" && die "the removed meta.pkl still gave the vocabulary"

# A --stage DIR every account may write to without the sticky bit: anyone
# could swap the copy's folder for one of theirs while the run uses it.
chmod 0777 "$TMP/st"
run 1 "imagefolder:$TMP/one"
expect_err "--stage: $one is in $TMP/st, which every account may write to without the sticky bit (mode 0777)"
chmod 1777 "$TMP/st"
run 0 "imagefolder:$TMP/one"
chmod 0755 "$TMP/st"

# Another account's copy at this run's path is refused.
if [ "$(id -u)" = 0 ] && id nobody >/dev/null 2>&1; then
    chown -R nobody "$one"
    run 1 "imagefolder:$TMP/one"
    expect_err "--stage: $one belongs to another account (uid $(id -u nobody)): a copy staged by someone else is not read"
fi
echo "PASS: stage-reuse"
