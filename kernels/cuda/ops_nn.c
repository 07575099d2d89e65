/* The ops of residual networks on cdl's own kernels (act.cu, chan.cu,
 * bn.cu): activations, add and accumulate, global average pooling, channel
 * concat/split, batch norm's passes. Like ops.c: arguments checked and
 * signed for the graph recorder, then the launch and its check. None
 * allocates or waits for the host, so all of them run inside CUDA graph
 * steps (docs/cuda.md). */
#include <string.h>

#include "kernels/cuda/impl.h"

/* ------------------------------------------------------- activations */

static const char *act_name(cdl_act act, int bwd)
{
    static const char *const names[][2] = {
        {"act_fwd relu", "act_bwd relu"}, {"act_fwd gelu", "act_bwd gelu"},
        {"act_fwd gelu_tanh", "act_bwd gelu_tanh"}, {"act_fwd silu", "act_bwd silu"},
        {"act_fwd sigmoid", "act_bwd sigmoid"}, {"act_fwd tanh", "act_bwd tanh"},
        {"act_fwd leakyrelu", "act_bwd leakyrelu"},
    };
    return (unsigned)act < sizeof names / sizeof names[0] ? names[act][bwd] : NULL;
}

void cbe_act_fwd(cdl_backend *be, cdl_act act, float alpha, size_t n, const float *x, float *y)
{
    cbe *ci = cbe_of(be);
    if (!n)
        return;
    cbe_enter(ci);
    const char *name = act_name(act, 0);
    if (!name) {
        cbe_fail(ci, "act_fwd: unknown activation %d (see cdl_act in backend.h)", (int)act);
        return;
    }
    const uint64_t a[] = {(uint64_t)act, sigf(alpha), n, sigp(x), sigp(y)};
    const void *dyn;
    if (cbe_graph_op(ci, name, cbe_sig(OPSIG_ACT_FWD, a, 5), NULL, 0, &dyn))
        return;
    CU_CHECK(ci, cuk_act_fwd(ci->stream, (int)act, n, alpha, x, y));
}

void cbe_act_bwd(cdl_backend *be, cdl_act act, float alpha, size_t n, const float *x,
                 const float *y, const float *dy, float *dx)
{
    cbe *ci = cbe_of(be);
    if (!n)
        return;
    cbe_enter(ci);
    const char *name = act_name(act, 1);
    if (!name) {
        cbe_fail(ci, "act_bwd: unknown activation %d (see cdl_act in backend.h)", (int)act);
        return;
    }
    int reads = cuk_act_bwd_reads((int)act);
    if ((reads == 'x' && !x) || (reads == 'y' && !y)) {
        cbe_fail(ci, "%s: needs the forward %s (got NULL)", name,
                 reads == 'x' ? "input x" : "output y");
        return;
    }
    const float *xr = reads == 'x' ? x : NULL, *yr = reads == 'y' ? y : NULL;
    const uint64_t a[] = {(uint64_t)act, sigf(alpha), n, sigp(xr), sigp(yr), sigp(dy), sigp(dx)};
    const void *dyn;
    if (cbe_graph_op(ci, name, cbe_sig(OPSIG_ACT_BWD, a, 7), NULL, 0, &dyn))
        return;
    CU_CHECK(ci, cuk_act_bwd(ci->stream, (int)act, n, alpha, xr, yr, dy, dx));
}

/* ------------------------------------------------------- add, accumulate */

void cbe_add(cdl_backend *be, size_t n, const float *a_, const float *b, float *y)
{
    cbe *ci = cbe_of(be);
    if (!n)
        return;
    cbe_enter(ci);
    const uint64_t a[] = {n, sigp(a_), sigp(b), sigp(y)};
    const void *dyn;
    if (cbe_graph_op(ci, "add", cbe_sig(OPSIG_ADD, a, 4), NULL, 0, &dyn))
        return;
    CU_CHECK(ci, cuk_add(ci->stream, n, a_, b, y));
}

