/* conv2d by im2col + SGEMM (see conv2d.h): x is (n,c,h,w), w is
 * (oc,c/groups,kh,kw), b is (oc), y is (n,oc,oh,ow). Any kernel size, stride,
 * padding, dilation and group count: group g's output channels
 * [g*ocg,(g+1)*ocg) are one SGEMM over the column matrix of its input
 * channels [g*cg,(g+1)*cg) (cg = c/groups, ocg = oc/groups).
 *
 * Each image is cut into tiles of whole output rows small enough that the
 * im2col block (K = c*kh*kw rows, tile_p = rows*ow columns) stays in L2; one
 * single-threaded SGEMM per tile does y_tile (oc,tile_p) = w (oc,K) *
 * col (K,tile_p). Many small GEMMs beat one batched GEMM for small channel
 * counts (notes/field-facts.md: 4-6x). 1x1 stride-1 unpadded convolutions
 * use x itself as the column matrix.
 *
 * Forward: the n*tiles items are split over the threads. Backward: images are
 * cut into chunks (pool.h); chunk i accumulates dw/db over its images into
 * its own partial (chunk 0 into dw/db directly), and the partials are summed
 * in chunk order afterwards, so results are bitwise reproducible for a given
 * thread count.
 *
 * Workspace: per thread a col buffer (K*tile_p, none for the 1x1 shortcut),
 * then per chunk but the first a dw partial (oc*K) and a db partial (oc),
 * each rounded to 64-byte lines.
 */
#include <string.h>

#include <cblas.h>

#include "kernels/cpu/conv2d.h"
#include "kernels/cpu/cpu.h"

/* Target size of one im2col tile, in floats (256 KB: a quarter of Zen 4's
 * L2, leaving room for w and the output tile). */
#define CONV_TILE_FLOATS 65536

typedef struct conv_plan {
    int K;            /* cg*kh*kw: rows of one group's column matrix */
    int G, cg, ocg;   /* groups, input and output channels per group */
    int P;            /* oh*ow: output pixels per image */
    int tile_rows;    /* output rows per tile */
    int ntiles;
    int direct;       /* 1x1, stride 1, no padding: x is the column matrix */
    int depthwise;    /* one input and output channel per group: direct loops */
    size_t col_floats, dw_floats, db_floats;
} conv_plan;

static void conv_plan_make(const cdl_conv2d_desc *d, conv_plan *p)
{
    p->G = d->groups > 0 ? d->groups : 1;
    p->cg = d->c / p->G;
    p->ocg = d->oc / p->G;
    p->K = p->cg * d->kh * d->kw;
    p->depthwise = p->cg == 1 && p->ocg == 1 && p->G > 1;
    p->P = d->oh * d->ow;
    p->direct = d->kh == 1 && d->kw == 1 && d->stride_h == 1 && d->stride_w == 1 &&
                d->pad_h == 0 && d->pad_w == 0;
    size_t row_floats = (size_t)p->K * (size_t)(d->ow > 0 ? d->ow : 1);
    size_t rows = CONV_TILE_FLOATS / row_floats;
    if (rows < 1)
        rows = 1;
    if (rows > (size_t)d->oh)
        rows = (size_t)(d->oh > 0 ? d->oh : 1);
    p->tile_rows = (int)rows;
    p->ntiles = d->oh > 0 ? (d->oh + p->tile_rows - 1) / p->tile_rows : 0;
    p->col_floats = p->direct || p->depthwise ? 0 : cpu_align16((size_t)p->K * rows * (size_t)d->ow);
    p->dw_floats = cpu_align16((size_t)d->oc * p->K);
    p->db_floats = cpu_align16((size_t)d->oc);
}

size_t conv_gemm_workspace(const cdl_conv2d_desc *d, int threads)
{
    conv_plan p;
    conv_plan_make(d, &p);
    size_t part = p.dw_floats + p.db_floats;
    return p.col_floats * (size_t)threads + part * (size_t)conv_bwd_chunks(threads, d->n, part);
}

/* Valid output columns [*ox0,*ox1) for kernel column kx: those whose input
 * column ox*stride_w - pad_w + kx*dil_w lies in [0,w). */
static inline void valid_cols(const cdl_conv2d_desc *d, int kx, int *ox0, int *ox1)
{
    int s = d->stride_w, off = kx * d->dil_w;
    int lo = d->pad_w - off;              /* need ox*stride >= lo */
    int hi = d->w - 1 + d->pad_w - off;   /* need ox*stride <= hi */
    int a = lo > 0 ? (lo + s - 1) / s : 0;
    int b = hi >= 0 ? hi / s + 1 : 0;
    if (b > d->ow)
        b = d->ow;
    if (a > b)
        a = b;
    *ox0 = a;
    *ox1 = b;
}

