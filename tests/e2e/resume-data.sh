#!/usr/bin/env bash
# A resume compares the training data's contents, not only its size: data
# replaced by other data of the same size (a regenerated table, a picture
# replaced, a nanoGPT .bin grown by less than a window) is refused, naming
# --resume-allow dataset-content, which resumes on it; the same data copied
# to another folder resumes as before (the fingerprint is of the contents,
# not of names or times); an allowed --image-size is no other data. Ranks
# whose copies of the data differ at the same size stop before training.
. "${top_srcdir:-.}/tests/e2e/common.sh"

common=(--device cpu --threads 1 --no-progress --epochs 2 --batch-size 8 --max-steps 2)
refused() {   # refused CKPT_DIR ARGS...: the resume stops, naming dataset-content
    local ck=$1; shift
    expect_status 1 "$CDL_TRAIN" "${common[@]}" --ckpt-dir "$ck" "$@"
    expect_err "$ck/last.safetensors was trained on other data: dataset-content crc32="
    expect_err "--resume-allow dataset-content"
}
resumes() {   # resumes CKPT_DIR ARGS...
    local ck=$1; shift
    expect_status 0 "$CDL_TRAIN" "${common[@]}" --max-steps 3 --ckpt-dir "$ck" "$@"
    grep -q "resuming from $ck/last.safetensors: epoch 1, batch 2, step 2" "$TMP/err" ||
        die "no resume: $(cat "$TMP/err")"
}

# A table: one value changed, same rows.
{
    echo "a,b,label"
    for i in $(seq 40); do echo "$i,$((i * 7 % 11)),$((i % 3))"; done
} >"$TMP/t.csv"
csv=(--model mlp --dataset "csv:$TMP/t.csv")
expect_status 0 "$CDL_TRAIN" "${common[@]}" "${csv[@]}" --ckpt-dir "$TMP/c1"
mkdir "$TMP/moved" && cp "$TMP/t.csv" "$TMP/moved/t.csv" && touch -d 2001-01-01 "$TMP/moved/t.csv"
cp -r "$TMP/c1" "$TMP/c1copy"
resumes "$TMP/c1copy" --model mlp --dataset "csv:$TMP/moved/t.csv"
sed -i '2s/^1,/2,/' "$TMP/t.csv"
refused "$TMP/c1" "${csv[@]}"
# With another change too, both are named.
expect_status 1 "$CDL_TRAIN" "${common[@]}" "${csv[@]}" --ckpt-dir "$TMP/c1" --lr 0.1
expect_err "another configuration: --lr 0.05 -> 0.1, dataset-content crc32="
resumes "$TMP/c1" "${csv[@]}" --resume-allow dataset-content

# nanoGPT's .bin grown by 2 tokens: the same 12 windows of 4.
mkdir "$TMP/tok"
for i in $(seq 49); do printf "\\x$(printf %02x $((i % 50)))\\x00"; done >"$TMP/tok/train.bin"
cp "$TMP/tok/train.bin" "$TMP/tok/val.bin"
tok=(--model gpt:n_layer=1,n_head=1,n_embd=8 --dataset "tokens:$TMP/tok" --vocab-size 50
     --block-size 4)
common[8]=2   # --batch-size 2 of 12 windows
expect_status 0 "$CDL_TRAIN" "${common[@]}" "${tok[@]}" --ckpt-dir "$TMP/c2"
printf '\001\000\002\000' >>"$TMP/tok/train.bin"
refused "$TMP/c2" "${tok[@]}"
common[8]=8

# An image folder decoded as batches need them: one picture's file replaced.
dir="$top_srcdir/tests/fuzz/corpus/fuzz_image"
mkdir -p "$TMP/img/train/a" "$TMP/img/train/b"
for i in 1 2 3 4 5 6 7 8 9 10; do
    cp "$dir/gray.png" "$TMP/img/train/a/$i.png"
    cp "$dir/rgb.png" "$TMP/img/train/b/$i.png"
done
img=(--model mlp --dataset "imagefolder:$TMP/img" --channels 1 --decode stream)
expect_status 0 "$CDL_TRAIN" "${common[@]}" "${img[@]}" --ckpt-dir "$TMP/c3"
cp "$dir/gray.jpg" "$TMP/img/train/a/3.png"
refused "$TMP/c3" "${img[@]}"
# Progressive resizing: an allowed --image-size makes other samples of the
# same pictures, as asked; no dataset-content refusal on top.
img=(--model resnet20 --dataset "imagefolder:$TMP/img" --channels 1)
expect_status 0 "$CDL_TRAIN" "${common[@]}" "${img[@]}" --image-size 8 --ckpt-dir "$TMP/c4"
resumes "$TMP/c4" "${img[@]}" --image-size 12 --resume-allow image-size
# Two ranks on copies of the table that differ in one value (a node's
# stale copy of the same size): both stop before training, rank 1 naming
# the difference.
mkdir "$TMP/n0" "$TMP/n1"
cp "$TMP/moved/t.csv" "$TMP/n0/t.csv"
cp "$TMP/t.csv" "$TMP/n1/t.csv"
cat >"$TMP/per-rank.sh" <<EOF
#!/bin/sh
exec "$CDL_TRAIN" --device cpu --threads 1 --no-progress --model mlp --epochs 1 \\
    --batch-size 8 --dataset "csv:$TMP/n\$RANK/t.csv"
EOF
chmod +x "$TMP/per-rank.sh"
expect_status 1 "$CDLRUN" -n 2 "$TMP/per-rank.sh"
expect_err "rank 1: error: rank 1 runs with other settings or data than rank 0 (rank 0's -> this rank's): training data's contents (same size) crc32="
cp "$TMP/n0/t.csv" "$TMP/n1/t.csv"
expect_status 0 "$CDLRUN" -n 2 "$TMP/per-rank.sh"
exit 0
