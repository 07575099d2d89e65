/* Test only: the CPU emulation (emu.h) of the warp-level tensor-core API
 * the bf16 kernels use (nvcuda::wmma from <mma.h>, bf16 16x16x16 shapes
 * with fp32 accumulators) and of the bf16 type of <cuda_bf16.h>.
 *
 * On a GPU a fragment is spread over the 32 lanes of a warp in a layout
 * the API does not document; every wmma call is warp-collective (all 32
 * lanes call it with the same arguments). Here each thread holds the whole
 * 16x16 tile (as floats: bf16 values are exact in fp32), so a lane can run
 * every call alone, and the results equal the warp's. No per-element access
 * (.x, num_elements) is offered: a kernel that relies on the undocumented
 * layout does not compile here.
 *
 * What it checks that a GPU would only get wrong silently: the pointer of
 * every load and store is 32-byte aligned and ldm a multiple of 16 bytes
 * (the API's rules), else it aborts. A store writes only the lane's share
 * of the tile (elements lane, lane + 32, ...), as on a GPU, where each lane
 * writes the elements it holds: a kernel that reads a stored tile back
 * without a __syncwarp (or __syncthreads) in between sees stale values here
 * too, because the emulated lanes run one after another until they wait.
 *
 * mma_sync adds the 16 products of each output in k order in fp32 (the
 * emulation's flags keep the compiler from fusing them); tensor cores add
 * in an order and with a rounding of their own, which the bounds of the
 * tests allow for (docs/cuda.md, "bf16").
 */
#ifndef CDL_TESTS_FAKEGPU_EMU_WMMA_H
#define CDL_TESTS_FAKEGPU_EMU_WMMA_H

/* bf16 as <cuda_bf16.h> has it: the upper 16 bits of an fp32. */
struct __nv_bfloat16 {
    unsigned short __x;
};

/* Round to nearest, ties to even; NaN stays a quiet NaN. */
inline __nv_bfloat16 __float2bfloat16_rn(float f)
{
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    __nv_bfloat16 b;
    if ((u & 0x7fffffffu) > 0x7f800000u)
        b.__x = (unsigned short)((u >> 16) | 0x40u);
    else
        b.__x = (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    return b;
}

inline float __bfloat162float(__nv_bfloat16 b)
{
    uint32_t u = (uint32_t)b.__x << 16;
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

/* Every lane of the warp waits here until all its live lanes arrive. */
inline void __syncwarp(unsigned mask = 0xffffffffu)
{
    (void)mask;
    cuk_emu_wait(CUK_EMU_AT_WARP);
}

namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

/* The whole tile, element (r, c) of the fragment's matrix at v[r * 16 + c]
 * (matrix_a: M x K, matrix_b: K x N, accumulator: M x N). */
template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
    static_assert(M == 16 && N == 16 && K == 16, "emu_wmma.h: only 16x16x16 fragments");
    float v[256];
};

/* The API's rules for a load or store: a 256-bit aligned pointer, ldm a
 * multiple of 16 bytes. */
inline void cuk_emu_wmma_check(const char *what, const void *p, unsigned ldm, size_t elem)
{
    if ((uintptr_t)p % 32 != 0 || (ldm * elem) % 16 != 0 || ldm < 16) {
        std::fprintf(stderr, "emu_wmma.h: %s at %p with ldm %u: wmma needs a 32-byte aligned "
                     "pointer and ldm a multiple of %zu elements (at least 16)\n", what, p, ldm,
                     16 / elem);
        std::abort();
    }
}

/* The lane of the calling thread in its warp. */
inline unsigned cuk_emu_lane()
{
    return cuk_emu_now ? cuk_emu_now->current % 32u : 0u;
}

template <typename Use, typename T, typename Layout>
inline void fill_fragment(fragment<Use, 16, 16, 16, T, Layout> &f, float x)
{
    for (int i = 0; i < 256; i++)
        f.v[i] = x;
}

/* bf16 operands: element (r, c) at p[r * ldm + c] (row_major) or
 * p[c * ldm + r] (col_major). */
template <typename Use, typename Layout>
inline void load_matrix_sync(fragment<Use, 16, 16, 16, __nv_bfloat16, Layout> &f,
                             const __nv_bfloat16 *p, unsigned ldm)
{
    static_assert(std::is_same<Layout, row_major>::value || std::is_same<Layout, col_major>::value,
                  "emu_wmma.h: an operand fragment needs row_major or col_major");
    cuk_emu_wmma_check("load_matrix_sync (bf16)", p, ldm, 2);
    const bool rm = std::is_same<Layout, row_major>::value;
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++)
            f.v[r * 16 + c] = __bfloat162float(rm ? p[(size_t)r * ldm + c] : p[(size_t)c * ldm + r]);
}

inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float> &f, const float *p,
                             unsigned ldm, layout_t layout)
{
    cuk_emu_wmma_check("load_matrix_sync (float)", p, ldm, 4);
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++)
            f.v[r * 16 + c] = layout == mem_row_major ? p[(size_t)r * ldm + c]
                                                      : p[(size_t)c * ldm + r];
}

/* Writes the lane's share only (see the top of the file). */
inline void store_matrix_sync(float *p, const fragment<accumulator, 16, 16, 16, float> &f,
                              unsigned ldm, layout_t layout)
{
    cuk_emu_wmma_check("store_matrix_sync", p, ldm, 4);
    for (unsigned e = cuk_emu_lane(); e < 256; e += 32) {
        unsigned r = e / 16, c = e % 16;
        if (layout == mem_row_major)
            p[(size_t)r * ldm + c] = f.v[e];
        else
            p[(size_t)c * ldm + r] = f.v[e];
    }
}

/* d = a b + c (d may be c). Each output adds its products in k order;
 * the loops run over whole rows of b so that the compiler may vectorise
 * across outputs (the emulation's hot spot: every lane multiplies the
 * whole tile), which changes no sum. */
inline void cuk_emu_mma(float *out, const float *a, const float *b, const float *c)
{
    std::memcpy(out, c, 256 * sizeof *out);
    for (int i = 0; i < 16; i++)
        for (int k = 0; k < 16; k++) {
            float x = a[i * 16 + k];
            for (int j = 0; j < 16; j++)
                out[i * 16 + j] += x * b[k * 16 + j];
        }
}

template <typename La, typename Lb>
inline void mma_sync(fragment<accumulator, 16, 16, 16, float> &d,
                     const fragment<matrix_a, 16, 16, 16, __nv_bfloat16, La> &a,
                     const fragment<matrix_b, 16, 16, 16, __nv_bfloat16, Lb> &b,
                     const fragment<accumulator, 16, 16, 16, float> &c)
{
    float out[256];
    cuk_emu_mma(out, a.v, b.v, c.v);
    std::memcpy(d.v, out, sizeof out);
}

} // namespace wmma
} // namespace nvcuda

#endif
