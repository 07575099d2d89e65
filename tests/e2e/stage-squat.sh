#!/usr/bin/env bash
# --stage auto copies into $TMPDIR/cdl-stage-JOB, a name anyone can predict
# from the job's id; on a node whose $TMPDIR is shared (/tmp), another
# account can make it first. The run failed ("belongs to another account"),
# and then removed what was in that folder as its own copy: the other
# account's files, and, through a folder swapped for a link meanwhile, this
# account's. Now --stage auto reads the data where it is, says why, and
# touches nothing there. Needs root (a second account, nobody, and a tmpfs
# in a private mount namespace for $TMPDIR); skips otherwise. The data's
# file system is made to look like NFS by the preloaded test double.
. "${top_srcdir:-.}/tests/e2e/common.sh"
preload=$(cd "$top_builddir" && pwd)/tests/e2e/.libs/signal-on-open.so
[ -f "$preload" ] || die "no $preload (make check builds it)"
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root (a second account, a tmpfs)"; exit 77; }
unshare -m true 2>/dev/null || { echo "SKIP: cannot make a mount namespace"; exit 77; }
png="$top_srcdir/tests/fuzz/corpus/fuzz_image/gray.png"
[ -f "$png" ] || die "$png missing"
for s in train test; do for c in a b; do
    mkdir -p "$TMP/data/$s/$c"; for i in 1 2; do cp "$png" "$TMP/data/$s/$c/$i.png"; done
done; done
chmod 0711 "$TMP"
mkdir "$TMP/local" "$TMP/mine"
echo mine >"$TMP/mine/file"

# in_ns: runs the rest of its arguments with $TMP/local a fresh tmpfs
# (mode 1777, as /tmp), where nobody first made SQUAT (a folder of its own
# with a file in it, everyone's to write), unless SQUAT is empty.
cat >"$TMP/ns.sh" <<'NS'
mount -t tmpfs -o size=8m,mode=1777 tmpfs "$TMP/local" || exit 99
if [ -n "$SQUAT" ]; then
    setpriv --reuid=nobody --regid=nogroup --clear-groups sh -c \
        'mkdir -m 0777 "$1" "$1/train" && echo theirs >"$1/train/file" && chmod 0666 "$1/train/file"' \
        sh "$TMP/local/$SQUAT" || exit 98
fi
"$@"
rc=$?
ls -la "$TMP/local" >"$TMP/after"
[ -z "$SQUAT" ] || cat "$TMP/local/$SQUAT/train/file" >>"$TMP/after" 2>&1
exit $rc
NS
run() {   # run STATUS SQUAT: one short run, job 4242, with --stage auto
    SQUAT=$2 TMP=$TMP TMPDIR=$TMP/local SLURM_JOB_ID=4242 CDL_TEST_NETFS_ON=$TMP/data \
        LD_PRELOAD=$preload expect_status "$1" unshare -m bash "$TMP/ns.sh" "$CDL_TRAIN" \
        --dataset "imagefolder:$TMP/data" --model mlp --epochs 1 --max-steps 1 --batch-size 2 \
        --val-split 0 --threads 1 --no-progress --stage auto
}
run 0 ""
grep -q "staged $TMP/data to $TMP/local/cdl-stage-4242" "$TMP/out" "$TMP/err" ||
    { cat "$TMP/out" "$TMP/err"; die "--stage auto did not stage (the test double failed?)"; }
run 0 cdl-stage-4242
expect_err "--stage: $TMP/local/cdl-stage-4242 belongs to another account (uid $(id -u nobody))"
expect_err "--stage auto reads $TMP/data where it is instead"
grep -q "theirs" "$TMP/after" || die "the other account's file was removed: $(cat "$TMP/after")"
grep -q "not staged: its folder $TMP/local/cdl-stage-4242 was taken by another account" \
    "$TMP/out" "$TMP/err" || { cat "$TMP/out" "$TMP/err"; die "no note that the data was not staged"; }
[ "$(cat "$TMP/mine/file")" = mine ] || die "this account's own file changed"
echo "PASS: stage-squat"
