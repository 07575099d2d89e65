#!/bin/bash
# The GPU checks of the CUDA backend, on a machine with an NVIDIA GPU. Not
# part of make check. Within about 8 minutes it
#   0. builds cdl with CUDA (for this GPU's architecture only, to be quick),
#   1. checks every op forward and backward against the CPU backend
#      (tests/gpu/ops_vs_cpu.c),
#   2. trains the seed CNN one epoch on the GPU with cdl-train (Fashion-MNIST,
#      or synthetic data when its files are missing), and once more with
#      --tf32 off, whose validation loss cdl-eval --tf32 off must give,
#   3. measures the seed CNN (3x32x32 LeNet, batch 512) with cdl and with
#      PyTorch eager on the same GPU (bench_lenet.c, bench_torch.py),
#   4. if nvidia-cuda-mps-control exists, runs 1, 2, 4 and 8 replicas packed
#      on the GPU under a private MPS daemon and sums their images/s,
#   5. times one cdl-train epoch at batch 512 with whole-step CUDA graphs on
#      and off (--cuda-graphs), same data, same weights expected,
#   6. trains one epoch data-parallel with 2 ranks through cdlrun: on the
#      nccl backend with 2 or more GPUs, else 2 replicas packed on the one GPU
#      under MPS (CDL_REPLICAS_PER_GPU=2, the hier backend); with 2 GPUs
#      also 2 tasks each shown one GPU (CDL_GPU_BIND=task, as srun
#      --gpus-per-task=1): cdl-train and cdl-eval on each task's device 0,
#      and tests/gpu/nccl_checks.sh (--clip-grad with --shard-optimizer
#      bitwise equal to it without; a stopped rank makes the other fail
#      within CDL_TIMEOUT),
#   7. runs the PyTorch templates' GPU path (tests/gpu/pytorch_templates.sh:
#      NCCL DDP, 4 replicas packed with gloo; the Hugging Face Trainer,
#      Accelerate and Lightning with a rank that sees only its own GPU,
#      each skipped without its package) when PYTHON has PyTorch,
#   8. checks the bf16 matrix products against their rounding bounds
#      (tests/gpu/ops_bf16.c --big; attention on both bf16 kernels, wmma and
#      mma, each timed at GPT-2 small's shape) and measures a
#      GPT-2-small-shaped model (124M, block 1024) trained in bf16: cdl-train
#      --precision bf16 against PyTorch torch.compile + flash attention
#      (bench_gpt_torch.py), tokens/s and MFU, and cdl's tokens/s again with
#      CDL_ATTN_KERNEL=mma (skipped until cdl-train has --model gpt),
#   9. measures resnet18 (the CIFAR variant) at batch 256 training with
#      cdl-train and whole-step CUDA graphs against PyTorch eager with
#      channels_last, TF32 and cudnn.benchmark (bench_resnet_torch.py),
#  10. with Nsight Compute (ncu) on the PATH, times every kernel of one
#      resnet18 step and one GPT-2-small bf16 step and says where the time
#      goes: the largest kernels and the shares of cdl, cuDNN and cuBLAS
#      (ncu_top.py),
# and prints a table last. Each row is also appended to table-so-far.txt
# as it is made, so a run stopped from outside still leaves its rows. Exit status: 0 when steps 0-2, 5 (graph and eager
# weights agree), 6, 7 and 8's bounds pass (speeds are reported against the targets, not
# enforced; steps skipped for lack of time or hardware say so), 1 otherwise,
# and 1 with a message at once when no GPU is visible.
# Without a GPU, make check runs the same host code on a fake GPU
# (tests/fakegpu: steps 1, 2, 5 and 6, correctness only, no speed), and
# rehearses this script there: CDL_GPU_REHEARSAL=1 runs every step with the
# fake GPU's programs (tests/fakegpu/), small sizes, PyTorch on the CPU, the
# test double of nvidia-cuda-mps-control and no time limits, in an
# existing build (CDL_GPU_BUILD), so that the script itself is known to
# work before it meets a GPU (tests/fakegpu/gpu_script.sh). Its figures
# mean nothing.
#
# Before measuring it prints what it runs on (nvidia-smi -L, driver, CUDA,
# cuDNN, cuBLAS and NCCL versions, the visible devices, MPS, and the cuDNN
# algorithms and math types the seed CNN's convolutions get). It honours
# CUDA_VISIBLE_DEVICES: the GPUs it counts and builds for are the ones the
# job was given, not all the node has. With --diagnose it then runs a few
# training steps under compute-sanitizer (memcheck, racecheck, synccheck),
# each bounded in time, before measuring.
#
# Node without compilers: CDL_GPU_PREBUILT=1 uses the programs already built
# in CDL_GPU_BUILD (configure --with-cuda on a login node with the same
# CUDA major version, at the same path) and runs no configure or make.
# CDL_GPU_STEPS="1 2 8" runs only the steps named (default all; 0, the
# build, always). CDL_GPU_BUDGET is the minutes' plan in seconds that the
# later steps measure themselves against to skip when time runs out
# [480].
#
# Usage: tests/gpu/run.sh [--diagnose] [--out DIR]   (from anywhere; builds
# in $CDL_GPU_BUILD, default _build-gpu in the source tree; the table
# (table.txt) and every log go to DIR, or $CDL_GPU_LOGS, default gpu-logs
# there). CDL_GPU_CONFIGURE_FLAGS adds configure options; PYTHON picks the
# interpreter with PyTorch (default python3). Every step has a timeout and
# a failed step is a row, not the end; the table is written also when the
# script stops early (a failed build, SIGTERM, SIGINT), with what stopped
# it as its last row.
set -u
export LC_ALL=C
diagnose=0 out_dir=
while [ $# -gt 0 ]; do
    case $1 in
        --diagnose) diagnose=1 ;;
        --out) [ $# -ge 2 ] || { echo "tests/gpu/run.sh: --out needs a directory" >&2; exit 1; }
               out_dir=$2; shift ;;
        --out=*) out_dir=${1#--out=} ;;
        *) echo "tests/gpu/run.sh: unknown option '$1': use --diagnose or --out DIR" >&2; exit 1 ;;
    esac
    shift
done

top=$(cd "$(dirname "$0")/../.." && pwd)
build=${CDL_GPU_BUILD:-$top/_build-gpu}
build=$(mkdir -p "$build" && cd "$build" && pwd) || { echo "tests/gpu/run.sh: cannot create $build" >&2; exit 1; }
rehearsal=${CDL_GPU_REHEARSAL:-0}
case $rehearsal in 0|1) ;; *) echo "tests/gpu/run.sh: CDL_GPU_REHEARSAL=$rehearsal: use 1 (fake GPU) or 0" >&2; exit 1 ;; esac
python=${PYTHON:-}
if [ -z "$python" ]; then   # the first python3 that has PyTorch
    python=python3
    for p in python3 /usr/bin/python3; do
        if "$p" -c 'import torch' >/dev/null 2>&1; then python=$p; break; fi
    done
