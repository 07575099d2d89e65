/* Batch normalisation over x (n,c,hw) in the pieces of backend.h (bn_sum,
 * bn_sqdev, bn_apply, bn_running, bn_eval, bn_bwd_sums, bn_bwd_apply,
 * bn_fold).
 *
 * Every piece works on planes: the hw contiguous floats of one (image,
 * channel). Per-channel sums run over the images in order, each plane
 * summed into a double (in blocks of channels, see BN_BLOCK and BN_FLAT): results do
 * not depend on the thread count. Elementwise pieces run one plane per item with the
 * channel's constants folded into y = x*scale + shift; under BN_SMALL floats
 * a plane they take channels as items, the constants once per block.
 *
 * Each plane kernel has a plain C loop (the definition; the portable path)
 * and an AVX2 twin picked at run time (simd.h; sum and sqdev also an AVX-512
 * one, in the AVX2 order); the tests run them against
 * tests/unit/ref_ops.c. BN+ReLU in training fuses the ReLU into
 * bn_apply and its mask into the backward pieces, so the fused layer makes
 * one pass less over memory each way than BN followed by relu_fwd/bwd.
 */
#include <math.h>

#include "kernels/cpu/cpu.h"
#include "kernels/cpu/simd.h"

/* ---- plane kernels: reference ---- */

static double sum_ref(const float *x, int hw)
{
    double s = 0.0;
    for (int i = 0; i < hw; i++)
        s += x[i];
    return s;
}

static double sqdev_ref(const float *x, int hw, float mean)
{
    double s = 0.0;
    for (int i = 0; i < hw; i++) {
        float d = x[i] - mean;
        s += (double)d * d;
    }
    return s;
}

/* y = x*scale + shift, then max(0, .) when relu. */
static void affine_ref(const float *x, int hw, float scale, float shift, int relu, float *y)
{
    for (int i = 0; i < hw; i++) {
        float v = x[i] * scale + shift;
        y[i] = relu && v < 0.0f ? 0.0f : v;
    }
}

/* y = max(0, (x*scale + shift) + r): affine_ref without its ReLU, then
 * add_relu's step (the residual join after BN, fused). */
static void affine_add_relu_ref(const float *x, const float *r, int hw, float scale, float shift,
                                float *y)
{
    for (int i = 0; i < hw; i++) {
        float v = x[i] * scale + shift;
        v = v + r[i];
        y[i] = v < 0.0f ? 0.0f : v;
    }
}

/* The gradient reaching BN: dy, masked by y > 0 when the ReLU is fused. */
static inline float dy_eff(const float *yr, const float *dy, int i)
{
    return !yr || yr[i] > 0.0f ? dy[i] : 0.0f;
}

/* *sdy += sum of dy, *sdyx += sum of dy*(x - mean). */
static void bwd_sums_ref(const float *x, const float *yr, const float *dy, int hw, float mean,
                         double *sdy, double *sdyx)
{
    double a = 0.0, b = 0.0;
    for (int i = 0; i < hw; i++) {
        float g = dy_eff(yr, dy, i);
        a += g;
        b += (double)g * (x[i] - mean);
    }
    *sdy += a;
    *sdyx += b;
}

/* dx = A*dy - B*x + C. */
static void bwd_apply_ref(const float *x, const float *yr, const float *dy, int hw, float A,
                          float B, float C, float *dx)
{
    for (int i = 0; i < hw; i++)
        dx[i] = A * dy_eff(yr, dy, i) - B * x[i] + C;
}

/* ---- plane kernels: AVX2 (8 lanes; the tail of a plane goes through the
 * reference). Sums run in double lanes, like the reference's. ---- */
#if CPU_X86
/* Sums accumulate in double lanes (4+4 per 8 floats): batch-norm sums
 * cancel (dy*xhat sums to little), and float lanes lost 1e-5 of them.
 * Each sum runs in four accumulators (the low and high halves of floats
 * 0-7 and 8-15 of every 16): four independent chains of adds, where one
 * chain would wait on each add's latency. */
/* Software prefetch BN_AHEAD floats (2 KB) ahead in a stream: with the
 * hardware prefetchers alone these passes waited on L3 (8 MB tensors at
 * resnet20 batch 128; 2 MB pages did not help, so not the 4 KB page
 * boundaries). Planes are walked in memory order, so ahead of a plane's
 * end lies the next plane. Prefetches do not fault past the end of a
 * buffer. resnet20 batch 128, 1 thread: these kernels' perf samples
 * 13-15% fewer. */
#define BN_AHEAD 512
static CPU_AVX2 inline void ahead(const float *p, int i)
{
    if (p)
        _mm_prefetch((const char *)(p + i + BN_AHEAD), _MM_HINT_T0);
}

static CPU_AVX2 inline void acc8x2(__m256d acc[2], __m256 v)
{
    acc[0] = _mm256_add_pd(acc[0], _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
    acc[1] = _mm256_add_pd(acc[1], _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
}

/* The squares of the 8 float differences d, each widened before it is
 * squared, into acc[0] (low 4) and acc[1] (high 4). */
static CPU_AVX2 inline void sq8x2(__m256d acc[2], __m256 d)
{
    __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(d));
    __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(d, 1));
    acc[0] = _mm256_fmadd_pd(lo, lo, acc[0]);
    acc[1] = _mm256_fmadd_pd(hi, hi, acc[1]);
}

static CPU_AVX2 double hsum4x(const __m256d acc[4])
{
    return cpu_hsum4d(_mm256_add_pd(_mm256_add_pd(acc[0], acc[1]), _mm256_add_pd(acc[2], acc[3])));
}

static CPU_AVX2 double sum_avx2(const float *x, int hw)
{
    __m256d acc[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(),
                      _mm256_setzero_pd()};
    int i = 0;
    for (; i + 16 <= hw; i += 16) {
        ahead(x, i);
        acc8x2(acc, _mm256_loadu_ps(x + i));
        acc8x2(acc + 2, _mm256_loadu_ps(x + i + 8));
    }
    for (; i + 8 <= hw; i += 8)
        acc8x2(acc, _mm256_loadu_ps(x + i));
    return hsum4x(acc) + (i < hw ? sum_ref(x + i, hw - i) : 0.0);
}

