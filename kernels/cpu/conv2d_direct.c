/* Direct stride-1 conv2d with AVX-512 (see conv2d.h), for the small channel
 * counts where im2col+SGEMM runs thin GEMMs. x is (n,c,h,w), w (oc,c,kh,kw),
 * y (n,oc,oh,ow).
 *
 * Everything is a "valid" correlation of a zero-padded input with a block of
 * at most OB=6 output channels (corr_block):
 *   forward  y  = corr(pad(x, pad), w)
 *   dx          = corr(pad(dy, k-1-pad), w flipped, channels swapped)
 * Outputs are cut into 16-lane row segments (masked at the row end); SB=4
 * segments x OB channels = 24 accumulators stay in registers while the taps
 * stream by: per tap 4 input loads and 6 weight broadcasts feed 24 FMAs.
 *
 * dW[o][t] = sum over positions of dy[o] * tap t of x: per image, OB channels
 * x TB=3 taps of 16-lane partial sums stay in registers over all segments
 * (dw_block), are added to the thread's partial (oc, K, 16) in ws, and after
 * all images the partials are summed in thread order and lane-reduced, so
 * the result is reproducible for a thread count.
 *
 * Workspace: shared transposed weights, then per thread: padded x, padded
 * dy, dW and db partials.
 */
#include <string.h>

#include "kernels/cpu/conv2d.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/simd.h"

#define OB 6   /* output channels per block */
#define SB 4   /* output segments (16 lanes each) per block */
#define TB 3   /* taps per dW block */

typedef struct dplan {
    int K, P;              /* c*kh*kw taps; oh*ow outputs per channel */
    int hp, wp;            /* forward input, padded */
    int hq, wq;            /* dy padded for dx: (oh,ow) + 2*(k-1-pad) */
    int Kq;                /* oc*kh*kw: taps of the dx correlation */
    int ocb, cb;           /* channel blocks of OB: forward outputs, dx outputs */
    int Kpad;              /* K rounded up to TB */
    size_t wt_floats;      /* forward weights: [ocb][K][OB] */
    size_t wq_floats;      /* dx weights: [cb][Kq][OB] */
    size_t xpad_floats;    /* per thread: padded x (0 when pad == 0) */
    size_t qpad_floats;    /* per thread: padded dy */
    size_t dwp_floats;     /* per thread: dW partial [oc][Kpad][16] */
    size_t dbp_floats;     /* per thread: db partial [oc][16] */
    size_t shared, per_thread;
} dplan;

static void dplan_make(const cdl_conv2d_desc *d, dplan *p)
{
    p->K = d->c * d->kh * d->kw;
    p->P = d->oh * d->ow;
    p->hp = d->h + 2 * d->pad;
    p->wp = d->w + 2 * d->pad;
    p->hq = d->oh + 2 * (d->kh - 1 - d->pad);
    p->wq = d->ow + 2 * (d->kw - 1 - d->pad);
    p->Kq = d->oc * d->kh * d->kw;
    p->ocb = (d->oc + OB - 1) / OB;
    p->cb = (d->c + OB - 1) / OB;
    p->Kpad = (p->K + TB - 1) / TB * TB;
    p->wt_floats = cpu_align16((size_t)p->ocb * p->K * OB);
    p->wq_floats = cpu_align16((size_t)p->cb * p->Kq * OB);
    p->xpad_floats = d->pad ? cpu_align16((size_t)d->c * p->hp * p->wp) : 0;
    p->qpad_floats = cpu_align16((size_t)d->oc * p->hq * p->wq);
    p->dwp_floats = (size_t)d->oc * p->Kpad * 16;
    p->dbp_floats = (size_t)d->oc * 16;
    p->shared = p->wt_floats + p->wq_floats;
    p->per_thread = p->xpad_floats + p->qpad_floats + p->dwp_floats + p->dbp_floats;
}

int conv_direct_supported(const cdl_conv2d_desc *d)
{
    if (!cpu_has_avx512())
        return 0;
    if (d->stride != 1 || d->pad < 0 || d->pad >= d->kh || d->pad >= d->kw)
        return 0;
    if (d->n < 1 || d->c < 1 || d->oc < 1 || d->oh < 1 || d->ow < 1)
        return 0;
    /* Offsets inside one image are int. */
    double big = (double)(d->h + 2 * d->kh) * (d->w + 2 * d->kw) * (d->c > d->oc ? d->c : d->oc);
    return big < 1e9;
}

