/* Warp-level bf16 tensor-core instructions with documented register
 * layouts, for kernels that work on the fragments' elements (attn_bf16.cu's
 * mma kernels): PTX's mma.sync m16n8k16 (bf16 operands, fp32
 * accumulators) and ldmatrix .x4 / .x4.trans, compute capability 8.0 and
 * later. Unlike nvcuda::wmma, the PTX ISA documents which elements every
 * lane holds ("Matrix Fragments for mma.m16n8k16 with floating point type";
 * "Warp-level matrix load instruction: ldmatrix"), with groupID = lane >> 2
 * and tig = lane % 4:
 *   A (16 x 16, row-major operand): a[j] holds two bf16 (lower index in the
 *     low half) of row groupID (a[1], a[3]: groupID + 8), columns tig * 2,
 *     tig * 2 + 1 (a[2], a[3]: + 8);
 *   B (16 x 8, "col"): b[j] holds rows (k) tig * 2, tig * 2 + 1 (b[1]:
 *     + 8) of column groupID;
 *   C, D (16 x 8 fp32): c[0], c[1] row groupID, columns tig * 2,
 *     tig * 2 + 1; c[2], c[3] the same columns of row groupID + 8.
 * So an accumulator's row is spread over the 4 lanes of a group (row
 * reductions: __shfl_xor_sync 1 and 2), and two accumulators side by side
 * (columns 0-7 and 8-15) repacked pairwise to bf16 are an A operand
 * (cuk_c2a). ldmatrix: lanes 8m .. 8m+7 give the row addresses of matrix m
 * (16-byte rows, 16-byte aligned, shared memory); r[m] receives row
 * groupID, columns tig * 2, tig * 2 + 1 of it, or with .trans column
 * groupID, rows tig * 2, tig * 2 + 1. Every call is warp-collective (all
 * 32 lanes, same instruction).
 *
 * Under the CPU emulation (CUK_EMULATION: tests/fakegpu/emu.h) the same
 * functions run tests/fakegpu/emu_mma.h, which moves the elements between
 * the emulated lanes by exactly these layouts.
 */
#ifndef CDL_KERNELS_CUDA_MMA_CUH
#define CDL_KERNELS_CUDA_MMA_CUH

#include <stdint.h>

#ifndef CUK_EMULATION
#include <cuda_bf16.h>
#endif

/* The instructions need sm_80; device code for older GPUs traps (the
 * backend never launches these kernels there). */
#if !defined(CUK_EMULATION) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#define CUK_MMA_TRAP 1
#else
#define CUK_MMA_TRAP 0
#endif

/* d += A B: one m16n8k16 product, bf16 operands, fp32 accumulators. */
static __device__ __forceinline__ void cuk_mma_bf16(float d[4], const uint32_t a[4],
                                                    const uint32_t b[2])
{
#ifdef CUK_EMULATION
    cuk_emu_mma_bf16(d, a, b);
#elif CUK_MMA_TRAP
    (void)d, (void)a, (void)b;
    __trap();
#else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

/* Four 8x8 bf16 matrices from shared memory; row: this lane's row address
 * (lane 8m + i: row i of matrix m); trans (a constant at every call): each
 * matrix read transposed (column-major). */
static __device__ __forceinline__ void cuk_ldmatrix_x4(uint32_t r[4], const void *row, bool trans)
{
#ifdef CUK_EMULATION
    cuk_emu_ldmatrix_x4(r, row, trans);
#elif CUK_MMA_TRAP
    (void)r, (void)row, (void)trans;
    __trap();
#else
    unsigned addr = (unsigned)__cvta_generic_to_shared(row);
    if (trans)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(addr)
                     : "memory");
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(addr)
                     : "memory");
#endif
}

/* lo and hi rounded to bf16 (nearest, ties to even) in one register, lo in
 * the low half: an operand pair. */
static __device__ __forceinline__ uint32_t cuk_bf16x2(float lo, float hi)
{
#ifdef CUK_EMULATION
    return (uint32_t)__float2bfloat16_rn(lo).__x | (uint32_t)__float2bfloat16_rn(hi).__x << 16;
#else
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return (uint32_t)__bfloat16_as_ushort(v.x) | (uint32_t)__bfloat16_as_ushort(v.y) << 16;
#endif
}

/* The A operand (16 x 16) of two accumulators side by side: c0 columns
 * 0-7, c1 columns 8-15, each element rounded to bf16. */
static __device__ __forceinline__ void cuk_c2a(uint32_t a[4], const float c0[4], const float c1[4])
{
    a[0] = cuk_bf16x2(c0[0], c0[1]);
    a[1] = cuk_bf16x2(c0[2], c0[3]);
    a[2] = cuk_bf16x2(c1[0], c1[1]);
    a[3] = cuk_bf16x2(c1[2], c1[3]);
}

#endif
