/* The compute backend interface: every tensor operation of a training step.
 *
 * libcdl never calls BLAS, cuBLAS or cuDNN itself; it calls these ops through
 * a small table of function pointers, so one model runs on CPU or GPU and each
 * backend can be checked against the CPU reference op by op.
 *
 * All pointers passed to ops are device pointers of that backend. Ops may run
 * asynchronously; ops->sync() waits for them. Results are deterministic for a
 * given backend and thread count (fixed reduction order).
 */
#ifndef CDL_BACKEND_H
#define CDL_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One conv2d, PyTorch's nn.Conv2d: x is (n,c,h,w), w is (oc,c/groups,kh,kw),
 * b is (oc), y is (n,oc,oh,ow). Output channel o of group g = o/(oc/groups)
 * sees input channels [g*c/groups, (g+1)*c/groups); groups == c == oc is a
 * depthwise convolution. Every field is explicit: stride, dilation and
 * groups are >= 1 (a zeroed field is not a default), padding >= 0, and c and
 * oc are divisible by groups. */
typedef struct cdl_conv2d_desc {
    int n, c, h, w;
    int oc, kh, kw;
    int stride_h, stride_w, pad_h, pad_w, dil_h, dil_w;
    int groups;       /* c and oc divisible; weight is (oc, c/groups, kh, kw) */
    int oh, ow;       /* cdl_conv2d_out(h, kh, stride_h, pad_h, dil_h), likewise w */
} cdl_conv2d_desc;

/* Output size of a convolution along one axis (floor, like PyTorch):
 * (in + 2*pad - dil*(k-1) - 1) / stride + 1. */
static inline int cdl_conv2d_out(int in, int k, int stride, int pad, int dil)
{
    return (in + 2 * pad - dil * (k - 1) - 1) / stride + 1;
}

/* One pooling window sweep: x is (n,c,h,w), y is (n,c,oh,ow). Average pooling
 * counts padded zeros like PyTorch's default (count_include_pad=True). */
typedef struct cdl_pool2d_desc {
    int n, c, h, w;
    int k, stride, pad;
    int oh, ow;
} cdl_pool2d_desc;

/* PyTorch's torch.optim.SGD update (dampening applies from the second step;
 * the first step copies the gradient into the momentum buffer). */
typedef struct cdl_sgd_hparams {
    float lr, momentum, dampening, weight_decay;
    int nesterov;
    int first_step;   /* 1 on the optimizer's first step */
} cdl_sgd_hparams;

/* PyTorch's torch.optim.Adam (decoupled = 0) or AdamW (decoupled = 1). */
typedef struct cdl_adam_hparams {
    float lr, beta1, beta2, eps, weight_decay;
    int decoupled;
    long step;        /* 1-based step count, for bias correction */
} cdl_adam_hparams;

/* Elementwise activations of act_fwd/act_bwd, with PyTorch's definitions:
 *   RELU       max(0, x)
 *   GELU       x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2))   (approximate='none')
 *   GELU_TANH  0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))   ('tanh')
 *   SILU       x * sigmoid(x)
 *   SIGMOID    1 / (1 + exp(-x))
 *   TANH       tanh(x)
 *   LEAKYRELU  x > 0 ? x : alpha x   (alpha = negative_slope, PyTorch's 0.01)
 * act_bwd reads x for GELU, GELU_TANH, SILU and LEAKYRELU and y for RELU,
 * SIGMOID and TANH; the other pointer may be NULL. */
typedef enum cdl_act {
    CDL_ACT_RELU = 0,
    CDL_ACT_GELU,
    CDL_ACT_GELU_TANH,
    CDL_ACT_SILU,
    CDL_ACT_SIGMOID,
    CDL_ACT_TANH,
    CDL_ACT_LEAKYRELU
} cdl_act;

typedef struct cdl_backend cdl_backend;