fi
t_start=$(date +%s)
# die MESSAGE: stops the script; once the log folder exists, with the
# message as the last row of the table (written by the EXIT trap).
die() {
    echo "tests/gpu/run.sh: $*" >&2
    [ -n "${logs:-}" ] && [ "$(type -t fail_row)" = function ] && fail_row "stopped" "$*"
    exit 1
}
elapsed() { echo $(( $(date +%s) - t_start )); }
# over_time LIMIT: whether more than LIMIT seconds are spent (never in a
# rehearsal, whose steps must all run).
over_time() { [ "$rehearsal" = 0 ] && [ "$(elapsed)" -gt "$1" ]; }
# late PERCENT: whether more than PERCENT of the plan (CDL_GPU_BUDGET) is spent.
budget=${CDL_GPU_BUDGET:-480}
case $budget in ''|*[!0-9]*) die "CDL_GPU_BUDGET=$budget: give seconds, e.g. 480" ;; esac
late() { over_time $(( budget * $1 / 100 )); }
late_why() { echo "skipped: $(elapsed) s spent, no time left in the plan of $budget s"; }
# want N: whether step N was asked for (CDL_GPU_STEPS).
want_steps=" ${CDL_GPU_STEPS:-1 2 3 4 5 6 7 8 9 10} "
want() { case $want_steps in *" $1 "*) return 0 ;; esac; return 1; }
prebuilt=${CDL_GPU_PREBUILT:-0}
case $prebuilt in 0|1) ;; *) die "CDL_GPU_PREBUILT=$prebuilt: use 1 (programs already built) or 0" ;; esac
# torch.compile's caches (Inductor, Triton) beside the build, not in /tmp:
# nothing is left behind there, and a later run reuses the compiled code.
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-$build/torch-cache/inductor}
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-$build/torch-cache/triton}
# Inductor's precompiled headers go to the temporary directory: one beside
# the build too on a GPU (the MPS daemon's directory stays in /tmp: see
# step 4; a rehearsal compiles nothing and leaves the build tree as it is).
if [ "$rehearsal" = 0 ]; then
    export TMPDIR=$build/torch-cache/tmp
    mkdir -p "$TMPDIR"
fi

# What runs: the real programs on a GPU, the fake GPU's in a rehearsal.
if [ "$rehearsal" = 1 ]; then
    # batch 16 and 3 warm-up steps for bench_lenet: every step runs, on the
    # fake GPU's CPU emulation (a LeNet step at batch 64: ~0.8 s) in minutes.
    bin=tests/fakegpu train_bin=tests/fakegpu/cdl-train big=16 secs=1 replicas="1 2" torch_dev=cpu
    bench_warm=(--warmup 3)
    slow=5   # the fake GPU on a shared CPU: benchmarks get 5 times their time
    extra="tests/slurm/fake-mps-control tests/fakegpu/cdl-train tests/fakegpu/cdl-eval"   # more to build
    eval_bin=tests/fakegpu/cdl-eval
else
    bin=tests/gpu train_bin=cli/cdl-train big=512 secs=5 replicas="1 2 4 8" torch_dev=cuda slow=1
    eval_bin=cli/cdl-eval
    bench_warm=()   # bench_lenet's default warm-up
    extra=
fi
ops_bin=$bin/ops_vs_cpu bench_bin=$bin/bench_lenet bf16_bin=$bin/ops_bf16

# ------------------------------------------------------------ a GPU here?
if [ "$rehearsal" = 1 ]; then
    [ -f "$build/Makefile" ] || die "CDL_GPU_REHEARSAL=1 needs a configured build with CUDA in CDL_GPU_BUILD ($build)"
    gpu_name="the fake GPU of tests/fakegpu (rehearsal: the figures mean nothing)"
    ngpus=${CDL_FAKE_GPUS:-1} arch= visible="${CUDA_VISIBLE_DEVICES-all (fake)}"
else
command -v nvidia-smi >/dev/null 2>&1 ||
    die "no NVIDIA GPU here (nvidia-smi is not installed): run this script on a GPU node, e.g. srun --gpus=1 tests/gpu/run.sh"
if ! gpu_info=$(timeout 60 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1) ||
        [ -z "$gpu_info" ]; then
    die "no NVIDIA GPU is visible (nvidia-smi: ${gpu_info:-no devices}; CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-unset}): run this script on a GPU node"
fi
# The GPUs this job was given: CUDA_VISIBLE_DEVICES (indices or UUIDs)
# when set, else all that nvidia-smi shows. The build is for the first one,
# the GPU every single-GPU step runs on.
if [ -n "${CUDA_VISIBLE_DEVICES+x}" ]; then
    visible=$CUDA_VISIBLE_DEVICES
    ngpus=$(echo "$visible" | tr ',' '\n' | grep -c .)
    first=${visible%%,*}
    [ "$ngpus" -ge 1 ] || die "CUDA_VISIBLE_DEVICES is empty: this job was given no GPU"
else
    ngpus=$(timeout 60 nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | wc -l)
    visible="all $ngpus (CUDA_VISIBLE_DEVICES unset)" first=0
fi
case $first in
    MIG-*) die "CUDA_VISIBLE_DEVICES=$first is a MIG slice: cdl refuses MIG instances (docs/cuda.md); run on a whole GPU" ;;
esac
gpu_name=$(timeout 60 nvidia-smi -i "$first" --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)
[ -n "$gpu_name" ] || gpu_name=$(echo "$gpu_info" | head -1)
cc=$(timeout 60 nvidia-smi -i "$first" --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
case $cc in
    [0-9][0-9]|[0-9][0-9][0-9]) arch="-gencode arch=compute_$cc,code=sm_$cc" ;;
    *) arch= ;;   # configure's default set
esac
fi

logs=${out_dir:-${CDL_GPU_LOGS:-$build/gpu-logs}}
# Absolute: the steps run in the build directory (a relative --out was
# created here, then written to below the build).
logs=$(mkdir -p "$logs" && cd "$logs" && pwd) ||
    { logs=; die "cannot create ${out_dir:-${CDL_GPU_LOGS:-$build/gpu-logs}}"; }
rows=()          # the final table, one line each
failed=0
raw_row() { rows+=("$1"); printf '%s\n' "$1" >> "$logs/table-so-far.txt"; }
row() { raw_row "$(printf '%-44s %s' "$1" "$2")"; }
: > "$logs/table-so-far.txt" 2>/dev/null
fail_row() { row "$1" "FAIL  $2"; failed=1; }
# The table, on stdout and in table.txt, once: at the end, or from the EXIT
# trap when a step died or a signal stopped the script (the rows so far,
# then what stopped it). A row that hangs is ended by its own timeout.
table_done=0
write_table() {
    table_done=1
    {
        echo
        echo "cdl GPU checks on $gpu_name ($(elapsed) s, logs in $logs)"
        printf '%s\n' "${rows[@]}"
        if [ $failed = 0 ]; then echo "result: PASS"; else echo "result: FAIL"; fi
    } | tee "$logs/table.txt"
}
on_exit() {
    local rc=$?
    [ "$(type -t stop_mps)" = function ] && stop_mps
    if [ $table_done = 0 ]; then
        [ $rc = 0 ] && rc=1
        [ -n "$stopped_by" ] && fail_row "stopped" "$stopped_by after $(elapsed) s"
        failed=1
        write_table
    fi
    exit $rc
}
stopped_by=
trap on_exit EXIT
trap 'stopped_by="SIGTERM"; exit 143' TERM
trap 'stopped_by="SIGINT"; exit 130' INT
trap 'stopped_by="SIGHUP"; exit 129' HUP

# ------------------------------------------------------------- 0. build
cd "$build" || die "cannot enter $build"
have_train=0
if [ "$prebuilt" = 1 ]; then
    # Built elsewhere (a login node): every program the steps run must be
    # there already; cdl-train, cdlrun and weights_cmp as in a normal build.
    for p in "$ops_bin" "$bench_bin" "$bf16_bin" $extra; do
        [ -x "$p" ] || die "CDL_GPU_PREBUILT=1 but $build/$p is missing: build it first (make $p in $build)"
    done
    [ -x cli/cdl-train ] && [ -x launcher/cdlrun ] && [ -x tests/dist/weights_cmp ] && have_train=1
    # libtool's wrapper script relinks the program when it looks newer
    # than it (copied files: the same second), which needs the objects and
    # a linker: run the program itself, with the build's libcdl.
    if [ "$rehearsal" = 0 ] && [ -x cli/.libs/cdl-train ]; then
        train_bin=cli/.libs/cdl-train
        [ -x cli/.libs/cdl-eval ] && eval_bin=cli/.libs/cdl-eval
        export LD_LIBRARY_PATH=$build/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    fi
    echo "cli/cdl-train, launcher/cdlrun, tests/dist/weights_cmp: $([ $have_train = 1 ] && echo built || echo missing)" \
        > "$logs/make-cli.log"
    row "0 build with CUDA" "PASS  prebuilt in $build (CDL_GPU_PREBUILT=1)"
