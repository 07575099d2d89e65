/* conv2d ops: pick the direct AVX-512 kernels, the direct AVX2 kernels (8
 * or 16 lanes), Winograd, the depthwise loops or im2col+SGEMM per shape
 * (conv2d.h). The choice depends only on the shape, the CPU and the
 * backend's fast_conv (fixed at its creation), so the workspace size,
 * forward and backward always agree. */
#include <stdatomic.h>
#include <stdlib.h>

#include "kernels/cpu/conv2d.h"
#include "kernels/cpu/conv2d_wino.h"
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

/* On AVX-512 CPUs the shapes of the AVX2 kernels take their 16-lane twin
 * (conv2d_avx512.c), bitwise the same results as on AVX2 CPUs. Measured
 * on an Emerald Rapids core (Xeon, CPU model 207; KVM, shared: +-15%
 * between runs; one run below), 1 thread, CPU ms of one call, batch 128
 * (resnet18's shapes n=32), OPENBLAS_CORETYPE=SkylakeX; forward / dx / dW:
 *                   16-lane twin        conv2d_direct.c     SGEMM             F(2x2)
 *   stem 3->16 32x32  1.1 /  -  / 2.2     9.7 /  -  / 2.0   3.2 /  -  / 4.5   3.9 /  -  / 4.7
 *   16 at 32x32       5.0 / 3.5 / 6.7     12 / 4.3 / 6.6    13 / 12 / 17      9.1 / 9.2 / 10
 *   16->32 stride 2   6.3 / 6.9 / 6.1      (stride 1 only)  8.2 / 6.9 / 9.3
 *   16->32 1x1 s2     2.0 / 2.2 / 2.0                       2.8 / 1.7 / 2.6
 *   32 at 16x16       4.5 / 4.2 / 5.4     6.0 / 4.0 / 5.3   9.4 / 8.4 / 12    7.4 / 7.4 / 7.1
 *   32->64 stride 2   2.9 / 4.5 / 3.2                       5.5 / 4.6 / 5.7
 *   32->64 1x1 s2     0.70 / 1.2 / 0.72                     0.87 / 0.80 / 0.99
 *   64 at 8x8         5.2 / 4.9 / 5.5     5.0 / 7.3 / 5.7   8.0 / 7.6 / 8.3   6.7 / 5.6 / 7.9
 *   64 at 32x32       18 / 17 / 18        23 / 15 / 21      29 / 26 / 31      22 / 22 / 22
 *   128 at 16x16      17 / 17 / 19        18 / 16 / 19      27 / 27 / 25      20 / 20 / 20
 *   256 at 8x8        19 / 20 / 23        18 / 31 / 26      32 / 33 / 24      19 / 19 / 27
 *   512 at 4x4        40 / 45 / 41        60 / 64 / 60      67 / 68 / 46      30 / 32 / 60
 * (the twin then had 4 x 4 corr and 2 x 12 dwt blocks; since, 6 x 4 and
 * 2 x 8 (conv2d_avx.h): forward 2-8% faster, dW at 32 and 64 channels
 * about 10%.) The AVX2 kernels take 1.3-1.9x the twin's times (8x8 with
 * 16 lanes runs two rows per vector). The twin wins or ties everywhere but with 256
 * channels and more at 8x8 and below, where F(2x2) takes the forward and
 * dx (conv_use_wino). resnet20 (batch 128, 1 thread) 251-256 -> 323-343
 * images/s. Staying on the AVX2 kernels' numerics keeps the PyTorch
 * fixtures passing as on AVX2 CPUs (without F(2x2) for resnet20 here).
 * Since F(2x2)'s products run 16 lanes wide too (conv2d_wino512.c), it
 * takes 64 to 256 channels from the twin on such CPUs (conv_use_wino). */
int conv_use_direct(const cdl_conv2d_desc *d)
{
    int avx = d->oc <= CONV_AVX2_MAX_C && d->c <= CONV_AVX2_MAX_C &&
              (d->stride_w == 1 || d->ow >= 8) && conv_avx2_supported(d);
    if (avx && conv_avx512_supported(d))
        return 3;
    if (d->oc <= CONV_DIRECT_MAX_OC && conv_direct_supported(d))
        return 1;
    if (avx && !cpu_has_avx512())
        return 2;
    return 0;
}

/* CDL_CPU_NO_WINOGRAD, read once (-1: not yet). A process-wide diagnosis
 * switch like CDL_CPU_NO_AVX512 (to compare paths), not a backend setting. */
