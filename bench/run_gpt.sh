#!/bin/bash
# A character GPT on Debian's fortunes corpus (fortunes-min), cdl against
# PyTorch, side by side:
#  1. learning: a ~1M-parameter GPT (4 layers, 4 heads, 144 features,
#     block 64) trained by cdl-train and by the PyTorch reference GPT
#     (tests/fixtures/gpt_ref.py) from the same initial weights (cdl writes
#     them: one step at lr 1e-12, below float rounding; PyTorch loads them
#     strictly) with the same
#     recipe (AdamW, decay on 2-D weights, clipping, constant lr) for the
#     same steps; both final models' validation loss on the same windows of
#     the last 10 % of the text, and their ratio (target: cdl within 2 %).
#  2. CPU speed: training tokens/s at 1 and 2 threads, cdl against PyTorch
#     2.x eager and torch.compile (PyPI, the venv bench/run_resnet.sh makes)
#     and Debian's python3-torch 1.13, with cdl's ratios (targets: >= 1.5x
#     eager, >= 1.2x compiled).
#
# Usage: bench/run_gpt.sh [--short] [BUILD_DIR]   (BUILD_DIR holds cli/cdl-train)
# --short: a check of the script itself in about a minute (20 steps, no
# torch.compile). Environment: STEPS=2000 BATCH=32 BLOCK=64 LR=1e-3 WD=0.1
# CLIP=1.0 SPEED_STEPS=20 THREADS_LIST="1 2" (empty: no speed part) COMPILE=1,
# ROUNDS=1 (each side measured ROUNDS times in turn, its best kept: 3 on a
# machine whose speed drifts), STEPS=0: no learning part (the speed part alone),
# VENV=BUILD_DIR/bench/venv-torch2 (NO_VENV=1 skips the PyPI columns; made
# as run_resnet.sh makes it when missing), PYTHON=/usr/bin/python3.
set -u
short=0
[ "${1:-}" = --short ] && { short=1; shift; }
build=${1:-.}
here=$(cd "$(dirname "$0")" && pwd)
if [ "$short" = 1 ]; then
    steps=${STEPS:-20} speed_steps=${SPEED_STEPS:-3} compile=${COMPILE:-0}
else
    steps=${STEPS:-2000} speed_steps=${SPEED_STEPS:-20} compile=${COMPILE:-1}
fi
batch=${BATCH:-32} block=${BLOCK:-64} lr=${LR:-1e-3} wd=${WD:-0.1} clip=${CLIP:-1.0}
rounds=${ROUNDS:-1}
case $rounds in ''|*[!0-9]*|0) echo "run_gpt.sh: ROUNDS '$rounds': use a count >= 1" >&2; exit 2 ;; esac
threads_list=${THREADS_LIST-1 2}
python=${PYTHON:-/usr/bin/python3}
venv=${VENV:-$build/bench/venv-torch2}
train="$build/cli/cdl-train"
arch="n_layer=4,n_head=4,n_embd=144"
[ -x "$train" ] || { echo "run_gpt.sh: $train not found" >&2; exit 2; }
# Every side on the best OpenBLAS kernels this CPU runs (Debian's torch
# multiplies with OpenBLAS; cdl-train would pick them itself).
bench="$train" bench_args=--version
. "$here/openblas_core.sh"
fortunes=/usr/share/games/fortunes
[ -f "$fortunes/literature" ] || { echo "run_gpt.sh: $fortunes missing (Debian: fortunes-min)" >&2; exit 2; }
"$python" -c 'import torch, safetensors' 2>/dev/null ||
    { echo "run_gpt.sh: $python lacks torch or safetensors (scripts/install-deps.sh --test)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# torch.compile's caches (Inductor, Triton) beside the build, not in /tmp:
# nothing is left behind there, and a later run reuses the compiled code.
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-$build/bench/torch-cache/inductor}
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-$build/bench/torch-cache/triton}
# Inductor's precompiled headers go to the temporary directory: this run's.
export TMPDIR=$tmp
corpus="$tmp/fortunes.txt"
"$here/../scripts/fortunes-corpus.sh" "$corpus" || exit 2
# The same clipping on both sides; without cdl's --clip-grad, none.
"$train" --help | grep -q -- --clip-grad || { clip=0; echo "note: cdl-train has no --clip-grad: no clipping on either side"; }
clip_arg=()
[ "$clip" != 0 ] && clip_arg=(--clip-grad "$clip")
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg); corpus $(wc -c <"$corpus") bytes;" \
     "gpt:$arch, block $block, batch $batch, $steps steps, lr $lr, weight decay $wd, clip $clip"

