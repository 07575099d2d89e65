#!/usr/bin/env bash
# A checkpoint of a newer cdl (a metadata format above the one this cdl
# reads: a $HOME build newer than the site's, a file from another
# cluster) is refused by every program that reads one, naming the file,
# its format and the newest this cdl reads, rather than read as if its
# metadata and tensors meant what they mean here: cdl-eval, cdl-predict,
# cdl-generate, cdl-train --init and cdl-train --resume.
. "${top_srcdir:-.}/tests/e2e/common.sh"
GEN="$top_builddir/cli/cdl-generate"
py=$(command -v python3) || { echo "SKIP: no python3 to rewrite the metadata"; exit 77; }

"$CDL_TRAIN" --model lenet --dataset synthetic --synthetic-size 64 --epochs 1 --device cpu \
    --threads 1 --quiet --ckpt-dir "$TMP/ck" || die "cdl-train failed"
ours=$("$py" - "$TMP/ck/last.safetensors" <<'PY'
import json, struct, sys
with open(sys.argv[1], 'rb') as f:
    print(json.loads(f.read(struct.unpack('<Q', f.read(8))[0]))['__metadata__']['format'])
PY
) || die "cannot read the checkpoint's format"
case $ours in cdl-checkpoint-[0-9]*) ;; *) die "checkpoint format '$ours'";; esac
newer=cdl-checkpoint-$(( ${ours#cdl-checkpoint-} + 1 ))

# The same file in the next format, without cdl's checksums (those cover
# the header; a file without them loads as a foreign writer's would).
"$py" - "$TMP/ck/last.safetensors" "$TMP/newer.safetensors" "$newer" <<'PY' || die "rewrite failed"
import json, struct, sys
src, dst, fmt = sys.argv[1:]
with open(src, 'rb') as f:
    n = struct.unpack('<Q', f.read(8))[0]
    head = json.loads(f.read(n))
    data = f.read()
head['__metadata__']['format'] = fmt
head['__metadata__']['cdl_version'] = '99.0.0'
head['__metadata__'].pop('cdl_checksum', None)
h = json.dumps(head, separators=(',', ':')).encode()
h += b' ' * (-len(h) % 8)
with open(dst, 'wb') as f:
    f.write(struct.pack('<Q', len(h)) + h + data)
PY

check() {   # check WHAT: the last command named the file and both formats
    for want in "$TMP/newer.safetensors" "written by cdl 99.0.0 in format '$newer'" \
        "(up to '$ours')" "with cdl 99.0.0 or newer"; do
        grep -qF -- "$want" "$TMP/err" || { cat "$TMP/err" >&2; die "$1: stderr lacks '$want'"; }
    done
}
expect_status 1 "$CDL_EVAL" "$TMP/newer.safetensors" --dataset synthetic --device cpu
check cdl-eval
expect_status 1 "$CDL_PREDICT" "$TMP/newer.safetensors" --dataset synthetic --device cpu
check cdl-predict
expect_status 1 "$GEN" "$TMP/newer.safetensors" --device cpu
check cdl-generate
expect_status 1 "$CDL_TRAIN" --model lenet --dataset synthetic --synthetic-size 64 --epochs 1 \
    --device cpu --threads 1 --quiet --init "$TMP/newer.safetensors"
check "cdl-train --init"
expect_status 1 "$CDL_TRAIN" --model lenet --dataset synthetic --synthetic-size 64 --epochs 2 \
    --device cpu --threads 1 --quiet --resume "$TMP/newer.safetensors"
check "cdl-train --resume"
expect_err "--resume never"

# The file as this cdl wrote it still evaluates.
expect_status 0 "$CDL_EVAL" "$TMP/ck/last.safetensors" --dataset synthetic --device cpu
echo "PASS: a checkpoint in format $newer is refused by cdl-eval, cdl-predict, cdl-generate, --init and --resume, naming both formats"
