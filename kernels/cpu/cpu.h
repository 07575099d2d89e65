/* Internal interface of the CPU backend: one file per op family, all
 * registered in the ops table of backend_cpu.c. Pointers are host pointers.
 * Names start with cpu_ (never cdl_: only the public API is exported). */
#ifndef KERNELS_CPU_CPU_H
#define KERNELS_CPU_CPU_H

#include <cdl/cdl.h>

#include "kernels/cpu/pool.h"

typedef struct cpu_impl {
    pool *pool;
    int threads;
    int fast_conv;   /* cdl_backend_params.fast_conv: Winograd F(4x4) allowed (conv_use_wino) */
} cpu_impl;

static inline pool *cpu_pool(cdl_backend *be)
{
    return ((cpu_impl *)be->impl)->pool;
}

/* Rounds a float count up to whole 64-byte lines, so per-thread regions of a
 * workspace never share a cache line. */
static inline size_t cpu_align16(size_t floats)
{
    return (floats + 15) & ~(size_t)15;
}

/* conv2d.c */
size_t cpu_conv2d_workspace(cdl_backend *be, const cdl_conv2d_desc *d);
void cpu_conv2d_fwd(cdl_backend *be, const cdl_conv2d_desc *d, const float *x,
                    const float *w, const float *b, float *y, float *ws);
void cpu_conv2d_bwd(cdl_backend *be, const cdl_conv2d_desc *d, const float *x,
                    const float *w, const float *dy, float *dx, float *dw,
                    float *db, float *ws);

/* linear.c */
size_t cpu_linear_workspace(cdl_backend *be, int n, int in, int out);
void cpu_linear_fwd(cdl_backend *be, int n, int in, int out, const float *x,
                    const float *w, const float *b, float *y, float *ws);
void cpu_linear_bwd(cdl_backend *be, int n, int in, int out, const float *x,
                    const float *w, const float *dy, float *dx, float *dw,
                    float *db, float *ws);
void cpu_linear_act_fwd(cdl_backend *be, int n, int in, int out, const float *x,
                        const float *w, const float *b, cdl_act act, float alpha, float *y,
                        float *ay, float *ws);
void cpu_linear_add_fwd(cdl_backend *be, int n, int in, int out, const float *x,
                        const float *w, const float *b, const float *r, float *y, float *ws);
void cpu_linear_act_bwd(cdl_backend *be, int n, int in, int out, const float *x,
                        const float *w, const float *dy, cdl_act act, float alpha,
                        const float *ax, float *dx, float *dw, float *db, float *ws);
void cpu_linear_act_grad_fwd(cdl_backend *be, int n, int in, int out, const float *x,
                             const float *w, const float *b, cdl_act act, float alpha, float *g,
                             float *ay, float *ws);
void cpu_linear_mul_bwd(cdl_backend *be, int n, int in, int out, const float *x, const float *w,
                        const float *dy, const float *g, float *dx, float *dw, float *db,
                        float *ws);

/* pool2d.c */
/* Which maxpool forward runs for d on this CPU, for the tests: "plain"
 * (maxpool_fwd_planes, the definition), "2x2/2 avx512", "3x3/2/1 avx512"
 * or "3x3/2/1 avx2". */
const char *cpu_maxpool_fwd_path(const cdl_pool2d_desc *d);
void cpu_maxpool_fwd(cdl_backend *be, const cdl_pool2d_desc *d, const float *x,
                     float *y, int32_t *argmax);
void cpu_maxpool_bwd(cdl_backend *be, const cdl_pool2d_desc *d, const float *dy,
                     const int32_t *argmax, float *dx);
void cpu_avgpool_fwd(cdl_backend *be, const cdl_pool2d_desc *d, const float *x, float *y);
void cpu_avgpool_bwd(cdl_backend *be, const cdl_pool2d_desc *d, const float *dy, float *dx);

/* eltwise.c */
void cpu_fill(cdl_backend *be, float *x, float value, size_t n);
void cpu_scale(cdl_backend *be, float *x, float a, size_t n);
void cpu_relu_fwd(cdl_backend *be, size_t n, const float *x, float *y);
void cpu_relu_bwd(cdl_backend *be, size_t n, const float *y, const float *dy, float *dx);
void cpu_add_relu(cdl_backend *be, size_t n, const float *a, const float *b, float *y);
void cpu_relu_bwd_split(cdl_backend *be, size_t n, const float *y, const float *dy, float *dx,
                        float *dx2, int accumulate);
