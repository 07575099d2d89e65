/* Depthwise convolution (groups = c > 1, each input channel feeding
 * oc/c output channels: MobileNet's 3x3 layers, a channel multiplier of 1
 * or more), stride 1, any kernel, padding and dilation.
 *
 * im2col+SGEMM runs one product per group, here (1 x kh*kw) times (kh*kw x
 * oh*ow): no reuse for SGEMM, and the im2col copy costs more than the
 * arithmetic. Measured 1 thread (AVX-512 core, shared), batch 8, forward /
 * dx+dW ms, im2col+SGEMM -> these loops (PyTorch 1.13's own kernels):
 *   32 at 112x112   57 / 67   -> 9.5 / 19   (6.0 / 21)
 *   128 at 28x28    10 / 12   -> 1.4 / 2.9  (0.95 / 2.4)
 *   32->64 at 56x56 (multiplier 2) 2.8 / 8.0 -> 3.4 / 6.5 (7.2 / 19)
 *   96 5x5 at 28x28 11 / 30   -> 1.9 / 4.4
 * (a dense 64->64 3x3 at 28x28 took 5.3 / 11). Stride 2 stays on
 * im2col+SGEMM: row loops over every other input column measured slower
 * there (64 at 56x56: 3.1 / 7.9 against 2.4 / 5.7).
 *
 * Forward and dx: items are (image, input channel) pairs, which own their
 * output channels' planes of y and their plane of dx. dW and db: items are
 * output channels, each summing over all images in image order (per image
 * and tap a float dot, their sum in double), so the results do not depend
 * on the thread count and need no partials. */
#include <string.h>

#include "kernels/cpu/conv2d.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/simd.h"

/* The row loops: y[i] += a * x[i] (a multiply, then an add: the same bits
 * with and without AVX2) and the sum of x[i] * y[i] (8 partial sums with
 * AVX2, summed in a fixed order: the bits depend on the CPU, as the other
 * convolution paths' do, never on the thread count). */
static void axpy_c(int n, float a, const float *restrict x, float *restrict y)
{
    for (int i = 0; i < n; i++)
        y[i] += a * x[i];
}

static float dot_c(int n, const float *restrict x, const float *restrict y)
{
    float s = 0.0f;
    for (int i = 0; i < n; i++)
        s += x[i] * y[i];
    return s;
}

#ifdef CPU_X86
static CPU_AVX2 void axpy_avx2(int n, float a, const float *restrict x, float *restrict y)
{
    __m256 av = _mm256_set1_ps(a);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i),
                                              _mm256_mul_ps(av, _mm256_loadu_ps(x + i))));
    for (; i < n; i++)
        y[i] += a * x[i];
}

static CPU_AVX2 float dot_avx2(int n, const float *restrict x, const float *restrict y)
{
    __m256 acc = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= n; i += 8)
        acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    float lanes[8];
    _mm256_storeu_ps(lanes, acc);
    float s = ((lanes[0] + lanes[4]) + (lanes[1] + lanes[5])) +
              ((lanes[2] + lanes[6]) + (lanes[3] + lanes[7]));
    for (; i < n; i++)
        s += x[i] * y[i];
    return s;
}
#endif

static void axpy(int n, float a, const float *x, float *y)
{
#ifdef CPU_X86
    if (cpu_has_avx2()) {
        axpy_avx2(n, a, x, y);
        return;
    }
#endif
    axpy_c(n, a, x, y);
}

static float dot(int n, const float *x, const float *y)
{
#ifdef CPU_X86
    if (cpu_has_avx2())
        return dot_avx2(n, x, y);
#endif
    return dot_c(n, x, y);
}

typedef struct dwctx {
    const cdl_conv2d_desc *d;
    const float *x, *w, *b, *dy;
    float *y, *dx, *dw, *db, *ws;
    int hp, wp;          /* the padded plane */
    size_t pad_floats;   /* a padded plane and its slack */
    size_t row_floats;   /* oh rows of wp floats */
    int mult, K, L;      /* output channels per input channel; taps; oh*wp */
    size_t in_plane, out_plane;
} dwctx;

