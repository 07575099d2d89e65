#!/usr/bin/env bash
# SIGTERM (scancel) while cdl-train sets up, which can take minutes: while
# --stage copies the dataset and while an image folder is decoded. The run
# stops there with status 75 and says so; it does not finish the copy and
# the decoding, train a first step and write a checkpoint first (what it did,
# while Slurm's KillWait ran out). The signal comes from a preloaded test
# double, the first time the process opens a marked file: no timing.
. "${top_srcdir:-.}/tests/e2e/common.sh"
PY=/usr/bin/python3
preload=$(cd "$top_builddir" && pwd)/tests/e2e/.libs/signal-on-open.so
[ -f "$preload" ] || die "no $preload (make check builds it)"
if LD_PRELOAD= "$CDL_TRAIN" --dataset imagefolder --data-dir /nonexistent --epochs 1 2>&1 |
    grep -q "built without libpng"; then
    echo "SKIP: cdl was built without libpng"; exit 77
fi

# 2 classes of 24 gray 8x8 pictures; the marked one is decoded (and copied)
# after others. PNGs written with zlib (no imaging library).
$PY - "$TMP/img" <<'PYEOF' || die "picture fixture"
import os, struct, sys, zlib
d = sys.argv[1]
def png(path, w, h, rows):
    raw = b"".join(b"\0" + bytes(r) for r in rows)
    def chunk(t, b):
        return struct.pack(">I", len(b)) + t + b + struct.pack(">I", zlib.crc32(t + b) & 0xffffffff)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
for k, cls in enumerate(("a", "b")):
    os.makedirs("%s/%s" % (d, cls))
    for i in range(24):
        name = "%02d%s.png" % (i, "-mark" if (cls, i) == ("b", 12) else "")
        png("%s/%s/%s" % (d, cls, name), 8, 8, [[(40 + 120 * k + 7 * i + x + y) % 256 for x in range(8)] for y in range(8)])
PYEOF

common=(--dataset imagefolder --data-dir "$TMP/img" --model mlp --epochs 1 --batch-size 8
        --val-split 8 --threads 1 --no-progress)
# Decoding the folder (one thread: the pictures after the mark are left).
CDL_TEST_SIGNAL_ON=-mark LD_PRELOAD=$preload \
    expect_status 75 "$CDL_TRAIN" "${common[@]}" --ckpt-dir "$TMP/ck"
expect_err "stopped by a signal while loading the data, before the first step: nothing of this start to save; start it again to go on"
[ ! -e "$TMP/ck/last.safetensors" ] || die "a checkpoint was written after the signal"

# Without --ckpt-dir nothing can be resumed: an error (1), not 75, which a
# requeueing script would take as "go on" and start again at step 1.
CDL_TEST_SIGNAL_ON=-mark LD_PRELOAD=$preload \
    expect_status 1 "$CDL_TRAIN" "${common[@]}"
expect_err "stopped by a signal (SIGUSR1 or SIGTERM) while loading the data, before the first step, with no --ckpt-dir"

# Copying the folder to node-local storage (--stage DIR): no data is read,
# and no half-copied file is left.
mkdir "$TMP/local"
CDL_TEST_SIGNAL_ON=-mark LD_PRELOAD=$preload \
    expect_status 75 "$CDL_TRAIN" "${common[@]}" --ckpt-dir "$TMP/ck" --stage "$TMP/local"
expect_err "stopped by a signal while staging the dataset, before the first step"
[ ! -e "$TMP/ck/last.safetensors" ] || die "a checkpoint was written after the signal"
left=$(find "$TMP/local" -name '*tmp*')
[ -z "$left" ] || die "half-copied files left: $left"

# Without the signal the same runs train and finish.
expect_status 0 "$CDL_TRAIN" "${common[@]}" --ckpt-dir "$TMP/ck" --stage "$TMP/local"
[ -e "$TMP/ck/last.safetensors" ] || die "no checkpoint from the run without a signal"
echo "PASS: setup-signal"
