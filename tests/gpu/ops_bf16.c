/* The bf16 matrix products of the CUDA backend (cdl_backend_params.precision
 * = CDL_PRECISION_BF16) against bounds derived from bf16's rounding:
 * `ops_bf16 [--big | --attn-only]`. tests/fakegpu/bf16.sh runs it on the fake GPU,
 * tests/gpu/run.sh on a GPU (--big adds GPT-2-small-shaped products).
 *
 * The bounds. bf16 keeps 8 significant bits: rounding to nearest has a
 * relative error of at most u = 2^-8. The backend rounds both inputs of a
 * product, so each term a*b becomes a*b*(1+d1)(1+d2), off by at most
 * (2u + u^2)|a*b|, and adds the k terms in fp32 in some order: at most
 * g = k * 2^-23 relative to their absolute sum (the textbook gamma_k with
 * fp32's 2^-24, doubled: tensor cores need not round their fp32 sums to
 * nearest). With S = sum |a*b| over the k terms of one output (computed
 * here in double from the fp32 inputs):
 *   (a) against the product of the fp32 inputs (what fp32 would give):
 *       |bf16 - exact| <= ((2u + u^2)(1 + g) + g) S;
 *   (b) against the product of the inputs rounded to bf16 here, in double
 *       (bf16 inputs are exact, and so are their products):
 *       |bf16 - that| <= g S' (S' the same sum of the rounded inputs).
 * (a) is the user's tolerance of a bf16 layer against fp32; (b) shows that
 * the inputs reached the product rounded to nearest bf16 and were summed
 * in fp32 (with fp32 inputs, or bf16 by truncation, the small-k shapes
 * exceed it). Plus: the linear bias and bias gradient, fp32 in both
 * precisions; the forward's weight cast follows new weights; a CUDA-graph
 * step equals the eager step bit for bit (the casts are inside the graph:
 * replays see the optimizer's new weights); a workspace smaller than
 * linear_workspace is refused with an error; the CPU backend refuses bf16.
 *
 * Attention (check_attn) has bounds of its own, derived where it is
 * checked, and runs on each bf16 attention kernel of the backend in turn
 * (CDL_ATTN_KERNEL=wmma, then mma: a backend each, the variable being read
 * at creation); CDL_ATTN_KERNEL=bogus must be refused at creation. With
 * --big the times of both kernels and of the fp32 ones at GPT-2 small's
 * shape are printed ("time attn_..." lines, one per direction and kernel).
 *
 * --attn-only runs the attention checks alone (tests/gpu/run.sh runs them
 * under compute-sanitizer).
 *
 * Prints one line per check and exits 1 if any fails.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cdl/cdl.h>
#include "tests/test_rng.h"

static cdl_backend *gpu;
static int failures, checks;
static rng_state rng;
/* The bf16 attention kernels (CDL_ATTN_KERNEL) and the one being checked. */
static const char *const attn_kernels[] = {"wmma", "mma"};
static const char *attn_kernel = "";

static const double U = 1.0 / 256;                /* bf16's unit roundoff, 2^-8 */
static const double FP32_SUM = 1.0 / 8388608;     /* 2^-23 per added term */

static void report(const char *what, const char *shape, double measured, double bound)
{
    int ok = measured <= bound && isfinite(measured);
    checks++;
    failures += !ok;
    printf("%-4s %-30s %-24s %.3g of bound%s\n", ok ? "ok" : "FAIL", what, shape,
           bound > 0 ? measured / bound : measured, bound > 0 ? "" : " (must be 0)");
}

static void *xmalloc(size_t bytes)
{
    void *p = calloc(1, bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "ops_bf16: out of host memory\n");
        exit(1);
    }
    return p;
}

static float *host_rand(size_t n, double lo, double hi)
{
    float *x = xmalloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)test_uniform(&rng, lo, hi);
    return x;
}

static void *up(const void *host, size_t bytes)
{
    void *d = gpu->ops->alloc(gpu, bytes ? bytes : 4);
    if (!d) {
        fprintf(stderr, "ops_bf16: %s\n", cdl_last_error());
        exit(1);
    }
    if (host && bytes)
        gpu->ops->to_device(gpu, d, host, bytes);
    return d;
}

static float *down(const void *dev, size_t n)
{
    float *h = xmalloc(n * sizeof *h);
    gpu->ops->to_host(gpu, h, dev, n * sizeof *h);
    if (gpu->ops->sync(gpu) != 0) {
        fprintf(stderr, "ops_bf16: %s\n", cdl_last_error());
        exit(1);
    }
    return h;
}

