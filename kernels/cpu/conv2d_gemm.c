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
 * thread count. dx of stride-1 convolutions is a forward correlation of dy
 * with the flipped kernel (dx_corr_desc); of others, w^T dy scattered back
 * by col2im.
 *
 * Workspace: the flipped kernel (dx_corr only), per thread a col buffer
 * (K*tile_p or the dx correlation's, none for the 1x1 shortcut), then per chunk but the first a dw partial (oc*K) and a db partial (oc),
 * each rounded to 64-byte lines.
 */
#include <string.h>

#include <cblas.h>

#include "kernels/cpu/conv2d.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/simd.h"

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
    int dx_corr;      /* dx as a forward correlation of dy (see dx_corr_desc) */
    int dx_rows;      /* dx rows per tile of that correlation */
    size_t col_floats, dw_floats, db_floats;
    size_t wt_floats; /* dx_corr: w flipped and transposed, (c, oc*kh*kw) */
} conv_plan;

/* dx of a stride-1, undilated, ungrouped convolution with pad < kernel is
 * the valid correlation of dy (oc,oh,ow), zero-padded by k-1-pad, with the
 * kernel flipped and its channel axes swapped: a forward convolution of its
 * own, described by this desc. As one GEMM per tile, (c, oc*kh*kw) x
 * (oc*kh*kw, tile) sums over the long axis and writes dx once, where
 * w^T dy then col2im summed over only oc and wrote (and re-read) kh*kw
 * times more. */
static int dx_corr_ok(const cdl_conv2d_desc *d)
{
    return d->stride_h == 1 && d->stride_w == 1 && d->dil_h == 1 && d->dil_w == 1 &&
           (d->groups <= 1) && d->pad_h >= 0 && d->pad_w >= 0 && d->pad_h < d->kh &&
           d->pad_w < d->kw && d->oh + d->kh - 1 - 2 * d->pad_h == d->h &&
           d->ow + d->kw - 1 - 2 * d->pad_w == d->w;
}

static cdl_conv2d_desc dx_corr_desc(const cdl_conv2d_desc *d)
{
    cdl_conv2d_desc t = *d;
    t.c = d->oc;
    t.h = d->oh;
    t.w = d->ow;
    t.oc = d->c;
    t.oh = d->h;
    t.ow = d->w;
    t.pad_h = d->kh - 1 - d->pad_h;
    t.pad_w = d->kw - 1 - d->pad_w;
    return t;
}

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
    p->dx_corr = !p->direct && !p->depthwise && dx_corr_ok(d);
    p->dx_rows = 1;
    p->wt_floats = 0;
    if (p->dx_corr) {
        size_t k2 = (size_t)d->oc * d->kh * d->kw, r2 = CONV_TILE_FLOATS / (k2 * (size_t)d->w);
        if (r2 < 1)
            r2 = 1;
        if (r2 > (size_t)d->h)
            r2 = (size_t)(d->h > 0 ? d->h : 1);
        p->dx_rows = (int)r2;
        size_t c2 = cpu_align16(k2 * r2 * (size_t)d->w);
        if (c2 > p->col_floats)
            p->col_floats = c2;
        p->wt_floats = cpu_align16(k2 * (size_t)d->c);
    }
    p->dw_floats = cpu_align16((size_t)d->oc * p->K);
    p->db_floats = cpu_align16((size_t)d->oc);
}