size_t conv_direct_workspace(const cdl_conv2d_desc *d, int threads)
{
    dplan p;
    dplan_make(d, &p);
    return p.shared + p.per_thread * (size_t)threads;
}

/* Copies one image (c, h, w) into the interior of a zeroed (c, h+2ph, w+2pw)
 * buffer whose border is already zero. */
static void pad_copy(const float *src, int c, int h, int w, int ph, int pw, float *dst)
{
    int hp = h + 2 * ph, wp = w + 2 * pw;
    for (int ci = 0; ci < c; ci++)
        for (int y = 0; y < h; y++)
            memcpy(dst + ((size_t)ci * hp + y + ph) * wp + pw, src + ((size_t)ci * h + y) * w,
                   (size_t)w * sizeof *dst);
}

#if CPU_X86

/* out (O, ho, wo) = bias + valid correlation of in (C, hi, wi) with the
 * kernel wt (taps (c,ky,kx) in order, OB floats per tap: one per output
 * channel). O <= OB is a compile-time constant after inlining. Segments past
 * the last are clamped to it: recomputed and stored again, harmlessly. */
static inline __attribute__((always_inline)) CPU_AVX512 void
corr_block(const int O, const float *in, int C, int hi, int wi, int kh, int kw,
           const float *wt, const float *bias, float *out, int ho, int wo)
{
    const int vpr = (wo + 15) / 16, nseg = ho * vpr;
    const size_t plane = (size_t)hi * wi, oplane = (size_t)ho * wo;
    for (int g = 0; g < nseg; g += SB) {
        int xoff[SB], yoff[SB];
        __mmask16 m[SB];
#pragma GCC unroll 4
        for (int s = 0; s < SB; s++) {
            int idx = g + s < nseg ? g + s : nseg - 1;
            int oy = idx / vpr, ox0 = (idx % vpr) * 16;
            xoff[s] = oy * wi + ox0;
            yoff[s] = oy * wo + ox0;
            m[s] = cpu_mask16(wo - ox0);
        }
        __m512 acc[OB][SB];
#pragma GCC unroll 6
        for (int o = 0; o < O; o++) {
            __m512 b0 = bias ? _mm512_set1_ps(bias[o]) : _mm512_setzero_ps();
#pragma GCC unroll 4
            for (int s = 0; s < SB; s++)
                acc[o][s] = b0;
        }
        const float *wtp = wt;
        for (int c = 0; c < C; c++)
            for (int ky = 0; ky < kh; ky++) {
                const float *row = in + c * plane + (size_t)ky * wi;
                for (int kx = 0; kx < kw; kx++, wtp += OB) {
                    __m512 xv[SB];
#pragma GCC unroll 4
                    for (int s = 0; s < SB; s++)
                        xv[s] = _mm512_maskz_loadu_ps(m[s], row + kx + xoff[s]);
#pragma GCC unroll 6
                    for (int o = 0; o < O; o++) {
                        __m512 wv = _mm512_set1_ps(wtp[o]);
#pragma GCC unroll 4
                        for (int s = 0; s < SB; s++)
                            acc[o][s] = _mm512_fmadd_ps(xv[s], wv, acc[o][s]);
                    }
                }
            }
#pragma GCC unroll 6
        for (int o = 0; o < O; o++)
#pragma GCC unroll 4
            for (int s = 0; s < SB; s++)
                _mm512_mask_storeu_ps(out + o * oplane + yoff[s], m[s], acc[o][s]);
    }
}

static CPU_AVX512 void corr(int O, const float *in, int C, int hi, int wi, int kh, int kw,
                            const float *wt, const float *bias, float *out, int ho, int wo)
{
    switch (O) {
    case 1: corr_block(1, in, C, hi, wi, kh, kw, wt, bias, out, ho, wo); break;
    case 2: corr_block(2, in, C, hi, wi, kh, kw, wt, bias, out, ho, wo); break;
    case 3: corr_block(3, in, C, hi, wi, kh, kw, wt, bias, out, ho, wo); break;
    case 4: corr_block(4, in, C, hi, wi, kh, kw, wt, bias, out, ho, wo); break;
    case 5: corr_block(5, in, C, hi, wi, kh, kw, wt, bias, out, ho, wo); break;
    default: corr_block(6, in, C, hi, wi, kh, kw, wt, bias, out, ho, wo); break;
    }
}

/* part[o][t][16] += lane-wise sum over the output segments of
 * dy[o] * (tap t of in), for O channels of dy (ho, wo) and taps t of the
 * (C, hi, wi) input with kernel (kh, kw). */