/* x rounded to bf16, nearest, ties to even (finite inputs). */
static float bf16(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    u += 0x7fffu + ((u >> 16) & 1u);
    u &= 0xffff0000u;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* C (m, nn) = A B with A (m,k) at a[i*ai + p*ap], B (k,nn) at b[p*bp +
 * j*bj], in double, optionally from bf16-rounded inputs; S the sums of
 * |terms|. */
typedef struct mat {
    const float *p;
    size_t rs, cs;   /* strides of rows and columns */
} mat;

static void ref_gemm(int m, int nn, int k, mat a, mat b, int round, double *c, double *s)
{
    for (int i = 0; i < m; i++)
        for (int j = 0; j < nn; j++) {
            double acc = 0, abs_acc = 0;
            for (int p = 0; p < k; p++) {
                float x = a.p[i * a.rs + p * a.cs], y = b.p[p * b.rs + j * b.cs];
                if (round)
                    x = bf16(x), y = bf16(y);
                acc += (double)x * y;
                abs_acc += fabs((double)x * y);
            }
            c[(size_t)i * nn + j] = acc;
            s[(size_t)i * nn + j] = abs_acc;
        }
}

/* The largest |got - (c + add)| / (bound * S) over an (m, nn) output; add
 * (NULL: none) is a bias per column, whose fp32 addition may round once
 * more (2^-24 of the result). */
static double worst(const float *got, const double *c, const double *s, const float *add,
                    int m, int nn, double rel)
{
    double w = 0;
    for (size_t i = 0; i < (size_t)m * nn; i++) {
        double ref = c[i] + (add ? add[i % (size_t)nn] : 0.0);
        double tol = rel * s[i] + fabs(ref) / 16777216.0 + 1e-30;
        if (add)
            tol += fabs((double)add[i % (size_t)nn]) / 16777216.0;
        double r = fabs((double)got[i] - ref) / tol;
        if (!(r <= w))
            w = r;   /* NaN too */
    }
    return w;
}

/* y = x w^T + b, dx = dy w, dw = dy^T x, db = column sums of dy. */
static void check_linear(int n, int in, int out)
{
    char shape[48];
    snprintf(shape, sizeof shape, "n%d in%d out%d", n, in, out);
    size_t nx = (size_t)n * in, nw = (size_t)out * in, ny = (size_t)n * out;
    float *x = host_rand(nx, -1, 1), *w = host_rand(nw, -0.5, 0.5), *b = host_rand(out, -1, 1);
    float *dy = host_rand(ny, -1, 1);
    size_t wsn = gpu->ops->linear_workspace(gpu, n, in, out);
    float *gx = up(x, nx * 4), *gw = up(w, nw * 4), *gb = up(b, (size_t)out * 4);
    float *gdy = up(dy, ny * 4), *gy = up(NULL, ny * 4), *gdx = up(NULL, nx * 4);
    float *gdw = up(NULL, nw * 4), *gdb = up(NULL, (size_t)out * 4), *ws = up(NULL, wsn * 4);
    gpu->ops->linear_fwd(gpu, n, in, out, gx, gw, gb, gy, ws);
    gpu->ops->linear_bwd(gpu, n, in, out, gx, gw, gdy, gdx, gdw, gdb, ws);
    float *y = down(gy, ny), *dx = down(gdx, nx), *dw = down(gdw, nw), *db = down(gdb, out);

    struct {
        const char *name;
        int m, nn, k;
        mat a, b;
        const float *got, *add;
    } prods[] = {
        /* y (n,out): A = x (n,in), B = w^T (in,out) */
        {"linear_fwd y", n, out, in, {x, (size_t)in, 1}, {w, 1, (size_t)in}, y, b},
        /* dx (n,in): A = dy (n,out), B = w (out,in) */
        {"linear_bwd dx", n, in, out, {dy, (size_t)out, 1}, {w, (size_t)in, 1}, dx, NULL},
        /* dw (out,in): A = dy^T (out,n), B = x (n,in) */
        {"linear_bwd dw", out, in, n, {dy, 1, (size_t)out}, {x, (size_t)in, 1}, dw, NULL},
    };
    for (size_t i = 0; i < sizeof prods / sizeof prods[0]; i++) {
        size_t cn = (size_t)prods[i].m * prods[i].nn;
        double *c = xmalloc(cn * sizeof *c), *s = xmalloc(cn * sizeof *s);
        double g = prods[i].k * FP32_SUM;
        char what[48];
        ref_gemm(prods[i].m, prods[i].nn, prods[i].k, prods[i].a, prods[i].b, 0, c, s);
        snprintf(what, sizeof what, "%s vs fp32 (a)", prods[i].name);
        report(what, shape, worst(prods[i].got, c, s, prods[i].add, prods[i].m, prods[i].nn,
                                  (2 * U + U * U) * (1 + g) + g), 1);
        ref_gemm(prods[i].m, prods[i].nn, prods[i].k, prods[i].a, prods[i].b, 1, c, s);
        snprintf(what, sizeof what, "%s vs bf16 in (b)", prods[i].name);
        report(what, shape, worst(prods[i].got, c, s, prods[i].add, prods[i].m, prods[i].nn, g),
               1);
        free(c);
        free(s);
    }
    /* db: fp32 sums of n values of dy. */
    double wdb = 0;
    for (int o = 0; o < out; o++) {
        double sum = 0, abs_sum = 0;
        for (int r = 0; r < n; r++)
            sum += dy[(size_t)r * out + o], abs_sum += fabs(dy[(size_t)r * out + o]);
        double e = fabs(db[o] - sum) / (n * FP32_SUM * abs_sum + 1e-30);
        wdb = e > wdb ? e : wdb;
    }
    report("linear_bwd db (fp32)", shape, wdb, 1);

    /* New weights: the forward casts them again (the cache follows). */
    for (size_t i = 0; i < nw; i++)
        w[i] = -w[i] * 0.5f;
    gpu->ops->to_device(gpu, gw, w, nw * 4);
    gpu->ops->linear_fwd(gpu, n, in, out, gx, gw, NULL, gy, ws);
    float *y2 = down(gy, ny);
    double *c = xmalloc(ny * sizeof *c), *s = xmalloc(ny * sizeof *s);
    ref_gemm(n, out, in, prods[0].a, prods[0].b, 1, c, s);
    report("linear_fwd new weights (b)", shape, worst(y2, c, s, NULL, n, out, in * FP32_SUM), 1);
    free(c), free(s), free(y2);

    void *dev[] = {gx, gw, gb, gdy, gy, gdx, gdw, gdb, ws};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        gpu->ops->free(gpu, dev[i]);
    void *host[] = {x, w, b, dy, y, dx, dw, db};
    for (size_t i = 0; i < sizeof host / sizeof host[0]; i++)
        free(host[i]);
}

/* ------------------------------------------------------- bf16 attention
 * attn_fwd / attn_bwd on tensor cores (kernels/cuda/attn_bf16.cu) against
 * a double-precision reference with elementwise bounds derived from the
 * roundings (docs/cuda.md, "bf16 attention"). round = 0: the reference
 * from the fp32 inputs, each input of q.k, dy.v, P.v, dS.k, dS.q, P.dy
 * rounded by the kernel (pu = u); round = 1: from the inputs rounded to
 * bf16 here (pu = 0), which leaves only the kernel's own roundings (P and
 * dS to bf16, fp32 sums and exp). Per row t: E_t bounds the error of the
 * scaled scores S_ts, so the softmax weights are off by a factor within
 * e^(+-2 E_t); every product then adds its rounding as in the linear
 * bounds above. Orders: fp32 sums of k terms g_k = k 2^-23. */
typedef struct attn_case {
    int n, T, C, nh, round;
    const float *qkv, *dy;      /* fp32 inputs, (n,T,3C) and (n,T,C) */
    double *y, *ey, *lse, *else_, *d, *ed;   /* refs and bounds: y (n,T,C), lse (n*nh*T), dqkv */
} attn_case;

static float in_val(const attn_case *a, const float *x, size_t i)
{
    return a->round ? bf16(x[i]) : x[i];
}

/* One (sample, head) item: the reference and the bounds. */
static void attn_ref_item(attn_case *a, int b, int h)
{
    int T = a->T, C = a->C, hd = C / a->nh;
    double scale = 1.0 / sqrt((double)hd), pu = a->round ? 0 : U;
    double ghd = hd * FP32_SUM, gT = T * FP32_SUM, r2 = ((1 + pu) * (1 + pu) - 1) * (1 + ghd) + ghd;
    size_t ld3 = 3 * (size_t)C, item = (size_t)b * a->nh + h;
    const float *q3 = a->qkv + (size_t)b * T * ld3 + (size_t)h * hd;
    const float *g1 = a->dy + (size_t)b * T * C + (size_t)h * hd;
    double *P = xmalloc((size_t)T * T * sizeof *P), *dS = xmalloc((size_t)T * T * sizeof *dS);
    double *edS = xmalloc((size_t)T * T * sizeof *edS), *eP = xmalloc((size_t)T * sizeof *eP);
#define Q(t, j) in_val(a, q3, (size_t)(t) * ld3 + (j))
#define K(s, j) in_val(a, q3, (size_t)(s) * ld3 + C + (j))
#define V(s, j) in_val(a, q3, (size_t)(s) * ld3 + 2 * C + (j))
#define G(t, j) in_val(a, g1, (size_t)(t) * C + (j))
    for (int t = 0; t < T; t++) {
        double m = -INFINITY, E = 0, sum = 0, *Pt = P + (size_t)t * T;
        for (int s = 0; s <= t; s++) {
            double acc = 0, abs_acc = 0;
            for (int j = 0; j < hd; j++)
                acc += (double)Q(t, j) * K(s, j), abs_acc += fabs((double)Q(t, j) * K(s, j));
            Pt[s] = acc * scale;
            E = fmax(E, scale * r2 * abs_acc + FP32_SUM * fabs(Pt[s]));
            m = fmax(m, Pt[s]);
        }
        for (int s = 0; s <= t; s++)
            sum += Pt[s] = exp(Pt[s] - m);
        for (int s = 0; s <= t; s++)
            Pt[s] /= sum;
        double gt = (t + 9) * FP32_SUM, lse = m + log(sum);
        size_t row = item * T + t, o = ((size_t)b * T + t) * C + (size_t)h * hd;
        a->lse[row] = lse;
        a->else_[row] = E + gt * (1 + fabs(lse));
        /* P recomputed from S (off by E) and lse (off by else), in fp32. */
        eP[t] = exp(E + a->else_[row] + 4 * FP32_SUM) - 1;
        double fy = exp(2 * E) * (1 + U) * (1 + pu) * (1 + gt) - 1, D = 0, eD = 0;
        for (int j = 0; j < hd; j++) {
            double acc = 0, abs_acc = 0;
            for (int s = 0; s <= t; s++)
                acc += Pt[s] * V(s, j), abs_acc += Pt[s] * fabs((double)V(s, j));
            a->y[o + j] = acc;
            a->ey[o + j] = fy * abs_acc;
            /* D = dy . y in the kernel from fp32 dy (not rounded) and its y. */
            D += (double)G(t, j) * acc;
            eD += fabs((double)g1[(size_t)t * C + j]) * a->ey[o + j] +
                  (ghd + U) * fabs(g1[(size_t)t * C + j] * acc);
        }
        for (int s = 0; s <= t; s++) {
            double dp = 0, abs_dp = 0;
            for (int j = 0; j < hd; j++)
                dp += (double)G(t, j) * V(s, j), abs_dp += fabs((double)G(t, j) * V(s, j));
            size_t ts = (size_t)t * T + s;
            dS[ts] = Pt[s] * (dp - D) * scale;
            edS[ts] = scale * (eP[t] * Pt[s] * fabs(dp - D) + (1 + eP[t]) * Pt[s] *
                               (r2 * abs_dp + eD)) * (1 + U) + (U + 3 * FP32_SUM) * fabs(dS[ts]);
        }
    }
    /* dq_t = sum_s dS k_s; dk_s = sum_t dS q_t; dv_s = sum_t P dy_t. */
    for (int r = 0; r < T; r++)
        for (int j = 0; j < hd; j++) {
            double dq = 0, edq = 0, dk = 0, edk = 0, dv = 0, edv = 0;
            for (int s = 0; s <= r; s++) {
                double ds = dS[(size_t)r * T + s], kk = fabs((double)K(s, j));
                dq += ds * K(s, j);
                edq += (edS[(size_t)r * T + s] * (1 + pu) + fabs(ds) * pu) * kk * (1 + gT) +
                       gT * fabs(ds) * kk;
            }
            for (int t = r; t < T; t++) {
                double ds = dS[(size_t)t * T + r], p = P[(size_t)t * T + r];
                double qq = fabs((double)Q(t, j)), gg = fabs((double)G(t, j));
                dk += ds * Q(t, j);
                edk += (edS[(size_t)t * T + r] * (1 + pu) + fabs(ds) * pu) * qq * (1 + gT) +
                       gT * fabs(ds) * qq;
                dv += p * G(t, j);
                edv += p * gg * (((1 + eP[t]) * (1 + U) * (1 + pu) - 1) * (1 + gT) + gT);
            }
            size_t o = ((size_t)b * T + r) * ld3 + (size_t)h * hd + j;
            a->d[o] = dq, a->ed[o] = edq;
            a->d[o + C] = dk, a->ed[o + C] = edk;
            a->d[o + 2 * C] = dv, a->ed[o + 2 * C] = edv;
        }
#undef Q
#undef K
#undef V
#undef G
    free(P), free(dS), free(edS), free(eP);
}

/* The largest |got - ref| / bound (a tiny absolute floor for exact zeros). */
static double attn_worst(const float *got, const double *ref, const double *bound, size_t k)
{
    double w = 0;
    for (size_t i = 0; i < k; i++) {
        double r = fabs((double)got[i] - ref[i]) / (bound[i] + 1e-30);
        if (!(r <= w))
            w = r;   /* NaN too */
    }
    return w;
}

/* ramp > 0: key s scaled by 1 + ramp s, so that the rows' maxima keep
 * growing along the keys and the forward's online softmax must move its
 * reference maximum (and rescale O) after it has summed tiles. odd: qkv
 * and dy one float past a 16-byte boundary (the kernels' one-float loads). */
static void check_attn(int n, int T, int nh, int hd, double ramp, int odd)
{
    int C = nh * hd;
    char shape[48];
    snprintf(shape, sizeof shape, "n%d T%d nh%d hd%d%s%s %s", n, T, nh, hd,
             ramp > 0 ? " ramp" : "", odd ? " odd" : "", attn_kernel);
    size_t nq = (size_t)n * T * 3 * C, ny = (size_t)n * T * C, nl = (size_t)n * nh * T;
    float *qkv = host_rand(nq, -1, 1), *dy = host_rand(ny, -1, 1);
    for (size_t row = 0; ramp > 0 && row < (size_t)n * T; row++)
        for (int c = C; c < 2 * C; c++)
            qkv[row * 3 * C + c] *= (float)(1 + ramp * (double)(row % T));
    size_t wsn = gpu->ops->attn_workspace(gpu, n, T, C, nh);
    float *gq0 = up(NULL, (nq + 1) * 4), *gdy0 = up(NULL, (ny + 1) * 4), *gy = up(NULL, ny * 4);
    float *gl = up(NULL, nl * 4), *gd = up(NULL, nq * 4), *ws = up(NULL, wsn * 4);
    float *gq = gq0 + !!odd, *gdy = gdy0 + !!odd;
    gpu->ops->to_device(gpu, gq, qkv, nq * 4);
    gpu->ops->to_device(gpu, gdy, dy, ny * 4);
    gpu->ops->attn_fwd(gpu, n, T, C, nh, gq, gy, gl, ws);
    gpu->ops->attn_bwd(gpu, n, T, C, nh, gq, gy, gl, gdy, gd, ws);
    float *y = down(gy, ny), *lse = down(gl, nl), *d = down(gd, nq);
    report("attn workspace: D only", shape, wsn == nl ? 0 : INFINITY, 0);
    /* Reproducible bits: one writer per element, a fixed order. */
    gpu->ops->attn_fwd(gpu, n, T, C, nh, gq, gy, gl, ws);
    gpu->ops->attn_bwd(gpu, n, T, C, nh, gq, gy, gl, gdy, gd, ws);
    float *y2 = down(gy, ny), *d2 = down(gd, nq);
    report("attn bf16 reproducible", shape,
           memcmp(y, y2, ny * 4) || memcmp(d, d2, nq * 4) ? INFINITY : 0, 0);
    free(y2), free(d2);
    for (int round = 0; round < 2; round++) {
        attn_case a = {n, T, C, nh, round, qkv, dy, xmalloc(ny * 8), xmalloc(ny * 8),
                       xmalloc(nl * 8), xmalloc(nl * 8), xmalloc(nq * 8), xmalloc(nq * 8)};
        for (int b = 0; b < n; b++)
            for (int h = 0; h < nh; h++)
                attn_ref_item(&a, b, h);
        const char *tag = round ? "vs bf16 in (b)" : "vs fp32 (a)";
        char what[48];
        snprintf(what, sizeof what, "attn_fwd y %s", tag);
        report(what, shape, attn_worst(y, a.y, a.ey, ny), 1);
        snprintf(what, sizeof what, "attn_fwd lse %s", tag);
        report(what, shape, attn_worst(lse, a.lse, a.else_, nl), 1);
        snprintf(what, sizeof what, "attn_bwd dqkv %s", tag);
        report(what, shape, attn_worst(d, a.d, a.ed, nq), 1);
        free(a.y), free(a.ey), free(a.lse), free(a.else_), free(a.d), free(a.ed);
    }
    void *dev[] = {gq0, gdy0, gy, gl, gd, ws};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        gpu->ops->free(gpu, dev[i]);
    free(qkv), free(dy), free(y), free(lse), free(d);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Milliseconds per attention forward and backward on backend be (the mean
 * of REPS after 2 warm-up calls). */
static void time_attn_on(cdl_backend *be, int n, int T, int C, int nh, const float *qkv,
                         const float *dy, double *fwd_ms, double *bwd_ms)
{
    enum { REPS = 10 };
    size_t nq = (size_t)n * T * 3 * C, ny = (size_t)n * T * C, nl = (size_t)n * nh * T;
    size_t wsn = be->ops->attn_workspace(be, n, T, C, nh);
    float *d[6];
    size_t sz[6] = {nq, ny, ny, nl, nq, wsn};
    for (int i = 0; i < 6; i++) {
        d[i] = be->ops->alloc(be, (sz[i] ? sz[i] : 1) * 4);
        if (!d[i]) {
            fprintf(stderr, "ops_bf16: %s\n", cdl_last_error());
            exit(1);
        }
    }
    be->ops->to_device(be, d[0], qkv, nq * 4);
    be->ops->to_device(be, d[1], dy, ny * 4);
    double t[2] = {0, 0};
    for (int rep = 0; rep < REPS + 2; rep++) {
        double t0 = now_s();
        be->ops->attn_fwd(be, n, T, C, nh, d[0], d[2], d[3], d[5]);
        be->ops->sync(be);
        double t1 = now_s();
        be->ops->attn_bwd(be, n, T, C, nh, d[0], d[2], d[3], d[1], d[4], d[5]);
        be->ops->sync(be);
        if (rep >= 2)
            t[0] += t1 - t0, t[1] += now_s() - t1;
    }
    *fwd_ms = t[0] / REPS * 1e3;
    *bwd_ms = t[1] / REPS * 1e3;
    for (int i = 0; i < 6; i++)
        be->ops->free(be, d[i]);
}

/* A CUDA backend in `precision` with CDL_ATTN_KERNEL=kernel (NULL: as the
 * environment has it), which it reads when created; the environment is
 * left as it was. NULL if creation failed. */
static cdl_backend *backend_with(int precision, const char *kernel)
{
    const char *was = getenv("CDL_ATTN_KERNEL");
    char *saved = was ? strdup(was) : NULL;
    if (kernel)
        setenv("CDL_ATTN_KERNEL", kernel, 1);
    cdl_backend_params p;
    cdl_backend_params_from_env(&p);
    p.precision = precision;
    cdl_backend *be = cdl_backend_create_with("cuda", &p);
    if (saved)
        setenv("CDL_ATTN_KERNEL", saved, 1);
    else
        unsetenv("CDL_ATTN_KERNEL");
    free(saved);
    return be;
}

static cdl_backend *backend_or_exit(int precision, const char *kernel)
{
    cdl_backend *be = backend_with(precision, kernel);
    if (!be) {
        fprintf(stderr, "ops_bf16: %s\n", cdl_last_error());
        exit(1);
    }
    return be;
}

/* GPT-2 small's attention (batch 8, block 1024, 12 heads of 64): each bf16
 * tensor-core kernel against the fp32 ones, one line per direction and
 * kernel with the rate of the causal FLOPs (forward 2 products of
 * n nh T^2 hd / 2 multiply-adds each, backward 5; the backward's recomputed
 * S not counted, as FlashAttention counts). Reported, not enforced. */
static void time_attn(void)
{
    enum { N = 8, T = 1024, NH = 12, HD = 64, C = NH * HD };
    cdl_backend *f32 = backend_or_exit(CDL_PRECISION_FP32, NULL);
    float *qkv = host_rand((size_t)N * T * 3 * C, -1, 1), *dy = host_rand((size_t)N * T * C, -1, 1);
    double fp[2];
    time_attn_on(f32, N, T, C, NH, qkv, dy, &fp[0], &fp[1]);
    cdl_backend_destroy(f32);
    double prod = (double)N * NH * T * T * HD;   /* flops of one causal product */
    const char *dir[2] = {"attn_fwd", "attn_bwd"};
    for (size_t k = 0; k < sizeof attn_kernels / sizeof attn_kernels[0]; k++) {
        cdl_backend *be = backend_or_exit(CDL_PRECISION_BF16, attn_kernels[k]);
        double bf[2];
        time_attn_on(be, N, T, C, NH, qkv, dy, &bf[0], &bf[1]);
        cdl_backend_destroy(be);
        for (int i = 0; i < 2; i++) {
            double f = prod * (i ? 5 : 2);
            printf("time %s %s n%d T%d nh%d hd%d: bf16 %.3f ms (%.1f TFLOP/s), fp32 %.3f ms "
                   "(%.1f TFLOP/s), %.2fx\n", dir[i], attn_kernels[k], N, T, NH, HD, bf[i],
                   f / bf[i] * 1e-9, fp[i], f / fp[i] * 1e-9, fp[i] / bf[i]);
        }
    }
    free(qkv), free(dy);
}

/* CDL_ATTN_KERNEL other than wmma or mma: creation fails, naming the
 * variable and both values. */
static void check_attn_kernel_env(void)
{
    cdl_backend *be = backend_with(CDL_PRECISION_BF16, "bogus");
    const char *msg = be ? "(created)" : cdl_last_error();
    printf("     %s\n", msg);
    report("CDL_ATTN_KERNEL=bogus refused", "",
           !be && strstr(msg, "CDL_ATTN_KERNEL") && strstr(msg, "wmma") && strstr(msg, "mma (")
               ? 0 : INFINITY, 0);
    cdl_backend_destroy(be);
}

/* One training step of a linear classifier: linear, loss, backward, SGD,
 * the loss copied out. */
enum { SN = 32, SIN = 40, SOUT = 8 };
typedef struct step_bufs {
    float *x, *w, *b, *z, *dz, *dw, *db, *mom, *loss, *ws;
    int32_t *y, *pred;
} step_bufs;

static void step_make(step_bufs *t, const float *w0, size_t wsn)
{
    t->x = up(NULL, SN * SIN * 4), t->w = up(w0, SOUT * SIN * 4), t->b = up(NULL, SOUT * 4);
    t->z = up(NULL, SN * SOUT * 4), t->dz = up(NULL, SN * SOUT * 4);
    t->dw = up(NULL, SOUT * SIN * 4), t->db = up(NULL, SOUT * 4);
    t->mom = up(NULL, (SOUT * SIN + SOUT) * 4), t->loss = up(NULL, SN * 4);
    t->ws = up(NULL, wsn * 4), t->y = up(NULL, SN * 4), t->pred = up(NULL, SN * 4);
}

static void step_free(step_bufs *t)
{
    void *dev[] = {t->x, t->w, t->b, t->z, t->dz, t->dw, t->db, t->mom, t->loss, t->ws, t->y,
                   t->pred};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        gpu->ops->free(gpu, dev[i]);
}

static void step_run(step_bufs *t, const float *xp, const int32_t *yp, float *lp, int s)
{
    const cdl_backend_ops *op = gpu->ops;
    op->to_device(gpu, t->x, xp, SN * SIN * 4);
    op->to_device(gpu, t->y, yp, SN * 4);
    op->linear_fwd(gpu, SN, SIN, SOUT, t->x, t->w, t->b, t->z, t->ws);
    op->xent_fwd_bwd(gpu, SN, SOUT, t->z, t->y, 1.0f / SN, t->dz, t->loss, t->pred);
    op->linear_bwd(gpu, SN, SIN, SOUT, t->x, t->w, t->dz, NULL, t->dw, t->db, t->ws);
    cdl_sgd_hparams hp = {.lr = 0.5f, .momentum = 0.9f, .first_step = s == 0};
    op->sgd_step(gpu, SOUT * SIN, t->w, t->dw, t->mom, &hp);
    op->sgd_step(gpu, SOUT, t->b, t->db, t->mom + SOUT * SIN, &hp);
    op->to_host(gpu, lp, t->loss, SN * 4);
}

/* Eagerly on one set of buffers; warm-up, capture and replays on another. */
static void check_graph(void)
{
    enum { STEPS = 5 };
    if (!gpu->ops->graph_begin) {
        printf("skip graph check: the %s backend has no whole-step graphs\n", gpu->ops->name);
        return;
    }
    size_t wsn = gpu->ops->linear_workspace(gpu, SN, SIN, SOUT);
    float *w0 = host_rand(SOUT * SIN, -0.2, 0.2), *xs = host_rand(STEPS * SN * SIN, -1, 1);
    float *xp = cdl_backend_host_alloc(gpu, SN * SIN * 4), *lp = cdl_backend_host_alloc(gpu, SN * 4);
    int32_t *yp = cdl_backend_host_alloc(gpu, SN * 4);
    if (!xp || !lp || !yp) {
        report("graph: pinned buffers", cdl_last_error(), INFINITY, 0);
        return;
    }
    step_bufs e, g;
    step_make(&e, w0, wsn);
    step_make(&g, w0, wsn);
    int ok = 1;
    double loss_diff = 0;
    for (int s = 0; s < STEPS; s++) {
        memcpy(xp, xs + (size_t)s * SN * SIN, SN * SIN * 4);
        for (int i = 0; i < SN; i++)
            yp[i] = (i * 3 + s) % SOUT;
        step_run(&e, xp, yp, lp, s);
        ok &= gpu->ops->sync(gpu) == 0;
        float le = lp[0];
        int mode = s == 0 ? 0 : cdl_backend_graph_begin(gpu, 7);
        ok &= mode == (s <= 1 ? 0 : 1);
        step_run(&g, xp, yp, lp, s);
        if (s > 0)
            ok &= cdl_backend_graph_end(gpu) == 0;
        ok &= gpu->ops->sync(gpu) == 0;
        loss_diff += fabs((double)lp[0] - le);
    }
    if (!ok)
        printf("     graph: %s\n", cdl_last_error());
    report("graph: capture, 3 replays", "bf16 linear step", ok ? 0 : INFINITY, 0);
    report("graph: losses equal eager", "5 steps", loss_diff, 0);
    float *we = down(e.w, SOUT * SIN), *wg = down(g.w, SOUT * SIN);
    report("graph: weights bitwise eager", "5 steps",
           memcmp(we, wg, SOUT * SIN * 4) ? INFINITY : 0, 0);
    /* Sanity: the weights moved, so a stale bf16 copy would have shown. */
    double moved = 0;
    for (int i = 0; i < SOUT * SIN; i++)
        moved = fmax(moved, fabs((double)we[i] - w0[i]));
    report("graph: weights trained", "5 steps", moved > 1e-3 ? 0 : INFINITY, 0);
    free(we), free(wg);
    step_free(&e);
    step_free(&g);
    cdl_backend_host_free(gpu, xp);
    cdl_backend_host_free(gpu, yp);
    cdl_backend_host_free(gpu, lp);
    free(w0), free(xs);
}

/* A workspace smaller than linear_workspace says so at sync. */
static void check_small_workspace(void)
{
    enum { N = 16, IN = 24, OUT = 8 };
    size_t wsn = gpu->ops->linear_workspace(gpu, N, IN, OUT);
    float *x = up(NULL, N * IN * 4), *w = up(NULL, OUT * IN * 4), *y = up(NULL, N * OUT * 4);
    float *ws = up(NULL, 4);
    gpu->ops->linear_fwd(gpu, N, IN, OUT, x, w, NULL, y, ws);
    int rc = gpu->ops->sync(gpu);
    const char *msg = rc ? cdl_last_error() : "(no error)";
    printf("     %s\n", msg);
    report("small workspace refused", "ws 1 float",
           wsn > 1 && rc != 0 && strstr(msg, "linear_workspace") ? 0 : INFINITY, 0);
    gpu->ops->free(gpu, x), gpu->ops->free(gpu, w), gpu->ops->free(gpu, y);
    gpu->ops->free(gpu, ws);
}

static void check_cpu_refuses(void)
{
    cdl_backend_params p;
    cdl_backend_params_init(&p);
    p.precision = CDL_PRECISION_BF16;
    cdl_backend *be = cdl_backend_create_with("cpu", &p);
    const char *msg = be ? "(created)" : cdl_last_error();
    printf("     %s\n", msg);
    report("cpu backend refuses bf16", "", !be && strstr(msg, "--precision fp32") ? 0 : INFINITY,
           0);
    cdl_backend_destroy(be);
}

int main(int argc, char **argv)
{
    int big = argc == 2 && !strcmp(argv[1], "--big");
    int attn_only = argc == 2 && !strcmp(argv[1], "--attn-only");
    if (argc > 2 || (argc == 2 && !big && !attn_only)) {
        fprintf(stderr, "usage: ops_bf16 [--big | --attn-only]\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    rng_seed(&rng, 16);
    if (!attn_only)
        check_cpu_refuses();
    gpu = backend_or_exit(CDL_PRECISION_BF16, NULL);
    printf("bf16 matrix products of the %s backend against bounds from bf16's rounding\n",
           gpu->ops->name);
    /* Small k (where (b) tells bf16 from fp32 inputs), odd sizes, a long k,
     * a vocabulary-like odd out (run padded to a multiple of 8: linear.c). */
    const int lins[][3] = {{64, 16, 24}, {33, 7, 5}, {8, 300, 40}, {1, 9, 1}, {128, 64, 96},
                           {16, 24, 1001}};
    for (size_t i = 0; !attn_only && i < sizeof lins / sizeof lins[0]; i++)
        check_linear(lins[i][0], lins[i][1], lins[i][2]);
    if (big) {   /* GPT-2 small's c_attn, c_fc and c_proj on 256 positions */
        check_linear(256, 768, 2304);
        check_linear(256, 768, 3072);
        check_linear(256, 3072, 768);
        check_linear(32, 768, 50257);   /* the tied head over GPT-2's vocabulary */
    }
    /* bf16 attention, on each kernel: one row, partial tiles, T > 128
     * (several query and key blocks), several heads and samples, each head
     * size of attn_bf16.cu, inputs off the 16-byte grid, scores that grow
     * along the keys. */
    const int atts[][5] = {{2, 1, 3, 64, 0}, {1, 77, 2, 64, 0}, {1, 150, 2, 64, 0},
                           {2, 40, 2, 32, 0}, {1, 19, 1, 16, 0}, {1, 19, 2, 32, 1}};
    cdl_backend *main_gpu = gpu;
    for (size_t k = 0; k < sizeof attn_kernels / sizeof attn_kernels[0]; k++) {
        attn_kernel = attn_kernels[k];
        gpu = backend_or_exit(CDL_PRECISION_BF16, attn_kernel);
        for (size_t i = 0; i < sizeof atts / sizeof atts[0]; i++)
            check_attn(atts[i][0], atts[i][1], atts[i][2], atts[i][3], 0, atts[i][4]);
        check_attn(1, 100, 1, 64, 0.25, 0);   /* growing scores: O rescaled */
        if (big)   /* GPT-2 small's attention: head size 64, block 1024 */
            check_attn(1, 1024, 4, 64, 0, 0);
        if (gpu->ops->sync(gpu) != 0)
            report("attention: backend error", cdl_last_error(), INFINITY, 0);
        cdl_backend_destroy(gpu);
    }
    gpu = main_gpu;
    check_attn_kernel_env();
    if (big)
        time_attn();
    if (!attn_only) {
        check_graph();
        check_small_workspace();
    }
    int rc = gpu->ops->sync(gpu);
    printf("ops_bf16: %d of %d checks passed\n", checks - failures, checks);
    cdl_backend_destroy(gpu);
    return failures || rc ? 1 : 0;
}
