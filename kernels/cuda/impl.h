/* Internals of the CUDA backend shared by its .c files: the backend state,
 * the check wrappers, the conv2d plan cache and the step-graph recorder.
 * Nothing here is exported (no cdl_ prefix). */
#ifndef CDL_KERNELS_CUDA_IMPL_H
#define CDL_KERNELS_CUDA_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* cublasLt.h declares cublasLtLoggerForceDisable() without a prototype. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <cublasLt.h>
#pragma GCC diagnostic pop
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <cdl/cdl.h>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/kernels.h"

/* ------------------------------------------------------------ conv plans */

/* Descriptors and algorithms for one conv2d shape (conv.c). */
typedef struct conv_plan {
    cdl_conv2d_desc d;
    int tf32;
    uint64_t last_use;
    cudnnTensorDescriptor_t x, y;
    cudnnFilterDescriptor_t w;
    /* One convolution descriptor per direction: each carries the math type
     * (TF32 or strict FP32) of the algorithm chosen for it. */
    cudnnConvolutionDescriptor_t fwd_conv, bwd_data_conv, bwd_filter_conv;
    cudnnConvolutionFwdAlgo_t fwd;
    cudnnConvolutionBwdDataAlgo_t bwd_data;
    cudnnConvolutionBwdFilterAlgo_t bwd_filter;
    cudnnMathType_t fwd_math, bwd_data_math, bwd_filter_math;
    size_t fwd_bytes, bwd_data_bytes, bwd_filter_bytes;
    size_t ws_floats;   /* what conv2d_workspace reports: the largest of the three */
    size_t room;        /* bytes of workspace the algorithms were chosen to fit */
} conv_plan;

/* Plans are created once per shape and reused; the least recently used one
 * is replaced when the cache is full (models have far fewer shapes). */
#define CONV_CACHE_SIZE 64

/* ------------------------------------------------------ cuBLASLt plans */

/* One linear-layer product with a bias epilogue (linear.c): what picks
 * the descriptors and the algorithm. Pointer alignments are part of it:
 * cuBLASLt chooses algorithms for the alignment it is told. */
typedef struct lt_key {
    int epilogue;             /* CUBLASLT_EPILOGUE_BIAS or _BGRADB */
    int bf16, tf32;           /* input type; TF32 compute for fp32 inputs */
    int ta, tb;               /* cublasOperation_t of A and B */
    int m, n, k, lda, ldb, ldd;
    int align[4];             /* bytes: A, B, D, bias (a power of two, at most 256) */
} lt_key;

typedef struct lt_plan {
    lt_key key;
    int ok;                   /* 0: cuBLASLt refused this product: the cuBLAS path */
    uint64_t last_use;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, d;
    cublasLtMatmulAlgo_t algo;
} lt_plan;

/* Plans made once per shape, like conv plans (a GPT has a handful). */
#define LT_CACHE_SIZE 64

/* cuBLAS's workspace, which cuBLASLt shares (same stream, in turn):
 * NVIDIA recommends 32 MiB on Hopper. A fixed one keeps results
 * deterministic and lets cuBLAS run inside CUDA graphs. */
#define BLAS_WS_BYTES ((size_t)32 << 20)

/* ----------------------------------------------------------- step graphs */

typedef enum graph_mode { GRAPH_OFF, GRAPH_CAPTURE, GRAPH_REPLAY } graph_mode;

/* Bytes of per-step scalars one captured step may carry (graph.c). */
#define GRAPH_SCALAR_BYTES 8192
/* Ops one captured step may hold. */
#define GRAPH_MAX_OPS 4096
/* Host copies of the scalar block in flight: the host fills the next one
 * while earlier launches still upload theirs. */
#define GRAPH_RING 4

/* Captured steps a backend keeps, by key: a training step with
 * --accum-steps has up to three kinds of micro-batch (the first, a middle
 * one, the last), each its own graph; the least recently used one goes. */
#define GRAPH_SLOTS 4

typedef struct graph_slot {
    int have;                 /* exec holds the graph of `key` */
    int broken;               /* a replay diverged: recapture next time */
    uint64_t key;
    cudaGraphExec_t exec;
    uint64_t *sigs;           /* GRAPH_MAX_OPS op signatures in capture order */
    int nsigs;                /* captured ops */
    unsigned long used;       /* clock of its last begin (LRU) */
} graph_slot;

