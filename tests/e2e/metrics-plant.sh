#!/usr/bin/env bash
# --metrics and --tensorboard in folders other accounts may write to (root's
# /tmp, sticky; a folder of another account with mode 0777): a link planted
# by another account under the --metrics name made the run append its
# records to whatever the link named (a file of root's, for a run as root),
# a planted file made it write to and read back a file that account
# controls, and planted event files were shown by TensorBoard as the run's.
# Now each is refused before the first step, naming the file, its owner and
# what to do. Links of the run's own account or root's (/dev/stdout) are
# still followed. Needs root for the second account (nobody); skips
# otherwise.
. "${top_srcdir:-.}/tests/e2e/common.sh"
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root (a second account)"; exit 77; }
chmod 0711 "$TMP"
mkdir -m 1777 "$TMP/pub"   # as /tmp: root's, sticky, every account may write
nobody_id="uid $(id -u nobody) (nobody)"
as_nobody() { setpriv --reuid=nobody --regid=nogroup --clear-groups "$@" || die "nobody: $*"; }
run() {   # run STATUS ARGS...
    local st=$1
    shift
    expect_status "$st" "$CDL_TRAIN" --dataset synthetic --synthetic-size 64 --epochs 1 \
        --workers 0 --max-steps 1 --threads 1 --quiet "$@"
}
# A link of nobody's to a file of root's: nothing is appended to it.
echo "root's own" > "$TMP/victim"
as_nobody ln -s "$TMP/victim" "$TMP/pub/m.jsonl"
run 1 --metrics "$TMP/pub/m.jsonl"
expect_err "--metrics $TMP/pub/m.jsonl: the link belongs to another account ($nobody_id)"
[ "$(cat "$TMP/victim")" = "root's own" ] || die "the run wrote through nobody's link"
rm "$TMP/pub/m.jsonl"
# A file of nobody's, writable by all.
as_nobody sh -c 'umask 0; echo "{}" > "$1/m.jsonl"' sh "$TMP/pub"
run 1 --metrics "$TMP/pub/m.jsonl"
expect_err "--metrics $TMP/pub/m.jsonl: the file belongs to another account ($nobody_id)"
[ "$(cat "$TMP/pub/m.jsonl")" = "{}" ] || die "the run wrote to nobody's file"
rm "$TMP/pub/m.jsonl"
# A folder of nobody's that all may write, without the sticky bit.
as_nobody mkdir -m 0777 "$TMP/pub/theirs"
run 1 --metrics "$TMP/pub/theirs/m.jsonl"
expect_err "--metrics $TMP/pub/theirs/m.jsonl: its directory $TMP/pub/theirs belongs to another account ($nobody_id)"
[ ! -e "$TMP/pub/theirs/m.jsonl" ] || die "the file was made in nobody's folder"
# A new file in the sticky folder, and root's link /dev/stdout: used.
run 0 --metrics "$TMP/pub/m.jsonl"
grep -q '"type":"config"' "$TMP/pub/m.jsonl" || die "no records in $TMP/pub/m.jsonl"
run 0 --metrics /dev/stdout
grep -q '"type":"config"' "$TMP/out" || die "no records on /dev/stdout"

# --tensorboard: event files of nobody's in the folder, nobody's folder
# that all may write, a link of nobody's.
mkdir -m 1777 "$TMP/tb"
as_nobody sh -c ': > "$1/events.out.tfevents.1.fake"' sh "$TMP/tb"
run 1 --tensorboard "$TMP/tb"
expect_err "--tensorboard $TMP/tb: events.out.tfevents.1.fake belongs to another account ($nobody_id)"
[ "$(ls -A "$TMP/tb")" = events.out.tfevents.1.fake ] || die "an event file was written: $(ls -A "$TMP/tb")"
rm "$TMP/tb/events.out.tfevents.1.fake"
run 1 --tensorboard "$TMP/pub/theirs"
expect_err "--tensorboard $TMP/pub/theirs belongs to another account ($nobody_id) and every account may write to it"
mkdir "$TMP/mine"
as_nobody ln -s "$TMP/mine" "$TMP/pub/tblink"
run 1 --tensorboard "$TMP/pub/tblink"
expect_err "--tensorboard $TMP/pub/tblink is a link of another account ($nobody_id)"
[ -z "$(ls -A "$TMP/mine")" ] || die "an event file was written through nobody's link"
run 0 --tensorboard "$TMP/tb"
ls "$TMP/tb"/events.out.tfevents.* >/dev/null || die "no event file in $TMP/tb"
echo "PASS: metrics-plant"