else
    if [ ! -x "$top/configure" ]; then
        (cd "$top" && ./autogen.sh) > "$logs/autogen.log" 2>&1 ||
            die "autogen.sh failed (autoconf, automake, libtool installed?): see $logs/autogen.log"
    fi
    if [ ! -f Makefile ]; then
        # shellcheck disable=SC2086
        timeout 180 "$top/configure" --with-cuda ${arch:+NVCC_ARCH_FLAGS="$arch"} \
            ${CDL_GPU_CONFIGURE_FLAGS:-} > "$logs/configure.log" 2>&1 ||
            die "configure --with-cuda failed (CUDA toolkit with cuDNN under /usr/local/cuda, or pass CDL_GPU_CONFIGURE_FLAGS=--with-cuda=PREFIX): see $logs/configure.log"
    fi
    jobs=$(nproc 2>/dev/null || echo 4)
    # shellcheck disable=SC2086
    if timeout 300 make -j"$jobs" libcdl_core.la "$ops_bin" "$bench_bin" "$bf16_bin" $extra \
            > "$logs/make.log" 2>&1; then
        row "0 build with CUDA (${arch:-default archs})" "PASS  $(elapsed) s"
    else
        tail -20 "$logs/make.log" >&2
        die "building the CUDA backend failed: see $logs/make.log"
    fi
    # cdl-cuda.la: the CUDA module that the shared libcdl of cdl-train loads.
    if timeout 240 make -j"$jobs" cli/cdl-train cli/cdl-eval launcher/cdlrun tests/dist/weights_cmp cdl-cuda.la \
            > "$logs/make-cli.log" 2>&1; then
        have_train=1
    fi
fi
if [ "$rehearsal" = 1 ] && ! command -v nvidia-cuda-mps-control >/dev/null 2>&1; then
    mkdir -p "$logs/bin" && ln -sf "$build/tests/slurm/fake-mps-control" "$logs/bin/nvidia-cuda-mps-control"
    PATH=$logs/bin:$PATH
fi
if [ "$rehearsal" = 1 ] && ! command -v ncu >/dev/null 2>&1; then
    mkdir -p "$logs/bin" && ln -sf "$top/tests/fakegpu/fake-ncu" "$logs/bin/ncu"
    PATH=$logs/bin:$PATH
fi
if [ "$rehearsal" = 1 ] && [ "$diagnose" = 1 ] && ! command -v compute-sanitizer >/dev/null 2>&1; then
    mkdir -p "$logs/bin" && ln -sf "$top/tests/fakegpu/fake-compute-sanitizer" "$logs/bin/compute-sanitizer"
    PATH=$logs/bin:$PATH
fi

# A private MPS daemon for steps 4 and 6 (never the node's own).
mps=${mps:-}
start_mps() {
    mps=$(mktemp -d /tmp/cdl-mps.XXXXXX)
    export CUDA_MPS_PIPE_DIRECTORY=$mps/pipe CUDA_MPS_LOG_DIRECTORY=$mps/log
    mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
    if timeout 60 nvidia-cuda-mps-control -d > "$logs/mps-start.log" 2>&1; then
        return 0   # stopped by stop_mps, or by on_exit
    fi
    rm -rf "$mps"; mps=
    unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
    return 1
}
stop_mps() {
    [ -n "$mps" ] || return 0
    echo quit | timeout 60 nvidia-cuda-mps-control >/dev/null 2>&1
    rm -rf "$mps"; mps=
    unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
}
# val_acc and images/s of the last epoch in a --metrics file, or "nan 0".
metrics_of() {
    timeout 60 "$python" -c 'import json,sys
m=[r for r in map(json.loads, open(sys.argv[1])) if r.get("type") == "epoch"][-1]
print(m["val_acc"], m["images_per_sec"])' "$1" 2>/dev/null || echo "nan 0"
}

# ------------------------------------------------- what it runs on
# version_of HEADER MACRO...: the values of the macros in the build's
# CUDA headers, joined by dots ("?" when not found).
version_of() {
    local h=$1 v= m x; shift
    for d in ${CUDA_HOME:-/usr/local/cuda}/include /usr/include /usr/local/include; do
        [ -f "$d/$h" ] && { h=$d/$h; break; }
    done
    for m in "$@"; do
        x=$(awk -v m="$m" '$1 == "#define" && $2 == m {print $3; exit}' "$h" 2>/dev/null)
        v=${v:+$v.}${x:-?}
    done
    echo "$v"
}
echo "== what this runs on"
{
    if [ "$rehearsal" = 1 ]; then
        echo "GPUs: $gpu_name (CDL_FAKE_GPUS=${CDL_FAKE_GPUS:-1})"
    else
        echo "nvidia-smi -L:"; timeout 60 nvidia-smi -L 2>&1 | sed 's/^/  /'
        echo "driver: $(timeout 60 nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)," \
             "CUDA (driver): $(timeout 60 nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9.]*\).*/\1/p' | head -1)"
    fi
    echo "visible devices: $visible; building for: ${arch:-the default archs}"
    echo "CUDA toolkit $(version_of cuda_runtime_api.h CUDART_VERSION), cuDNN" \
         "$(version_of cudnn_version.h CUDNN_MAJOR CUDNN_MINOR CUDNN_PATCHLEVEL), cuBLAS" \
         "$(version_of cublas_api.h CUBLAS_VER_MAJOR CUBLAS_VER_MINOR CUBLAS_VER_PATCH), NCCL" \
         "$(version_of nccl.h NCCL_MAJOR NCCL_MINOR NCCL_PATCH) (headers of the build)"
    if command -v nvidia-cuda-mps-control >/dev/null 2>&1; then
        echo "MPS: nvidia-cuda-mps-control at $(command -v nvidia-cuda-mps-control)"
    else
        echo "MPS: not available (no nvidia-cuda-mps-control)"
    fi
    echo "seed CNN convolutions (CDL_LOG=cudnn, TF32 default):"
    CDL_LOG=cudnn,cuda timeout $((60 * slow)) "$bench_bin" --batch "$big" "${bench_warm[@]}" --seconds 0.1 2>&1 |
        grep '^cdl: cud' | sed 's/^cdl: /  /'
} 2>&1 | tee "$logs/info.log"

