/* Direct conv2d with AVX2+FMA (8 lanes, 16 ymm registers), see conv2d.h,
 * and its 16-lane AVX-512 twin (the block kernels of conv2d_avx_tmpl.h,
 * compiled here for 8 lanes and in conv2d_avx512.c for 16; the plan, the
 * padding, the dy transpose and the reductions here serve both; below,
 * "8 lanes" reads 16 and the block sizes those of conv2d_avx.h for the
 * twin), for the shapes of the CIFAR ResNets
 * (3x3, pad 1, stride 1 or 2, tens of channels), where im2col+SGEMM spends
 * a third of its time copying columns and packing. x is (n,c,h,w), w
 * (oc,c,kh,kw), y (n,oc,oh,ow). Images are split into chunks over the
 * threads (pool.h).
 *
 * Every image is first copied into a zero-padded buffer; for stride 2 each
 * padded row is stored as its even columns then its odd columns (split in
 * registers, 16 columns at a time), so that output column ox of tap kx
 * reads phase kx%2 at ox + kx/2: consecutive output columns are
 * consecutive floats for both strides. Rows and phases that no tap reads
 * (a 1x1 stride-2 shortcut reads the even rows' even columns) are not
 * copied.
 *
 * Forward and dx are correlations (corr8):
 *   forward  y  = corr(pad(x, pad), w), stride s
 *   dx          = corr(pad(dy, k-1-pad), w flipped, in/out channels swapped)
 * for stride 1; for stride 2, dx is 4 such correlations, one per phase of
 * its rows and columns (the kernel taps of that phase only; dxphase), each
 * into its own part of a per-thread buffer, then every row of dx
 * interleaves the two column phases of its row parity in registers (zeros
 * for a phase without taps). A phase whose padded dy would be dy itself
 * (no padding: 1x1) reads dy in place.
 * Outputs are cut into 8-lane row segments; SB=3 segments x OB=4 output
 * channels = 12 accumulators stay in registers while the taps stream by:
 * per tap 3 input loads and 4 weight broadcasts feed 12 FMAs (12 + 3 + 1 =
 * 16 registers). Loads are not masked: lanes past a row end read
 * neighbouring data or the zeroed slack after each buffer, and are never
 * stored.
 *
 * dW (dwt): 8 output channels in the lanes, dy transposed per image to
 * position-major [oc/8][P][8]; DB=2 channel blocks x DT=6 taps = 12
 * accumulators (+ 2 dy vectors + 1 broadcast); per output position 2 dy
 * loads and 6 input broadcasts feed 12 FMAs, and the sums over positions
 * need no lane reduction. Each chunk of images has its own partials; they
 * are summed in chunk order, so results are reproducible for a thread
 * count. db is summed from the transposed dy the same way.
 *
 * Workspace: packed forward and dx weights and tap tables, then per thread
 * the padded x, the padded dy of each dx phase, the dx phases (stride 2)
 * and the transposed dy, then per chunk the dW and db partials.
 */
#include <string.h>

#include "kernels/cpu/conv2d.h"
#include "kernels/cpu/conv2d_avx.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/simd.h"

#define SLACK 16 /* zeroed floats after each padded buffer: >= the lanes */

/* dx as s*s phase correlations: the dx positions (s*a + ry - pad, s*b + rx
 * - pad) take the kernel taps ky = ry + s*jy, kx = rx + s*jx, and sum
 * dy[o][a - jy][b - jx]: a stride-1 correlation of dy (rows zero-padded to
 * the phase's range) with those taps flipped. For stride 1 the only phase
 * is dx itself. */
typedef struct dxphase {
    int ry, rx;            /* the phase */
    int ny, nx;            /* its kernel taps per axis */
    int ylo, ylen;         /* its rows a in [ylo, ylo+ylen) */
    int xlo, xlen;         /* and columns */
    int hq, wq;            /* its padded dy: ylen+ny-1 rows of xlen+nx-1 */
    int Kq;                /* oc*ny*nx taps */
    size_t w_off;          /* its packed weights [cb][Kq][ob] in the workspace */
    size_t t_off;          /* its taps in the dx tap table */
    size_t q_off;          /* its padded dy in the thread's region */
    size_t m_off;          /* its dx (c, ylen, xlen) in the thread's tmp (stride 2) */
    int dy_direct;         /* its padded dy is dy itself (no padding): not copied */
} dxphase;