void cpu_relu_bwd_split_add(cdl_backend *be, size_t n, const float *y, const float *dy,
                            const float *dy2, float *dx, float *dx2, int accumulate);
void cpu_dropout_fwd(cdl_backend *be, size_t n, float p, uint64_t seed,
                     const float *x, float *y, uint8_t *mask);
void cpu_dropout_bwd(cdl_backend *be, size_t n, float p, const uint8_t *mask,
                     const float *dy, float *dx);

/* xent.c */
void cpu_xent_fwd_bwd(cdl_backend *be, int n, int classes, const float *logits,
                      const int32_t *labels, float grad_scale, float *dlogits,
                      float *sample_loss, int32_t *pred);

void cpu_xent_ls_fwd_bwd(cdl_backend *be, int n, int classes, const float *logits,
                         const int32_t *labels, float label_smoothing, float grad_scale,
                         float *dlogits, float *sample_loss, int32_t *pred);

/* bnorm.c: batch norm pieces and global average pooling */
void cpu_bn_sum(cdl_backend *be, int n, int c, int hw, const float *x, float *sum);
void cpu_bn_sqdev(cdl_backend *be, int n, int c, int hw, const float *x, const float *sum,
                  float *sqdev);
void cpu_bn_apply(cdl_backend *be, int n, int c, int hw, const float *x, const float *sum,
                  const float *sqdev, float eps, const float *gamma, const float *beta,
                  int relu, float *y, float *saved);
void cpu_bn_train_fwd(cdl_backend *be, int n, int c, int hw, const float *x, float eps,
                      const float *gamma, const float *beta, int relu, float *y, float *sum,
                      float *sqdev, float *saved);
void cpu_bn_train_fwd_add_relu(cdl_backend *be, int n, int c, int hw, const float *x, float eps,
                               const float *gamma, const float *beta, const float *res, float *y,
                               float *sum, float *sqdev, float *saved);
void cpu_bn_train_bwd(cdl_backend *be, int n, int c, int hw, const float *x,
                      const float *y_relu, const float *dy, const float *saved,
                      const float *gamma, float *dgamma, float *dbeta, float *dx);
void cpu_bn_running(cdl_backend *be, int c, const float *sum, const float *sqdev,
                    float momentum, float *running_mean, float *running_var,
                    float *num_batches_tracked);
void cpu_bn_eval(cdl_backend *be, int n, int c, int hw, const float *x,
                 const float *running_mean, const float *running_var, float eps,
                 const float *gamma, const float *beta, int relu, float *y);
void cpu_bn_bwd_sums(cdl_backend *be, int n, int c, int hw, const float *x,
                     const float *y_relu, const float *dy, const float *saved,
                     float *dgamma, float *dbeta);
void cpu_bn_bwd_apply(cdl_backend *be, int n, int c, int hw, const float *x,
                      const float *y_relu, const float *dy, const float *saved,
                      const float *gamma, const float *sum_dy, const float *sum_dy_xhat,
                      float *dx);
void cpu_bn_fold(cdl_backend *be, int oc, int per_oc, const float *w, const float *b,
                 const float *running_mean, const float *running_var, float eps,
                 const float *gamma, const float *beta, float *w_out, float *b_out);
/* The plane sums of batch norm (the AVX2 kernels where the CPU has them),
 * which layernorm's row statistics share: sum of x, and sum of (x -
 * mean)^2, in double. */
double cpu_plane_sum(const float *x, int n);
double cpu_plane_sqdev(const float *x, int n, float mean);
void cpu_gap_fwd(cdl_backend *be, int n, int c, int hw, const float *x, float *y);
void cpu_gap_bwd(cdl_backend *be, int n, int c, int hw, const float *dy, float *dx);

/* act.c */
void cpu_act_fwd(cdl_backend *be, cdl_act act, float alpha, size_t n, const float *x, float *y);
void cpu_act_bwd(cdl_backend *be, cdl_act act, float alpha, size_t n, const float *x,
                 const float *y, const float *dy, float *dx);
/* Elements [b, e) of the same, on the calling thread (a fused product's
 * rows); the bits of act_fwd/act_bwd where b and e are multiples of 16
 * (no chunk tails). */
