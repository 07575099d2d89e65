/* Direct stride-1 conv2d with AVX-512 (see conv2d.h), for the small channel
 * counts where im2col+SGEMM runs thin GEMMs. x is (n,c,h,w), w (oc,c,kh,kw),
 * y (n,oc,oh,ow). Images are split into chunks over the threads (pool.h).
 *
 * Forward with oc >= 12 and a 3x3 or 5x5 kernel (fwd_ocvec): 16 output
 * channels in the lanes, a tile of R x NX output positions in registers; for
 * each input channel and kernel row the KW weight vectors are loaded once,
 * and each input value is broadcast once and used by up to KW accumulators.
 * The tile is scattered to the (oc, oh, ow) output.
 *
 * Otherwise forward, and dx always, are "valid" correlations of a
 * zero-padded input with a block of at most OB=6 output channels
 * (corr_block):
 *   forward  y  = corr(pad(x, pad), w)
 *   dx          = corr(pad(dy, k-1-pad), w flipped, in/out channels swapped)
 * Outputs are cut into 16-lane row segments; SB=4 segments x OB channels =
 * 24 accumulators stay in registers while the taps stream by: per tap 4
 * input loads and 6 weight broadcasts feed 24 FMAs. Input loads are not
 * masked (masked loads compete with the FMAs for ports): lanes past a row
 * end read neighbouring data or the zeroed slack after each buffer, and are
 * never stored.
 *
 * dW is summed over the batch in per-thread partials, two ways:
 *  - oc >= 12 with a 3x3 or 5x5 kernel (dw_ocvec): 16 output channels in the
 *    lanes, all kh*kw taps of one input channel in registers; per output
 *    position one load of dy (transposed to position-major by a gather) and
 *    kh*kw broadcast FMAs.
 *  - otherwise (dw_oxvec): lanes along output rows, OB channels x TB=4 taps
 *    in registers, lane sums taken once at the end.
 * Each chunk of images has its own partials; they are summed in chunk order
 * (and lanes in a fixed order), so results are reproducible for a thread
 * count. Non-finite
 * values in x can reach more dW entries here than in exact arithmetic
 * (through lanes multiplied by zero).
 *
 * Workspace: shared packed weights and tap tables, then per thread: padded x,
 * padded dy, transposed dy; then per chunk: dW and db partials.
 */
#include <string.h>

#include "kernels/cpu/conv2d.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/simd.h"

#define OB 6      /* output channels per corr block */
#define SB 4      /* output segments (16 lanes each) per corr block */
#define TB 4      /* taps per dw_oxvec block */
#define SLACK 16  /* zeroed floats after each padded buffer */

typedef struct dplan {
    int K, P;              /* c*kh*kw taps; oh*ow outputs per channel */
    int hp, wp;            /* forward input, padded */
    int hq, wq;            /* dy padded for dx: (oh,ow) + 2*(k-1-pad) */
    int Kq;                /* oc*kh*kw: taps of the dx correlation */
    int ocb, cb;           /* channel blocks of OB: forward outputs, dx outputs */
    int Kpad;              /* K rounded up to TB */
    int ocvec;             /* dW by dw_ocvec */
    int fwd_ocvec;         /* forward by fwd_ocvec */
    int ocb16;             /* blocks of 16 output channels (dw_ocvec) */
    size_t wt_floats;      /* forward weights: [ocb][K][OB] */
    size_t wq_floats;      /* dx weights: [cb][Kq][OB] */
    size_t w16_floats;     /* fwd_ocvec weights: [ocb16][c][kh][kw][16] */
    size_t toff_slots;     /* tap offset tables (int32): forward K, dW K, dx Kq */
    size_t xin_floats;     /* per thread: padded x */
    size_t qpad_floats;    /* per thread: padded dy */
    size_t dyt_floats;     /* per thread: dy position-major [P][16] (ocvec), or
                              dy with rows zero-padded to 16-lane segments */
    size_t dwp_floats;     /* per chunk: dW partial, oxvec [oc][Kpad][16], ocvec [ocb16][K][16] */
    size_t dbp_floats;     /* per chunk: db partial [oc][16] */
    size_t shared, per_thread, per_chunk;
} dplan;

