/* Depthwise convolution (groups = c > 1, each input channel feeding
 * oc/c output channels: MobileNet's 3x3 layers, a channel multiplier of 1
 * or more), any stride, kernel, padding and dilation.
 *
 * im2col+SGEMM runs one product per group, here (1 x kh*kw) times (kh*kw x
 * oh*ow): no reuse for SGEMM, and the im2col copy costs more than the
 * arithmetic. Measured 1 thread (AVX-512 core, shared), batch 8, forward /
 * dx+dW ms, im2col+SGEMM -> these loops (PyTorch 1.13's own kernels):
 *   32 at 112x112   57 / 67   -> 9.5 / 19   (6.0 / 21)
 *   128 at 28x28    10 / 12   -> 1.4 / 2.9  (0.95 / 2.4)
 *   32->64 at 56x56 (multiplier 2) 2.8 / 8.0 -> 3.4 / 6.5 (7.2 / 19)
 *   96 5x5 at 28x28 11 / 30   -> 1.9 / 4.4
 * (a dense 64->64 3x3 at 28x28 took 5.3 / 11).
 *
 * Strides: the padded plane is split into stride_h*stride_w phase planes,
 * phase (ry, rx) holding the padded pixels (i*sh + ry, j*sw + rx) at (i,
 * j). Tap (ky, kx) of output (oy, ox) reads padded pixel (oy*sh + ky*dh,
 * ox*sw + kx*dw), which is pixel (oy + ky*dh/sh, ox + kx*dw/sw) of phase
 * (ky*dh % sh, kx*dw % sw): a stride-1 tap over one phase plane, so every
 * tap stays one long row loop (output rows as far apart as phase rows).
 * Stride 1 has one phase, the padded plane itself. Splitting costs one
 * pass over the input; row loops over every other input column had
 * measured slower than im2col+SGEMM (64 at 56x56 stride 2: 3.1 / 7.9
 * against 2.4 / 5.7). bench/run_cpu_ops.sh compares these with PyTorch.
 *
 * Forward and dx: items are (image, input channel) pairs, which own their
 * output channels' planes of y and their plane of dx. dW and db: items are
 * output channels, each summing over all images in image order (per image
 * and tap a float dot, their sum in double), so the results do not depend
 * on the thread count and need no partials. conv_dw_ref_fwd (below) is the
 * definition the fast loops are tested against. */
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

#if CPU_X86
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
#endif

static void axpy(int n, float a, const float *x, float *y)
{
#if CPU_X86
    if (cpu_has_avx2()) {
        axpy_avx2(n, a, x, y);
        return;
    }
#endif
    axpy_c(n, a, x, y);
}


/* Every tap at once: out[i] += w[k] * src[k][i] for k = 0..K-1, each
 * element's adds in tap order (axpy's bits, tap after tap), and
 * out[k] = dot(n, x, src[k]) (dot's bits). The AVX2 twins keep a group of
 * taps' vectors in registers, so the output row (forward) or x (dW) is
 * read once a group instead of once a tap: with a call per tap, stride 2
 * ran no faster than im2col+SGEMM. */
#define DW_GROUP 9

static void taps_axpy_c(int n, int K, const float *const *src, const float *w, float *out)
{
    for (int k = 0; k < K; k++)
        axpy_c(n, w[k], src[k], out);
}

static void taps_dot_c(int n, int K, const float *x, const float *const *src, float *out)
{
    for (int k = 0; k < K; k++)
        out[k] = dot_c(n, x, src[k]);
}