# ----------------------------------------------- D. compute-sanitizer
# A few training steps (cuDNN, cuBLAS and every custom kernel the seed CNN
# uses: bias, pooling, ReLU, loss, optimizer) under memcheck, racecheck
# and synccheck, then the bf16 attention checks (ops_bf16 --attn-only)
# under the same tools; each bounded, a failure is a row. First,
# before measuring: on a first contact the diagnosis matters more than the
# speeds, and the later steps skip themselves when time runs out.
if [ "$diagnose" = 1 ]; then
    echo "== D. compute-sanitizer"
    # 3 minutes of the 8, shared by the three tools (a rehearsal: slower).
    left=$((180 * slow))
    sanitizer=$(command -v compute-sanitizer || ls "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer" 2>/dev/null)
    if [ -z "$sanitizer" ]; then
        row "D compute-sanitizer" "skipped: compute-sanitizer not found (CUDA toolkit bin/)"
    elif [ $have_train = 0 ]; then
        fail_row "D compute-sanitizer" "cli/cdl-train did not build (see $logs/make-cli.log)"
    else
        steps=(--device cuda --dataset synthetic --synthetic-size 128 --epochs 1 --batch-size 64
               --no-progress --cuda-graphs off)
        for tool in memcheck racecheck synccheck; do
            if timeout $((left / 3)) "$sanitizer" --tool $tool --error-exitcode 3 "$train_bin" "${steps[@]}" \
                    > "$logs/sanitizer-$tool.log" 2>&1; then
                row "D compute-sanitizer $tool" "PASS  $(grep -Eo 'ERROR SUMMARY: [0-9]+ errors?' "$logs/sanitizer-$tool.log" | tail -1)"
            else
                rc=$?
                fail_row "D compute-sanitizer $tool" "exit $rc$([ $rc = 124 ] && echo " (over $((left / 3)) s)"), $(grep -Eo 'ERROR SUMMARY: [0-9]+ errors?' "$logs/sanitizer-$tool.log" | tail -1) (see $logs/sanitizer-$tool.log)"
            fi
        done
        # The bf16 tensor-core attention on ops_bf16's small shapes, both
        # kernels of attn_bf16.cu: wmma (shared memory handed between a
        # warp's lanes at __syncwarp) and mma (ldmatrix from double-buffered
        # tiles).
        for tool in memcheck racecheck synccheck; do
            slog=$logs/sanitizer-attn-$tool.log
            if timeout $((60 * slow)) "$sanitizer" --tool $tool --error-exitcode 3 "$bf16_bin" --attn-only \
                    > "$slog" 2>&1; then
                row "D $tool, bf16 attention" "PASS  $(grep -Eo 'ERROR SUMMARY: [0-9]+ errors?' "$slog" | tail -1)"
            else
                rc=$?
                fail_row "D $tool, bf16 attention" "exit $rc$([ $rc = 124 ] && echo " (over $((60 * slow)) s)"), $(grep -Eo 'ERROR SUMMARY: [0-9]+ errors?' "$slog" | tail -1) (see $slog)"
            fi
        done
    fi
fi

# ------------------------------------------------------- 1. ops vs CPU
echo "== 1. every op against the CPU backend"
if ! want 1; then
    :
elif timeout 180 "$ops_bin" > "$logs/ops_vs_cpu.log" 2>&1; then
    row "1 ops vs CPU backend" "PASS  $(tail -1 "$logs/ops_vs_cpu.log" | sed 's/^ops_vs_cpu: //')"
else
    grep -E '^FAIL|ops_vs_cpu' "$logs/ops_vs_cpu.log" | head -20 >&2
    fail_row "1 ops vs CPU backend" "$(tail -1 "$logs/ops_vs_cpu.log" | cut -c1-120) (see $logs/ops_vs_cpu.log)"
fi

# ------------------------------------------------- 2. train one epoch
echo "== 2. seed CNN, one epoch on the GPU"
data=/usr/share/datasets/fashion-mnist
if [ "$rehearsal" = 1 ]; then
    ds=(--dataset synthetic --synthetic-size 512); ds_name="synthetic 512"; min_acc=0
elif [ -f "$data/train-images-idx3-ubyte.gz" ]; then
    ds=(--dataset fashion-mnist --data-dir "$data"); ds_name=fashion-mnist; min_acc=0.70
else
    ds=(--dataset synthetic --synthetic-size 60000); ds_name="synthetic 60000"; min_acc=0
fi
# train_check NAME TAG CMD...: runs a training command (with --metrics
# $logs/TAG.json appended), checks its validation accuracy against min_acc
# and adds the row.
train_check() {
    local name=$1 tag=$2 acc ips; shift 2
    rm -f "$logs/$tag.json"
    if "$@" --metrics "$logs/$tag.json" > "$logs/$tag.log" 2>&1 && [ -s "$logs/$tag.json" ]; then
        read -r acc ips < <(metrics_of "$logs/$tag.json")
        if awk -v a="$acc" -v m="$min_acc" 'BEGIN{exit !(a==a && a+0 >= m+0)}'; then
            row "$name" "PASS  val acc $acc, $(printf '%.0f' "$ips") img/s"
        else
            fail_row "$name" "val acc $acc < $min_acc (see $logs/$tag.log)"
        fi
    else
        tail -5 "$logs/$tag.log" >&2
        fail_row "$name" "failed (see $logs/$tag.log)"
    fi
}
if ! want 2; then
    :
elif [ $have_train = 0 ]; then
    fail_row "2 train 1 epoch ($ds_name)" "cli/cdl-train did not build (see $logs/make-cli.log)"
else
    train_check "2 train 1 epoch ($ds_name, batch 128)" train timeout 180 "$train_bin" \
        --device cuda "${ds[@]}" --epochs 1 --batch-size 128 --no-progress
fi
# cdl-eval --tf32 off of a run trained with --tf32 off gives the run's last
# validation loss (the tools ignored --tf32 and CDL_TF32: TF32 convolutions
# always); the row shows how far TF32's default is from it.
if want 2 && [ $have_train = 1 ] && [ -x "$eval_bin" ]; then
    name="2b cdl-eval --tf32 off = the run's val loss"
    rm -rf "$logs/tf32-ckpt"
    val_of() { sed -n 's/^{"type":"epoch".*"val_loss":\([^,}]*\).*/\1/p' "$1" | tail -n 1; }
    loss_of() { sed -n 's/.*"loss":\([^,}]*\).*/\1/p' "$1"; }
    tf32_evals() {
        local t
        for t in off default; do
            timeout 120 "$eval_bin" "$logs/tf32-ckpt/last.safetensors" --device cuda --split val \
                --json --tf32 $t > "$logs/tf32-eval-$t.json" 2>>"$logs/tf32.log" || return 1
        done
    }
    if timeout 180 "$train_bin" --device cuda "${ds[@]}" --epochs 1 --batch-size 128 --no-progress \
            --tf32 off --ckpt-dir "$logs/tf32-ckpt" --metrics "$logs/tf32.json" > "$logs/tf32.log" 2>&1 &&
        tf32_evals; then
        want_loss=$(val_of "$logs/tf32.json") off=$(loss_of "$logs/tf32-eval-off.json")
        dflt=$(loss_of "$logs/tf32-eval-default.json")
        if awk -v a="$want_loss" -v b="$off" 'BEGIN { d = a - b; exit !(a != "" && d <= 2e-5 && d >= -2e-5) }'; then
            row "$name" "PASS  $off vs $want_loss (TF32 default: $dflt)"
        else
            fail_row "$name" "$off, the run's $want_loss (TF32 default: $dflt; see $logs/tf32.log)"
        fi
    else
        tail -5 "$logs/tf32.log" >&2
        fail_row "$name" "failed (see $logs/tf32.log)"
    fi
fi