static atomic_int wino_off = -1;

/* 1 when the environment variable name is set and not "0", read once into
 * *cache (-1: not yet). */
static int env_flag(const char *name, atomic_int *cache)
{
    int v = atomic_load_explicit(cache, memory_order_relaxed);
    if (v < 0) {
        const char *e = getenv(name);
        v = e && *e && *e != '0';
        atomic_store_explicit(cache, v, memory_order_relaxed);
    }
    return v;
}

static int wino_disabled(void) { return env_flag("CDL_CPU_NO_WINOGRAD", &wino_off); }

/* The backend's fast_conv (cdl_backend_params, cdl-train --fast-conv on)
 * lets the forward, dx and dW of the AVX2 path take F(4x4), and those of
 * the 16-lane path. On a CPU that runs 512-bit instructions in two halves
 * (cpu_avx512_halves: Zen 4), where the 16-lane direct kernels do no more
 * a cycle than the 8-lane ones: resnet20 training (batch 128) on a Zen 4
 * core 342-344 -> 394-404 images/s at 1 thread with the forward and dx,
 * 467 with dW too; 589-617 -> 669-678 -> 704 at 2 threads. On Intel's
 * AVX-512 cores (full 512-bit units; the products then run 16 lanes wide,
 * conv2d_wino512.c): measured on an Emerald Rapids-class Xeon (CPU model
 * 167 under KVM, 2.6 GHz), 1 thread, ms of forward / dx+dW, 16-lane direct
 * against F(4x4), batch 128: 16 at 32x32 4.5 / 11.0 against 4.1-4.3 /
 * 10.5-10.8, 32 at 16x16 4.0 / 9.1 against 2.5-2.6 / 6.1, 64 at 8x8 4.3 /
 * 9.0 against 2.2-2.3 / 5.4-5.5; batch 32: 128 at 16x16 15-16 / 31-33
 * against 6.9 / 17.2-17.4, 256 at 8x8 11-13 / 28-31 against 9.3 / 26.5;
 * resnet20 training (batch 128) 375-378 -> 432-448 images/s at 1 thread,
 * 724-726 -> 780-799 at 2. Zen 5 (full units, AMD) takes the same path,
 * not measured. On AVX2: 1.2 to 1.6x faster than
 * the best of F(2x2) and direct on
 * resnet20's stages (below); resnet20 training (batch 128, 1 thread)
 * 380 images per CPU second against 298 (+25%; 2 threads +10%), another
 * day 6-16%. It is a setting, off by default, because its normalised
 * error per convolution (0.3-2.4e-6 of max |y| at 3-128 channels,
 * conv2d_wino4.c) is 3-20x F(2x2)'s and the direct kernels'. Tried and
 * not enough to make it the default: the points 0, -1, 1, 1/2, -2 it now
 * uses (kernel error 2-4x smaller than 0, +-1, +-2), the channel sum in
 * blocks of 4 or 8. Its whole-model check is the forward
 * (test_model_torch: resnet20's logits and loss within 1e-5 of float64
 * PyTorch): the gradients of that fixture (batch 2 through batch norm and
 * ReLU) are chaotic at this error: noise of 1e-6 max |y| added to every 3x3
 * convolution of the float64 PyTorch model moves its gradients by 1-2e-4,
 * 2e-6 by 6-8e-2 (pre-activations that close to ReLU's kink flip), and
 * PyTorch's own float32 run misses float64 by 1.3e-5. */

