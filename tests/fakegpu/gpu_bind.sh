#!/bin/sh
# The GPU each rank opens under per-task GPU binding, on a node of 4 fake
# GPUs (tests/fakegpu, with its NCCL): cdlrun ranks started as
# `srun --gpus-per-task=2 --cdl-ddp` starts them, each task shown its own
# two GPUs (CUDA_VISIBLE_DEVICES 0,1 and 2,3) and the contract saying
# CDL_GPU_BIND=task, so that LOCAL_RANK 1's GPU is its visible device 0
# (fake GPU 2), not its LOCAL_RANK'th (fake GPU 3):
# - cdl-train --dist-backend nccl: each backend opens its visible GPU 0
#   and each NCCL communicator is made there (the current device NCCL
#   takes), so the barrier and every collective run on the task's own
#   first GPU;
# - cdl-eval of the checkpoint on the same two ranks: the same GPUs, and
#   the loss of one process (it opened LOCAL_RANK % visible GPUs: rank 1
#   took its second GPU);
# - cdl-eval of 4 ranks packed 2 per GPU (CDL_REPLICAS_PER_GPU=2, all
#   seeing both GPUs, as cdlrun or mpirun -n 4 start them): local ranks 0
#   and 1 open GPU 0, 2 and 3 GPU 1, the contract's slots; LOCAL_RANK % 2
#   put ranks 0 and 1 on different GPUs, and cdl_dist refused them ("share
#   a GPU under CDL_REPLICAS_PER_GPU=2 but opened different GPUs").
set -u
if [ "${CDL_TEST_SCOPE:-}" = unit ]; then
    echo "SKIP: end-to-end test in a unit-only pass"; exit 77
fi
builddir=${top_builddir:-.}
fake=$builddir/tests/fakegpu
cdlrun=$builddir/launcher/cdlrun
tmp=$(mktemp -d /tmp/cdl-fakegpu-bind.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAILED: $*"; exit 1; }
common="--threads 1 --tf32 off"

# task.sh PROGRAM ARGS...: one task of srun --gpus-per-task=2 --cdl-ddp
# (cdlrun removes CDL_GPU_BIND, as its ranks share its GPUs: set here).
cat >"$tmp/task.sh" <<'SH'
#!/bin/sh
first=$((2 * LOCAL_RANK))
CUDA_VISIBLE_DEVICES=$first,$((first + 1)) CDL_GPU_BIND=task exec "$@"
SH
chmod +x "$tmp/task.sh"
export CDL_FAKE_GPUS=4 CDL_LOG=cuda CDL_FAKE_NCCL_LOG=1
# ranks OUT PATTERN...: OUT has each PATTERN once per rank, rank 0 then 1
ranks() {
    out=$1; shift
    for pat in "$@"; do
        for r in 0 1; do
            n=$(grep -c "^\[$r\] .*$pat" "$tmp/$out")
            [ "$n" -eq 1 ] || { cat "$tmp/$out"; fail "$out: rank $r says '$pat' $n times, not once"; }
        done
    done
}

echo "+ cdlrun -n 2 (2 GPUs per task, CDL_GPU_BIND=task) cdl-train --dist-backend nccl"
timeout 600 "$cdlrun" -n 2 --label --timeout 120 "$tmp/task.sh" "$fake/cdl-train" --device cuda \
    --dist-backend nccl --dataset synthetic --synthetic-size 64 --batch-size 8 --epochs 1 \
    --no-progress --ckpt-dir "$tmp/ck" $common >"$tmp/train.out" 2>&1 ||
    { cat "$tmp/train.out"; fail "training on 2 tasks of 2 GPUs each"; }
grep -q "collectives over nccl " "$tmp/train.out" || { cat "$tmp/train.out"; fail "not over nccl"; }
ranks train.out "cdl: cuda: GPU 0 (cdl fake GPU 0" \
    "fakenccl: rank [01] of 2: communicator on visible device 0 (fake GPU"
grep -q "^\[1\] fakenccl: rank 1 of 2: communicator on visible device 0 (fake GPU 2)" "$tmp/train.out" ||
    { cat "$tmp/train.out"; fail "rank 1's communicator is not on its task's first GPU, fake GPU 2"; }
echo "  cdl-train: each rank on its visible GPU 0, NCCL there (fake GPUs 0 and 2)"

ck=$tmp/ck/last.safetensors
one=$(timeout 300 "$fake/cdl-eval" "$ck" --device cuda --split val --json $common 2>"$tmp/one.err" |
      sed -n 's/.*"loss":\([^,}]*\).*/\1/p')
[ -n "$one" ] || { cat "$tmp/one.err"; fail "cdl-eval in one process"; }
echo "+ cdlrun -n 2 (2 GPUs per task, CDL_GPU_BIND=task) cdl-eval"
timeout 300 "$cdlrun" -n 2 --label --timeout 120 "$tmp/task.sh" "$fake/cdl-eval" "$ck" \
    --device cuda --split val --json $common >"$tmp/eval.out" 2>&1 ||
    { cat "$tmp/eval.out"; fail "cdl-eval on 2 tasks of 2 GPUs each"; }
ranks eval.out "cdl: cuda: GPU 0 (cdl fake GPU 0"
two=$(sed -n 's/^\[0\] .*"loss":\([^,}]*\).*/\1/p' "$tmp/eval.out")
awk -v a="$one" -v b="$two" 'BEGIN { d = a - b; exit !(b != "" && d <= 1e-5 && d >= -1e-5) }' ||
    { cat "$tmp/eval.out"; fail "cdl-eval on 2 ranks: loss '$two', one process $one"; }
echo "  cdl-eval: each rank on its visible GPU 0, loss $two (one process: $one)"

echo "+ CDL_REPLICAS_PER_GPU=2 cdlrun -n 4 cdl-eval (2 GPUs seen by all, 2 ranks on each)"
CDL_FAKE_GPUS=2 CDL_REPLICAS_PER_GPU=2 timeout 300 "$cdlrun" -n 4 --label --timeout 120 \
    "$fake/cdl-eval" "$ck" --device cuda --split val --json $common >"$tmp/packed.out" 2>&1 ||
    { cat "$tmp/packed.out"; fail "cdl-eval of 4 ranks packed 2 per GPU"; }
for r in 0 1 2 3; do
    g=$((r / 2))
    grep -q "^\[$r\] cdl: cuda: GPU $g (cdl fake GPU $g .*(2 replicas per GPU)" "$tmp/packed.out" ||
        { cat "$tmp/packed.out"; fail "packed cdl-eval: rank $r did not open GPU $g"; }
done
two=$(sed -n 's/^\[0\] .*"loss":\([^,}]*\).*/\1/p' "$tmp/packed.out")
awk -v a="$one" -v b="$two" 'BEGIN { d = a - b; exit !(b != "" && d <= 1e-5 && d >= -1e-5) }' ||
    { cat "$tmp/packed.out"; fail "packed cdl-eval: loss '$two', one process $one"; }
echo "  packed cdl-eval: ranks 0, 1 on GPU 0 and 2, 3 on GPU 1, loss $two"
echo PASS