# -------------------------------------------------------- 3. speed
ips_of() { awk '/^images_per_sec/ {v=$2} END {if (v == "") exit 1; printf "%.0f", v}' "$1"; }
bench() {   # bench LOG CMD...: runs CMD, prints its images/s or nothing
    local log=$logs/$1; shift
    timeout $((60 * slow)) "$@" > "$log" 2>&1 && ips_of "$log"
}
torch_version=$("$python" -c 'import torch; print(torch.__version__)' 2>/dev/null || echo "(not installed)")
if want 3; then
echo "== 3. seed CNN speed, cdl vs PyTorch"
lenet=("$bench_bin" --batch "$big" "${bench_warm[@]}" --seconds "$secs")
torch=("$python" "$top/tests/gpu/bench_torch.py" --device "$torch_dev" --batch "$big" --seconds "$secs")
cdl_eager=$(bench bench-eager.log "${lenet[@]}")
cdl_graph=$(bench bench-graph.log "${lenet[@]}" --graph)
cdl_pinned=$(bench bench-graph-pinned.log "${lenet[@]}" --graph --input pinned)
torch_eager=$(bench bench-torch.log "${torch[@]}")
torch_bench=$(bench bench-torch-benchmark.log "${torch[@]}" --benchmark)
ratio() {   # ratio A B: "(A/B x PyTorch eager)"
    [ -n "$1" ] && [ -n "$2" ] && awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2fx torch eager", a/b}'
}
speed_row() {   # speed_row NAME VALUE [LOG]
    if [ -n "$2" ]; then
        row "    $1" "$(printf '%9s img/s  %s' "$2" "$(ratio "$2" "$torch_eager")")"
    else
        row "    $1" "failed (see $logs/$3)"
    fi
}
row "3 speed, seed CNN 3x32x32, batch $big" "target: cdl >= 3x torch eager"
speed_row "cdl eager" "$cdl_eager" bench-eager.log
speed_row "cdl CUDA graph" "$cdl_graph" bench-graph.log
speed_row "cdl CUDA graph, input from pinned memory" "$cdl_pinned" bench-graph-pinned.log
speed_row "torch $torch_version eager" "$torch_eager" bench-torch.log
speed_row "torch eager, cudnn.benchmark" "$torch_bench" bench-torch-benchmark.log
best=$cdl_graph; [ -z "$best" ] && best=$cdl_eager
if [ -n "$best" ] && [ -n "$torch_eager" ]; then
    if awk -v a="$best" -v b="$torch_eager" 'BEGIN{exit !(a >= 3*b)}'; then
        row "    target" "met"
    else
        row "    target" "NOT met"
    fi
fi
[ -z "$cdl_eager$cdl_graph" ] && fail_row "    cdl bench" "did not run (see $logs/bench-*.log)"
fi

# ----------------------------------------------------------- 4. MPS
echo "== 4. replicas packed under MPS"
if ! want 4; then
    :
elif ! command -v nvidia-cuda-mps-control >/dev/null 2>&1; then
    row "4 MPS replicas" "skipped: nvidia-cuda-mps-control not found"
elif late 75; then
    row "4 MPS replicas" "$(late_why)"
else
    if start_mps; then
        row "4 MPS replicas (cdl CUDA graph, batch $big)" "target: 8 replicas >= 4x one"
        one=
        for r in $replicas; do
            # Everyone warms up (context, plans, graph capture), then all
            # time the same 8 seconds.
            start=$(( $(date +%s) + 6 + r ))
            pids=()
            for i in $(seq 1 $r); do
                timeout $((60 * slow)) "$bench_bin" --batch "$big" "${bench_warm[@]}" --graph --seconds "$((secs + 3))" --start-at "$start" \
                    > "$logs/mps-$r-$i.log" 2>&1 &
                pids+=($!)
            done
            ok=1
            for p in "${pids[@]}"; do wait "$p" || ok=0; done
            total=0
            for i in $(seq 1 $r); do
                v=$(ips_of "$logs/mps-$r-$i.log") || { ok=0; v=0; }
                total=$(( total + v ))
            done
            late=$(cat "$logs"/mps-$r-*.log | grep -c 'after --start-at')
            if [ $ok = 1 ]; then
                [ -z "$one" ] && one=$total
                row "    $r replica(s)" "$(printf '%9s img/s  %s%s' "$total" \
                    "$(awk -v a="$total" -v b="$one" 'BEGIN{printf "%.2fx one replica", a/b}')" \
                    "$([ "$late" -gt 0 ] && echo ", $late started late")")"
            else
                row "    $r replica(s)" "failed (see $logs/mps-$r-*.log)"
            fi
        done
        stop_mps
    else
        row "4 MPS replicas" "skipped: the MPS daemon did not start ($(head -1 "$logs/mps-start.log"))"
    fi
fi


# ------------------------------------------- 5. CUDA graphs on vs off
echo "== 5. cdl-train epoch, CUDA graphs on vs off"
if ! want 5; then
    :
elif [ $have_train = 0 ]; then
    fail_row "5 CUDA graphs on/off" "cli/cdl-train did not build (see $logs/make-cli.log)"
elif late 83; then
    row "5 CUDA graphs on/off" "$(late_why)"
else
    row "5 cdl-train 1 epoch, batch $big ($ds_name)" "CUDA graphs on vs off, same weights expected"
    for g in off on; do
        rm -rf "$logs/graphs-$g" "$logs/graphs-$g.json"
        if timeout 120 "$train_bin" --device cuda "${ds[@]}" --epochs 1 --batch-size "$big" \
                --cuda-graphs $g --no-progress --ckpt-dir "$logs/graphs-$g" \
                --metrics "$logs/graphs-$g.json" > "$logs/graphs-$g.log" 2>&1 &&
                [ -s "$logs/graphs-$g.json" ]; then
            read -r acc ips < <(metrics_of "$logs/graphs-$g.json")
            eval "ips_$g=\$ips"
            row "    graphs $g" "$(printf '%9.0f img/s  val acc %s' "$ips" "$acc")"
        else
            tail -3 "$logs/graphs-$g.log" >&2
            fail_row "    graphs $g" "cdl-train failed (see $logs/graphs-$g.log)"
        fi
    done
    if [ -s "$logs/graphs-on/last.safetensors" ] && [ -s "$logs/graphs-off/last.safetensors" ]; then
        speedup=$(awk -v a="${ips_on:-0}" -v b="${ips_off:-0}" \
            'BEGIN{if (b > 0) printf ", graphs %.2fx the speed of eager", a/b}')
        w_off=$logs/graphs-off/last.safetensors w_on=$logs/graphs-on/last.safetensors
        if timeout 120 tests/dist/weights_cmp "$w_off" "$w_on" --bitwise > "$logs/graphs-cmp.log" 2>&1; then
            row "    weights, graphs on vs off" "PASS  bitwise equal$speedup"
        elif timeout 120 tests/dist/weights_cmp "$w_off" "$w_on" --rel 1e-5 >> "$logs/graphs-cmp.log" 2>&1; then
            row "    weights, graphs on vs off" "PASS  within 1e-5, not bitwise$speedup"
        else
            fail_row "    weights, graphs on vs off" "$(tail -1 "$logs/graphs-cmp.log" | cut -c1-100)"
        fi
    fi
fi

# ------------------------------------------------ 6. data-parallel
echo "== 6. data-parallel epoch, 2 ranks"
# ddp_run LABEL ENV...: one epoch of cdlrun -n 2 cdl-train with ENV set,
# each rank started through ddp_wrap (a command, or nothing), logged in
# $logs/$ddp_tag.log
ddp_wrap=() ddp_tag=ddp
ddp_run() {
    local label=$1; shift
    train_check "6 $label (2 ranks x 64)" "$ddp_tag" timeout 150 env "$@" launcher/cdlrun -n 2 \
        --label "${ddp_wrap[@]}" "$train_bin" --device cuda "${ds[@]}" --epochs 1 --batch-size 64 \
        --no-progress "${ddp_args[@]}"
}
if ! want 6; then
    :
elif [ $have_train = 0 ]; then
    fail_row "6 data-parallel" "cdl-train or cdlrun did not build (see $logs/make-cli.log)"
elif late 90; then
    row "6 data-parallel" "$(late_why)"
elif [ "$ngpus" -ge 2 ]; then
    ddp_args=(--dist-backend nccl)
    ddp_run "2 ranks on 2 GPUs, nccl" CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES-0,1}"
    # Each rank shown only its own GPU with CDL_GPU_BIND=task, as srun
    # --gpus-per-task=1 --cdl-ddp starts them (cdlrun itself shows its
    # ranks the same GPUs): every rank opens its device 0 and NCCL runs
    # there; cdl-eval on the same 2 ranks gives one process's loss.
    if late 96; then
        row "6 one GPU per task (CDL_GPU_BIND=task)" "$(late_why)"
    else
        read -r -a gl <<< "$(echo "${CUDA_VISIBLE_DEVICES-0,1}" | tr ',' ' ')"
        printf '#!/bin/sh
