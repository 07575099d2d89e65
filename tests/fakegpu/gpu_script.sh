#!/bin/sh
# A rehearsal of tests/gpu/run.sh, the GPU checks, on the fake GPU: every
# step runs (build, ops, training, speed table against PyTorch on the CPU,
# replicas under the test double of nvidia-cuda-mps-control, graphs on and
# off, 2 packed data-parallel replicas, the --diagnose stage under the test
# double of compute-sanitizer, what it runs on), so the script that only a GPU
# machine runs for real is known to work here. Its figures mean nothing;
# what is checked is that each step ran and the table says so.
set -u
if [ "${CDL_TEST_SCOPE:-}" = unit ]; then
    echo "SKIP: end-to-end test in a unit-only pass"; exit 77
fi
builddir=$(cd "${top_builddir:-.}" && pwd)
srcdir=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d /tmp/cdl-gpu-script.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
out=$tmp/run.out
CDL_GPU_REHEARSAL=1 CDL_GPU_BUILD=$builddir CDL_GPU_LOGS=$tmp/logs CDL_FAKE_GPUS=1 \
    timeout 1200 bash "$srcdir/tests/gpu/run.sh" --diagnose --out "$tmp/logs" >"$out" 2>&1
rc=$?
sed -n '/^cdl GPU checks on/,$p' "$out"
fail() {
    echo "FAILED: $*"
    for f in "$tmp"/logs/*.log; do echo "--- $f"; tail -n 5 "$f"; done
    exit 1
}
[ $rc -eq 0 ] || fail "tests/gpu/run.sh exited $rc"
has() {   # has PATTERN WHAT: the table has a line matching PATTERN
    grep -Eq "$1" "$out" || fail "no table line for $2 (/$1/)"
}
has '^0 build with CUDA.*PASS' "the build"
has '^1 ops vs CPU backend.*PASS +([0-9]+) of \1 checks passed' "the op checks"
has '^2 train 1 epoch \(synthetic 512, batch 128\).*PASS  val acc [0-9.]+, [0-9]+ img/s' "training"
has "^2b cdl-eval --tf32 off = the run's val loss +PASS" "cdl-eval --tf32 off"
for what in 'cdl eager' 'cdl CUDA graph' 'cdl CUDA graph, input from pinned memory'; do
    has "^    $what  +[0-9]+ img/s  [0-9.]+x torch eager" "$what"
done
if python3 -c 'import torch' >/dev/null 2>&1; then
    has '^    torch [^ ]+ eager +[0-9]+ img/s  1.00x torch eager' "PyTorch"
    has '^    target +(met|NOT met)' "the speed target"
fi
has '^4 MPS replicas \(cdl CUDA graph, batch 16\)' "the MPS step"
has '^    1 replica\(s\) +[0-9]+ img/s  1.00x one replica' "one replica"
has '^    2 replica\(s\) +[0-9]+ img/s  [0-9.]+x one replica' "two replicas"
has '^    weights, graphs on vs off.*PASS' "graphs on vs off"
has '^6 2 MPS replicas on 1 GPU, hier \(2 ranks x 64\).*PASS' "data-parallel"
has '^8 bf16 products vs rounding bounds +PASS +([0-9]+) of \1 checks passed' "the bf16 bounds"
has '^8 GPT 2x32 \(rehearsal\), block 64 bf16.*(skipped: cdl-train has no --model gpt|target: )' "the GPT bf16 step"
if grep -q '^8 GPT 2x32 .*target: ' "$out"; then
    has '^    cdl bf16 +([0-9]+ tokens/s  MFU n/a|skipped: the CUDA backend has no [a-z_]+ op yet)' "cdl's GPT bf16 tokens/s"
    if grep -Eq '^    cdl bf16 +[0-9]+ tokens/s' "$out"; then
        has '^    cdl bf16, CDL_ATTN_KERNEL=mma +[0-9]+ tokens/s  MFU n/a \(wmma: [0-9]+ tokens/s\)' \
            "cdl's GPT bf16 tokens/s on the mma attention kernels"
    fi
fi
has '^9 resnet20 3x32x32, batch 8 +target: ' "the resnet step"
has '^    cdl-train, CUDA graphs (on|off) +[0-9]+ img/s' "cdl's resnet images/s"
if python3 -c 'import torch, torchvision' >/dev/null 2>&1; then
    has '^    torch [^ ]+ eager, channels_last, TF32 +[0-9]+ img/s' "PyTorch's resnet18"
fi
# Step 10 with ncu's test double (a saved log): the summary rows of both nets.
for net in 'resnet20, batch 8' 'GPT 2x32 \(rehearsal\), block 64 bf16, batch 4'; do
    has "^10 $net, one step \+ validation +total 4.00 ms in 5 kernels" "step 10's total ($net)"
done
has '^    by owner: cdl 2.00 ms \(50%\), cudnn 1.00 ms \(25%\), cublas 1.00 ms \(25%\)' "step 10's shares"
has '^    cdl: fb_fwd +2.00 ms  50.0%      2 calls' "step 10's kernel lines"
# Every row also went to table-so-far.txt as it was made.
[ "$(grep -c . "$tmp/logs/table-so-far.txt")" -ge 20 ] || fail "table-so-far.txt does not hold the rows"
for tool in memcheck racecheck synccheck; do
    has "^D compute-sanitizer $tool +PASS  ERROR SUMMARY: 0 errors" "--diagnose: $tool"
    has "^D $tool, bf16 attention +PASS  ERROR SUMMARY: 0 errors" "--diagnose: $tool on bf16 attention"
done
# What it runs on, before measuring: versions, devices, conv algorithms.
has '^visible devices: ' "the visible devices"
has '^CUDA toolkit .* cuDNN .* NCCL ' "the library versions"
has '^MPS: ' "MPS availability"
has '^  cudnn:   forward +[A-Z_]+ +(TENSOR_OP|DEFAULT|FMA)_MATH' "the seed CNN's conv algorithms"
[ -s "$tmp/logs/table.txt" ] || fail "no table.txt in the --out directory"
grep -q 'FAIL' "$out" && fail "a step failed"
grep -q '^result: PASS' "$out" || fail "no 'result: PASS'"
# The MPS daemon it started has quit (it inherited CDL_GPU_LOGS; quitting
# takes a moment after the client returns, so this polls, bounded).
left() { grep -lsz "^CDL_GPU_LOGS=$tmp/logs\$" /proc/[0-9]*/environ 2>/dev/null | head -1; }
i=0
while [ -n "$(left)" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
[ -z "$(left)" ] || fail "the MPS daemon of the script still runs ($(left))"
# A GPU node without compilers: CDL_GPU_PREBUILT=1 runs the programs built
# above and no make; CDL_GPU_STEPS=2 runs step 2 alone.
out2=$tmp/run2.out
CDL_GPU_REHEARSAL=1 CDL_GPU_BUILD=$builddir CDL_GPU_PREBUILT=1 CDL_GPU_STEPS=2 CDL_FAKE_GPUS=1 \
    timeout 600 bash "$srcdir/tests/gpu/run.sh" --out "$tmp/logs2" >"$out2" 2>&1 ||
    { cat "$out2"; fail "tests/gpu/run.sh with CDL_GPU_PREBUILT=1 CDL_GPU_STEPS=2 exited $?"; }
grep -Eq '^0 build with CUDA +PASS  prebuilt in ' "$out2" || fail "no prebuilt row"
grep -Eq '^2 train 1 epoch .*PASS' "$out2" || fail "CDL_GPU_STEPS=2 did not train"
grep -Eq '^([13-9] |D )' "$out2" && fail "CDL_GPU_STEPS=2 ran other steps: $(grep -E '^([13-9] |D )' "$out2")"
grep -Eq '^steps asked for \(CDL_GPU_STEPS\) +2$' "$out2" || fail "no row naming the steps asked for"
[ ! -e "$tmp/logs2/make.log" ] || fail "CDL_GPU_PREBUILT=1 ran make"
echo "PASS: tests/gpu/run.sh rehearsed on the fake GPU"
