#!/bin/bash
# What cdl's SPANK plugin adds to a job step launch: the median wall time of
# `srun -n2 true` (a step in an existing 2-task allocation on the throw-away
# test cluster, tests/slurm/cluster.sh, so that job scheduling does not add
# its noise)
#   - without the plugin (empty plugstack.conf),
#   - with the plugin loaded but not asked for anything,
#   - with --cdl-ddp (the rank contract computed and set in every task),
#   - with --cdl-ddp --cdl-bind=cores (hwloc discovers the topology),
#   - the same with topology=<slurmd's cached XML> in the admin settings.
# srun and slurmstepd read plugstack.conf at every start, so the variants are
# interleaved run by run (drift hits all alike). Target: at most 5 ms added,
# with and without --cdl-ddp.
#
#   bench/bench_spank.sh [RUNS]       (root; from the build directory, or
#                                      set top_builddir/top_srcdir)
# Prints one line per variant: median and spread (25th-75th percentile) in
# ms, and the median difference to the run without the plugin.
set -u
here=$(cd "$(dirname "$0")" && pwd)
: "${top_srcdir:=$here/..}"
: "${top_builddir:=.}"
RUNS=${1:-40}
. "$top_srcdir/tests/slurm/lib.sh"
require_cluster_tools
start_cluster
CONF=$CDL_CLUSTER_DIR/etc/plugstack.conf
WITH=$(cat "$CONF")

variants=(none loaded ddp ddp-bind ddp-bind-xml)
XML=$CDL_CLUSTER_DIR/spool/n1/hwloc_topo_whole.xml   # slurmd's own cache
conf_for() {
    case $1 in
    none) : >"$CONF" ;;
    ddp-bind-xml) echo "$WITH topology=$XML" >"$CONF" ;;
    *) echo "$WITH" >"$CONF" ;;
    esac
}
args_for() {
    case $1 in
    ddp) echo --cdl-ddp ;;
    ddp-bind*) echo --cdl-ddp --cdl-bind=cores ;;
    esac
}
ms_now() { date +%s%N; }

timeout 30 salloc --no-shell -N1 -n2 -w n1 -J bench >/dev/null 2>&1 || { echo "salloc failed"; exit 1; }
job=$(squeue -h -n bench -o %i | head -1)
[ -f "$XML" ] || { echo "no $XML"; exit 1; }
step() {   # step VARIANT: one timed `srun -n2 true` in the allocation
    conf_for "$1"
    # shellcheck disable=SC2046
    timeout 30 srun --jobid="$job" -n2 $(args_for "$1") true >/dev/null 2>&1 ||
        { echo "srun ($1) failed"; scancel "$job"; exit 1; }
}

declare -A samples
for v in "${variants[@]}"; do step "$v"; done   # warm-up
for ((i = 0; i < RUNS; i++)); do
    for v in "${variants[@]}"; do
        t0=$(ms_now)
        step "$v"
        t1=$(ms_now)
        samples[$v]+="$(( (t1 - t0) / 1000 )) "   # microseconds
    done
done
scancel "$job"

# pct P LIST: the P-th percentile (nearest rank) of microsecond samples.
pct() { echo "$2" | tr ' ' '\n' | grep . | sort -n | awk -v p="$1" '{a[NR]=$1} END {i=int((NR-1)*p/100+0.5)+1; print a[i]}'; }
base=$(pct 50 "${samples[none]}")
printf '%-13s %10s %18s %12s   (srun -n2 true in an allocation, %d runs each)\n' variant median_ms p25-p75_ms added_ms "$RUNS"
for v in "${variants[@]}"; do
    m=$(pct 50 "${samples[$v]}")
    printf '%-13s %10.1f %8.1f-%-9.1f %+12.1f\n' "$v" "$(echo "$m / 1000" | bc -l)" \
        "$(echo "$(pct 25 "${samples[$v]}") / 1000" | bc -l)" \
        "$(echo "$(pct 75 "${samples[$v]}") / 1000" | bc -l)" "$(echo "($m - $base) / 1000" | bc -l)"
done
