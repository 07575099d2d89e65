#!/bin/bash
# Data-parallel scaling on one node: the seed CNN trained by 2 ranks x 1
# thread (cdlrun, shm allreduce) against 1 rank x 2 threads, same global
# batch, same synthetic 3x32x32 data, one epoch each. Runs alternate (A B A
# B ...) so load from elsewhere hits both alike; the figure is the median of
# the per-pair ratios, with each side's median, min and max images/s.
# Target (issue 4): 2 x 1 reaches >= 95% of 1 x 2.
#
# Usage: bench/run_ddp.sh [BUILD_DIR]   (holds cli/cdl-train and launcher/cdlrun)
# Environment: RUNS=7 pairs, SAMPLES=30000 images per epoch, BATCH=64 global.
set -u

build=${1:-.}
train="$build/cli/cdl-train"
cdlrun="$build/launcher/cdlrun"
runs=${RUNS:-7}
samples=${SAMPLES:-30000}
batch=${BATCH:-64}
for f in "$train" "$cdlrun"; do
    if [ ! -x "$f" ]; then
        echo "run_ddp.sh: $f not found: build first (make) and pass the build directory" >&2
        exit 2
    fi
done
if [ $((batch % 2)) -ne 0 ]; then
    echo "run_ddp.sh: BATCH=$batch must be even (it is split over 2 ranks)" >&2
    exit 2
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/cdl-bench-ddp.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
common=(--dataset synthetic --synthetic-size "$samples" --epochs 1 --no-progress -q)

# img/s of the run whose metrics file is $1 ("" when the run failed).
ips() { sed -n 's/.*"images_per_sec":\([0-9.]*\).*/\1/p' "$1" | tail -n1; }

one_rank() {
    rm -f "$tmp/a.json"
    "$train" "${common[@]}" --threads 2 --batch-size "$batch" --metrics "$tmp/a.json" ||
        return 1
    ips "$tmp/a.json"
}

two_ranks() {
    rm -f "$tmp/b.json"
    # Every rank appends the same global figures; rank 0's line is enough.
    "$cdlrun" -n 2 "$train" "${common[@]}" --threads 1 --batch-size $((batch / 2)) \
        --metrics "$tmp/b.json" 2> >(grep -v '^cdl: rank 0' >&2) || return 1
    ips "$tmp/b.json"
}

bench="$train" bench_args="--dataset synthetic --synthetic-size 64 --epochs 1 --max-steps 1 -q"
. "$(cd "$(dirname "$0")" && pwd)/openblas_core.sh"
echo "machine: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1), $(nproc) CPUs;" \
     "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "seed CNN, synthetic 3x32x32, $samples images, global batch $batch, $runs alternating pairs"
one_rank >/dev/null && two_ranks >/dev/null || { echo "run_ddp.sh: warm-up run failed" >&2; exit 1; }
a_all=() b_all=() r_all=()
for ((i = 0; i < runs; i++)); do
    a=$(one_rank) && b=$(two_ranks) || { echo "run_ddp.sh: run $i failed" >&2; exit 1; }
    a_all+=("$a") b_all+=("$b")
    r_all+=("$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.4f", b / a }')")
done

# median min max of the arguments
stats() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END {
    m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
    printf "%s %s %s", m, v[1], v[NR] }'; }

read -r am amin amax <<<"$(stats "${a_all[@]}")"
read -r bm bmin bmax <<<"$(stats "${b_all[@]}")"
read -r rm rmin rmax <<<"$(stats "${r_all[@]}")"
printf '\n| layout | images/s median | min | max |\n| --- | --- | --- | --- |\n'
printf '| 1 rank x 2 threads, batch %d | %.0f | %.0f | %.0f |\n' "$batch" "$am" "$amin" "$amax"
printf '| 2 ranks x 1 thread (cdlrun, shm), batch %d each | %.0f | %.0f | %.0f |\n' \
    $((batch / 2)) "$bm" "$bmin" "$bmax"
awk -v r="$rm" -v lo="$rmin" -v hi="$rmax" 'BEGIN {
    printf "\n2x1 / 1x2, median of pairs: %.1f%% (min %.1f%%, max %.1f%%); target >= 95%%: %s\n",
        100 * r, 100 * lo, 100 * hi, (r >= 0.95 ? "met" : "MISSED") }'
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