static inline __attribute__((always_inline)) CPU_AVX512 void
dw_block(const int O, const float *in, int hi, int wi, int kh, int kw, int K,
         const float *dy, int ho, int wo, float *part, int Kpad)
{
    const int khw = kh * kw;
    const size_t plane = (size_t)hi * wi, oplane = (size_t)ho * wo;
    for (int t0 = 0; t0 < K; t0 += TB) {
        size_t toff[TB];
#pragma GCC unroll 3
        for (int j = 0; j < TB; j++) {
            int t = t0 + j < K ? t0 + j : K - 1;
            int c = t / khw, r = t % khw;
            toff[j] = c * plane + (size_t)(r / kw) * wi + r % kw;
        }
        __m512 acc[OB][TB];
#pragma GCC unroll 6
        for (int o = 0; o < O; o++)
#pragma GCC unroll 3
            for (int j = 0; j < TB; j++)
                acc[o][j] = _mm512_setzero_ps();
        for (int oy = 0; oy < ho; oy++)
            for (int ox0 = 0; ox0 < wo; ox0 += 16) {
                __mmask16 m = cpu_mask16(wo - ox0);
                const float *xs = in + (size_t)oy * wi + ox0;
                const float *ds = dy + (size_t)oy * wo + ox0;
                __m512 dv[OB];
#pragma GCC unroll 6
                for (int o = 0; o < O; o++)
                    dv[o] = _mm512_maskz_loadu_ps(m, ds + o * oplane);
#pragma GCC unroll 3
                for (int j = 0; j < TB; j++) {
                    __m512 xv = _mm512_maskz_loadu_ps(m, xs + toff[j]);
#pragma GCC unroll 6
                    for (int o = 0; o < O; o++)
                        acc[o][j] = _mm512_fmadd_ps(dv[o], xv, acc[o][j]);
                }
            }
#pragma GCC unroll 6
        for (int o = 0; o < O; o++)
#pragma GCC unroll 3
            for (int j = 0; j < TB; j++) {
                float *p = part + ((size_t)o * Kpad + t0 + j) * 16;
                _mm512_storeu_ps(p, _mm512_add_ps(_mm512_loadu_ps(p), acc[o][j]));
            }
    }
}

static CPU_AVX512 void dw_acc(int O, const float *in, int hi, int wi, int kh, int kw, int K,
                              const float *dy, int ho, int wo, float *part, int Kpad)
{
    switch (O) {
    case 1: dw_block(1, in, hi, wi, kh, kw, K, dy, ho, wo, part, Kpad); break;
    case 2: dw_block(2, in, hi, wi, kh, kw, K, dy, ho, wo, part, Kpad); break;
    case 3: dw_block(3, in, hi, wi, kh, kw, K, dy, ho, wo, part, Kpad); break;
    case 4: dw_block(4, in, hi, wi, kh, kw, K, dy, ho, wo, part, Kpad); break;
    case 5: dw_block(5, in, hi, wi, kh, kw, K, dy, ho, wo, part, Kpad); break;
    default: dw_block(6, in, hi, wi, kh, kw, K, dy, ho, wo, part, Kpad); break;
    }
}

/* part[o][16] += lane-wise sum of dy[o] over the (ho, wo) plane. */
static CPU_AVX512 void db_acc(int oc, const float *dy, int P, float *part)
{
    __mmask16 tail = cpu_mask16(P % 16);
    for (int o = 0; o < oc; o++) {
        const float *g = dy + (size_t)o * P;
        __m512 a = _mm512_loadu_ps(part + o * 16);
        int i = 0;
        for (; i + 16 <= P; i += 16)
            a = _mm512_add_ps(a, _mm512_loadu_ps(g + i));
        if (i < P)
            a = _mm512_add_ps(a, _mm512_maskz_loadu_ps(tail, g + i));
        _mm512_storeu_ps(part + o * 16, a);
    }
}

#else /* no x86: conv_direct_supported() is 0 and these are never called */

static void corr(int O, const float *in, int C, int hi, int wi, int kh, int kw,
                 const float *wt, const float *bias, float *out, int ho, int wo)
{
    (void)O, (void)in, (void)C, (void)hi, (void)wi, (void)kh, (void)kw;
    (void)wt, (void)bias, (void)out, (void)ho, (void)wo;
}