if [ "$LOCAL_RANK" = 0 ]; then g=%s; else g=%s; fi
CUDA_VISIBLE_DEVICES=$g CDL_GPU_BIND=task exec "$@"
' \
            "${gl[0]}" "${gl[1]:-1}" > "$logs/task-gpu.sh" && chmod +x "$logs/task-gpu.sh"
        rm -rf "$logs/taskbind-ckpt"
        ddp_args=(--dist-backend nccl --ckpt-dir "$logs/taskbind-ckpt")
        ddp_wrap=("$logs/task-gpu.sh") ddp_tag=taskbind
        ddp_run "2 tasks of 1 GPU (CDL_GPU_BIND=task), nccl" CDL_LOG=cuda
        ddp_wrap=() ddp_tag=ddp
        tb=$logs/taskbind-eval
        if [ "$(grep -c '^\[[01]\] cdl: cuda: GPU 0 (' "$logs/taskbind.log")" != 2 ]; then
            fail_row "    each task on its visible GPU 0" "$(grep '^\[[01]\] cdl: cuda: GPU' "$logs/taskbind.log" | cut -c1-60 | tr '\n' ' ')(see $logs/taskbind.log)"
        elif [ ! -s "$logs/taskbind-ckpt/last.safetensors" ] || [ ! -x "$eval_bin" ]; then
            fail_row "    cdl-eval on the 2 tasks" "no checkpoint or cdl-eval (see $logs/taskbind.log)"
        elif timeout 120 "$eval_bin" "$logs/taskbind-ckpt/last.safetensors" --device cuda --split val \
                --json > "$tb-1.json" 2> "$tb.log" &&
             CDL_LOG=cuda timeout 150 launcher/cdlrun -n 2 --label --timeout 60 "$logs/task-gpu.sh" \
                "$eval_bin" "$logs/taskbind-ckpt/last.safetensors" --device cuda --split val \
                --json > "$tb-2.json" 2>> "$tb.log"; then
            l1=$(sed -n 's/.*"loss":\([^,}]*\).*/\1/p' "$tb-1.json")
            l2=$(sed -n 's/^\[0\] .*"loss":\([^,}]*\).*/\1/p' "$tb-2.json")
            if [ "$(grep -c '^\[[01]\] cdl: cuda: GPU 0 (' "$tb.log")" = 2 ] &&
                    awk -v a="$l1" -v b="$l2" 'BEGIN { d = a - b; exit !(a != "" && d <= 1e-5 && d >= -1e-5) }'; then
                row "    cdl-eval on the 2 tasks" "PASS  both on GPU 0, loss $l2 (one process: $l1)"
            else
                fail_row "    cdl-eval on the 2 tasks" "loss '$l2', one process '$l1', or not both on GPU 0 (see $tb.log)"
            fi
        else
            fail_row "    cdl-eval on the 2 tasks" "failed (see $tb.log)"
        fi
    fi
    ddp_args=(--dist-backend nccl)
    if late 98; then
        row "6 NCCL checks" "$(late_why)"
    else
        checks=0
        while IFS='|' read -r label result; do
            checks=$((checks + 1))
            case $result in
                FAIL*) fail_row "$label" "${result#FAIL  }" ;;
                *) row "$label" "$result" ;;
            esac
        done < <(CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES-0,1}" \
                     bash "$top/tests/gpu/nccl_checks.sh" "$train_bin" "$logs" 2>"$logs/nccl-checks.log")
        [ $checks -gt 0 ] || fail_row "6 NCCL checks" "no result (see $logs/nccl-checks.log)"
    fi
elif ! command -v nvidia-cuda-mps-control >/dev/null 2>&1; then
    row "6 data-parallel" "skipped: 1 GPU and no nvidia-cuda-mps-control to pack 2 replicas"
elif start_mps; then
    ddp_args=(--dist-backend hier)
    ddp_run "2 MPS replicas on 1 GPU, hier" CDL_REPLICAS_PER_GPU=2
    stop_mps
else
    row "6 data-parallel" "skipped: the MPS daemon did not start ($(head -1 "$logs/mps-start.log"))"
fi

# ------------------------------------------ 7. the PyTorch templates
# tests/gpu/pytorch_templates.sh: NCCL DDP and 4 replicas packed with gloo,
# PyTorch's own weights checked; then the Hugging Face Trainer, a plain
# Accelerate loop and Lightning on 2 ranks whose LOCAL_RANK 1 sees only its
# own GPU (or shares GPU 0), each a row, skipped where PYTHON lacks the
# package. The rehearsal skips it (it has its own:
# CDL_GPU_REHEARSAL=1 tests/gpu/pytorch_templates.sh).
echo "== 7. PyTorch templates (tests/gpu/pytorch_templates.sh)"
if ! want 7; then
    :
elif [ "$rehearsal" = 1 ]; then
    row "7 PyTorch templates" "skipped in the rehearsal (CDL_GPU_REHEARSAL=1 tests/gpu/pytorch_templates.sh)"
elif ! "$python" -c 'import torch' >/dev/null 2>&1; then
    row "7 PyTorch templates" "skipped: $python has no PyTorch"
elif late 94; then
    row "7 PyTorch templates" "$(late_why)"
else
    PYTHON=$python CDL_GPU_LOGS=$logs timeout 420 "$top/tests/gpu/pytorch_templates.sh" \
        >"$logs/pytorch-templates.log" 2>&1
    rc=$?
    while IFS= read -r l; do raw_row "7 $l"; done < <(grep -E '^[1-9]\. ' "$logs/pytorch-templates.log")
    [ $rc = 0 ] || fail_row "7 PyTorch templates" "see $logs/pytorch-templates.log"
fi

# -------------------------------------------------------------- 8. bf16
# ops_bf16: the bf16 products against the bounds of bf16's rounding
# (docs/cuda.md, "bf16"), with GPT-2 small's shapes on a GPU. Then a
# GPT-2-small-shaped model (124M, block 1024) trained in bf16 by cdl-train
# and by PyTorch (torch.compile, flash attention through
# scaled_dot_product_attention, bf16 autocast: bench_gpt_torch.py on the
# tree's reference GPT): tokens/s and MFU (nanoGPT's 6N + 12LCT FLOPs per
# token for both, peak bf16 TFLOP/s from the GPU's name or
# CDL_PEAK_TFLOPS). cdl's tokens/s is the difference of two runs of 5 and
# 45 steps (start-up, first step and graph capture cancel out; with 25, the
# start-up's jitter moved the figure by a fifth on an H200); a rehearsal's,
# of 2 and 12 (a step of its small GPT: ~1 s on the fake GPU).
echo "== 8. bf16: products against their bounds, GPT-2 small throughput"
if ! want 8; then
    :
elif timeout 240 "$bf16_bin" $([ "$rehearsal" = 0 ] && echo --big) > "$logs/ops_bf16.log" 2>&1; then
    row "8 bf16 products vs rounding bounds" "PASS  $(tail -1 "$logs/ops_bf16.log" | sed 's/^ops_bf16: //')"
else
    grep -E '^FAIL|ops_bf16' "$logs/ops_bf16.log" | head -20 >&2
    fail_row "8 bf16 products vs rounding bounds" "$(tail -1 "$logs/ops_bf16.log" | cut -c1-100) (see $logs/ops_bf16.log)"