/* Winograd F(2x2) (conv2d_wino.c) from this many input and output
 * channels, F(4x4) (conv2d_wino4.c, with the backend's fast_conv: above) for
 * the forward and dx from
 * CONV_WINO4_MIN_C channels on maps of at least CONV_WINO4_MIN_HW pixels a
 * side. Measured on a Zen 3 core (AVX2, no AVX-512), 1 thread, CPU time in
 * ms of one call, batch 128 unless said (n=32), direct AVX2 / F(2x2) /
 * F(4x4), forward (F(4x4)'s dx within 10% of its forward):
 *   c=oc=16 at 32x32   7.9 / 10.1 / 6.6  (F(2x2)'s transforms, as costly
 *                      as its products at 16 channels, eat its 2.25x)
 *   c=3, oc=16 32x32   2.6 / 3.7 / 3.7  (the stem)   c=oc=8: 2.3 / 3.2 / 2.6
 *   32 at 16x16        7.8 / 7.4 / 5.9     64 at 8x8      7.5 / 6.2 / 3.8
 *   64 at 32x32 n=32   36 / 24 / 16        128 at 16x16   35 / 27 / 18
 *   256 at 8x8 n=32    31 / 28 / 26        512 at 4x4     94 / 62 / 83
 * (at 4x4 F(4x4) has one tile per image and its 36 transformed filters of
 * 512x512 channels, 38 MB, stream from memory for every block of tiles).
 * The weight gradient, direct / F(2x2): 16 at 32x32 8.3 / 9.0, 32 at
 * 16x16 7.7 / 6.8, 64 at 8x8 7.8 / 5.7, 128 at 16x16 (n=32) 31 / 33,
 * 512 at 4x4 73 / 91 (F(4x4)'s weight gradient: below).
 * Checked again on the AVX-512 core of conv_use_direct with
 * CDL_CPU_NO_AVX512=1 (bench/run_cpu_ops.sh wino), 1 thread, CPU ms,
 * forward / dx+dW, direct AVX2 against F(2x2), batch 8: 16 at 32x32 0.45 /
 * 0.90 against 0.48 / 1.04, 16 at 16x16 (n=32) 0.45 / 0.90 against 0.52 /
 * 1.09, 16->64 at 16x16 0.45 / 0.96 against 0.45 / 1.06, 20 at 32x32 0.70
 * / 1.74 against 0.64 / 1.71, 24 at 32x32 0.97 / 2.08 against 0.83 / 1.74,
 * 24 at 16x16 0.25 / 0.53 against 0.22 / 0.46: F(2x2) from 24 channels
 * (it had been 32). The pixel cut-off below held: 64 at 8x8 at 256 pixels
 * 0.24 / 0.53 against 0.30 / 0.66, at 384 a tie, at 512 0.47 / 0.96
 * against 0.43 / 0.91. */
#define CONV_WINO_MIN_C 24
#define CONV_WINO4_MIN_C 16
#define CONV_WINO4_MIN_HW 8

/* F(4x4)'s weight gradient (with fast_conv, where F(4x4) takes the
 * forward) up to this many input and output channels. Measured on a Zen 4
 * core, 1 thread, ms of dx+dW with F(4x4)'s dx, dW direct (16-lane) /
 * F(4x4): 16 at 32x32 (batch 128) 11.5-12.4 / 10.0-10.2, 32 at 16x16
 * 9.9-10.3 / 7.3-8.6, 64 at 8x8 8.9-9.0 / 5.7-5.9, 64 at 32x32 (n=32)
 * 33 / 21, 128 at 16x16 (n=32) 34 / 22, 256 at 16x16 (n=16) 68 / 48,
 * 256 at 8x8 (n=32) 36 / 30, 512 at 8x8 (n=32) 148 / 150. The AVX2 path
 * (CDL_CPU_NO_AVX512=1), F(2x2) / F(4x4) dW: 32 at 16x16 8.7 / 8.0, 64 at
 * 8x8 6.2-6.5 / 5.7-5.8, 128 at 16x16 24.9 / 22.2-22.6, 256 at 16x16 55 /
 * 53, 256 at 8x8 29-31 / 29-31, 512 at 8x8 (n=8) 62-66 / 82-86 (its
 * partials, 36 positions of 512x512 channels, 38 MB a chunk, stream from
 * memory). On a Zen 3 core (AVX2), 1 thread, batch 128, dx+dW with
 * F(2x2) / F(4x4) dW: 16 at 32x32 13.6-13.8 / 12.2-13.1, 32 at 16x16 10.0
 * / 9.7-9.9, 64 at 8x8 7.8-8.0 / 7.4-7.5, 128 at 16x16 127 / 107, 256 at
 * 8x8 130 / 127. */
#define CONV_WINO4_DW_MAX_C 256

/* With the 16-lane kernels (path 3, table at conv_use_direct) and 8-lane
 * products (Zen 4): F(2x2)'s forward and dx from this many channels on
 * maps of at most CONV_WINO512_MAX_HW a side; its weight gradient never. */
#define CONV_WINO512_MIN_C 256
#define CONV_WINO512_MAX_HW 8