/* Padded planes with the output rows wp floats apart make every tap one
 * long row loop over the whole plane (oh*wp floats; the columns past ow
 * are scratch): a call per row of 28 floats ran slower than im2col+SGEMM.
 * Per thread: a padded plane and a plane of output rows. */
static void plan(const cdl_conv2d_desc *d, dwctx *c)
{
    c->hp = d->h + 2 * d->pad_h;
    c->wp = d->w + 2 * d->pad_w;
    /* A tap reads up to (kw-1)*dil past the last padded row. */
    c->pad_floats = cpu_align16((size_t)c->hp * c->wp + (size_t)(d->kw - 1) * d->dil_w + 16);
    c->row_floats = cpu_align16((size_t)d->oh * c->wp + 16);
    c->mult = d->oc / d->c;
    c->K = d->kh * d->kw;
    c->L = d->oh * c->wp;
    c->in_plane = (size_t)d->h * d->w;
    c->out_plane = (size_t)d->oh * d->ow;
}

size_t conv_dw_workspace(const cdl_conv2d_desc *d, int threads)
{
    dwctx c;
    plan(d, &c);
    return (c.pad_floats + c.row_floats) * (size_t)threads;
}

static float *thread_ws(const dwctx *c, int tid)
{
    return c->ws + (c->pad_floats + c->row_floats) * (size_t)tid;
}

/* The plane xp (h, w) into pad (hp, wp) with zero borders and slack. */
static void pad_plane(const dwctx *c, const float *xp, float *pad)
{
    const cdl_conv2d_desc *d = c->d;
    memset(pad, 0, c->pad_floats * sizeof *pad);
    for (int y = 0; y < d->h; y++)
        memcpy(pad + (size_t)(y + d->pad_h) * c->wp + d->pad_w, xp + (size_t)y * d->w,
               (size_t)d->w * sizeof *pad);
}

/* dy plane (oh, ow) into rows of wp floats, zeros past ow. */
static void widen_dy(const dwctx *c, const float *dyp, float *rows)
{
    const cdl_conv2d_desc *d = c->d;
    memset(rows, 0, c->row_floats * sizeof *rows);
    for (int y = 0; y < d->oh; y++)
        memcpy(rows + (size_t)y * c->wp, dyp + (size_t)y * d->ow, (size_t)d->ow * sizeof *rows);
}

static size_t tap_off(const dwctx *c, int ky, int kx)
{
    return (size_t)ky * c->d->dil_h * c->wp + (size_t)kx * c->d->dil_w;
}

int conv_dw_supported(const cdl_conv2d_desc *d)
{
    return d->stride_h == 1 && d->stride_w == 1 && d->groups > 1 && d->groups == d->c && d->oc % d->c == 0 && d->n >= 1 &&
           d->oh >= 1 && d->ow >= 1 && d->kh * d->kw <= CONV_DW_MAX_TAPS &&
           (double)(d->h + 2 * d->pad_h) * (d->w + 2 * d->pad_w + d->kw * d->dil_w) < 1e9;
}

/* Forward, items (image, input channel): the padded input plane once, then
 * per output channel of the group bias + every tap, rows copied out. */
static void fwd_items(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    (void)chunk;
    const dwctx *c = vctx;
    const cdl_conv2d_desc *d = c->d;
    const int mult = c->mult, K = c->K, L = c->L;
    float *pad = thread_ws(c, tid), *rows = pad + c->pad_floats;
    for (size_t it = b; it < e; it++) {
        size_t img = it / (size_t)d->c, ci = it % (size_t)d->c;
        pad_plane(c, c->x + (img * d->c + ci) * c->in_plane, pad);
        for (int m = 0; m < mult; m++) {
            size_t o = ci * mult + (size_t)m;
            float bias = c->b ? c->b[o] : 0.0f;
            for (int i = 0; i < L; i++)
                rows[i] = bias;
            for (int k = 0; k < K; k++)
                axpy(L, c->w[o * K + k], pad + tap_off(c, k / d->kw, k % d->kw), rows);
            float *yp = c->y + (img * d->oc + o) * c->out_plane;
            for (int y = 0; y < d->oh; y++)
                memcpy(yp + (size_t)y * d->ow, rows + (size_t)y * c->wp, (size_t)d->ow * sizeof *yp);
        }
    }
}