fi
# The attention kernels' times at GPT-2 small's shape (--big only): each
# bf16 tensor-core kernel (wmma, the default; mma, CDL_ATTN_KERNEL=mma)
# against cdl's fp32 kernels, a row per direction and kernel.
while IFS= read -r line; do   # "time OP SHAPE: TIMES"
    line=${line#time }
    row "8 ${line%%:*}" "${line#*: }"
done < <(grep '^time attn_' "$logs/ops_bf16.log" 2>/dev/null)
if [ "$rehearsal" = 1 ]; then
    gl=2 gh=2 gc=32 gt=64 gv=512 gb=4 gpt_name="GPT 2x32 (rehearsal), block 64"
    g1=2 g2=12   # the steps of the two timed runs
else
    gl=12 gh=12 gc=768 gt=1024 gv=50257 gb=${CDL_GPT_BATCH:-16} gpt_name="GPT-2 small (124M), block 1024"
    g1=5 g2=45
fi
gpt_model="gpt:n_layer=$gl,n_head=$gh,n_embd=$gc,block_size=$gt,vocab_size=$gv"
peak=${CDL_PEAK_TFLOPS:-}
if [ -z "$peak" ]; then
    case $gpu_name in   # dense bf16 tensor-core peaks
        *H100*|*H200*|*GH200*) peak=989 ;;
        *A100*) peak=312 ;;
        *L40S*) peak=362 ;;
        *A10*) peak=125 ;;
    esac
fi
# mfu TOKENS_PER_SEC FLOPS_PER_TOKEN: "MFU x%" or "MFU n/a" (unknown peak)
mfu() { awk -v t="$1" -v f="$2" -v p="${peak:-0}" 'BEGIN{if (p > 0 && t > 0) printf "MFU %.1f%%", 100 * t * f / (p * 1e12); else printf "MFU n/a"}'; }
tok=$logs/gpt-tokens
make_tokens() {   # random tokens in $tok, nanoGPT's format, for g2 steps
    mkdir -p "$tok" && timeout 120 "$python" -c 'import random, sys, array
r = random.Random(1); v = int(sys.argv[2])
array.array("H", (r.randrange(v) for _ in range(int(sys.argv[3])))).tofile(open(sys.argv[1], "wb"))' \
        "$tok/train.bin" "$gv" $(( (g2 + 1) * gb * gt + gt + 1)) &&
        head -c $(( (gb * gt + gt + 1) * 2 )) "$tok/train.bin" > "$tok/val.bin"
}
if ! want 8; then
    :
elif [ $have_train = 0 ]; then
    fail_row "8 $gpt_name bf16" "cli/cdl-train did not build (see $logs/make-cli.log)"
elif ! timeout 60 "$train_bin" --help 2>&1 | grep -q 'gpt' || ! timeout 60 "$train_bin" --help 2>&1 | grep -q 'tokens:'; then
    row "8 $gpt_name bf16" "skipped: cdl-train has no --model gpt or tokens: data yet"
elif late 88; then
    row "8 $gpt_name bf16" "$(late_why)"