#if CPU_X86
static CPU_AVX2 void taps_axpy_avx2(int n, int K, const float *const *src, const float *w, float *out)
{
    for (int k0 = 0; k0 < K; k0 += DW_GROUP) {
        int g = K - k0 < DW_GROUP ? K - k0 : DW_GROUP;
        const float *const *sp = src + k0;
        __m256 wv[DW_GROUP];
        for (int j = 0; j < g; j++)
            wv[j] = _mm256_set1_ps(w[k0 + j]);
        int i = 0;
        for (; i + 8 <= n; i += 8) {
            __m256 acc = _mm256_loadu_ps(out + i);
            for (int j = 0; j < g; j++)
                acc = _mm256_add_ps(acc, _mm256_mul_ps(wv[j], _mm256_loadu_ps(sp[j] + i)));
            _mm256_storeu_ps(out + i, acc);
        }
        for (; i < n; i++)
            for (int j = 0; j < g; j++)
                out[i] += w[k0 + j] * sp[j][i];
    }
}

static CPU_AVX2 void taps_dot_avx2(int n, int K, const float *x, const float *const *src, float *out)
{
    for (int k0 = 0; k0 < K; k0 += DW_GROUP) {
        int g = K - k0 < DW_GROUP ? K - k0 : DW_GROUP;
        const float *const *sp = src + k0;
        __m256 acc[DW_GROUP];
        for (int j = 0; j < g; j++)
            acc[j] = _mm256_setzero_ps();
        int i = 0;
        for (; i + 8 <= n; i += 8) {
            __m256 xv = _mm256_loadu_ps(x + i);
            for (int j = 0; j < g; j++)
                acc[j] = _mm256_add_ps(acc[j], _mm256_mul_ps(xv, _mm256_loadu_ps(sp[j] + i)));
        }
        for (int j = 0; j < g; j++) {
            float lanes[8];
            _mm256_storeu_ps(lanes, acc[j]);
            float s = ((lanes[0] + lanes[4]) + (lanes[1] + lanes[5])) +
                      ((lanes[2] + lanes[6]) + (lanes[3] + lanes[7]));
            for (int t = i; t < n; t++)
                s += x[t] * sp[j][t];
            out[k0 + j] = s;
        }
    }
}
#endif

static void taps_axpy(int n, int K, const float *const *src, const float *w, float *out)
{
#if CPU_X86
    if (cpu_has_avx2()) {
        taps_axpy_avx2(n, K, src, w, out);
        return;
    }
#endif
    taps_axpy_c(n, K, src, w, out);
}

static void taps_dot(int n, int K, const float *x, const float *const *src, float *out)
{
#if CPU_X86
    if (cpu_has_avx2()) {
        taps_dot_avx2(n, K, x, src, out);
        return;
    }
#endif
    taps_dot_c(n, K, x, src, out);
}

typedef struct dwctx {
    const cdl_conv2d_desc *d;
    const float *x, *w, *b, *dy;
    float *y, *dx, *dw, *db, *ws;
    int sh, sw;          /* strides: sh*sw phase planes */
    int hq, wq;          /* a phase plane: ceil(padded height / sh) x ceil(padded width / sw) */
    size_t phase_floats; /* a phase plane and its slack */
    size_t pad_floats;   /* all phase planes */
    size_t row_floats;   /* oh rows of wq floats */
    int mult, K, L;      /* output channels per input channel; taps; oh*wq */
    size_t in_plane, out_plane;
} dwctx;

/* Phase planes with the output rows wq floats apart make every tap one
 * long row loop over the whole plane (oh*wq floats; the columns past ow
 * are scratch): a call per row of 28 floats ran slower than im2col+SGEMM.
 * Per thread: the phase planes and a plane of output rows. */
