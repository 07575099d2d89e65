/* conv2d by im2col + SGEMM (see conv2d.h): x is (n,c,h,w), w is
 * (oc,c,kh,kw), b is (oc), y is (n,oc,oh,ow). Any kernel size, stride and
 * padding.
 *
 * Each image is cut into tiles of whole output rows small enough that the
 * im2col block (K = c*kh*kw rows, tile_p = rows*ow columns) stays in L2; one
 * single-threaded SGEMM per tile does y_tile (oc,tile_p) = w (oc,K) *
 * col (K,tile_p). Many small GEMMs beat one batched GEMM for small channel
 * counts (notes/field-facts.md: 4-6x). 1x1 stride-1 unpadded convolutions
 * use x itself as the column matrix.
 *
 * Forward: the n*tiles items are split over the threads. Backward: images are
 * split over the threads; thread t accumulates dw/db over its images into its
 * own partial (thread 0 into dw/db directly), and the partials are summed in
 * thread order afterwards, so results are bitwise reproducible for a given
 * thread count.
 *
 * Workspace per thread: col (K*tile_p, none for the 1x1 shortcut), then a dw
 * partial (oc*K) and a db partial (oc), each rounded to 64-byte lines.
 */
#include <string.h>

#include <cblas.h>

#include "kernels/cpu/conv2d.h"
#include "kernels/cpu/cpu.h"

/* Target size of one im2col tile, in floats (256 KB: a quarter of Zen 4's
 * L2, leaving room for w and the output tile). */
#define CONV_TILE_FLOATS 65536

typedef struct conv_plan {
    int K;            /* c*kh*kw: rows of the column matrix */
    int P;            /* oh*ow: output pixels per image */
    int tile_rows;    /* output rows per tile */
    int ntiles;
    int direct;       /* 1x1, stride 1, no padding: x is the column matrix */
    size_t col_floats, dw_floats, db_floats, per_thread;
} conv_plan;

static void conv_plan_make(const cdl_conv2d_desc *d, conv_plan *p)
{
    p->K = d->c * d->kh * d->kw;
    p->P = d->oh * d->ow;
    p->direct = d->kh == 1 && d->kw == 1 && d->stride == 1 && d->pad == 0;
    size_t row_floats = (size_t)p->K * (size_t)(d->ow > 0 ? d->ow : 1);
    size_t rows = CONV_TILE_FLOATS / row_floats;
    if (rows < 1)
        rows = 1;
    if (rows > (size_t)d->oh)
        rows = (size_t)(d->oh > 0 ? d->oh : 1);
    p->tile_rows = (int)rows;
    p->ntiles = d->oh > 0 ? (d->oh + p->tile_rows - 1) / p->tile_rows : 0;
    p->col_floats = p->direct ? 0 : cpu_align16((size_t)p->K * rows * (size_t)d->ow);
    p->dw_floats = cpu_align16((size_t)d->oc * p->K);
    p->db_floats = cpu_align16((size_t)d->oc);
    p->per_thread = p->col_floats + p->dw_floats + p->db_floats;
}

size_t conv_gemm_workspace(const cdl_conv2d_desc *d, int threads)
{
    conv_plan p;
    conv_plan_make(d, &p);
    return p.per_thread * (size_t)threads;
}

/* Valid output columns [*ox0,*ox1) for kernel column kx: those whose input
 * column ox*stride - pad + kx lies in [0,w). */
static inline void valid_cols(const cdl_conv2d_desc *d, int kx, int *ox0, int *ox1)
{
    int lo = d->pad - kx;                 /* need ox*stride >= lo */
    int hi = d->w - 1 + d->pad - kx;      /* need ox*stride <= hi */
    int a = lo > 0 ? (lo + d->stride - 1) / d->stride : 0;
    int b = hi >= 0 ? hi / d->stride + 1 : 0;
    if (b > d->ow)
        b = d->ow;
    if (a > b)
        a = b;
    *ox0 = a;
    *ox1 = b;
}