static CPU_AVX2 double sqdev_avx2(const float *x, int hw, float mean)
{
    __m256d acc[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(),
                      _mm256_setzero_pd()};
    __m256 m = _mm256_set1_ps(mean);
    int i = 0;
    for (; i + 16 <= hw; i += 16) {
        ahead(x, i);
        sq8x2(acc, _mm256_sub_ps(_mm256_loadu_ps(x + i), m));
        sq8x2(acc + 2, _mm256_sub_ps(_mm256_loadu_ps(x + i + 8), m));
    }
    for (; i + 8 <= hw; i += 8)
        sq8x2(acc, _mm256_sub_ps(_mm256_loadu_ps(x + i), m));
    return hsum4x(acc) + (i < hw ? sqdev_ref(x + i, hw - i, mean) : 0.0);
}

static CPU_AVX2 void affine_avx2(const float *x, int hw, float scale, float shift, int relu,
                                 float *y)
{
    __m256 s = _mm256_set1_ps(scale), t = _mm256_set1_ps(shift), z = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= hw; i += 8) {
        if (!(i & 15))
            ahead(x, i);
        __m256 v = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), s, t);
        _mm256_storeu_ps(y + i, relu ? _mm256_max_ps(v, z) : v);
    }
    affine_ref(x + i, hw - i, scale, shift, relu, y + i);
}

/* affine_avx2's lanes, then add_relu's: the bits of the two ops. */
static CPU_AVX2 void affine_add_relu_avx2(const float *x, const float *r, int hw, float scale,
                                          float shift, float *y)
{
    __m256 s = _mm256_set1_ps(scale), t = _mm256_set1_ps(shift), z = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= hw; i += 8) {
        if (!(i & 15)) {
            ahead(x, i);
            ahead(r, i);
        }
        __m256 v = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), s, t);
        v = _mm256_add_ps(v, _mm256_loadu_ps(r + i));
        _mm256_storeu_ps(y + i, _mm256_max_ps(z, v));
    }
    affine_add_relu_ref(x + i, r + i, hw - i, scale, shift, y + i);
}

/* dy of 8 lanes, zero where the fused ReLU's output y <= 0. */
static CPU_AVX2 inline __m256 dy8(const float *yr, const float *dy, int i)
{
    __m256 g = _mm256_loadu_ps(dy + i);
    if (yr)
        g = _mm256_and_ps(g, _mm256_cmp_ps(_mm256_loadu_ps(yr + i), _mm256_setzero_ps(), _CMP_GT_OQ));
    return g;
}

/* The backward sums of 8 lanes: g and d = x - mean widened once each;
 * acc[0..1] += g (low, high 4), acc[2..3] += g*d. */
static CPU_AVX2 inline void bwd8(__m256 g, __m256 d, __m256d acc[4])
{
    __m256d glo = _mm256_cvtps_pd(_mm256_castps256_ps128(g));
    __m256d ghi = _mm256_cvtps_pd(_mm256_extractf128_ps(g, 1));
    acc[0] = _mm256_add_pd(acc[0], glo);
    acc[1] = _mm256_add_pd(acc[1], ghi);
    acc[2] = _mm256_fmadd_pd(glo, _mm256_cvtps_pd(_mm256_castps256_ps128(d)), acc[2]);
    acc[3] = _mm256_fmadd_pd(ghi, _mm256_cvtps_pd(_mm256_extractf128_ps(d, 1)), acc[3]);
}

/* Eight independent chains (two sets of bwd8's four) over 16 floats. */
static CPU_AVX2 void bwd_sums_avx2(const float *x, const float *yr, const float *dy, int hw,
                                   float mean, double *sdy, double *sdyx)
{
    __m256d acc[4], acc2[4];
    for (int k = 0; k < 4; k++)
        acc[k] = acc2[k] = _mm256_setzero_pd();
    __m256 m = _mm256_set1_ps(mean);
    int i = 0;
    for (; i + 16 <= hw; i += 16) {
        ahead(x, i);
        ahead(yr, i);
        ahead(dy, i);
        bwd8(dy8(yr, dy, i), _mm256_sub_ps(_mm256_loadu_ps(x + i), m), acc);
        bwd8(dy8(yr, dy, i + 8), _mm256_sub_ps(_mm256_loadu_ps(x + i + 8), m), acc2);
    }
    for (; i + 8 <= hw; i += 8)
        bwd8(dy8(yr, dy, i), _mm256_sub_ps(_mm256_loadu_ps(x + i), m), acc);
    __m256d a = _mm256_add_pd(_mm256_add_pd(acc[0], acc[1]), _mm256_add_pd(acc2[0], acc2[1]));
    __m256d b = _mm256_add_pd(_mm256_add_pd(acc[2], acc[3]), _mm256_add_pd(acc2[2], acc2[3]));
    *sdy += cpu_hsum4d(a);
    *sdyx += cpu_hsum4d(b);
    if (i < hw) {
        cpu_avx_leave();
        bwd_sums_ref(x + i, yr ? yr + i : NULL, dy + i, hw - i, mean, sdy, sdyx);
    }
}

static CPU_AVX2 void bwd_apply_avx2(const float *x, const float *yr, const float *dy, int hw,
                                    float A, float B, float C, float *dx)
{
    __m256 va = _mm256_set1_ps(A), vb = _mm256_set1_ps(-B), vc = _mm256_set1_ps(C);
    int i = 0;
    for (; i + 8 <= hw; i += 8) {
        if (!(i & 15)) {
            ahead(x, i);
            ahead(yr, i);
            ahead(dy, i);
        }
        __m256 g = dy8(yr, dy, i);
        _mm256_storeu_ps(dx + i, _mm256_fmadd_ps(vb, _mm256_loadu_ps(x + i), _mm256_fmadd_ps(va, g, vc)));
    }
    bwd_apply_ref(x + i, yr ? yr + i : NULL, dy + i, hw - i, A, B, C, dx + i);
}

/* ---- plane kernels: AVX-512 (16 lanes) for the forward sums, bitwise
 * equal to the AVX2 ones. Each zmm of doubles holds two of the AVX2
 * kernels' ymm accumulators (low half, high half), fed the same widened
 * floats in the same order; the halves are split out and added as the
 * AVX2 kernels add them. Half the widening converts and double adds per
 * float: resnet20 batch 128, 1 thread, sum+sqdev 4.7% -> 3.6% of the
 * profile. The elementwise and backward kernels stay AVX2 here: their
 * 16-lane twins measured no faster (they wait on memory, 2-3 streams of
 * 8 MB tensors). ---- */
#define BN_AVX512 __attribute__((target("avx512f,avx2,fma")))