/* col (K, (r1-r0)*ow) from the cg channels at x (cg,h,w) of one image
 * for output rows [r0,r1). */
static void im2col_tile(const cdl_conv2d_desc *d, int cg, const float *x, int r0, int r1,
                        float *col)
{
    int ow = d->ow, tp = (r1 - r0) * ow;
    for (int ci = 0; ci < cg; ci++) {
        const float *xc = x + (size_t)ci * d->h * d->w;
        for (int ky = 0; ky < d->kh; ky++)
            for (int kx = 0; kx < d->kw; kx++) {
                float *dst = col + (size_t)((ci * d->kh + ky) * d->kw + kx) * tp;
                int ox0, ox1;
                valid_cols(d, kx, &ox0, &ox1);
                for (int r = r0; r < r1; r++, dst += ow) {
                    int iy = r * d->stride_h - d->pad_h + ky * d->dil_h;
                    if (iy < 0 || iy >= d->h) {
                        memset(dst, 0, (size_t)ow * sizeof *dst);
                        continue;
                    }
                    const float *src = xc + (size_t)iy * d->w - d->pad_w + kx * d->dil_w;
                    for (int ox = 0; ox < ox0; ox++)
                        dst[ox] = 0.0f;
                    if (d->stride_w == 1)
                        memcpy(dst + ox0, src + ox0, (size_t)(ox1 - ox0) * sizeof *dst);
                    else
                        for (int ox = ox0; ox < ox1; ox++)
                            dst[ox] = src[ox * d->stride_w];
                    for (int ox = ox1; ox < ow; ox++)
                        dst[ox] = 0.0f;
                }
            }
    }
}

/* dx (cg,h,w) += col2im(col) for output rows [r0,r1): the adjoint of
 * im2col. */
static void col2im_tile(const cdl_conv2d_desc *d, int cg, const float *col, int r0, int r1,
                        float *dx)
{
    int ow = d->ow, tp = (r1 - r0) * ow;
    for (int ci = 0; ci < cg; ci++) {
        float *dxc = dx + (size_t)ci * d->h * d->w;
        for (int ky = 0; ky < d->kh; ky++)
            for (int kx = 0; kx < d->kw; kx++) {
                const float *src = col + (size_t)((ci * d->kh + ky) * d->kw + kx) * tp;
                int ox0, ox1;
                valid_cols(d, kx, &ox0, &ox1);
                for (int r = r0; r < r1; r++, src += ow) {
                    int iy = r * d->stride_h - d->pad_h + ky * d->dil_h;
                    if (iy < 0 || iy >= d->h)
                        continue;
                    float *dst = dxc + (size_t)iy * d->w - d->pad_w + kx * d->dil_w;
                    for (int ox = ox0; ox < ox1; ox++)
                        dst[ox * d->stride_w] += src[ox];
                }
            }
    }
}

/* Depthwise (one input and one output channel per group): direct loops
 * instead of a one-row SGEMM. For output rows [r0,r1) of channel plane xc
 * (h,w) with kernel wk (kh,kw): y rows are overwritten (fwd); or dw (kh*kw)
 * accumulates and dxc (h,w) accumulates unless NULL (bwd). */
static void dw_fwd_rows(const cdl_conv2d_desc *d, const float *xc, const float *wk, int r0,
                        int r1, float *y)
{
    memset(y + (size_t)r0 * d->ow, 0, (size_t)(r1 - r0) * d->ow * sizeof *y);
    for (int ky = 0; ky < d->kh; ky++)
        for (int kx = 0; kx < d->kw; kx++) {
            float wv = wk[ky * d->kw + kx];
            int ox0, ox1;
            valid_cols(d, kx, &ox0, &ox1);
            for (int r = r0; r < r1; r++) {
                int iy = r * d->stride_h - d->pad_h + ky * d->dil_h;
                if (iy < 0 || iy >= d->h)
                    continue;
                const float *src = xc + (size_t)iy * d->w - d->pad_w + kx * d->dil_w;
                float *dst = y + (size_t)r * d->ow;
                for (int ox = ox0; ox < ox1; ox++)
                    dst[ox] += wv * src[ox * d->stride_w];
            }
        }
}

