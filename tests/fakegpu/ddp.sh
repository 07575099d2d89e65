#!/bin/sh
# Data-parallel GPU training on fake GPUs (tests/fakegpu, with its NCCL):
# cdlrun ranks of cdl-train --device cuda against the same ranks on the CPU.
# - one rank per GPU: collectives over nccl, gradient buckets reduced on
#   NCCL's stream during backward; neither bucket size nor each rank
#   seeing only its own GPU (CUDA_VISIBLE_DEVICES) changes a bit;
# - replicas packed on a GPU (CDL_REPLICAS_PER_GPU, as under --cdl-mps):
#   hier:nccl, shared memory among a GPU's ranks and NCCL between GPUs,
#   on two GPUs of two replicas and on one GPU of two, and on two emulated
#   nodes that pack differently (3 replicas on one GPU, 1 on the other);
# - --clip-grad, sharded optimizer or not, 2 and 4 GPUs: bitwise the
#   same, and no step waits on the host;
# - each of these equals one CPU process with the same global batch, one
#   step at a time from its checkpoints at steps 1 and 8 (the epoch's
#   last, partial batch), updates within STEP_TOL (tests/dist/
#   step_equiv.sh: over whole runs on random labels the difference of
#   summation orders grows until it depends on the CPU's BLAS kernels);
# - batchnorm2d sync=true over NCCL: 2 GPUs step like one CPU process on
#   their combined batch (step_equiv.sh), and without sync they do not;
# - validation on 2 GPUs (NCCL, or packed on one) gives cdl-eval's loss of
#   the checkpoint: rank 0's batch-norm statistics broadcast from the GPU;
# - MFU of replicas packed on one GPU is over that one GPU;
# - SIGUSR1 to one rank stops both at the same step, checkpointed (exit 75);
# - the mistakes: two ranks on one GPU without packing, --dist-backend nccl
#   with packed ranks or on the CPU, each an error that says what to do.
set -u
if [ "${CDL_TEST_SCOPE:-}" = unit ]; then
    echo "SKIP: end-to-end test in a unit-only pass"; exit 77
