/* Plain double-precision reference ops: the definition every backend kernel
 * is tested against (by normalised error), themselves checked by central
 * finite differences. Written for clarity, not speed. Shapes and semantics
 * are those of lib/cdl/backend.h. */
#ifndef CDL_TESTS_REF_OPS_H
#define CDL_TESTS_REF_OPS_H

#include <stddef.h>
#include <stdint.h>

#include <cdl/backend.h>

/* A conv2d descriptor with oh/ow filled in: square stride and padding, no
 * dilation, one group; and every field. */
cdl_conv2d_desc ref_conv_desc(int n, int c, int h, int w, int oc, int kh, int kw,
                              int stride, int pad);
cdl_conv2d_desc ref_conv_desc_full(int n, int c, int h, int w, int oc, int kh, int kw,
                                   int stride_h, int stride_w, int pad_h, int pad_w,
                                   int dil_h, int dil_w, int groups);
/* A pooling descriptor with oh/ow filled in (floor mode). */
cdl_pool2d_desc ref_pool_desc(int n, int c, int h, int w, int k, int stride, int pad);

/* x (n,c,h,w), w (oc,c/groups,kh,kw), b (oc) or NULL, y (n,oc,oh,ow). */
void ref_conv2d_fwd(const cdl_conv2d_desc *d, const double *x, const double *w,
                    const double *b, double *y);
/* dx (may be NULL), dw, db (may be NULL) are overwritten. */
void ref_conv2d_bwd(const cdl_conv2d_desc *d, const double *x, const double *w,
                    const double *dy, double *dx, double *dw, double *db);

/* y (n,out) = x (n,in) w^T (w is (out,in)) + b. */
void ref_linear_fwd(int n, int in, int out, const double *x, const double *w,
                    const double *b, double *y);
void ref_linear_bwd(int n, int in, int out, const double *x, const double *w,
                    const double *dy, double *dx, double *dw, double *db);

/* argmax: flat index within the (n,c) input plane, first maximum wins. */
void ref_maxpool_fwd(const cdl_pool2d_desc *d, const double *x, double *y, int32_t *argmax);
void ref_maxpool_bwd(const cdl_pool2d_desc *d, const double *dy, const int32_t *argmax,
                     double *dx);
/* count_include_pad=True. */
void ref_avgpool_fwd(const cdl_pool2d_desc *d, const double *x, double *y);
void ref_avgpool_bwd(const cdl_pool2d_desc *d, const double *dy, double *dx);

void ref_relu_fwd(size_t n, const double *x, double *y);
void ref_relu_bwd(size_t n, const double *y, const double *dy, double *dx);

/* Inverted dropout with the mask of cdl_dropout_keep. */
void ref_dropout_fwd(size_t n, double p, uint64_t seed, const double *x, double *y,
                     uint8_t *mask);

/* Per-sample softmax cross-entropy loss, dlogits = (softmax-onehot)*scale,
 * pred = first argmax; a negative label is ignored (loss 0, dlogits 0). */
void ref_xent(int n, int classes, const double *logits, const int32_t *labels,
              double grad_scale, double *dlogits, double *loss, int32_t *pred);

/* Batch norm in training over x (n,c,hw): batch mean and biased variance
 * per channel, y = (x-mean)/sqrt(var+eps)*gamma + beta (gamma/beta NULL =
 * 1/0), max(0, .) when relu; mean/var (c) may be NULL. The backward takes
 * the forward's y (for the fused ReLU's mask) and overwrites dx, and
 * dgamma/dbeta unless NULL. */
void ref_bn_train_fwd(int n, int c, int hw, const double *x, const double *gamma,
                      const double *beta, double eps, int relu, double *y, double *mean,
                      double *var);
void ref_bn_train_bwd(int n, int c, int hw, const double *x, const double *gamma, double eps,
                      int relu, const double *y, const double *dy, double *dx, double *dgamma,
                      double *dbeta);
/* Batch norm in evaluation, from running statistics. */
void ref_bn_eval(int n, int c, int hw, const double *x, const double *rm, const double *rv,
                 double eps, const double *gamma, const double *beta, int relu, double *y);

/* Global average pooling (n,c,hw) -> (n,c) and its adjoint. */
void ref_gap_fwd(int n, int c, int hw, const double *x, double *y);
void ref_gap_bwd(int n, int c, int hw, const double *dy, double *dx);

/* An activation of cdl_act at x, and its derivative at x. */
double ref_act(cdl_act act, double alpha, double x);
double ref_act_grad(cdl_act act, double alpha, double x);

/* ref_xent with PyTorch's label_smoothing eps. */
void ref_xent_ls(int n, int classes, const double *logits, const int32_t *labels, double eps,
                 double grad_scale, double *dlogits, double *loss, int32_t *pred);

/* Causal multi-head self-attention (backend.h's attn_fwd): qkv (n,T,3C),
 * y (n,T,C), lse (n,nh,T) or NULL. The backward overwrites dqkv (n,T,3C)
 * from dy (n,T,C), recomputing the probabilities. */
void ref_attn_fwd(int n, int T, int C, int nh, const double *qkv, double *y, double *lse);
void ref_attn_bwd(int n, int T, int C, int nh, const double *qkv, const double *dy,
                  double *dqkv);

/* LayerNorm over the last axis of x (rows, d), biased variance; gamma/beta
 * NULL = 1/0. The backward recomputes the statistics and overwrites dx,
 * and dgamma/dbeta (d) unless NULL. */
void ref_layernorm_fwd(int rows, int d, const double *x, const double *gamma,
                       const double *beta, double eps, double *y);
void ref_layernorm_bwd(int rows, int d, const double *x, const double *gamma, double eps,
                       const double *dy, double *dx, double *dgamma, double *dbeta);

/* Embedding: y (rows,d) = w[ids[r]]; the backward ADDS dy rows into dw. */
void ref_embedding_fwd(int rows, int d, const double *ids, const double *w, double *y);
void ref_embedding_bwd(int rows, int d, const double *ids, const double *dy, double *dw);

/* y (n,m) = x + b (m); db (m) = sum over n of dy (overwritten). */
void ref_bcast_add_fwd(int n, size_t m, const double *x, const double *b, double *y);
void ref_bcast_add_bwd(int n, size_t m, const double *dy, double *db);

#endif
