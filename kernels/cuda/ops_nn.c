/* The ops of residual networks on cdl's own kernels (act.cu, chan.cu,
 * bn.cu): activations, add and accumulate, global average pooling, channel
 * concat/split, batch norm's passes. Like ops.c: arguments checked and
 * signed for the graph recorder, then the launch and its check. None
 * allocates or waits for the host, so all of them run inside CUDA graph
 * steps (docs/cuda.md). */
#include <string.h>

#include "kernels/cuda/impl.h"

/* ------------------------------------------------------- activations */

void cbe_act_fwd(cdl_backend *be, const char *name, int kind, size_t n, float alpha,
                 const float *x, float *y)
{
    cbe *ci = cbe_of(be);
    if (!n)
        return;
    cbe_enter(ci);
    uint32_t a32;
    memcpy(&a32, &alpha, sizeof a32);
    const uint64_t a[] = {(uint64_t)kind, n, a32, sigp(x), sigp(y)};
    const void *dyn;
    if (cbe_graph_op(ci, name, cbe_sig(OPSIG_ACT_FWD, a, 5), NULL, 0, &dyn))
        return;
    CU_CHECK(ci, cuk_act_fwd(ci->stream, kind, n, alpha, x, y));
}

void cbe_act_bwd(cdl_backend *be, const char *name, int kind, size_t n, float alpha,
                 const float *x, const float *y, const float *dy, float *dx)
{
    cbe *ci = cbe_of(be);
    if (!n)
        return;
    cbe_enter(ci);
    int reads = cuk_act_bwd_reads(kind);
    if ((reads == 'x' && !x) || (reads == 'y' && !y)) {
        cbe_fail(ci, "%s: needs the forward %s (got NULL)", name, reads == 'x' ? "input x"
                 : "output y");
        return;
    }
    uint32_t a32;
    memcpy(&a32, &alpha, sizeof a32);
    const uint64_t a[] = {(uint64_t)kind, n, a32, sigp(x), sigp(y), sigp(dy), sigp(dx)};
    const void *dyn;
    if (cbe_graph_op(ci, name, cbe_sig(OPSIG_ACT_BWD, a, 7), NULL, 0, &dyn))
        return;
    CU_CHECK(ci, cuk_act_bwd(ci->stream, kind, n, alpha, reads == 'x' ? x : NULL,
                             reads == 'y' ? y : NULL, dy, dx));
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

void cbe_accumulate(cdl_backend *be, size_t n, float *dst, const float *src)
{
    cbe *ci = cbe_of(be);
    if (!n)
        return;
    cbe_enter(ci);
    const uint64_t a[] = {n, sigp(dst), sigp(src)};
    const void *dyn;
    if (cbe_graph_op(ci, "accumulate", cbe_sig(OPSIG_ACCUMULATE, a, 3), NULL, 0, &dyn))
        return;
    CU_CHECK(ci, cuk_accumulate(ci->stream, n, dst, src));
}

/* ------------------------------------------------- global average pool */

void cbe_gap_fwd(cdl_backend *be, int n, int c, int plane, const float *x, float *y)
{
    cbe *ci = cbe_of(be);
    if (n <= 0 || c <= 0 || plane <= 0)
        return;
    cbe_enter(ci);
    const uint64_t a[] = {(uint64_t)n, (uint64_t)c, (uint64_t)plane, sigp(x), sigp(y)};
    const void *dyn;
    if (cbe_graph_op(ci, "globalavgpool_fwd", cbe_sig(OPSIG_GAP_FWD, a, 5), NULL, 0, &dyn))
        return;
    CU_CHECK(ci, cuk_gap_fwd(ci->stream, (size_t)n * c, plane, x, y));
}

void cbe_gap_bwd(cdl_backend *be, int n, int c, int plane, const float *dy, float *dx)
{
    cbe *ci = cbe_of(be);
    if (n <= 0 || c <= 0 || plane <= 0)
        return;
    cbe_enter(ci);
    const uint64_t a[] = {(uint64_t)n, (uint64_t)c, (uint64_t)plane, sigp(dy), sigp(dx)};
    const void *dyn;
    if (cbe_graph_op(ci, "globalavgpool_bwd", cbe_sig(OPSIG_GAP_BWD, a, 5), NULL, 0, &dyn))
        return;
    CU_CHECK(ci, cuk_gap_bwd(ci->stream, (size_t)n * c, plane, dy, dx));
}

/* ----------------------------------------------------- strided copy */

void cbe_strided_copy(cdl_backend *be, const char *name, size_t outer, size_t inner, float *dst,
                      size_t dst_stride, const float *src, size_t src_stride)
{
    cbe *ci = cbe_of(be);
    if (!outer || !inner)
        return;
    cbe_enter(ci);
    if (dst_stride < inner || src_stride < inner) {
        cbe_fail(ci, "%s: blocks of %zu floats with strides %zu (dst) and %zu (src): a stride "
                 "below the block overlaps", name, inner, dst_stride, src_stride);
        return;
    }
    const uint64_t a[] = {outer, inner, sigp(dst), dst_stride, sigp(src), src_stride};
    const void *dyn;
    if (cbe_graph_op(ci, name, cbe_sig(OPSIG_STRIDED_COPY, a, 6), NULL, 0, &dyn))
        return;
    CU_CHECK(ci, cuk_strided_copy(ci->stream, outer, inner, dst, dst_stride, src, src_stride));
}

/* --------------------------------------------------------- batch norm */

static int bn_shape_ok(cbe *ci, const char *name, int n, int c, int plane)
{
    if (n <= 0 || c <= 0 || plane <= 0) {
        cbe_fail(ci, "%s: shape (%d,%d,%d) has a dimension below 1", name, n, c, plane);
        return 0;
    }
    if (c > 65535) {
        cbe_fail(ci, "%s: %d channels: the CUDA backend's batch norm takes at most 65535", name,
                 c);
        return 0;
    }
    return 1;
}

void cbe_bn_sums(cdl_backend *be, const char *name, int mode, int n, int c, int plane,
                 const float *x, const float *dy, const float *relu_y, const float *mean,
                 const float *var, float eps, float *out0, float *out1)
{
    cbe *ci = cbe_of(be);
    if (!bn_shape_ok(ci, name, n, c, plane))
        return;
    cbe_enter(ci);
    uint32_t e32;
    memcpy(&e32, &eps, sizeof e32);
    const uint64_t a[] = {(uint64_t)mode, (uint64_t)n, (uint64_t)c, (uint64_t)plane, sigp(x),
                          sigp(dy), sigp(relu_y), sigp(mean), sigp(var), e32, sigp(out0),
                          sigp(out1)};
    const void *dyn;
    if (cbe_graph_op(ci, name, cbe_sig(OPSIG_BN_SUMS, a, 12), NULL, 0, &dyn))
        return;
    CU_CHECK(ci, cuk_chan_sums(ci->stream, mode, x, dy, relu_y, mean, var, eps, n, c, plane,
                               out0, out1, ci->chan_partials, CBE_CHAN_PARTIALS));
}