typedef struct step_graph {
    graph_mode mode;
    graph_slot slots[GRAPH_SLOTS];
    int cur;                  /* the slot of the open step */
    unsigned long clock;
    int pos;                  /* replay position */
    unsigned char *ring;      /* pinned, GRAPH_RING blocks of GRAPH_SCALAR_BYTES */
    cudaEvent_t uploaded[GRAPH_RING];
    int recorded[GRAPH_RING]; /* uploaded[i] was recorded */
    unsigned slot;            /* ring block of the current step */
    unsigned char *host_scalars;   /* = ring + slot * GRAPH_SCALAR_BYTES */
    unsigned char *dev_scalars;    /* what the kernels read */
    size_t scalars_used;
} step_graph;

/* ------------------------------------------------------------- backend */

/* Scratch of the conv2d bias gradient (bias.cu): 64 image groups of 4096
 * channels; wider layers use fewer groups. */
#define CBE_BIAS_PARTIALS ((size_t)64 * 4096)
/* Scratch of batch norm's per-channel sums (chan.cu), in doubles: two sums
 * of 4096 channels over 32 image groups; wider layers use fewer groups. */
#define CBE_CHAN_PARTIALS ((size_t)2 * 32 * 4096)
/* Op names kept for fault reports (check.c). */
#define CBE_RECENT 8

/* One weight matrix's bf16 copy (bf16_cache.c). */
typedef struct cbe_bf16_entry {
    const float *w;           /* the fp32 weight (device), the key with n */
    size_t n;
    uint16_t *bf;             /* n bf16 values (cudaMalloc) */
} cbe_bf16_entry;

typedef struct cbe {
    int device;
    char gpu_name[256];
    int cc_major, cc_minor;
    unsigned char uuid[16];   /* cudaDeviceProp.uuid: names the GPU across processes */
    cudaStream_t stream;      /* every op runs here, in order */
    cudaStream_t copy_stream; /* cuda_backend_prefetch */
    cudaEvent_t copy_done;
    cudaEvent_t marks[CUDA_BACKEND_MARKS];   /* cuda_backend_mark */
    cublasHandle_t blas;
    cudnnHandle_t dnn;
    /* cuBLASLt for linear layers' products with a bias epilogue (linear.c);
     * NULL when CDL_CUBLASLT=0 or cublasLtCreate failed. */
    cublasLtHandle_t lt;
    int lt_said;              /* a fallback to cuBLAS was reported */
    lt_plan lt_plans[LT_CACHE_SIZE];
    int nlt;
    uint64_t lt_clock;
    void *blas_ws;            /* cuBLAS workspace (fixed: deterministic, capturable) */
    double *sumsq_dev;        /* CUK_SUMSQ_BLOCKS partials, then the result */
    double *sumsq_host;       /* pinned */
    int *hold_dev;            /* nonzero: sgd_step, adam_step change nothing (hold_updates) */
    float *bias_partials;     /* CBE_BIAS_PARTIALS floats for conv2d bias gradients */
    double *chan_partials;    /* CBE_CHAN_PARTIALS doubles for batch norm's channel sums */
    int *emb_order;           /* embedding_bwd's rows sorted by id (ops_seq.c), emb_cap ints */
    size_t emb_cap;
    int tf32_conv, tf32_matmul;
    int precision;            /* cdl_precision of linear layers' matrix products */
    int attn_mma;             /* bf16 attention on the mma.sync kernels (CDL_ATTN_KERNEL=mma) */
    cbe_bf16_entry *bf16;     /* bf16 weight cache (bf16_cache.c) */
    size_t nbf16, cap_bf16;
    conv_plan plans[CONV_CACHE_SIZE];
    int nplans;
    uint64_t plan_clock;
    struct cbe_block *blocks; /* live allocations of alloc(), by address (memory.c) */
    size_t nblocks, cap_blocks;
    int log_cudnn;            /* the log list (CDL_LOG) has cudnn: print each conv plan */
    int log_cuda;             /* ... has cuda: print how host threads wait */
    int packed;               /* replicas sharing this GPU (CDL_REPLICAS_PER_GPU) */
    /* The names of the last ops issued (a ring; ops counts all of them): an
     * asynchronous fault surfaces at a later call, these are the suspects. */
    const char *recent[CBE_RECENT];
    unsigned long ops;
    step_graph graph;
    int failed;               /* err holds the first failure since the last sync */
    char err[1536];
} cbe;