size_t conv_gemm_workspace(const cdl_conv2d_desc *d, int threads)
{
    conv_plan p;
    conv_plan_make(d, &p);
    size_t part = p.dw_floats + p.db_floats;
    return p.wt_floats + p.col_floats * (size_t)threads +
           part * (size_t)conv_bwd_chunks(threads, d->n, part);
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

/* Rows of im2col and col2im with stride 1 on AVX2: the row copies and sums
 * were a third of a resnet20 training step on CPUs without AVX-512 (short
 * rows: 8-32 floats, a memcpy call and scalar loops each). Every element is
 * summed in the same order as by the scalar loops, so results are bitwise
 * the same. Without AVX2 (or with the tests' portable switch) the scalar
 * loops run. */
#if CPU_X86
/* The lanes i of x0+[0,8) with lo <= x0+i < hi, as a mask vector. */
static CPU_AVX2 inline __m256i lanes8(int x0, int lo, int hi)
{
    __m256i i = _mm256_add_epi32(_mm256_set1_epi32(x0), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    __m256i below = _mm256_cmpgt_epi32(_mm256_set1_epi32(lo), i);
    __m256i inside = _mm256_cmpgt_epi32(_mm256_set1_epi32(hi), i);
    return _mm256_andnot_si256(below, inside);
}

/* The im2col rows [r0,r1) of tap (ky,kx) of channel plane xc (h,w), stride
 * 1: dst row r = xc row iy(r) at columns ox - pad_w + kx*dil_w for ox in
 * [ox0,ox1), 0 elsewhere (and all 0 for a row iy outside the plane; any
 * stride_h).
 * Vectors wholly inside [ox0,ox1) are plain loads; the edge vectors are
 * masked loads (their off lanes may lie outside x and are not read). */
static CPU_AVX2 void im2col_rows8(const cdl_conv2d_desc *d, const float *xc, int ky, int kx,
                                  int r0, int r1, int ox0, int ox1, float *dst)
{
    const int ow = d->ow;
    for (int r = r0; r < r1; r++, dst += ow) {
        int iy = r * d->stride_h - d->pad_h + ky * d->dil_h;
        int x0 = 0;
        if (iy < 0 || iy >= d->h) {
            for (; x0 + 8 <= ow; x0 += 8)
                _mm256_storeu_ps(dst + x0, _mm256_setzero_ps());
            for (; x0 < ow; x0++)
                dst[x0] = 0.0f;
            continue;
        }
        const float *src = xc + (size_t)iy * d->w - d->pad_w + kx * d->dil_w;
        for (; x0 + 8 <= ow; x0 += 8) {
            __m256 v = x0 >= ox0 && x0 + 8 <= ox1
                           ? _mm256_loadu_ps(src + x0)
                           : _mm256_maskload_ps(src + x0, lanes8(x0, ox0, ox1));
            _mm256_storeu_ps(dst + x0, v);
        }
        if (x0 < ow)
            _mm256_maskstore_ps(dst + x0, lanes8(x0, 0, ow),
                                _mm256_maskload_ps(src + x0, lanes8(x0, ox0, ox1)));
    }
}

/* dst[ox] += src[ox] for ox in [ox0,ox1). */
static CPU_AVX2 void col2im_row8(float *dst, const float *src, int ox0, int ox1)
{
    int ox = ox0;
    for (; ox + 8 <= ox1; ox += 8)
        _mm256_storeu_ps(dst + ox,
                         _mm256_add_ps(_mm256_loadu_ps(dst + ox), _mm256_loadu_ps(src + ox)));
    for (; ox < ox1; ox++)
        dst[ox] += src[ox];
}
#else
static void im2col_rows8(const cdl_conv2d_desc *d, const float *xc, int ky, int kx, int r0,
                         int r1, int ox0, int ox1, float *dst)
{
    (void)d, (void)xc, (void)ky, (void)kx, (void)r0, (void)r1, (void)ox0, (void)ox1, (void)dst;
}

static void col2im_row8(float *dst, const float *src, int ox0, int ox1)
{
    (void)dst, (void)src, (void)ox0, (void)ox1;
}
#endif

/* col (K, (r1-r0)*ow) from the cg channels at x (cg,h,w) of one image
 * for output rows [r0,r1). */
static void im2col_tile(const cdl_conv2d_desc *d, int cg, const float *x, int r0, int r1,
                        float *col)
{
    int ow = d->ow, tp = (r1 - r0) * ow, avx2 = cpu_has_avx2();
    for (int ci = 0; ci < cg; ci++) {
        const float *xc = x + (size_t)ci * d->h * d->w;
        for (int ky = 0; ky < d->kh; ky++)
            for (int kx = 0; kx < d->kw; kx++) {
                float *dst = col + (size_t)((ci * d->kh + ky) * d->kw + kx) * tp;
                int ox0, ox1;
                valid_cols(d, kx, &ox0, &ox1);
                if (d->stride_w == 1 && avx2) {
                    im2col_rows8(d, xc, ky, kx, r0, r1, ox0, ox1, dst);
                    continue;
                }
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
    int ow = d->ow, tp = (r1 - r0) * ow, avx2 = cpu_has_avx2();
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
                    if (d->stride_w == 1 && avx2) {
                        col2im_row8(dst, src, ox0, ox1);
                        continue;
                    }
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
    float *col = c->ws + p->wt_floats + (size_t)tid * p->col_floats;
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
    size_t base = c->plan.wt_floats + c->plan.col_floats * (size_t)c->threads;
    return i == 0 ? c->dw : c->ws + base + (size_t)(i - 1) * (c->plan.dw_floats + c->plan.db_floats);
}

static float *part_db(const conv_ctx *c, int i)
{
    return i == 0 ? c->db : part_dw(c, i) + c->plan.dw_floats;
}

/* dx (c,h,w) of one image from its dy (oc,oh,ow) by the correlation of
 * dx_corr_desc, with the flipped weights at the start of the workspace. */
static void dx_by_corr(const conv_ctx *c, const float *dy, float *dx, float *col)
{
    const cdl_conv2d_desc *d = c->d;
    cdl_conv2d_desc t = dx_corr_desc(d);
    int k2 = d->oc * d->kh * d->kw, rows = c->plan.dx_rows;
    size_t plane = (size_t)d->h * d->w;
    for (int r0 = 0; r0 < d->h; r0 += rows) {
        int r1 = r0 + rows < d->h ? r0 + rows : d->h;
        im2col_tile(&t, d->oc, dy, r0, r1, col);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, d->c, (r1 - r0) * d->w, k2, 1.0f,
                    c->ws, k2, col, (r1 - r0) * d->w, 0.0f, dx + (size_t)r0 * d->w, (int)plane);
    }
}

/* ws (c, oc, kh, kw) = w (oc, c, kh, kw) flipped in both kernel axes. */
static void flip_weights(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    (void)chunk, (void)tid;
    const conv_ctx *c = vctx;
    const cdl_conv2d_desc *d = c->d;
    size_t kk = (size_t)d->kh * d->kw;
    for (size_t i = b; i < e; i++) {   /* i = ci*oc + o */
        size_t ci = i / (size_t)d->oc, o = i % (size_t)d->oc;
        const float *src = c->w + (o * (size_t)d->c + ci) * kk;
        float *dst = c->ws + i * kk;
        for (size_t k = 0; k < kk; k++)
            dst[k] = src[kk - 1 - k];
    }
}

static void conv_bwd_images(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    const conv_ctx *c = vctx;
    const cdl_conv2d_desc *d = c->d;
    const conv_plan *p = &c->plan;
    float *col = c->ws + p->wt_floats + (size_t)tid * p->col_floats;
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
        if (dx && !p->direct && !p->dx_corr)
            memset(dx, 0, in_img * sizeof *dx);
        if (dx && p->dx_corr)
            dx_by_corr(c, dy, dx, col);
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
                if (!dx || p->dx_corr)
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
    if (dx && c.plan.dx_corr)
        pool_for(pl, (size_t)d->c * d->oc, 256, flip_weights, &c);
    pool_run(pl, (size_t)d->n, c.chunks, conv_bwd_images, &c);
    size_t nred = dw_n + (db ? (size_t)d->oc : 0);
    if (c.chunks > 1)
        pool_for(pl, nred, 4096, conv_reduce, &c);
}