static void dw_bwd_rows(const cdl_conv2d_desc *d, const float *xc, const float *wk,
                        const float *dy, int r0, int r1, float *dw, float *dxc)
{
    for (int ky = 0; ky < d->kh; ky++)
        for (int kx = 0; kx < d->kw; kx++) {
            float wv = wk[ky * d->kw + kx], acc = 0.0f;
            int ox0, ox1;
            valid_cols(d, kx, &ox0, &ox1);
            for (int r = r0; r < r1; r++) {
                int iy = r * d->stride_h - d->pad_h + ky * d->dil_h;
                if (iy < 0 || iy >= d->h)
                    continue;
                size_t off = (size_t)iy * d->w - d->pad_w + kx * d->dil_w;
                const float *src = xc + off, *g = dy + (size_t)r * d->ow;
                for (int ox = ox0; ox < ox1; ox++)
                    acc += g[ox] * src[ox * d->stride_w];
                if (dxc)
                    for (int ox = ox0; ox < ox1; ox++)
                        dxc[off + (size_t)ox * d->stride_w] += wv * g[ox];
            }
            dw[ky * d->kw + kx] += acc;
        }
}

typedef struct conv_ctx {
    const cdl_conv2d_desc *d;
    conv_plan plan;
    const float *x, *w, *b, *dy;
    float *y, *dx, *dw, *db, *ws;
    int threads, chunks;
} conv_ctx;

/* The column matrix of tile [r0,r1) of group g of image x: im2col into
 * the thread's buffer, or x itself for the 1x1 shortcut. *ld is its row
 * stride. */
static const float *tile_cols(const conv_ctx *c, const float *x, int g, int r0, int r1,
                              float *buf, int *ld)
{
    x += (size_t)g * c->plan.cg * c->d->h * c->d->w;
    if (c->plan.direct) {
        *ld = c->plan.P;
        return x + (size_t)r0 * c->d->ow;
    }
    im2col_tile(c->d, c->plan.cg, x, r0, r1, buf);
    *ld = (r1 - r0) * c->d->ow;
    return buf;
}

static void conv_fwd_items(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    (void)chunk;
    const conv_ctx *c = vctx;
    const cdl_conv2d_desc *d = c->d;
    const conv_plan *p = &c->plan;
    float *col = c->ws + (size_t)tid * p->col_floats;
    for (size_t it = b; it < e; it++) {
        size_t img = it / (size_t)p->ntiles;
        int r0 = (int)(it % (size_t)p->ntiles) * p->tile_rows;
        int r1 = r0 + p->tile_rows < d->oh ? r0 + p->tile_rows : d->oh;
        int tp = (r1 - r0) * d->ow, ld;
        const float *x = c->x + img * (size_t)d->c * d->h * d->w;
        float *y = c->y + img * (size_t)d->oc * p->P + (size_t)r0 * d->ow;
        for (int g = 0; g < p->G && p->depthwise; g++)
            dw_fwd_rows(d, x + (size_t)g * d->h * d->w, c->w + (size_t)g * p->K, r0, r1,
                        y + (size_t)g * p->P - (size_t)r0 * d->ow);
        for (int g = 0; g < p->G && !p->depthwise; g++) {
            size_t o0 = (size_t)g * p->ocg;
            const float *cols = tile_cols(c, x, g, r0, r1, col, &ld);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, p->ocg, tp, p->K, 1.0f,
                        c->w + o0 * p->K, p->K, cols, ld, 0.0f, y + o0 * p->P, p->P);
        }
        if (c->b)
            for (int o = 0; o < d->oc; o++) {
                float bo = c->b[o];
                float *yo = y + (size_t)o * p->P;
                for (int i = 0; i < tp; i++)
                    yo[i] += bo;
            }
    }
}

void conv_gemm_fwd(pool *pl, const cdl_conv2d_desc *d, const float *x, const float *w,
                   const float *b, float *y, float *ws)
{
    conv_ctx c = {.d = d, .x = x, .w = w, .b = b, .y = y, .ws = ws};
    conv_plan_make(d, &c.plan);
    if (d->n <= 0 || c.plan.P <= 0 || d->oc <= 0)
        return;
    pool_for(pl, (size_t)d->n * c.plan.ntiles, 1, conv_fwd_items, &c);
}

/* Chunk i's dw and db accumulators: dw/db themselves for chunk 0. */
static float *part_dw(const conv_ctx *c, int i)
{
    size_t base = c->plan.col_floats * (size_t)c->threads;
    return i == 0 ? c->dw : c->ws + base + (size_t)(i - 1) * (c->plan.dw_floats + c->plan.db_floats);
}

static float *part_db(const conv_ctx *c, int i)
{
    return i == 0 ? c->db : part_dw(c, i) + c->plan.dw_floats;
}