/* col (K, (r1-r0)*ow) from one image x (c,h,w) for output rows [r0,r1). */
static void im2col_tile(const cdl_conv2d_desc *d, const float *x, int r0, int r1, float *col)
{
    int ow = d->ow, tp = (r1 - r0) * ow;
    for (int ci = 0; ci < d->c; ci++) {
        const float *xc = x + (size_t)ci * d->h * d->w;
        for (int ky = 0; ky < d->kh; ky++)
            for (int kx = 0; kx < d->kw; kx++) {
                float *dst = col + (size_t)((ci * d->kh + ky) * d->kw + kx) * tp;
                int ox0, ox1;
                valid_cols(d, kx, &ox0, &ox1);
                for (int r = r0; r < r1; r++, dst += ow) {
                    int iy = r * d->stride - d->pad + ky;
                    if (iy < 0 || iy >= d->h) {
                        memset(dst, 0, (size_t)ow * sizeof *dst);
                        continue;
                    }
                    const float *src = xc + (size_t)iy * d->w - d->pad + kx;
                    for (int ox = 0; ox < ox0; ox++)
                        dst[ox] = 0.0f;
                    if (d->stride == 1)
                        memcpy(dst + ox0, src + ox0, (size_t)(ox1 - ox0) * sizeof *dst);
                    else
                        for (int ox = ox0; ox < ox1; ox++)
                            dst[ox] = src[ox * d->stride];
                    for (int ox = ox1; ox < ow; ox++)
                        dst[ox] = 0.0f;
                }
            }
    }
}

/* dx (c,h,w) += col2im(col) for output rows [r0,r1): the adjoint of im2col. */
static void col2im_tile(const cdl_conv2d_desc *d, const float *col, int r0, int r1, float *dx)
{
    int ow = d->ow, tp = (r1 - r0) * ow;
    for (int ci = 0; ci < d->c; ci++) {
        float *dxc = dx + (size_t)ci * d->h * d->w;
        for (int ky = 0; ky < d->kh; ky++)
            for (int kx = 0; kx < d->kw; kx++) {
                const float *src = col + (size_t)((ci * d->kh + ky) * d->kw + kx) * tp;
                int ox0, ox1;
                valid_cols(d, kx, &ox0, &ox1);
                for (int r = r0; r < r1; r++, src += ow) {
                    int iy = r * d->stride - d->pad + ky;
                    if (iy < 0 || iy >= d->h)
                        continue;
                    float *dst = dxc + (size_t)iy * d->w - d->pad + kx;
                    for (int ox = ox0; ox < ox1; ox++)
                        dst[ox * d->stride] += src[ox];
                }
            }
    }
}

typedef struct conv_ctx {
    const cdl_conv2d_desc *d;
    conv_plan plan;
    const float *x, *w, *b, *dy;
    float *y, *dx, *dw, *db, *ws;
    int threads;
} conv_ctx;

/* The column matrix of tile [r0,r1) of image x: im2col into the thread's
 * buffer, or x itself for the 1x1 shortcut. *ld is its row stride. */
static const float *tile_cols(const conv_ctx *c, const float *x, int r0, int r1, float *buf, int *ld)
{
    if (c->plan.direct) {
        *ld = c->plan.P;
        return x + (size_t)r0 * c->d->ow;
    }
    im2col_tile(c->d, x, r0, r1, buf);
    *ld = (r1 - r0) * c->d->ow;
    return buf;
}