static BN_AVX512 inline __m512d wide8(const float *x)
{
    return _mm512_cvtps_pd(_mm256_loadu_ps(x));
}

static BN_AVX512 inline __m256d lo4(__m512d v)
{
    return _mm512_castpd512_pd256(v);
}

static BN_AVX512 inline __m256d hi4(__m512d v)
{
    return _mm512_extractf64x4_pd(v, 1);
}

/* hsum4x of the four ymm accumulators held in a (acc[0..1]) and b (acc[2..3]). */
static BN_AVX512 double hsum2z(__m512d a, __m512d b)
{
    return cpu_hsum4d(_mm256_add_pd(_mm256_add_pd(lo4(a), hi4(a)), _mm256_add_pd(lo4(b), hi4(b))));
}

static BN_AVX512 double sum_avx512(const float *x, int hw)
{
    __m512d a = _mm512_setzero_pd(), b = _mm512_setzero_pd();
    int i = 0;
    for (; i + 16 <= hw; i += 16) {
        ahead(x, i);
        a = _mm512_add_pd(a, wide8(x + i));
        b = _mm512_add_pd(b, wide8(x + i + 8));
    }
    for (; i + 8 <= hw; i += 8)
        a = _mm512_add_pd(a, wide8(x + i));
    return hsum2z(a, b) + (i < hw ? sum_ref(x + i, hw - i) : 0.0);
}

/* The 8 differences x - mean in float (as AVX2 rounds them), widened. */
static BN_AVX512 inline __m512d dev8(const float *x, __m256 m)
{
    return _mm512_cvtps_pd(_mm256_sub_ps(_mm256_loadu_ps(x), m));
}

static BN_AVX512 double sqdev_avx512(const float *x, int hw, float mean)
{
    __m512d a = _mm512_setzero_pd(), b = _mm512_setzero_pd();
    __m256 m = _mm256_set1_ps(mean);
    int i = 0;
    for (; i + 16 <= hw; i += 16) {
        ahead(x, i);
        __m512d d0 = dev8(x + i, m), d1 = dev8(x + i + 8, m);
        a = _mm512_fmadd_pd(d0, d0, a);
        b = _mm512_fmadd_pd(d1, d1, b);
    }
    for (; i + 8 <= hw; i += 8) {
        __m512d d0 = dev8(x + i, m);
        a = _mm512_fmadd_pd(d0, d0, a);
    }
    return hsum2z(a, b) + (i < hw ? sqdev_ref(x + i, hw - i, mean) : 0.0);
}

#endif

/* The plane kernels this CPU runs. */
typedef struct bn_kernels {
    double (*sum)(const float *x, int hw);
    double (*sqdev)(const float *x, int hw, float mean);
    void (*affine)(const float *x, int hw, float scale, float shift, int relu, float *y);
    void (*affine_add_relu)(const float *x, const float *r, int hw, float scale, float shift,
                            float *y);
    void (*bwd_sums)(const float *x, const float *yr, const float *dy, int hw, float mean,
                     double *sdy, double *sdyx);
    void (*bwd_apply)(const float *x, const float *yr, const float *dy, int hw, float A, float B,
                      float C, float *dx);
} bn_kernels;

static bn_kernels pick(void)
{
#if CPU_X86
    if (cpu_has_avx512())
        return (bn_kernels){sum_avx512, sqdev_avx512, affine_avx2, affine_add_relu_avx2,
                            bwd_sums_avx2, bwd_apply_avx2};
    if (cpu_has_avx2())
        return (bn_kernels){sum_avx2, sqdev_avx2, affine_avx2, affine_add_relu_avx2,
                            bwd_sums_avx2, bwd_apply_avx2};
#endif
    return (bn_kernels){sum_ref, sqdev_ref, affine_ref, affine_add_relu_ref, bwd_sums_ref,
                        bwd_apply_ref};
}

double cpu_plane_sum(const float *x, int n)
{
    return pick().sum(x, n);
}

double cpu_plane_sqdev(const float *x, int n, float mean)
{
    return pick().sqdev(x, n, mean);
}

typedef struct bn_ctx {
    bn_kernels k;
    int n, c, hw, relu;
    float eps;
    const float *x, *yr, *dy, *sum, *sqdev, *saved, *gamma, *beta, *rm, *rv, *sdy, *sdyx;
    const float *res;   /* bn_train_fwd_add_relu: the residual added before the ReLU */
    float *out, *out2, *out3, *out4;
} bn_ctx;

static const float *plane(const float *p, const bn_ctx *c, int img, int ch)
{
    return p + ((size_t)img * c->c + (size_t)ch) * (size_t)c->hw;
}

/* Planes shorter than BN_TINY floats: the SIMD kernels above run such a
 * plane wholly through their reference tail (their vector sums add +0.0,
 * which changes no bits), so the reference kernels are called directly,
 * inlined: with 1x1 planes (batchnorm on flat features, 512x512) one call
 * through the table per value took most of the time. */
#define BN_TINY 8

static inline double k_sum(const bn_ctx *c, const float *x)
{
    return c->hw < BN_TINY ? sum_ref(x, c->hw) : c->k.sum(x, c->hw);
}

static inline double k_sqdev(const bn_ctx *c, const float *x, float mean)
{
    return c->hw < BN_TINY ? sqdev_ref(x, c->hw, mean) : c->k.sqdev(x, c->hw, mean);
}

/* 1x1 planes (N,C,1,1): one image's row of a block's channels in one
 * loop that the compiler vectorises across channels, each value as the
 * reference kernels on a plane of one (their +0.0 start changes no bits:
 * a channel's sum starts at +0.0 and never becomes -0.0). */
static void sum_row1_ref(const float *x, int rows, size_t stride, size_t n, double *s)
{
    for (int r = 0; r < rows; r++, x += stride)
        for (size_t j = 0; j < n; j++)
            s[j] += x[j];
}

static void sqdev_row1_ref(const float *x, int rows, size_t stride, size_t n, const float *mean,
                           double *s)
{
    for (int r = 0; r < rows; r++, x += stride)
        for (size_t j = 0; j < n; j++) {
            float d = x[j] - mean[j];
            s[j] += (double)d * d;
        }
}

/* The row loops on 8 channels at a time (AVX2): each channel's value
 * through the same operations as above (a float difference, widened,
 * multiplied and added in double; no fused multiply-adds), so the same
 * bits, and the tail through the loops above. The compiler does not
 * vectorise those (no -march, double sums): flat batch norm (512x512)
 * ran at about a tenth of PyTorch's speed. */
