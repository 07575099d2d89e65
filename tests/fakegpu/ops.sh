#!/bin/sh
# tests/gpu/ops_vs_cpu, the op-by-op check of the CUDA backend against the
# CPU backend, run on the fake GPU: every op forward and backward in strict
# FP32 and TF32, reproducibility, and CUDA-graph capture and replay against
# eager steps, two models' workspaces on one backend, the ops of residual
# networks (batch norm, activations, joins, label smoothing; in a graph
# step too), grouped/dilated convolutions and the ops of transformers
# (layer norm, embedding, broadcast add, ignored labels). With
# CDL_LOG=cudnn the backend prints the algorithm and math type of every
# convolution plan: TF32 must reach cuDNN as tensor-op math (for float data
# that is TF32, not half), strict FP32 must be FMA math, and no plan may
# convert to half precision (ALLOW_CONVERSION).
# One process and about 10 s: it runs in the unit-only passes too, so the
# ASan+UBSan build checks the backend's host code and the fake's leaks.
set -u
out=$(mktemp /tmp/cdl-fakegpu-ops.XXXXXX)
trap 'rm -f "$out"' EXIT
CDL_LOG=cudnn timeout 600 "${top_builddir:-.}/tests/fakegpu/ops_vs_cpu" >"$out" 2>&1
rc=$?
grep -E '^(FAIL|fakegpu:)' "$out"
tail -n 1 "$out"
[ $rc -eq 0 ] || { echo "FAILED: ops_vs_cpu on the fake GPU exited $rc"; exit 1; }
grep -q '^fakegpu:' "$out" && { echo "FAILED: the fake GPU reported a misuse"; exit 1; }
# The plans' math types: "TF32 on|off" in each plan's header line, then one
# line per direction.
math=$(awk '/^cdl: cudnn: GPU/ { tf = ($0 ~ /TF32 on/) ? "on" : "off"; next }
            /^cdl: cudnn:   / { print tf, $3, $4, $5 }' "$out" | sort | uniq -c)
echo "conv plans (count, TF32, direction, math):"; echo "$math"
[ -n "$math" ] || { echo "FAILED: CDL_LOG=cudnn printed no convolution plan"; exit 1; }
echo "$math" | grep -q 'ALLOW_CONVERSION' &&
    { echo "FAILED: a plan converts to half precision"; exit 1; }
echo "$math" | grep ' off ' | grep -vq 'FMA_MATH' &&
    { echo "FAILED: a strict-FP32 plan is not FMA math"; exit 1; }
echo "$math" | grep -q ' on forward [A-Z_0-9]* TENSOR_OP_MATH$' ||
    { echo "FAILED: with TF32 on, no forward convolution uses tensor-op (TF32) math"; exit 1; }
echo "PASS: CUDA backend ops on the fake GPU"
