#!/bin/bash
# Image-folder loading, cdl against PyTorch (not a test; about 2 minutes at
# the reduced default size, longer at full size):
#  1. loader throughput: images/s of one epoch (decode + resize + normalise
#     + batches) on a folder of 28x28 PNGs (Fashion-MNIST) and of 256x256
#     JPEGs (fitted to IMAGE_SIZE), 1 and 2 workers, cdl (bench/bench_readers)
#     against DataLoader + ImageFolder (bench/torch_loader.py), and the ratio;
#  2. cdl-train one epoch of lenet from the PNG folder against the idx files.
# Usage: bench/run_readers.sh [BUILD_DIR]
# Environment: N_PNG (60000), N_JPEG (10000), JPEG_SIZE (64), PYTHON
# (/usr/bin/python3, with Debian's python3-torchvision), WORK (a temporary
# folder; the pictures are written there once and removed at the end).
set -u
build=${1:-.}
here=$(cd "$(dirname "$0")" && pwd)
python=${PYTHON:-/usr/bin/python3}
npng=${N_PNG:-60000}
njpg=${N_JPEG:-10000}
jsize=${JPEG_SIZE:-64}
work=${WORK:-$(mktemp -d "${TMPDIR:-/tmp}/cdl-bench-readers.XXXXXX")}
trap 'rm -rf "$work"' EXIT
for p in bench/make_folders bench/bench_readers cli/cdl-train; do
    [ -x "$build/$p" ] || { echo "run_readers.sh: $build/$p not found: build it first" >&2; exit 2; }
done
"$python" -c 'import torchvision' 2>/dev/null ||
    { echo "run_readers.sh: $python lacks torchvision (apt-get install python3-torchvision)" >&2; exit 2; }
field() { echo "$2" | tr ' ' '\n' | sed -n "s/^$1=//p"; }

echo "# load average: $(cut -d' ' -f1-3 /proc/loadavg)"
"$build/bench/make_folders" "$work" "$npng" "$njpg" || exit 1
echo "| folder | workers | cdl img/s (load+epoch) | cdl later epoch img/s | torch img/s | cdl/torch |"
echo "| --- | --- | --- | --- | --- | --- |"
for set in "png/train 28 1" "jpeg $jsize 0"; do
    read -r dir size gray <<<"$set"
    for w in 1 2; do
        c=$("$build/bench/bench_readers" "$work/$dir" "$size" "$w" | grep RESULT)
        t=$("$python" "$here/torch_loader.py" "$work/$dir" "$size" "$w" "$gray" | grep RESULT)
        ci=$(field first_img_s "$c") ti=$(field img_s "$t")
        echo "| $dir ($(field n "$c") x $(field shape "$c")) | $w | $ci | $(field later_img_s "$c") | $ti | $(awk "BEGIN{printf \"%.1f\", $ci/$ti}") |"
    done
done

echo
echo "| cdl-train, lenet, 1 epoch, 2 threads | seconds (wall) |"
echo "| --- | --- |"
for src in "fashion-mnist" "imagefolder:$work/png"; do
    s=$(date +%s.%N)
    "$build/cli/cdl-train" --device cpu --threads 2 --workers 1 --epochs 1 --quiet --dataset "$src" \
        --normalize 0.2860,0.3530 --max-steps $((npng / 64)) >/dev/null || exit 1
    e=$(date +%s.%N)
    echo "| ${src%%:*} | $(awk "BEGIN{printf \"%.2f\", $e-$s}") |"
done
echo "# load average: $(cut -d' ' -f1-3 /proc/loadavg)"