#if CPU_X86
static CPU_AVX2 inline void add8d(double *s, __m256 v)
{
    _mm256_storeu_pd(s, _mm256_add_pd(_mm256_loadu_pd(s), _mm256_cvtps_pd(_mm256_castps256_ps128(v))));
    _mm256_storeu_pd(s + 4, _mm256_add_pd(_mm256_loadu_pd(s + 4),
                                          _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1))));
}

/* s[0..7] += a * b, a and b widened first. */
static CPU_AVX2 inline void addmul8d(double *s, __m256 a, __m256 b)
{
    __m256d alo = _mm256_cvtps_pd(_mm256_castps256_ps128(a)), ahi = _mm256_cvtps_pd(_mm256_extractf128_ps(a, 1));
    __m256d blo = _mm256_cvtps_pd(_mm256_castps256_ps128(b)), bhi = _mm256_cvtps_pd(_mm256_extractf128_ps(b, 1));
    _mm256_storeu_pd(s, _mm256_add_pd(_mm256_loadu_pd(s), _mm256_mul_pd(alo, blo)));
    _mm256_storeu_pd(s + 4, _mm256_add_pd(_mm256_loadu_pd(s + 4), _mm256_mul_pd(ahi, bhi)));
}

static CPU_AVX2 void sum_row1_avx2(const float *x, int rows, size_t stride, size_t n, double *s)
{
    for (int r = 0; r < rows; r++, x += stride) {
        size_t j = 0;
        for (; j + 8 <= n; j += 8)
            add8d(s + j, _mm256_loadu_ps(x + j));
        for (; j < n; j++)
            s[j] += x[j];
    }
}

static CPU_AVX2 void sqdev_row1_avx2(const float *x, int rows, size_t stride, size_t n,
                                     const float *mean, double *s)
{
    for (int r = 0; r < rows; r++, x += stride) {
        size_t j = 0;
        for (; j + 8 <= n; j += 8) {
            __m256 d = _mm256_sub_ps(_mm256_loadu_ps(x + j), _mm256_loadu_ps(mean + j));
            addmul8d(s + j, d, d);
        }
        for (; j < n; j++) {
            float d = x[j] - mean[j];
            s[j] += (double)d * d;
        }
    }
}
#endif

static void sum_row1(const float *x, int rows, size_t stride, size_t n, double *s)
{
#if CPU_X86
    if (cpu_has_avx2()) {
        sum_row1_avx2(x, rows, stride, n, s);
        return;
    }
#endif
    sum_row1_ref(x, rows, stride, n, s);
}

static void sqdev_row1(const float *x, int rows, size_t stride, size_t n, const float *mean,
                       double *s)
{
#if CPU_X86
    if (cpu_has_avx2()) {
        sqdev_row1_avx2(x, rows, stride, n, mean, s);
        return;
    }
#endif
    sqdev_row1_ref(x, rows, stride, n, mean, s);
}

/* Channel blocks: the per-channel sums walk a block of up to BN_BLOCK
 * channels image by image (for each image, the block's planes one after
 * the other: one contiguous run of memory). This streams, where one
 * channel's planes alone (a page apart at 32x32, 256 bytes every 16 KiB at
 * 8x8) start every plane cold: on the ResNet-20 shapes a layer's whole
 * forward and backward ran 10-50% faster than channel by channel. Each
 * channel's sum still adds its planes in image order into one double, so
 * the bits do not depend on the blocking or the thread count. Channel
 * items run in one chunk per thread (run_channels): each thread's
 * channels are one contiguous run of every image. */
#define BN_BLOCK 64

/* Flat features (hw = 1): a block is up to BN_FLAT channels, so that each
 * image's row of them is one stream (with blocks of 64 channels, rows of
 * 256 bytes 2 KiB apart at 512 channels, a third of the time went). The
 * arrays of a block are sized for the larger. */
#define BN_FLAT 1024
#define BN_MAXB BN_FLAT

static size_t block_end(const bn_ctx *c, size_t b0, size_t e)
{
    size_t len = c->hw == 1 ? BN_FLAT : BN_BLOCK;
    return e - b0 < len ? e : b0 + len;
}

static float chan_mean(const bn_ctx *c, size_t ch)
{
    return c->sum[c->c] > 0.0f ? (float)((double)c->sum[ch] / c->sum[c->c]) : 0.0f;
}

/* out[ch] for the channels of [b,e) a block at a time: the sum of x over
 * the images, or with sqdev the squared deviations from chan_mean. */
static void sums_blocks(const bn_ctx *c, size_t b, size_t e, int sqdev, float *out)
{
    for (size_t b0 = b, e0; b0 < e; b0 = e0) {
        e0 = block_end(c, b0, e);
        double s[BN_MAXB] = {0};
        float mean[BN_MAXB];
        for (size_t ch = b0; sqdev && ch < e0; ch++)
            mean[ch - b0] = chan_mean(c, ch);
        if (c->hw == 1 && sqdev)
            sqdev_row1(c->x + b0, c->n, (size_t)c->c, e0 - b0, mean, s);
        else if (c->hw == 1)
            sum_row1(c->x + b0, c->n, (size_t)c->c, e0 - b0, s);
        for (int img = 0; c->hw != 1 && img < c->n; img++)
            for (size_t ch = b0; ch < e0; ch++) {
                const float *x = plane(c->x, c, img, (int)ch);
                s[ch - b0] += sqdev ? k_sqdev(c, x, mean[ch - b0]) : k_sum(c, x);
            }
        for (size_t ch = b0; ch < e0; ch++)
            out[ch] = (float)s[ch - b0];
    }
}

/* Items are channels: out[ch] = sum over images of x. */
static void sum_channels(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    (void)chunk, (void)tid;
    const bn_ctx *c = vctx;
    sums_blocks(c, b, e, 0, c->out);
}

/* Items are channels: out[ch] = sum over images of (x - mean)^2. */
static void sqdev_channels(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    (void)chunk, (void)tid;
    const bn_ctx *c = vctx;
    sums_blocks(c, b, e, 1, c->out);
}

static void run_channels(cdl_backend *be, int c, pool_fn fn, void *ctx)
{
    int t = pool_threads(cpu_pool(be));
    pool_run(cpu_pool(be), (size_t)c, t < c ? t : c, fn, ctx);
}