typedef struct aplan {
    int lanes;            /* 8 (AVX2) or 16 (AVX-512): the kernels' width */
    int ob, dt;           /* their corr block's output channels, dwt blocks' taps' multiple */
    int s;                /* stride (both axes) */
    int K, P;             /* c*kh*kw taps; oh*ow outputs per channel */
    int hp, wp;           /* forward input, padded */
    int whs, rowlen;      /* floats per phase of a padded row; per padded row */
    int nph;              /* dx phases: s*s */
    dxphase ph[4];
    int ocb, cb;          /* blocks of ob: forward outputs, dx outputs */
    int Kpad;             /* K rounded up to dt */
    int ocbl;             /* blocks of `lanes` output channels (dW lanes) */
    size_t wt_floats;     /* forward weights [ocb][K][ob] */
    size_t wq_floats;     /* dx weights of all phases */
    size_t toff_slots;    /* int32 tap tables: forward/dW K, dx phases */
    size_t xin_floats;    /* per thread: padded x */
    size_t qpad_floats;   /* per thread: padded dy of all dx phases */
    size_t tmp_floats;    /* per thread: the dx phases (stride 2) */
    size_t dyt_floats;    /* per thread: dy transposed [ocbl][P][lanes] */
    size_t dwp_floats;    /* per chunk: dW partial [ocbl][Kpad][lanes] */
    size_t dbp_floats;    /* per chunk: db partial [ocbl*lanes] */
    size_t shared, per_thread, per_chunk;
} aplan;

/* Taps, first output and count along one axis for phase r (see dxphase):
 * padded dx index s*a + r must lie in [pad, pad+n). */
static void axis_phase(int r, int s, int k, int pad, int n, int *nt, int *lo, int *len)
{
    *nt = r < k ? (k - r + s - 1) / s : 0;
    int first = (pad - r + s - 1) / s, last = pad + n - 1 - r;
    last = last >= 0 ? last / s : -1;
    *lo = first;
    *len = last >= first ? last - first + 1 : 0;
}

/* The plan of d for the kernels of `lanes` (8 or 16) lanes. */
static void aplan_make(const cdl_conv2d_desc *d, int lanes, aplan *p)
{
    p->lanes = lanes;
    p->ob = lanes == 16 ? CONV_OB16 : CONV_OB8;
    p->dt = lanes == 16 ? CONV_DTPAD16 : CONV_DTPAD8;
    p->s = d->stride_h;
    p->K = d->c * d->kh * d->kw;
    p->P = d->oh * d->ow;
    p->hp = d->h + 2 * d->pad_h;
    p->wp = d->w + 2 * d->pad_w;
    p->whs = p->s == 1 ? p->wp : (p->wp + 1) / 2;
    p->rowlen = p->s * p->whs;
    p->ocb = (d->oc + p->ob - 1) / p->ob;
    p->cb = (d->c + p->ob - 1) / p->ob;
    p->Kpad = (p->K + p->dt - 1) / p->dt * p->dt;
    p->ocbl = (d->oc + lanes - 1) / lanes;
    p->nph = p->s * p->s;
    p->wq_floats = p->qpad_floats = p->tmp_floats = 0;
    size_t taps = 0;
    for (int i = 0; i < p->nph; i++) {
        dxphase *f = &p->ph[i];
        f->ry = i / p->s;
        f->rx = i % p->s;
        axis_phase(f->ry, p->s, d->kh, d->pad_h, d->h, &f->ny, &f->ylo, &f->ylen);
        axis_phase(f->rx, p->s, d->kw, d->pad_w, d->w, &f->nx, &f->xlo, &f->xlen);
        if (!f->ny || !f->nx)
            f->ylen = f->xlen = 0;   /* no taps: these dx are zero */
        f->hq = f->ylen + f->ny - 1;
        f->wq = f->xlen + f->nx - 1;
        f->Kq = d->oc * f->ny * f->nx;
        f->w_off = p->wq_floats;
        f->t_off = taps;
        f->q_off = p->qpad_floats;
        f->m_off = p->tmp_floats;
        /* Full vector rows: corr reads nothing past dy's end. */
        f->dy_direct = f->ylo == f->ny - 1 && f->xlo == f->nx - 1 && f->hq == d->oh &&
                       f->wq == d->ow && f->xlen % lanes == 0;
        if (!f->ylen || !f->xlen)
            continue;
        p->wq_floats += cpu_align16((size_t)p->cb * f->Kq * p->ob);
        taps += cpu_align16((size_t)f->Kq);
        if (!f->dy_direct)
            p->qpad_floats += cpu_align16((size_t)d->oc * f->hq * f->wq + SLACK);
        if (p->s != 1)
            p->tmp_floats += cpu_align16((size_t)d->c * f->ylen * f->xlen);
    }
    p->wt_floats = cpu_align16((size_t)p->ocb * p->K * p->ob);
    p->toff_slots = cpu_align16((size_t)p->K) + taps;
    p->xin_floats = cpu_align16((size_t)d->c * p->hp * p->rowlen + SLACK);
    p->dyt_floats = cpu_align16((size_t)p->ocbl * p->P * lanes);
    p->dwp_floats = (size_t)p->ocbl * p->Kpad * lanes;
    p->dbp_floats = cpu_align16((size_t)p->ocbl * lanes);
    p->shared = p->wt_floats + p->wq_floats + p->toff_slots;
    p->per_thread = p->xin_floats + p->qpad_floats + p->tmp_floats + p->dyt_floats;
    p->per_chunk = p->dwp_floats + p->dbp_floats;
}