typedef struct cdl_backend_ops {
    const char *name;                   /* "cpu", "cuda" */

    /* Memory. alloc returns zeroed device memory or NULL (with cdl_error). */
    void *(*alloc)(cdl_backend *be, size_t bytes);
    void (*free)(cdl_backend *be, void *p);
    void (*to_device)(cdl_backend *be, void *dst_dev, const void *src_host, size_t bytes);
    void (*to_host)(cdl_backend *be, void *dst_host, const void *src_dev, size_t bytes);
    void (*copy)(cdl_backend *be, void *dst_dev, const void *src_dev, size_t bytes);
    void (*fill)(cdl_backend *be, float *x, float value, size_t n);
    int (*sync)(cdl_backend *be);       /* 0, or -1 with cdl_error on a device fault */

    /* Scratch (in floats) that conv2d and linear ops need for these shapes.
     * The caller allocates the largest once and passes it as ws. */
    size_t (*conv2d_workspace)(cdl_backend *be, const cdl_conv2d_desc *d);
    size_t (*linear_workspace)(cdl_backend *be, int n, int in, int out);

    /* y = conv(x, w) + b. b may be NULL. */
    void (*conv2d_fwd)(cdl_backend *be, const cdl_conv2d_desc *d, const float *x,
                       const float *w, const float *b, float *y, float *ws);
    /* From dy: dw and db are overwritten (db may be NULL); dx is overwritten
     * unless NULL (the first layer needs no input gradient). */
    void (*conv2d_bwd)(cdl_backend *be, const cdl_conv2d_desc *d, const float *x,
                       const float *w, const float *dy, float *dx, float *dw,
                       float *db, float *ws);

    /* y (n,out) = x (n,in) * w^T + b, w is (out,in) like torch.nn.Linear. */
    void (*linear_fwd)(cdl_backend *be, int n, int in, int out, const float *x,
                       const float *w, const float *b, float *y, float *ws);
    void (*linear_bwd)(cdl_backend *be, int n, int in, int out, const float *x,
                       const float *w, const float *dy, float *dx, float *dw,
                       float *db, float *ws);
    /* Optional (NULL: the model runs linear_fwd / linear_bwd and then the
     * elementwise op): a product and the elementwise step next to it, made
     * while the product's rows are still in cache, with the bits of the two
     * ops run one after the other. Same arguments as linear_fwd/_bwd, plus:
     *   linear_act_fwd: y as linear_fwd, then ay (n,out) = act(y)  (the
     *     MLP's up-projection and its GELU);
     *   linear_add_fwd: y (n,out) = x w^T + b + r, r (n,out) a residual
     *     (the projection back into the residual stream and its add), the
     *     bits of linear_fwd then add (y does not alias r);
     *   linear_act_bwd: as linear_bwd, but dx (n,in) is the gradient of the
     *     input of the activation act whose output is this product's input
     *     x: act_bwd(ax, x, dy w) with ax that activation's input (the
     *     down-projection's dx through the GELU before it). */
    void (*linear_act_fwd)(cdl_backend *be, int n, int in, int out, const float *x,
                           const float *w, const float *b, cdl_act act, float alpha, float *y,
                           float *ay, float *ws);
    void (*linear_add_fwd)(cdl_backend *be, int n, int in, int out, const float *x,
                           const float *w, const float *b, const float *r, float *y, float *ws);
    void (*linear_act_bwd)(cdl_backend *be, int n, int in, int out, const float *x,
                           const float *w, const float *dy, cdl_act act, float alpha,
                           const float *ax, float *dx, float *dw, float *db, float *ws);

    /* argmax holds, per output element, the flat input index within its (n,c)
     * plane; it has n*c*oh*ow entries. */
    void (*maxpool_fwd)(cdl_backend *be, const cdl_pool2d_desc *d, const float *x,
                        float *y, int32_t *argmax);
    void (*maxpool_bwd)(cdl_backend *be, const cdl_pool2d_desc *d, const float *dy,
                        const int32_t *argmax, float *dx);
    void (*avgpool_fwd)(cdl_backend *be, const cdl_pool2d_desc *d, const float *x, float *y);
    void (*avgpool_bwd)(cdl_backend *be, const cdl_pool2d_desc *d, const float *dy, float *dx);

    /* Elementwise over n floats. relu_bwd reads the forward output y. dx may
     * alias dy. */
    void (*relu_fwd)(cdl_backend *be, size_t n, const float *x, float *y);
    void (*relu_bwd)(cdl_backend *be, size_t n, const float *y, const float *dy, float *dx);

    /* Inverted dropout: y = x * mask / (1-p), mask[i] = 0 or 1 drawn from
     * cdl_dropout_keep(seed, i, p), so every backend draws the same mask. */
    void (*dropout_fwd)(cdl_backend *be, size_t n, float p, uint64_t seed,
                        const float *x, float *y, uint8_t *mask);
    void (*dropout_bwd)(cdl_backend *be, size_t n, float p, const uint8_t *mask,
                        const float *dy, float *dx);

    /* Softmax cross-entropy over (n,classes) logits, fused with its gradient:
     * dlogits = (softmax - onehot) * grad_scale. Writes each sample's loss and
     * predicted class (device arrays of n). A negative label is ignored
     * (PyTorch's ignore_index): its loss is 0, its dlogits row 0, its pred
     * still written; the caller passes grad_scale = 1/(rows with a label) for
     * the mean over those. A label >= classes gives a NaN loss (a bug the
     * caller must notice) and no onehot term. */
    void (*xent_fwd_bwd)(cdl_backend *be, int n, int classes, const float *logits,
                         const int32_t *labels, float grad_scale, float *dlogits,
                         float *sample_loss, int32_t *pred);

    /* Optimizer updates over a flat range of n parameters. */
    void (*sgd_step)(cdl_backend *be, size_t n, float *p, const float *g,
                     float *momentum_buf, const cdl_sgd_hparams *hp);
    void (*adam_step)(cdl_backend *be, size_t n, float *p, const float *g,
                      float *m, float *v, const cdl_adam_hparams *hp);

    /* Reductions and scaling over flat ranges (gradient clipping, averaging).
     * sumsq is computed in double in a fixed order. */
    double (*sumsq)(cdl_backend *be, const float *x, size_t n);
    void (*scale)(cdl_backend *be, float *x, float a, size_t n);
    /* Optional (NULL: the caller uses sumsq and scale on the host), for
     * --clip-grad without a host wait, inside a CUDA graph step too:
     * sumsq_dev leaves sumsq's value (the same bits) in device memory, *out
     * = it (acc 0) or *out + it (acc 1); clip_scale multiplies x by
     * PyTorch's clip coefficient max_norm / ((float)sqrt(*sq) + 1e-6f) when
     * that is below 1. Both asynchronous, in stream order. */
    void (*sumsq_dev)(cdl_backend *be, const float *x, size_t n, double *out, int acc);
    void (*clip_scale)(cdl_backend *be, float *x, size_t n, const double *sq, float max_norm);

    /* ---- Ops of convolutional networks with branches (issue 15). Until a
     * backend implements one, its entry is NULL and callers must not reach
     * it (check before building a model that needs it). Every op below
     * has a plain reference next to its fast path in kernels/cpu/ and a
     * double-precision twin in tests/unit/ref_ops.c. */

    /* Batch normalisation over x (n,c,hw): hw = h*w for BatchNorm2d, 1 for
     * BatchNorm1d on (n,c). Statistics are per channel over n*hw values.
     * Training, in pieces so that SyncBatchNorm can sum each piece across
     * ranks (cdl_model_set_allreduce) between them; without sync the
     * calls simply follow each other:
     *   bn_sum(x, sum)                   sum   (c+1): sum[ch] = sum of x over
     *                                    n,hw; sum[c] = n*hw (the count)
     *   [sync: allreduce sum, c+1 floats: the count becomes global]
     *   bn_sqdev(x, sum, sqdev)          sqdev (c): sum of (x - mean)^2,
     *                                    mean = sum[ch]/sum[c] (two-pass)
     *   [sync: allreduce sqdev, c floats]
     *   bn_apply(x, sum, sqdev, ..., y, saved)
     *                                    y = (x - mean) * invstd * gamma + beta,
     *                                    invstd = 1/sqrt(sqdev/count + eps)
     *                                    (biased variance, like PyTorch); relu
     *                                    = 1 fuses max(0, .) into y. saved
     *                                    (2c+1) = mean (c), invstd (c), count,
     *                                    what the backward reads.
     *   bn_running(sum, sqdev, ...)      running_mean = (1-m) rm + m mean,
     *                                    running_var = (1-m) rv + m sqdev/(count-1)
     *                                    (unbiased; count > 1, which PyTorch
     *                                    demands in training too), and
     *                                    *num_batches_tracked += 1 (NULL: none).
     * Counts are floats: exact up to 2^24 values per channel (and rank sum).
     * gamma/beta (c) NULL mean 1/0 (affine=False). y may alias x. */
    void (*bn_sum)(cdl_backend *be, int n, int c, int hw, const float *x, float *sum);
    void (*bn_sqdev)(cdl_backend *be, int n, int c, int hw, const float *x, const float *sum,
                     float *sqdev);
    void (*bn_apply)(cdl_backend *be, int n, int c, int hw, const float *x, const float *sum,
                     const float *sqdev, float eps, const float *gamma, const float *beta,
                     int relu, float *y, float *saved);
    /* Optional (NULL: the three pieces): bn_sum, bn_sqdev and bn_apply in
     * one call without sync, their bits, sum/sqdev/saved as they leave them
     * (a CPU runs it a channel at a time, its planes still in cache). */
    void (*bn_train_fwd)(cdl_backend *be, int n, int c, int hw, const float *x, float eps,
                         const float *gamma, const float *beta, int relu, float *y, float *sum,
                         float *sqdev, float *saved);
    /* Optional (NULL: bn_train_fwd without relu, then add_relu): that
     * pair's bits, y = max(0, BN(x) + res) for res of x's shape (the
     * residual join and its ReLU after the BN, which itself is never
     * stored). y may alias x or res. */
    void (*bn_train_fwd_add_relu)(cdl_backend *be, int n, int c, int hw, const float *x,
                                  float eps, const float *gamma, const float *beta,
                                  const float *res, float *y, float *sum, float *sqdev,
                                  float *saved);
    /* Optional (NULL: the two pieces): bn_bwd_sums then bn_bwd_apply (with
     * sum_dy = dbeta, sum_dy_xhat = dgamma) in one call without sync, their
     * bits; dx NULL computes only dgamma and dbeta. */
    void (*bn_train_bwd)(cdl_backend *be, int n, int c, int hw, const float *x,
                         const float *y_relu, const float *dy, const float *saved,
                         const float *gamma, float *dgamma, float *dbeta, float *dx);
    void (*bn_running)(cdl_backend *be, int c, const float *sum, const float *sqdev,
                       float momentum, float *running_mean, float *running_var,
                       float *num_batches_tracked);
    /* Evaluation: y = (x - running_mean) / sqrt(running_var + eps) * gamma
     * + beta, then max(0, .) when relu. y may alias x. (To fold an
     * evaluation BN into the convolution before it, see bn_fold.) */
    void (*bn_eval)(cdl_backend *be, int n, int c, int hw, const float *x,
                    const float *running_mean, const float *running_var, float eps,
                    const float *gamma, const float *beta, int relu, float *y);
    /* Training backward, in two pieces around the (sync) allreduce. y_relu
     * is the forward output when bn_apply fused the ReLU (dy counts only
     * where y > 0), else NULL. xhat = (x - mean) * invstd from saved.
     *   bn_bwd_sums: dgamma[ch] = sum of dy*xhat, dbeta[ch] = sum of dy over
     *     n,hw (this rank's: these are the parameter gradients, overwritten;
     *     scratch of c floats each when affine=False).
     *   [sync: copy dbeta, dgamma into one scratch (2c) and allreduce it]
     *   bn_bwd_apply: dx = gamma * invstd * (dy - sum_dy/count
     *     - xhat * sum_dy_xhat/count), from the (global) sums; gamma NULL
     *     = 1. dx may alias dy. */
    void (*bn_bwd_sums)(cdl_backend *be, int n, int c, int hw, const float *x,
                        const float *y_relu, const float *dy, const float *saved,
                        float *dgamma, float *dbeta);
    void (*bn_bwd_apply)(cdl_backend *be, int n, int c, int hw, const float *x,
                         const float *y_relu, const float *dy, const float *saved,
                         const float *gamma, const float *sum_dy, const float *sum_dy_xhat,
                         float *dx);
    /* Folds an evaluation BN into the conv before it, so conv+BN(+ReLU) in
     * evaluation is one convolution (+ relu_fwd in place): for each output
     * channel o, s = gamma[o] / sqrt(running_var[o] + eps),
     *   w_out[o][k] = w[o][k] * s          (k < per_oc = (c/groups)*kh*kw)
     *   b_out[o] = (b[o] - running_mean[o]) * s + beta[o]   (b NULL = 0)
     * gamma/beta NULL = 1/0. w_out/b_out may alias w/b (then the model's
     * own parameters are lost: fold into a copy). Redo the fold whenever
     * the parameters or buffers change (once per evaluation pass). */
    void (*bn_fold)(cdl_backend *be, int oc, int per_oc, const float *w, const float *b,
                    const float *running_mean, const float *running_var, float eps,
                    const float *gamma, const float *beta, float *w_out, float *b_out);

    /* Global average pooling (AdaptiveAvgPool2d(1)): x (n,c,hw) -> y (n,c),
     * y = mean over hw; backward dx (n,c,hw) = dy (n,c) / hw. */
    void (*gap_fwd)(cdl_backend *be, int n, int c, int hw, const float *x, float *y);
    void (*gap_bwd)(cdl_backend *be, int n, int c, int hw, const float *dy, float *dx);

    /* Elementwise activation over n floats (see cdl_act; alpha is the
     * LEAKYRELU slope, ignored by the others). y may alias x when the
     * backward does not need x (RELU, SIGMOID, TANH); dx may alias dy. */
    void (*act_fwd)(cdl_backend *be, cdl_act act, float alpha, size_t n, const float *x,
                    float *y);
    void (*act_bwd)(cdl_backend *be, cdl_act act, float alpha, size_t n, const float *x,
                    const float *y, const float *dy, float *dx);

    /* y = a + b over n floats (a residual join; y may alias a or b); its
     * backward passes dy to both branches. accumulate: dst += src, for the
     * gradient of a tensor read by several layers (fan-out). */
    void (*add)(cdl_backend *be, size_t n, const float *a, const float *b, float *y);
    void (*accumulate)(cdl_backend *be, size_t n, const float *src, float *dst);
    /* Optional (NULL: the model runs add, relu_fwd, relu_bwd and copies
     * instead): the add fused with the ReLU after it. add_relu: y =
     * max(0, a + b) (y may alias a or b). relu_bwd_split: g = (y > 0 ? dy
     * : 0) written to dx (which may alias dy) and to dx2, or added to dx2
     * when accumulate (the gradient of both branches in one pass). */
    void (*add_relu)(cdl_backend *be, size_t n, const float *a, const float *b, float *y);
    void (*relu_bwd_split)(cdl_backend *be, size_t n, const float *y, const float *dy,
                           float *dx, float *dx2, int accumulate);
    /* Optional (NULL: accumulate dy2 into dy, then relu_bwd_split): the
     * same with dy + dy2 in place of dy, the bits of that sum (a fan-out's
     * gradient whose earlier reader left its part in dy2: the sum is never
     * stored). dx2 may be NULL (dx only). dx may alias dy. */
    void (*relu_bwd_split_add)(cdl_backend *be, size_t n, const float *y, const float *dy,
                               const float *dy2, float *dx, float *dx2, int accumulate);

    /* Channel concat and split as one strided copy over n images of hw
     * floats per channel: channels [src_off, src_off+c) of src (n,src_c,hw)
     * go to channels [dst_off, dst_off+c) of dst (n,dst_c,hw); accumulate =
     * 1 adds to dst instead. Concat: a piece (n,ck,hw) into y at its offset;
     * its backward: the same slice of dy out into dx_k. */
    void (*channel_copy)(cdl_backend *be, int n, int c, int hw, const float *src, int src_c,
                         int src_off, float *dst, int dst_c, int dst_off, int accumulate);

    /* xent_fwd_bwd with label smoothing eps (PyTorch's label_smoothing):
     * the target is (1-eps) onehot + eps/classes, so
     *   loss = logsumexp(z) - (1-eps) z[label] - eps * mean(z)
     *   dlogits = (softmax - (1-eps) onehot - eps/classes) * grad_scale;
     * eps = 0 gives xent_fwd_bwd exactly. Negative labels are ignored as
     * in xent_fwd_bwd (loss 0, dlogits row 0). */
    void (*xent_ls_fwd_bwd)(cdl_backend *be, int n, int classes, const float *logits,
                            const int32_t *labels, float label_smoothing, float grad_scale,
                            float *dlogits, float *sample_loss, int32_t *pred);

    /* ---- Ops of transformers (issue 16). NULL in a backend that does not
     * have them yet, like the ops of issue 15. */

    /* LayerNorm over the last axis of x (rows, d): y = (x - mean) * rstd *
     * gamma + beta, rstd = 1/sqrt(var + eps), var biased (PyTorch). saved
     * (2*rows): mean then rstd of each row, what the backward reads. gamma /
     * beta NULL = 1 / 0. y must not alias x. */
    void (*layernorm_fwd)(cdl_backend *be, int rows, int d, const float *x, const float *gamma,
                          const float *beta, float eps, float *y, float *saved);
    /* dx overwritten (no alias with dy); dgamma, dbeta (d) overwritten with
     * the sums over rows in row order (NULL: not wanted). */
    void (*layernorm_bwd)(cdl_backend *be, int rows, int d, const float *x, const float *gamma,
                          const float *saved, const float *dy, float *dx, float *dgamma,
                          float *dbeta);
    /* Optional (NULL: layernorm_bwd into scratch, then accumulate): as
     * layernorm_bwd, but dx += the input's gradient instead of dx =, with
     * the bits of the two ops one after the other. A transformer block's
     * layer norm reads the residual stream, whose gradient the block's add
     * has already written: one pass fewer over it. */
    void (*layernorm_bwd_acc)(cdl_backend *be, int rows, int d, const float *x,
                              const float *gamma, const float *saved, const float *dy, float *dx,
                              float *dgamma, float *dbeta);
    /* Embedding lookup: ids (rows) floats holding integers in [0, vocab); y
     * (rows, d) = w[ids[i]]. Backward ACCUMULATES dw (vocab, d) += dy rows
     * at their ids (a tied output layer has already written its part), each
     * row of dw summed in row order (deterministic). Out-of-range ids are
     * the data reader's job to refuse; the ops may assume them valid. */
    void (*embedding_fwd)(cdl_backend *be, int rows, int d, const float *ids, const float *w,
                          float *y);
    void (*embedding_bwd)(cdl_backend *be, int rows, int d, int vocab, const float *ids,
                          const float *dy, float *dw);
    /* Broadcast add over a batch (learned positions, wpe): y (n, m) = x
     * (n, m) + b (m); y may alias x. Backward: db (m) = sum over n of dy,
     * in order, overwritten. */
    void (*bcast_add_fwd)(cdl_backend *be, int n, size_t m, const float *x, const float *b,
                          float *y);
    void (*bcast_add_bwd)(cdl_backend *be, int n, size_t m, const float *dy, float *db);
    /* Causal multi-head self-attention, the part between c_attn and c_proj
     * (nanoGPT): qkv (n, T, 3C) is c_attn's output, q = columns [0,C), k =
     * [C,2C), v = [2C,3C), head h = columns [h*hd, (h+1)*hd) of each, hd =
     * C/nh. y (n, T, C) = heads side by side of softmax(q k^T / sqrt(hd),
     * masked to keys s <= t) v. lse (n, nh, T): each softmax row's
     * log-sum-exp, saved for the backward, so no T x T matrix is kept
     * between forward and backward (flash-style; a kernel may still use
     * T x T scratch in ws for short sequences). dqkv (n, T, 3C)
     * overwritten. ws: floats from attn_workspace. No dropout on attention
     * probabilities. */
    size_t (*attn_workspace)(cdl_backend *be, int n, int T, int C, int nh);
    void (*attn_fwd)(cdl_backend *be, int n, int T, int C, int nh, const float *qkv, float *y,
                     float *lse, float *ws);
    void (*attn_bwd)(cdl_backend *be, int n, int T, int C, int nh, const float *qkv,
                     const float *y, const float *lse, const float *dy, float *dqkv, float *ws);

    void (*destroy)(cdl_backend *be);

    /* Optional asynchronous entries: NULL on a synchronous backend (the
     * CPU), whose ops are done when they return. Callers go through the
     * cdl_backend_* functions below, which fall back to plain memory, plain
     * copies and sync(), so one training loop serves every backend and no
     * caller needs a backend's own header. */

    /* Page-locked host memory: to_device/to_host with it are fully
     * asynchronous; such buffers stay untouched until the step's mark. */
    void *(*host_alloc)(cdl_backend *be, size_t bytes);
    void (*host_free)(cdl_backend *be, void *p);
    /* dst_dev <- src_pinned on a second (copy) stream, so the next batch's
     * copy overlaps this step's compute; copy_in_wait makes the ops issued
     * after it wait for every copy_in issued before it. */
    int (*copy_in)(cdl_backend *be, void *dst_dev, const void *src_pinned, size_t bytes);
    int (*copy_in_wait)(cdl_backend *be);
    /* Step marks (slot 0..CDL_BACKEND_MARKS-1): mark records one after
     * everything enqueued so far; mark_done says 1 when that work has
     * finished, 0 when not yet (-1 on a fault); mark_wait blocks until it
     * has. done and wait report a fault like sync() does. */
    int (*mark)(cdl_backend *be, int slot);
    int (*mark_done)(cdl_backend *be, int slot);
    int (*mark_wait)(cdl_backend *be, int slot);
    /* Whole-step graphs (CUDA graphs): the ops between graph_begin and
     * graph_end form one step, captured the first time for a key (the
     * step's shape) and replayed after. begin returns 1 (replay), 0
     * (capture) or -1; end 0 or -1; reset drops the captured graph. Rules
     * inside a graph step: docs/cuda.md. */
    int (*graph_begin)(cdl_backend *be, uint64_t key);
    int (*graph_end)(cdl_backend *be);
    void (*graph_reset)(cdl_backend *be);
    /* The native stream (a cudaStream_t as void *) for libraries that
     * enqueue work in order with the ops (NCCL in lib/dist). */
    void *(*stream)(cdl_backend *be);
    /* The device's identity (the same in every process whatever
     * CUDA_VISIBLE_DEVICES says), to find ranks sharing a GPU. */
    int (*device_uuid)(cdl_backend *be, unsigned char uuid[16]);
    /* The device's product name ("NVIDIA H100 80GB HBM3"), for the peak
     * FLOP/s of MFU reports; NULL entry: none (a CPU). */
    const char *(*device_name)(cdl_backend *be);
    /* Optional (NULL: --clip-grad reads the norm on the host before the
     * update, as on the CPU): the update of a gradient whose norm cannot
     * be clipped skipped without a host wait, inside a CUDA graph step too.
     * hold_updates(be, sq), after clip_scale with the same sq: when
     * (float)sqrt(*sq) is not finite (NaN, infinite, or beyond a float's
     * 3.4e38), every later sgd_step and adam_step leaves p and the
     * optimizer state (momentum_buf, m, v) as they are, until
     * hold_updates(be, NULL) lets updates through again (both asynchronous,
     * in stream order; the NULL call outside graph steps). The host learns
     * it when it reads *sq. */
    void (*hold_updates)(cdl_backend *be, const double *sq);
    /* The GPU the backend's work runs on, as an index among the visible
     * ones (what cudaSetDevice takes); NULL entry: none (a CPU). Whatever
     * thread calls them, the ops make it current themselves; libraries
     * that enqueue work beside them (NCCL in lib/dist) use it to create
     * their streams, events and communicators on the same GPU. */
    int (*device_index)(cdl_backend *be);
    /* Optional (NULL: linear_act_fwd and linear_act_bwd, the activation's
     * input kept for its backward): the same pair keeping, in place of
     * the activation's input, the factor its backward multiplies dy by.
     * For the activations whose backward is dy times a function of their
     * input alone: CDL_ACT_GELU and CDL_ACT_GELU_TANH (the MLP of a GPT).
     *   linear_act_grad_fwd: y = x w^T + b, ay (n,out) = act(y) and g
     *     (n,out) = act'(y), the bits of linear_act_fwd's ay and of the
     *     factor act_bwd applies at y;
     *   linear_mul_bwd: as linear_bwd, with dx (n,in) = (dy w) * g
     *     elementwise, g (n,in) from linear_act_grad_fwd of the layer
     *     before: the bits of linear_act_bwd on that activation.
     * The backward then evaluates no exponential or error function. */
    void (*linear_act_grad_fwd)(cdl_backend *be, int n, int in, int out, const float *x,
                                const float *w, const float *b, cdl_act act, float alpha,
                                float *g, float *ay, float *ws);
    void (*linear_mul_bwd)(cdl_backend *be, int n, int in, int out, const float *x,
                           const float *w, const float *dy, const float *g, float *dx,
                           float *dw, float *db, float *ws);
} cdl_backend_ops;