/* Items are planes (img*c + ch): y = x*scale + shift with the channel's
 * scale = gamma*invstd and shift = beta - mean*scale from saved (training)
 * or the running statistics (evaluation, saved == NULL). */
static void affine_consts(const bn_ctx *c, size_t ch, float *scale, float *shift)
{
    float mean, invstd;
    if (c->saved) {
        mean = c->saved[ch];
        invstd = c->saved[c->c + ch];
    } else {
        mean = c->rm[ch];
        invstd = (float)(1.0 / sqrt((double)c->rv[ch] + c->eps));
    }
    *scale = (c->gamma ? c->gamma[ch] : 1.0f) * invstd;
    *shift = (c->beta ? c->beta[ch] : 0.0f) - mean * scale[0];
}

static void affine_plane(const bn_ctx *c, size_t p, float scale, float shift)
{
    size_t off = p * (size_t)c->hw;
    if (c->res && c->hw < BN_TINY)
        affine_add_relu_ref(c->x + off, c->res + off, c->hw, scale, shift, c->out + off);
    else if (c->res)
        c->k.affine_add_relu(c->x + off, c->res + off, c->hw, scale, shift, c->out + off);
    else if (c->hw < BN_TINY)
        affine_ref(c->x + off, c->hw, scale, shift, c->relu, c->out + off);
    else
        c->k.affine(c->x + off, c->hw, scale, shift, c->relu, c->out + off);
}

/* affine_ref on n planes of one value, channel j's constants at [j]. */
static void affine_row1_ref(const float *x, int rows, size_t stride, size_t n, const float *scale,
                            const float *shift, int relu, float *y)
{
    for (int r = 0; r < rows; r++, x += stride, y += stride)
        for (size_t j = 0; j < n; j++) {
            float v = x[j] * scale[j] + shift[j];
            y[j] = relu && v < 0.0f ? 0.0f : v;
        }
}

#if CPU_X86
static CPU_AVX2 void affine_row1_avx2(const float *x, int rows, size_t stride, size_t n,
                                      const float *scale, const float *shift, int relu, float *y)
{
    for (int r = 0; r < rows; r++, x += stride, y += stride) {
        size_t j = 0;
        for (; j + 8 <= n; j += 8) {
            __m256 v = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(x + j), _mm256_loadu_ps(scale + j)),
                                     _mm256_loadu_ps(shift + j));
            if (relu)   /* v < 0 ? 0 : v, NaN kept, as the loop above */
                v = _mm256_andnot_ps(_mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_LT_OQ), v);
            _mm256_storeu_ps(y + j, v);
        }
        for (; j < n; j++) {
            float v = x[j] * scale[j] + shift[j];
            y[j] = relu && v < 0.0f ? 0.0f : v;
        }
    }
}
#endif

static void affine_row1(const float *x, int rows, size_t stride, size_t n, const float *scale,
                        const float *shift, int relu, float *y)
{
#if CPU_X86
    if (cpu_has_avx2()) {
        affine_row1_avx2(x, rows, stride, n, scale, shift, relu, y);
        return;
    }
#endif
    affine_row1_ref(x, rows, stride, n, scale, shift, relu, y);
}

/* y of the channels [b0,e0) (one BN_BLOCK or BN_FLAT), their scale and shift once,
 * not once per plane: with small planes the constants (a square root in
 * evaluation) took most of the time. */
static void affine_block(const bn_ctx *c, size_t b0, size_t e0)
{
    float scale[BN_MAXB], shift[BN_MAXB];
    for (size_t ch = b0; ch < e0; ch++)
        affine_consts(c, ch, &scale[ch - b0], &shift[ch - b0]);
    if (c->hw == 1 && !c->res) {
        affine_row1(c->x + b0, c->n, (size_t)c->c, e0 - b0, scale, shift, c->relu, c->out + b0);
        return;
    }
    for (int img = 0; img < c->n; img++) {
        size_t p = (size_t)img * (size_t)c->c;
        for (size_t ch = b0; ch < e0; ch++)
            affine_plane(c, p + ch, scale[ch - b0], shift[ch - b0]);
    }
}

/* Items are channels: affine_block a block at a time (bn_apply and
 * bn_eval on planes under BN_SMALL floats). */
static void affine_channels(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    (void)chunk, (void)tid;
    for (size_t b0 = b, e0; b0 < e; b0 = e0) {
        e0 = block_end(vctx, b0, e);
        affine_block(vctx, b0, e0);
    }
}

static void affine_planes(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    (void)chunk, (void)tid;
    const bn_ctx *c = vctx;
    for (size_t p = b; p < e; p++) {
        float scale, shift;
        affine_consts(c, p % (size_t)c->c, &scale, &shift);
        affine_plane(c, p, scale, shift);
    }
}

/* Channel ch's mean and invstd in saved (2c+1: mean, invstd, count) from
 * the sums (count at sum[c]). */
static void save_channel(int c, size_t ch, const float *sum, const float *sqdev, float eps,
                         float *saved)
{
    double count = sum[c];
    double var = count > 0.0 ? sqdev[ch] / count : 0.0;
    saved[ch] = count > 0.0 ? (float)(sum[ch] / count) : 0.0f;
    saved[(size_t)c + ch] = (float)(1.0 / sqrt(var + eps));
}

/* bn_train_fwd's items are channels, a block at a time (BN_BLOCK or BN_FLAT): the
 * block's sums, squared deviations, saved statistics and y, each step as
 * the pieces' own (the same bits). out = y, out2 = sum (with the count at
 * [c] already), out3 = sqdev, out4 = saved. */
static void fwd_channels(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    (void)chunk, (void)tid;
    const bn_ctx *c = vctx;
    bn_ctx one = *c;
    one.sum = c->out2;
    one.saved = c->out4;
    for (size_t b0 = b, e0; b0 < e; b0 = e0) {
        e0 = block_end(c, b0, e);
        sums_blocks(&one, b0, e0, 0, c->out2);
        sums_blocks(&one, b0, e0, 1, c->out3);
        for (size_t ch = b0; ch < e0; ch++)
            save_channel(c->c, ch, c->out2, c->out3, c->eps, c->out4);
        affine_block(&one, b0, e0);
    }
}

static size_t nplanes(int n, int c)
{
    return n > 0 && c > 0 ? (size_t)n * (size_t)c : 0;
}

/* Under BN_SMALL floats a plane, the elementwise pieces take channels as
 * items (per-channel constants once per block) rather than planes. */