int conv_avx2_supported(const cdl_conv2d_desc *d)
{
    if (!cpu_has_avx2())
        return 0;
    if (d->stride_h != d->stride_w || d->stride_h < 1 || d->stride_h > 2)
        return 0;
    if (d->dil_h != 1 || d->dil_w != 1 || d->groups > 1)
        return 0;
    if (d->pad_h != d->pad_w || d->pad_h < 0 || d->pad_h >= d->kh || d->pad_w >= d->kw)
        return 0;
    if (d->n < 1 || d->c < 1 || d->oc < 1 || d->oh < 1 || d->ow < 1)
        return 0;
    /* The output size of this padding and stride (no rows of the padded
     * input left unread past the last output beyond one stride). */
    if (d->oh != (d->h + 2 * d->pad_h - d->kh) / d->stride_h + 1 ||
        d->ow != (d->w + 2 * d->pad_w - d->kw) / d->stride_w + 1)
        return 0;
    /* Offsets inside one image are int. */
    double big = (double)(d->h + 2 * d->kh) * (d->w + 2 * d->kw + 16) * (d->c > d->oc ? d->c : d->oc);
    return big < 1e9;
}

int conv_avx512_supported(const cdl_conv2d_desc *d)
{
    return cpu_has_avx512() && conv_avx2_supported(d);
}

static size_t workspace(const cdl_conv2d_desc *d, int threads, int lanes)
{
    aplan p;
    aplan_make(d, lanes, &p);
    int chunks = conv_bwd_chunks(threads, d->n, p.per_chunk);
    return p.shared + p.per_thread * (size_t)threads + p.per_chunk * (size_t)chunks;
}

size_t conv_avx2_workspace(const cdl_conv2d_desc *d, int threads)
{
    return workspace(d, threads, 8);
}

size_t conv_avx512_workspace(const cdl_conv2d_desc *d, int threads)
{
    return workspace(d, threads, 16);
}

#if CPU_X86

/* The lanes [0,n) of 8, as a mask vector (n in [1,8]). */
static CPU_AVX2 inline __m256i mask8(int n)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* The block kernels, 8 lanes (conv2d_avx_tmpl.h): conv_corr8, conv_dwt8. */
#define CV_L 8
#define CV_OB CONV_OB8
#define CV_SB CONV_SB8
#define CV_DB CONV_DB8
#define CV_DT CONV_DT8
#define CV_DT1 CONV_DT1_8
#define CV_TARGET CPU_AVX2
#define CV_VEC __m256
#define CV_LOAD(p) _mm256_loadu_ps(p)
#define CV_STORE(p, v) _mm256_storeu_ps(p, v)
#define CV_STORE_N(p, v, n) _mm256_maskstore_ps(p, mask8(n), v)
#define CV_SET1(x) _mm256_set1_ps(x)
#define CV_ZERO() _mm256_setzero_ps()
#define CV_FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define CV_ADD(a, b) _mm256_add_ps(a, b)
#define CV_CORR conv_corr8
#define CV_DWT conv_dwt8
#include "kernels/cpu/conv2d_avx_tmpl.h"

/* dyt[b][p][j] = dy[b*L+j][p] (zero past oc) for one image's dy (oc, P),
 * L = 8 or 16 lanes; dbp[b*L+j] += the sum over p, when dbp is not NULL.
 * Groups of 8 channels, full blocks of 8 positions transposed 8x8 in
 * registers (for L = 16 each group fills half of every position's lanes:
 * the same sums in the same order). */
