#!/bin/sh
# The op-test harness (tests/gpu/ops_vs_cpu.c) on the CPU backend: every op
# forward and backward against the reference CPU backend with another
# thread count, so the harness that checks the GPU backends runs in every
# build, and the CPU backend's results do not depend on its threads beyond
# the tolerances. The GPU backends: tests/fakegpu/ops.sh, tests/gpu/run.sh.
set -u
out=$(mktemp /tmp/cdl-ops-cpu.XXXXXX)
trap 'rm -f "$out"' EXIT
timeout 600 "${top_builddir:-.}/tests/gpu/ops_vs_cpu" cpu >"$out" 2>&1
rc=$?
grep -E '^(FAIL|skip)' "$out"
tail -n 1 "$out"
[ $rc -eq 0 ] || { echo "FAILED: ops_vs_cpu cpu exited $rc"; exit 1; }
grep -q '^ok   conv2d_fwd ' "$out" || { echo "FAILED: no conv2d check ran"; exit 1; }
echo "PASS: CPU backend ops against the reference"
