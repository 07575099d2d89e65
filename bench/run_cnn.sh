#!/bin/bash
# The seed CNN's training speed, cdl against PyTorch, side by side:
# rows batch 64/512 x threads 1/2; columns cdl img/s, torch tuned img/s
# (OPENBLAS_NUM_THREADS=1 + torch.set_num_threads), torch default img/s (only
# torch.set_num_threads), cdl/tuned, cdl's share of this machine's SGEMM
# speed; then the peak RSS of both at batch 512; then a real Fashion-MNIST
# epoch through the loader against synthetic images (bench/bench_data).
#
# Usage: bench/run_cnn.sh [BUILD_DIR]   (BUILD_DIR holds bench/bench_cnn;
#        default: the current directory). Takes about two minutes. Measure on
#        a quiet machine: the load average is printed before and after.
# Environment: BATCHES="64 512", THREADS="1 2", RUNS=7, DATA_RUNS=5, PYTHON=/usr/bin/python3.
set -u

build=${1:-.}
here=$(cd "$(dirname "$0")" && pwd)
bench="$build/bench/bench_cnn"
python=${PYTHON:-/usr/bin/python3}
batches=${BATCHES:-64 512}
threads_list=${THREADS:-1 2}
runs=${RUNS:-7}

if [ ! -x "$bench" ]; then
    echo "run_cnn.sh: $bench not found: build it (make bench/bench_cnn) and pass the build directory" >&2
    exit 2
fi

# field KEY LINE: the value of KEY=value in a RESULT line ("-" if absent).
field() {
    local v
    v=$(printf '%s\n' "$2" | tr ' ' '\n' | sed -n "s/^$1=//p" | head -n1)
    printf '%s' "${v:--}"
}

result() { grep '^RESULT' | tail -n1; }

mib() { if [[ ${1:-} =~ ^[0-9]+$ ]]; then echo $(( $1 / 1024 )); else echo -; fi; }

cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1)
echo "machine: ${cpu:-unknown CPU}, $(nproc) CPUs; load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
bench_args="--batch 8 --threads 1 --steps 1 --runs 5"
. "$here/openblas_core.sh"
torch_version=$("$python" -c 'import torch; print(torch.__version__)' 2>/dev/null || echo "not importable with $python")
echo "torch: $torch_version"
echo

declare -A rss
rows=()
for b in $batches; do
    for t in $threads_list; do
        c=$("$bench" --batch "$b" --threads "$t" --runs "$runs" | result)
        tt=$("$python" "$here/torch_cnn.py" --batch "$b" --threads "$t" --runs "$runs" --mode tuned | result)
        td=$("$python" "$here/torch_cnn.py" --batch "$b" --threads "$t" --runs "$runs" --mode default | result)
        ci=$(field img_s "$c"); ti=$(field img_s "$tt"); di=$(field img_s "$td")
        ratio=-
        if [ "$ci" != - ] && [ "$ti" != - ]; then
            ratio=$(awk -v a="$ci" -v b="$ti" 'BEGIN { printf "%.2f", a / b }')
        fi
        rows+=("$(printf '| %5s | %7s | %21s | %21s | %21s | %9s | %16s |' "$b" "$t" \
            "$ci ($(field min "$c")-$(field max "$c"))" "$ti ($(field min "$tt")-$(field max "$tt"))" \
            "$di ($(field min "$td")-$(field max "$td"))" \
            "$ratio" "$(field peak_pct "$c")% of $(field sgemm_gflops "$c")")")
        rss[cdl-$b-$t]=$(field rss_kb "$c"); rss[torch-$b-$t]=$(field rss_kb "$tt")
        rss[torchd-$b-$t]=$(field rss_kb "$td")
    done
done

echo "| batch | threads | cdl img/s (min-max)   | torch tuned (min-max) | torch default (min-max) | cdl/tuned | cdl % SGEMM GF/s |"
echo "|-------|---------|-----------------------|-----------------------|-------------------------|-----------|------------------|"
printf '%s\n' "${rows[@]}"
echo
for b in $batches; do
    [ "$b" = 512 ] || continue
    for t in $threads_list; do
        echo "peak RSS, batch 512, $t thread(s): cdl $(mib "${rss[cdl-$b-$t]}") MiB," \
             "torch tuned $(mib "${rss[torch-$b-$t]}") MiB, torch default $(mib "${rss[torchd-$b-$t]}") MiB"
    done
done
echo "img/s: median (min-max) of $runs runs after a warm-up run; cdl/tuned: ratio of medians; SGEMM GF/s: OpenBLAS 2048^3 on the same threads"

# Second table: does the loader keep up? A real Fashion-MNIST epoch through
# cdl_loader (1 worker thread) against as many synthetic images in memory.
data="$build/bench/bench_data"
echo
if [ -x "$data" ]; then
    drows=()
    for b in $batches; do
        for t in $threads_list; do
            d=$("$data" --batch "$b" --threads "$t" --runs "${DATA_RUNS:-5}")
            rc=$?
            if [ $rc -eq 77 ]; then echo "$d"; drows=(); break 2; fi
            d=$(printf '%s\n' "$d" | result)
            drows+=("$(printf '| %5s | %7s | %15s | %13s | %19s |' "$b" "$t" "$(field synthetic "$d")" \
                "$(field real "$d")" "$(field ratio "$d") ($(field ratio_min "$d")-$(field ratio_max "$d"))")")
        done
    done
    if [ ${#drows[@]} -gt 0 ]; then
        echo "| batch | threads | synthetic img/s | real img/s | real/synthetic (min-max) |"
        echo "|-------|---------|-----------------|------------|--------------------------|"
        printf '%s\n' "${drows[@]}"
        echo "seed CNN on 1x28x28; real: Fashion-MNIST train split shuffled through the loader;"
        echo "median of ${DATA_RUNS:-5} alternating pairs of epochs; target: real within 10% of synthetic"
    fi
else
    echo "real-data table skipped: $data not built"
fi
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