static CPU_AVX2 void transpose_dy(const float *dy, int oc, int P, int L, float *dyt, float *dbp)
{
    for (int o0 = 0; o0 < (oc + L - 1) / L * L; o0 += 8) {
        float *tb = dyt + (size_t)(o0 / L) * P * L + o0 % L;
        int full = oc - o0 >= 8;
        int p = 0;
        __m256 sum = _mm256_setzero_ps();
        for (; full && p + 8 <= P; p += 8) {
            __m256 r[8];
            for (int i = 0; i < 8; i++)
                r[i] = _mm256_loadu_ps(dy + (size_t)(o0 + i) * P + p);
            __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
            __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
            __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
            __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
            __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
            __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
            __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
            __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
            __m256 c[8] = {_mm256_permute2f128_ps(u0, u4, 0x20), _mm256_permute2f128_ps(u1, u5, 0x20),
                           _mm256_permute2f128_ps(u2, u6, 0x20), _mm256_permute2f128_ps(u3, u7, 0x20),
                           _mm256_permute2f128_ps(u0, u4, 0x31), _mm256_permute2f128_ps(u1, u5, 0x31),
                           _mm256_permute2f128_ps(u2, u6, 0x31), _mm256_permute2f128_ps(u3, u7, 0x31)};
            for (int i = 0; i < 8; i++) {
                _mm256_storeu_ps(tb + (size_t)(p + i) * L, c[i]);
                sum = _mm256_add_ps(sum, c[i]);
            }
        }
        for (; p < P; p++) {
            float v[8];
            for (int j = 0; j < 8; j++)
                v[j] = o0 + j < oc ? dy[(size_t)(o0 + j) * P + p] : 0.0f;
            __m256 c = _mm256_loadu_ps(v);
            _mm256_storeu_ps(tb + (size_t)p * L, c);
            sum = _mm256_add_ps(sum, c);
        }
        if (dbp)
            _mm256_storeu_ps(dbp + o0, _mm256_add_ps(_mm256_loadu_ps(dbp + o0), sum));
    }
}

#else /* no x86: conv_avx2_supported() is 0 and these are never called */

void conv_corr8(int O, const float *in, const int32_t *toff, int K, int rowlen, int s,
                const float *wt, const float *bias, float *out, int ho, int wo)
{
    (void)O, (void)in, (void)toff, (void)K, (void)rowlen, (void)s, (void)wt, (void)bias;
    (void)out, (void)ho, (void)wo;
}

void conv_dwt8(int nblk, const float *in, int ystride, int ho, int wo, const int32_t *toff, int K,
               int Kpad, const float *dyt, float *part)
{
    (void)nblk, (void)in, (void)ystride, (void)ho, (void)wo, (void)toff, (void)K, (void)Kpad;
    (void)dyt, (void)part;
}

static void transpose_dy(const float *dy, int oc, int P, int L, float *dyt, float *dbp)
{
    (void)dy, (void)oc, (void)P, (void)L, (void)dyt, (void)dbp;
}
#endif

/* The correlation kernel of the plan's width (conv2d_avx.h). */
static void corr(const aplan *p, int O, const float *in, const int32_t *toff, int K, int rowlen,
                 int s, const float *wt, const float *bias, float *out, int ho, int wo)
{
    (p->lanes == 16 ? conv_corr16 : conv_corr8)(O, in, toff, K, rowlen, s, wt, bias, out, ho, wo);
}

typedef struct actx {
    const cdl_conv2d_desc *d;
    aplan p;
    const float *x, *w, *b, *dy;
    float *y, *dx, *dw, *db, *ws;
    int threads, chunks;
} actx;

static float *thread_xin(const actx *c, int tid)
{
    return c->ws + c->p.shared + (size_t)tid * c->p.per_thread;
}

static float *thread_qpad(const actx *c, int tid) { return thread_xin(c, tid) + c->p.xin_floats; }
static float *thread_tmp(const actx *c, int tid) { return thread_qpad(c, tid) + c->p.qpad_floats; }
static float *thread_dyt(const actx *c, int tid) { return thread_tmp(c, tid) + c->p.tmp_floats; }

static float *chunk_dwp(const actx *c, int i)
{
    return c->ws + c->p.shared + (size_t)c->threads * c->p.per_thread + (size_t)i * c->p.per_chunk;
}

static float *chunk_dbp(const actx *c, int i) { return chunk_dwp(c, i) + c->p.dwp_floats; }

/* The tap tables in the int32 slots after the packed weights: forward and
 * dW taps in weight order (c,ky,kx) over the padded x, dx taps (o,ky,kx)
 * over the padded dy. */
static int32_t *toff_fwd(const actx *c)
{
    return (int32_t *)(c->ws + c->p.wt_floats + c->p.wq_floats);
}