static void dplan_make(const cdl_conv2d_desc *d, dplan *p)
{
    p->K = d->c * d->kh * d->kw;
    p->P = d->oh * d->ow;
    p->hp = d->h + 2 * d->pad_h;
    p->wp = d->w + 2 * d->pad_w;
    p->hq = d->oh + 2 * (d->kh - 1 - d->pad_h);
    p->wq = d->ow + 2 * (d->kw - 1 - d->pad_w);
    p->Kq = d->oc * d->kh * d->kw;
    p->ocb = (d->oc + OB - 1) / OB;
    p->cb = (d->c + OB - 1) / OB;
    p->Kpad = (p->K + TB - 1) / TB * TB;
    p->ocvec = d->oc >= 12 && d->kh == d->kw && (d->kw == 3 || d->kw == 5);
    p->ocb16 = (d->oc + 15) / 16;
    /* Tiles are 5x5 (5x5 kernels) or 3x8 (3x3) positions: smaller outputs
     * take corr_block. */
    p->fwd_ocvec = p->ocvec && d->oh >= (d->kw == 5 ? 5 : 3) && d->ow >= (d->kw == 5 ? 5 : 8);
    p->wt_floats = cpu_align16((size_t)p->ocb * p->K * OB);
    p->wq_floats = cpu_align16((size_t)p->cb * p->Kq * OB);
    p->w16_floats = p->fwd_ocvec ? (size_t)p->ocb16 * p->K * 16 : 0;
    p->toff_slots = 2 * cpu_align16((size_t)p->K) + cpu_align16((size_t)p->Kq);
    p->xin_floats = cpu_align16((size_t)d->c * p->hp * p->wp + SLACK);
    p->qpad_floats = cpu_align16((size_t)d->oc * p->hq * p->wq + SLACK);
    p->dyt_floats = p->ocvec ? (size_t)p->P * 16 : (size_t)d->oc * d->oh * ((d->ow + 15) / 16) * 16;
    p->dwp_floats = p->ocvec ? (size_t)p->ocb16 * p->K * 16 : (size_t)d->oc * p->Kpad * 16;
    p->dbp_floats = (size_t)d->oc * 16;
    p->shared = p->wt_floats + p->wq_floats + p->w16_floats + p->toff_slots;
    p->per_thread = p->xin_floats + p->qpad_floats + p->dyt_floats;
    p->per_chunk = p->dwp_floats + p->dbp_floats;
}

int conv_direct_supported(const cdl_conv2d_desc *d)
{
    if (!cpu_has_avx512())
        return 0;
    if (d->stride_h != 1 || d->stride_w != 1 || d->dil_h != 1 || d->dil_w != 1 || d->groups != 1)
        return 0;
    /* Equal padding only: the only kind these kernels have been run on
     * AVX-512 hardware with (other shapes take the im2col path). */
    if (d->pad_h != d->pad_w || d->pad_h < 0 || d->pad_h >= d->kh || d->pad_w >= d->kw)
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
    int chunks = conv_bwd_chunks(threads, d->n, p.per_chunk);
    return p.shared + p.per_thread * (size_t)threads + p.per_chunk * (size_t)chunks;
}

#if CPU_X86

/* Copies one image (c, h, w) into the interior of a (c, h+2ph, w+2pw)
 * buffer whose border and slack are already zero (rows are short: masked
 * moves beat a memcpy call per row). */
static CPU_AVX512 void pad_copy(const float *src, int c, int h, int w, int ph, int pw, float *dst)
{
    int hp = h + 2 * ph, wp = w + 2 * pw;
    for (int ci = 0; ci < c; ci++)
        for (int y = 0; y < h; y++) {
            const float *s = src + ((size_t)ci * h + y) * w;
            float *t = dst + ((size_t)ci * hp + y + ph) * wp + pw;
            for (int x0 = 0; x0 < w; x0 += 16) {
                __mmask16 m = cpu_mask16(w - x0);
                _mm512_mask_storeu_ps(t + x0, m, _mm512_maskz_loadu_ps(m, s + x0));
            }
        }
}

/* dst = src (rows of w floats) with every row zero-padded to a multiple of
 * 16 floats. */
static CPU_AVX512 void pad_rows16(const float *src, int rows, int w, float *dst)
{
    for (int r = 0; r < rows; r++, src += w)
        for (int x0 = 0; x0 < w; x0 += 16, dst += 16)
            _mm512_storeu_ps(dst, _mm512_maskz_loadu_ps(cpu_mask16(w - x0), src + x0));
}

/* Which input rows hold data (the rest is zero padding) and how the taps
 * are ordered: ky-major, taps_per_ky taps for each of kh kernel rows. */
typedef struct corr_rows {
    int kh, taps_per_ky;
    int first, end;        /* rows [first, end) of the padded input are data */
} corr_rows;

/* out (O, ho, wo) = bias + valid correlation of `in` (row stride wi) with the
 * kernel wt (taps ky-major, OB floats per tap: one per output channel);
 * toff[t] is the input offset of tap t. Kernel rows that meet only padding
 * for every segment of a block are skipped. O <= OB is a compile-time
 * constant after inlining. Segments past the last are clamped to it:
 * recomputed and stored again, harmlessly. */