/* dx, items (image, input channel): the padded dx plane += w * dy (rows of
 * wp, zeros past ow) at each tap's offset, over the group's output
 * channels; its interior copied out. */
static void dx_items(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    (void)chunk;
    const dwctx *c = vctx;
    const cdl_conv2d_desc *d = c->d;
    const int mult = c->mult, K = c->K, L = c->L;
    float *pad = thread_ws(c, tid), *rows = pad + c->pad_floats;
    for (size_t it = b; it < e; it++) {
        size_t img = it / (size_t)d->c, ci = it % (size_t)d->c;
        memset(pad, 0, c->pad_floats * sizeof *pad);
        for (int m = 0; m < mult; m++) {
            size_t o = ci * mult + (size_t)m;
            widen_dy(c, c->dy + (img * d->oc + o) * c->out_plane, rows);
            for (int k = 0; k < K; k++)
                axpy(L, c->w[o * K + k], rows, pad + tap_off(c, k / d->kw, k % d->kw));
        }
        float *dxp = c->dx + (img * d->c + ci) * c->in_plane;
        for (int y = 0; y < d->h; y++)
            memcpy(dxp + (size_t)y * d->w, pad + (size_t)(y + d->pad_h) * c->wp + d->pad_w,
                   (size_t)d->w * sizeof *dxp);
    }
}

/* dW and db, items: output channels. Per image and tap one dot over the
 * whole plane, summed over the images in double, in image order. */
static void dw_items(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    (void)chunk;
    const dwctx *c = vctx;
    const cdl_conv2d_desc *d = c->d;
    const int mult = c->mult, K = c->K, L = c->L;
    float *pad = thread_ws(c, tid), *rows = pad + c->pad_floats;
    double acc[CONV_DW_MAX_TAPS];
    for (size_t o = b; o < e; o++) {
        size_t ci = o / (size_t)mult;
        double bsum = 0.0;
        for (int k = 0; k < K; k++)
            acc[k] = 0.0;
        for (int img = 0; img < d->n; img++) {
            const float *dyp = c->dy + ((size_t)img * d->oc + o) * c->out_plane;
            pad_plane(c, c->x + ((size_t)img * d->c + ci) * c->in_plane, pad);
            widen_dy(c, dyp, rows);
            for (int k = 0; k < K; k++)
                acc[k] += dot(L, rows, pad + tap_off(c, k / d->kw, k % d->kw));
            for (size_t i = 0; i < c->out_plane; i++)
                bsum += dyp[i];
        }
        for (int k = 0; k < K; k++)
            c->dw[o * K + k] = (float)acc[k];
        if (c->db)
            c->db[o] = (float)bsum;
    }
}

/* Items per chunk: at least DW_GRAIN multiply-adds each (a wake-up costs
 * more than a small plane's work). */
#define DW_GRAIN 16384

static size_t grain(size_t per_item)
{
    return per_item >= DW_GRAIN ? 1 : DW_GRAIN / (per_item ? per_item : 1);
}

void conv_dw_fwd(pool *p, const cdl_conv2d_desc *d, const float *x, const float *w,
                 const float *b, float *y, float *ws)
{
    dwctx c = {.d = d, .x = x, .w = w, .b = b, .y = y, .ws = ws};
    plan(d, &c);
    size_t per = (size_t)d->oc / d->c * d->oh * d->ow * d->kh * d->kw;
    pool_for(p, (size_t)d->n * d->c, grain(per), fwd_items, &c);
}

void conv_dw_bwd(pool *p, const cdl_conv2d_desc *d, const float *x, const float *w,
                 const float *dy, float *dx, float *dw, float *db, float *ws)
{
    dwctx c = {.d = d, .x = x, .w = w, .dy = dy, .dx = dx, .dw = dw, .db = db, .ws = ws};
    plan(d, &c);
    size_t per = (size_t)d->oc / d->c * d->oh * d->ow * d->kh * d->kw;
    if (dx)
        pool_for(p, (size_t)d->n * d->c, grain(per), dx_items, &c);
    pool_for(p, (size_t)d->oc, grain((size_t)d->n * d->oh * d->ow * d->kh * d->kw), dw_items, &c);
}
