/* Softmax cross-entropy fused with its gradient, one sample per row of
 * (n,classes) logits, parallel over samples.
 *
 * loss_i = logsumexp(z_i) - z_i[label_i], computed as m + log(sum exp(z-m))
 * with m = max(z) so no exp overflows; dlogits = (softmax - onehot) * scale.
 * pred_i is the first index of the maximum (like torch.argmax). A negative
 * label is ignored (PyTorch's ignore_index): loss 0 and a zero dlogits row,
 * pred still written. A label >= classes gives a NaN loss (so the caller
 * notices) and no onehot term.
 *
 * With label smoothing eps the target is (1-eps) onehot + eps/classes:
 * loss_i = (1-eps) (logsumexp - z[label]) + eps (logsumexp - mean(z)), and
 * eps/classes more comes off every dlogit. eps = 0 runs exactly the plain
 * arithmetic (xent_fwd_bwd is this with eps = 0).
 *
 * With AVX2 the exponentials of a row (a GPT's 256-token vocabulary: every
 * position of every window is a row) are 8 at a time (cpu_exp8, summed per
 * lane in double) and the scaling is vectorised with the same two
 * products in the same order; the rest is the portable code.
 */
#include <math.h>

#include "kernels/cpu/cpu.h"
#include "kernels/cpu/simd.h"

/* dz[j] = e^(z[j] - m) for j < k; returns their sum (in double, in index
 * order; per lane then lane by lane on the AVX2 path). */
static double xent_exp_ref(const float *z, float m, float *dz, int k)
{
    double sum = 0.0;
    for (int j = 0; j < k; j++) {
        float ez = expf(z[j] - m);
        dz[j] = ez;
        sum += ez;
    }
    return sum;
}

static void xent_scale_ref(float *dz, int k, float inv, float scale)
{
    for (int j = 0; j < k; j++)
        dz[j] = dz[j] * inv * scale;
}

#if CPU_X86
static CPU_AVX2 double xent_exp_avx2(const float *z, float m, float *dz, int k)
{
    __m256 vm = _mm256_set1_ps(m);
    __m256d acc = _mm256_setzero_pd();
    int j = 0;
    for (; j + 8 <= k; j += 8) {
        __m256 e = cpu_exp8(_mm256_sub_ps(_mm256_loadu_ps(z + j), vm));
        _mm256_storeu_ps(dz + j, e);
        acc = cpu_acc8(acc, e);
    }
    return cpu_hsum4d(acc) + xent_exp_ref(z + j, m, dz + j, k - j);
}

static CPU_AVX2 void xent_scale_avx2(float *dz, int k, float inv, float scale)
{
    __m256 vi = _mm256_set1_ps(inv), vs = _mm256_set1_ps(scale);
    int j = 0;
    for (; j + 8 <= k; j += 8)
        _mm256_storeu_ps(dz + j, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(dz + j), vi), vs));
    xent_scale_ref(dz + j, k - j, inv, scale);
}
#endif

static double xent_exp(const float *z, float m, float *dz, int k)
{
#if CPU_X86
    if (cpu_has_avx2())
        return xent_exp_avx2(z, m, dz, k);
#endif
    return xent_exp_ref(z, m, dz, k);
}

static void xent_scale(float *dz, int k, float inv, float scale)
{
#if CPU_X86
    if (cpu_has_avx2()) {
        xent_scale_avx2(dz, k, inv, scale);
        return;
    }
#endif
    xent_scale_ref(dz, k, inv, scale);
}

typedef struct xent_ctx {
    int classes;
    const float *logits;
    const int32_t *labels;
    float grad_scale, eps;
    float *dlogits, *loss;
    int32_t *pred;
} xent_ctx;

static void xent_rows(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    (void)chunk;
    (void)tid;
    const xent_ctx *c = vctx;
    int k = c->classes;
    for (size_t i = b; i < e; i++) {
        const float *z = c->logits + i * (size_t)k;
        float *dz = c->dlogits + i * (size_t)k;
        int best = 0;
        float m = z[0];
        for (int j = 1; j < k; j++)
            if (z[j] > m) {
                m = z[j];
                best = j;
            }
        int32_t label = c->labels[i];
        c->pred[i] = best;
        if (label < 0) {
            for (int j = 0; j < k; j++)
                dz[j] = 0.0f;
            c->loss[i] = 0.0f;
            continue;
        }
        double sum = xent_exp(z, m, dz, k);
        float inv = (float)(1.0 / sum);
        float log_sum = (float)log(sum);
        xent_scale(dz, k, inv, c->grad_scale);
        if (c->eps != 0.0f) {
            float off = c->eps / (float)k * c->grad_scale;
            for (int j = 0; j < k; j++)
                dz[j] -= off;
        }
        if (label < k) {
            /* (m - z) first: exact for close values, no cancellation at large logits */
            c->loss[i] = (m - z[label]) + log_sum;
            if (c->eps != 0.0f) {
                double zsum = 0.0;
                for (int j = 0; j < k; j++)
                    zsum += m - z[j];
                float smooth = (float)(zsum / k) + log_sum;   /* logsumexp - mean(z) */
                c->loss[i] = (1.0f - c->eps) * c->loss[i] + c->eps * smooth;
                dz[label] -= (1.0f - c->eps) * c->grad_scale;
            } else {
                dz[label] -= c->grad_scale;
            }
        } else {
            c->loss[i] = NAN;
        }
    }
}

void cpu_xent_fwd_bwd(cdl_backend *be, int n, int classes, const float *logits,
                      const int32_t *labels, float grad_scale, float *dlogits,
                      float *sample_loss, int32_t *pred)
{
    cpu_xent_ls_fwd_bwd(be, n, classes, logits, labels, 0.0f, grad_scale, dlogits, sample_loss,
                        pred);
}

void cpu_xent_ls_fwd_bwd(cdl_backend *be, int n, int classes, const float *logits,
                         const int32_t *labels, float label_smoothing, float grad_scale,
                         float *dlogits, float *sample_loss, int32_t *pred)
{
    if (n <= 0 || classes <= 0)
        return;
    xent_ctx c = {classes, logits, labels, grad_scale, label_smoothing, dlogits, sample_loss, pred};
    size_t grain = (size_t)(CPU_ELT_GRAIN / 4 / classes) + 1;
    pool_for(cpu_pool(be), (size_t)n, grain, xent_rows, &c);
}