static void conv_bwd_images(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    const conv_ctx *c = vctx;
    const cdl_conv2d_desc *d = c->d;
    const conv_plan *p = &c->plan;
    float *col = c->ws + (size_t)tid * p->col_floats;
    float *dw = part_dw(c, chunk);
    float *db = c->db ? part_db(c, chunk) : NULL;
    size_t in_img = (size_t)d->c * d->h * d->w, out_img = (size_t)d->oc * p->P;
    float beta = 0.0f;
    if (db)
        memset(db, 0, (size_t)d->oc * sizeof *db);
    for (size_t img = b; img < e; img++) {
        const float *x = c->x + img * in_img;
        const float *dy = c->dy + img * out_img;
        float *dx = c->dx ? c->dx + img * in_img : NULL;
        if (dx && !p->direct)
            memset(dx, 0, in_img * sizeof *dx);
        for (int r0 = 0; r0 < d->oh; r0 += p->tile_rows) {
            int r1 = r0 + p->tile_rows < d->oh ? r0 + p->tile_rows : d->oh;
            int tp = (r1 - r0) * d->ow, ld;
            const float *dyt = dy + (size_t)r0 * d->ow;
            if (p->depthwise && beta == 0.0f)
                memset(dw, 0, (size_t)d->oc * p->K * sizeof *dw);
            for (int g = 0; g < p->G && p->depthwise; g++)
                dw_bwd_rows(d, x + (size_t)g * d->h * d->w, c->w + (size_t)g * p->K,
                            dy + (size_t)g * p->P, r0, r1, dw + (size_t)g * p->K,
                            dx ? dx + (size_t)g * d->h * d->w : NULL);
            for (int g = 0; g < p->G && !p->depthwise; g++) {
                size_t o0 = (size_t)g * p->ocg, i0 = (size_t)g * p->cg * d->h * d->w;
                const float *cols = tile_cols(c, x, g, r0, r1, col, &ld);
                const float *dyg = dyt + o0 * p->P;
                const float *wg = c->w + o0 * p->K;
                /* dw_g (ocg,K) += dy_tile_g (ocg,tp) * cols^T (tp,K) */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, p->ocg, p->K, tp, 1.0f,
                            dyg, p->P, cols, ld, beta, dw + o0 * p->K, p->K);
                if (!dx)
                    continue;
                /* dcols (K,tp) = w_g^T (K,ocg) * dy_tile_g (ocg,tp), then
                 * scattered back; the 1x1 shortcut writes dx directly. */
                if (p->direct) {
                    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, p->K, tp, p->ocg, 1.0f,
                                wg, p->K, dyg, p->P, 0.0f, dx + i0 + (size_t)r0 * d->ow, p->P);
                } else {
                    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, p->K, tp, p->ocg, 1.0f,
                                wg, p->K, dyg, p->P, 0.0f, col, tp);
                    col2im_tile(d, p->cg, col, r0, r1, dx + i0);
                }
            }
            beta = 1.0f;
            if (db)
                for (int o = 0; o < d->oc; o++) {
                    const float *g = dyt + (size_t)o * p->P;
                    float s = 0.0f;
                    for (int i = 0; i < tp; i++)
                        s += g[i];
                    db[o] += s;
                }
        }
    }
}

/* dw[i] (and db[i]) += the partials of chunks 1.., in chunk order. Items
 * [0,dw_n) are dw, [dw_n, dw_n+oc) are db. */
static void conv_reduce(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    (void)chunk;
    (void)tid;
    const conv_ctx *c = vctx;
    size_t dw_n = (size_t)c->d->oc * c->plan.K;
    for (size_t i = b; i < e; i++) {
        int is_db = i >= dw_n;
        size_t j = is_db ? i - dw_n : i;
        float *dst = is_db ? c->db : c->dw;
        float s = dst[j];
        for (int k = 1; k < c->chunks; k++)
            s += (is_db ? part_db(c, k) : part_dw(c, k))[j];
        dst[j] = s;
    }
}

void conv_gemm_bwd(pool *pl, const cdl_conv2d_desc *d, const float *x, const float *w,
                   const float *dy, float *dx, float *dw, float *db, float *ws)
{
    conv_ctx c = {.d = d, .x = x, .w = w, .dy = dy, .dx = dx, .dw = dw, .db = db, .ws = ws,
                  .threads = pool_threads(pl)};
    conv_plan_make(d, &c.plan);
    size_t dw_n = (size_t)d->oc * c.plan.K;
    if (d->n <= 0 || c.plan.P <= 0) {
        memset(dw, 0, dw_n * sizeof *dw);
        if (db)
            memset(db, 0, (size_t)d->oc * sizeof *db);
        if (dx)
            memset(dx, 0, (size_t)(d->n > 0 ? d->n : 0) * d->c * d->h * d->w * sizeof *dx);
        return;
    }
    c.chunks = conv_bwd_chunks(c.threads, d->n, c.plan.dw_floats + c.plan.db_floats);
    pool_run(pl, (size_t)d->n, c.chunks, conv_bwd_images, &c);
    size_t nred = dw_n + (db ? (size_t)d->oc : 0);
    if (c.chunks > 1)
        pool_for(pl, nred, 4096, conv_reduce, &c);
}