static inline __attribute__((always_inline)) CPU_AVX512 void
corr_block(const int O, const float *in, const int32_t *toff, int wi, const float *wt,
           const float *bias, float *out, int ho, int wo, const corr_rows *rows)
{
    const int vpr = (wo + 15) / 16, nseg = ho * vpr;
    const size_t oplane = (size_t)ho * wo;
    int oy = 0, ox0 = 0;   /* the next segment */
    for (int g = 0; g < nseg; g += SB) {
        int xoff[SB], yoff[SB], oy_first = oy, oy_last = oy;
        __mmask16 m[SB];
#pragma GCC unroll 4
        for (int s = 0; s < SB; s++) {
            oy_last = oy;
            xoff[s] = oy * wi + ox0;
            yoff[s] = oy * wo + ox0;
            m[s] = cpu_mask16(wo - ox0);
            if (g + s + 1 < nseg) {
                ox0 += 16;
                if (ox0 >= wo) {
                    ox0 = 0;
                    oy++;
                }
            }
        }
        __m512 acc[OB][SB];
#pragma GCC unroll 6
        for (int o = 0; o < O; o++) {
            __m512 b0 = bias ? _mm512_set1_ps(bias[o]) : _mm512_setzero_ps();
#pragma GCC unroll 4
            for (int s = 0; s < SB; s++)
                acc[o][s] = b0;
        }
        /* Kernel row ky reads input rows oy+ky: skip it unless some
         * segment's row meets data. */
        int ky_lo = rows->first - oy_last, ky_hi = rows->end - 1 - oy_first;
        ky_lo = ky_lo < 0 ? 0 : ky_lo;
        ky_hi = ky_hi > rows->kh - 1 ? rows->kh - 1 : ky_hi;
        int t_end = (ky_hi + 1) * rows->taps_per_ky;
        const float *wtp = wt + (size_t)ky_lo * rows->taps_per_ky * OB;
        for (int t = ky_lo * rows->taps_per_ky; t < t_end; t++, wtp += OB) {
            const float *r = in + toff[t];
            __m512 xv[SB];
#pragma GCC unroll 4
            for (int s = 0; s < SB; s++)
                xv[s] = _mm512_loadu_ps(r + xoff[s]);
#pragma GCC unroll 6
            for (int o = 0; o < O; o++) {
                __m512 wv = _mm512_set1_ps(wtp[o]);
#pragma GCC unroll 4
                for (int s = 0; s < SB; s++)
                    acc[o][s] = _mm512_fmadd_ps(xv[s], wv, acc[o][s]);
            }
        }
#pragma GCC unroll 6
        for (int o = 0; o < O; o++)
#pragma GCC unroll 4
            for (int s = 0; s < SB; s++)
                _mm512_mask_storeu_ps(out + o * oplane + yoff[s], m[s], acc[o][s]);
    }
}

static CPU_AVX512 void corr(int O, const float *in, const int32_t *toff, int wi, const float *wt,
                            const float *bias, float *out, int ho, int wo, const corr_rows *rows)
{
    switch (O) {
    case 1: corr_block(1, in, toff, wi, wt, bias, out, ho, wo, rows); break;
    case 2: corr_block(2, in, toff, wi, wt, bias, out, ho, wo, rows); break;
    case 3: corr_block(3, in, toff, wi, wt, bias, out, ho, wo, rows); break;
    case 4: corr_block(4, in, toff, wi, wt, bias, out, ho, wo, rows); break;
    case 5: corr_block(5, in, toff, wi, wt, bias, out, ho, wo, rows); break;
    default: corr_block(6, in, toff, wi, wt, bias, out, ho, wo, rows); break;
    }
}

/* part[o][t][16] += lane-wise sum over the output segments of
 * dy[o] * (tap t of in), for O channels; toff[t] are the taps in weight
 * order, wi the input row stride. dyz holds dy with each row zero-padded
 * to vpr*16 floats, so lanes past a row end contribute nothing. */
