/* conv2d ops: pick the direct AVX-512 kernels, the direct AVX2 kernels or
 * im2col+SGEMM per shape (conv2d.h). The choice depends only on the shape
 * and the CPU, so the workspace size, forward and backward always agree. */
#include <stdatomic.h>
#include <stdlib.h>

#include "kernels/cpu/conv2d.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/simd.h"

/* Direct kernels block 6 output channels; past this many, SGEMM's reuse
 * wins. */
#define CONV_DIRECT_MAX_OC 48

/* The AVX2 kernels up to this many input and output channels (the CIFAR
 * ResNet-18's widest; measured faster than im2col+SGEMM from 16 to 512
 * channels at 32 down to 4 pixels), except strided convolutions with
 * outputs narrower than 8 (half-empty vectors lost to SGEMM there). */
#define CONV_AVX2_MAX_C 512

int conv_bwd_chunks(int threads, int n, size_t partial_floats)
{
    int chunks = pool_chunks_for(threads, (size_t)(n > 0 ? n : 0), 1);
    size_t fit = partial_floats ? CONV_PARTIALS_MAX / partial_floats : (size_t)chunks;
    if ((size_t)chunks > fit && chunks > threads)
        chunks = fit > (size_t)threads ? (int)fit : threads < n ? threads : n;
    return chunks;
}

int conv_use_direct(const cdl_conv2d_desc *d)
{
    if (d->oc <= CONV_DIRECT_MAX_OC && conv_direct_supported(d))
        return 1;
    if (!cpu_has_avx512() && d->oc <= CONV_AVX2_MAX_C && d->c <= CONV_AVX2_MAX_C &&
        (d->stride_w == 1 || d->ow >= 8) && conv_avx2_supported(d))
        return 2;
    return 0;
}

/* CDL_CPU_NO_WINOGRAD, read once (-1: not yet). A process-wide diagnosis
 * switch like CDL_CPU_NO_AVX512 (to compare paths), not a backend setting. */
static atomic_int wino_off = -1;

static int wino_disabled(void)
{
    int v = atomic_load_explicit(&wino_off, memory_order_relaxed);
    if (v < 0) {
        const char *e = getenv("CDL_CPU_NO_WINOGRAD");
        v = e && *e && *e != '0';
        atomic_store_explicit(&wino_off, v, memory_order_relaxed);
    }
    return v;
}

/* Winograd from this many input and output channels. Measured on a Zen 3
 * core (AVX2, no AVX-512), 1 thread, batch 128, CPU time of the direct
 * AVX2 kernels / Winograd's, forward and dx (dx within 0.1 of it):
 *   c=oc=16 at 32x32  0.84-0.92 (the transforms, as costly as the products
 *                     at 16 channels, eat the 2.25x fewer multiply-adds)
 *   c=3, oc=16 32x32  0.73 (the stem)
 *   32 at 16x16       1.10-1.25      64 at 8x8     1.38-1.40
 *   64 at 32x32       1.74           128 at 16x16  1.25
 *   256 at 8x8        1.14           512 at 4x4    2.09
 * (the last four before the 8x8 transforms took two tile rows per vector
 * and the products ran position-major: since then 64 at 8x8 went from
 * 1.12 to 1.4). The weight gradient, direct / Winograd: 16 at 32x32 0.93,
 * 32 at 16x16 1.29, 64 at 8x8 1.36. */
#define CONV_WINO_MIN_C 32

int conv_use_wino(const cdl_conv2d_desc *d)
{
    if (conv_use_direct(d) != 2 || !conv_wino_supported(d) || wino_disabled())
        return 0;
    if (d->c < CONV_WINO_MIN_C || d->oc < CONV_WINO_MIN_C)
        return 0;
    return CONV_WINO_FWD | CONV_WINO_DX | CONV_WINO_DW;
}

static size_t direct_workspace(const cdl_conv2d_desc *d, int t)
{
    switch (conv_use_direct(d)) {
    case 1: return conv_direct_workspace(d, t);
    case 2: return conv_avx2_workspace(d, t);
    default: return conv_gemm_workspace(d, t);
    }
}

/* The Winograd and the direct kernels of one call run one after the other:
 * the larger of the two workspaces serves both. */
size_t cpu_conv2d_workspace(cdl_backend *be, const cdl_conv2d_desc *d)
{
    int t = pool_threads(cpu_pool(be));
    size_t a = direct_workspace(d, t), b = conv_use_wino(d) ? conv_wino_workspace(d, t) : 0;
    return a > b ? a : b;
}

void cpu_conv2d_fwd(cdl_backend *be, const cdl_conv2d_desc *d, const float *x,
                    const float *w, const float *b, float *y, float *ws)
{
    int path = conv_use_direct(d);
    if (conv_use_wino(d) & CONV_WINO_FWD)
        conv_wino_fwd(cpu_pool(be), d, x, w, b, y, ws);
    else if (path == 1)
        conv_direct_fwd(cpu_pool(be), d, x, w, b, y, ws);
    else if (path == 2)
        conv_avx2_fwd(cpu_pool(be), d, x, w, b, y, ws);
    else
        conv_gemm_fwd(cpu_pool(be), d, x, w, b, y, ws);
}

void cpu_conv2d_bwd(cdl_backend *be, const cdl_conv2d_desc *d, const float *x,
                    const float *w, const float *dy, float *dx, float *dw,
                    float *db, float *ws)
{
    int path = conv_use_direct(d);
    int wino = conv_use_wino(d);
    if (dx && (wino & CONV_WINO_DX)) {
        conv_wino_dx(cpu_pool(be), d, w, dy, dx, ws);
        dx = NULL;
    }
    if (wino & CONV_WINO_DW) {
        conv_wino_dw(cpu_pool(be), d, x, dy, dw, db, ws);
        if (!dx)
            return;
    }
    if (path == 1)
        conv_direct_bwd(cpu_pool(be), d, x, w, dy, dx, dw, db, ws);
    else if (path == 2)
        conv_avx2_bwd(cpu_pool(be), d, x, w, dy, dx, dw, db, ws);
    else
        conv_gemm_bwd(cpu_pool(be), d, x, w, dy, dx, dw, db, ws);
}