#define BN_SMALL 64

/* Grain for plane items: about CPU_ELT_GRAIN floats per chunk. */
static size_t plane_grain(int hw)
{
    return (size_t)(CPU_ELT_GRAIN / (hw > 0 ? hw : 1)) + 1;
}

void cpu_bn_sum(cdl_backend *be, int n, int c, int hw, const float *x, float *sum)
{
    bn_ctx ctx = {.k = pick(), .n = n, .c = c, .hw = hw, .x = x, .out = sum};
    if (c <= 0)
        return;
    sum[c] = (float)((double)(n > 0 ? n : 0) * (hw > 0 ? hw : 0));
    run_channels(be, c, sum_channels, &ctx);
}

void cpu_bn_sqdev(cdl_backend *be, int n, int c, int hw, const float *x, const float *sum,
                  float *sqdev)
{
    bn_ctx ctx = {.k = pick(), .n = n, .c = c, .hw = hw, .x = x, .sum = sum, .out = sqdev};
    if (c > 0)
        run_channels(be, c, sqdev_channels, &ctx);
}

void cpu_bn_apply(cdl_backend *be, int n, int c, int hw, const float *x, const float *sum,
                  const float *sqdev, float eps, const float *gamma, const float *beta,
                  int relu, float *y, float *saved)
{
    if (c <= 0)
        return;
    for (int ch = 0; ch < c; ch++)
        save_channel(c, (size_t)ch, sum, sqdev, eps, saved);
    saved[2 * c] = sum[c];
    bn_ctx ctx = {.k = pick(), .n = n, .c = c, .hw = hw, .relu = relu, .x = x, .saved = saved,
                  .gamma = gamma, .beta = beta, .out = y};
    if (hw < BN_SMALL)
        run_channels(be, c, affine_channels, &ctx);
    else
        pool_for(cpu_pool(be), nplanes(n, c), plane_grain(hw), affine_planes, &ctx);
}

/* bn_train_fwd, and with res its add+ReLU fusion. */
static void train_fwd(cdl_backend *be, int n, int c, int hw, const float *x, float eps,
                      const float *gamma, const float *beta, int relu, const float *res, float *y,
                      float *sum, float *sqdev, float *saved)
{
    if (c <= 0)
        return;
    sum[c] = (float)((double)(n > 0 ? n : 0) * (hw > 0 ? hw : 0));
    saved[2 * c] = sum[c];
    bn_ctx ctx = {.k = pick(), .n = n, .c = c, .hw = hw, .relu = relu, .eps = eps, .x = x,
                  .gamma = gamma, .beta = beta, .res = res, .out = y, .out2 = sum, .out3 = sqdev,
                  .out4 = saved};
    run_channels(be, c, fwd_channels, &ctx);
}

void cpu_bn_train_fwd(cdl_backend *be, int n, int c, int hw, const float *x, float eps,
                      const float *gamma, const float *beta, int relu, float *y, float *sum,
                      float *sqdev, float *saved)
{
    train_fwd(be, n, c, hw, x, eps, gamma, beta, relu, NULL, y, sum, sqdev, saved);
}

void cpu_bn_train_fwd_add_relu(cdl_backend *be, int n, int c, int hw, const float *x, float eps,
                               const float *gamma, const float *beta, const float *res, float *y,
                               float *sum, float *sqdev, float *saved)
{
    train_fwd(be, n, c, hw, x, eps, gamma, beta, 0, res, y, sum, sqdev, saved);
}

void cpu_bn_running(cdl_backend *be, int c, const float *sum, const float *sqdev,
                    float momentum, float *running_mean, float *running_var,
                    float *num_batches_tracked)
{
    (void)be;
    if (c <= 0)
        return;
    double count = sum[c];
    for (int ch = 0; ch < c; ch++) {
        double mean = count > 0.0 ? sum[ch] / count : 0.0;
        double var = count > 1.0 ? sqdev[ch] / (count - 1.0) : 0.0;
        running_mean[ch] = (1.0f - momentum) * running_mean[ch] + momentum * (float)mean;
        running_var[ch] = (1.0f - momentum) * running_var[ch] + momentum * (float)var;
    }
    if (num_batches_tracked)
        *num_batches_tracked += 1.0f;
}

void cpu_bn_eval(cdl_backend *be, int n, int c, int hw, const float *x,
                 const float *running_mean, const float *running_var, float eps,
                 const float *gamma, const float *beta, int relu, float *y)
{
    bn_ctx ctx = {.k = pick(), .n = n, .c = c, .hw = hw, .relu = relu, .eps = eps, .x = x,
                  .rm = running_mean, .rv = running_var, .gamma = gamma, .beta = beta, .out = y};
    if (c > 0 && n > 0 && hw < BN_SMALL)
        run_channels(be, c, affine_channels, &ctx);
    else
        pool_for(cpu_pool(be), nplanes(n, c), plane_grain(hw), affine_planes, &ctx);
}

/* bwd_sums_ref on n planes of one value (see sum_row1), channel j's mean
 * at mean[j]. */
static void bwd_sums_row1_ref(const float *x, const float *yr, const float *dy, int rows,
                              size_t stride, size_t n, const float *mean, double *sdy, double *sdyx)
{
    for (int r = 0; r < rows; r++, x += stride, dy += stride, yr = yr ? yr + stride : NULL)
        for (size_t j = 0; j < n; j++) {
            float g = !yr || yr[j] > 0.0f ? dy[j] : 0.0f;
            sdy[j] += g;
            sdyx[j] += (double)g * (x[j] - mean[j]);
        }
}

#if CPU_X86
/* dy where y_relu > 0 (all of dy without y_relu), else +0.0. */
static CPU_AVX2 inline __m256 dy_eff8(const float *yr, const float *dy, size_t j)
{
    __m256 g = _mm256_loadu_ps(dy + j);
    if (!yr)
        return g;
    return _mm256_and_ps(_mm256_cmp_ps(_mm256_loadu_ps(yr + j), _mm256_setzero_ps(), _CMP_GT_OQ), g);
}

