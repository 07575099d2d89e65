#!/usr/bin/env bash
# cdl-train under a cgroup memory limit (a Slurm job's --mem): a batch that
# cannot fit is an error naming the memory it needs and what to do, before
# the first step, not a kill by the OOM killer (exit 137, no message).
# Needs root and a memory controller (cgroup v2, or v1's memory hierarchy);
# skips otherwise. The group it makes is removed at the end.
. "${top_srcdir:-.}/tests/e2e/common.sh"

[ "$(id -u)" = 0 ] || { echo "SKIP: needs root to make a cgroup"; exit 77; }
if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
    # v2: a child of the root group, which must delegate memory.
    parent=/sys/fs/cgroup
    grep -qw memory "$parent/cgroup.subtree_control" 2>/dev/null ||
        { echo "SKIP: the cgroup v2 root does not delegate the memory controller"; exit 77; }
    limit_file=memory.max swap_file=memory.swap.max procs=cgroup.procs
elif [ -d /sys/fs/cgroup/memory ]; then
    # v1: a child of this process's memory group.
    own=$(sed -n 's/^[0-9]*:[^:]*memory[^:]*://p' /proc/self/cgroup | head -n 1)
    parent=/sys/fs/cgroup/memory$own
    [ -d "$parent" ] || parent=/sys/fs/cgroup/memory
    limit_file=memory.limit_in_bytes swap_file=memory.memsw.limit_in_bytes procs=tasks
else
    echo "SKIP: no memory cgroup"; exit 77
fi
GROUP=$parent/cdl-test-memlimit.$$
mkdir "$GROUP" 2>/dev/null || { echo "SKIP: cannot create a cgroup under $parent"; exit 77; }
trap 'rmdir "$GROUP" 2>/dev/null; rm -rf "$TMP"' EXIT
echo 300M >"$GROUP/$limit_file" || { echo "SKIP: cannot set $limit_file"; exit 77; }
echo 300M >"$GROUP/$swap_file" 2>/dev/null   # no swap to hide the limit, where there is swap

# mlp with batches of 20,000 samples needs about 1.8 GB; 300 MB are allowed.
# The child joins the group and becomes cdl-train (the test's shell stays out).
in_group() {
    sh -c 'echo $$ >"$1" && shift && exec "$@"' sh "$GROUP/$procs" "$@"
}
in_group true 2>/dev/null || { echo "SKIP: cannot move a process into $GROUP"; exit 77; }
expect_status 1 in_group "$CDL_TRAIN" --model mlp --dataset synthetic --synthetic-size 20000 \
    --batch-size 20000 --val-split 0 --epochs 1 --max-steps 1 --threads 1 --workers 0 --quiet
expect_err "out of memory allocating"
expect_err "of the 314.6 MB it may use"
expect_err "reduce --batch-size or the model size, or ask for more memory (sbatch --mem)"

# What fits still trains under the same limit.
expect_status 0 in_group "$CDL_TRAIN" --model mlp --dataset synthetic --synthetic-size 2000 \
    --batch-size 100 --val-split 0 --epochs 1 --max-steps 2 --threads 1 --workers 0 --quiet
# Several ranks on a node, each with its own copy of the decoded pictures of
# an image folder, share the node's memory (and the job's limit): each may
# use its share. 4,000 pictures at 128x128x3 need about 400 MB a rank (the
# pictures and the validation split's copy), and a rank starts with about
# 110 MB: one rank fits in 700 MB, two do not. Each rank checked alone and
# both went on to decode, and the OOM killer ended them. (--summary: the
# data loads, nothing trains.)
/usr/bin/python3 - "$TMP/img" <<'PYEOF2' || die "picture fixture"
import os, struct, sys, zlib
d = sys.argv[1]
def chunk(t, b):
    return struct.pack(">I", len(b)) + t + b + struct.pack(">I", zlib.crc32(t + b) & 0xffffffff)
for k, cls in enumerate(("a", "b")):
    for split, n in (("train", 2000), ("test", 10)):
        os.makedirs("%s/%s/%s" % (d, split, cls))
        for i in range(n):
            raw = b"".join(b"\0" + bytes(((x * 7 + y * 3 + i + 80 * k) % 256) for x in range(24)) for y in range(8))
            with open("%s/%s/%s/%05d.png" % (d, split, cls, i), "wb") as f:
                f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 8, 8, 8, 2, 0, 0, 0))
                        + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
PYEOF2
set_limit() {   # v1 wants memsw >= limit at every moment: the order that works
    { echo "$1" >"$GROUP/$limit_file"; echo "$1" >"$GROUP/$swap_file"; } 2>/dev/null
    echo "$1" >"$GROUP/$limit_file"
}
set_limit 700M
imgs=(--model mlp --dataset "imagefolder:$TMP/img" --image-size 128 --summary --threads 1 --workers 0 -q)
expect_status 1 in_group "$CDLRUN" -n 2 "$CDL_TRAIN" "${imgs[@]}" --decode memory
expect_err "more than the 0.34 GiB this process may use"
expect_err "each rank's share"
expect_status 0 in_group "$CDLRUN" -n 2 "$CDL_TRAIN" "${imgs[@]}" --decode auto
expect_status 0 in_group "$CDL_TRAIN" "${imgs[@]}" --decode memory   # alone it fits

# A rank whose node lacks the memory fails every rank, and the others name
# it and its node (they used to wait for it until its death: "rank 1 died").
# Rank 1 alone runs in the group, here with 300 MB.
set_limit 300M
expect_status 1 "$CDLRUN" -n 2 --label sh -c '[ "$RANK" = 1 ] && echo $$ >"$0"; exec "$@"' \
    "$GROUP/$procs" "$CDL_TRAIN" "${imgs[@]}" --decode memory
expect_err "[0] cdl-train: rank 0: error: loading the data failed on rank 1 (on $(hostname))"
expect_err "(rank 1, on $(hostname))"
echo "PASS: memlimit"