static inline __attribute__((always_inline)) CPU_AVX512 void
dw_oxvec_block(const int O, const float *in, int wi, int K, const int32_t *toff,
               const float *dyz, int ho, int wo, float *part, int Kpad)
{
    const int vpr = (wo + 15) / 16;
    const size_t zplane = (size_t)ho * vpr * 16;
    for (int t0 = 0; t0 < K; t0 += TB) {
        int32_t to[TB];
#pragma GCC unroll 4
        for (int j = 0; j < TB; j++)
            to[j] = toff[t0 + j < K ? t0 + j : K - 1];
        __m512 acc[OB][TB];
#pragma GCC unroll 6
        for (int o = 0; o < O; o++)
#pragma GCC unroll 4
            for (int j = 0; j < TB; j++)
                acc[o][j] = _mm512_setzero_ps();
        const float *ds = dyz;
        for (int oy = 0; oy < ho; oy++)
            for (int ox0 = 0; ox0 < wo; ox0 += 16, ds += 16) {
                const float *xs = in + (size_t)oy * wi + ox0;
                __m512 dv[OB];
#pragma GCC unroll 6
                for (int o = 0; o < O; o++)
                    dv[o] = _mm512_loadu_ps(ds + o * zplane);
#pragma GCC unroll 4
                for (int j = 0; j < TB; j++) {
                    __m512 xv = _mm512_loadu_ps(xs + to[j]);
#pragma GCC unroll 6
                    for (int o = 0; o < O; o++)
                        acc[o][j] = _mm512_fmadd_ps(dv[o], xv, acc[o][j]);
                }
            }
#pragma GCC unroll 6
        for (int o = 0; o < O; o++)
#pragma GCC unroll 4
            for (int j = 0; j < TB; j++) {
                float *p = part + ((size_t)o * Kpad + t0 + j) * 16;
                _mm512_storeu_ps(p, _mm512_add_ps(_mm512_loadu_ps(p), acc[o][j]));
            }
    }
}

static CPU_AVX512 void dw_oxvec(int O, const float *in, int wi, int K, const int32_t *toff,
                                const float *dy, int ho, int wo, float *part, int Kpad)
{
    switch (O) {
    case 1: dw_oxvec_block(1, in, wi, K, toff, dy, ho, wo, part, Kpad); break;
    case 2: dw_oxvec_block(2, in, wi, K, toff, dy, ho, wo, part, Kpad); break;
    case 3: dw_oxvec_block(3, in, wi, K, toff, dy, ho, wo, part, Kpad); break;
    case 4: dw_oxvec_block(4, in, wi, K, toff, dy, ho, wo, part, Kpad); break;
    case 5: dw_oxvec_block(5, in, wi, K, toff, dy, ho, wo, part, Kpad); break;
    default: dw_oxvec_block(6, in, wi, K, toff, dy, ho, wo, part, Kpad); break;
    }
}

/* One R x NX tile of output positions (rows oy0.., columns ox0..) for 16
 * output channels: acc = bias + sum over channels c and kernel rows ky of
 * the KW-tap row correlation. w16 is [c][KH][KW][16]; out gets
 * out[o][oy][ox] for the lanes o in mask m (o_stride = ho*wo). */
static inline __attribute__((always_inline)) CPU_AVX512 void
fwd_ocvec_tile(const int KH, const int KW, const int R, const int NX, const float *in, int C,
               int hi, int wi, const float *w16, __m512 bias, float *out, int oy0, int ox0,
               int wo, __m512i oidx, __mmask16 m)
{
    __m512 acc[5][8];   /* R x NX <= 5 x 5 or 3 x 8 live in registers */
#pragma GCC unroll 5
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int j = 0; j < NX; j++)
            acc[r][j] = bias;
    const size_t plane = (size_t)hi * wi;
    for (int c = 0; c < C; c++)
        for (int ky = 0; ky < KH; ky++) {
            const float *wr = w16 + ((size_t)c * KH + ky) * KW * 16;
            __m512 wv[5];
#pragma GCC unroll 5
            for (int kx = 0; kx < KW; kx++)
                wv[kx] = _mm512_loadu_ps(wr + kx * 16);
            const float *x0 = in + c * plane + (size_t)(oy0 + ky) * wi + ox0;
#pragma GCC unroll 5
            for (int r = 0; r < R; r++) {
                const float *xr = x0 + (size_t)r * wi;
#pragma GCC unroll 12
                for (int u = 0; u < NX + KW - 1; u++) {
                    __m512 b = _mm512_set1_ps(xr[u]);
#pragma GCC unroll 5
                    for (int kx = 0; kx < KW; kx++)
                        if (u - kx >= 0 && u - kx < NX)
                            acc[r][u - kx] = _mm512_fmadd_ps(b, wv[kx], acc[r][u - kx]);
                }
            }
        }
#pragma GCC unroll 5
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int j = 0; j < NX; j++)
            _mm512_mask_i32scatter_ps(out + (size_t)(oy0 + r) * wo + ox0 + j, m, oidx, acc[r][j], 4);
}

/* out (oc, ho, wo) = bias + valid correlation of in (C, hi, wi) with a 3x3
 * or 5x5 kernel packed as w16 [ocb16][C][k][k][16]; ho >= R and wo >= NX
 * (the last tiles overlap the previous ones). */