fi
builddir=${top_builddir:-.}
fake=$builddir/tests/fakegpu/cdl-train
cpu=$builddir/cli/cdl-train
cdlrun=$builddir/launcher/cdlrun
cmp=$builddir/tests/dist/weights_cmp
tmp=$(mktemp -d /tmp/cdl-fakeddp.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
GLOBAL=16
common="--dataset synthetic --synthetic-size 136 --epochs 2 --schedule constant --lr 0.01 --threads 1 --tf32 off --no-progress"
fail() { echo "FAILED: $*"; exit 1; }
. "${top_srcdir:-.}/tests/dist/step_equiv.sh"
run() {   # run DIR RANKS PROGRAM ARGS...: GLOBAL/RANKS samples per rank into DIR
    dir=$1 ranks=$2 prog=$3; shift 3
    echo "+ cdlrun -n $ranks $(basename "$(dirname "$prog")")/cdl-train --batch-size $((GLOBAL / ranks)) $*"
    timeout 600 "$cdlrun" -n "$ranks" --timeout 120 "$prog" $common --batch-size $((GLOBAL / ranks)) \
        --ckpt-dir "$tmp/$dir" "$@" >"$tmp/$dir.out" 2>&1 || { cat "$tmp/$dir.out"; fail "training into $dir"; }
    ! grep -q -E "^fake(gpu|nccl):" "$tmp/$dir.out" || { cat "$tmp/$dir.out"; fail "$dir misused the fake GPU"; }
}
says() {  # says DIR TEXT: DIR's output has TEXT
    grep -q -- "$2" "$tmp/$1.out" || { cat "$tmp/$1.out"; fail "$1 does not say '$2'"; }
}
same() {  # same A B MODE...
    a=$1 b=$2; shift 2
    out=$("$cmp" "$tmp/$a/last.safetensors" "$tmp/$b/last.safetensors" "$@" 2>&1)
    rc=$?
    echo "  $a vs $b ($*): $out"
    [ $rc -eq 0 ] || fail "weights of $a and $b differ beyond $*"
}
refused() {  # refused NAME TEXT ENV... -- RANKS PROGRAM ARGS...: fails, saying TEXT
    name=$1 text=$2; shift 2
    echo "+ $name"
    env "$@" >"$tmp/$name.out" 2>&1 && { cat "$tmp/$name.out"; fail "$name succeeded"; }
    says "$name" "$text"
}

export CDL_FAKE_GPUS=2
run nccl2 2 "$fake" --device cuda
says nccl2 "collectives over nccl "
says nccl2 "gradients reduced by NCCL during backward"
CDL_DDP_BUCKET_KB=16 run nccl2small 2 "$fake" --device cuda
same nccl2small nccl2 --bitwise
# --clip-grad over NCCL, sharded (--shard-optimizer) and not, on 2 and 4
# GPUs: the whole step is queued on the GPUs either way (gradient buckets,
# the norm and the clip, and sharded the owners' parameter broadcasts), and
# both sum the norm's parts in rank order: the same bits. The fake counts
# each process's blocking host waits (CDL_FAKE_COUNT_WAITS): 4 more steps
# must add none, sharded or not (a step that waits on the host adds at
# least one per step).
waits() {  # waits NAME: the blocking host waits of NAME's ranks, summed
    awk '{ n += $2 } END { print n + 0 }' "$tmp/$1.waits"
}
for w in 2 4; do
    for shard in "" --shard-optimizer; do
        name=nccl${w}clip${shard:+shard}
        for steps in 2 6; do
            CDL_FAKE_GPUS=$w CDL_FAKE_COUNT_WAITS=$tmp/$name$steps.waits run $name$steps $w "$fake" \
                --device cuda --clip-grad 0.05 --max-steps $steps $shard
        done
        says ${name}6 "gradients reduced by NCCL during backward"
        a=$(waits ${name}2) b=$(waits ${name}6)
        echo "  $name: $a host waits in 2 steps, $b in 6"
        [ "$a" -gt 0 ] && [ "$a" -eq "$b" ] || fail "$name: steps 3-6 waited on the host ($a, then $b)"
    done
    same nccl${w}clip6 nccl${w}clipshard6 --bitwise
done
export CDL_FAKE_GPUS=2   # assignments before a function call may outlive it
unset CDL_FAKE_COUNT_WAITS
# Each rank shown only its own GPU (CUDA_VISIBLE_DEVICES=LOCAL_RANK, as a
# scheduler's GPU binding does): every rank opens its device 0, and they
# are still two GPUs, told apart by UUID.
own=$tmp/own-gpu.sh
printf '#!/bin/sh\nCUDA_VISIBLE_DEVICES=$LOCAL_RANK exec "%s" "$@"\n' "$fake" >"$own" && chmod +x "$own"
run owngpu 2 "$own" --device cuda
says owngpu "collectives over nccl "
same owngpu nccl2 --bitwise

# Nodes that pack differently, as --cdl-mps gives `srun -N2 -n4` laid out 3+1:
# node 0's three ranks share its GPU (CDL_REPLICAS_PER_GPU=3), node 1's lone
# rank has its GPU to itself (1). Every rank must choose the same
# collectives (the lone rank chose a flat NCCL world and refused node 0's
# sharing). Two emulated nodes under mpirun, each shown its own fake GPU.
mpirun=
command -v mpirun >/dev/null 2>&1 && mpirun="mpirun --allow-run-as-root --oversubscribe"
uneven='r=$OMPI_COMM_WORLD_RANK
if [ "$r" -lt 3 ]; then
    export NODE_RANK=0 LOCAL_RANK=$r LOCAL_WORLD_SIZE=3 CDL_REPLICAS_PER_GPU=3 CUDA_VISIBLE_DEVICES=0
else
    export NODE_RANK=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 CDL_REPLICAS_PER_GPU=1 CUDA_VISIBLE_DEVICES=1
fi
RANK=$r WORLD_SIZE=4 CDL_NNODES=2 exec "$0" "$@"'
nodes() {  # nodes DIR PROGRAM ARGS...: 4 ranks on the two nodes above into DIR
    dir=$1 prog=$2; shift 2
    echo "+ mpirun -n 4 (nodes of 3 and 1 ranks) cdl-train --batch-size $((GLOBAL / 4)) $*"
    CDL_TIMEOUT=120 timeout 600 $mpirun -x CDL_TIMEOUT -n 4 sh -c "$uneven" "$prog" $common \
        --batch-size $((GLOBAL / 4)) --ckpt-dir "$tmp/$dir" "$@" >"$tmp/$dir.out" 2>&1 ||
        { cat "$tmp/$dir.out"; fail "training into $dir"; }
    ! grep -q -E "^fake(gpu|nccl):" "$tmp/$dir.out" || { cat "$tmp/$dir.out"; fail "$dir misused the fake GPU"; }
}

# One step from the CPU process's checkpoints (the global batch stays: the
# resume continues after the same global samples).
sm="--model $STEP_MODEL"
run b1 1 "$cpu" --device cpu $sm --max-steps 1
cp -r "$tmp/b1" "$tmp/b8" && run b8 1 "$cpu" --device cpu $sm --max-steps 8 --resume auto
for s in 1 8; do
    base=$tmp/b$s
    from="$sm --max-steps $((s + 1)) --resume-allow batch-size --resume $base"
    run s$s 1 "$cpu" --device cpu $from/last.safetensors
    run s$s-nccl2 2 "$fake" --device cuda $from/last.safetensors
    says s$s-nccl2 "collectives over nccl "
    step_same s$s s$s-nccl2 "$base"
    CDL_REPLICAS_PER_GPU=2 run s$s-packed4 4 "$fake" --device cuda $from/last.safetensors
    says s$s-packed4 "collectives over hier:nccl "
    step_same s$s s$s-packed4 "$base"
    CDL_FAKE_GPUS=1 CDL_REPLICAS_PER_GPU=2 run s$s-packed2 2 "$fake" --device cuda $from/last.safetensors
    step_same s$s s$s-packed2 "$base"
    if [ -n "$mpirun" ]; then
        nodes s$s-uneven "$fake" --device cuda $from/last.safetensors
        says s$s-uneven "collectives over hier:nccl "
        step_same s$s s$s-uneven "$base"
    fi
done

# batchnorm2d sync=true (SyncBatchNorm): the statistics of the forward and
# backward are summed over the ranks on NCCL's stream, so 2 GPUs of 8
# samples step like one CPU process of 16, within STEP_TOL; without sync
# each GPU normalises its own 8 and the step is another (the check bites).
# Smooth, convolution without the bias batch norm cancels.
sbn=$tmp/syncbn.spec
printf 'conv2d 6 kernel=5 bias=false\nbatchnorm2d sync=true\navgpool2d 4\nflatten\nlinear 10\n' >"$sbn"
sed 's/ sync=true//' "$sbn" >"$tmp/plainbn.spec"
run bn0 1 "$cpu" --device cpu --model "$sbn" --max-steps 1
from="--max-steps 2 --resume-allow batch-size --resume $tmp/bn0/last.safetensors"
run bn1 1 "$cpu" --device cpu --model "$sbn" $from
run bn2 2 "$fake" --device cuda --model "$sbn" $from
says bn2 "collectives over nccl "
step_same bn1 bn2 "$tmp/bn0"
# (its own checkpoint of the same step: one that names another spec is
# not resumed)
run bn0plain 1 "$cpu" --device cpu --model "$tmp/plainbn.spec" --max-steps 1
run bn2plain 2 "$fake" --device cuda --model "$tmp/plainbn.spec" --max-steps 2 --resume-allow batch-size \
    --resume "$tmp/bn0plain/last.safetensors"
"$cmp" "$tmp/bn1/last.safetensors" "$tmp/bn2plain/last.safetensors" --base "$tmp/bn0/last.safetensors" \
    --rel "$STEP_TOL" >/dev/null 2>&1 && fail "batch norm without sync stepped like one process: the check cannot tell"

# Validation on several GPU ranks measures rank 0's batch-norm running
# statistics, the checkpoint's (train_evaluate broadcasts them over the
# GPU collectives, from device memory): the run's last validation loss is
# cdl-eval's of its last.safetensors, over NCCL and with 2 replicas packed
# on one GPU (hier: shared memory among a GPU's ranks). Each rank's own
# statistics gave 1.4e-4 more here.
for how in nccl packed; do
    if [ $how = nccl ]; then
        run bnval$how 2 "$fake" --device cuda --model "$tmp/plainbn.spec" --metrics "$tmp/bnval$how.json"
    else
        CDL_FAKE_GPUS=1 CDL_REPLICAS_PER_GPU=2 run bnval$how 2 "$fake" --device cuda \
            --model "$tmp/plainbn.spec" --metrics "$tmp/bnval$how.json"
    fi
    want=$(sed -n 's/^{"type":"epoch".*"val_loss":\([^,}]*\).*/\1/p' "$tmp/bnval$how.json" | tail -n 1)
    got=$("$builddir/tests/fakegpu/cdl-eval" "$tmp/bnval$how/last.safetensors" --device cuda --split val --tf32 off \
        --threads 1 --json 2>"$tmp/bnval$how.err" | sed -n 's/.*"loss":\([^,}]*\).*/\1/p')
    [ -n "$got" ] || { cat "$tmp/bnval$how.err"; fail "cdl-eval of bnval$how"; }
    awk -v a="$want" -v b="$got" 'BEGIN { d = a - b; exit !(a != "" && d <= 1e-5 && d >= -1e-5) }' ||
        fail "$how: the run's validation loss $want is not cdl-eval's $got of its checkpoint"
    echo "  $how: val loss $want, cdl-eval $got"
done

# MFU is per GPU, not per rank: 2 replicas packed on one GPU (as under
# --cdl-mps) report their tokens' FLOPs over one GPU's peak (they were
# divided by 2 devices). A one-layer GPT, --peak-tflops 0.001 (1 GFLOP/s).
i=0
while [ $i -lt 100 ]; do printf 0123456789; i=$((i + 1)); done >"$tmp/count.txt"
CDL_FAKE_GPUS=1 CDL_REPLICAS_PER_GPU=2 run gptpacked 2 "$fake" --device cuda \
    --model gpt:n_layer=1,n_head=2,n_embd=32 --dataset "text:$tmp/count.txt" --block-size 16 \
    --max-steps 2 --peak-tflops 0.001 --metrics "$tmp/gptpacked.json"
gflop=$(sed -n 's/.*MFU: \([0-9.e+-]*\) GFLOP per token .*/\1/p' "$tmp/gptpacked.out" | head -1)
sed -n 's/^{"type":"epoch".*"tokens_per_sec":\([0-9.]*\),"mfu":\([0-9.]*\).*/\1 \2/p' "$tmp/gptpacked.json" |
    awk -v g="$gflop" '{ n++; want = g * $1; d = $2 - want; if (d < 0) d = -d
        printf "  gptpacked: %s tokens/s, mfu %s (1 GPU: %g)\n", $1, $2, want
        # to 1 %: the GFLOP line has 3 digits
        if (!(g > 0) || d > 1e-2 * want + 1e-6) bad = 1 } END { exit bad || n != 1 }' ||
    { cat "$tmp/gptpacked.out" "$tmp/gptpacked.json"; fail "MFU of 2 replicas on one GPU is not over one GPU"; }