static void dw_acc(int O, const float *in, int hi, int wi, int kh, int kw, int K,
                   const float *dy, int ho, int wo, float *part, int Kpad)
{
    (void)O, (void)in, (void)hi, (void)wi, (void)kh, (void)kw, (void)K;
    (void)dy, (void)ho, (void)wo, (void)part, (void)Kpad;
}

static void db_acc(int oc, const float *dy, int P, float *part)
{
    (void)oc, (void)dy, (void)P, (void)part;
}
#endif

typedef struct dctx {
    const cdl_conv2d_desc *d;
    dplan p;
    const float *x, *w, *b, *dy;
    float *y, *dx, *dw, *db, *ws;
    int threads;
} dctx;

static float *thread_region(const dctx *c, int tid)
{
    return c->ws + c->p.shared + (size_t)tid * c->p.per_thread;
}

static float *thread_xpad(const dctx *c, int tid) { return thread_region(c, tid); }
static float *thread_qpad(const dctx *c, int tid) { return thread_region(c, tid) + c->p.xpad_floats; }
static float *thread_dwp(const dctx *c, int tid)
{
    return thread_region(c, tid) + c->p.xpad_floats + c->p.qpad_floats;
}
static float *thread_dbp(const dctx *c, int tid) { return thread_dwp(c, tid) + c->p.dwp_floats; }

/* Forward weights, per block of OB output channels: wt[blk][t][j] =
 * w[blk*OB+j][t] (zero past oc). */
static void pack_fwd_weights(const dctx *c)
{
    const cdl_conv2d_desc *d = c->d;
    float *wt = c->ws;
    for (int blk = 0; blk < c->p.ocb; blk++)
        for (int t = 0; t < c->p.K; t++)
            for (int j = 0; j < OB; j++) {
                int o = blk * OB + j;
                wt[((size_t)blk * c->p.K + t) * OB + j] = o < d->oc ? c->w[(size_t)o * c->p.K + t] : 0.0f;
            }
}

/* dx weights: the kernel flipped in both axes with in/out channels swapped,
 * wq[blk][(o,ky,kx)][j] = w[o][blk*OB+j][kh-1-ky][kw-1-kx]. */
static void pack_dx_weights(const dctx *c)
{
    const cdl_conv2d_desc *d = c->d;
    float *wq = c->ws + c->p.wt_floats;
    int khw = d->kh * d->kw;
    for (int blk = 0; blk < c->p.cb; blk++)
        for (int o = 0; o < d->oc; o++)
            for (int ky = 0; ky < d->kh; ky++)
                for (int kx = 0; kx < d->kw; kx++) {
                    size_t t = ((size_t)o * d->kh + ky) * d->kw + kx;
                    for (int j = 0; j < OB; j++) {
                        int ci = blk * OB + j;
                        float v = 0.0f;
                        if (ci < d->c)
                            v = c->w[((size_t)o * d->c + ci) * khw + (size_t)(d->kh - 1 - ky) * d->kw +
                                     (d->kw - 1 - kx)];
                        wq[((size_t)blk * c->p.Kq + t) * OB + j] = v;
                    }
                }
}

/* The forward input of image img: x itself, or its padded copy. */
static const float *fwd_input(const dctx *c, size_t img, float *xpad)
{
    const cdl_conv2d_desc *d = c->d;
    const float *x = c->x + img * (size_t)d->c * d->h * d->w;
    if (!d->pad)
        return x;
    pad_copy(x, d->c, d->h, d->w, d->pad, d->pad, xpad);
    return xpad;
}

static void direct_fwd_images(void *vctx, size_t b, size_t e, int tid)
{
    const dctx *c = vctx;
    const cdl_conv2d_desc *d = c->d;
    float *xpad = thread_xpad(c, tid);
    if (d->pad)
        memset(xpad, 0, c->p.xpad_floats * sizeof *xpad);
    for (size_t img = b; img < e; img++) {
        const float *in = fwd_input(c, img, xpad);
        float *y = c->y + img * (size_t)d->oc * c->p.P;
        for (int blk = 0; blk < c->p.ocb; blk++) {
            int o0 = blk * OB, nb = d->oc - o0 < OB ? d->oc - o0 : OB;
            corr(nb, in, d->c, c->p.hp, c->p.wp, d->kh, d->kw, c->ws + (size_t)blk * c->p.K * OB,
                 c->b ? c->b + o0 : NULL, y + (size_t)o0 * c->p.P, d->oh, d->ow);
        }
    }
}

