#!/bin/sh
# tests/gpu/ops_vs_cpu, the op-by-op check of the CUDA backend against the
# CPU backend, run on the fake GPU: every op forward and backward in strict
# FP32 and TF32, reproducibility, and CUDA-graph capture and replay against
# eager steps (157 checks).
# One process and about 10 s: it runs in the unit-only passes too, so the
# ASan+UBSan build checks the backend's host code and the fake's leaks.
set -u
out=$(mktemp /tmp/cdl-fakegpu-ops.XXXXXX)
trap 'rm -f "$out"' EXIT
timeout 600 "${top_builddir:-.}/tests/fakegpu/ops_vs_cpu" >"$out" 2>&1
rc=$?
grep -E '^(FAIL|fakegpu:)' "$out"
tail -n 1 "$out"
[ $rc -eq 0 ] || { echo "FAILED: ops_vs_cpu on the fake GPU exited $rc"; exit 1; }
grep -q '^fakegpu:' "$out" && { echo "FAILED: the fake GPU reported a misuse"; exit 1; }
echo "PASS: CUDA backend ops on the fake GPU"