static void plan(const cdl_conv2d_desc *d, dwctx *c)
{
    int hp = d->h + 2 * d->pad_h, wp = d->w + 2 * d->pad_w;
    c->sh = d->stride_h;
    c->sw = d->stride_w;
    c->hq = (hp + c->sh - 1) / c->sh;
    c->wq = (wp + c->sw - 1) / c->sw;
    /* A tap reads up to (kw-1)*dil/sw past the last phase row. */
    c->phase_floats = cpu_align16((size_t)c->hq * c->wq + (size_t)(d->kw - 1) * d->dil_w / c->sw + 16);
    c->pad_floats = c->phase_floats * (size_t)(c->sh * c->sw);
    c->row_floats = cpu_align16((size_t)d->oh * c->wq + 16);
    c->mult = d->oc / d->c;
    c->K = d->kh * d->kw;
    c->L = d->oh * c->wq;
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

/* Where padded pixel (py, px) lies in the phase planes. */
static size_t phase_at(const dwctx *c, int py, int px)
{
    return (size_t)((py % c->sh) * c->sw + px % c->sw) * c->phase_floats +
           (size_t)(py / c->sh) * c->wq + (size_t)(px / c->sw);
}

/* Stride 2's column split: a[j] = src[2j], b[j] = src[2j+1] of n floats
 * (a gets the odd one out), and its inverse. Copies, so the AVX2 twins
 * give the same bits; a scalar split took a quarter of the backward's
 * time at 14x14. */
static void split2_c(const float *src, int n, float *a, float *b)
{
    for (int x = 0; x < n; x++)
        (x % 2 ? b : a)[x / 2] = src[x];
}

static void merge2_c(const float *a, const float *b, int n, float *dst)
{
    for (int x = 0; x < n; x++)
        dst[x] = (x % 2 ? b : a)[x / 2];
}

#if CPU_X86
/* Lanes below k: the mask of a masked load or store. */
static CPU_AVX2 inline __m256i lanes_below(int k)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* 16 floats (fewer at the row's end: masked) to 8 even and 8 odd. */
static CPU_AVX2 void split2_avx2(const float *src, int n, float *a, float *b)
{
    for (int x = 0; x < n; x += 16) {
        int left = n - x;
        __m256 lo, hi;
        if (left >= 16) {
            lo = _mm256_loadu_ps(src + x), hi = _mm256_loadu_ps(src + x + 8);
        } else {
            lo = _mm256_maskload_ps(src + x, lanes_below(left));
            hi = _mm256_maskload_ps(src + x + 8, lanes_below(left - 8));
        }
        /* per 128-bit half: (lo0 lo2 hi0 hi2), then the halves' pairs in order */
        __m256d ev = _mm256_castps_pd(_mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0)));
        __m256d od = _mm256_castps_pd(_mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1)));
        __m256 e = _mm256_castpd_ps(_mm256_permute4x64_pd(ev, _MM_SHUFFLE(3, 1, 2, 0)));
        __m256 o = _mm256_castpd_ps(_mm256_permute4x64_pd(od, _MM_SHUFFLE(3, 1, 2, 0)));
        if (left >= 16) {
            _mm256_storeu_ps(a + x / 2, e);
            _mm256_storeu_ps(b + x / 2, o);
        } else {
            _mm256_maskstore_ps(a + x / 2, lanes_below((left + 1) / 2), e);
            _mm256_maskstore_ps(b + x / 2, lanes_below(left / 2), o);
        }
    }
}

static CPU_AVX2 void merge2_avx2(const float *a, const float *b, int n, float *dst)
{
    for (int x = 0; x < n; x += 16) {
        int left = n - x;
        __m256 ev, od;
        if (left >= 16) {
            ev = _mm256_loadu_ps(a + x / 2), od = _mm256_loadu_ps(b + x / 2);
        } else {
            ev = _mm256_maskload_ps(a + x / 2, lanes_below((left + 1) / 2));
            od = _mm256_maskload_ps(b + x / 2, lanes_below(left / 2));
        }
        __m256 lo = _mm256_unpacklo_ps(ev, od), hi = _mm256_unpackhi_ps(ev, od);
        __m256 r0 = _mm256_permute2f128_ps(lo, hi, 0x20), r1 = _mm256_permute2f128_ps(lo, hi, 0x31);
        if (left >= 16) {
            _mm256_storeu_ps(dst + x, r0);
            _mm256_storeu_ps(dst + x + 8, r1);
        } else {
            _mm256_maskstore_ps(dst + x, lanes_below(left), r0);
            _mm256_maskstore_ps(dst + x + 8, lanes_below(left - 8), r1);
        }
    }
}
#endif