void cpu_act_fwd_range(cdl_act act, float alpha, const float *x, float *y, size_t b, size_t e);
void cpu_act_bwd_range(cdl_act act, float alpha, const float *x, const float *y, const float *dy,
                       float *dx, size_t b, size_t e);
/* The GELUs (CDL_ACT_GELU, CDL_ACT_GELU_TANH) with their backward's
 * factor kept: on entry g holds x; on return y = act(x) and g the factor
 * act_bwd would multiply dy by at x, each with act_fwd's and act_bwd's
 * bits; act_mul is that backward from the kept factor, dx = dy * g (dx may
 * alias dy). */
void cpu_act_grad_fwd(cdl_backend *be, cdl_act act, float alpha, size_t n, float *g, float *y);
void cpu_act_grad_fwd_range(cdl_act act, float alpha, float *g, float *y, size_t b, size_t e);
void cpu_act_mul(cdl_backend *be, size_t n, const float *g, const float *dy, float *dx);
void cpu_act_mul_range(const float *g, const float *dy, float *dx, size_t b, size_t e);

/* join.c */
void cpu_add(cdl_backend *be, size_t n, const float *a, const float *b, float *y);
/* Elements [begin, end) of add, on the calling thread (a fused product's rows). */
void cpu_add_range(const float *a, const float *b, float *y, size_t begin, size_t end);
void cpu_accumulate(cdl_backend *be, size_t n, const float *src, float *dst);
void cpu_channel_copy(cdl_backend *be, int n, int c, int hw, const float *src, int src_c,
                      int src_off, float *dst, int dst_c, int dst_off, int accumulate);

/* layernorm.c */
void cpu_layernorm_fwd(cdl_backend *be, int rows, int d, const float *x, const float *gamma,
                       const float *beta, float eps, float *y, float *saved);
void cpu_layernorm_bwd(cdl_backend *be, int rows, int d, const float *x, const float *gamma,
                       const float *saved, const float *dy, float *dx, float *dgamma,
                       float *dbeta);
void cpu_layernorm_bwd_acc(cdl_backend *be, int rows, int d, const float *x, const float *gamma,
                           const float *saved, const float *dy, float *dx, float *dgamma,
                           float *dbeta);

/* embedding.c: token embedding and the broadcast add of positions */
void cpu_embedding_fwd(cdl_backend *be, int rows, int d, const float *ids, const float *w,
                       float *y);
void cpu_embedding_bwd(cdl_backend *be, int rows, int d, int vocab, const float *ids,
                       const float *dy, float *dw);
void cpu_bcast_add_fwd(cdl_backend *be, int n, size_t m, const float *x, const float *b,
                       float *y);
void cpu_bcast_add_bwd(cdl_backend *be, int n, size_t m, const float *dy, float *db);

/* optim.c */
void cpu_sgd_step(cdl_backend *be, size_t n, float *p, const float *g,
                  float *momentum_buf, const cdl_sgd_hparams *hp);
void cpu_adam_step(cdl_backend *be, size_t n, float *p, const float *g,
                   float *m, float *v, const cdl_adam_hparams *hp);

/* attn.c: causal multi-head self-attention (backend.h). The table's entries
 * are the fast path (blocked SGEMM + fused softmax); cpu_attn_ref_* are the
 * plain loops of the definition, kept for the tests. ws: attn_workspace. */
size_t cpu_attn_workspace(cdl_backend *be, int n, int T, int C, int nh);
void cpu_attn_fwd(cdl_backend *be, int n, int T, int C, int nh, const float *qkv, float *y,
                  float *lse, float *ws);
void cpu_attn_bwd(cdl_backend *be, int n, int T, int C, int nh, const float *qkv,
                  const float *y, const float *lse, const float *dy, float *dqkv, float *ws);
void cpu_attn_ref_fwd(cdl_backend *be, int n, int T, int C, int nh, const float *qkv,
                      float *y, float *lse, float *ws);
void cpu_attn_ref_bwd(cdl_backend *be, int n, int T, int C, int nh, const float *qkv,
                      const float *y, const float *lse, const float *dy, float *dqkv,
                      float *ws);

/* reduce.c */
double cpu_sumsq(cdl_backend *be, const float *x, size_t n);

/* Elementwise ops split work into chunks of at least this many floats: below
 * it a wake-up costs more than the work. */
#define CPU_ELT_GRAIN 16384

/* Upper bound on worker threads (per-chunk partials live in fixed arrays). */
#define CPU_MAX_THREADS 512

#endif