static CPU_AVX2 void bwd_sums_row1_avx2(const float *x, const float *yr, const float *dy, int rows,
                                        size_t stride, size_t n, const float *mean, double *sdy,
                                        double *sdyx)
{
    for (int r = 0; r < rows; r++, x += stride, dy += stride, yr = yr ? yr + stride : NULL) {
        size_t j = 0;
        for (; j + 8 <= n; j += 8) {
            __m256 g = dy_eff8(yr, dy, j);
            add8d(sdy + j, g);
            addmul8d(sdyx + j, g, _mm256_sub_ps(_mm256_loadu_ps(x + j), _mm256_loadu_ps(mean + j)));
        }
        for (; j < n; j++) {
            float g = !yr || yr[j] > 0.0f ? dy[j] : 0.0f;
            sdy[j] += g;
            sdyx[j] += (double)g * (x[j] - mean[j]);
        }
    }
}
#endif

static void bwd_sums_row1(const float *x, const float *yr, const float *dy, int rows, size_t stride,
                          size_t n, const float *mean, double *sdy, double *sdyx)
{
#if CPU_X86
    if (cpu_has_avx2()) {
        bwd_sums_row1_avx2(x, yr, dy, rows, stride, n, mean, sdy, sdyx);
        return;
    }
#endif
    bwd_sums_row1_ref(x, yr, dy, rows, stride, n, mean, sdy, sdyx);
}

/* out[ch] = sum of dy*xhat (dgamma), out2[ch] = sum of dy (dbeta) for the
 * channels [b0,e0) of one block (BN_BLOCK or BN_FLAT), image by image. */
static void bwd_sums_block(const bn_ctx *c, size_t b0, size_t e0)
{
    double sdy[BN_MAXB] = {0}, sdyx[BN_MAXB] = {0};
    if (c->hw == 1)
        bwd_sums_row1(c->x + b0, c->yr ? c->yr + b0 : NULL, c->dy + b0, c->n, (size_t)c->c, e0 - b0,
                      c->saved + b0, sdy, sdyx);
    for (int img = 0; c->hw != 1 && img < c->n; img++)
        for (size_t ch = b0; ch < e0; ch++) {
            const float *x = plane(c->x, c, img, (int)ch), *dy = plane(c->dy, c, img, (int)ch);
            const float *yr = c->yr ? plane(c->yr, c, img, (int)ch) : NULL;
            if (c->hw < BN_TINY)
                bwd_sums_ref(x, yr, dy, c->hw, c->saved[ch], &sdy[ch - b0], &sdyx[ch - b0]);
            else
                c->k.bwd_sums(x, yr, dy, c->hw, c->saved[ch], &sdy[ch - b0], &sdyx[ch - b0]);
        }
    for (size_t ch = b0; ch < e0; ch++) {
        c->out[ch] = (float)(sdyx[ch - b0] * c->saved[c->c + ch]);
        c->out2[ch] = (float)sdy[ch - b0];
    }
}

/* Items are channels: bwd_sums_block a block at a time. */
static void bwd_sum_channels(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    (void)chunk, (void)tid;
    for (size_t b0 = b, e0; b0 < e; b0 = e0) {
        e0 = block_end(vctx, b0, e);
        bwd_sums_block(vctx, b0, e0);
    }
}

void cpu_bn_bwd_sums(cdl_backend *be, int n, int c, int hw, const float *x,
                     const float *y_relu, const float *dy, const float *saved,
                     float *dgamma, float *dbeta)
{
    bn_ctx ctx = {.k = pick(), .n = n, .c = c, .hw = hw, .x = x, .yr = y_relu, .dy = dy,
                  .saved = saved, .out = dgamma, .out2 = dbeta};
    if (c > 0)
        run_channels(be, c, bwd_sum_channels, &ctx);
}

/* dx = k*(dy - sdy/N - xhat*sdyx/N) with k = gamma*invstd and xhat =
 * (x - mean)*invstd, as A*dy - B*x + C. */
static void apply_consts(const bn_ctx *c, size_t ch, float abc[3])
{
    double count = c->saved[2 * c->c];
    double mean = c->saved[ch], invstd = c->saved[c->c + ch];
    double k = (c->gamma ? c->gamma[ch] : 1.0) * invstd;
    double B = k * invstd * c->sdyx[ch] / count;
    double C = -k * c->sdy[ch] / count + B * mean;
    abc[0] = (float)k;
    abc[1] = (float)B;
    abc[2] = (float)C;
}

static void apply_plane(const bn_ctx *c, size_t p, const float abc[3])
{
    size_t off = p * (size_t)c->hw;
    if (c->hw < BN_TINY)
        bwd_apply_ref(c->x + off, c->yr ? c->yr + off : NULL, c->dy + off, c->hw, abc[0], abc[1],
                      abc[2], c->out + off);
    else
        c->k.bwd_apply(c->x + off, c->yr ? c->yr + off : NULL, c->dy + off, c->hw, abc[0],
                       abc[1], abc[2], c->out + off);
}

/* bwd_apply_ref on n planes of one value, channel j's constants at
 * A[j], B[j], C[j]. */
static void bwd_apply_row1_ref(const float *x, const float *yr, const float *dy, int rows,
                               size_t stride, size_t n, const float *A, const float *B, const float *C,
                               float *dx)
{
    for (int r = 0; r < rows; r++, x += stride, dy += stride, dx += stride, yr = yr ? yr + stride : NULL)
        for (size_t j = 0; j < n; j++) {
            float g = !yr || yr[j] > 0.0f ? dy[j] : 0.0f;
            dx[j] = A[j] * g - B[j] * x[j] + C[j];
        }
}

#if CPU_X86
static CPU_AVX2 void bwd_apply_row1_avx2(const float *x, const float *yr, const float *dy, int rows,
                                         size_t stride, size_t n, const float *A, const float *B,
                                         const float *C, float *dx)
{
    for (int r = 0; r < rows; r++, x += stride, dy += stride, dx += stride, yr = yr ? yr + stride : NULL) {
        size_t j = 0;
        for (; j + 8 <= n; j += 8) {
            __m256 g = dy_eff8(yr, dy, j);
            __m256 v = _mm256_sub_ps(_mm256_mul_ps(_mm256_loadu_ps(A + j), g),
                                     _mm256_mul_ps(_mm256_loadu_ps(B + j), _mm256_loadu_ps(x + j)));
            _mm256_storeu_ps(dx + j, _mm256_add_ps(v, _mm256_loadu_ps(C + j)));
        }
        for (; j < n; j++) {
            float g = !yr || yr[j] > 0.0f ? dy[j] : 0.0f;
            dx[j] = A[j] * g - B[j] * x[j] + C[j];
        }
    }
}
#endif

