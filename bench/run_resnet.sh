#!/bin/bash
# ResNet-20 on Fashion-MNIST, cdl against PyTorch, side by side: the same
# network (cdl's built-in resnet20) and recipe (SGD momentum 0.9, weight
# decay 5e-4, cosine from LR per step, batch 128, random crop (pad 4) and
# horizontal flip), trained by cdl-train, by PyTorch 2.x from PyPI (in a
# venv this script creates) and by Debian's python3-torch 1.13; prints test
# accuracy and seconds per epoch with cdl's ratios. Target: cdl >= 93.5%
# test accuracy.
#
# Usage: bench/run_resnet.sh [BUILD_DIR]   (BUILD_DIR holds cli/cdl-train)
# Environment: EPOCHS=30 LR=0.1 BATCH=128 THREADS=2 AUGMENT=crop+flip
# (none|crop|flip|crop+flip), MAX_STEPS=0 (steps per epoch, for a quick
# check), VENV=BUILD_DIR/bench/venv-torch2 (made once, only a complete one
# is kept; NO_VENV=1 skips the PyPI column; PIP_ARGS adds pip options),
# PYTHON=/usr/bin/python3, NO_DEBIAN=1 skips Debian's 1.13 column (the
# PyPI one is the peer users pick; the two train the same net the same way),
# FAST_CONV=on trains cdl with --fast-conv on (docs/training.md).
# A full run takes hours on a small machine; a check of the script itself:
#   EPOCHS=1 MAX_STEPS=20 NO_VENV=1 bench/run_resnet.sh _build
set -u
build=${1:-.}
here=$(cd "$(dirname "$0")" && pwd)
epochs=${EPOCHS:-30} lr=${LR:-0.1} batch=${BATCH:-128} threads=${THREADS:-2}
max_steps=${MAX_STEPS:-0} augment=${AUGMENT:-crop+flip} fast_conv=${FAST_CONV:-off}
case $fast_conv in on|off) ;; *) echo "run_resnet.sh: FAST_CONV '$fast_conv': use on or off" >&2; exit 2 ;; esac
python=${PYTHON:-/usr/bin/python3}
venv=${VENV:-$build/bench/venv-torch2}
data=/usr/share/datasets/fashion-mnist
[ -x "$build/cli/cdl-train" ] || { echo "run_resnet.sh: $build/cli/cdl-train not found" >&2; exit 2; }
# Every side on the best OpenBLAS kernels this CPU runs (Debian's torch
# multiplies with OpenBLAS; cdl-train would pick them itself).
bench="$build/cli/cdl-train" bench_args=--version
. "$here/openblas_core.sh"
[ -f "$data/t10k-images-idx3-ubyte.gz" ] || { echo "run_resnet.sh: $data missing" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg); $epochs epochs, batch $batch, lr $lr, $threads threads, augment $augment, cdl --fast-conv $fast_conv"

# cdl: validation on the test set (--val-split 0), so the accuracy is the test accuracy.
steps_arg=()
[ "$max_steps" -gt 0 ] && steps_arg=(--max-steps $((max_steps * epochs)))
start=$(date +%s.%N)
"$build/cli/cdl-train" --model resnet20 --dataset fashion-mnist --val-split 0 --epochs "$epochs" \
    --batch-size "$batch" --lr "$lr" --optimizer sgd --momentum 0.9 --weight-decay 5e-4 \
    --schedule cosine --augment "$augment" --threads "$threads" --fast-conv "$fast_conv" \
    --metrics "$tmp/m.jsonl" \
    --no-progress -q "${steps_arg[@]}" || { echo "cdl-train failed" >&2; exit 1; }
end=$(date +%s.%N)
last=$(grep '"val_acc"' "$tmp/m.jsonl" | tail -n 1)
cdl_acc=$(echo "$last" | sed 's/.*"val_acc":\([0-9.]*\).*/\1/' | awk '{printf "%.2f", 100 * $1}')
cdl_s=$(grep '"val_acc"' "$tmp/m.jsonl" | sed 's/.*"seconds":\([0-9.]*\).*/\1/' |
        sort -n | awk '{a[NR]=$1} END {print (NR ? a[int((NR + 1) / 2)] : "-")}')
[ -n "$cdl_s" ] || cdl_s=$(echo "($end - $start) / $epochs" | bc -l)

torch_run() {   # torch_run PYTHON: prints the RESULT line
    # OpenBLAS's own pool (Debian's torch) gets the same thread count as torch.
    OPENBLAS_NUM_THREADS=$threads "$1" "$here/torch_resnet.py" --epochs "$epochs" --batch "$batch" --lr "$lr" \
        --threads "$threads" --max-steps "$max_steps" --augment "$augment" | tee /dev/stderr | grep '^RESULT'
}
rows=()
. "$here/torch2_venv.sh"
torch2=$(torch2_venv "$venv")
[ -n "$torch2" ] && rows+=("$(torch_run "$torch2" 2>/dev/null)")
[ "${NO_DEBIAN:-0}" = 1 ] || rows+=("$(torch_run "$python" 2>/dev/null)")

printf '\n%-24s %9s %12s %14s\n' implementation "test acc" "s / epoch" "cdl speed-up"
printf '%-24s %8s%% %12.2f %14s\n' cdl "$cdl_acc" "$cdl_s" -
for r in "${rows[@]}"; do
    [ -n "$r" ] || continue
    impl=$(echo "$r" | sed 's/.*impl=\([^ ]*\).*/\1/')
    acc=$(echo "$r" | sed 's/.*acc=\([^ ]*\).*/\1/')
    s=$(echo "$r" | sed 's/.*epoch_s=\([^ ]*\).*/\1/')
    printf '%-24s %8s%% %12.2f %13.2fx\n' "$impl" "$acc" "$s" "$(echo "$s / $cdl_s" | bc -l)"
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