/* Where the products run 16 lanes wide too (conv_wino_wide: full 512-bit
 * units, not Zen 4), F(2x2)'s forward, dx and weight gradient from 64 to
 * 256 input and output channels, at any map size. Measured on an Intel
 * AVX-512 core (Xeon, KVM), 1 thread, ms forward / dx+dW, the 16-lane
 * direct kernels against F(2x2) (two runs): batch 128: 32 at 8x8 1.2-1.3
 * / 2.5 against 1.4-1.6 / 2.9-3.3, 48 at 8x8 2.5 / 5.5 against 1.9-2.4 /
 * 4.1-4.2, 64 at 8x8 4.4-4.6 / 9.3-9.6 against 3.0-3.2 / 7.0-7.1, 64 at
 * 7x7 4.5 / 7.7-8.0 against 3.4-3.5 / 7.2-7.3, 32 at 14x14 3.8 / 7.6-8.0
 * against 4.8-4.9 / 10.2-10.3, 32 at 16x16 4.1-4.4 / 9.7-9.9 against
 * 4.5-4.8 / 10.8-11.2; batch 32: 128 at 8x8 4.4 / 8.9-9.0 against 3.0-3.1
 * / 7.3, 64 at 16x16 4.0 / 8.1-8.4 against 3.5-3.6 / 7.7-7.8, 64 at
 * 32x32 16-17 / 33-34 against 14.3-14.5 / 27-28, 128 at 16x16 15-16 /
 * 31-33 against 13.7-14.4 / 27-31, 256 at 8x8 11.7-11.8 / 32 against
 * 11.4-11.7 / 28-29; 256 at 16x16 (n=16) 32 / 67 against 30 / 65; 512 at
 * 8x8 (n=32) 45 / 124 against 47 / 127. resnet20 training (batch 128)
 * 339-348 -> 356-359 images/s at 1 thread, 654-668 -> 686-692 at 2. */
#define CONV_WINO512W_MIN_C 64
#define CONV_WINO512W_MAX_C 256

/* Winograd only from this many output pixels per call (n*h*w; 2048 with
 * the 16-lane kernels): its cost has a part that grows with the weights
 * alone (the 4x4 transforms of every filter, forward and dx, and the dW
 * inverse transforms), which the batches of the tables above (32 and 128
 * images) hide and a batch of 1 does not. Measured on the AVX-512 core of
 * conv_use_direct, 1 thread, ms forward / dx+dW, F(2x2) against the direct
 * kernels at batch 1: 512 at 4x4 15 / 20 against 5.1 / 16, 512 at 7x7 15
 * / 21 against 5.0 / 12, 256 at 8x8 3.7 / 5.0 against 1.2 / 2.8; at 512
 * pixels (256 at 8x8 batch 8) 7.9 / 18 against 5.5 / 15. The AVX2 kernels
 * (same core, CDL_CPU_NO_AVX512) with F(2x2) forward, dx and dW: 64 at 8x8
 * batch 2 (128 pixels) 0.30 / 0.70 against 0.17 / 0.36, batch 8 (512) a
 * tie; 512 at 4x4 batch 1 16 / 63 against 5.5 / 15. Depends on n: model.c
 * sizes the workspace at the largest batch and at 1, and every path's
 * workspace grows with n. */
#define CONV_WINO_MIN_PIXELS 512
#define CONV_WINO512_MIN_PIXELS 2048

int conv_use_wino(const cdl_conv2d_desc *d, int fast)
{
    int path = conv_use_direct(d);
    if ((path != 2 && path != 3) || !conv_wino_supported(d) || wino_disabled())
        return 0;
    double pixels = (double)d->n * d->h * d->w;
    if (pixels < (path == 3 ? CONV_WINO512_MIN_PIXELS : CONV_WINO_MIN_PIXELS))
        return 0;
    int f4 = 0;
    if (fast && d->c >= CONV_WINO4_MIN_C &&
        d->oc >= CONV_WINO4_MIN_C && d->h >= CONV_WINO4_MIN_HW && d->w >= CONV_WINO4_MIN_HW) {
        f4 = CONV_WINO_FWD | CONV_WINO_DX | CONV_WINO_F4;
        if (d->c <= CONV_WINO4_DW_MAX_C && d->oc <= CONV_WINO4_DW_MAX_C)
            f4 |= CONV_WINO_DW | CONV_WINO_DW4;
    }
    if (path == 3) {
        if (conv_wino_wide() && d->c >= CONV_WINO512W_MIN_C && d->oc >= CONV_WINO512W_MIN_C &&
            d->c <= CONV_WINO512W_MAX_C && d->oc <= CONV_WINO512W_MAX_C)
            return CONV_WINO_FWD | CONV_WINO_DX | CONV_WINO_DW | f4;
        return d->c >= CONV_WINO512_MIN_C && d->oc >= CONV_WINO512_MIN_C &&
                       d->h <= CONV_WINO512_MAX_HW && d->w <= CONV_WINO512_MAX_HW
                   ? CONV_WINO_FWD | CONV_WINO_DX | f4
                   : f4;
    }
    if (d->c < CONV_WINO_MIN_C || d->oc < CONV_WINO_MIN_C)
        return f4;
    return CONV_WINO_FWD | CONV_WINO_DX | CONV_WINO_DW | f4;
}

