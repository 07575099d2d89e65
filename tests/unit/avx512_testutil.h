/* Tests that compare the AVX-512 kernels with the AVX2 ones in one process:
 * CDL_CPU_NO_AVX512=1 is read again when cpu_disable_avx512(0) drops the
 * cached probe, so the AVX2 paths run without the portable fallbacks. */
#ifndef TESTS_UNIT_AVX512_TESTUTIL_H
#define TESTS_UNIT_AVX512_TESTUTIL_H

#include <stdlib.h>

#include "kernels/cpu/simd.h"
#include "testutil.h"

/* 1: AVX2 without AVX-512 from now on; 0: back to what the CPU has (call
 * only where cpu_has_avx512() was 1). */
static inline void test_avx2_only(int on)
{
    if (on)
        setenv("CDL_CPU_NO_AVX512", "1", 1);
    else
        unsetenv("CDL_CPU_NO_AVX512");
    cpu_disable_avx512(0);
    assert_int_equal(cpu_has_avx512(), !on);
    assert_true(cpu_has_avx2());
}

#endif