/* Step mark slots a backend with marks keeps. */
#define CDL_BACKEND_MARKS 4

struct cdl_backend {
    const cdl_backend_ops *ops;
    int host_memory;   /* 1 when device pointers are host pointers (no copies needed) */
    int threads;       /* worker threads the backend keeps busy (CPU) */
    void *impl;
};

/* How to create a backend. Fill with cdl_backend_params_init (it sets
 * size, so a libcdl with more fields reads only the ones a caller knows). */
typedef struct cdl_backend_params {
    size_t size;       /* sizeof(cdl_backend_params) */
    int threads;       /* CPU worker threads (0 = cdl_default_threads()) */
    int device;        /* GPU index among the visible ones (-1 = the first) */
    /* TF32 tensor-core math on GPUs: conv for convolutions, matmul for
     * linear layers. -1 = the default, PyTorch's (conv on, matmul off). */
    int tf32_conv, tf32_matmul;
    /* Replicas sharing this GPU (the rank contract's CDL_REPLICAS_PER_GPU;
     * 0 = 1): packed ones make host threads block instead of spin. */
    int replicas_per_gpu;
    /* What the GPU backend logs on stderr: CDL_LOG's comma-separated
     * topics ("cuda", "cudnn") or "all"; NULL = nothing. Kept, not copied:
     * it must outlive cdl_backend_create_with. */
    const char *log;
    /* Precision of matrix products (cdl_precision): FP32 (0, the default),
     * or BF16 on GPUs: the GEMMs of linear layers take bf16 inputs and
     * accumulate in fp32; weights, gradients, optimizer state and every
     * other op stay fp32 (docs/cuda.md). The CPU backend refuses BF16. */
    int precision;
    /* Faster convolution algorithms with more rounding error (1 on; 0,
     * the default, or any other value: off). The field sits in what was
     * the struct's padding (its size is unchanged), which
     * cdl_backend_params_init zeroes for older programs too. On CPUs with
     * AVX2 and without AVX-512, and on AMD Zen 4: Winograd
     * F(4x4,3x3) for the forward, input gradient and weight gradient
     * (up to 256 channels) of 3x3 stride-1
     * convolutions of 16 channels and more on maps of 8 pixels and more,
     * 4x fewer multiplications than direct summation, with an error of
     * 0.3-2.4e-6 of a convolution's largest output instead of 1-4e-7
     * (TF32, PyTorch's default for cuDNN convolutions, errs by ~5e-4).
     * ResNet-20 trains 6-25% faster at 1 thread on a Zen 3 core
     * (docs/training.md). Ignored by GPUs (tf32_conv is theirs), Intel's
     * AVX-512 CPUs and Zen 5 (F(4x4) has no 16-lane kernels). */
    int fast_conv;
} cdl_backend_params;

