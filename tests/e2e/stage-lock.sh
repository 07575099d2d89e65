#!/usr/bin/env bash
# Two runs staging one dataset into one --stage DIR at once (two jobs on a
# node, or two emulated nodes of one host) copy it once: the second waits
# for the first's lock on DIR/.copying and then finds every file there.
# Before, both copied every file (correct, but twice the reads from the
# shared file system). Each read of the source is slowed by the preloaded
# test double so that the copies overlap; what is checked holds however
# they are timed: the two runs copied 12 files in all, not 24.
# A holder of the lock that makes no progress for CDL_TIMEOUT (a hung read;
# here this script, holding it) is not waited for further: the run copies
# beside it. A kept copy that a run trains from is not changed under it,
# and a lock held elsewhere is waited for at most CDL_TIMEOUT.
. "${top_srcdir:-.}/tests/e2e/common.sh"
preload=$(cd "$top_builddir" && pwd)/tests/e2e/.libs/signal-on-open.so
[ -f "$preload" ] || die "no $preload (make check builds it)"
png="$top_srcdir/tests/fuzz/corpus/fuzz_image/gray.png"
[ -f "$png" ] || die "$png missing"
for c in a b; do mkdir -p "$TMP/slowfs/train/$c" "$TMP/slowfs/test/$c"; done
for d in "$TMP"/slowfs/*/*; do for i in 1 2 3; do cp "$png" "$d/$i.png"; done; done
mkdir "$TMP/st"
stage() {   # stage N: a short run staged to $TMP/st, its output in $TMP/run.N
    CDL_STAGE_THREADS=1 CDL_TEST_SLOW_ON=slowfs CDL_TEST_SLOW_MS=150 LD_PRELOAD=$preload \
        timeout 120 "$CDL_TRAIN" --dataset "imagefolder:$TMP/slowfs" --model mlp --epochs 1 \
        --max-steps 1 --batch-size 2 --val-split 0 --threads 1 --no-progress \
        --stage "$TMP/st" >"$TMP/run.$1" 2>&1
}
stage 1 & one=$!
stage 2 & two=$!
wait "$one" || die "the first run failed: $(cat "$TMP/run.1")"
wait "$two" || die "the second run failed: $(cat "$TMP/run.2")"
copied=0
for n in 1 2; do
    line=$(grep -o "staged $TMP/slowfs to $TMP/st/imagefolder-[0-9a-f]*: 12 files, [0-9.]* MB ([0-9]* copied" "$TMP/run.$n") ||
        die "run $n did not stage the 12 files: $(cat "$TMP/run.$n")"
    copied=$((copied + $(echo "$line" | sed 's/.*(\([0-9]*\) copied$/\1/')))
done
[ "$copied" -eq 12 ] || die "the two runs copied $copied files, not 12: $(cat "$TMP/run.1" "$TMP/run.2")"
for f in "$TMP"/slowfs/*/*/*.png; do
    cmp -s "$f" "$TMP"/st/imagefolder-*/"${f#"$TMP/slowfs/"}" || die "the copy of $f differs"
done
# The lock held by this shell, which never touches it: waited for 1 s
# (CDL_TIMEOUT), then the run copies what is missing beside it.
rm "$TMP"/st/imagefolder-*/train/a/1.png
exec 9>"$(echo "$TMP"/st/imagefolder-*)/.copying"
flock -x 9 || die "cannot take the lock"
CDL_TIMEOUT=1 expect_status 0 timeout 60 "$CDL_TRAIN" --dataset "imagefolder:$TMP/slowfs" \
    --model mlp --epochs 1 --max-steps 1 --batch-size 2 --val-split 0 --threads 1 --no-progress \
    --stage "$TMP/st" 9>&-
exec 9>&-
cat "$TMP/out" "$TMP/err" | grep -q "copying into $TMP/st/imagefolder-[0-9a-f]* (it made no progress: copying beside it)" ||
    die "no word of the lock given up: $(cat "$TMP/out" "$TMP/err")"
cat "$TMP/out" "$TMP/err" | grep -q "12 files, [0-9.]* MB (1 copied)" || die "not copied: $(cat "$TMP/err")"
# A kept copy that another run trains from (here this shell, holding its
# .lock shared as a run does from its copy to its end) is not changed
# under it: a run staging a changed dataset pruned the files of the
# running one. The same dataset shares the copy; a changed one stops,
# saying why, and the copy keeps its files; once the reader is gone the
# copy is brought up to date.
kept=$(echo "$TMP"/st/imagefolder-*)
exec 9>>"$kept/.lock"
flock -s 9 || die "cannot take the lock shared"
run_kept() { expect_status "$1" timeout 60 "$CDL_TRAIN" --dataset "imagefolder:$TMP/slowfs" \
    --model mlp --epochs 1 --max-steps 1 --batch-size 2 --val-split 0 --threads 1 \
    --no-progress --stage "$TMP/st" 9<&-; }
run_kept 0
grep -q "12 files, [0-9.]* MB (0 copied)" "$TMP/err" || die "the unchanged copy was not shared: $(cat "$TMP/err")"
touch "$TMP/slowfs/train/b/1.png"   # a new time, the same bytes: still shared
run_kept 0
rm "$TMP/slowfs/train/a/3.png"
run_kept 1
expect_err "--stage: another run is training from the kept copy $kept, and $TMP/slowfs changed since it was copied (0 files to copy again, 1 to remove): changing the copy would change that run's data under it: wait for that run to end, or give another --stage DIR"
[ -f "$kept/train/a/3.png" ] || die "the copy in use lost train/a/3.png"
exec 9<&-
run_kept 0
grep -q "11 files, [0-9.]* MB (0 copied, 1 removed that the dataset no longer holds)" "$TMP/err" ||
    die "the copy was not pruned once free: $(cat "$TMP/err")"
[ ! -e "$kept/train/a/3.png" ] || die "train/a/3.png is still in the copy"
# The kept copy's .lock held exclusively by another process (here this
# shell: a run of an older cdl changing the copy, a user's flock(1)): the
# run waits at most CDL_TIMEOUT to share it, then stops naming the file and
# its holder. Before, it stopped at once with flock's "Resource temporarily
# unavailable" there, and where its own exclusive hold turned shared, a
# blocking flock waited for as long as the other held it.
exec 9>>"$kept/.lock"
flock -x 9 || die "cannot take the lock"
CDL_TIMEOUT=1 run_kept 1
expect_err "--stage: gave up after 1 s (CDL_TIMEOUT) waiting for the lock $kept/.lock (the kept copy's: a run changing the copy holds it exclusively), held by process "
expect_err ", exclusive): if that is a run of yours that hangs, end it"
exec 9<&-
run_kept 0
echo "PASS: stage-lock"