else
    row "8 $gpt_name bf16, batch $gb" "target: cdl >= 1.0x torch.compile"
    # Random tokens in nanoGPT's format (uint16), enough for g2 steps; a
    # validation set of one batch (validated once per run, in every run).
    make_tokens
    # N without the position embedding: wte (tied) + per layer 12C^2 + 13C + ln_f.
    fpt=$(awk -v l=$gl -v c=$gc -v v=$gv -v t=$gt 'BEGIN{n = v*c + l*(12*c*c + 13*c) + 2*c; printf "%.0f", 6*n + 12*l*c*t}')
    gpt_run() {   # gpt_run STEPS [ARGS...]: seconds of one cdl-train run, or nothing
        local t0 t1 steps=$1 tag=${gpt_tag:-$1}   # gpt_tag: the log's name
        shift
        [ $# -gt 0 ] && tag=$tag-extra
        t0=$(date +%s.%N)
        timeout $((240 * slow)) "$train_bin" --device cuda --model "$gpt_model"             --dataset "tokens:$tok" --vocab-size "$gv" --block-size "$gt" --batch-size "$gb"             --optimizer adamw --lr 6e-4 --precision bf16 --epochs 1 --max-steps "$steps" "$@"             --no-progress > "$logs/gpt-cdl-$tag.log" 2>&1 || return 1
        t1=$(date +%s.%N)
        awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.3f", b - a}'
    }
    cdl_tps=
    rm -f "$logs"/gpt-cdl-*.log
    if s1=$(gpt_run $g1) && s2=$(gpt_run $g2); then
        cdl_tps=$(awk -v a="$s1" -v b="$s2" -v n=$(((g2 - g1) * gb * gt)) 'BEGIN{if (b > a) printf "%.0f", n / (b - a)}')
    fi
    missing=$(grep -ho 'backend has no [a-z_]* op yet' "$logs"/gpt-cdl-*.log 2>/dev/null | head -1)
    if [ -n "$cdl_tps" ]; then
        row "    cdl bf16" "$(printf '%9s tokens/s  %s' "$cdl_tps" "$(mfu "$cdl_tps" "$fpt")")"
        graphs=$(grep -o 'CUDA graphs [a-z]*' "$logs/gpt-cdl-$g2.log" | head -1)
        # nanoGPT's --clip-grad 1: the norm and the clip stay on the GPU,
        # inside the CUDA graph (docs/cuda.md); the same tokens/s expected.
        if c2=$(gpt_run $g2 --clip-grad 1); then
            ctps=$(awk -v a="$s1" -v b="$c2" -v n=$(((g2 - g1) * gb * gt)) 'BEGIN{if (b > a) printf "%.0f", n / (b - a)}')
            cgraphs=$(grep -o 'CUDA graphs [a-z]*' "$logs/gpt-cdl-$g2-extra.log" | head -1)
            row "    cdl bf16 --clip-grad 1" "$(printf '%9s tokens/s  (%s; without clipping: %s)' "$ctps" "${cgraphs:-graphs ?}" "${graphs:-graphs ?}")"
            [ "$cgraphs" = "CUDA graphs on" ] ||
                fail_row "    --clip-grad graphs" "expected CUDA graphs on with --clip-grad (see $logs/gpt-cdl-$g2-extra.log)"
        else
            fail_row "    cdl bf16 --clip-grad 1" "cdl-train failed (see $logs/gpt-cdl-$g2-extra.log)"
        fi
        # The same steps on the mma.sync attention kernels (CDL_ATTN_KERNEL=
        # mma, read by the backend; unmeasured until this row): A/B against
        # the default's tokens/s above.
        if late 90; then
            row "    cdl bf16, CDL_ATTN_KERNEL=mma" "$(late_why)"
        elif m1=$(gpt_tag=$g1-mma CDL_ATTN_KERNEL=mma gpt_run $g1) &&
                m2=$(gpt_tag=$g2-mma CDL_ATTN_KERNEL=mma gpt_run $g2); then
            mtps=$(awk -v a="$m1" -v b="$m2" -v n=$(((g2 - g1) * gb * gt)) 'BEGIN{if (b > a) printf "%.0f", n / (b - a)}')
            row "    cdl bf16, CDL_ATTN_KERNEL=mma" "$(printf '%9s tokens/s  %s (wmma: %s tokens/s)' "$mtps" "$(mfu "$mtps" "$fpt")" "$cdl_tps")"
        else
            fail_row "    cdl bf16, CDL_ATTN_KERNEL=mma" "cdl-train failed (see $logs/gpt-cdl-*-mma.log)"
        fi
    elif [ -n "$missing" ]; then   # the model landed before its CUDA ops
        row "    cdl bf16" "skipped: the CUDA $missing"
    else
        fail_row "    cdl bf16" "cdl-train failed (see $logs/gpt-cdl-*.log)"
    fi
    if ! "$python" -c 'import torch, torch.nn.functional as F; F.scaled_dot_product_attention' >/dev/null 2>&1; then
        row "    torch" "skipped: $python has no PyTorch 2.x"
    else
        targs=(--n-layer $gl --n-head $gh --n-embd $gc --block $gt --vocab $gv --batch $gb --device "$torch_dev")
        [ "$rehearsal" = 1 ] && targs+=(--no-compile --steps 2)
        if timeout $((300 * slow)) "$python" "$top/tests/gpu/bench_gpt_torch.py" "${targs[@]}"                 > "$logs/gpt-torch.log" 2>&1 &&
                torch_tps=$(awk '/^tokens_per_sec/ {printf "%.0f", $2}' "$logs/gpt-torch.log") &&
                [ -n "$torch_tps" ]; then
            row "    torch $torch_version $([ "$rehearsal" = 1 ] && echo eager || echo torch.compile) + flash, bf16" \
                "$(printf '%9s tokens/s  %s' "$torch_tps" "$(mfu "$torch_tps" "$fpt")")"
            if [ -n "$cdl_tps" ]; then
                r=$(awk -v a="$cdl_tps" -v b="$torch_tps" 'BEGIN{printf "%.2f", a / b}')
                row "    target" "$(awk -v r="$r" 'BEGIN{exit !(r >= 1.0)}' && echo met || echo "NOT met") (cdl ${r}x torch)"
            fi
        else
            tail -3 "$logs/gpt-torch.log" >&2
            row "    torch" "failed (see $logs/gpt-torch.log)"
        fi
    fi
fi

# ------------------------------------------------------ 9. resnet18
# cdl's resnet18 (CIFAR variant) trained by cdl-train with whole-step CUDA
# graphs, against torchvision's resnet18 with the same stem in PyTorch eager
# with channels_last, TF32 and cudnn.benchmark (bench_resnet_torch.py). cdl's
# images/s is its second epoch's (the first holds the start-up, cuDNN's
# plans and the graph capture); synthetic 3x32x32 data on both sides.
echo "== 9. resnet18 (CIFAR), cdl vs PyTorch"
if [ "$rehearsal" = 1 ]; then   # the fake GPU: a small net, the script's paths only
    rmodel=resnet20 rb=8 rsteps=2
else
    rmodel=resnet18 rb=${CDL_RESNET_BATCH:-256} rsteps=40
fi
if ! want 9; then
    :
elif [ $have_train = 0 ]; then
    fail_row "9 $rmodel" "cli/cdl-train did not build (see $logs/make-cli.log)"
elif late 96; then
    row "9 $rmodel" "$(late_why)"
else
    row "9 $rmodel 3x32x32, batch $rb" "target: cdl CUDA graph >= 1.3x torch eager"
    rm -rf "$logs/resnet.json"
    if timeout $((180 * slow)) "$train_bin" --device cuda --model "$rmodel" --dataset synthetic \
            --synthetic-size $((rsteps * rb)) --val-split 0 --epochs 2 --batch-size "$rb" \
            --cuda-graphs on --no-progress --metrics "$logs/resnet.json" > "$logs/resnet-cdl.log" 2>&1 &&
            [ -s "$logs/resnet.json" ]; then
        read -r _ r_cdl < <(metrics_of "$logs/resnet.json")
        r_cdl=$(printf '%.0f' "$r_cdl")
        rgraphs=$(grep -o 'CUDA graphs [a-z]*' "$logs/resnet-cdl.log" | head -1)
        row "    cdl-train, ${rgraphs:-graphs ?}" "$(printf '%9s img/s' "$r_cdl")"
    else
        r_cdl=
        tail -3 "$logs/resnet-cdl.log" >&2
        fail_row "    cdl-train $rmodel" "failed (see $logs/resnet-cdl.log)"
    fi
    r_torch=$(bench resnet-torch.log "$python" "$top/tests/gpu/bench_resnet_torch.py" \
              --device "$torch_dev" --batch "$rb" --seconds "$secs")
    if [ -n "$r_torch" ]; then
        row "    torch $torch_version eager, channels_last, TF32" "$(printf '%9s img/s' "$r_torch")"
        if [ -n "$r_cdl" ]; then
            r=$(awk -v a="$r_cdl" -v b="$r_torch" 'BEGIN{printf "%.2f", a / b}')
            row "    target" "$(awk -v r="$r" 'BEGIN{exit !(r >= 1.3)}' && echo met || echo "NOT met") (cdl ${r}x torch)"
        fi
    else
        row "    torch" "failed (see $logs/resnet-torch.log)"
    fi
fi

# --------------------------------------- 10. where a step's time goes
# Nsight Compute times every kernel of one training step (graphs off, so
# each kernel is seen; --clock-control none leaves the clocks alone), with
# its validation forward: step 9's resnet18 at batch 256 and step 8's GPT-2
# small in bf16.
# ncu_top.py sums the times by kernel and by owner (cdl's kernels,
# cuDNN's, cuBLAS's): the largest lines and the shares. A failed ncu is a
# row, not a failure of the checks (some machines refuse its counters).
echo "== 10. where a step's time goes (ncu)"
ncu=$(command -v ncu || ls "${CUDA_HOME:-/usr/local/cuda}/bin/ncu" 2>/dev/null | head -1)
ncu_step() {   # ncu_step TAG LABEL CDL-TRAIN-ARGS...: logs ncu-TAG.*, rows "10 LABEL"
    local name=$1 label=$2 ms pct calls what; shift 2
    if timeout $((150 * slow)) "$ncu" --clock-control none --metrics gpu__time_duration.sum --csv \
            --launch-count 5000 --log-file "$logs/ncu-$name.csv" "$train_bin" "$@" \
            --max-steps 1 --cuda-graphs off --no-progress > "$logs/ncu-$name.log" 2>&1 &&
            timeout 120 "$python" "$top/tests/gpu/ncu_top.py" "$logs/ncu-$name.csv" 8 \
            > "$logs/ncu-$name.top" 2>&1; then
        row "10 $label, one step + validation" "$(head -1 "$logs/ncu-$name.top")"
        raw_row "    $(sed -n 2p "$logs/ncu-$name.top")"
        while IFS='|' read -r ms pct calls what; do
            row "    $what" "$(printf '%8s ms %5s%%  %5s calls' "$ms" "$pct" "$calls")"
        done < <(tail -n +3 "$logs/ncu-$name.top")
    else
        row "10 $label (ncu)" "failed (see $logs/ncu-$name.log, $logs/ncu-$name.top)"
    fi
}
if ! want 10; then
    :
elif [ -z "$ncu" ]; then
    row "10 kernel times (ncu)" "skipped: ncu (Nsight Compute) not found"
elif [ $have_train = 0 ]; then
    fail_row "10 kernel times (ncu)" "cli/cdl-train did not build (see $logs/make-cli.log)"
elif late 97; then
    row "10 kernel times (ncu)" "$(late_why)"
else
    # (the rehearsal: step 9's small net, and ncu's test double)
    ncu_step resnet "$rmodel, batch $rb" --device cuda --model "$rmodel" --dataset synthetic \
        --synthetic-size $((5 * rb)) --val-split 0 --epochs 1 --batch-size "$rb"
    if make_tokens; then
        ncu_step gpt "$gpt_name bf16, batch $gb" --device cuda --model "$gpt_model" --dataset "tokens:$tok" \
            --vocab-size "$gv" --block-size "$gt" --batch-size "$gb" --optimizer adamw \
            --precision bf16 --epochs 1
    fi
fi

# ----------------------------------------------------------- the table
want_all=" 1 2 3 4 5 6 7 8 9 10 "
[ "$want_steps" = "$want_all" ] || row "steps asked for (CDL_GPU_STEPS)" "$(echo $want_steps)"
write_table
exit $failed
