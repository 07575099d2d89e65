# Sourced by the bench scripts: OpenBLAS (cdl's GEMM, and PyTorch's on
# Debian) picks its kernels by CPU model; one it does not know yet (Debian
# 12's 0.3.21 on newer Xeons) falls back to "Prescott", SSE3 kernels at a
# fraction of the machine's speed. Every side of a bench then gets the best
# kernels the CPU supports, so that none is handicapped and SGEMM figures
# are the machine's, not the fallback's. Needs $bench: a program linked
# with OpenBLAS that runs briefly with the arguments in $bench_args.
openblas_core=$(OPENBLAS_VERBOSE=2 "$bench" $bench_args 2>&1 | sed -n 's/^Core: //p' | head -n1)
if [ -z "${OPENBLAS_CORETYPE:-}" ] && [ "$openblas_core" = Prescott ]; then
    if grep -qw avx512bw /proc/cpuinfo; then export OPENBLAS_CORETYPE=SkylakeX
    elif grep -qw avx2 /proc/cpuinfo; then export OPENBLAS_CORETYPE=Haswell; fi
fi
if [ -n "${OPENBLAS_CORETYPE:-}" ]; then
    echo "OpenBLAS kernels: $OPENBLAS_CORETYPE (OPENBLAS_CORETYPE; detected: ${openblas_core:-unknown})"
else
    echo "OpenBLAS kernels: ${openblas_core:-unknown} (detected)"
fi
