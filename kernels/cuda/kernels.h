/* Launchers of cdl's own CUDA kernels (the .cu files here), callable from C.
 *
 * Each launcher enqueues its kernel(s) on stream s and returns the launch
 * status (cudaGetLastError), which the caller checks (check.c). Pointers are
 * device pointers. Sizes are element counts.
 *
 * Scalars that may change from one training step to the next (learning
 * rate, dropout seed, ...) travel in a small struct passed by value `sc`,
 * plus `dyn`: NULL, or a device copy of the same struct that the kernel reads
 * instead. A CUDA graph replays kernels with the arguments they were captured
 * with, so under graph replay the per-step values must come from device
 * memory (graph.c uploads them at the start of each replay).
 */
#ifndef CDL_KERNELS_CUDA_KERNELS_H
#define CDL_KERNELS_CUDA_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include <cdl/backend.h>

#include "kernels/optim_scalars.h"

#ifdef __cplusplus
extern "C" {
#endif

/* fill: x = value; scale: x *= value. */
typedef struct cuk_val_sc {
    float value;
} cuk_val_sc;

/* Inverted dropout: keep draws cdl_dropout_keep(seed, i, p); kept elements
 * are multiplied by scale = 1/(1-p) (0 when p >= 1: everything dropped). */
typedef struct cuk_drop_sc {
    uint64_t seed;
    float p, scale;
} cuk_drop_sc;

/* smoothing: label smoothing eps in [0,1] (0: the plain loss). */
typedef struct cuk_xent_sc {
    float grad_scale;
    float smoothing;
} cuk_xent_sc;

/* torch.optim.SGD / Adam / AdamW, see optim.cu: the same scalars as the CPU
 * backend's, from kern_sgd_scalars() / kern_adam_scalars(). */
typedef kern_sgd_sc cuk_sgd_sc;
typedef kern_adam_sc cuk_adam_sc;

/* eltwise.cu */
cudaError_t cuk_fill(cudaStream_t s, float *x, size_t n, cuk_val_sc sc, const cuk_val_sc *dyn);
cudaError_t cuk_scale(cudaStream_t s, float *x, size_t n, cuk_val_sc sc, const cuk_val_sc *dyn);
cudaError_t cuk_relu_fwd(cudaStream_t s, size_t n, const float *x, float *y);
cudaError_t cuk_relu_bwd(cudaStream_t s, size_t n, const float *y, const float *dy, float *dx);
cudaError_t cuk_dropout_fwd(cudaStream_t s, size_t n, const float *x, float *y, uint8_t *mask,
                            cuk_drop_sc sc, const cuk_drop_sc *dyn);
cudaError_t cuk_dropout_bwd(cudaStream_t s, size_t n, const uint8_t *mask, const float *dy,
                            float *dx, cuk_drop_sc sc, const cuk_drop_sc *dyn);

/* bias.cu. NCHW: y is (n,c,plane), b is (c). Rows: y is (rows,cols), b is
 * (cols). bias_grad_nchw uses up to max_partials floats of scratch in
 * partials; both gradients are sums in an order fixed by the shape. */
cudaError_t cuk_bias_add_nchw(cudaStream_t s, float *y, const float *b, int n, int c, int plane);
cudaError_t cuk_bias_add_rows(cudaStream_t s, float *y, const float *b, int rows, int cols);
cudaError_t cuk_bias_grad_nchw(cudaStream_t s, const float *dy, float *db, int n, int c,
                               int plane, float *partials, size_t max_partials);
cudaError_t cuk_bias_grad_rows(cudaStream_t s, const float *dy, float *db, int rows, int cols);

/* pool.cu: semantics of backend.h and the CPU backend (padding ignored by
 * max pooling, first maximum on ties, NaN wins; average counts padding).
 * Backward passes gather per input element in a fixed order: no atomics. */
cudaError_t cuk_maxpool_fwd(cudaStream_t s, cdl_pool2d_desc d, const float *x, float *y,
                            int32_t *argmax);
cudaError_t cuk_maxpool_bwd(cudaStream_t s, cdl_pool2d_desc d, const float *dy,
                            const int32_t *argmax, float *dx);
cudaError_t cuk_avgpool_fwd(cudaStream_t s, cdl_pool2d_desc d, const float *x, float *y);
cudaError_t cuk_avgpool_bwd(cudaStream_t s, cdl_pool2d_desc d, const float *dy, float *dx);

/* xent.cu: softmax cross-entropy fused with its gradient, one warp per row. */
cudaError_t cuk_xent(cudaStream_t s, int n, int classes, const float *logits,
                     const int32_t *labels, float *dlogits, float *loss, int32_t *pred,
                     cuk_xent_sc sc, const cuk_xent_sc *dyn);

/* optim.cu. momentum_buf may be NULL when momentum is 0. hold: device
 * int, nonzero = leave p and the state as they are (backend.h's
 * hold_updates); cuk_hold sets *hold to 1 when (float)sqrt(*sq) is not
 * finite, and leaves it as it is otherwise. */
cudaError_t cuk_sgd(cudaStream_t s, size_t n, float *p, const float *g, float *momentum_buf,
                    const int *hold, cuk_sgd_sc sc, const cuk_sgd_sc *dyn);
cudaError_t cuk_adam(cudaStream_t s, size_t n, float *p, const float *g, float *m, float *v,
                     const int *hold, cuk_adam_sc sc, const cuk_adam_sc *dyn);
cudaError_t cuk_hold(cudaStream_t s, const double *sq, int *hold);

/* act.cu: activations, kind a cdl_act (PyTorch's formulas, backend.h).
 * alpha is leaky ReLU's negative slope (unused by the others). The
 * backward pass reads x or y as cuk_act_bwd_reads(kind) says ('x' or 'y');
 * the other may be NULL. */
int cuk_act_bwd_reads(int kind);
cudaError_t cuk_act_fwd(cudaStream_t s, int kind, size_t n, float alpha, const float *x,
                        float *y);
cudaError_t cuk_act_bwd(cudaStream_t s, int kind, size_t n, float alpha, const float *x,
                        const float *y, const float *dy, float *dx);
/* y = a + b; dst += src (bit for bit the CPU's). */
cudaError_t cuk_add(cudaStream_t s, size_t n, const float *a, const float *b, float *y);
cudaError_t cuk_accumulate(cudaStream_t s, size_t n, float *dst, const float *src);

/* chan.cu. Global average pooling over rows (n*c) planes of `plane` floats:
 * y (rows) = plane sums (in sequence, in double) / plane; dx = dy / plane. */
cudaError_t cuk_gap_fwd(cudaStream_t s, size_t rows, int plane, const float *x, float *y);
cudaError_t cuk_gap_bwd(cudaStream_t s, size_t rows, int plane, const float *dy, float *dx);
/* outer blocks of inner floats: dst[o*dst_stride + j] = src[o*src_stride + j],
 * or += with accumulate (channel concat and split of NCHW tensors). */
cudaError_t cuk_strided_copy(cudaStream_t s, size_t outer, size_t inner, float *dst,
                             size_t dst_stride, const float *src, size_t src_stride,
                             int accumulate);
/* Batch norm's per-channel sums over (n,c,plane) (backend.h's bn_sum,
 * bn_sqdev, bn_bwd_sums), in double, in an order fixed by the shape:
 *   CUK_CHAN_SUM   out0 (c+1) = sum x, then out0[c] = n*plane (the count);
 *   CUK_CHAN_SQDEV out0 (c) = sum (x - mean)^2, mean = stats[ch]/stats[c]
 *                  (stats: bn_sum's sums);
 *   CUK_CHAN_BWD   out0 (c) = invstd * sum g*(x - mean) (dgamma), out1 (c) =
 *                  sum g (dbeta), g = dy, zero where relu_y (NULL: none) is
 *                  not positive; stats is bn_apply's saved (mean, invstd).
 * partials holds max_partials doubles (at least 2*c). */
enum { CUK_CHAN_SUM, CUK_CHAN_SQDEV, CUK_CHAN_BWD };
cudaError_t cuk_chan_sums(cudaStream_t s, int mode, const float *x, const float *dy,
                          const float *relu_y, const float *stats, int n, int c, int plane,
                          float *out0, float *out1, double *partials, size_t max_partials);

/* bn.cu: batch norm's passes, as backend.h's bn_apply (saved: 2c+1),
 * bn_eval, bn_bwd_apply, bn_running, bn_fold. coef is scratch of 3c floats
 * for the per-channel constants. */
cudaError_t cuk_bn_apply(cudaStream_t s, int n, int c, int plane, const float *x,
                         const float *sum, const float *sqdev, float eps, const float *gamma,
                         const float *beta, int relu, float *y, float *saved, float *coef);
cudaError_t cuk_bn_eval(cudaStream_t s, int n, int c, int plane, const float *x,
                        const float *running_mean, const float *running_var, float eps,
                        const float *gamma, const float *beta, int relu, float *y, float *coef);
cudaError_t cuk_bn_bwd_apply(cudaStream_t s, int n, int c, int plane, const float *x,
                             const float *relu_y, const float *dy, const float *saved,
                             const float *gamma, const float *sum_dy, const float *sum_dy_xhat,
                             float *dx, float *coef);
cudaError_t cuk_bn_running(cudaStream_t s, int c, const float *sum, const float *sqdev,
                           float momentum, float *running_mean, float *running_var,
                           float *num_batches_tracked);
cudaError_t cuk_bn_fold(cudaStream_t s, int oc, int per_oc, const float *w, const float *b,
                        const float *running_mean, const float *running_var, float eps,
                        const float *gamma, const float *beta, float *w_out, float *b_out);

/* attn.cu: causal multi-head self-attention, backend.h's attn_* (ws:
 * cuk_attn_workspace floats). cuk_attn_flash says which path runs: the
 * flash-style kernels (nothing T x T stored) for T > CUK_ATTN_NAIVE_MAX_T
 * and head sizes up to CUK_ATTN_FLASH_HD; else the straightforward one
 * with the T x T scores of every (sample, head) in ws. */
#define CUK_ATTN_NAIVE_MAX_T 128
#define CUK_ATTN_FLASH_HD 64
int cuk_attn_flash(int T, int hd);
size_t cuk_attn_workspace(int n, int T, int C, int nh);
cudaError_t cuk_attn_fwd(cudaStream_t s, int n, int T, int C, int nh, const float *qkv,
                         float *y, float *lse, float *ws);
cudaError_t cuk_attn_bwd(cudaStream_t s, int n, int T, int C, int nh, const float *qkv,
                         const float *y, const float *lse, const float *dy, float *dqkv,
                         float *ws);

/* attn_bf16.cu: the same ops on tensor cores in bf16 (fp32 in and out,
 * bf16 tiles, fp32 accumulation and softmax statistics), for the head
 * sizes cuk_attn_bf16 accepts (16, 32, 64; any T). mma = 0: the kernels on
 * nvcuda::wmma; 1: those on mma.sync (mma.cuh; CDL_ATTN_KERNEL=mma). A
 * backward must take the kernels of its forward. The backward's ws holds
 * n*nh*T floats (D). */
int cuk_attn_bf16(int T, int hd);
cudaError_t cuk_attn_bf16_fwd(cudaStream_t s, int mma, int n, int T, int C, int nh,
                              const float *qkv, float *y, float *lse);
cudaError_t cuk_attn_bf16_bwd(cudaStream_t s, int mma, int n, int T, int C, int nh,
                              const float *qkv, const float *y, const float *lse, const float *dy,
                              float *dqkv, float *ws);

/* bf16.cu: y1 (n1) = x1 and y2 (n2) = x2 rounded to bf16 (nearest, ties to
 * even; NaN stays NaN), as the 16 bits cuBLAS reads as CUDA_R_16BF. One
 * launch for both ranges; n2 may be 0 (x2, y2 unused). */
cudaError_t cuk_to_bf16(cudaStream_t s, size_t n1, const float *x1, uint16_t *y1, size_t n2,
                        const float *x2, uint16_t *y2);
/* bf16.cu, rows padded to ld (>= cols) for aligned products: y (rows, ld)
 * = x (rows, cols) rounded to bf16, columns cols..ld-1 zero; and dst
 * (rows, cols) = the first cols columns of src (rows, ld), fp32. */
cudaError_t cuk_to_bf16_rows(cudaStream_t s, size_t rows, int cols, int ld, const float *x,
                             uint16_t *y);
cudaError_t cuk_copy_rows(cudaStream_t s, size_t rows, int cols, int ld, const float *src,
                          float *dst);

/* reduce.cu: *out = sum x[i]^2 in double, in a fixed order that depends on
 * n only (acc: *out += that sum). partials holds CUK_SUMSQ_BLOCKS doubles.
 * clip_scale: backend.h's clip_scale (x *= the clip coefficient of the
 * squared norm *sq, when below 1). */
#define CUK_SUMSQ_BLOCKS 256
cudaError_t cuk_sumsq(cudaStream_t s, const float *x, size_t n, double *partials, double *out,
                      int acc);
cudaError_t cuk_clip_scale(cudaStream_t s, float *x, size_t n, const double *sq, float max_norm);

/* layernorm.cu: backend.h's layernorm_fwd/bwd (saved: mean, rstd per row;
 * gamma/beta NULL = 1/0; dx, dgamma, dbeta NULL = not wanted). */
cudaError_t cuk_layernorm_fwd(cudaStream_t s, int rows, int d, const float *x,
                              const float *gamma, const float *beta, float eps, float *y,
                              float *saved);
cudaError_t cuk_layernorm_bwd(cudaStream_t s, int rows, int d, const float *x,
                              const float *gamma, const float *saved, const float *dy, float *dx,
                              float *dgamma, float *dbeta);

/* embed.cu: backend.h's embedding_fwd/bwd (the backward adds into dw, each
 * element in row order; order: rows ints of scratch) and bcast_add_fwd/bwd. */
cudaError_t cuk_embedding_fwd(cudaStream_t s, int rows, int d, const float *ids, const float *w,
                              float *y);
cudaError_t cuk_embedding_bwd(cudaStream_t s, int rows, int d, const float *ids, const float *dy,
                              float *dw, int *order);
cudaError_t cuk_bcast_add_fwd(cudaStream_t s, int n, size_t m, const float *x, const float *b,
                              float *y);
cudaError_t cuk_bcast_add_bwd(cudaStream_t s, int n, size_t m, const float *dy, float *db);

#ifdef __cplusplus
}
#endif
#endif