static int32_t *toff_dx(const actx *c) { return toff_fwd(c) + cpu_align16((size_t)c->p.K); }

/* Offsets of the taps (ci,ky,kx) of a padded (C, hi, rows of rowlen) input
 * with stride s (phases of whs floats). */
static void make_taps(int32_t *toff, int C, int kh, int kw, int hi, int rowlen, int whs, int s)
{
    for (int ci = 0; ci < C; ci++)
        for (int ky = 0; ky < kh; ky++)
            for (int kx = 0; kx < kw; kx++)
                toff[(ci * kh + ky) * kw + kx] = (ci * hi + ky) * rowlen + kx % s * whs + kx / s;
}

/* Forward weights per block of ob output channels: wt[blk][t][j] =
 * w[blk*ob+j][t] (zero past oc). */
static void pack_fwd_weights(const actx *c)
{
    const cdl_conv2d_desc *d = c->d;
    for (int blk = 0; blk < c->p.ocb; blk++)
        for (int t = 0; t < c->p.K; t++)
            for (int j = 0; j < c->p.ob; j++) {
                int o = blk * c->p.ob + j;
                c->ws[((size_t)blk * c->p.K + t) * c->p.ob + j] =
                    o < d->oc ? c->w[(size_t)o * c->p.K + t] : 0.0f;
            }
}

/* dx weights of phase f: its taps flipped, in/out channels swapped:
 * wq[blk][(o,jy,jx)][j] = w[o][blk*ob+j][ry+s*(ny-1-jy)][rx+s*(nx-1-jx)]
 * (zero past c); and its tap offsets over its padded dy. */
static void pack_dx_phase(const actx *c, const dxphase *f)
{
    const cdl_conv2d_desc *d = c->d;
    const int s = c->p.s;
    float *wq = c->ws + c->p.wt_floats + f->w_off;
    int32_t *toff = toff_dx(c) + f->t_off;
    for (int o = 0; o < d->oc; o++)
        for (int jy = 0; jy < f->ny; jy++)
            for (int jx = 0; jx < f->nx; jx++) {
                size_t t = ((size_t)o * f->ny + jy) * f->nx + jx;
                int ky = f->ry + s * (f->ny - 1 - jy), kx = f->rx + s * (f->nx - 1 - jx);
                toff[t] = (o * f->hq + jy) * f->wq + jx;
                for (int blk = 0; blk < c->p.cb; blk++)
                    for (int j = 0; j < c->p.ob; j++) {
                        int ci = blk * c->p.ob + j;
                        wq[((size_t)blk * f->Kq + t) * c->p.ob + j] =
                            ci < d->c ? c->w[(((size_t)o * d->c + ci) * d->kh + ky) * d->kw + kx] : 0.0f;
                    }
            }
}

/* Phase f's padded dy: q[o][r][b] = dy[o][ylo-ny+1+r][xlo-nx+1+b] where
 * that lies inside dy (the rest of q stays zero). */
static void phase_dy(const float *dy, int oc, int oh, int ow, const dxphase *f, float *q)
{
    int oy0 = f->ylo - f->ny + 1, ox0 = f->xlo - f->nx + 1;
    int b0 = ox0 < 0 ? -ox0 : 0, b1 = ow - ox0 < f->wq ? ow - ox0 : f->wq;
    if (b1 <= b0)
        return;
    for (int o = 0; o < oc; o++)
        for (int r = 0; r < f->hq; r++) {
            int oy = oy0 + r;
            if (oy < 0 || oy >= oh)
                continue;
            memcpy(q + ((size_t)o * f->hq + r) * f->wq + b0, dy + ((size_t)o * oh + oy) * ow + ox0 + b0,
                   (size_t)(b1 - b0) * sizeof *q);
        }
}

/* Splits one row of w floats into the two phases of a stride-2 padded row
 * (phase q&1 at q>>1 for padded column q = x + pw), 16 columns at a time
 * deinterleaved in registers. Only phase 0 when odd is 0 (1-wide kernels
 * never read phase 1). */