static void split2(const float *src, int n, float *a, float *b)
{
#if CPU_X86
    if (cpu_has_avx2()) {
        split2_avx2(src, n, a, b);
        return;
    }
#endif
    split2_c(src, n, a, b);
}

static void merge2(const float *a, const float *b, int n, float *dst)
{
#if CPU_X86
    if (cpu_has_avx2()) {
        merge2_avx2(a, b, n, dst);
        return;
    }
#endif
    merge2_c(a, b, n, dst);
}

/* The plane xp (h, w) into the phase planes with zero borders and slack;
 * at stride 1 rows are copied whole, at stride 2 in columns split into
 * even and odd. Every plane writes the same places, so only a thread's
 * first plane of a call clears the rest (clear = 1): at 14x14 the clearing
 * took a tenth of the time. */
static void pad_plane(const dwctx *c, const float *xp, float *pad, int clear)
{
    const cdl_conv2d_desc *d = c->d;
    if (clear)   /* else zero from the last plane: the same places are written */
        memset(pad, 0, c->pad_floats * sizeof *pad);
    for (int y = 0; y < d->h; y++) {
        const float *src = xp + (size_t)y * d->w;
        int py = y + d->pad_h;
        if (c->sw == 1) {
            memcpy(pad + phase_at(c, py, d->pad_w), src, (size_t)d->w * sizeof *pad);
        } else if (c->sw == 2) {
            /* x = 0, 2, 4, ... land in one phase, 1, 3, ... in the other */
            split2(src, d->w, pad + phase_at(c, py, d->pad_w), pad + phase_at(c, py, d->pad_w + 1));
        } else {
            for (int x = 0; x < d->w; x++)
                pad[phase_at(c, py, x + d->pad_w)] = src[x];
        }
    }
}

/* The inverse: dxp (h, w) from the interior of the phase planes. */
static void unpad_plane(const dwctx *c, const float *pad, float *dxp)
{
    const cdl_conv2d_desc *d = c->d;
    for (int y = 0; y < d->h; y++) {
        float *dst = dxp + (size_t)y * d->w;
        int py = y + d->pad_h;
        if (c->sw == 1) {
            memcpy(dst, pad + phase_at(c, py, d->pad_w), (size_t)d->w * sizeof *dst);
        } else if (c->sw == 2) {
            merge2(pad + phase_at(c, py, d->pad_w), pad + phase_at(c, py, d->pad_w + 1), d->w, dst);
        } else {
            for (int x = 0; x < d->w; x++)
                dst[x] = pad[phase_at(c, py, x + d->pad_w)];
        }
    }
}

/* dy plane (oh, ow) into rows of wq floats, zeros past ow (cleared when
 * clear: as pad_plane, the same places are written every time). */
static void widen_dy(const dwctx *c, const float *dyp, float *rows, int clear)
{
    const cdl_conv2d_desc *d = c->d;
    if (clear)
        memset(rows, 0, c->row_floats * sizeof *rows);
    for (int y = 0; y < d->oh; y++)
        memcpy(rows + (size_t)y * c->wq, dyp + (size_t)y * d->ow, (size_t)d->ow * sizeof *rows);
}

/* Tap (ky, kx) of output (0, 0): padded pixel (ky*dh, kx*dw). */
static size_t tap_off(const dwctx *c, int ky, int kx)
{
    return phase_at(c, ky * c->d->dil_h, kx * c->d->dil_w);
}

int conv_dw_supported(const cdl_conv2d_desc *d)
{
    return d->stride_h >= 1 && d->stride_w >= 1 && d->stride_h * d->stride_w <= CONV_DW_MAX_PHASES &&
           d->groups > 1 && d->groups == d->c && d->oc % d->c == 0 && d->n >= 1 &&
           d->oh >= 1 && d->ow >= 1 && d->kh * d->kw <= CONV_DW_MAX_TAPS &&
           (double)(d->h + 2 * d->pad_h) * (d->w + 2 * d->pad_w + d->kw * d->dil_w) < 1e9;
}

