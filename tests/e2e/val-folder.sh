#!/usr/bin/env bash
# An image folder with train/, val/ and test/: val/ is the validation split
# (each epoch, best.safetensors), test/ the test split, nothing carved out
# of train/ (val/ was left unread and 10 % of train/ carved instead);
# cdl-eval --split val reads val/ again and gives the run's numbers; a
# --val-split is refused. val/ without test/ stays the held-out split.
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
# Without test/, val/ is the held-out split, as before.
rm -r "$TMP/d/test"
expect_status 0 "$CDL_TRAIN" "${common[@]}"
grep -q "on imagefolder (11 train / 1 val / 3 test)" "$TMP/err" "$TMP/out" ||
    die "val/ alone: $(head -n 1 "$TMP/err")"
echo "val/ beside test/ is the validation split"