#if CPU_X86
static CPU_AVX2 void split_row2(const float *src, int w, int pw, float *row, int whs, int odd)
#else
static void split_row2(const float *src, int w, int pw, float *row, int whs, int odd)
#endif
{
    int x = 0;
#if CPU_X86
    /* x even: x + pw has pw's parity, x + 1 the other. */
    float *ev = row + (pw & 1) * whs, *od = row + (~pw & 1) * whs;
    int ev0 = pw >> 1, od0 = (pw + 1) >> 1;
    for (; x + 16 <= w; x += 16) {
        __m256 a = _mm256_loadu_ps(src + x), b = _mm256_loadu_ps(src + x + 8);
        __m256 e = _mm256_shuffle_ps(a, b, 0x88), o = _mm256_shuffle_ps(a, b, 0xDD);
        e = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e), 0xD8));
        o = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(o), 0xD8));
        if (odd || !(pw & 1))
            _mm256_storeu_ps(ev + ev0 + x / 2, e);
        if (odd || (pw & 1))
            _mm256_storeu_ps(od + od0 + x / 2, o);
    }
#endif
    for (; x < w; x++) {
        int q = x + pw;
        if (odd || !(q & 1))
            row[(q & 1) * whs + (q >> 1)] = src[x];
    }
}

/* Copies one image (C, h, w) into the interior of a padded buffer (C, hp,
 * rows of rowlen) whose border and slack are zero: stride 1 as is, stride 2
 * with each row's even padded columns first, then its odd ones. Kernels
 * narrower than the stride never read some rows and phases (a 1x1 stride-2
 * shortcut reads a quarter of its input): those are not copied. */
static void pad_image(const float *src, int C, int h, int w, int ph, int pw, int hp, int rowlen,
                      int whs, int s, int kh, int kw, float *dst)
{
    for (int ci = 0; ci < C; ci++)
        for (int y = 0; y < h; y++, src += w) {
            if ((y + ph) % s >= kh)
                continue;
            float *row = dst + ((size_t)ci * hp + y + ph) * rowlen;
            if (s == 1)
                memcpy(row + pw, src, (size_t)w * sizeof *src);
            else
                split_row2(src, w, pw, row, whs, kw > 1);
        }
}

static void avx2_fwd_images(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    (void)chunk;
    const actx *c = vctx;
    const cdl_conv2d_desc *d = c->d;
    const aplan *p = &c->p;
    float *xin = thread_xin(c, tid);
    memset(xin, 0, p->xin_floats * sizeof *xin);
    for (size_t img = b; img < e; img++) {
        pad_image(c->x + img * (size_t)d->c * d->h * d->w, d->c, d->h, d->w, d->pad_h, d->pad_w,
                  p->hp, p->rowlen, p->whs, p->s, d->kh, d->kw, xin);
        float *y = c->y + img * (size_t)d->oc * p->P;
        for (int blk = 0; blk < p->ocb; blk++) {
            int o0 = blk * p->ob, nb = d->oc - o0 < p->ob ? d->oc - o0 : p->ob;
            corr(p, nb, xin, toff_fwd(c), p->K, p->rowlen, p->s, c->ws + (size_t)blk * p->K * p->ob,
                  c->b ? c->b + o0 : NULL, y + (size_t)o0 * p->P, d->oh, d->ow);
        }
    }
}

static void fwd(pool *pl, const cdl_conv2d_desc *d, int lanes, const float *x, const float *w,
                const float *b, float *y, float *ws)
{
    actx c = {.d = d, .x = x, .w = w, .b = b, .y = y, .ws = ws, .threads = pool_threads(pl)};
    aplan_make(d, lanes, &c.p);
    pack_fwd_weights(&c);
    make_taps(toff_fwd(&c), d->c, d->kh, d->kw, c.p.hp, c.p.rowlen, c.p.whs, c.p.s);
    pool_for(pl, (size_t)d->n, 1, avx2_fwd_images, &c);
}

void conv_avx2_fwd(pool *pl, const cdl_conv2d_desc *d, const float *x, const float *w,
                   const float *b, float *y, float *ws)
{
    fwd(pl, d, 8, x, w, b, y, ws);
}

void conv_avx512_fwd(pool *pl, const cdl_conv2d_desc *d, const float *x, const float *w,
                     const float *b, float *y, float *ws)
{
    fwd(pl, d, 16, x, w, b, y, ws);
}

/* Row a of channel ci of phase f's dx in tmp, NULL when f has no such row
 * (no taps, or a outside its rows). */
static const float *phase_row(const dxphase *f, const float *tmp, int ci, int a)
{
    if (!f->xlen || a < 0 || a >= f->ylen)
        return NULL;
    return tmp + f->m_off + ((size_t)ci * f->ylen + a) * f->xlen;
}

/* Element b of a phase row (zero outside it or without one). */
static inline float phase_at(const float *row, int xlen, int b)
{
    return row && b >= 0 && b < xlen ? row[b] : 0.0f;
}