# SIGUSR1 to rank 1 alone: with NCCL the stop agreement rides with the
# steps (no host collective per step), and still every rank stops at the
# same step, writes the checkpoint and exits 75 (requeue).
echo "+ SIGUSR1 to rank 1 of 2"
"$cdlrun" -n 2 -v --label --timeout 120 "$fake" $common --epochs 1000 --batch-size 8 --device cuda \
    --ckpt-dir "$tmp/sig" --ckpt-every 3 >"$tmp/sig.out" 2>&1 &
pid=$!
trap 'kill -9 $pid 2>/dev/null; rm -rf "$tmp"' EXIT
i=0
while [ ! -s "$tmp/sig/last.safetensors" ]; do   # bounded: training runs
    i=$((i + 1))
    [ $i -le 1200 ] || { cat "$tmp/sig.out"; fail "no checkpoint after 120 s"; }
    kill -0 $pid 2>/dev/null || { cat "$tmp/sig.out"; fail "training ended early"; }
    sleep 0.1
done
victim=$(sed -n 's/^cdlrun: rank 1: pid \([0-9]*\),.*/\1/p' "$tmp/sig.out")
[ -n "$victim" ] || { cat "$tmp/sig.out"; fail "no pid for rank 1"; }
kill -USR1 "$victim"
i=0
while kill -0 $pid 2>/dev/null; do
    i=$((i + 1))
    [ $i -le 1200 ] || { cat "$tmp/sig.out"; fail "ranks still running 120 s after SIGUSR1"; }
    sleep 0.1
