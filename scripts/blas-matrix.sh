#!/usr/bin/env bash
# blas-matrix.sh BUILD-DIR [TEST...]: runs tests again under each kernel
# family Debian's OpenBLAS picks on x86-64 (OPENBLAS_CORETYPE=SkylakeX,
# Haswell, Sandybridge, Prescott), so that a test that depends on one
# CPU's rounding fails here and not on the next machine (docs/hacking.md,
# "Comparing floating-point results"). scripts/test.sh runs it after the
# gcc stage, in BUILD-DIR where that stage built; by default on the
# data-parallel and end-to-end tests that compare floating-point results.
#
# A core type is skipped, with the reason, when this CPU cannot execute its
# kernels (OpenBLAS does not check a forced type: SkylakeX on a CPU without
# AVX-512 dies of SIGILL), when OpenBLAS does not report running it, or
# when it is the one OpenBLAS picks itself (the gcc stage ran that). Ends
# with automake's summary lines ("# PASS: N", ...) over all types, each
# test of a skipped type counted as skipped. Exit status 1 if any failed.
set -uo pipefail
build=${1:?usage: blas-matrix.sh BUILD-DIR [TEST...]}
shift
cd "$build" || exit 1
if [ $# -gt 0 ]; then
    tests=("$@")
else
    tests=(tests/dist/train_equiv.sh tests/e2e/torch-interop.sh tests/slurm/test_train_e2e.sh)
    grep -q '^#define HAVE_CUDA 1' config.h && tests+=(tests/fakegpu/train.sh tests/fakegpu/ddp.sh)
fi
ntests=${#tests[@]}

# The CPU features each family's kernels use, as /proc/cpuinfo names them
# (pni is SSE3).
declare -A needs=([SkylakeX]="avx512f avx512cd avx512bw avx512dq avx512vl" [Haswell]="avx2 fma"
                  [Sandybridge]=avx [Prescott]=pni)
flags=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2) "
# The core OpenBLAS runs in cdl-train, as its --version reports it (after
# cdl-train's own new start with OPENBLAS_CORETYPE set, on a CPU that
# OpenBLAS does not know: cli/blas_core.c).
core() { env "$@" cli/cdl-train --version 2>&1 | sed -n 's/^OpenBLAS kernels: //p' | head -n1; }
detected=$(core -u OPENBLAS_CORETYPE)

pass=0 fail=0 skip=0
for type in SkylakeX Haswell Sandybridge Prescott; do
    missing=
    for f in ${needs[$type]}; do
        case $flags in *" $f "*) ;; *) missing="$missing $f" ;; esac
    done
    why=
    if [ -n "$missing" ]; then
        why="this CPU lacks${missing}: the kernels would stop with an illegal instruction"
    elif [ "$type" = "$detected" ]; then
        why="OpenBLAS picks it on this CPU, so the gcc stage ran these tests with it"
    elif [ "$(core OPENBLAS_CORETYPE="$type")" != "$type" ]; then
        why="OpenBLAS does not run it when asked (reports '$(core OPENBLAS_CORETYPE="$type")')"
    fi
    if [ -n "$why" ]; then
        echo "SKIP: OPENBLAS_CORETYPE=$type: $why ($ntests tests skipped)"
        skip=$((skip + ntests))
        continue
    fi
    log=blas-$type.out
    make -j"$(nproc)" check TESTS="${tests[*]}" \
        TESTS_ENVIRONMENT="OPENBLAS_CORETYPE=$type; export OPENBLAS_CORETYPE;" >"$log" 2>&1
    rc=$?
    sed -n -E "s/^(PASS|FAIL|SKIP|ERROR|XPASS|XFAIL): (.*)/\1: \2 (OPENBLAS_CORETYPE=$type)/p" "$log"
    read -r p f s < <(awk '/^# PASS:/ {p += $3} /^# (FAIL|ERROR|XPASS):/ {f += $3}
                           /^# SKIP:/ {s += $3} END {print p+0, f+0, s+0}' "$log")
    pass=$((pass + p)) fail=$((fail + f)) skip=$((skip + s))
    if [ "$rc" -ne 0 ]; then
        [ "$f" -gt 0 ] || fail=$((fail + 1))   # make itself failed
        for t in "${tests[@]}"; do
            grep -q -E '^(FAIL|ERROR)' "${t%.sh}.log" 2>/dev/null || continue
            echo "--- ${t%.sh}.log (OPENBLAS_CORETYPE=$type)"; tail -n 40 "${t%.sh}.log"
        done
        tail -n 20 "$log"
    fi
done
echo "# PASS: $pass"
echo "# SKIP: $skip"
echo "# FAIL: $fail"
[ "$fail" -eq 0 ]