/* One row of dx for stride 2: dx[y][x] is element (x+pw)/2 - xlo of the
 * row of column phase (x+pw)%2 (r[0], r[1]: their rows, or NULL: zeros).
 * 16 columns at a time interleave 8 of each phase where both lie inside
 * (or are zero); any other column one by one. */
#if CPU_X86
static CPU_AVX2 void merge_row2(const dxphase *f0, const dxphase *f1, const float *r0,
                                const float *r1, int w, int pw, float *out)
#else
static void merge_row2(const dxphase *f0, const dxphase *f1, const float *r0, const float *r1,
                       int w, int pw, float *out)
#endif
{
    int x = 0;
#if CPU_X86
    /* Even x take the phase of pw's parity, odd x the other. */
    const dxphase *fe = pw & 1 ? f1 : f0, *fo = pw & 1 ? f0 : f1;
    const float *re = pw & 1 ? r1 : r0, *ro = pw & 1 ? r0 : r1;
    for (; x + 16 <= w; x += 16) {
        int be = ((x + pw) >> 1) - fe->xlo, bo = ((x + 1 + pw) >> 1) - fo->xlo;
        int oke = !re || (be >= 0 && be + 8 <= fe->xlen), oko = !ro || (bo >= 0 && bo + 8 <= fo->xlen);
        if (!oke || !oko)
            break;
        __m256 e = re ? _mm256_loadu_ps(re + be) : _mm256_setzero_ps();
        __m256 o = ro ? _mm256_loadu_ps(ro + bo) : _mm256_setzero_ps();
        __m256 lo = _mm256_unpacklo_ps(e, o), hi = _mm256_unpackhi_ps(e, o);
        _mm256_storeu_ps(out + x, _mm256_permute2f128_ps(lo, hi, 0x20));
        _mm256_storeu_ps(out + x + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
    }
#endif
    for (; x < w; x++) {
        int q = x + pw;
        const dxphase *f = q & 1 ? f1 : f0;
        out[x] = phase_at(q & 1 ? r1 : r0, f->xlen, (q >> 1) - f->xlo);
    }
}

/* One image's dx (c, h, w) from its dy, phase by phase: stride 1 writes dx
 * directly; stride 2 each phase into tmp (c, ylen, xlen), then every row
 * of dx interleaves the two phases of its row parity (merge_row2), zeros
 * where no tap reaches (1x1 stride 2: the odd rows and columns). */
static void dx_image(const actx *c, const float *dy, float *dx, float *qpad, float *tmp)
{
    const cdl_conv2d_desc *d = c->d;
    const aplan *p = &c->p;
    for (int i = 0; i < p->nph; i++) {
        const dxphase *f = &p->ph[i];
        if (!f->ylen || !f->xlen)
            continue;
        const float *q = dy;
        if (!f->dy_direct) {
            phase_dy(dy, d->oc, d->oh, d->ow, f, qpad + f->q_off);
            q = qpad + f->q_off;
        }
        float *out = p->s == 1 ? dx : tmp + f->m_off;
        size_t oplane = (size_t)f->ylen * f->xlen;
        const float *wq = c->ws + p->wt_floats + f->w_off;
        for (int blk = 0; blk < p->cb; blk++) {
            int c0 = blk * p->ob, nb = d->c - c0 < p->ob ? d->c - c0 : p->ob;
            corr(p, nb, q, toff_dx(c) + f->t_off, f->Kq, f->wq, 1, wq + (size_t)blk * f->Kq * p->ob,
                  NULL, out + c0 * oplane, f->ylen, f->xlen);
        }
    }
    if (p->s == 1)
        return;
    for (int ci = 0; ci < d->c; ci++)
        for (int y = 0; y < d->h; y++) {
            int ry = (y + d->pad_h) & 1, a = (y + d->pad_h) >> 1;
            const dxphase *f0 = &p->ph[2 * ry], *f1 = &p->ph[2 * ry + 1];
            merge_row2(f0, f1, phase_row(f0, tmp, ci, a - f0->ylo), phase_row(f1, tmp, ci, a - f1->ylo),
                       d->w, d->pad_w, dx + ((size_t)ci * d->h + y) * d->w);
        }
}

static void avx2_bwd_images(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    const actx *c = vctx;
    const cdl_conv2d_desc *d = c->d;
    const aplan *p = &c->p;
    float *xin = thread_xin(c, tid), *qpad = thread_qpad(c, tid), *dyt = thread_dyt(c, tid);
    float *tmp = thread_tmp(c, tid);
    float *dwp = chunk_dwp(c, chunk), *dbp = chunk_dbp(c, chunk);
    memset(xin, 0, p->xin_floats * sizeof *xin);
    if (c->dx)
        memset(qpad, 0, p->qpad_floats * sizeof *qpad);
    memset(dwp, 0, p->per_chunk * sizeof *dwp);
    for (size_t img = b; img < e; img++) {
        pad_image(c->x + img * (size_t)d->c * d->h * d->w, d->c, d->h, d->w, d->pad_h, d->pad_w,
                  p->hp, p->rowlen, p->whs, p->s, d->kh, d->kw, xin);
        const float *dy = c->dy + img * (size_t)d->oc * p->P;
        transpose_dy(dy, d->oc, p->P, p->lanes, dyt, c->db ? dbp : NULL);
        (p->lanes == 16 ? conv_dwt16 : conv_dwt8)(p->ocbl, xin, p->s * p->rowlen, d->oh, d->ow, toff_fwd(c), p->K, p->Kpad, dyt, dwp);
        if (c->dx)
            dx_image(c, dy, c->dx + img * (size_t)d->c * d->h * d->w, qpad, tmp);
    }
}

/* dw[o][t] and db[o]: the chunk partials summed in chunk order. Items [0,
 * ocbl*K) are one tap t of one block of `lanes` output channels, the
 * partials' own order ([ocbl][Kpad][lanes]), so the reads run along them;
 * items [ocbl*K, ocbl*K+oc) are db[o]. Walking dw's order instead ((o, t)
 * with t fastest) read one cache line per float of partials: at batch 1
 * with 256 channels at 4x4 that took 5x the dx and dW kernels themselves
 * (512 channels: 40 ms against 7 for im2col+SGEMM's whole backward). */
static void avx2_reduce(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    (void)chunk, (void)tid;
    const actx *c = vctx;
    const aplan *p = &c->p;
    const size_t K = (size_t)p->K, L = (size_t)p->lanes, nwb = (size_t)p->ocbl * K;
    for (size_t i = b; i < e; i++) {
        if (i >= nwb) {
            size_t o = i - nwb;
            float sum = 0.0f;
            for (int k = 0; k < c->chunks; k++)
                sum += chunk_dbp(c, k)[o];
            c->db[o] = sum;
            continue;
        }
        size_t ob = i / K, t = i % K, at = (ob * (size_t)p->Kpad + t) * L;
        size_t nl = (size_t)c->d->oc - ob * L < L ? (size_t)c->d->oc - ob * L : L;
        float sum[16] = {0};
        for (int k = 0; k < c->chunks; k++) {
            const float *src = chunk_dwp(c, k) + at;
            for (size_t l = 0; l < L; l++)
                sum[l] += src[l];
        }
        for (size_t l = 0; l < nl; l++)
            c->dw[(ob * L + l) * K + t] = sum[l];
    }
}

static void bwd(pool *pl, const cdl_conv2d_desc *d, int lanes, const float *x, const float *w,
                const float *dy, float *dx, float *dw, float *db, float *ws)
{
    actx c = {.d = d, .x = x, .w = w, .dy = dy, .dx = dx, .dw = dw, .db = db, .ws = ws,
              .threads = pool_threads(pl)};
    aplan_make(d, lanes, &c.p);
    make_taps(toff_fwd(&c), d->c, d->kh, d->kw, c.p.hp, c.p.rowlen, c.p.whs, c.p.s);
    for (int i = 0; dx && i < c.p.nph; i++)
        if (c.p.ph[i].ylen && c.p.ph[i].xlen)
            pack_dx_phase(&c, &c.p.ph[i]);
    c.chunks = conv_bwd_chunks(c.threads, d->n, c.p.per_chunk);
    pool_run(pl, (size_t)d->n, c.chunks, avx2_bwd_images, &c);
    size_t nred = (size_t)c.p.ocbl * c.p.K + (db ? (size_t)d->oc : 0);
    pool_for(pl, nred, 64, avx2_reduce, &c);
}

void conv_avx2_bwd(pool *pl, const cdl_conv2d_desc *d, const float *x, const float *w,
                   const float *dy, float *dx, float *dw, float *db, float *ws)
{
    bwd(pl, d, 8, x, w, dy, dx, dw, db, ws);
}

void conv_avx512_bwd(pool *pl, const cdl_conv2d_desc *d, const float *x, const float *w,
                     const float *dy, float *dx, float *dw, float *db, float *ws)
{
    bwd(pl, d, 16, x, w, dy, dx, dw, db, ws);
}