/* cdl_backend_params.precision. */
typedef enum cdl_precision {
    CDL_PRECISION_FP32 = 0,
    CDL_PRECISION_BF16 = 1
} cdl_precision;

void cdl_backend_params_init(cdl_backend_params *p);
/* The size of this program's struct to libcdl, as cdl_train_defaults. */
void cdl_backend_params_init_sized(cdl_backend_params *p, size_t size);
#define cdl_backend_params_init(p) cdl_backend_params_init_sized((p), sizeof *(p))

/* cdl_backend_params_init, then log from CDL_LOG and replicas_per_gpu from
 * CDL_REPLICAS_PER_GPU: for a program's edge (tests, benchmarks); the
 * backends themselves do not read them. */
void cdl_backend_params_from_env(cdl_backend_params *p);
void cdl_backend_params_from_env_sized(cdl_backend_params *p, size_t size);
#define cdl_backend_params_from_env(p) cdl_backend_params_from_env_sized((p), sizeof *(p))

/* "cpu", "cuda", or "auto" (cuda when a GPU is visible, else cpu), with
 * params (NULL = the defaults). NULL with cdl_last_error() on failure. */
cdl_backend *cdl_backend_create_with(const char *name, const cdl_backend_params *params);

/* Shorthands: the CPU backend with `threads` worker threads (it owns its
 * threads and keeps OpenBLAS to one thread per worker); the CUDA backend
 * on `device` (NULL with a clear cdl_last_error() when libcdl was built
 * without CUDA or no GPU is visible); a backend by name. */