static void conv_fwd_items(void *vctx, size_t b, size_t e, int tid)
{
    const conv_ctx *c = vctx;
    const cdl_conv2d_desc *d = c->d;
    const conv_plan *p = &c->plan;
    float *col = c->ws + (size_t)tid * p->per_thread;
    for (size_t it = b; it < e; it++) {
        size_t img = it / (size_t)p->ntiles;
        int r0 = (int)(it % (size_t)p->ntiles) * p->tile_rows;
        int r1 = r0 + p->tile_rows < d->oh ? r0 + p->tile_rows : d->oh;
        int tp = (r1 - r0) * d->ow, ld;
        const float *x = c->x + img * (size_t)d->c * d->h * d->w;
        float *y = c->y + img * (size_t)d->oc * p->P + (size_t)r0 * d->ow;
        const float *cols = tile_cols(c, x, r0, r1, col, &ld);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, d->oc, tp, p->K, 1.0f,
                    c->w, p->K, cols, ld, 0.0f, y, p->P);
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
    pool_for(pl, (size_t)d->n * c.plan.ntiles, conv_fwd_items, &c);
}

/* Thread tid's dw and db accumulators: dw/db themselves for thread 0. */
static float *part_dw(const conv_ctx *c, int tid)
{
    return tid == 0 ? c->dw : c->ws + (size_t)tid * c->plan.per_thread + c->plan.col_floats;
}

static float *part_db(const conv_ctx *c, int tid)
{
    return tid == 0 ? c->db
                    : c->ws + (size_t)tid * c->plan.per_thread + c->plan.col_floats + c->plan.dw_floats;
}

static void conv_bwd_images(void *vctx, size_t b, size_t e, int tid)
{
    const conv_ctx *c = vctx;
    const cdl_conv2d_desc *d = c->d;
    const conv_plan *p = &c->plan;
    float *col = c->ws + (size_t)tid * p->per_thread;
    float *dw = part_dw(c, tid);
    float *db = c->db ? part_db(c, tid) : NULL;
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
            const float *cols = tile_cols(c, x, r0, r1, col, &ld);
            /* dw (oc,K) += dy_tile (oc,tp) * cols^T (tp,K) */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, d->oc, p->K, tp, 1.0f,
                        dyt, p->P, cols, ld, beta, dw, p->K);
            beta = 1.0f;
            if (db)
                for (int o = 0; o < d->oc; o++) {
                    const float *g = dyt + (size_t)o * p->P;
                    float s = 0.0f;
                    for (int i = 0; i < tp; i++)
                        s += g[i];
                    db[o] += s;
                }
            if (!dx)
                continue;
            /* dcols (K,tp) = w^T (K,oc) * dy_tile (oc,tp), then scattered
             * back; the 1x1 shortcut writes dx directly. */
            if (p->direct) {
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, p->K, tp, d->oc, 1.0f,
                            c->w, p->K, dyt, p->P, 0.0f, dx + (size_t)r0 * d->ow, p->P);
            } else {
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, p->K, tp, d->oc, 1.0f,
                            c->w, p->K, dyt, p->P, 0.0f, col, tp);
                col2im_tile(d, col, r0, r1, dx);
            }
        }
    }
}

/* dw[i] (and db[i]) = sum of the partials of the threads that had images, in
 * thread order. Items [0,dw_n) are dw, [dw_n, dw_n+oc) are db. */
static void conv_reduce(void *vctx, size_t b, size_t e, int tid)
{
    (void)tid;
    const conv_ctx *c = vctx;
    size_t dw_n = (size_t)c->d->oc * c->plan.K, n = (size_t)c->d->n;
    size_t b0, e0;
    pool_chunk(n, 0, c->threads, &b0, &e0);
    int has0 = b0 < e0;
    for (size_t i = b; i < e; i++) {
        int is_db = i >= dw_n;
        size_t j = is_db ? i - dw_n : i;
        float *dst = is_db ? c->db : c->dw;
        float s = has0 ? dst[j] : 0.0f;
        for (int t = 1; t < c->threads; t++) {
            size_t bt, et;
            pool_chunk(n, t, c->threads, &bt, &et);
            if (bt < et)
                s += (is_db ? part_db(c, t) : part_dw(c, t))[j];
        }
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
    pool_for(pl, (size_t)d->n, conv_bwd_images, &c);
    size_t nred = dw_n + (db ? (size_t)d->oc : 0);
    if (c.threads > 1)
        pool_for_grain(pl, nred, 4096, conv_reduce, &c);
}