static void bwd_apply_row1(const float *x, const float *yr, const float *dy, int rows, size_t stride,
                           size_t n, const float *A, const float *B, const float *C, float *dx)
{
#if CPU_X86
    if (cpu_has_avx2()) {
        bwd_apply_row1_avx2(x, yr, dy, rows, stride, n, A, B, C, dx);
        return;
    }
#endif
    bwd_apply_row1_ref(x, yr, dy, rows, stride, n, A, B, C, dx);
}

/* dx of the channels [b0,e0) (one BN_BLOCK or BN_FLAT), their constants once. */
static void apply_block(const bn_ctx *c, size_t b0, size_t e0)
{
    float abc[BN_MAXB][3], A[BN_MAXB], B[BN_MAXB], C[BN_MAXB];
    for (size_t ch = b0; ch < e0; ch++) {
        apply_consts(c, ch, abc[ch - b0]);
        A[ch - b0] = abc[ch - b0][0];
        B[ch - b0] = abc[ch - b0][1];
        C[ch - b0] = abc[ch - b0][2];
    }
    if (c->hw == 1) {
        bwd_apply_row1(c->x + b0, c->yr ? c->yr + b0 : NULL, c->dy + b0, c->n, (size_t)c->c,
                       e0 - b0, A, B, C, c->out + b0);
        return;
    }
    for (int img = 0; img < c->n; img++) {
        size_t p = (size_t)img * (size_t)c->c;
        for (size_t ch = b0; ch < e0; ch++)
            apply_plane(c, p + ch, abc[ch - b0]);
    }
}

/* Items are channels: apply_block a block at a time (bn_bwd_apply on
 * planes under BN_SMALL floats). */
static void apply_channels(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    (void)chunk, (void)tid;
    for (size_t b0 = b, e0; b0 < e; b0 = e0) {
        e0 = block_end(vctx, b0, e);
        apply_block(vctx, b0, e0);
    }
}

static void bwd_apply_planes(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    (void)chunk, (void)tid;
    const bn_ctx *c = vctx;
    for (size_t p = b; p < e; p++) {
        float abc[3];
        apply_consts(c, p % (size_t)c->c, abc);
        apply_plane(c, p, abc);
    }
}

void cpu_bn_bwd_apply(cdl_backend *be, int n, int c, int hw, const float *x,
                      const float *y_relu, const float *dy, const float *saved,
                      const float *gamma, const float *sum_dy, const float *sum_dy_xhat,
                      float *dx)
{
    bn_ctx ctx = {.k = pick(), .n = n, .c = c, .hw = hw, .x = x, .yr = y_relu, .dy = dy,
                  .saved = saved, .gamma = gamma, .sdy = sum_dy, .sdyx = sum_dy_xhat, .out = dx};
    if (c > 0 && n > 0 && hw < BN_SMALL)
        run_channels(be, c, apply_channels, &ctx);
    else
        pool_for(cpu_pool(be), nplanes(n, c), plane_grain(hw), bwd_apply_planes, &ctx);
}

/* bn_train_bwd's items are channels, a block at a time (BN_BLOCK or BN_FLAT): the
 * block's sums, then (when out3 is not NULL) its dx, each as the pieces
 * compute it. out = dgamma, out2 = dbeta, out3 = dx. */
static void bwd_channels(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    (void)chunk, (void)tid;
    const bn_ctx *c = vctx;
    bn_ctx one = *c;
    one.sdy = c->out2;
    one.sdyx = c->out;
    one.out = c->out3;
    for (size_t b0 = b, e0; b0 < e; b0 = e0) {
        e0 = block_end(c, b0, e);
        bwd_sums_block(c, b0, e0);
        if (c->out3)
            apply_block(&one, b0, e0);
    }
}

void cpu_bn_train_bwd(cdl_backend *be, int n, int c, int hw, const float *x,
                      const float *y_relu, const float *dy, const float *saved,
                      const float *gamma, float *dgamma, float *dbeta, float *dx)
{
    bn_ctx ctx = {.k = pick(), .n = n, .c = c, .hw = hw, .x = x, .yr = y_relu, .dy = dy,
                  .saved = saved, .gamma = gamma, .out = dgamma, .out2 = dbeta, .out3 = dx};
    if (c > 0)
        run_channels(be, c, bwd_channels, &ctx);
}

void cpu_bn_fold(cdl_backend *be, int oc, int per_oc, const float *w, const float *b,
                 const float *running_mean, const float *running_var, float eps,
                 const float *gamma, const float *beta, float *w_out, float *b_out)
{
    (void)be;
    for (int o = 0; o < oc; o++) {
        float s = (float)((gamma ? gamma[o] : 1.0) / sqrt((double)running_var[o] + eps));
        for (int k = 0; k < per_oc; k++)
            w_out[(size_t)o * per_oc + k] = w[(size_t)o * per_oc + k] * s;
        b_out[o] = ((b ? b[o] : 0.0f) - running_mean[o]) * s + (beta ? beta[o] : 0.0f);
    }
}

/* ---- global average pooling: plane means and their adjoint. The
 * plain double sum on every CPU (a small op: one pass over the last
 * feature map), so the CUDA backend's matches it bit for bit. ---- */

static void gap_fwd_planes(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    (void)chunk, (void)tid;
    const bn_ctx *c = vctx;
    for (size_t p = b; p < e; p++)
        c->out[p] = (float)(sum_ref(c->x + p * (size_t)c->hw, c->hw) / c->hw);
}

static void gap_bwd_planes(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    (void)chunk, (void)tid;
    const bn_ctx *c = vctx;
    for (size_t p = b; p < e; p++) {
        float g = c->dy[p] / (float)c->hw;
        float *dx = c->out + p * (size_t)c->hw;
        for (int i = 0; i < c->hw; i++)
            dx[i] = g;
    }
}

void cpu_gap_fwd(cdl_backend *be, int n, int c, int hw, const float *x, float *y)
{
    bn_ctx ctx = {.k = pick(), .n = n, .c = c, .hw = hw, .x = x, .out = y};
    if (hw > 0)
        pool_for(cpu_pool(be), nplanes(n, c), plane_grain(hw), gap_fwd_planes, &ctx);
}

void cpu_gap_bwd(cdl_backend *be, int n, int c, int hw, const float *dy, float *dx)
{
    bn_ctx ctx = {.n = n, .c = c, .hw = hw, .dy = dy, .out = dx};
    if (hw > 0)
        pool_for(cpu_pool(be), nplanes(n, c), plane_grain(hw), gap_bwd_planes, &ctx);
}