static CPU_AVX512 void fwd_ocvec(int k, const float *in, int C, int hi, int wi, const float *w16,
                                 const float *bias, int oc, float *out, int ho, int wo)
{
    const int R = k == 5 ? 5 : 3, NX = k == 5 ? 5 : 8;
    const int P = ho * wo;
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i oidx = _mm512_mullo_epi32(lane, _mm512_set1_epi32(P));
    for (int o0 = 0; o0 < oc; o0 += 16) {
        __mmask16 m = cpu_mask16(oc - o0);
        __m512 bv = bias ? _mm512_maskz_loadu_ps(m, bias + o0) : _mm512_setzero_ps();
        const float *wb = w16 + (size_t)(o0 / 16) * C * k * k * 16;
        float *ob = out + (size_t)o0 * P;
        for (int oy = 0; oy < ho; oy += R) {
            int y0 = oy + R <= ho ? oy : ho - R;
            for (int ox = 0; ox < wo; ox += NX) {
                int x0 = ox + NX <= wo ? ox : wo - NX;
                if (k == 5)
                    fwd_ocvec_tile(5, 5, 5, 5, in, C, hi, wi, wb, bv, ob, y0, x0, wo, oidx, m);
                else
                    fwd_ocvec_tile(3, 3, 3, 8, in, C, hi, wi, wb, bv, ob, y0, x0, wo, oidx, m);
            }
        }
    }
}

/* part[t][16] += sum over output positions of x tap t * dyT[position], for
 * one input channel xc (row stride wi) and a KHxKW kernel; the lanes are 16
 * output channels. */
static inline __attribute__((always_inline)) CPU_AVX512 void
dw_ocvec_block(const int KH, const int KW, const float *xc, int wi, const float *dyt,
               int ho, int wo, float *part)
{
    __m512 acc[25];   /* KH*KW <= 25 live in registers */
#pragma GCC unroll 25
    for (int t = 0; t < KH * KW; t++)
        acc[t] = _mm512_setzero_ps();
    for (int oy = 0; oy < ho; oy++) {
        const float *row = xc + (size_t)oy * wi;
        const float *dp = dyt + (size_t)oy * wo * 16;
        for (int ox = 0; ox < wo; ox++) {
            __m512 dv = _mm512_loadu_ps(dp + (size_t)ox * 16);
            /* Hide that consecutive positions share inputs: the compiler
             * would keep them in xmm registers and broadcast on the FMA
             * ports; broadcast loads from memory use the load ports. */
            const float *xs = row + ox;
            __asm__("" : "+r"(xs));
#pragma GCC unroll 5
            for (int ky = 0; ky < KH; ky++)
#pragma GCC unroll 5
                for (int kx = 0; kx < KW; kx++)
                    acc[ky * KW + kx] = _mm512_fmadd_ps(_mm512_set1_ps(xs[(size_t)ky * wi + kx]), dv,
                                                        acc[ky * KW + kx]);
        }
    }
#pragma GCC unroll 25
    for (int t = 0; t < KH * KW; t++)
        _mm512_storeu_ps(part + t * 16, _mm512_add_ps(_mm512_loadu_ps(part + t * 16), acc[t]));
}

/* One image's dW for all output channels, 16 at a time: dy (oc, P) is
 * gathered position-major into dyt (P, 16), then every input channel of in
 * (c, hi, wi) adds its taps. */
static CPU_AVX512 void dw_ocvec(int k, const float *in, int c, int hi, int wi, const float *dy,
                                int oc, int ho, int wo, float *dyt, float *part, int K)
{
    const int P = ho * wo;
    const __m512i idx = _mm512_mullo_epi32(
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), _mm512_set1_epi32(P));
    for (int o0 = 0; o0 < oc; o0 += 16) {
        __mmask16 m = cpu_mask16(oc - o0);
        const float *dyb = dy + (size_t)o0 * P;
        for (int p = 0; p < P; p++)
            _mm512_storeu_ps(dyt + (size_t)p * 16,
                             _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, idx, dyb + p, 4));
        float *pb = part + (size_t)(o0 / 16) * K * 16;
        for (int ci = 0; ci < c; ci++) {
            const float *xc = in + (size_t)ci * hi * wi;
            float *pc = pb + (size_t)ci * k * k * 16;
            if (k == 5)
                dw_ocvec_block(5, 5, xc, wi, dyt, ho, wo, pc);
            else
                dw_ocvec_block(3, 3, xc, wi, dyt, ho, wo, pc);
        }
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

typedef struct corr_rows corr_rows;

