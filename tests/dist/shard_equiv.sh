#!/bin/sh
# --shard-optimizer (ZeRO-1) equals unsharded data-parallel training bit for
# bit: the reduce-scatter sums each gradient element in the allreduce's
# order and the update is elementwise over 256-byte aligned parts, so on
# the same ranks nothing may differ (docs/data-parallel.md). With Adam on
# a small MLP through cdlrun, 2 and 4 ranks:
# - whole runs, sharded against unsharded: every tensor of the final
#   checkpoints, the parameters and Adam's exp_avg / exp_avg_sq (a sharded
#   run gathers them into the unsharded file format); with --clip-grad
#   and --accum-steps too;
# - resume (4 ranks): a sharded checkpoint resumed unsharded and sharded,
#   an unsharded one resumed sharded, each to the same end as the whole run;
# - the mpi backend, when built with it; nccl and staged device memory on
#   fake GPUs, when built;
# - SGD without momentum has no state to shard: accepted, and said so.
. "${top_srcdir:-.}/tests/dist/common.sh"
GLOBAL=32
common="--model mlp --dataset synthetic --synthetic-size 256 --epochs 1 --schedule constant
        --optimizer adam --lr 0.001 --threads 1 --quiet --val-split 0"
run() {   # run DIR RANKS [OPTION...]: GLOBAL/RANKS samples per rank into DIR
    dir=$1; ranks=$2; shift 2
    echo "+ cdlrun -n $ranks cdl-train $* --ckpt-dir $dir"
    # shellcheck disable=SC2086
    timeout 300 "$cdlrun" -n "$ranks" "$train" $common --batch-size $((GLOBAL / ranks)) "$@" \
        --ckpt-dir "$tmp/$dir" || fail "training into $dir"
}
resume() {   # resume FROM DIR RANKS [OPTION...]: FROM's checkpoint on to step 6 in DIR
    from=$1; dir=$2; shift 2
    cp -r "$tmp/$from" "$tmp/$dir" || fail "copying $from"
    run "$dir" "$@" --max-steps 6 --resume auto
}

run plain2 2 --max-steps 6
run shard2 2 --max-steps 6 --shard-optimizer
bitwise plain2 shard2
# --clip-grad (the norm summed over the parts) and --accum-steps.
run plain2clip 2 --max-steps 3 --clip-grad 0.05 --accum-steps 2
run shard2clip 2 --max-steps 3 --clip-grad 0.05 --accum-steps 2 --shard-optimizer
bitwise plain2clip shard2clip
run plain4 4 --max-steps 6
run shard4 4 --max-steps 6 --shard-optimizer
bitwise plain4 shard4
run shard4at3 4 --max-steps 3 --shard-optimizer
run plain4at3 4 --max-steps 3
bitwise plain4at3 shard4at3   # the gathered state is the unsharded one
resume shard4at3 s2p4 4
bitwise plain4 s2p4
resume plain4at3 p2s4 4 --shard-optimizer
bitwise plain4 p2s4
resume shard4at3 s2s4 4 --shard-optimizer
bitwise plain4 s2s4
# The check can fail: 3 and 6 steps differ.
"$cmp" "$tmp/plain4/last.safetensors" "$tmp/plain4at3/last.safetensors" --bitwise \
    >/dev/null 2>&1 && fail "3 and 6 steps compare equal"
# The mpi backend (no native reduce-scatter: the allreduce and owners'
# broadcasts), when built with MPI.
if command -v mpirun >/dev/null 2>&1 && have HAVE_MPI; then
    echo "+ mpirun -n 2 cdl-train --dist-backend mpi --shard-optimizer"
    # shellcheck disable=SC2086
    timeout 300 mpirun --allow-run-as-root --oversubscribe -n 2 "$train" $common --batch-size 16 \
        --max-steps 6 --shard-optimizer --dist-backend mpi --ckpt-dir "$tmp/mpi2" ||
        fail "training into mpi2"
    bitwise plain2 mpi2
fi

# Fake GPUs (tests/fakegpu), when built: nccl on two GPUs (device memory:
# the allreduce, owners' broadcasts on the GPU, the state gathered on the
# device for the checkpoint) and two replicas packed on one GPU (hier:nccl
# with shm among the replicas: device memory staged through the host).
fake=$builddir/tests/fakegpu/cdl-train
if [ -x "$fake" ]; then
    gpu() {   # gpu DIR [OPTION...]: 2 ranks on fake GPUs into DIR
        dir=$1; shift
        echo "+ cdlrun -n 2 fakegpu/cdl-train --device cuda $* --ckpt-dir $dir"
        # shellcheck disable=SC2086
        timeout 300 "$cdlrun" -n 2 "$fake" $common --device cuda --tf32 off --batch-size 16 \
            --max-steps 4 "$@" --ckpt-dir "$tmp/$dir" || fail "training into $dir"
    }
    export CDL_FAKE_GPUS=2
    gpu nccl
    gpu ncclshard --shard-optimizer
    bitwise nccl ncclshard
    export CDL_FAKE_GPUS=1 CDL_REPLICAS_PER_GPU=2
    gpu packed
    gpu packedshard --shard-optimizer
    bitwise packed packedshard
    unset CDL_FAKE_GPUS CDL_REPLICAS_PER_GPU
else
    echo "note: no fake GPU build: the device-memory paths are not run"
fi

echo "+ sgd without momentum, sharded"
out=$(timeout 300 "$cdlrun" -n 2 "$train" $common --optimizer sgd --momentum 0 --batch-size 16 \
    --max-steps 2 --shard-optimizer 2>&1) || fail "sgd without momentum: $out"
echo "$out" | grep -q "no state to shard" || fail "no note that sgd without momentum saves nothing: $out"
echo "sharded optimizer equivalence passed"
