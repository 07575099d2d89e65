/* Token embedding lookup and the broadcast add of learned positions.
 *
 * embedding_fwd copies row ids[i] of w (vocab, d) to row i of y, one row
 * per item. embedding_bwd accumulates dy rows into dw at their ids; two
 * rows may share an id, so instead of splitting the rows (which would race
 * or need per-thread copies of dw) every item owns a block of columns of
 * dw and walks all rows in order: each dw element is summed in row order
 * whatever the thread count.
 *
 * bcast_add_fwd: y (n, m) = x + b (m), split over the flat range;
 * bcast_add_bwd: db = sum over n of dy, one block of columns per item,
 * rows in order.
 */
#include <string.h>

#include "kernels/cpu/cpu.h"

/* Columns per item of the column-split sums: one 64-byte line. */
#define EMB_COLS 16

typedef struct emb_ctx {
    int rows;
    size_t d;
    const float *ids, *src, *b;
    float *dst;
} emb_ctx;

static void gather_rows(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    (void)chunk, (void)tid;
    const emb_ctx *c = vctx;
    for (size_t r = b; r < e; r++)
        memcpy(c->dst + r * c->d, c->src + (size_t)c->ids[r] * c->d, c->d * sizeof *c->dst);
}

void cpu_embedding_fwd(cdl_backend *be, int rows, int d, const float *ids, const float *w,
                       float *y)
{
    if (rows <= 0 || d <= 0)
        return;
    emb_ctx c = {.rows = rows, .d = (size_t)d, .ids = ids, .src = w, .dst = y};
    pool_for(cpu_pool(be), (size_t)rows, (size_t)(CPU_ELT_GRAIN / d) + 1, gather_rows, &c);
}

static void scatter_cols(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    (void)chunk, (void)tid;
    const emb_ctx *c = vctx;
    size_t j0 = b * EMB_COLS, j1 = e * EMB_COLS < c->d ? e * EMB_COLS : c->d;
    for (size_t r = 0; r < (size_t)c->rows; r++) {
        const float *s = c->src + r * c->d;
        float *t = c->dst + (size_t)c->ids[r] * c->d;
        for (size_t j = j0; j < j1; j++)
            t[j] += s[j];
    }
}

void cpu_embedding_bwd(cdl_backend *be, int rows, int d, int vocab, const float *ids,
                       const float *dy, float *dw)
{
    (void)vocab;
    if (rows <= 0 || d <= 0)
        return;
    emb_ctx c = {.rows = rows, .d = (size_t)d, .ids = ids, .src = dy, .dst = dw};
    size_t blocks = ((size_t)d + EMB_COLS - 1) / EMB_COLS;
    size_t per_block = (size_t)rows * EMB_COLS;
    pool_for(cpu_pool(be), blocks, CPU_ELT_GRAIN / per_block + 1, scatter_cols, &c);
}

/* Flat elements [b,e) of (n, m): column j runs on from b % m. */
static void bcast_chunk(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    (void)chunk, (void)tid;
    const emb_ctx *c = vctx;
    size_t j = b % c->d;
    for (size_t i = b; i < e;) {
        size_t stop = i + (c->d - j) < e ? i + (c->d - j) : e;
        const float *bb = c->b + j;
        for (size_t k = 0; k < stop - i; k++)
            c->dst[i + k] = c->src[i + k] + bb[k];
        i = stop;
        j = 0;
    }
}

void cpu_bcast_add_fwd(cdl_backend *be, int n, size_t m, const float *x, const float *b,
                       float *y)
{
    if (n <= 0 || m == 0)
        return;
    emb_ctx c = {.d = m, .src = x, .b = b, .dst = y};
    pool_for(cpu_pool(be), (size_t)n * m, CPU_ELT_GRAIN, bcast_chunk, &c);
}

static void colsum_cols(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    (void)chunk, (void)tid;
    const emb_ctx *c = vctx;
    size_t j0 = b * EMB_COLS, j1 = e * EMB_COLS < c->d ? e * EMB_COLS : c->d;
    memcpy(c->dst + j0, c->src + j0, (j1 - j0) * sizeof *c->dst);
    for (size_t r = 1; r < (size_t)c->rows; r++) {
        const float *s = c->src + r * c->d;
        for (size_t j = j0; j < j1; j++)
            c->dst[j] += s[j];
    }
}

void cpu_bcast_add_bwd(cdl_backend *be, int n, size_t m, const float *dy, float *db)
{
    if (m == 0)
        return;
    if (n <= 0) {
        memset(db, 0, m * sizeof *db);
        return;
    }
    emb_ctx c = {.rows = n, .d = m, .src = dy, .dst = db};
    size_t blocks = (m + EMB_COLS - 1) / EMB_COLS;
    size_t per_block = (size_t)n * EMB_COLS;
    pool_for(cpu_pool(be), blocks, CPU_ELT_GRAIN / per_block + 1, colsum_cols, &c);
}