void cbe_accumulate(cdl_backend *be, size_t n, const float *src, float *dst)
{
    cbe *ci = cbe_of(be);
    if (!n)
        return;
    cbe_enter(ci);
    const uint64_t a[] = {n, sigp(src), sigp(dst)};
    const void *dyn;
    if (cbe_graph_op(ci, "accumulate", cbe_sig(OPSIG_ACCUMULATE, a, 3), NULL, 0, &dyn))
        return;
    CU_CHECK(ci, cuk_accumulate(ci->stream, n, dst, src));
}

/* ------------------------------------------------- global average pool */

void cbe_gap_fwd(cdl_backend *be, int n, int c, int hw, const float *x, float *y)
{
    cbe *ci = cbe_of(be);
    if (n <= 0 || c <= 0 || hw <= 0)
        return;
    cbe_enter(ci);
    const uint64_t a[] = {(uint64_t)n, (uint64_t)c, (uint64_t)hw, sigp(x), sigp(y)};
    const void *dyn;
    if (cbe_graph_op(ci, "gap_fwd", cbe_sig(OPSIG_GAP_FWD, a, 5), NULL, 0, &dyn))
        return;
    CU_CHECK(ci, cuk_gap_fwd(ci->stream, (size_t)n * c, hw, x, y));
}

void cbe_gap_bwd(cdl_backend *be, int n, int c, int hw, const float *dy, float *dx)
{
    cbe *ci = cbe_of(be);
    if (n <= 0 || c <= 0 || hw <= 0)
        return;
    cbe_enter(ci);
    const uint64_t a[] = {(uint64_t)n, (uint64_t)c, (uint64_t)hw, sigp(dy), sigp(dx)};
    const void *dyn;
    if (cbe_graph_op(ci, "gap_bwd", cbe_sig(OPSIG_GAP_BWD, a, 5), NULL, 0, &dyn))
        return;
    CU_CHECK(ci, cuk_gap_bwd(ci->stream, (size_t)n * c, hw, dy, dx));
}

/* ------------------------------------------------------ channel copy */

/* Channels [src_off, src_off+c) of src (n,src_c,hw) to [dst_off, dst_off+c)
 * of dst (n,dst_c,hw): n blocks of c*hw floats with strides src_c*hw and
 * dst_c*hw. */
void cbe_channel_copy(cdl_backend *be, int n, int c, int hw, const float *src, int src_c,
                      int src_off, float *dst, int dst_c, int dst_off, int accumulate)
{
    cbe *ci = cbe_of(be);
    if (n <= 0 || c <= 0 || hw <= 0)
        return;
    cbe_enter(ci);
    if (src_off < 0 || dst_off < 0 || src_off + c > src_c || dst_off + c > dst_c) {
        cbe_fail(ci, "channel_copy: channels [%d,%d) of %d to [%d,%d) of %d: a range lies "
                 "outside its tensor", src_off, src_off + c, src_c, dst_off, dst_off + c, dst_c);
        return;
    }
    const uint64_t a[] = {(uint64_t)n, (uint64_t)c, (uint64_t)hw, sigp(src), (uint64_t)src_c,
                          (uint64_t)src_off, sigp(dst), (uint64_t)dst_c, (uint64_t)dst_off,
                          (uint64_t)accumulate};
    const void *dyn;
    if (cbe_graph_op(ci, "channel_copy", cbe_sig(OPSIG_CHANNEL_COPY, a, 10), NULL, 0, &dyn))
        return;
    size_t plane = (size_t)hw;
    CU_CHECK(ci, cuk_strided_copy(ci->stream, (size_t)n, (size_t)c * plane,
                                  dst + (size_t)dst_off * plane, (size_t)dst_c * plane,
                                  src + (size_t)src_off * plane, (size_t)src_c * plane,
                                  accumulate != 0));
}

/* --------------------------------------------------------- batch norm */

/* Shapes the kernels take (channels are a grid dimension of chan.cu). */
static int bn_ok(cbe *ci, const char *name, int n, int c, int hw)
{
    if (n <= 0 || c <= 0 || hw <= 0) {
        cbe_fail(ci, "%s: shape (%d,%d,%d) has a dimension below 1", name, n, c, hw);
        return 0;
    }
    if (c > 65535) {
        cbe_fail(ci, "%s: %d channels: the CUDA backend's batch norm takes at most 65535", name,
                 c);
        return 0;
    }
    return 1;
}

