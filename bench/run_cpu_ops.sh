#!/bin/bash
# Single CPU ops, cdl against PyTorch, side by side: depthwise convolutions
# (stride 1 and 2, MobileNet/EfficientNet shapes), batch norm (training
# forward and backward, evaluation; ResNet-50's planes and flat features),
# max pooling 3x3/2/1 (the ImageNet stem) and dense 3x3 convolutions (the
# Winograd cut-offs). One row per case and pass (fwd, bwd), in ms (the
# fastest of RUNS calls, bench_ops.c and torch_ops.py): cdl under each of
# CDL_SETTINGS, PyTorch 2.x from PyPI (a venv this script creates, shared
# with run_resnet_speed.sh) and Debian's 1.13, then each cdl column's
# ratio to the faster PyTorch (above 1: cdl is slower). The same thread
# count on both sides; the load average is printed before and after
# (measure on a quiet machine).
#
# Usage: bench/run_cpu_ops.sh [BUILD_DIR] [GROUP...]   (BUILD_DIR holds
#        bench/bench_ops; GROUP: dw bn pool wino, default all)
# Environment: THREADS=2 RUNS=20 ROUNDS=1 (each side measured ROUNDS times
# in turn, its best kept), CPU=0 (1: process CPU time, not the wall
# clock: with THREADS=1 on a loaded machine, leaves out waiting for a core), CDL_SETTINGS="default CDL_CPU_NO_AVX512=1"
# (space-separated; each "default" or VAR=VALUE[,VAR=VALUE]: the AVX2
# paths of an AVX-512 machine are the second; "CDL_CPU_NO_AVX512=1,
# CDL_CPU_NO_WINOGRAD=1" times the AVX2 direct kernels against Winograd),
# CASES (replaces the groups' cases), VENV=BUILD_DIR/bench/venv-torch2
# (NO_VENV=1 skips PyPI's torch), PYTHON=/usr/bin/python3.
set -u
build=.
if [ $# -gt 0 ] && [ -d "$1" ]; then build=$1; shift; fi
here=$(cd "$(dirname "$0")" && pwd)
threads=${THREADS:-2} runs=${RUNS:-20} rounds=${ROUNDS:-1} cpu=${CPU:-0}
case $rounds in ''|*[!0-9]*|0) echo "run_cpu_ops.sh: ROUNDS '$rounds': use a count >= 1" >&2; exit 2 ;; esac
settings=${CDL_SETTINGS:-default CDL_CPU_NO_AVX512=1}
python=${PYTHON:-/usr/bin/python3}
bench="$build/bench/bench_ops"
[ -x "$bench" ] || { echo "run_cpu_ops.sh: $bench not found: build it (make bench/bench_ops)" >&2; exit 2; }
bench_args=--help
. "$here/openblas_core.sh"
. "$here/torch2_venv.sh"
torch2=$(torch2_venv "${VENV:-$build/bench/venv-torch2}")

groups=${*:-dw bn pool wino}
cases=${CASES:-}
if [ -z "$cases" ]; then
    for g in $groups; do
        case $g in
        dw) cases+=" dw:1,32,112,112,3,2,1 dw:1,96,112,112,3,2,1 dw:1,144,56,56,3,2,1"
            cases+=" dw:1,192,28,28,3,2,1 dw:1,576,14,14,3,2,1 dw:1,960,14,14,3,2,1"
            cases+=" dw:32,144,56,56,3,2,1 dw:64,32,112,112,3,2,1 dw:16,960,14,14,3,2,1"
            cases+=" dw:8,32,112,112,3,1,1 dw:8,128,28,28,3,1,1" ;;
        bn) cases+=" bn:8,64,112,112 bn:8,256,56,56 bn:8,512,28,28 bn:8,1024,14,14 bn:8,2048,7,7"
            cases+=" bn:512,512,1,1 bn:256,4096,1,1 bneval:8,256,56,56 bneval:8,2048,7,7"
            cases+=" bneval:512,512,1,1" ;;
        pool) cases+=" maxpool:1,64,112,112,3,2,1 maxpool:8,64,112,112,3,2,1"
              cases+=" maxpool:32,64,112,112,3,2,1 maxpool:8,64,56,56,3,2,1" ;;
        wino) cases+=" conv:8,16,32,32,16,3,1,1 conv:8,32,16,16,32,3,1,1 conv:8,64,8,8,64,3,1,1"
              cases+=" conv:8,64,56,56,64,3,1,1 conv:8,128,28,28,128,3,1,1"
              cases+=" conv:8,256,14,14,256,3,1,1 conv:8,512,7,7,512,3,1,1"
              cases+=" conv:1,256,8,8,256,3,1,1 conv:1,512,4,4,512,3,1,1" ;;
        *) echo "run_cpu_ops.sh: group '$g': use dw, bn, pool or wino" >&2; exit 2 ;;
        esac
    done
