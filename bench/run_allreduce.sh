#!/bin/sh
# Allreduce benchmark: cdl shm beside Open MPI's MPI_Allreduce on 2 and 4
# ranks, 62006 / 1M / 25M floats. Run from the build directory (or pass it):
#   bench/run_allreduce.sh [BUILDDIR] [--quick]
set -eu
builddir=.
if [ $# -gt 0 ] && [ "$1" != --quick ]; then builddir=$1; shift; fi
bench=$builddir/bench/bench_allreduce
if [ ! -x "$bench" ]; then
    echo "run_allreduce.sh: $bench not found: build with Open MPI (libopenmpi-dev) and run make" >&2
    exit 1
fi
for n in 2 4; do
    mpirun --allow-run-as-root --oversubscribe -n "$n" "$bench" "$@" 2>&1 | grep -v '^cdl: '
    echo
done