/* The CPU backend holds OpenBLAS (a process-wide setting) to 1 thread while
 * it exists; destroying the last gives back the program's count. */
cdl_backend *cdl_backend_cpu_create(int threads);
cdl_backend *cdl_backend_cuda_create(int device);
cdl_backend *cdl_backend_create(const char *name, int threads);

/* Destroy a backend last: the models, optimizers and cdl_dist made on it
 * free their memory through it, as must the buffers from its alloc. */
void cdl_backend_destroy(cdl_backend *be);

/* The OpenBLAS kernels this process runs (OpenBLAS's core name, e.g.
 * "SkylakeX", "Haswell", "Prescott"). */
const char *cdl_blas_core(void);

/* The OPENBLAS_CORETYPE value that would give this CPU faster kernels
 * ("SkylakeX" or "Haswell") when OpenBLAS did not know the CPU and fell back
 * to its SSE3 "Prescott" ones and OPENBLAS_CORETYPE is unset; NULL
 * otherwise. OpenBLAS reads the variable when it loads: a program sets it
 * and starts again (cdl's programs do), or its user exports it. */
const char *cdl_blas_core_advice(void);

/* GPUs visible to this process; 0 when none (or built without CUDA). */
int cdl_backend_cuda_device_count(void);

/* The TF32 switch as text: "on" -> 1,1; "off" -> 0,0; "default" -> 1,0
 * (case-insensitive); -1 with cdl_error naming `what` (e.g. "--tf32"). */
