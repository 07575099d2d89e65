/* Causal multi-head self-attention on cdl's own kernels: the shapes
 * checked, the op signed for the graph recorder, then the launch. With
 * precision bf16, a head size the tensor-core kernels take (attn_bf16.cu:
 * 16, 32, 64) and a GPU with bf16 tensor cores (compute capability 8 or
 * more), forward and backward both run them; else both run the fp32
 * kernels of attn.cu. The rule depends only on the backend (precision,
 * GPU) and the shape, so a forward and its backward always take the same
 * path (the backward recomputes P from the forward's lse). Which bf16
 * kernels (wmma or mma.sync) is the backend's too: CDL_ATTN_KERNEL, read
 * at creation (backend_cuda.c).
 * Neither op allocates nor waits for the host, so both run inside CUDA
 * graph steps (docs/cuda.md). */
#include "kernels/cuda/impl.h"

static int attn_use_bf16(const cbe *ci, int T, int C, int nh)
{
    return ci->precision == CDL_PRECISION_BF16 && ci->cc_major >= 8 && cuk_attn_bf16(T, C / nh);
}

size_t cbe_attn_workspace(cdl_backend *be, int n, int T, int C, int nh)
{
    if (n <= 0 || T <= 0 || C <= 0 || nh <= 0 || C % nh)
        return 0;
    if (attn_use_bf16(cbe_of(be), T, C, nh))
        return (size_t)n * nh * T;   /* D */
    return cuk_attn_workspace(n, T, C, nh);
}

/* 0 when the shape is one attention can run, else -1 with the error
 * recorded (reported by the next sync). */
static int attn_shape_ok(cbe *ci, const char *op, int C, int nh, const float *ws)
{
    if (C <= 0 || nh <= 0 || C % nh)
        return cbe_fail(ci, "%s: %d features do not split into %d heads (C must be a "
                        "multiple of nh)", op, C, nh);
    if (!ws)
        return cbe_fail(ci, "%s: no workspace (pass attn_workspace() floats)", op);
    return 0;
}

void cbe_attn_fwd(cdl_backend *be, int n, int T, int C, int nh, const float *qkv, float *y,
                  float *lse, float *ws)
{
    cbe *ci = cbe_of(be);
    if (n <= 0 || T <= 0)
        return;
    cbe_enter(ci);
    if (attn_shape_ok(ci, "attn_fwd", C, nh, ws))
        return;
    const uint64_t a[] = {(uint64_t)n, (uint64_t)T, (uint64_t)C, (uint64_t)nh, sigp(qkv),
                          sigp(y), sigp(lse), sigp(ws)};
    const void *dyn;
    if (cbe_graph_op(ci, "attn_fwd", cbe_sig(OPSIG_ATTN_FWD, a, 8), NULL, 0, &dyn))
        return;
    if (attn_use_bf16(ci, T, C, nh))
        CU_CHECK(ci, cuk_attn_bf16_fwd(ci->stream, ci->attn_mma, n, T, C, nh, qkv, y, lse));
    else
        CU_CHECK(ci, cuk_attn_fwd(ci->stream, n, T, C, nh, qkv, y, lse, ws));
}

void cbe_attn_bwd(cdl_backend *be, int n, int T, int C, int nh, const float *qkv,
                  const float *y, const float *lse, const float *dy, float *dqkv, float *ws)
{
    cbe *ci = cbe_of(be);
    if (n <= 0 || T <= 0)
        return;
    cbe_enter(ci);
    if (attn_shape_ok(ci, "attn_bwd", C, nh, ws))
        return;
    const uint64_t a[] = {(uint64_t)n, (uint64_t)T, (uint64_t)C, (uint64_t)nh, sigp(qkv),
                          sigp(y), sigp(lse), sigp(dy), sigp(dqkv), sigp(ws)};
    const void *dyn;
    if (cbe_graph_op(ci, "attn_bwd", cbe_sig(OPSIG_ATTN_BWD, a, 10), NULL, 0, &dyn))
        return;
    if (attn_use_bf16(ci, T, C, nh))
        CU_CHECK(ci, cuk_attn_bf16_bwd(ci->stream, ci->attn_mma, n, T, C, nh, qkv, y, lse, dy,
                                       dqkv, ws));
    else
        CU_CHECK(ci, cuk_attn_bwd(ci->stream, n, T, C, nh, qkv, y, lse, dy, dqkv, ws));
}
