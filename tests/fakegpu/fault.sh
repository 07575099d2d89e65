#!/bin/sh
# An asynchronous GPU fault (injected by the fake runtime: CDL_FAKE_FAULT_AT
# makes one queued item of work fault when it runs) surfaces at a later
# call, as on a GPU. cdl-train must stop, not hang, and its message must
# say what happened: an asynchronous fault, the last ops issued (the
# suspects, not just the call that noticed), that the GPU context is lost,
# and how to find the op (CUDA_LAUNCH_BLOCKING=1, compute-sanitizer).
set -u
if [ "${CDL_TEST_SCOPE:-}" = unit ]; then
    echo "SKIP: end-to-end test in a unit-only pass"; exit 77
fi
builddir=${top_builddir:-.}
tmp=$(mktemp -d /tmp/cdl-fakefault.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
for at in 40 300; do   # in the first step, and later in the pipelined loop
    CDL_FAKE_GPUS=1 CDL_FAKE_FAULT_AT=$at timeout 300 "$builddir/tests/fakegpu/cdl-train" \
        --device cuda --dataset synthetic --synthetic-size 136 --batch-size 16 --epochs 2 \
        --threads 1 --no-progress --ckpt-dir "$tmp/ckpt$at" >"$tmp/out" 2>&1
    rc=$?
    echo "fault at item $at: exit $rc"; grep -m1 'asynchronous fault\|error' "$tmp/out"
    [ $rc -ne 0 ] && [ $rc -ne 124 ] || { cat "$tmp/out"; echo "FAILED: exit $rc (0: fault unnoticed, 124: hung)"; exit 1; }
    for text in 'cudaErrorIllegalAddress' 'asynchronous fault on GPU 0' 'ops issued (oldest first): [a-z0-9_]' \
            'GPU context is lost' 'CUDA_LAUNCH_BLOCKING=1' 'compute-sanitizer'; do
        grep -q "$text" "$tmp/out" || { cat "$tmp/out"; echo "FAILED: the report lacks '$text'"; exit 1; }
    done
done
echo "PASS: an asynchronous fault is reported with its suspects and what to do"