static size_t direct_workspace(const cdl_conv2d_desc *d, int t)
{
    switch (conv_use_direct(d)) {
    case 1: return conv_direct_workspace(d, t);
    case 2: return conv_avx2_workspace(d, t);
    case 3: return conv_avx512_workspace(d, t);
    default: return conv_dw_supported(d) ? conv_dw_workspace(d, t) : conv_gemm_workspace(d, t);
    }
}

/* The Winograd and the direct kernels of one call run one after the other:
 * the larger of the two workspaces serves both. */
size_t cpu_conv2d_workspace(cdl_backend *be, const cdl_conv2d_desc *d)
{
    int t = pool_threads(cpu_pool(be));
    int wino = conv_use_wino(d, ((cpu_impl *)be->impl)->fast_conv);
    size_t a = direct_workspace(d, t), b = wino ? conv_wino_workspace(d, t) : 0;
    size_t c = wino & CONV_WINO_F4 ? conv_wino4_workspace(d, t) : 0;
    a = a > b ? a : b;
    return a > c ? a : c;
}

void cpu_conv2d_fwd(cdl_backend *be, const cdl_conv2d_desc *d, const float *x,
                    const float *w, const float *b, float *y, float *ws)
{
    int path = conv_use_direct(d);
    int wino = conv_use_wino(d, ((cpu_impl *)be->impl)->fast_conv);
    if (wino & CONV_WINO_F4)
        conv_wino4_fwd(cpu_pool(be), d, x, w, b, y, ws);
    else if (wino & CONV_WINO_FWD)
        conv_wino_fwd(cpu_pool(be), d, x, w, b, y, ws);
    else if (path == 1)
        conv_direct_fwd(cpu_pool(be), d, x, w, b, y, ws);
    else if (path == 2)
        conv_avx2_fwd(cpu_pool(be), d, x, w, b, y, ws);
    else if (path == 3)
        conv_avx512_fwd(cpu_pool(be), d, x, w, b, y, ws);
    else if (conv_dw_supported(d))
        conv_dw_fwd(cpu_pool(be), d, x, w, b, y, ws);
    else
        conv_gemm_fwd(cpu_pool(be), d, x, w, b, y, ws);
}

void cpu_conv2d_bwd(cdl_backend *be, const cdl_conv2d_desc *d, const float *x,
                    const float *w, const float *dy, float *dx, float *dw,
                    float *db, float *ws)
{
    int path = conv_use_direct(d);
    int wino = conv_use_wino(d, ((cpu_impl *)be->impl)->fast_conv);
    if (dx && (wino & CONV_WINO_DX)) {
        if (wino & CONV_WINO_F4)
            conv_wino4_dx(cpu_pool(be), d, w, dy, dx, ws);
        else
            conv_wino_dx(cpu_pool(be), d, w, dy, dx, ws);
        dx = NULL;
    }
    if (wino & CONV_WINO_DW) {
        if (wino & CONV_WINO_DW4)
            conv_wino4_dw(cpu_pool(be), d, x, dy, dw, db, ws);
        else
            conv_wino_dw(cpu_pool(be), d, x, dy, dw, db, ws);
        if (!dx)
            return;
    }
    if (path == 1)
        conv_direct_bwd(cpu_pool(be), d, x, w, dy, dx, dw, db, ws);
    else if (path == 2)
        conv_avx2_bwd(cpu_pool(be), d, x, w, dy, dx, dw, db, ws);
    else if (path == 3)
        conv_avx512_bwd(cpu_pool(be), d, x, w, dy, dx, dw, db, ws);
    else if (conv_dw_supported(d))
        conv_dw_bwd(cpu_pool(be), d, x, w, dy, dx, dw, db, ws);
    else
        conv_gemm_bwd(cpu_pool(be), d, x, w, dy, dx, dw, db, ws);
}