static float *bn_coef(cbe *ci)
{
    return (float *)(void *)ci->chan_partials;   /* 3c floats, c <= 65535 */
}

static void bn_sums(cdl_backend *be, const char *name, int op, int mode, int n, int c, int hw,
                    const float *x, const float *dy, const float *relu_y, const float *stats,
                    float *out0, float *out1)
{
    cbe *ci = cbe_of(be);
    if (!bn_ok(ci, name, n, c, hw))
        return;
    cbe_enter(ci);
    const uint64_t a[] = {(uint64_t)n, (uint64_t)c, (uint64_t)hw, sigp(x), sigp(dy),
                          sigp(relu_y), sigp(stats), sigp(out0), sigp(out1)};
    const void *dyn;
    if (cbe_graph_op(ci, name, cbe_sig(op, a, 9), NULL, 0, &dyn))
        return;
    CU_CHECK(ci, cuk_chan_sums(ci->stream, mode, x, dy, relu_y, stats, n, c, hw, out0, out1,
                               ci->chan_partials, CBE_CHAN_PARTIALS));
}

void cbe_bn_sum(cdl_backend *be, int n, int c, int hw, const float *x, float *sum)
{
    bn_sums(be, "bn_sum", OPSIG_BN_SUM, CUK_CHAN_SUM, n, c, hw, x, NULL, NULL, NULL, sum, NULL);
}

void cbe_bn_sqdev(cdl_backend *be, int n, int c, int hw, const float *x, const float *sum,
                  float *sqdev)
{
    bn_sums(be, "bn_sqdev", OPSIG_BN_SQDEV, CUK_CHAN_SQDEV, n, c, hw, x, NULL, NULL, sum, sqdev,
            NULL);
}

void cbe_bn_bwd_sums(cdl_backend *be, int n, int c, int hw, const float *x, const float *y_relu,
                     const float *dy, const float *saved, float *dgamma, float *dbeta)
{
    bn_sums(be, "bn_bwd_sums", OPSIG_BN_BWD_SUMS, CUK_CHAN_BWD, n, c, hw, x, dy, y_relu, saved,
            dgamma, dbeta);
}

void cbe_bn_apply(cdl_backend *be, int n, int c, int hw, const float *x, const float *sum,
                  const float *sqdev, float eps, const float *gamma, const float *beta, int relu,
                  float *y, float *saved)
{
    cbe *ci = cbe_of(be);
    if (!bn_ok(ci, "bn_apply", n, c, hw))
        return;
    cbe_enter(ci);
    const uint64_t a[] = {(uint64_t)n, (uint64_t)c, (uint64_t)hw, sigp(x), sigp(sum),
                          sigp(sqdev), sigf(eps), sigp(gamma), sigp(beta), (uint64_t)relu,
                          sigp(y), sigp(saved)};
    const void *dyn;
    if (cbe_graph_op(ci, "bn_apply", cbe_sig(OPSIG_BN_APPLY, a, 12), NULL, 0, &dyn))
        return;
    CU_CHECK(ci, cuk_bn_apply(ci->stream, n, c, hw, x, sum, sqdev, eps, gamma, beta, relu != 0, y,
                              saved, bn_coef(ci)));
}

void cbe_bn_running(cdl_backend *be, int c, const float *sum, const float *sqdev, float momentum,
                    float *running_mean, float *running_var, float *num_batches_tracked)
{
    cbe *ci = cbe_of(be);
    if (!bn_ok(ci, "bn_running", 1, c, 1))
        return;
    cbe_enter(ci);
    const uint64_t a[] = {(uint64_t)c, sigp(sum), sigp(sqdev), sigf(momentum),
                          sigp(running_mean), sigp(running_var), sigp(num_batches_tracked)};
    const void *dyn;
    if (cbe_graph_op(ci, "bn_running", cbe_sig(OPSIG_BN_RUNNING, a, 7), NULL, 0, &dyn))
        return;
    CU_CHECK(ci, cuk_bn_running(ci->stream, c, sum, sqdev, momentum, running_mean, running_var,
                                num_batches_tracked));
}