int cdl_backend_parse_tf32(const char *s, const char *what, int *conv, int *matmul);

/* The precision as text: "fp32" or "bf16" (case-insensitive) -> a
 * cdl_precision; -1 with cdl_error naming `what` (e.g. "--precision").
 * cdl_precision_name is the reverse ("fp32", "bf16"). */
int cdl_backend_parse_precision(const char *s, const char *what, int *precision);
const char *cdl_precision_name(int precision);

/* The optional entries with their fallbacks (see cdl_backend_ops):
 * host_alloc: zeroed plain memory; copy_in: to_device; copy_in_wait,
 * mark: nothing; mark_done, mark_wait: sync(); graph_begin/end: nothing
 * (0: the ops just run); stream: NULL; device_uuid: -1 with cdl_error.
 * cdl_backend_is_async says whether ops may still run after returning. */
int cdl_backend_is_async(const cdl_backend *be);
void *cdl_backend_host_alloc(cdl_backend *be, size_t bytes);
void cdl_backend_host_free(cdl_backend *be, void *p);
int cdl_backend_copy_in(cdl_backend *be, void *dst_dev, const void *src_host, size_t bytes);
int cdl_backend_copy_in_wait(cdl_backend *be);
int cdl_backend_mark(cdl_backend *be, int slot);
int cdl_backend_mark_done(cdl_backend *be, int slot);
int cdl_backend_mark_wait(cdl_backend *be, int slot);
int cdl_backend_graph_begin(cdl_backend *be, uint64_t key);
int cdl_backend_graph_end(cdl_backend *be);
void cdl_backend_graph_reset(cdl_backend *be);
void *cdl_backend_stream(cdl_backend *be);
int cdl_backend_device_uuid(cdl_backend *be, unsigned char uuid[16]);
/* The device's name, or NULL when the backend has none (the CPU). */
const char *cdl_backend_device_name(cdl_backend *be);

/* Counter-based keep decision for dropout element i: identical on every
 * backend and independent of thread count. */
static inline int cdl_dropout_keep(uint64_t seed, uint64_t i, float p)
{
    /* SplitMix64's constants, made of 32-bit halves: a long long literal
     * is an extension in C++98 programs including this header. */
    const uint64_t golden = (uint64_t)0x9E3779B9u << 32 | 0x7F4A7C15u;
    const uint64_t mul1 = (uint64_t)0xBF58476Du << 32 | 0x1CE4E5B9u;
    const uint64_t mul2 = (uint64_t)0x94D049BBu << 32 | 0x133111EBu;
    uint64_t z = seed + (i + 1) * golden;
    z = (z ^ (z >> 30)) * mul1;
    z = (z ^ (z >> 27)) * mul2;
    z ^= z >> 31;
    float u = (float)(z >> 40) * (1.0f / 16777216.0f);   /* [0,1) on 24 bits */
    return u >= p;
}

#ifdef __cplusplus
}
#endif
#endif
