/* The ops of transformers on cdl's own kernels (layernorm.cu, embed.cu):
 * layer norm, embedding lookup and its gradient, the broadcast add of
 * learned positions. Like ops_nn.c: arguments checked and signed for the
 * graph recorder, then the launch and its check; none allocates or waits
 * for the host, so all run inside CUDA graph steps (docs/cuda.md). */
#include "kernels/cuda/impl.h"

void cbe_layernorm_fwd(cdl_backend *be, int rows, int d, const float *x, const float *gamma,
                       const float *beta, float eps, float *y, float *saved)
{
    cbe *ci = cbe_of(be);
    if (rows <= 0 || d <= 0)
        return;
    cbe_enter(ci);
    const uint64_t a[] = {(uint64_t)rows, (uint64_t)d, sigp(x), sigp(gamma), sigp(beta),
                          sigf(eps), sigp(y), sigp(saved)};
    const void *dyn;
    if (cbe_graph_op(ci, "layernorm_fwd", cbe_sig(OPSIG_LAYERNORM_FWD, a, 8), NULL, 0, &dyn))
        return;
    CU_CHECK(ci, cuk_layernorm_fwd(ci->stream, rows, d, x, gamma, beta, eps, y, saved));
}

void cbe_layernorm_bwd(cdl_backend *be, int rows, int d, const float *x, const float *gamma,
                       const float *saved, const float *dy, float *dx, float *dgamma,
                       float *dbeta)
{
    cbe *ci = cbe_of(be);
    if (d <= 0)
        return;
    cbe_enter(ci);
    if (rows <= 0) {   /* no rows: the parameter sums are zero */
        if (dgamma)
            cbe_fill(be, dgamma, 0.0f, (size_t)d);
        if (dbeta)
            cbe_fill(be, dbeta, 0.0f, (size_t)d);
        return;
    }
    const uint64_t a[] = {(uint64_t)rows, (uint64_t)d, sigp(x), sigp(gamma), sigp(saved),
                          sigp(dy), sigp(dx), sigp(dgamma), sigp(dbeta)};
    const void *dyn;
    if (cbe_graph_op(ci, "layernorm_bwd", cbe_sig(OPSIG_LAYERNORM_BWD, a, 9), NULL, 0, &dyn))
        return;
    CU_CHECK(ci, cuk_layernorm_bwd(ci->stream, rows, d, x, gamma, saved, dy, dx, dgamma, dbeta));
}

void cbe_embedding_fwd(cdl_backend *be, int rows, int d, const float *ids, const float *w,
                       float *y)
{
    cbe *ci = cbe_of(be);
    if (rows <= 0 || d <= 0)
        return;
    cbe_enter(ci);
    const uint64_t a[] = {(uint64_t)rows, (uint64_t)d, sigp(ids), sigp(w), sigp(y)};
    const void *dyn;
    if (cbe_graph_op(ci, "embedding_fwd", cbe_sig(OPSIG_EMBEDDING_FWD, a, 5), NULL, 0, &dyn))
        return;
    CU_CHECK(ci, cuk_embedding_fwd(ci->stream, rows, d, ids, w, y));
}

/* embedding_bwd's scratch (rows ints) grows on an eager call; a graph
 * step's shape was seen eagerly before it was captured (graph steps start
 * after an eager warm-up step). A graph that holds the old buffer is
 * dropped first (it is recaptured at the next graph step). 1: ready. */
static int emb_scratch(cdl_backend *be, cbe *ci, int rows)
{
    if ((size_t)rows <= ci->emb_cap)
        return 1;
    const char *mode = cbe_graph_busy(ci);
    if (mode) {
        cbe_fail(ci, "CUDA backend: embedding_bwd over %d rows first seen during CUDA graph %s: "
                 "run one step of that shape eagerly before capturing", rows, mode);
        return 0;
    }
    cuda_backend_graph_reset(be);
    if (ci->emb_order) {
        (void)cudaFree(ci->emb_order);
        ci->emb_order = NULL;
        ci->emb_cap = 0;
    }
    if (CU_CHECK(ci, cudaMalloc((void **)&ci->emb_order, (size_t)rows * sizeof(int))))
        return 0;
    ci->emb_cap = (size_t)rows;
    return 1;
}

void cbe_embedding_bwd(cdl_backend *be, int rows, int d, int vocab, const float *ids,
                       const float *dy, float *dw)
{
    cbe *ci = cbe_of(be);
    if (rows <= 0 || d <= 0)
        return;
    cbe_enter(ci);
    const uint64_t a[] = {(uint64_t)rows, (uint64_t)d, (uint64_t)vocab, sigp(ids), sigp(dy),
                          sigp(dw)};
    const void *dyn;
    if (cbe_graph_op(ci, "embedding_bwd", cbe_sig(OPSIG_EMBEDDING_BWD, a, 6), NULL, 0, &dyn))
        return;
    if (!emb_scratch(be, ci, rows))
        return;
    CU_CHECK(ci, cuk_embedding_bwd(ci->stream, rows, d, ids, dy, dw, ci->emb_order));
}

void cbe_bcast_add_fwd(cdl_backend *be, int n, size_t m, const float *x, const float *b,
                       float *y)
{
    cbe *ci = cbe_of(be);
    if (n <= 0 || m == 0)
        return;
    cbe_enter(ci);
    const uint64_t a[] = {(uint64_t)n, m, sigp(x), sigp(b), sigp(y)};
    const void *dyn;
    if (cbe_graph_op(ci, "bcast_add_fwd", cbe_sig(OPSIG_BCAST_ADD_FWD, a, 5), NULL, 0, &dyn))
        return;
    CU_CHECK(ci, cuk_bcast_add_fwd(ci->stream, n, m, x, b, y));
}

void cbe_bcast_add_bwd(cdl_backend *be, int n, size_t m, const float *dy, float *db)
{
    cbe *ci = cbe_of(be);
    if (m == 0)
        return;
    cbe_enter(ci);
    if (n <= 0) {
        cbe_fill(be, db, 0.0f, m);
        return;
    }
    const uint64_t a[] = {(uint64_t)n, m, sigp(dy), sigp(db)};
    const void *dyn;
    if (cbe_graph_op(ci, "bcast_add_bwd", cbe_sig(OPSIG_BCAST_ADD_BWD, a, 4), NULL, 0, &dyn))
        return;
    CU_CHECK(ci, cuk_bcast_add_bwd(ci->stream, n, m, dy, db));
}