static inline cbe *cbe_of(cdl_backend *be)
{
    return (cbe *)be->impl;
}


/* Makes the backend's GPU current on the calling thread (cheap when it is). */
void cbe_enter(cbe *ci);

/* ------------------------------------------------------ check wrappers */

/* Each returns 0 on success; on failure it records "file:line: call: error
 * (name): hint" as the backend's pending error (reported by sync) and in
 * cdl_last_error(), and returns -1. ci may be NULL (during creation). */
int cbe_check_cuda(cbe *ci, cudaError_t e, const char *call, const char *file, int line);
int cbe_check_cublas(cbe *ci, cublasStatus_t s, const char *call, const char *file, int line);
int cbe_check_cudnn(cbe *ci, cudnnStatus_t s, const char *call, const char *file, int line);
#define CU_CHECK(ci, call) cbe_check_cuda((ci), (call), #call, __FILE__, __LINE__)
#define CUBLAS_CHECK(ci, call) cbe_check_cublas((ci), (call), #call, __FILE__, __LINE__)
#define CUDNN_CHECK(ci, call) cbe_check_cudnn((ci), (call), #call, __FILE__, __LINE__)

/* Records a failure that is not a library status (printf-style); returns -1. */
int cbe_fail(cbe *ci, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The hint printed after an error, for tests and messages. */
const char *cbe_cuda_hint(cudaError_t e);

/* ---------------------------------------------------------- the ops */

/* memory.c */
void *cbe_alloc(cdl_backend *be, size_t bytes);
void cbe_free(cdl_backend *be, void *p);
void cbe_to_device(cdl_backend *be, void *dst, const void *src, size_t bytes);
void cbe_to_host(cdl_backend *be, void *dst, const void *src, size_t bytes);
void cbe_copy(cdl_backend *be, void *dst, const void *src, size_t bytes);
int cbe_sync(cdl_backend *be);
/* Bytes from p to the end of the alloc() block holding it; 0 when p is not
 * in a live block of this backend. */
size_t cbe_room(const cbe *ci, const void *p);
void cbe_blocks_free(cbe *ci);
/* 1 when p is page-locked host memory (cudaHostAlloc or cudaHostRegister). */
int cbe_is_pinned(const void *p);

/* conv.c */
size_t cbe_conv2d_workspace(cdl_backend *be, const cdl_conv2d_desc *d);
void cbe_conv2d_fwd(cdl_backend *be, const cdl_conv2d_desc *d, const float *x, const float *w,
                    const float *b, float *y, float *ws);
void cbe_conv2d_bwd(cdl_backend *be, const cdl_conv2d_desc *d, const float *x, const float *w,
                    const float *dy, float *dx, float *dw, float *db, float *ws);
void cbe_conv_cache_clear(cbe *ci);

/* linear.c */
size_t cbe_linear_workspace(cdl_backend *be, int n, int in, int out);
void cbe_linear_fwd(cdl_backend *be, int n, int in, int out, const float *x, const float *w,
                    const float *b, float *y, float *ws);
void cbe_linear_bwd(cdl_backend *be, int n, int in, int out, const float *x, const float *w,
                    const float *dy, float *dx, float *dw, float *db, float *ws);
int cbe_apply_matmul_math(cbe *ci);
/* cuBLASLt: the handle (want = 0: off; a failure is reported and leaves
 * it off, not an error) and, at destroy, the plans and the handle. */
void cbe_lt_open(cbe *ci, int want);
void cbe_lt_clear(cbe *ci);

/* bf16_cache.c: the bf16 buffer of weight w (n floats), made on first use
 * (*fresh = 1: not yet cast; refused with a pending error and NULL inside a
 * graph step); forget drops the entries of weights inside a freed block;
 * clear drops all (destroy). */
uint16_t *cbe_bf16_weight(cbe *ci, const float *w, size_t n, int *fresh);
void cbe_bf16_forget(cbe *ci, const void *base, size_t bytes);
void cbe_bf16_clear(cbe *ci);

/* ops.c: our own kernels */
void cbe_fill(cdl_backend *be, float *x, float value, size_t n);
void cbe_scale(cdl_backend *be, float *x, float a, size_t n);
void cbe_maxpool_fwd(cdl_backend *be, const cdl_pool2d_desc *d, const float *x, float *y,
                     int32_t *argmax);
void cbe_maxpool_bwd(cdl_backend *be, const cdl_pool2d_desc *d, const float *dy,
                     const int32_t *argmax, float *dx);
void cbe_avgpool_fwd(cdl_backend *be, const cdl_pool2d_desc *d, const float *x, float *y);
void cbe_avgpool_bwd(cdl_backend *be, const cdl_pool2d_desc *d, const float *dy, float *dx);
void cbe_relu_fwd(cdl_backend *be, size_t n, const float *x, float *y);
void cbe_relu_bwd(cdl_backend *be, size_t n, const float *y, const float *dy, float *dx);
void cbe_dropout_fwd(cdl_backend *be, size_t n, float p, uint64_t seed, const float *x, float *y,
                     uint8_t *mask);
void cbe_dropout_bwd(cdl_backend *be, size_t n, float p, const uint8_t *mask, const float *dy,
                     float *dx);
void cbe_xent_fwd_bwd(cdl_backend *be, int n, int classes, const float *logits,
                      const int32_t *labels, float grad_scale, float *dlogits,
                      float *sample_loss, int32_t *pred);
void cbe_sgd_step(cdl_backend *be, size_t n, float *p, const float *g, float *momentum_buf,
                  const cdl_sgd_hparams *hp);
void cbe_adam_step(cdl_backend *be, size_t n, float *p, const float *g, float *m, float *v,
                   const cdl_adam_hparams *hp);
double cbe_sumsq(cdl_backend *be, const float *x, size_t n);
void cbe_sumsq_dev(cdl_backend *be, const float *x, size_t n, double *out, int acc);
void cbe_clip_scale(cdl_backend *be, float *x, size_t n, const double *sq, float max_norm);
void cbe_hold_updates(cdl_backend *be, const double *sq);

/* ops_nn.c: the ops of residual networks (act.cu, chan.cu, bn.cu), with
 * backend.h's signatures. */
void cbe_act_fwd(cdl_backend *be, cdl_act act, float alpha, size_t n, const float *x, float *y);
void cbe_act_bwd(cdl_backend *be, cdl_act act, float alpha, size_t n, const float *x,
                 const float *y, const float *dy, float *dx);
void cbe_add(cdl_backend *be, size_t n, const float *a, const float *b, float *y);
void cbe_accumulate(cdl_backend *be, size_t n, const float *src, float *dst);
void cbe_gap_fwd(cdl_backend *be, int n, int c, int hw, const float *x, float *y);
void cbe_gap_bwd(cdl_backend *be, int n, int c, int hw, const float *dy, float *dx);
void cbe_channel_copy(cdl_backend *be, int n, int c, int hw, const float *src, int src_c,
                      int src_off, float *dst, int dst_c, int dst_off, int accumulate);
void cbe_bn_sum(cdl_backend *be, int n, int c, int hw, const float *x, float *sum);
void cbe_bn_sqdev(cdl_backend *be, int n, int c, int hw, const float *x, const float *sum,
                  float *sqdev);
void cbe_bn_apply(cdl_backend *be, int n, int c, int hw, const float *x, const float *sum,
                  const float *sqdev, float eps, const float *gamma, const float *beta, int relu,
                  float *y, float *saved);
void cbe_bn_running(cdl_backend *be, int c, const float *sum, const float *sqdev, float momentum,
                    float *running_mean, float *running_var, float *num_batches_tracked);
void cbe_bn_eval(cdl_backend *be, int n, int c, int hw, const float *x, const float *running_mean,
                 const float *running_var, float eps, const float *gamma, const float *beta,
                 int relu, float *y);
void cbe_bn_bwd_sums(cdl_backend *be, int n, int c, int hw, const float *x, const float *y_relu,
                     const float *dy, const float *saved, float *dgamma, float *dbeta);
void cbe_bn_bwd_apply(cdl_backend *be, int n, int c, int hw, const float *x, const float *y_relu,
                      const float *dy, const float *saved, const float *gamma,
                      const float *sum_dy, const float *sum_dy_xhat, float *dx);
void cbe_bn_fold(cdl_backend *be, int oc, int per_oc, const float *w, const float *b,
                 const float *running_mean, const float *running_var, float eps,
                 const float *gamma, const float *beta, float *w_out, float *b_out);
void cbe_xent_ls_fwd_bwd(cdl_backend *be, int n, int classes, const float *logits,
                         const int32_t *labels, float label_smoothing, float grad_scale,
                         float *dlogits, float *sample_loss, int32_t *pred);

/* ops_attn.c: causal multi-head self-attention (attn.cu) */
size_t cbe_attn_workspace(cdl_backend *be, int n, int T, int C, int nh);
void cbe_attn_fwd(cdl_backend *be, int n, int T, int C, int nh, const float *qkv, float *y,
                  float *lse, float *ws);
void cbe_attn_bwd(cdl_backend *be, int n, int T, int C, int nh, const float *qkv,
                  const float *y, const float *lse, const float *dy, float *dqkv, float *ws);

/* ops_seq.c: the ops of transformers (issue 16) */
void cbe_layernorm_fwd(cdl_backend *be, int rows, int d, const float *x, const float *gamma,
                       const float *beta, float eps, float *y, float *saved);
void cbe_layernorm_bwd(cdl_backend *be, int rows, int d, const float *x, const float *gamma,
                       const float *saved, const float *dy, float *dx, float *dgamma,
                       float *dbeta);
void cbe_embedding_fwd(cdl_backend *be, int rows, int d, const float *ids, const float *w,
                       float *y);
void cbe_embedding_bwd(cdl_backend *be, int rows, int d, int vocab, const float *ids,
                       const float *dy, float *dw);
void cbe_bcast_add_fwd(cdl_backend *be, int n, size_t m, const float *x, const float *b,
                       float *y);
void cbe_bcast_add_bwd(cdl_backend *be, int n, size_t m, const float *dy, float *db);

/* ----------------------------------------------------- graph recorder */

/* Op identities for signatures. */
enum {
    OPSIG_TO_DEVICE = 1, OPSIG_TO_HOST, OPSIG_COPY, OPSIG_FILL, OPSIG_SCALE, OPSIG_CONV_FWD,
    OPSIG_CONV_BWD, OPSIG_LINEAR_FWD, OPSIG_LINEAR_BWD, OPSIG_MAXPOOL_FWD, OPSIG_MAXPOOL_BWD,
    OPSIG_AVGPOOL_FWD, OPSIG_AVGPOOL_BWD, OPSIG_RELU_FWD, OPSIG_RELU_BWD, OPSIG_DROPOUT_FWD,
    OPSIG_DROPOUT_BWD, OPSIG_XENT, OPSIG_SGD, OPSIG_ADAM, OPSIG_ACT_FWD, OPSIG_ACT_BWD,
    OPSIG_ADD, OPSIG_ACCUMULATE, OPSIG_GAP_FWD, OPSIG_GAP_BWD, OPSIG_CHANNEL_COPY, OPSIG_BN_SUM,
    OPSIG_BN_SQDEV, OPSIG_BN_BWD_SUMS, OPSIG_BN_APPLY, OPSIG_BN_RUNNING, OPSIG_BN_EVAL,
    OPSIG_BN_BWD_APPLY, OPSIG_BN_FOLD,
    OPSIG_ATTN_FWD, OPSIG_ATTN_BWD,
    OPSIG_LAYERNORM_FWD, OPSIG_LAYERNORM_BWD, OPSIG_EMBEDDING_FWD, OPSIG_EMBEDDING_BWD,
    OPSIG_BCAST_ADD_FWD, OPSIG_BCAST_ADD_BWD,
    OPSIG_SUMSQ_DEV, OPSIG_CLIP_SCALE, OPSIG_HOLD,
};

/* A pointer as a signature argument. */
static inline uint64_t sigp(const void *p)
{
    return (uint64_t)(uintptr_t)p;
}

/* A float as a signature argument (constants such as eps: a replayed
 * step must use the captured ones). */
static inline uint64_t sigf(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* A signature of an op and its arguments (pointers, sizes), not of the
 * per-step scalars: a replayed step must issue the captured ops in order. */
uint64_t cbe_sig(int op, const uint64_t *args, size_t nargs);

/* Every op calls this before enqueuing work. It returns 1 when the op must
 * not enqueue anything (replay: the graph already holds it; or the step
 * diverged), else 0. sc (sc_bytes, may be 0) are the op's per-step scalars:
 * *dyn receives the device copy the kernel must read (NULL outside graphs). */
int cbe_graph_op(cbe *ci, const char *name, uint64_t sig, const void *sc, size_t sc_bytes,
                 const void **dyn);
/* The name of the current graph mode for error messages, NULL when off. */
const char *cbe_graph_busy(const cbe *ci);
void cbe_graph_destroy(cbe *ci);

#endif
