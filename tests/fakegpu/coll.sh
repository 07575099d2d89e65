#!/bin/sh
# tests/fakegpu/coll_order: NCCL collectives on device buffers wait for the
# compute stream's queued work, and an aborted communicator is an error;
# 2 ranks of cdlrun on 2 fake GPUs. Then, on 4: the communicator is made
# on the backend's GPU when cdl_dist is created on another thread, whose
# current device differs, and the calls keep that thread's device. Then:
# replicas packed on one GPU block while they wait for it (no core spinning
# per replica), unpacked ones not; a MIG slice is refused with a message
# that says what to do.
set -u
if [ "${CDL_TEST_SCOPE:-}" = unit ]; then
    echo "SKIP: end-to-end test in a unit-only pass"; exit 77
fi
builddir=${top_builddir:-.}
out=$(mktemp /tmp/cdl-fakecoll.XXXXXX)
trap 'rm -f "$out"' EXIT
CDL_FAKE_GPUS=2 timeout 300 "$builddir/launcher/cdlrun" -n 2 --timeout 60 \
    "$builddir/tests/fakegpu/coll_order" >"$out" 2>&1
rc=$?
cat "$out"
[ $rc -eq 0 ] || { echo "FAILED: coll_order exited $rc"; exit 1; }
[ "$(grep -c ' ok ' "$out")" -eq 6 ] || { echo "FAILED: not every check passed on both ranks"; exit 1; }
prog=$builddir/tests/fakegpu/coll_order
# The backend made on one thread (GPU 2 * rank + 1 of 4), cdl_dist on
# another with device 0 current: NCCL's communicator on the backend's GPU.
CDL_FAKE_GPUS=4 CDL_FAKE_NCCL_LOG=1 timeout 300 "$builddir/launcher/cdlrun" -n 2 --label \
    --timeout 60 "$prog" --threads >"$out" 2>&1
rc=$?
cat "$out"
[ $rc -eq 0 ] || { echo "FAILED: coll_order --threads exited $rc"; exit 1; }
[ "$(grep -c ' ok ' "$out")" -eq 14 ] ||
    { echo "FAILED: not every check of --threads passed on both ranks"; exit 1; }
for r in 0 1; do
    g=$((2 * r + 1))
    grep -q "^\[$r\] fakenccl: rank $r of 2: communicator on visible device $g (fake GPU $g)" "$out" ||
        { echo "FAILED: rank $r's communicator is not on its backend's GPU $g"; exit 1; }
done
packed=$(CDL_FAKE_GPUS=1 CDL_REPLICAS_PER_GPU=2 "$prog" --sync-flags 2>&1)
alone=$(CDL_FAKE_GPUS=1 CDL_REPLICAS_PER_GPU=1 "$prog" --sync-flags 2>&1)
echo "packed: $packed; alone: $alone"
[ "$packed" = "host waits: block" ] || { echo "FAILED: packed replicas do not block"; exit 1; }
[ "$alone" = "host waits: other" ] || { echo "FAILED: a replica alone should not change how it waits"; exit 1; }
# A MIG slice is refused with what to do (not "no GPU visible").
mig=$(CDL_FAKE_GPUS=1 CUDA_VISIBLE_DEVICES=MIG-0e1f2a3b-0000-0000-0000-000000000000 "$prog" --sync-flags 2>&1)
echo "MIG: $mig"
echo "$mig" | grep -q 'names a MIG slice.*whole GPUs' || { echo "FAILED: a MIG slice is not refused clearly"; exit 1; }
echo "PASS: NCCL collectives ordered after the compute stream, on the backend's GPU from any thread; packed replicas block; MIG refused"
