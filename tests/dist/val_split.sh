#!/usr/bin/env bash
# --val-split carves the same validation samples for every world size: the
# same run on 1, 2 and 3 ranks (cdlrun) reports the same validation and test
# metrics. cdl-eval runs data-parallel and gives, reduced over 2 ranks, the
# numbers of one process.
. "${top_srcdir:-.}/tests/dist/common.sh"
common="--dataset synthetic --synthetic-size 300 --model mlp --epochs 1 --schedule constant
        --lr 0.01 --threads 1 --quiet --val-split 60"   # 240 train: 10 steps of 24
for n in 1 2 3; do
    timeout 300 "$cdlrun" -n $n "$train" $common --batch-size $((24 / n)) \
        --ckpt-dir "$tmp/w$n" --metrics "$tmp/w$n.json" || fail "training on $n ranks"
    # The epoch and test records but their run ids and timings.
    grep '^{"type":"\(epoch\|test\)"' "$tmp/w$n.json" |
        sed 's/"run_id":"[0-9a-f]*",//; s/,"images_per_sec".*//' >"$tmp/w$n.m"
    grep -q '"val_loss"' "$tmp/w$n.m" && grep -q '"test_samples":60' "$tmp/w$n.m" ||
        fail "metrics of $n ranks lack validation or test results"
done
cat "$tmp/w1.m"
cmp -s "$tmp/w1.m" "$tmp/w2.m" && cmp -s "$tmp/w1.m" "$tmp/w3.m" ||
    { cat "$tmp/w2.m" "$tmp/w3.m"; fail "validation/test metrics differ between world sizes"; }

"$ev" "$tmp/w1/last.safetensors" --split val --json --threads 1 >"$tmp/e1.json" || fail "cdl-eval"
timeout 300 "$cdlrun" -n 2 "$ev" "$tmp/w1/last.safetensors" --split val --json --threads 1 \
    >"$tmp/e2.json" || fail "cdl-eval on 2 ranks"
cat "$tmp/e1.json"
cmp -s "$tmp/e1.json" "$tmp/e2.json" || { cat "$tmp/e2.json"; fail "cdl-eval on 2 ranks differs"; }
grep -q '"samples":60,' "$tmp/e1.json" || fail "cdl-eval --split val: expected 60 samples"
# The validation loss cdl-train reported (metrics $1) is what cdl-eval
# found (JSON $2).
same_val_loss() {
    local loss eloss
    loss=$(grep '"val_loss"' "$1" | sed 's/.*"val_loss":\([0-9.]*\).*/\1/' | tail -n 1)
    eloss=$(sed 's/.*"loss":\([0-9.]*\),.*/\1/' "$2")
    awk -v a="$loss" -v b="$eloss" 'BEGIN { d = a - b; exit !(d < 1e-5 && d > -1e-5) }' ||
        fail "cdl-eval's val loss $eloss is not cdl-train's $loss ($2)"
}
same_val_loss "$tmp/w1.m" "$tmp/e1.json"
# With batch norm the running statistics are part of the weights: cdl-eval
# must restore them (evaluation normalises with them, not with the batch).
"$train" --dataset synthetic --synthetic-size 96 --model resnet20 --epochs 1 --batch-size 16 \
    --val-split 32 --schedule constant --lr 0.05 --threads 1 --quiet --ckpt-dir "$tmp/bn" \
    --metrics "$tmp/bn.json" || fail "training resnet20"
"$ev" "$tmp/bn/last.safetensors" --split val --json --threads 1 >"$tmp/ebn.json" ||
    fail "cdl-eval of a resnet20 checkpoint"
cat "$tmp/ebn.json"
same_val_loss "$tmp/bn.json" "$tmp/ebn.json"
# On 2 ranks each rank's last training forward updated its own running
# statistics; the checkpoint holds rank 0's. cdl-train's validation (and
# the best.safetensors it picks) must measure that model, not a mix: the
# buffers are rank 0's at evaluation, as PyTorch's DDP broadcasts them.
timeout 300 "$cdlrun" -n 2 "$train" --dataset synthetic --synthetic-size 96 --model resnet20 \
    --epochs 1 --batch-size 8 --val-split 32 --schedule constant --lr 0.05 --threads 1 --quiet \
    --ckpt-dir "$tmp/bn2" --metrics "$tmp/bn2.json" || fail "training resnet20 on 2 ranks"
"$ev" "$tmp/bn2/last.safetensors" --split val --json --threads 1 >"$tmp/ebn2.json" ||
    fail "cdl-eval of a 2-rank resnet20 checkpoint"
cat "$tmp/ebn2.json"
same_val_loss "$tmp/bn2.json" "$tmp/ebn2.json"
echo "validation split and data-parallel cdl-eval passed"
