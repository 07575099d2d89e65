#!/usr/bin/env bash
# --ckpt-dir naming a folder of another account that every account may
# write to (a name in /tmp someone made first with mode 0777, or /tmp
# itself): the run used it, so anyone on the host could plant the
# last.safetensors it resumes from (or hold its .lock), and the folder's
# owner read or replace its checkpoints. Now it is refused before the first
# step, naming the owner and what to do. Another account's folder that
# others cannot write to (a project's, group-writable) is still used. One's
# own folder with mode 0777 is refused too; with 1777 it is used.
# Needs root for the second account (nobody); skips otherwise.
. "${top_srcdir:-.}/tests/e2e/common.sh"
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root (a second account)"; exit 77; }
chmod 0711 "$TMP"
mkdir -m 1777 "$TMP/pub"   # as /tmp
setpriv --reuid=nobody --regid=nogroup --clear-groups \
    sh -c 'mkdir -m 0777 "$1/theirs" && mkdir -m 0775 "$1/project"' sh "$TMP/pub" ||
    die "nobody cannot make its folders"
run() {   # run STATUS DIR
    expect_status "$1" "$CDL_TRAIN" --dataset synthetic --synthetic-size 64 --epochs 1 \
        --workers 0 --max-steps 1 --threads 1 --quiet --ckpt-dir "$2"
}
run 1 "$TMP/pub/theirs"
expect_err "--ckpt-dir $TMP/pub/theirs belongs to another account (uid $(id -u nobody) (nobody)) and every account may write to it"
[ -z "$(ls -A "$TMP/pub/theirs")" ] || die "files were written there: $(ls -A "$TMP/pub/theirs")"
run 0 "$TMP/pub/project"
[ -f "$TMP/pub/project/last.safetensors" ] || die "no checkpoint in another account's project folder"
# A folder of one's own that every account may write to without the sticky
# bit: anyone could swap a checkpoint between its check and its use.
mkdir "$TMP/open" && chmod 0777 "$TMP/open"
run 1 "$TMP/open"
expect_err "--ckpt-dir $TMP/open may be written by every account and is not sticky (mode 0777)"
expect_err "chmod o-w $TMP/open"
[ -z "$(ls -A "$TMP/open")" ] || die "files were written there: $(ls -A "$TMP/open")"
chmod 1777 "$TMP/open"
run 0 "$TMP/open"
[ -f "$TMP/open/last.safetensors" ] || die "no checkpoint in a sticky folder of one's own"
echo "PASS: ckpt-squat"