cdl() {   # cdl THREADS ARGS...: cdl-train with the recipe
    local t=$1; shift
    "$train" --model "gpt:$arch" --dataset "text:$corpus" --block-size "$block" \
        --batch-size "$batch" --optimizer adamw --weight-decay "$wd" --schedule constant \
        --epochs 100000 --seed 1 --device cpu --threads "$t" --no-progress -q "${clip_arg[@]}" "$@"
}

# PyPI's torch 2.x: the venv of run_resnet.sh (made here when missing),
# with safetensors added for loading cdl's weights.
pys=()
. "$here/torch2_venv.sh"
torch2=$(torch2_venv "$venv")
if [ -n "$torch2" ] && { "$torch2" -c 'import safetensors' 2>/dev/null ||
                         "$torch2" -m pip install -q --no-cache-dir ${PIP_ARGS:-} safetensors >&2; }; then
    pys+=("$torch2")
fi
pys+=("$python")
result() { grep '^RESULT' | sed "s/.*[ ]$1=\([^ ]*\).*/\1/"; }

# ---- 1. learning (STEPS=0: none; cdl-train would read --max-steps 0 as no limit)
if [ "$steps" -gt 0 ]; then
    cdl 2 --lr 1e-12 --max-steps 1 --ckpt-dir "$tmp/init" >"$tmp/init.log" 2>&1 ||
        { cat "$tmp/init.log" >&2; echo "run_gpt.sh: cdl-train (initial weights) failed" >&2; exit 1; }
    init="$tmp/init/last.safetensors"
    start=$(date +%s.%N)
    cdl 2 --lr "$lr" --init "$init" --max-steps "$steps" --ckpt-dir "$tmp/cdl" \
        --metrics "$tmp/cdl.jsonl" >"$tmp/cdl.log" 2>&1 ||
        { cat "$tmp/cdl.log" >&2; echo "run_gpt.sh: cdl-train failed" >&2; exit 1; }
    cdl_s=$(echo "$(date +%s.%N) - $start" | bc -l)
    ref=${pys[0]}
    "$ref" "$here/torch_gpt.py" learn --data "$corpus" --init "$init" \
        --cdl-ckpt "$tmp/cdl/last.safetensors" --n-layer 4 --n-head 4 --n-embd 144 \
        --block "$block" --batch "$batch" --steps "$steps" --lr "$lr" --wd "$wd" --clip "$clip" \
        --threads 2 >"$tmp/learn.txt" 2>"$tmp/learn.err" ||
        { cat "$tmp/learn.err" >&2; echo "run_gpt.sh: torch_gpt.py learn failed" >&2; exit 1; }
    impl=$(result impl <"$tmp/learn.txt") tv=$(result torch_val <"$tmp/learn.txt")
    cv=$(result cdl_val <"$tmp/learn.txt") ts=$(result seconds <"$tmp/learn.txt")
    own=$(grep -o '"val_loss":[0-9.]*' "$tmp/cdl.jsonl" | tail -n 1 | cut -d: -f2)
    nparams=$("$python" -c 'import sys, json; from safetensors import safe_open
f = safe_open(sys.argv[1], "pt"); print(f.metadata().get("nparams", "?"))' "$init" 2>/dev/null)
    printf '\n1. learning: %s parameters, %s steps of %s x %s tokens, validation on the last 10 %%\n' \
        "$nparams" "$steps" "$batch" "$block"
    printf '%-16s %10s %10s\n' implementation "val loss" seconds
    printf '%-16s %10s %10.1f   (cdl-train'"'"'s own val loss: %s)\n' cdl "$cv" "$cdl_s" "${own:--}"
    printf '%-16s %10s %10s\n' "$impl" "$tv" "$ts"
    printf 'cdl / PyTorch val loss: %.4f (target <= 1.02)\n' "$(echo "$cv / $tv" | bc -l)"
fi

# ---- 2. CPU speed
if [ -z "$threads_list" ]; then
    echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
    exit 0
fi
cdl_speed() {   # cdl_speed THREADS: median tokens/s of the last step records
    cdl "$1" --lr "$lr" --max-steps $((speed_steps + 3)) --metrics-every 1 \
        --metrics "$tmp/speed$1.jsonl" >"$tmp/speed.log" 2>&1 ||
        { cat "$tmp/speed.log" >&2; echo "run_gpt.sh: cdl-train (speed) failed" >&2; return; }
    grep '"step"' "$tmp/speed$1.jsonl" | tail -n "$speed_steps" | while read -r line; do
        tok=$(echo "$line" | grep -o '"tokens_per_sec":[0-9.]*' | cut -d: -f2)
        [ -n "$tok" ] || tok=$(echo "$line" | grep -o '"samples_per_sec":[0-9.]*' |
                               cut -d: -f2 | awk -v b="$block" '{print $1 * b}')
        echo "$tok"
    done | sort -n | awk '{a[NR]=$1} END {print (NR ? a[int((NR + 1) / 2)] : "nan")}'
}
declare -A tps
impls=(cdl)
keep() {   # keep KEY VALUE: tps[KEY] becomes the larger of the two
    local old=${tps[$1]:-}
    if [ -z "$old" ] || [ "$old" = nan ] || awk -v a="$2" -v b="$old" 'BEGIN {exit !(a > b)}'; then
        tps[$1]=$2
    fi
}
# ROUNDS: every side measured that many times, in turn, keeping its best:
# a machine whose speed drifts over minutes then favours neither side.
for round in $(seq "$rounds"); do
for t in $threads_list; do
    keep "cdl,$t" "$(cdl_speed "$t")"
    for py in "${pys[@]}"; do
        for mode in eager compile; do
            [ "$mode" = compile ] && { [ "$compile" = 1 ] && [ "$py" != "$python" ] || continue; }
            # Debian's torch multiplies in OpenBLAS, whose own thread pool
            # ignores torch.set_num_threads (every core at "1 thread", two
            # pools fighting at 2): as many BLAS threads as torch threads.
            r=$(OPENBLAS_NUM_THREADS=$t "$py" "$here/torch_gpt.py" speed --impl "$mode" --threads "$t" --n-layer 4 \
                --n-head 4 --n-embd 144 --block "$block" --batch "$batch" \
                --steps "$speed_steps" --warmup $((short ? 1 : 3)) --lr "$lr" --wd "$wd" \
                --clip "$clip" 2>"$tmp/speed.err")
            name=$(echo "$r" | result impl)
            [ -n "$name" ] || { tail -n 3 "$tmp/speed.err" >&2; continue; }
            keep "$name,$t" "$(echo "$r" | result tokens_per_s)"
            [[ " ${impls[*]} " == *" $name "* ]] || impls+=("$name")
        done
    done
done
done
printf '\n2. CPU training speed, tokens/s (batch %s x block %s; best of %s round(s); cdl speed-up in brackets)\n' \
    "$batch" "$block" "$rounds"
printf '%-24s' implementation
for t in $threads_list; do printf '%22s' "$t thread(s)"; done
printf '\n'
for name in "${impls[@]}"; do
    printf '%-24s' "$name"
    for t in $threads_list; do
        v=${tps[$name,$t]:-nan} c=${tps[cdl,$t]:-nan}
        if [ "$name" = cdl ] || [ "$v" = nan ] || [ "$c" = nan ]; then
            printf '%22s' "$v"
        else
            printf '%13s (%5.2fx)' "$v" "$(echo "$c / $v" | bc -l)"
        fi
    done
    printf '\n'
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