static void pad_copy(const float *src, int c, int h, int w, int ph, int pw, float *dst)
{
    (void)src, (void)c, (void)h, (void)w, (void)ph, (void)pw, (void)dst;
}

static void pad_rows16(const float *src, int rows, int w, float *dst)
{
    (void)src, (void)rows, (void)w, (void)dst;
}

static void corr(int O, const float *in, const int32_t *toff, int wi, const float *wt,
                 const float *bias, float *out, int ho, int wo, const corr_rows *rows)
{
    (void)O, (void)in, (void)toff, (void)wi, (void)wt, (void)bias, (void)out;
    (void)ho, (void)wo, (void)rows;
}

static void dw_oxvec(int O, const float *in, int wi, int K, const int32_t *toff,
                     const float *dy, int ho, int wo, float *part, int Kpad)
{
    (void)O, (void)in, (void)wi, (void)K, (void)toff, (void)dy, (void)ho, (void)wo;
    (void)part, (void)Kpad;
}

static void dw_ocvec(int k, const float *in, int c, int hi, int wi, const float *dy,
                     int oc, int ho, int wo, float *dyt, float *part, int K)
{
    (void)k, (void)in, (void)c, (void)hi, (void)wi, (void)dy, (void)oc, (void)ho;
    (void)wo, (void)dyt, (void)part, (void)K;
}

static void db_acc(int oc, const float *dy, int P, float *part)
{
    (void)oc, (void)dy, (void)P, (void)part;
}

static void fwd_ocvec(int k, const float *in, int C, int hi, int wi, const float *w16,
                      const float *bias, int oc, float *out, int ho, int wo)
{
    (void)k, (void)in, (void)C, (void)hi, (void)wi, (void)w16, (void)bias, (void)oc;
    (void)out, (void)ho, (void)wo;
}
#endif

typedef struct dctx {
    const cdl_conv2d_desc *d;
    dplan p;
    const float *x, *w, *b, *dy;
    float *y, *dx, *dw, *db, *ws;
    int threads, chunks;
} dctx;

static float *thread_region(const dctx *c, int tid)
{
    return c->ws + c->p.shared + (size_t)tid * c->p.per_thread;
}

static float *thread_xin(const dctx *c, int tid) { return thread_region(c, tid); }
static float *thread_qpad(const dctx *c, int tid) { return thread_xin(c, tid) + c->p.xin_floats; }
static float *thread_dyt(const dctx *c, int tid) { return thread_qpad(c, tid) + c->p.qpad_floats; }

static float *chunk_dwp(const dctx *c, int i)
{
    return c->ws + c->p.shared + (size_t)c->threads * c->p.per_thread + (size_t)i * c->p.per_chunk;
}

static float *chunk_dbp(const dctx *c, int i) { return chunk_dwp(c, i) + c->p.dwp_floats; }

/* The tap offset tables, in the int32 slots after the packed weights:
 * forward taps ky-major (ky,c,kx) over the padded x, dW taps in weight
 * order (c,ky,kx) over the same, dx taps (ky,o,kx) over the padded dy. */
static int32_t *toff_fwd(const dctx *c)
{
    return (int32_t *)(c->ws + c->p.wt_floats + c->p.wq_floats + c->p.w16_floats);
}

static int32_t *toff_dw(const dctx *c)
{
    return toff_fwd(c) + cpu_align16((size_t)c->p.K);
}

static int32_t *toff_dx(const dctx *c)
{
    return toff_dw(c) + cpu_align16((size_t)c->p.K);
}

/* Offsets of the taps of a (C, hi, wi) input, ky-major (for corr) or
 * channel-major (the weight order, for dw_oxvec). */
static void make_taps(int32_t *toff, int C, int kh, int kw, int hi, int wi, int ky_major)
{
    for (int ci = 0; ci < C; ci++)
        for (int ky = 0; ky < kh; ky++)
            for (int kx = 0; kx < kw; kx++) {
                int t = ky_major ? (ky * C + ci) * kw + kx : (ci * kh + ky) * kw + kx;
                toff[t] = (ci * hi + ky) * wi + kx;
            }
}

/* Forward weights, per block of OB output channels, taps ky-major:
 * wt[blk][(ky,ci,kx)][j] = w[blk*OB+j][ci][ky][kx] (zero past oc). */
static void pack_fwd_weights(const dctx *c)
{
    const cdl_conv2d_desc *d = c->d;
    float *wt = c->ws;
    for (int blk = 0; blk < c->p.ocb; blk++)
        for (int ky = 0; ky < d->kh; ky++)
            for (int ci = 0; ci < d->c; ci++)
                for (int kx = 0; kx < d->kw; kx++) {
                    size_t t = ((size_t)ky * d->c + ci) * d->kw + kx;
                    size_t src = ((size_t)ci * d->kh + ky) * d->kw + kx;
                    for (int j = 0; j < OB; j++) {
                        int o = blk * OB + j;
                        wt[((size_t)blk * c->p.K + t) * OB + j] =
                            o < d->oc ? c->w[(size_t)o * c->p.K + src] : 0.0f;
                    }
                }
}

