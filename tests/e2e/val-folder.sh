#!/usr/bin/env bash
# An image folder with train/, val/ and test/: val/ is the validation split
# (each epoch, best.safetensors), test/ the test split, nothing carved out
# of train/ (val/ was left unread and 10 % of train/ carved instead);
# cdl-eval --split val reads val/ again and gives the run's numbers; a
# --val-split is refused. val/ without test/ stays the held-out split. A
# checkpoint of a run that carved its validation from train/ tells why its
# size differs and that --resume-allow dataset-size resumes it.
. "${top_srcdir:-.}/tests/e2e/common.sh"
dir="$top_srcdir/tests/fuzz/corpus/fuzz_image"
[ -f "$dir/gray.png" ] && [ -f "$dir/rgb.png" ] || die "$dir: pictures missing"
for split in train val test; do
    mkdir -p "$TMP/d/$split/a" "$TMP/d/$split/b"
    n=6
    [ $split = train ] || n=2
    for i in $(seq $n); do
        cp "$dir/gray.png" "$TMP/d/$split/a/$i.png"
        cp "$dir/rgb.png" "$TMP/d/$split/b/$i.png"
    done
done
rm "$TMP/d/val/b/2.png"   # 3 validation pictures, 4 test pictures
common=(--dataset "imagefolder:$TMP/d" --model mlp --channels 1 --epochs 2 --batch-size 4
        --threads 1 --no-progress)
expect_status 0 "$CDL_TRAIN" "${common[@]}" --ckpt-dir "$TMP/ck" --metrics "$TMP/m.jsonl"
grep -q "on imagefolder (12 train / 3 val / 4 test)" "$TMP/err" "$TMP/out" ||
    die "val/ is not the validation split: $(head -n 1 "$TMP/err")"
want=$(grep '"type":"epoch"' "$TMP/m.jsonl" | tail -n 1 | grep -o '"val_loss":[0-9.]*')
expect_status 0 "$CDL_EVAL" "$TMP/ck/last.safetensors" --split val --json --threads 1
grep -q '"split":"val","samples":3,' "$TMP/out" || die "cdl-eval --split val: $(cat "$TMP/out")"
got=$(grep -o '"loss":[0-9.]*' "$TMP/out" | sed 's/"loss"/"val_loss"/')
[ "$got" = "$want" ] || die "cdl-eval --split val gives $got, the run's last epoch $want"
expect_status 1 "$CDL_TRAIN" "${common[@]}" --val-split 0.2
expect_err "holds val/, the validation split: --val-split carves one out of the training split"
# A checkpoint of cdl before val/ was read (10 % of train/ carved out as
# validation: train_samples 11, val_samples 1, no val_folder) is refused
# for its size, saying why and what resumes it.
python3 - "$TMP/ck/last.safetensors" "$TMP/old.safetensors" <<'PY' || die "python3"
import json, struct, sys, zlib
b = open(sys.argv[1], 'rb').read()
n = struct.unpack('<Q', b[:8])[0]
h = json.loads(b[8:8 + n])
m = h['__metadata__']
for k in ('cdl_checksum', 'val_folder', 'data_fingerprint'):
    m.pop(k, None)
m['train_samples'], m['val_samples'] = '11', '1'
u = lambda x: struct.pack('<Q', x)
c = 0   # the header's CRC as lib/ckpt/checksum.h defines it
for k, v in m.items():
    c = zlib.crc32(k.encode() + b'\0' + v.encode() + b'\0', c)
for k, t in h.items():
    if k != '__metadata__':
        c = zlib.crc32(k.encode() + b'\0' + t['dtype'].encode() + b'\0' + u(len(t['shape'])) +
                       b''.join(map(u, t['shape'])) + u(t['data_offsets'][0]) +
                       u(t['data_offsets'][1]), c)
m['cdl_checksum'] = 'crc32 data=%08x header=%08x' % (zlib.crc32(b[8 + n:]), c)
hb = json.dumps(h, separators=(',', ':')).encode()
hb += b' ' * (-len(hb) % 8)
open(sys.argv[2], 'wb').write(u(len(hb)) + hb + b[8 + n:])
PY
expect_status 1 "$CDL_TRAIN" "${common[@]}" --resume "$TMP/old.safetensors"
expect_err "was written with another configuration: dataset-size 11 -> 12."
expect_err "The image folder's val/ is the validation split now, where the checkpoint's run carved its validation split (1 of its samples) out of train/"
expect_err "to go on from the checkpoint so, --resume-allow dataset-size"
expect_status 0 "$CDL_TRAIN" "${common[@]}" --resume "$TMP/old.safetensors" --resume-allow dataset-size
# Without test/, val/ is the held-out split, as before.
rm -r "$TMP/d/test"
expect_status 0 "$CDL_TRAIN" "${common[@]}"
grep -q "on imagefolder (11 train / 1 val / 3 test)" "$TMP/err" "$TMP/out" ||
    die "val/ alone: $(head -n 1 "$TMP/err")"
echo "val/ beside test/ is the validation split"