done
wait $pid
rc=$?
[ $rc -eq 75 ] || { cat "$tmp/sig.out"; fail "cdlrun exited $rc after SIGUSR1, expected 75"; }
says sig "^\[0\] .*stopped by signal at epoch"
! grep -q -E "fake(gpu|nccl):" "$tmp/sig.out" || { cat "$tmp/sig.out"; fail "sig misused the fake GPU"; }
stopped=$(sed -n 's/.*stopped by signal at .*(step \([0-9]*\)).*/\1/p' "$tmp/sig.out" | head -1)
echo "  both ranks stopped at step $stopped, exit 75"
run sigresume 2 "$fake" --device cuda --resume-allow epochs --resume "$tmp/sig/last.safetensors" --max-steps $((stopped + 2))
says sigresume "resuming from .*step $stopped"

cuda="$fake $common --batch-size 8 --device cuda"
refused unpacked "set CDL_REPLICAS_PER_GPU to the number of ranks per GPU" \
    CDL_FAKE_GPUS=1 timeout 120 "$cdlrun" -n 2 --timeout 60 $cuda
refused nccl-packed "use auto or hier:nccl" \
    CDL_FAKE_GPUS=1 CDL_REPLICAS_PER_GPU=2 timeout 120 "$cdlrun" -n 2 --timeout 60 $cuda --dist-backend nccl
refused nccl-cpu "needs the cuda backend (--device cuda)" \
    timeout 120 "$cdlrun" -n 2 --timeout 60 "$cpu" $common --batch-size 8 --device cpu --dist-backend nccl
echo "PASS: data-parallel training on fake GPUs"
