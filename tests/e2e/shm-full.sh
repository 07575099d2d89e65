#!/usr/bin/env bash
# A full /dev/shm (another account on the node can fill it): rank 0 of a
# 2-rank shm run used to die of SIGBUS ("Bus error", cdlrun exit 135) at its
# first write into the segment, which ftruncate had sized but not reserved;
# now it fails with an error naming /dev/shm and what to do. With room, the
# run trains. Needs root to mount a small tmpfs on /dev/shm in a private
# mount namespace (nothing outside it changes); skips otherwise.
. "${top_srcdir:-.}/tests/e2e/common.sh"

[ "$(id -u)" = 0 ] || { echo "SKIP: needs root to mount a tmpfs on /dev/shm"; exit 77; }
command -v unshare >/dev/null || { echo "SKIP: unshare not found"; exit 77; }
unshare -m true 2>/dev/null || { echo "SKIP: cannot make a mount namespace"; exit 77; }

# in_shm SIZE CMD...: runs CMD with a private /dev/shm of SIZE, filled to the
# brim by another account (nobody) when SIZE is small.
in_shm() {
    local size=$1; shift
    unshare -m bash -c 'mount -t tmpfs -o size=$0,mode=1777 tmpfs /dev/shm || exit 99
        [ "$0" != 64k ] || setpriv --reuid=nobody --regid=nogroup --clear-groups \
            dd if=/dev/zero of=/dev/shm/filler bs=4k count=64 2>/dev/null
        "$@"' "$size" "$@"
}
run=("$CDLRUN" -n 2 "$CDL_TRAIN" --dataset synthetic --synthetic-size 64 --epochs 1 --workers 0
     --batch-size 8 --max-steps 2 --threads 1 --quiet --dist-backend shm)

expect_status 1 in_shm 64k "${run[@]}"
expect_err "rank 0: error: cannot reserve "
expect_err "No space left on device; /dev/shm has 0.0 MB free (/dev/shm is full: see what fills it"
grep -q "Bus error\|signal 7" "$TMP/err" && die "a rank died of SIGBUS: $(cat "$TMP/err")"
expect_status 0 in_shm 64m "${run[@]}"
echo "PASS: shm-full"