/* The definition, for the tests: y[img][o][oy][ox] = b[o] + the taps in
 * row-major order, each w * x (padding reads 0), a multiply then an add in
 * float: the order and operations of the fast forward, so its bits. */
void conv_dw_ref_fwd(const cdl_conv2d_desc *d, const float *x, const float *w, const float *b,
                     float *y)
{
    int mult = d->oc / d->c;
    for (int img = 0; img < d->n; img++)
        for (int o = 0; o < d->oc; o++) {
            const float *xp = x + ((size_t)img * d->c + o / mult) * d->h * d->w;
            const float *wo = w + (size_t)o * d->kh * d->kw;
            for (int oy = 0; oy < d->oh; oy++)
                for (int ox = 0; ox < d->ow; ox++) {
                    float s = b ? b[o] : 0.0f;
                    for (int ky = 0; ky < d->kh; ky++)
                        for (int kx = 0; kx < d->kw; kx++) {
                            int iy = oy * d->stride_h - d->pad_h + ky * d->dil_h;
                            int ix = ox * d->stride_w - d->pad_w + kx * d->dil_w;
                            int in = iy >= 0 && iy < d->h && ix >= 0 && ix < d->w;
                            float v = in ? xp[(size_t)iy * d->w + ix] : 0.0f;
                            s += wo[ky * d->kw + kx] * v;
                        }
                    y[(((size_t)img * d->oc + o) * d->oh + oy) * d->ow + ox] = s;
                }
        }
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
    const float *src[CONV_DW_MAX_TAPS];   /* each tap's start in the phase planes */
    for (int k = 0; k < K; k++)
        src[k] = pad + tap_off(c, k / d->kw, k % d->kw);
    for (size_t it = b; it < e; it++) {
        size_t img = it / (size_t)d->c, ci = it % (size_t)d->c;
        pad_plane(c, c->x + (img * d->c + ci) * c->in_plane, pad, it == b);
        for (int m = 0; m < mult; m++) {
            size_t o = ci * mult + (size_t)m;
            float bias = c->b ? c->b[o] : 0.0f;
            for (int i = 0; i < L; i++)
                rows[i] = bias;
            taps_axpy(L, K, src, c->w + o * K, rows);
            float *yp = c->y + (img * d->oc + o) * c->out_plane;
            for (int y = 0; y < d->oh; y++)
                memcpy(yp + (size_t)y * d->ow, rows + (size_t)y * c->wq, (size_t)d->ow * sizeof *yp);
        }
    }
}

/* dx, items (image, input channel): the dx phase planes += w * dy (rows of
 * wq, zeros past ow) at each tap's offset, over the group's output
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
            widen_dy(c, c->dy + (img * d->oc + o) * c->out_plane, rows, it == b && m == 0);
            for (int k = 0; k < K; k++)
                axpy(L, c->w[o * K + k], rows, pad + tap_off(c, k / d->kw, k % d->kw));
        }
        unpad_plane(c, pad, c->dx + (img * d->c + ci) * c->in_plane);
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
    const float *src[CONV_DW_MAX_TAPS];   /* each tap's start in the phase planes */
    for (int k = 0; k < K; k++)
        src[k] = pad + tap_off(c, k / d->kw, k % d->kw);
    float dots[CONV_DW_MAX_TAPS];
    double acc[CONV_DW_MAX_TAPS];
    for (size_t o = b; o < e; o++) {
        size_t ci = o / (size_t)mult;
        double bsum = 0.0;
        for (int k = 0; k < K; k++)
            acc[k] = 0.0;
        for (int img = 0; img < d->n; img++) {
            const float *dyp = c->dy + ((size_t)img * d->oc + o) * c->out_plane;
            pad_plane(c, c->x + ((size_t)img * d->c + ci) * c->in_plane, pad, o == b && img == 0);
            widen_dy(c, dyp, rows, o == b && img == 0);
            taps_dot(L, K, rows, src, dots);
            for (int k = 0; k < K; k++)
                acc[k] += dots[k];
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