void cbe_bn_eval(cdl_backend *be, int n, int c, int hw, const float *x, const float *running_mean,
                 const float *running_var, float eps, const float *gamma, const float *beta,
                 int relu, float *y)
{
    cbe *ci = cbe_of(be);
    if (!bn_ok(ci, "bn_eval", n, c, hw))
        return;
    cbe_enter(ci);
    const uint64_t a[] = {(uint64_t)n, (uint64_t)c, (uint64_t)hw, sigp(x), sigp(running_mean),
                          sigp(running_var), sigf(eps), sigp(gamma), sigp(beta), (uint64_t)relu,
                          sigp(y)};
    const void *dyn;
    if (cbe_graph_op(ci, "bn_eval", cbe_sig(OPSIG_BN_EVAL, a, 11), NULL, 0, &dyn))
        return;
    CU_CHECK(ci, cuk_bn_eval(ci->stream, n, c, hw, x, running_mean, running_var, eps, gamma, beta,
                             relu != 0, y, bn_coef(ci)));
}

void cbe_bn_bwd_apply(cdl_backend *be, int n, int c, int hw, const float *x, const float *y_relu,
                      const float *dy, const float *saved, const float *gamma,
                      const float *sum_dy, const float *sum_dy_xhat, float *dx)
{
    cbe *ci = cbe_of(be);
    if (!bn_ok(ci, "bn_bwd_apply", n, c, hw))
        return;
    cbe_enter(ci);
    const uint64_t a[] = {(uint64_t)n, (uint64_t)c, (uint64_t)hw, sigp(x), sigp(y_relu),
                          sigp(dy), sigp(saved), sigp(gamma), sigp(sum_dy), sigp(sum_dy_xhat),
                          sigp(dx)};
    const void *dyn;
    if (cbe_graph_op(ci, "bn_bwd_apply", cbe_sig(OPSIG_BN_BWD_APPLY, a, 11), NULL, 0, &dyn))
        return;
    CU_CHECK(ci, cuk_bn_bwd_apply(ci->stream, n, c, hw, x, y_relu, dy, saved, gamma, sum_dy,
                                  sum_dy_xhat, dx, bn_coef(ci)));
}

void cbe_bn_fold(cdl_backend *be, int oc, int per_oc, const float *w, const float *b,
                 const float *running_mean, const float *running_var, float eps,
                 const float *gamma, const float *beta, float *w_out, float *b_out)
{
    cbe *ci = cbe_of(be);
    if (oc <= 0 || per_oc <= 0)
        return;
    cbe_enter(ci);
    const uint64_t a[] = {(uint64_t)oc, (uint64_t)per_oc, sigp(w), sigp(b), sigp(running_mean),
                          sigp(running_var), sigf(eps), sigp(gamma), sigp(beta), sigp(w_out),
                          sigp(b_out)};
    const void *dyn;
    if (cbe_graph_op(ci, "bn_fold", cbe_sig(OPSIG_BN_FOLD, a, 11), NULL, 0, &dyn))
        return;
    CU_CHECK(ci, cuk_bn_fold(ci->stream, oc, per_oc, w, b, running_mean, running_var, eps, gamma,
                             beta, w_out, b_out));
}

/* ---------------------------------------------- label-smoothing xent */

void cbe_xent_ls_fwd_bwd(cdl_backend *be, int n, int classes, const float *logits,
                         const int32_t *labels, float label_smoothing, float grad_scale,
                         float *dlogits, float *sample_loss, int32_t *pred)
{
    cbe *ci = cbe_of(be);
    if (n <= 0 || classes <= 0)
        return;
    cbe_enter(ci);
    cuk_xent_sc sc = {.grad_scale = grad_scale, .smoothing = label_smoothing};
    const uint64_t a[] = {(uint64_t)n, (uint64_t)classes, sigp(logits), sigp(labels),
                          sigp(dlogits), sigp(sample_loss), sigp(pred)};
    const void *dyn;
    if (cbe_graph_op(ci, "xent_ls_fwd_bwd", cbe_sig(OPSIG_XENT, a, 7), &sc, sizeof sc, &dyn))
        return;
    CU_CHECK(ci, cuk_xent(ci->stream, n, classes, logits, labels, dlogits, sample_loss, pred, sc,
                          dyn));
}
