#!/bin/bash
# ResNet-20 training speed on the CPU, cdl against every PyTorch mode a user
# could pick, side by side in one run: rows are thread counts; columns are
# cdl's images/s and its share of this machine's SGEMM speed, then PyTorch
# 2.x from PyPI (in a venv this script creates, shared with run_resnet.sh)
# eager NCHW, eager channels_last and torch.compile, and Debian's 1.13 eager
# and channels_last; the last column is cdl's ratio to the fastest PyTorch
# mode of that row (issue target: >= 1.5), and the share of the same SGEMM
# speed that mode reaches (its images/s times cdl's flops per image): how
# close each side runs to what this machine's matrix units can do, so a
# ratio can be read against the ceiling. The "fast conv" column is cdl with the
# backend's fast_conv (cdl-train --fast-conv on: Winograd F(4x4) for the
# 3x3 convolutions, more rounding error, off by default), and "fast/best" its
# ratio to the fastest PyTorch mode. Synthetic 3x32x32 batches in
# memory, SGD momentum 0.9, weight decay 1e-4 on both sides (bench_cnn.c,
# torch_speed.py). Measure on a quiet machine: the load average is printed
# before and after.
#
# Usage: bench/run_resnet_speed.sh [BUILD_DIR]   (BUILD_DIR holds
#        bench/bench_cnn; default: the current directory)
# Environment: THREADS="1 2" BATCH=128 STEPS=4 RUNS=5 MODEL=resnet20,
# ROUNDS=1 (each column measured ROUNDS times in turn, its best kept: 3 on
# a machine whose speed drifts),
# VENV=BUILD_DIR/bench/venv-torch2 (NO_VENV=1 skips PyPI's torch),
# PYTHON=/usr/bin/python3. About 5 minutes with the venv in place (compiling
# takes a minute per row).
set -u
build=${1:-.}
here=$(cd "$(dirname "$0")" && pwd)
threads_list=${THREADS:-1 2} batch=${BATCH:-128} steps=${STEPS:-4} runs=${RUNS:-5}
rounds=${ROUNDS:-1}
case $rounds in ''|*[!0-9]*|0) echo "run_resnet_speed.sh: ROUNDS '$rounds': use a count >= 1" >&2; exit 2 ;; esac
model=${MODEL:-resnet20}
python=${PYTHON:-/usr/bin/python3}
bench="$build/bench/bench_cnn"
[ -x "$bench" ] || { echo "run_resnet_speed.sh: $bench not found: build it (make bench/bench_cnn)" >&2; exit 2; }
# Every side on the best OpenBLAS kernels this CPU runs (Debian's torch
# multiplies with OpenBLAS too; bench_cnn's SGEMM peak is OpenBLAS's).
bench_args=--help
. "$here/openblas_core.sh"
. "$here/torch2_venv.sh"
torch2=$(torch2_venv "${VENV:-$build/bench/venv-torch2}")
# torch.compile's caches (Inductor, Triton) beside the build, not in /tmp:
# nothing is left behind there, and a later run reuses the compiled code.
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-$build/bench/torch-cache/inductor}
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-$build/bench/torch-cache/triton}
# Inductor's precompiled headers go to the temporary directory: this run's.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export TMPDIR=$tmp

field() { echo "$2" | tr ' ' '\n' | sed -n "s/^$1=//p" | head -n1; }
torch_ips() {   # torch_ips PYTHON MODE THREADS: images/s or "-"
    local r
    r=$("$1" "$here/torch_speed.py" --mode "$2" --threads "$3" --batch "$batch" --steps "$steps" \
        --runs "$runs" 2>/dev/null | grep '^RESULT' | tail -n1)
    local v; v=$(field img_s "$r")
    echo "${v:--}"
}
v2=$([ -n "$torch2" ] && "$torch2" -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null)
v1=$("$python" -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null)
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg); $model, batch $batch, $runs runs x $steps steps, best of $rounds round(s)"
printf '\n%-7s %8s %7s %8s | %9s %9s %9s | %9s %9s | %7s %7s %7s\n' threads "cdl" "%SGEMM" \
    "fast" "${v2:-2.x}" "ch_last" compile "${v1:-1.13}" ch_last "cdl/best" "fast/" "best"
printf '%-7s %8s %7s %8s | %9s %9s %9s | %9s %9s | %7s %7s %7s\n' "" "img/s" "" "conv" eager "" "" \
    eager "" "torch" "best" "%SGEMM"
# ROUNDS: every column measured that many times, in turn, keeping its
# best: a machine whose speed drifts over minutes then favours no column.
declare -A best_of pct_of
keep() {   # keep KEY VALUE: best_of[KEY] becomes the larger ("-": none)
    local old=${best_of[$1]:--}
    if [ "$old" = - ] || { [ "$2" != - ] && [ "$2" -gt "$old" ]; }; then best_of[$1]=$2; fi
}
for round in $(seq "$rounds"); do
    for t in $threads_list; do
        r=$("$bench" --model "$model" --batch "$batch" --threads "$t" --steps "$steps" \
            --runs "$runs" | grep '^RESULT')
        v=$(field img_s "$r")
        if [ -n "$v" ] && { [ -z "${best_of[cdl,$t]:-}" ] || [ "$v" -gt "${best_of[cdl,$t]}" ]; }; then
            best_of[cdl,$t]=$v
            pct_of[$t]=$(field peak_pct "$r")
        fi
        keep "fast,$t" "$(field img_s "$("$bench" --model "$model" --batch "$batch" --threads "$t" \
            --steps "$steps" --runs "$runs" --fast-conv 1 | grep '^RESULT')")"
        for mode in eager channels_last compile; do
            if [ -n "$torch2" ]; then keep "2,$mode,$t" "$(torch_ips "$torch2" "$mode" "$t")"; fi
        done
        for mode in eager channels_last; do keep "1,$mode,$t" "$(torch_ips "$python" "$mode" "$t")"; done
    done
done
for t in $threads_list; do
    cdl=${best_of[cdl,$t]:-0} pct=${pct_of[$t]:--} fast=${best_of[fast,$t]:--}
    cols=()
    for mode in eager channels_last compile; do cols+=("${best_of[2,$mode,$t]:--}"); done
    for mode in eager channels_last; do cols+=("${best_of[1,$mode,$t]:--}"); done
    best=0
    for c in "${cols[@]}"; do [ "$c" != - ] && [ "$c" -gt "$best" ] && best=$c; done
    ratio=- bpct=- fratio=-
    if [ "$best" -gt 0 ] && [ "$cdl" -gt 0 ]; then
        ratio=$(awk -v a="$cdl" -v b="$best" 'BEGIN {printf "%.2fx", a / b}')
        bpct=$(awk -v a="$cdl" -v b="$best" -v p="$pct" 'BEGIN {printf "%.1f%%", p * b / a}')
    fi
    if [ "$best" -gt 0 ] && [ "$fast" != - ]; then
        fratio=$(awk -v a="$fast" -v b="$best" 'BEGIN {printf "%.2fx", a / b}')
    fi
    printf '%-7s %8s %6s%% %8s | %9s %9s %9s | %9s %9s | %7s %7s %7s\n' "$t" "$cdl" "$pct" "$fast" \
        "${cols[@]}" "$ratio" "$fratio" "$bpct"
done
echo
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
