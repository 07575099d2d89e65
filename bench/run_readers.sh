#!/bin/bash
# Image-folder loading, cdl against PyTorch (not a test; about 2 minutes at
# the reduced default size, longer at full size):
#  1. loader throughput: images/s of one epoch (decode + resize + normalise
#     + batches) on a folder of 28x28 PNGs (Fashion-MNIST) and of 256x256
#     JPEGs (fitted to IMAGE_SIZE), 1 and 2 workers, cdl (bench/bench_readers)
#     against DataLoader + ImageFolder (bench/torch_loader.py) of PyTorch 2.x
#     from PyPI (torch and torchvision in a venv this script creates, shared
#     with the other benches) and of Debian's 1.13, and the ratio to the
#     faster of the two (issue target: >= 3), for both --decode memory (at
#     load, in threads) and --decode stream (in the loader's workers, every
#     epoch, as a DataLoader does);
#  2. cdl-train EPOCHS epochs of lenet from the PNG folder against the idx
#     files (target: within 10 %).
# Usage: bench/run_readers.sh [BUILD_DIR]
# Environment: N_PNG (60000), N_JPEG (10000), JPEG_SIZE (64), EPOCHS (1),
# PYTHON (/usr/bin/python3, with Debian's python3-torchvision),
# VENV (BUILD_DIR/bench/venv-torch2; NO_VENV=1 skips PyPI's torch), WORK (a
# temporary folder; the pictures are written there once and removed at the
# end).
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
. "$here/torch2_venv.sh"
torch2=$(torch2_venv "${VENV:-$build/bench/venv-torch2}" torchvision)
epochs=${EPOCHS:-1}
torch_img_s() {   # torch_img_s PYTHON DIR SIZE WORKERS GRAY: images/s or "-"
    local r
    r=$("$1" "$here/torch_loader.py" "$2" "$3" "$4" "$5" 2>/dev/null | grep RESULT)
    r=$(field img_s "$r")
    echo "${r:--}"
}

echo "# load average: $(cut -d' ' -f1-3 /proc/loadavg)"
"$build/bench/make_folders" "$work" "$npng" "$njpg" || exit 1
v2=$([ -n "$torch2" ] && "$torch2" -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null)
v1=$("$python" -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null)
echo "| folder | workers | cdl img/s (load+epoch) | cdl later epoch img/s | cdl --decode stream img/s | torch ${v2:-2.x} img/s | torch ${v1:-1.13} img/s | cdl/faster torch | stream/faster torch |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for set in "png/train 28 1" "jpeg $jsize 0"; do
    read -r dir size gray <<<"$set"
    for w in 1 2; do
        c=$("$build/bench/bench_readers" "$work/$dir" "$size" "$w" | grep RESULT)
        cs=$("$build/bench/bench_readers" "$work/$dir" "$size" "$w" 256 stream | grep RESULT)
        si=$(field first_img_s "$cs")
        t2=-
        [ -n "$torch2" ] && t2=$(torch_img_s "$torch2" "$work/$dir" "$size" "$w" "$gray")
        t1=$(torch_img_s "$python" "$work/$dir" "$size" "$w" "$gray")
        ci=$(field first_img_s "$c")
        best=$(printf '%s\n' "$t2" "$t1" | grep -v '^-$' | sort -g | tail -n1)
        ratio() { awk -v a="$1" -v b="${best:-0}" 'BEGIN{if (b > 0) printf "%.1fx", a/b; else printf "-"}'; }
        echo "| $dir ($(field n "$c") x $(field shape "$c")) | $w | $ci | $(field later_img_s "$c") | $si |" \
             "$t2 | $t1 | $(ratio "$ci") | $(ratio "$si") |"
    done
done

echo
echo "| cdl-train, lenet, $epochs epoch(s), 2 threads | seconds (wall) | / idx |"
echo "| --- | --- | --- |"
idx_s=
for src in "fashion-mnist" "imagefolder:$work/png"; do
    s=$(date +%s.%N)
    "$build/cli/cdl-train" --device cpu --threads 2 --workers 1 --epochs "$epochs" --quiet \
        --dataset "$src" --normalize 0.2860,0.3530 --max-steps $((epochs * npng / 64)) \
        >/dev/null || exit 1
    e=$(date +%s.%N)
    sec=$(awk "BEGIN{printf \"%.2f\", $e-$s}")
    idx_s=${idx_s:-$sec}
    echo "| ${src%%:*} | $sec | $(awk -v a="$sec" -v b="$idx_s" 'BEGIN{printf "%.2f", a/b}') |"
done
echo "# load average: $(cut -d' ' -f1-3 /proc/loadavg)"
