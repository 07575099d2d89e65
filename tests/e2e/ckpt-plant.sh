#!/usr/bin/env bash
# Checkpoint files of another account in --ckpt-dir: a folder others may
# write to (root's /tmp, sticky: allowed for root, whose folder it is; a
# user's own folder with mode 0777) let anyone plant the last.safetensors
# the run resumed from, a .lock to hold, or a link in place of best. Now
# each is refused before the first step, naming the file, its owner and
# what to do; nothing is written. A checkpoint of another account named with
# --resume PATH is the user's choice: used, with a note naming the owner.
# Needs root for the second account (nobody); skips otherwise.
. "${top_srcdir:-.}/tests/e2e/common.sh"
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root (a second account)"; exit 77; }
chmod 0711 "$TMP"
mkdir -m 1777 "$TMP/pub"   # as /tmp: root's, sticky, every account may write
nobody_id="uid $(id -u nobody) (nobody)"
as_nobody() { setpriv --reuid=nobody --regid=nogroup --clear-groups "$@"; }
run() {   # run STATUS DIR [ARGS...]
    local st=$1 dir=$2
    shift 2
    expect_status "$st" "$CDL_TRAIN" --dataset synthetic --synthetic-size 64 --epochs 1 \
        --workers 0 --max-steps 1 --threads 1 --quiet --ckpt-dir "$dir" "$@"
}
# plant NAME CMD...: nobody makes NAME in pub; root's run refuses it.
plant() {
    local name=$1 what=$2
    shift 2
    as_nobody "$@" || die "nobody cannot plant $name"
    run 1 "$TMP/pub"
    expect_err "--ckpt-dir $TMP/pub: $name$what belongs to another account ($nobody_id)"
    expect_err "give a --ckpt-dir of your own"
    [ "$(ls -A "$TMP/pub")" = "$name" ] || die "files were written beside $name: $(ls -A "$TMP/pub")"
    rm -f "$TMP/pub/$name"
}
plant last.safetensors "" sh -c 'echo planted > "$1/last.safetensors"' sh "$TMP/pub"
plant .lock "" sh -c ': > "$1/.lock"' sh "$TMP/pub"
expect_err "this run would lock through it"
plant best.safetensors " (a link)" ln -s /etc/shadow "$TMP/pub/best.safetensors"
plant step-00000001.safetensors "" sh -c ': > "$1/step-00000001.safetensors"' sh "$TMP/pub"
# A file of nobody's that is not a checkpoint's name is not in the way.
as_nobody sh -c 'echo notes > "$1/README"' sh "$TMP/pub"
run 0 "$TMP/pub"
[ -f "$TMP/pub/last.safetensors" ] || die "no checkpoint written in root's own folder"
# --resume PATH naming nobody's checkpoint: used, and said.
mkdir -m 0755 "$TMP/theirs" "$TMP/mine"
cp "$TMP/pub/last.safetensors" "$TMP/theirs/run.safetensors"
chown nobody "$TMP/theirs/run.safetensors"
run 0 "$TMP/mine" --resume "$TMP/theirs/run.safetensors"
expect_err "warning: --resume $TMP/theirs/run.safetensors belongs to another account ($nobody_id)"
echo "PASS: ckpt-plant"