void conv_direct_fwd(pool *pl, const cdl_conv2d_desc *d, const float *x, const float *w,
                     const float *b, float *y, float *ws)
{
    dctx c = {.d = d, .x = x, .w = w, .b = b, .y = y, .ws = ws, .threads = pool_threads(pl)};
    dplan_make(d, &c.p);
    pack_fwd_weights(&c);
    pool_for(pl, (size_t)d->n, direct_fwd_images, &c);
}

static void direct_bwd_images(void *vctx, size_t b, size_t e, int tid)
{
    const dctx *c = vctx;
    const cdl_conv2d_desc *d = c->d;
    float *xpad = thread_xpad(c, tid), *qpad = thread_qpad(c, tid);
    float *dwp = thread_dwp(c, tid), *dbp = thread_dbp(c, tid);
    int ph = d->kh - 1 - d->pad, pw = d->kw - 1 - d->pad;
    if (d->pad)
        memset(xpad, 0, c->p.xpad_floats * sizeof *xpad);
    if (c->dx)
        memset(qpad, 0, c->p.qpad_floats * sizeof *qpad);
    memset(dwp, 0, (c->p.dwp_floats + c->p.dbp_floats) * sizeof *dwp);
    for (size_t img = b; img < e; img++) {
        const float *in = fwd_input(c, img, xpad);
        const float *dy = c->dy + img * (size_t)d->oc * c->p.P;
        for (int o0 = 0; o0 < d->oc; o0 += OB) {
            int nb = d->oc - o0 < OB ? d->oc - o0 : OB;
            dw_acc(nb, in, c->p.hp, c->p.wp, d->kh, d->kw, c->p.K, dy + (size_t)o0 * c->p.P,
                   d->oh, d->ow, dwp + (size_t)o0 * c->p.Kpad * 16, c->p.Kpad);
        }
        if (c->db)
            db_acc(d->oc, dy, c->p.P, dbp);
        if (!c->dx)
            continue;
        float *dx = c->dx + img * (size_t)d->c * d->h * d->w;
        pad_copy(dy, d->oc, d->oh, d->ow, ph, pw, qpad);
        const float *wq = c->ws + c->p.wt_floats;
        for (int blk = 0; blk < c->p.cb; blk++) {
            int c0 = blk * OB, nb = d->c - c0 < OB ? d->c - c0 : OB;
            corr(nb, qpad, d->oc, c->p.hq, c->p.wq, d->kh, d->kw, wq + (size_t)blk * c->p.Kq * OB,
                 NULL, dx + (size_t)c0 * d->h * d->w, d->h, d->w);
        }
    }
}

/* dw[o][t] (items [0, oc*K)) and db[o] (items [oc*K, oc*K+oc)): the partials
 * of the threads that had images, summed in thread order, then lane-summed. */
static void direct_reduce(void *vctx, size_t b, size_t e, int tid)
{
    (void)tid;
    const dctx *c = vctx;
    const cdl_conv2d_desc *d = c->d;
    size_t nw = (size_t)d->oc * c->p.K;
    for (size_t i = b; i < e; i++) {
        float lanes[16] = {0};
        for (int t = 0; t < c->threads; t++) {
            size_t bt, et;
            pool_chunk((size_t)d->n, t, c->threads, &bt, &et);
            if (bt == et)
                continue;
            const float *src;
            if (i < nw)
                src = thread_dwp(c, t) + ((i / c->p.K) * c->p.Kpad + i % c->p.K) * 16;
            else
                src = thread_dbp(c, t) + (i - nw) * 16;
            for (int l = 0; l < 16; l++)
                lanes[l] += src[l];
        }
        /* Lanes pairwise, in a fixed order. */
        for (int half = 8; half >= 1; half /= 2)
            for (int l = 0; l < half; l++)
                lanes[l] += lanes[l + half];
        float s = lanes[0];
        if (i < nw)
            c->dw[i] = s;
        else
            c->db[i - nw] = s;
    }
}

void conv_direct_bwd(pool *pl, const cdl_conv2d_desc *d, const float *x, const float *w,
                     const float *dy, float *dx, float *dw, float *db, float *ws)
{
    dctx c = {.d = d, .x = x, .w = w, .dy = dy, .dx = dx, .dw = dw, .db = db, .ws = ws,
              .threads = pool_threads(pl)};
    dplan_make(d, &c.p);
    if (dx)
        pack_dx_weights(&c);
    pool_for(pl, (size_t)d->n, direct_bwd_images, &c);
    size_t nred = (size_t)d->oc * c.p.K + (db ? (size_t)d->oc : 0);
    pool_for_grain(pl, nred, 1024, direct_reduce, &c);
}
