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

/* pool2d.c */
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
void cpu_dropout_fwd(cdl_backend *be, size_t n, float p, uint64_t seed,
                     const float *x, float *y, uint8_t *mask);
void cpu_dropout_bwd(cdl_backend *be, size_t n, float p, const uint8_t *mask,
                     const float *dy, float *dx);

/* xent.c */
void cpu_xent_fwd_bwd(cdl_backend *be, int n, int classes, const float *logits,
                      const int32_t *labels, float grad_scale, float *dlogits,
                      float *sample_loss, int32_t *pred);

/* optim.c */
void cpu_sgd_step(cdl_backend *be, size_t n, float *p, const float *g,
                  float *momentum_buf, const cdl_sgd_hparams *hp);
void cpu_adam_step(cdl_backend *be, size_t n, float *p, const float *g,
                   float *m, float *v, const cdl_adam_hparams *hp);

/* reduce.c */
double cpu_sumsq(cdl_backend *be, const float *x, size_t n);

/* Elementwise ops split work into chunks of at least this many floats: below
 * it a wake-up costs more than the work. */
#define CPU_ELT_GRAIN 16384

/* Upper bound on worker threads (per-thread partials live in fixed arrays). */
#define CPU_MAX_THREADS 1024

#endif