fi

# best FILE: the case lines of every round in FILE, the fastest of each
# case's fwd and bwd.
best() {
    awk '{ for (i = 2; i <= 3; i++) if ($i != "-" && (!(($1, i) in m) || $i + 0 < m[$1, i])) m[$1, i] = $i
           if (!($1 in seen)) { seen[$1] = 1; order[++n] = $1 } }
         END { for (k = 1; k <= n; k++) { c = order[k]
               printf "%s %s %s\n", c, ((c, 2) in m) ? m[c, 2] : "-", ((c, 3) in m) ? m[c, 3] : "-" } }' "$1"
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg); $threads thread(s), fastest of $runs calls" \
     "($([ "$cpu" = 1 ] && echo "CPU time" || echo "wall clock")), best of $rounds round(s)"
cols=()
for round in $(seq "$rounds"); do
    k=0
    for s in $settings; do
        k=$((k + 1))
        envs=()
        [ "$s" = default ] || IFS=, read -r -a envs <<<"$s"
        env "${envs[@]}" "$bench" --threads "$threads" --runs "$runs" --cpu "$cpu" $cases >>"$tmp/cdl$k" ||
            { echo "run_cpu_ops.sh: bench_ops failed under '$s'" >&2; exit 1; }
    done
    if [ -n "$torch2" ]; then
        "$torch2" "$here/torch_ops.py" --threads "$threads" --runs "$runs" --cpu "$cpu" $cases >>"$tmp/t2" 2>/dev/null
    fi
    "$python" "$here/torch_ops.py" --threads "$threads" --runs "$runs" --cpu "$cpu" $cases >>"$tmp/t1" 2>/dev/null
done
k=0
for s in $settings; do k=$((k + 1)); best "$tmp/cdl$k" >"$tmp/b.cdl$k"; cols+=("$tmp/b.cdl$k"); done
for t in t2 t1; do if [ -s "$tmp/$t" ]; then best "$tmp/$t" >"$tmp/b.$t"; else : >"$tmp/b.$t"; fi; done
v2=$([ -n "$torch2" ] && "$torch2" -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null)
v1=$("$python" -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null)
echo
k=0
for s in $settings; do k=$((k + 1)); echo "cdl$k: $s"; done
# One awk joins the files on the case: cdl columns, then torch 2.x, 1.13,
# then each cdl column over the faster torch.
awk -v ncdl="${#cols[@]}" -v v2="torch ${v2:-2.x}" -v v1="torch ${v1:-1.13}" '
    FNR == 1 { f++ }
    { t[f, $1, "fwd"] = $2; t[f, $1, "bwd"] = $3; if (f == 1) order[++n] = $1 }
    END {
        printf "%-30s %-4s", "case", "pass"
        for (k = 1; k <= ncdl; k++) printf " %9s", "cdl" k
        printf " %11s %11s", v2, v1
        for (k = 1; k <= ncdl; k++) printf " %9s", "cdl" k "/pt"
        printf "\n"
        for (i = 1; i <= n; i++) for (p = 1; p <= 2; p++) {
            c = order[i]; pass = p == 1 ? "fwd" : "bwd"
            if (t[1, c, pass] == "-") continue
            printf "%-30s %-4s", c, pass
            for (k = 1; k <= ncdl; k++) printf " %9s", t[k, c, pass]
            a = t[ncdl + 1, c, pass]; b = t[ncdl + 2, c, pass]
            printf " %11s %11s", a == "" ? "-" : a, b == "" ? "-" : b
            best = ""
            if (a != "" && a != "-") best = a
            if (b != "" && b != "-" && (best == "" || b + 0 < best + 0)) best = b
            for (k = 1; k <= ncdl; k++)
                if (best != "" && best + 0 > 0) printf " %8.2fx", t[k, c, pass] / best
                else printf " %9s", "-"
            printf "\n"
        }
    }' "${cols[@]}" "$tmp/b.t2" "$tmp/b.t1"
echo
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