/* fwd_ocvec weights: w16[blk][ci][ky][kx][j] = w[blk*16+j][ci][ky][kx]
 * (zero past oc). */
static void pack_fwd16_weights(const dctx *c)
{
    const cdl_conv2d_desc *d = c->d;
    float *w16 = c->ws + c->p.wt_floats + c->p.wq_floats;
    for (int blk = 0; blk < c->p.ocb16; blk++)
        for (int t = 0; t < c->p.K; t++)
            for (int j = 0; j < 16; j++) {
                int o = blk * 16 + j;
                w16[((size_t)blk * c->p.K + t) * 16 + j] = o < d->oc ? c->w[(size_t)o * c->p.K + t] : 0.0f;
            }
}

/* dx weights: the kernel flipped in both axes with in/out channels swapped,
 * taps ky-major: wq[blk][(ky,o,kx)][j] = w[o][blk*OB+j][kh-1-ky][kw-1-kx]. */
static void pack_dx_weights(const dctx *c)
{
    const cdl_conv2d_desc *d = c->d;
    float *wq = c->ws + c->p.wt_floats;
    int khw = d->kh * d->kw;
    for (int blk = 0; blk < c->p.cb; blk++)
        for (int o = 0; o < d->oc; o++)
            for (int ky = 0; ky < d->kh; ky++)
                for (int kx = 0; kx < d->kw; kx++) {
                    size_t t = ((size_t)ky * d->oc + o) * d->kw + kx;
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

/* The input of image img as the kernels read it (rows of stride wp, at least
 * SLACK readable floats past the end): x itself when unpadded and not the
 * batch's last image (the next image is the slack), else a padded copy. */
static const float *image_input(const dctx *c, size_t img, float *xin)
{
    const cdl_conv2d_desc *d = c->d;
    const float *x = c->x + img * (size_t)d->c * d->h * d->w;
    if (!d->pad_h && !d->pad_w && img + 1 < (size_t)d->n)
        return x;
    pad_copy(x, d->c, d->h, d->w, d->pad_h, d->pad_w, xin);
    return xin;
}

static void direct_fwd_images(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    (void)chunk;
    const dctx *c = vctx;
    const cdl_conv2d_desc *d = c->d;
    float *xin = thread_xin(c, tid);
    corr_rows rows = {d->kh, d->c * d->kw, d->pad_h, d->pad_h + d->h};
    memset(xin, 0, c->p.xin_floats * sizeof *xin);
    for (size_t img = b; img < e; img++) {
        const float *in = image_input(c, img, xin);
        float *y = c->y + img * (size_t)d->oc * c->p.P;
        if (c->p.fwd_ocvec) {
            fwd_ocvec(d->kw, in, d->c, c->p.hp, c->p.wp, c->ws + c->p.wt_floats + c->p.wq_floats,
                      c->b, d->oc, y, d->oh, d->ow);
            continue;
        }
        for (int blk = 0; blk < c->p.ocb; blk++) {
            int o0 = blk * OB, nb = d->oc - o0 < OB ? d->oc - o0 : OB;
            corr(nb, in, toff_fwd(c), c->p.wp, c->ws + (size_t)blk * c->p.K * OB,
                 c->b ? c->b + o0 : NULL, y + (size_t)o0 * c->p.P, d->oh, d->ow, &rows);
        }
    }
}

void conv_direct_fwd(pool *pl, const cdl_conv2d_desc *d, const float *x, const float *w,
                     const float *b, float *y, float *ws)
{
    dctx c = {.d = d, .x = x, .w = w, .b = b, .y = y, .ws = ws, .threads = pool_threads(pl)};
    dplan_make(d, &c.p);
    if (c.p.fwd_ocvec)
        pack_fwd16_weights(&c);
    else
        pack_fwd_weights(&c);
    make_taps(toff_fwd(&c), d->c, d->kh, d->kw, c.p.hp, c.p.wp, 1);
    pool_for(pl, (size_t)d->n, 1, direct_fwd_images, &c);
}

static void direct_bwd_images(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    const dctx *c = vctx;
    const cdl_conv2d_desc *d = c->d;
    const dplan *p = &c->p;
    float *xin = thread_xin(c, tid), *qpad = thread_qpad(c, tid), *dyt = thread_dyt(c, tid);
    float *dwp = chunk_dwp(c, chunk), *dbp = chunk_dbp(c, chunk);
    int ph = d->kh - 1 - d->pad_h, pw = d->kw - 1 - d->pad_w;
    corr_rows rows = {d->kh, d->oc * d->kw, ph, ph + d->oh};
    memset(xin, 0, p->xin_floats * sizeof *xin);
    if (c->dx)
        memset(qpad, 0, p->qpad_floats * sizeof *qpad);
    memset(dwp, 0, (p->dwp_floats + p->dbp_floats) * sizeof *dwp);
    for (size_t img = b; img < e; img++) {
        const float *in = image_input(c, img, xin);
        const float *dy = c->dy + img * (size_t)d->oc * p->P;
        if (p->ocvec) {
            dw_ocvec(d->kw, in, d->c, p->hp, p->wp, dy, d->oc, d->oh, d->ow, dyt, dwp, p->K);
        } else {
            size_t zplane = (size_t)d->oh * ((d->ow + 15) / 16) * 16;
            pad_rows16(dy, d->oc * d->oh, d->ow, dyt);
            for (int o0 = 0; o0 < d->oc; o0 += OB) {
                int nb = d->oc - o0 < OB ? d->oc - o0 : OB;
                dw_oxvec(nb, in, p->wp, p->K, toff_dw(c), dyt + o0 * zplane, d->oh, d->ow,
                         dwp + (size_t)o0 * p->Kpad * 16, p->Kpad);
            }
        }
        if (c->db)
            db_acc(d->oc, dy, p->P, dbp);
        if (!c->dx)
            continue;
        float *dx = c->dx + img * (size_t)d->c * d->h * d->w;
        pad_copy(dy, d->oc, d->oh, d->ow, ph, pw, qpad);
        const float *wq = c->ws + p->wt_floats;
        for (int blk = 0; blk < p->cb; blk++) {
            int c0 = blk * OB, nb = d->c - c0 < OB ? d->c - c0 : OB;
            corr(nb, qpad, toff_dx(c), p->wq, wq + (size_t)blk * p->Kq * OB, NULL,
                 dx + (size_t)c0 * d->h * d->w, d->h, d->w, &rows);
        }
    }
}

/* dw[o][t] (items [0, oc*K)) and db[o] (items [oc*K, oc*K+oc)): the chunk
 * partials summed in chunk order; 16-lane partials (oxvec dW, db) are then
 * summed pairwise in a fixed order. */
static void direct_reduce(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    (void)chunk;
    (void)tid;
    const dctx *c = vctx;
    const cdl_conv2d_desc *d = c->d;
    const dplan *p = &c->p;
    size_t nw = (size_t)d->oc * p->K;
    for (size_t i = b; i < e; i++) {
        size_t o = i < nw ? i / p->K : i - nw, t = i % p->K;
        int one_lane = i < nw && p->ocvec;
        float lanes[16] = {0};
        for (int k = 0; k < c->chunks; k++) {
            if (one_lane) {
                lanes[0] += chunk_dwp(c, k)[((o / 16) * p->K + t) * 16 + o % 16];
                continue;
            }
            const float *src = i < nw ? chunk_dwp(c, k) + (o * p->Kpad + t) * 16
                                      : chunk_dbp(c, k) + o * 16;
            for (int l = 0; l < 16; l++)
                lanes[l] += src[l];
        }
        for (int half = 8; half >= 1; half /= 2)
            for (int l = 0; l < half; l++)
                lanes[l] += lanes[l + half];
        if (i < nw)
            c->dw[i] = lanes[0];
        else
            c->db[o] = lanes[0];
    }
}

void conv_direct_bwd(pool *pl, const cdl_conv2d_desc *d, const float *x, const float *w,
                     const float *dy, float *dx, float *dw, float *db, float *ws)
{
    dctx c = {.d = d, .x = x, .w = w, .dy = dy, .dx = dx, .dw = dw, .db = db, .ws = ws,
              .threads = pool_threads(pl)};
    dplan_make(d, &c.p);
    make_taps(toff_dw(&c), d->c, d->kh, d->kw, c.p.hp, c.p.wp, 0);
    if (dx) {
        pack_dx_weights(&c);
        make_taps(toff_dx(&c), d->oc, d->kh, d->kw, c.p.hq, c.p.wq, 1);
    }
    c.chunks = conv_bwd_chunks(c.threads, d->n, c.p.per_chunk);
    pool_run(pl, (size_t)d->n, c.chunks, direct_bwd_images, &c);
    size_t nred = (size_t)d->oc * c.p.K + (db ? (size_t)d->oc : 0);
    pool_for(pl, nred, 1024, direct_reduce, &c);
}
