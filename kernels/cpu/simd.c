/* CPU feature detection for the kernel dispatch (see simd.h). */
#include <stdatomic.h>
#include <stdlib.h>

#include "kernels/cpu/simd.h"

#if CPU_X86
/* -1: not probed yet. Races are benign: every thread computes the same. */
static atomic_int cached = -1;

int cpu_has_avx512(void)
{
    int v = atomic_load_explicit(&cached, memory_order_relaxed);
    if (v < 0) {
        /* Read here, not passed in cdl_backend_params: which instructions
         * the process's kernels use is a process-wide dispatch (cached once,
         * shared by every CPU backend), a diagnosis switch like OpenBLAS's
         * OPENBLAS_CORETYPE, not a setting of one backend. */
        const char *off = getenv("CDL_CPU_NO_AVX512");
        __builtin_cpu_init();
        v = __builtin_cpu_supports("avx512f") && !(off && *off && *off != '0');
        atomic_store_explicit(&cached, v, memory_order_relaxed);
    }
    return v;
}

static atomic_int cached2 = -1;

int cpu_has_avx2(void)
{
    int v = atomic_load_explicit(&cached2, memory_order_relaxed);
    if (v < 0) {
        __builtin_cpu_init();
        v = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
        atomic_store_explicit(&cached2, v, memory_order_relaxed);
    }
    return v;
}

static atomic_int cached_halves = -1;

int cpu_avx512_halves(void)
{
    int v = atomic_load_explicit(&cached_halves, memory_order_relaxed);
    if (v < 0) {
        __builtin_cpu_init();
        v = __builtin_cpu_is("amdfam19h") && __builtin_cpu_supports("avx512f");
        atomic_store_explicit(&cached_halves, v, memory_order_relaxed);
    }
    return v;
}

void cpu_disable_avx512(int off)
{
    atomic_store_explicit(&cached, off ? 0 : -1, memory_order_relaxed);
    atomic_store_explicit(&cached2, off ? 0 : -1, memory_order_relaxed);
}
#endif
