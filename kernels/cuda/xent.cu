/* Softmax cross-entropy fused with its gradient over (n,classes) logits,
 * one warp per sample.
 *
 * The same computation as the CPU backend (kernels/cpu/xent.c): m = max z,
 * e_j = expf(z_j - m), sum in double, dlogits = e * (1/sum) * scale minus
 * scale at the label, loss = (m - z_label) + log(sum); a negative label is
 * ignored (loss 0, dlogits row 0: PyTorch's ignore_index), a label >=
 * classes gives a NaN loss and no onehot term; pred is the first index
 * of the maximum (like torch.argmax). The lanes' sums are combined by a
 * butterfly, so every lane holds the same, reproducible value.
 *
 * Label smoothing eps (torch.nn.CrossEntropyLoss(label_smoothing=eps)):
 * the target is (1-eps) * onehot + eps/classes, so
 *   loss = (1-eps) * (lse - z_label) + eps * (lse - mean_j z_j),
 *   dlogits = (softmax - (1-eps) * onehot - eps/classes) * scale,
 * with lse = m + log(sum) and lse - mean z = mean (m - z_j) + log(sum)
 * summed in double, like the CPU; eps = 0 gives the plain loss bit for
 * bit.
 */
#include <limits.h>
#include <math.h>

#include "kernels/cuda/cuk.cuh"

#define XENT_THREADS 256
#define FULL_MASK 0xffffffffu

/* (m, best) of lane `other` replaces ours when its maximum is larger, or
 * equal at a smaller index. best == INT_MAX: the lane saw no element. */
static __device__ __forceinline__ void take_max(float *m, int *best, float om, int ob)
{
    if (ob == INT_MAX)
        return;
    if (*best == INT_MAX || om > *m || (om == *m && ob < *best)) {
        *m = om;
        *best = ob;
    }
}

static __global__ void __launch_bounds__(XENT_THREADS)
xent_kernel(int n, int k, const float *logits, const int32_t *labels, float *dlogits,
            float *loss, int32_t *pred, cuk_xent_sc sc, const cuk_xent_sc *dyn)
{
    int row = (int)((blockIdx.x * (size_t)blockDim.x + threadIdx.x) / 32);
    int lane = (int)(threadIdx.x & 31);
    if (row >= n)
        return;   /* whole warps leave together: row is uniform in a warp */
    cuk_xent_sc v = cuk_pick(sc, dyn);
    float scale = v.grad_scale, eps = v.smoothing;
    const float *z = logits + (size_t)row * k;
    float *dz = dlogits + (size_t)row * k;

    float m = -INFINITY;
    int best = INT_MAX;
    for (int j = lane; j < k; j += 32) {
        float v = z[j];
        if (best == INT_MAX || v > m) {
            m = v;
            best = j;
        }
    }
    for (int off = 16; off > 0; off >>= 1) {
        float om = __shfl_xor_sync(FULL_MASK, m, off);
        int ob = __shfl_xor_sync(FULL_MASK, best, off);
        take_max(&m, &best, om, ob);
    }

    int32_t label = labels[row];
    if (label < 0) {   /* ignored: uniform in the warp, so no shuffle is left waiting */
        for (int j = lane; j < k; j += 32)
            dz[j] = 0.0f;
        if (lane == 0) {
            loss[row] = 0.0f;
            pred[row] = best;
        }
        return;
    }

    /* e_j is made again in the last pass rather than stored here and read
     * back: the same float, one pass fewer over dlogits (with GPT-2's
     * 50257 classes the logits are 3.3 GB a step). zsum only with label
     * smoothing (eps is uniform in the warp). */
    double sum = 0.0, zsum = 0.0;
    for (int j = lane; j < k; j += 32)
        sum += expf(z[j] - m);
    if (eps != 0.0f)
        for (int j = lane; j < k; j += 32)
            zsum += m - z[j];
    for (int off = 16; off > 0; off >>= 1) {
        sum += __shfl_xor_sync(FULL_MASK, sum, off);
        zsum += __shfl_xor_sync(FULL_MASK, zsum, off);
    }

    float inv = (float)(1.0 / sum);
    float log_sum = (float)log(sum);
    float hit = eps == 0.0f ? scale : (1.0f - eps) * scale;
    float spread = eps == 0.0f ? 0.0f : eps / (float)k * scale;
    for (int j = lane; j < k; j += 32) {
        float g = expf(z[j] - m) * inv * scale;
        if (eps != 0.0f)
            g -= spread;
        if (j == label)
            g -= hit;
        dz[j] = g;
    }
    if (lane == 0) {
        float l = NAN;
        if (label < k) {
            l = (m - z[label]) + log_sum;
            if (eps != 0.0f) {
                float smooth = (float)(zsum / k) + log_sum;
                l = (1.0f - eps) * l + eps * smooth;
            }
        }
        loss[row] = l;
        pred[row] = best;
    }
}

extern "C" cudaError_t cuk_xent(cudaStream_t s, int n, int classes, const float *logits,
                                const int32_t *labels, float *dlogits, float *loss, int32_t *pred,
                                cuk_xent_sc sc, const cuk_xent_sc *dyn)
{
    unsigned rows_per_block = XENT_THREADS / 32;
    unsigned blocks = (unsigned)(((size_t)n + rows_per_block - 1) / rows_per_block);
    CUK_LAUNCH(xent_kernel, blocks, XENT_THREADS, s,
               n, classes, logits, labels, dlogits, loss, pred, sc, dyn);
    return cudaGetLastError();
}
