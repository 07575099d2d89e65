/* Every op of a backend against the CPU backend, forward and backward, on
 * random inputs of several shapes: the op-test harness of every backend
 * that is built. `ops_vs_cpu [BACKEND]` (cuda, the default, or cpu):
 * tests/gpu/run.sh runs it on a GPU (step 1), tests/fakegpu/ops.sh on the
 * fake GPU, tests/gpu/ops_cpu.sh on the CPU backend itself (another thread
 * count than the reference). The backend is reached only through
 * lib/cdl/backend.h: TF32 is a creation parameter (a second backend with it
 * on), graphs and pinned memory are the table's optional entries (the
 * graph checks are skipped on a backend without them).
 *
 * Error measure: max |gpu - cpu| / max(1, max |cpu|) per output. Strict FP32
 * (TF32 off) first: 1e-4 for convolutions and products (sums of up to 400k
 * terms in other orders), 1e-6 for the rest; then convolutions and linear
 * layers again with TF32 on (10-bit mantissa), 1e-2. Index outputs (argmax,
 * masks, predictions) and the ops that compute exactly like the CPU backend
 * (pooling, ReLU, dropout, fill, scale) must be equal. Also checked: GPU results are reproducible
 * bit for bit, and a CUDA-graph step equals the same step run eagerly.
 *
 * Prints one line per check and exits 1 if any fails. Without a GPU it
 * prints the backend's error and exits 1.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cdl/cdl.h>
#include "tests/test_rng.h"

static cdl_backend *cpu, *gpu;
static int failures, checks;
static double worst_strict;

/* ------------------------------------------------------------ helpers */

static rng_state rng; /* seeded at the top of main */
static float frand(float lo, float hi)
{
    return (float)test_uniform(&rng, lo, hi);
}

static float *host_rand(size_t n, float lo, float hi)
{
    float *x = malloc(n * sizeof *x + 16);
    if (!x) {
        fprintf(stderr, "ops_vs_cpu: out of host memory\n");
        exit(1);
    }
    for (size_t i = 0; i < n; i++)
        x[i] = frand(lo, hi);
    return x;
}

static void *host_zero(size_t bytes)
{
    void *p = calloc(1, bytes + 16);
    if (!p) {
        fprintf(stderr, "ops_vs_cpu: out of host memory\n");
        exit(1);
    }
    return p;
}

/* A GPU buffer holding a copy of host data (or zeros). */
static void *up(const void *host, size_t bytes)
{
    void *d = gpu->ops->alloc(gpu, bytes ? bytes : 4);
    if (!d) {
        fprintf(stderr, "ops_vs_cpu: %s\n", cdl_last_error());
        exit(1);
    }
    if (host && bytes)
        gpu->ops->to_device(gpu, d, host, bytes);
    return d;
}

static void *down(const void *dev, size_t bytes)
{
    void *h = host_zero(bytes);
    gpu->ops->to_host(gpu, h, dev, bytes);
    if (gpu->ops->sync(gpu) != 0) {
        fprintf(stderr, "ops_vs_cpu: %s\n", cdl_last_error());
        exit(1);
    }
    return h;
}

static double norm_err(const float *a, const float *b, size_t n)
{
    double maxdiff = 0, maxref = 1;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (isnan(a[i]) != isnan(b[i]))
            d = INFINITY;
        else if (isnan(a[i]))
            d = 0;
        if (d > maxdiff)
            maxdiff = d;
        if (fabs((double)b[i]) > maxref)
            maxref = fabs((double)b[i]);
    }
    return maxdiff / maxref;
}

static void report(const char *op, const char *shape, double err, double tol, int tf32)
{
    int ok = err <= tol;
    checks++;
    failures += !ok;
    if (!tf32 && err > worst_strict && isfinite(err))
        worst_strict = err;
    printf("%-4s %-22s %-34s err %.2e  tol %.0e\n", ok ? "ok" : "FAIL", op, shape, err, tol);
}

/* Compares a GPU output (device) with a CPU one (host) of n floats. */
static void cmp(const char *op, const char *shape, const float *dev, const float *ref, size_t n,
                double tol, int tf32)
{
    float *h = down(dev, n * sizeof *h);
    report(op, shape, norm_err(h, ref, n), tol, tf32);
    free(h);
}

static void cmp_exact(const char *op, const char *shape, const void *dev, const void *ref,
                      size_t bytes)
{
    void *h = down(dev, bytes);
    report(op, shape, memcmp(h, ref, bytes) ? INFINITY : 0.0, 0.0, 0);
    free(h);
}

static void same_bits(const char *op, const char *shape, const void *dev_a, const void *dev_b,
                      size_t bytes)
{
    void *a = down(dev_a, bytes), *b = down(dev_b, bytes);
    report(op, shape, memcmp(a, b, bytes) ? INFINITY : 0.0, 0.0, 0);
    free(a);
    free(b);
}

/* -------------------------------------------------------------- conv2d */

static cdl_conv2d_desc conv_desc(int n, int c, int h, int w, int oc, int k, int stride, int pad)
{
    cdl_conv2d_desc d = {.n = n, .c = c, .h = h, .w = w, .oc = oc, .kh = k, .kw = k,
                         .stride_h = stride, .stride_w = stride, .pad_h = pad, .pad_w = pad,
                         .dil_h = 1, .dil_w = 1, .groups = 1,
                         .oh = cdl_conv2d_out(h, k, stride, pad, 1),
                         .ow = cdl_conv2d_out(w, k, stride, pad, 1)};
    return d;
}

/* Any convolution: per-axis kernel, stride, padding, dilation; groups. */
static cdl_conv2d_desc conv_desc_full(int n, int c, int h, int w, int oc, int kh, int kw, int sh,
                                      int sw, int ph, int pw, int dh, int dw, int groups)
{
    cdl_conv2d_desc d = {.n = n, .c = c, .h = h, .w = w, .oc = oc, .kh = kh, .kw = kw,
                         .stride_h = sh, .stride_w = sw, .pad_h = ph, .pad_w = pw,
                         .dil_h = dh, .dil_w = dw, .groups = groups,
                         .oh = cdl_conv2d_out(h, kh, sh, ph, dh),
                         .ow = cdl_conv2d_out(w, kw, sw, pw, dw)};
    return d;
}

/* nn.Conv2d by definition, in double: y (forward, with bias b), and from
 * dy the gradients dx, dw, db. The reference for the GPU where the CPU
 * backend is not (yet) one: grouped convolutions. */
static void naive_conv(const cdl_conv2d_desc *d, const float *x, const float *w, const float *b,
                       const float *dy, float *y, float *dx, float *dw, float *db)
{
    int cg = d->c / d->groups, og = d->oc / d->groups;
    size_t nx = (size_t)d->n * d->c * d->h * d->w, nw = (size_t)d->oc * cg * d->kh * d->kw;
    size_t ny = (size_t)d->n * d->oc * d->oh * d->ow;
    double *Y = calloc(ny, sizeof *Y), *DX = calloc(nx, sizeof *DX), *DW = calloc(nw, sizeof *DW);
    double *DB = calloc((size_t)d->oc, sizeof *DB);
    if (!Y || !DX || !DW || !DB) {
        fprintf(stderr, "ops_vs_cpu: out of host memory\n");
        exit(1);
    }
    for (int n = 0; n < d->n; n++)
        for (int o = 0; o < d->oc; o++)
            for (int oy = 0; oy < d->oh; oy++)
                for (int ox = 0; ox < d->ow; ox++) {
                    size_t yi = (((size_t)n * d->oc + o) * d->oh + oy) * d->ow + ox;
                    double acc = b[o], g = dy[yi];
                    DB[o] += g;
                    for (int ci = 0; ci < cg; ci++)
                        for (int ky = 0; ky < d->kh; ky++)
                            for (int kx = 0; kx < d->kw; kx++) {
                                int iy = oy * d->stride_h - d->pad_h + ky * d->dil_h;
                                int ix = ox * d->stride_w - d->pad_w + kx * d->dil_w;
                                if (iy < 0 || iy >= d->h || ix < 0 || ix >= d->w)
                                    continue;
                                int c = o / og * cg + ci;
                                size_t xi = (((size_t)n * d->c + c) * d->h + iy) * d->w + ix;
                                size_t wi = (((size_t)o * cg + ci) * d->kh + ky) * d->kw + kx;
                                acc += (double)x[xi] * w[wi];
                                DX[xi] += g * w[wi];
                                DW[wi] += g * x[xi];
                            }
                    Y[yi] = acc;
                }
    for (size_t i = 0; i < ny; i++)
        y[i] = (float)Y[i];
    for (size_t i = 0; i < nx; i++)
        dx[i] = (float)DX[i];
    for (size_t i = 0; i < nw; i++)
        dw[i] = (float)DW[i];
    for (int i = 0; i < d->oc; i++)
        db[i] = (float)DB[i];
    free(Y), free(DX), free(DW), free(DB);
}

/* The reference check_conv compares with: the CPU backend, or naive_conv. */
static int conv_reference_naive;

static void ref_conv_fwd(const cdl_conv2d_desc *d, const float *x, const float *w, const float *b,
                         float *y, float *cw)
{
    if (!conv_reference_naive) {
        cpu->ops->conv2d_fwd(cpu, d, x, w, b, y, cw);
        return;
    }
    size_t nx = (size_t)d->n * d->c * d->h * d->w;
    size_t nw = (size_t)d->oc * (d->c / d->groups) * d->kh * d->kw;
    size_t ny = (size_t)d->n * d->oc * d->oh * d->ow;
    float *zb = host_zero((size_t)d->oc * 4), *dy = host_zero(ny * 4), *dx = host_zero(nx * 4);
    float *dw = host_zero(nw * 4), *db = host_zero((size_t)d->oc * 4);
    naive_conv(d, x, w, b ? b : zb, dy, y, dx, dw, db);
    free(zb), free(dy), free(dx), free(dw), free(db);
}

static void ref_conv_bwd(const cdl_conv2d_desc *d, const float *x, const float *w,
                         const float *dy, float *dx, float *dw, float *db, float *cw)
{
    if (!conv_reference_naive) {
        cpu->ops->conv2d_bwd(cpu, d, x, w, dy, dx, dw, db, cw);
        return;
    }
    size_t ny = (size_t)d->n * d->oc * d->oh * d->ow;
    float *zb = host_zero((size_t)d->oc * 4), *y = host_zero(ny * 4);
    naive_conv(d, x, w, zb, dy, y, dx, dw, db);
    free(zb), free(y);
}

static void check_conv(cdl_conv2d_desc d, int tf32)
{
    char shape[128];
    snprintf(shape, sizeof shape, "%dx%dx%dx%d oc%d k%dx%d s%dx%d p%dx%d d%dx%d g%d%s", d.n, d.c,
             d.h, d.w, d.oc, d.kh, d.kw, d.stride_h, d.stride_w, d.pad_h, d.pad_w, d.dil_h, d.dil_w,
             d.groups, conv_reference_naive ? " vs def" : "");
    size_t nx = (size_t)d.n * d.c * d.h * d.w, nw = (size_t)d.oc * (d.c / d.groups) * d.kh * d.kw;
    size_t ny = (size_t)d.n * d.oc * d.oh * d.ow;
    double tol = tf32 ? 1e-2 : 1e-4;
    float *x = host_rand(nx, -1, 1), *w = host_rand(nw, -0.5f, 0.5f), *b = host_rand(d.oc, -1, 1);
    float *dy = host_rand(ny, -1, 1);
    size_t cws = cpu->ops->conv2d_workspace(cpu, &d), gws = gpu->ops->conv2d_workspace(gpu, &d);
    float *cw = host_zero(cws * sizeof(float)), *gw = up(NULL, gws * sizeof(float));
    float *y = host_zero(ny * 4), *dx = host_zero(nx * 4), *dw = host_zero(nw * 4);
    float *db = host_zero((size_t)d.oc * 4);
    ref_conv_fwd(&d, x, w, b, y, cw);
    ref_conv_bwd(&d, x, w, dy, dx, dw, db, cw);

    float *gx = up(x, nx * 4), *gwt = up(w, nw * 4), *gb = up(b, (size_t)d.oc * 4);
    float *gdy = up(dy, ny * 4), *gy = up(NULL, ny * 4), *gdx = up(NULL, nx * 4);
    float *gdw = up(NULL, nw * 4), *gdb = up(NULL, (size_t)d.oc * 4);
    gpu->ops->conv2d_fwd(gpu, &d, gx, gwt, gb, gy, gw);
    gpu->ops->conv2d_bwd(gpu, &d, gx, gwt, gdy, gdx, gdw, gdb, gw);
    cmp(tf32 ? "conv2d_fwd tf32" : "conv2d_fwd", shape, gy, y, ny, tol, tf32);
    cmp(tf32 ? "conv2d_bwd dx tf32" : "conv2d_bwd dx", shape, gdx, dx, nx, tol, tf32);
    cmp(tf32 ? "conv2d_bwd dw tf32" : "conv2d_bwd dw", shape, gdw, dw, nw, tol, tf32);
    cmp("conv2d_bwd db", shape, gdb, db, (size_t)d.oc, 1e-4, tf32);
    if (!tf32) {
        /* Deterministic algorithms: the same bits again; no dx for the first layer. */
        float *gdw2 = up(NULL, nw * 4), *gdb2 = up(NULL, (size_t)d.oc * 4);
        gpu->ops->conv2d_bwd(gpu, &d, gx, gwt, gdy, NULL, gdw2, gdb2, gw);
        same_bits("conv2d_bwd reproducible", shape, gdw, gdw2, nw * 4);
        same_bits("conv2d db reproducible", shape, gdb, gdb2, (size_t)d.oc * 4);
        gpu->ops->free(gpu, gdw2);
        gpu->ops->free(gpu, gdb2);
        /* No bias. */
        ref_conv_fwd(&d, x, w, NULL, y, cw);
        gpu->ops->conv2d_fwd(gpu, &d, gx, gwt, NULL, gy, gw);
        cmp("conv2d_fwd no bias", shape, gy, y, ny, tol, tf32);
    }
    void *gpu_bufs[] = {gw, gx, gwt, gb, gdy, gy, gdx, gdw, gdb};
    for (size_t i = 0; i < sizeof gpu_bufs / sizeof gpu_bufs[0]; i++)
        gpu->ops->free(gpu, gpu_bufs[i]);
    void *host_bufs[] = {x, w, b, dy, cw, y, dx, dw, db};
    for (size_t i = 0; i < sizeof host_bufs / sizeof host_bufs[0]; i++)
        free(host_bufs[i]);
}

/* Two models on one backend, each with the workspace it sized: a shape the
 * small one never sized (its last, partial batch, first seen mid-run) must
 * be planned for the small buffer it comes with, not for the largest
 * workspace any model asked for (the big one's), and cuDNN must be told the
 * real room. (A larger batch than sized may find no deterministic
 * algorithm within that room, as the real cuDNN showed for n = 16: the
 * model sizes its workspace for its largest batch and for 1.) */
static void check_shared_workspace(void)
{
    cdl_conv2d_desc small = conv_desc(8, 3, 16, 16, 4, 3, 1, 1);
    cdl_conv2d_desc big = conv_desc(64, 3, 32, 32, 8, 5, 1, 0);
    size_t ws_small = gpu->ops->conv2d_workspace(gpu, &small);
    size_t ws_big = gpu->ops->conv2d_workspace(gpu, &big);
    float *gws_small = up(NULL, ws_small * sizeof(float) + 4);
    float *gws_big = up(NULL, ws_big * sizeof(float) + 4);
    cdl_conv2d_desc shapes[] = {small, big, small};
    float *wss[] = {gws_small, gws_big, gws_small};
    shapes[2].n = 5;   /* the small model's last, partial batch */
    for (int i = 0; i < 3; i++) {
        cdl_conv2d_desc d = shapes[i];
        char shape[96];
        snprintf(shape, sizeof shape, "%dx%dx%dx%d oc%d, %s workspace", d.n, d.c, d.h, d.w, d.oc,
                 wss[i] == gws_small ? "small" : "big");
        size_t nx = (size_t)d.n * d.c * d.h * d.w, nw = (size_t)d.oc * d.c * d.kh * d.kw;
        size_t ny = (size_t)d.n * d.oc * d.oh * d.ow;
        float *x = host_rand(nx, -1, 1), *w = host_rand(nw, -0.5f, 0.5f);
        float *dy = host_rand(ny, -1, 1);
        float *cw = host_zero(cpu->ops->conv2d_workspace(cpu, &d) * sizeof(float));
        float *y = host_zero(ny * 4), *dx = host_zero(nx * 4), *dw = host_zero(nw * 4);
        cpu->ops->conv2d_fwd(cpu, &d, x, w, NULL, y, cw);
        cpu->ops->conv2d_bwd(cpu, &d, x, w, dy, dx, dw, NULL, cw);
        float *gx = up(x, nx * 4), *gw = up(w, nw * 4), *gdy = up(dy, ny * 4);
        float *gy = up(NULL, ny * 4), *gdx = up(NULL, nx * 4), *gdw = up(NULL, nw * 4);
        gpu->ops->conv2d_fwd(gpu, &d, gx, gw, NULL, gy, wss[i]);
        gpu->ops->conv2d_bwd(gpu, &d, gx, gw, gdy, gdx, gdw, NULL, wss[i]);
        cmp("conv2d_fwd shared backend", shape, gy, y, ny, 1e-2, 1);
        cmp("conv2d_bwd dx shared backend", shape, gdx, dx, nx, 1e-2, 1);
        cmp("conv2d_bwd dw shared backend", shape, gdw, dw, nw, 1e-2, 1);
        void *gpu_bufs[] = {gx, gw, gdy, gy, gdx, gdw};
        for (size_t j = 0; j < sizeof gpu_bufs / sizeof gpu_bufs[0]; j++)
            gpu->ops->free(gpu, gpu_bufs[j]);
        void *host_bufs[] = {x, w, dy, cw, y, dx, dw};
        for (size_t j = 0; j < sizeof host_bufs / sizeof host_bufs[0]; j++)
            free(host_bufs[j]);
    }
    gpu->ops->free(gpu, gws_small);
    gpu->ops->free(gpu, gws_big);
}

/* -------------------------------------------------------------- linear */

/* Linear layers, forward and backward, against the CPU backend. The CUDA
 * backend puts the bias into cuBLASLt's epilogues (kernels/cuda/linear.c:
 * BIAS forward, BGRADB with dw in fp32) and falls back to cuBLAS and its
 * bias kernels; tag names the variant for the report ("" for the default
 * path of gpu). bf16: gpu has precision bf16 (inputs of the products
 * rounded to bf16: 8 significant bits; 1e-2 of the output's scale, like TF32;
 * db stays fp32 sums). Shapes with out % 8 != 0 run padded in bf16. */
static void check_linear_on(const char *tag, int n, int in, int out, int tf32, int bf16)
{
    char shape[64], what[64];
    snprintf(shape, sizeof shape, "n%d in%d out%d", n, in, out);
    double tol = bf16 || tf32 ? 1e-2 : 1e-4;
    int loose = tf32 || bf16;
    const char *kind = bf16 ? " bf16" : tf32 ? " tf32" : "";
    size_t nx = (size_t)n * in, nw = (size_t)out * in, ny = (size_t)n * out;
    float *x = host_rand(nx, -1, 1), *w = host_rand(nw, -0.5f, 0.5f), *b = host_rand(out, -1, 1);
    float *dy = host_rand(ny, -1, 1);
    size_t cws = cpu->ops->linear_workspace(cpu, n, in, out);
    size_t gws = gpu->ops->linear_workspace(gpu, n, in, out);
    float *cw = host_zero(cws * 4), *gw = up(NULL, gws * 4);
    float *y = host_zero(ny * 4), *dx = host_zero(nx * 4), *dw = host_zero(nw * 4);
    float *db = host_zero((size_t)out * 4);
    cpu->ops->linear_fwd(cpu, n, in, out, x, w, b, y, cw);
    cpu->ops->linear_bwd(cpu, n, in, out, x, w, dy, dx, dw, db, cw);
    float *gx = up(x, nx * 4), *gwt = up(w, nw * 4), *gb = up(b, (size_t)out * 4);
    float *gdy = up(dy, ny * 4), *gy = up(NULL, ny * 4), *gdx = up(NULL, nx * 4);
    float *gdw = up(NULL, nw * 4), *gdb = up(NULL, (size_t)out * 4);
    float *gdw2 = up(NULL, nw * 4), *gdb2 = up(NULL, (size_t)out * 4);
    gpu->ops->linear_fwd(gpu, n, in, out, gx, gwt, gb, gy, gw);
    gpu->ops->linear_bwd(gpu, n, in, out, gx, gwt, gdy, gdx, gdw, gdb, gw);
#define LIN_WHAT(name) (snprintf(what, sizeof what, "%s%s%s", name, kind, tag), what)
    cmp(LIN_WHAT("linear_fwd"), shape, gy, y, ny, tol, loose);
    cmp(LIN_WHAT("linear_bwd dx"), shape, gdx, dx, nx, tol, loose);
    cmp(LIN_WHAT("linear_bwd dw"), shape, gdw, dw, nw, tol, loose);
    cmp(LIN_WHAT("linear_bwd db"), shape, gdb, db, (size_t)out, 1e-4, loose);
    /* The same calls again: the same bits (bitwise resume). */
    gpu->ops->linear_bwd(gpu, n, in, out, gx, gwt, gdy, NULL, gdw2, gdb2, gw);
    same_bits(LIN_WHAT("linear_bwd dw repro"), shape, gdw, gdw2, nw * 4);
    same_bits(LIN_WHAT("linear_bwd db repro"), shape, gdb, gdb2, (size_t)out * 4);
    if (!tf32) {
        /* Without a bias: no epilogue. */
        cpu->ops->linear_fwd(cpu, n, in, out, x, w, NULL, y, cw);
        gpu->ops->linear_fwd(gpu, n, in, out, gx, gwt, NULL, gy, gw);
        cmp(LIN_WHAT("linear_fwd no bias"), shape, gy, y, ny, tol, loose);
        gpu->ops->linear_bwd(gpu, n, in, out, gx, gwt, gdy, NULL, gdw2, NULL, gw);
        cmp(LIN_WHAT("linear_bwd dw no db"), shape, gdw2, dw, nw, tol, loose);
    }
#undef LIN_WHAT
    void *gpu_bufs[] = {gw, gx, gwt, gb, gdy, gy, gdx, gdw, gdb, gdw2, gdb2};
    for (size_t i = 0; i < sizeof gpu_bufs / sizeof gpu_bufs[0]; i++)
        gpu->ops->free(gpu, gpu_bufs[i]);
    void *host_bufs[] = {x, w, b, dy, cw, y, dx, dw, db};
    for (size_t i = 0; i < sizeof host_bufs / sizeof host_bufs[0]; i++)
        free(host_bufs[i]);
}

static void check_linear(int n, int in, int out, int tf32)
{
    check_linear_on("", n, in, out, tf32, 0);
}

/* ------------------------------------------------------------- pooling */

static void check_pool(int n, int c, int h, int w, int k, int stride, int pad)
{
    cdl_pool2d_desc d = {n, c, h, w, k, stride, pad, (h + 2 * pad - k) / stride + 1,
                         (w + 2 * pad - k) / stride + 1};
    char shape[64];
    snprintf(shape, sizeof shape, "%dx%dx%dx%d k%d s%d p%d", n, c, h, w, k, stride, pad);
    size_t nx = (size_t)n * c * h * w, ny = (size_t)n * c * d.oh * d.ow;
    float *x = host_rand(nx, -1, 1), *dy = host_rand(ny, -1, 1);
    for (size_t i = 0; i < nx; i += 7)
        x[i] = (float)(int)(x[i] * 3);   /* ties */
    float *y = host_zero(ny * 4), *dx = host_zero(nx * 4);
    int32_t *am = host_zero(ny * 4);
    float *gx = up(x, nx * 4), *gdy = up(dy, ny * 4), *gy = up(NULL, ny * 4);
    float *gdx = up(NULL, nx * 4);
    int32_t *gam = up(NULL, ny * 4);

    cpu->ops->maxpool_fwd(cpu, &d, x, y, am);
    cpu->ops->maxpool_bwd(cpu, &d, dy, am, dx);
    gpu->ops->maxpool_fwd(gpu, &d, gx, gy, gam);
    gpu->ops->maxpool_bwd(gpu, &d, gdy, gam, gdx);
    cmp_exact("maxpool_fwd y", shape, gy, y, ny * 4);
    cmp_exact("maxpool_fwd argmax", shape, gam, am, ny * 4);
    cmp_exact("maxpool_bwd dx", shape, gdx, dx, nx * 4);

    cpu->ops->avgpool_fwd(cpu, &d, x, y);
    cpu->ops->avgpool_bwd(cpu, &d, dy, dx);
    gpu->ops->avgpool_fwd(gpu, &d, gx, gy);
    gpu->ops->avgpool_bwd(gpu, &d, gdy, gdx);
    cmp_exact("avgpool_fwd", shape, gy, y, ny * 4);
    cmp_exact("avgpool_bwd", shape, gdx, dx, nx * 4);
    void *gpu_bufs[] = {gx, gdy, gy, gdx, gam};
    for (size_t i = 0; i < sizeof gpu_bufs / sizeof gpu_bufs[0]; i++)
        gpu->ops->free(gpu, gpu_bufs[i]);
    free(x), free(dy), free(y), free(dx), free(am);
}

/* ------------------------------------------------ elementwise and loss */

static void check_eltwise(size_t n)
{
    char shape[32];
    snprintf(shape, sizeof shape, "n%zu", n);
    float *x = host_rand(n, -1, 1), *dy = host_rand(n, -1, 1);
    float *y = host_zero(n * 4), *dx = host_zero(n * 4);
    uint8_t *mask = host_zero(n);
    float *gx = up(x, n * 4), *gdy = up(dy, n * 4), *gy = up(NULL, n * 4), *gdx = up(NULL, n * 4);
    uint8_t *gmask = up(NULL, n);

    cpu->ops->relu_fwd(cpu, n, x, y);
    gpu->ops->relu_fwd(gpu, n, gx, gy);
    cmp_exact("relu_fwd", shape, gy, y, n * 4);
    cpu->ops->relu_bwd(cpu, n, y, dy, dx);
    gpu->ops->relu_bwd(gpu, n, gy, gdy, gdx);
    cmp_exact("relu_bwd", shape, gdx, dx, n * 4);

    const float ps[] = {0.0f, 0.25f, 0.5f};
    for (int k = 0; k < 3; k++) {
        char s2[64];
        snprintf(s2, sizeof s2, "%s p%.2f", shape, (double)ps[k]);
        cpu->ops->dropout_fwd(cpu, n, ps[k], 777 + (uint64_t)k, x, y, mask);
        gpu->ops->dropout_fwd(gpu, n, ps[k], 777 + (uint64_t)k, gx, gy, gmask);
        cmp_exact("dropout_fwd mask", s2, gmask, mask, n);
        cmp_exact("dropout_fwd y", s2, gy, y, n * 4);
        cpu->ops->dropout_bwd(cpu, n, ps[k], mask, dy, dx);
        gpu->ops->dropout_bwd(gpu, n, ps[k], gmask, gdy, gdx);
        cmp_exact("dropout_bwd", s2, gdx, dx, n * 4);
    }

    memcpy(y, x, n * 4);
    cpu->ops->scale(cpu, y, -0.3f, n);
    gpu->ops->copy(gpu, gy, gx, n * 4);
    gpu->ops->scale(gpu, gy, -0.3f, n);
    cmp_exact("copy+scale", shape, gy, y, n * 4);
    cpu->ops->fill(cpu, y, 2.5f, n);
    gpu->ops->fill(gpu, gy, 2.5f, n);
    cmp_exact("fill", shape, gy, y, n * 4);

    double s_cpu = cpu->ops->sumsq(cpu, x, n), s_gpu = gpu->ops->sumsq(gpu, gx, n);
    double s_again = gpu->ops->sumsq(gpu, gx, n);
    report("sumsq", shape, fabs(s_gpu - s_cpu) / (s_cpu > 1 ? s_cpu : 1), 1e-12, 0);
    report("sumsq reproducible", shape, memcmp(&s_gpu, &s_again, sizeof s_gpu) ? INFINITY : 0,
           0, 0);
    void *gpu_bufs[] = {gx, gdy, gy, gdx, gmask};
    for (size_t i = 0; i < sizeof gpu_bufs / sizeof gpu_bufs[0]; i++)
        gpu->ops->free(gpu, gpu_bufs[i]);
    free(x), free(dy), free(y), free(dx), free(mask);
}

/* --------------------------------------- ops of residual networks */

/* Whether the backend under test has an op of the residual networks (a
 * backend that does not yet is skipped with a line, not failed). */
static int have(const void *entry, const char *op)
{
    if (!entry)
        printf("skip %s: the %s backend has no such op\n", op, gpu->ops->name);
    return entry != NULL;
}

static const char *const act_names[] = {"relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh",
                                        "leakyrelu"};

/* Activations forward and backward against the CPU; the GPU's erff, expf
 * and tanhf are a few ulp from glibc's (the fake GPU's are glibc's). */
static void check_act(size_t n)
{
    if (!have((const void *)gpu->ops->act_fwd, "act_fwd") ||
        !have((const void *)gpu->ops->act_bwd, "act_bwd"))
        return;
    float *x = host_rand(n, -5, 5), *dy = host_rand(n, -1, 1);
    float *y = host_zero(n * 4), *dx = host_zero(n * 4);
    float *gx = up(x, n * 4), *gdy = up(dy, n * 4), *gy = up(NULL, n * 4), *gdx = up(NULL, n * 4);
    float *gdx2 = up(NULL, n * 4);
    for (int a = CDL_ACT_RELU; a <= CDL_ACT_LEAKYRELU; a++) {
        char shape[48];
        snprintf(shape, sizeof shape, "%s n%zu", act_names[a], n);
        float alpha = a == CDL_ACT_LEAKYRELU ? 0.01f : 0.0f;
        int exact = a == CDL_ACT_RELU || a == CDL_ACT_LEAKYRELU;
        cpu->ops->act_fwd(cpu, (cdl_act)a, alpha, n, x, y);
        cpu->ops->act_bwd(cpu, (cdl_act)a, alpha, n, x, y, dy, dx);
        gpu->ops->act_fwd(gpu, (cdl_act)a, alpha, n, gx, gy);
        gpu->ops->act_bwd(gpu, (cdl_act)a, alpha, n, gx, gy, gdy, gdx);
        if (exact) {
            cmp_exact("act_fwd", shape, gy, y, n * 4);
            cmp_exact("act_bwd", shape, gdx, dx, n * 4);
        } else {
            cmp("act_fwd", shape, gy, y, n, 1e-6, 0);
            cmp("act_bwd", shape, gdx, dx, n, 1e-6, 0);
        }
        /* Reproducible, and dx may alias dy. */
        gpu->ops->copy(gpu, gdx2, gdy, n * 4);
        gpu->ops->act_bwd(gpu, (cdl_act)a, alpha, n, gx, gy, gdx2, gdx2);
        same_bits("act_bwd in place, reproducible", shape, gdx, gdx2, n * 4);
    }
    gpu->ops->free(gpu, gx), gpu->ops->free(gpu, gdy), gpu->ops->free(gpu, gy);
    gpu->ops->free(gpu, gdx), gpu->ops->free(gpu, gdx2);
    free(x), free(dy), free(y), free(dx);
}

/* add, accumulate, channel_copy (concat/split), global average pooling:
 * the same arithmetic as the CPU, bit for bit. */
static void check_join(int n, int c, int h, int w)
{
    if (!have((const void *)gpu->ops->add, "add") ||
        !have((const void *)gpu->ops->accumulate, "accumulate") ||
        !have((const void *)gpu->ops->channel_copy, "channel_copy") ||
        !have((const void *)gpu->ops->gap_fwd, "gap_fwd") ||
        !have((const void *)gpu->ops->gap_bwd, "gap_bwd"))
        return;
    char shape[64];
    snprintf(shape, sizeof shape, "%dx%dx%dx%d", n, c, h, w);
    int hw = h * w;
    size_t nx = (size_t)n * c * hw, nc = (size_t)n * c;
    float *a = host_rand(nx, -1, 1), *b = host_rand(nx, -1, 1), *y = host_zero(nx * 4);
    float *ga = up(a, nx * 4), *gb = up(b, nx * 4), *gy = up(NULL, nx * 4);
    cpu->ops->add(cpu, nx, a, b, y);
    gpu->ops->add(gpu, nx, ga, gb, gy);
    cmp_exact("add", shape, gy, y, nx * 4);
    cpu->ops->accumulate(cpu, nx, a, y);
    gpu->ops->accumulate(gpu, nx, ga, gy);
    cmp_exact("accumulate", shape, gy, y, nx * 4);

    /* concat a (n,c) and b's first c-1 channels into (n,2c-1), then split
     * the second piece out again, adding it to a copy of a. */
    int cc = 2 * c - 1;
    size_t ncat = (size_t)n * cc * hw, npart = (size_t)n * (c - 1) * hw;
    float *cat = host_zero(ncat * 4), *part = host_zero(npart * 4);
    float *gcat = up(NULL, ncat * 4), *gpart = up(NULL, npart * 4);
    cpu->ops->channel_copy(cpu, n, c, hw, a, c, 0, cat, cc, 0, 0);
    cpu->ops->channel_copy(cpu, n, c - 1, hw, b, c, 1, cat, cc, c, 0);
    gpu->ops->channel_copy(gpu, n, c, hw, ga, c, 0, gcat, cc, 0, 0);
    gpu->ops->channel_copy(gpu, n, c - 1, hw, gb, c, 1, gcat, cc, c, 0);
    cmp_exact("channel_copy concat", shape, gcat, cat, ncat * 4);
    memcpy(part, a, npart * 4);
    gpu->ops->to_device(gpu, gpart, a, npart * 4);
    cpu->ops->channel_copy(cpu, n, c - 1, hw, cat, cc, c, part, c - 1, 0, 1);
    gpu->ops->channel_copy(gpu, n, c - 1, hw, gcat, cc, c, gpart, c - 1, 0, 1);
    cmp_exact("channel_copy split accumulate", shape, gpart, part, npart * 4);

    float *p = host_zero(nc * 4), *gp = up(NULL, nc * 4);
    cpu->ops->gap_fwd(cpu, n, c, hw, a, p);
    gpu->ops->gap_fwd(gpu, n, c, hw, ga, gp);
    cmp_exact("gap_fwd", shape, gp, p, nc * 4);
    cpu->ops->gap_bwd(cpu, n, c, hw, p, y);
    gpu->ops->gap_bwd(gpu, n, c, hw, gp, gy);
    cmp_exact("gap_bwd", shape, gy, y, nx * 4);
    void *gbufs[] = {ga, gb, gy, gcat, gpart, gp};
    for (size_t i = 0; i < sizeof gbufs / sizeof gbufs[0]; i++)
        gpu->ops->free(gpu, gbufs[i]);
    free(a), free(b), free(y), free(cat), free(part), free(p);
}

/* Batch norm's pieces, each fed the CPU's inputs so that each is measured
 * alone: sums to 1e-6 (double accumulation in another order), the
 * elementwise passes to 1e-6 (fused multiply-adds), per-channel constants
 * exactly. Then the whole training step again from the GPU's own
 * intermediates, twice: the same bits (fixed-order sums). */
static void check_bn(int n, int c, int h, int w, int relu, int affine)
{
    const void *entries[] = {(const void *)gpu->ops->bn_sum, (const void *)gpu->ops->bn_sqdev,
                             (const void *)gpu->ops->bn_apply, (const void *)gpu->ops->bn_running,
                             (const void *)gpu->ops->bn_eval, (const void *)gpu->ops->bn_bwd_sums,
                             (const void *)gpu->ops->bn_bwd_apply};
    for (size_t i = 0; i < sizeof entries / sizeof entries[0]; i++)
        if (!have(entries[i], "bn_* (batch norm)"))
            return;
    char shape[64];
    snprintf(shape, sizeof shape, "%dx%dx%dx%d%s%s", n, c, h, w, relu ? " relu" : "",
             affine ? "" : " no affine");
    int hw = h * w;
    size_t nx = (size_t)n * c * hw, C = (size_t)c;
    const float eps = 1e-5f, mom = 0.1f;
    float *x = host_rand(nx, -2, 3), *dy = host_rand(nx, -1, 1);
    float *gamma = affine ? host_rand(C, 0.5f, 1.5f) : NULL;
    float *beta = affine ? host_rand(C, -0.5f, 0.5f) : NULL;
    float *rm = host_rand(C, -0.1f, 0.1f), *rv = host_rand(C, 0.8f, 1.2f);
    float nbt = 3.0f;
    float *sum = host_zero((C + 1) * 4), *sq = host_zero(C * 4), *saved = host_zero((2 * C + 1) * 4);
    float *y = host_zero(nx * 4), *dg = host_zero(C * 4), *db = host_zero(C * 4);
    float *dx = host_zero(nx * 4), *ye = host_zero(nx * 4);
    float *grm = up(rm, C * 4), *grv = up(rv, C * 4), *gnbt = up(&nbt, 4);
    float *gx = up(x, nx * 4), *gdy = up(dy, nx * 4);
    float *ggamma = affine ? up(gamma, C * 4) : NULL, *gbeta = affine ? up(beta, C * 4) : NULL;
    float *gsum = up(NULL, (C + 1) * 4), *gsq = up(NULL, C * 4), *gsaved = up(NULL, (2 * C + 1) * 4);
    float *gy = up(NULL, nx * 4), *gdg = up(NULL, C * 4), *gdb = up(NULL, C * 4);
    float *gdx = up(NULL, nx * 4);

    cpu->ops->bn_sum(cpu, n, c, hw, x, sum);
    gpu->ops->bn_sum(gpu, n, c, hw, gx, gsum);
    cmp("bn_sum", shape, gsum, sum, C + 1, 1e-6, 0);
    cpu->ops->bn_sqdev(cpu, n, c, hw, x, sum, sq);
    gpu->ops->to_device(gpu, gsum, sum, (C + 1) * 4);
    gpu->ops->bn_sqdev(gpu, n, c, hw, gx, gsum, gsq);
    cmp("bn_sqdev", shape, gsq, sq, C, 1e-6, 0);
    gpu->ops->to_device(gpu, gsq, sq, C * 4);
    cpu->ops->bn_apply(cpu, n, c, hw, x, sum, sq, eps, gamma, beta, relu, y, saved);
    gpu->ops->bn_apply(gpu, n, c, hw, gx, gsum, gsq, eps, ggamma, gbeta, relu, gy, gsaved);
    cmp_exact("bn_apply saved", shape, gsaved, saved, (2 * C + 1) * 4);
    cmp("bn_apply y", shape, gy, y, nx, 1e-6, 0);
    cpu->ops->bn_running(cpu, c, sum, sq, mom, rm, rv, &nbt);
    gpu->ops->bn_running(gpu, c, gsum, gsq, mom, grm, grv, gnbt);
    cmp("bn_running mean", shape, grm, rm, C, 1e-6, 0);
    cmp("bn_running var", shape, grv, rv, C, 1e-6, 0);
    cmp_exact("bn_running num_batches_tracked", shape, gnbt, &nbt, 4);

    gpu->ops->to_device(gpu, gy, y, nx * 4);
    const float *yr = relu ? y : NULL, *gyr = relu ? gy : NULL;
    cpu->ops->bn_bwd_sums(cpu, n, c, hw, x, yr, dy, saved, dg, db);
    gpu->ops->bn_bwd_sums(gpu, n, c, hw, gx, gyr, gdy, gsaved, gdg, gdb);
    cmp("bn_bwd_sums dgamma", shape, gdg, dg, C, 1e-6, 0);
    cmp("bn_bwd_sums dbeta", shape, gdb, db, C, 1e-6, 0);
    gpu->ops->to_device(gpu, gdg, dg, C * 4);
    gpu->ops->to_device(gpu, gdb, db, C * 4);
    cpu->ops->bn_bwd_apply(cpu, n, c, hw, x, yr, dy, saved, gamma, db, dg, dx);
    gpu->ops->bn_bwd_apply(gpu, n, c, hw, gx, gyr, gdy, gsaved, ggamma, gdb, gdg, gdx);
    cmp("bn_bwd_apply dx", shape, gdx, dx, nx, 1e-6, 0);

    cpu->ops->bn_eval(cpu, n, c, hw, x, rm, rv, eps, gamma, beta, relu, ye);
    gpu->ops->bn_eval(gpu, n, c, hw, gx, grm, grv, eps, ggamma, gbeta, relu, gy);
    cmp("bn_eval", shape, gy, ye, nx, 1e-6, 0);

    /* The training step from the GPU's own intermediates, twice. */
    float *outs[2];
    for (int k = 0; k < 2; k++) {
        float *gdx_k = up(NULL, nx * 4);
        gpu->ops->bn_sum(gpu, n, c, hw, gx, gsum);
        gpu->ops->bn_sqdev(gpu, n, c, hw, gx, gsum, gsq);
        gpu->ops->bn_apply(gpu, n, c, hw, gx, gsum, gsq, eps, ggamma, gbeta, relu, gy, gsaved);
        gpu->ops->bn_bwd_sums(gpu, n, c, hw, gx, relu ? gy : NULL, gdy, gsaved, gdg, gdb);
        gpu->ops->bn_bwd_apply(gpu, n, c, hw, gx, relu ? gy : NULL, gdy, gsaved, ggamma, gdb, gdg,
                               gdx_k);
        outs[k] = gdx_k;
    }
    cmp("bn step dx (GPU end to end)", shape, outs[0], dx, nx, 1e-5, 0);
    same_bits("bn step reproducible", shape, outs[0], outs[1], nx * 4);
    gpu->ops->free(gpu, outs[0]), gpu->ops->free(gpu, outs[1]);

    if (affine && have((const void *)gpu->ops->bn_fold, "bn_fold")) {
        int per_oc = 9;
        size_t nw = C * per_oc;
        float *wt = host_rand(nw, -1, 1), *bs = host_rand(C, -1, 1);
        float *wo = host_zero(nw * 4), *bo = host_zero(C * 4);
        float *gwt = up(wt, nw * 4), *gbs = up(bs, C * 4);
        cpu->ops->bn_fold(cpu, c, per_oc, wt, bs, rm, rv, eps, gamma, beta, wo, bo);
        gpu->ops->bn_fold(gpu, c, per_oc, gwt, gbs, grm, grv, eps, ggamma, gbeta, gwt, gbs);
        cmp("bn_fold w (in place)", shape, gwt, wo, nw, 1e-6, 0);
        cmp("bn_fold b (in place)", shape, gbs, bo, C, 1e-6, 0);
        gpu->ops->free(gpu, gwt), gpu->ops->free(gpu, gbs);
        free(wt), free(bs), free(wo), free(bo);
    }
    void *gbufs[] = {grm, grv, gnbt, gx, gdy, ggamma, gbeta, gsum, gsq, gsaved, gy, gdg, gdb, gdx};
    for (size_t i = 0; i < sizeof gbufs / sizeof gbufs[0]; i++)
        if (gbufs[i])
            gpu->ops->free(gpu, gbufs[i]);
    void *hbufs[] = {x, dy, gamma, beta, rm, rv, sum, sq, saved, y, dg, db, dx, ye};
    for (size_t i = 0; i < sizeof hbufs / sizeof hbufs[0]; i++)
        free(hbufs[i]);
}

/* Cross-entropy: xent_fwd_bwd (ls = 0), or xent_ls_fwd_bwd with label
 * smoothing eps, whose eps = 0 must be xent_fwd_bwd's bits. */
static void check_xent(int n, int classes, int ls, float eps)
{
    if (ls && !have((const void *)gpu->ops->xent_ls_fwd_bwd, "xent_ls_fwd_bwd"))
        return;
    char shape[64];
    snprintf(shape, sizeof shape, "n%d classes%d%s%.2f", n, classes, ls ? " eps" : "",
             ls ? (double)eps : 0.0);
    const char *what[] = {ls ? "xent_ls loss" : "xent loss", ls ? "xent_ls dlogits" : "xent dlogits",
                          ls ? "xent_ls pred" : "xent pred"};
    size_t nz = (size_t)n * classes;
    float *z = host_rand(nz, -6, 6), *dz = host_zero(nz * 4), *loss = host_zero((size_t)n * 4);
    int32_t *labels = host_zero((size_t)n * 4), *pred = host_zero((size_t)n * 4);
    for (int i = 0; i < n; i++)
        labels[i] = (int32_t)(frand(0, 1) * (float)classes) % classes;
    for (int i = 3; i < n; i += 7)
        labels[i] = -1;   /* ignored (ignore_index): loss 0, dlogits row 0 */
    float *gz = up(z, nz * 4), *gdz = up(NULL, nz * 4), *gloss = up(NULL, (size_t)n * 4);
    float *gdz0 = up(NULL, nz * 4), *gloss0 = up(NULL, (size_t)n * 4);
    int32_t *glabels = up(labels, (size_t)n * 4), *gpred = up(NULL, (size_t)n * 4);
    if (ls) {
        cpu->ops->xent_ls_fwd_bwd(cpu, n, classes, z, labels, eps, 1.0f / (float)n, dz, loss,
                                  pred);
        gpu->ops->xent_ls_fwd_bwd(gpu, n, classes, gz, glabels, eps, 1.0f / (float)n, gdz, gloss,
                                  gpred);
    } else {
        cpu->ops->xent_fwd_bwd(cpu, n, classes, z, labels, 1.0f / (float)n, dz, loss, pred);
        gpu->ops->xent_fwd_bwd(gpu, n, classes, gz, glabels, 1.0f / (float)n, gdz, gloss, gpred);
    }
    cmp(what[0], shape, gloss, loss, (size_t)n, 1e-6, 0);
    cmp(what[1], shape, gdz, dz, nz, 1e-6, 0);
    cmp_exact(what[2], shape, gpred, pred, (size_t)n * 4);
    if (ls && eps == 0.0f) {
        gpu->ops->xent_fwd_bwd(gpu, n, classes, gz, glabels, 1.0f / (float)n, gdz0, gloss0, gpred);
        same_bits("xent_ls eps 0 = xent loss", shape, gloss, gloss0, (size_t)n * 4);
        same_bits("xent_ls eps 0 = xent dlogits", shape, gdz, gdz0, nz * 4);
    }
    void *gbufs[] = {gz, gdz, gloss, gdz0, gloss0, glabels, gpred};
    for (size_t i = 0; i < sizeof gbufs / sizeof gbufs[0]; i++)
        gpu->ops->free(gpu, gbufs[i]);
    free(z), free(dz), free(loss), free(labels), free(pred);
}

/* --------------------------------------- ops of transformers (issue 16) */

/* layernorm (with and without gamma/beta), embedding, bcast_add against
 * the CPU: layer norm to 1e-6 (double sums in another order), the
 * embedding and the broadcast add bit for bit (the same float additions
 * in row order), and reproducible. */
static void check_seq(int rows, int d, int vocab, int affine)
{
    if (!have((const void *)gpu->ops->layernorm_fwd, "layernorm_fwd") ||
        !have((const void *)gpu->ops->layernorm_bwd, "layernorm_bwd") ||
        !have((const void *)gpu->ops->embedding_fwd, "embedding_fwd") ||
        !have((const void *)gpu->ops->embedding_bwd, "embedding_bwd") ||
        !have((const void *)gpu->ops->bcast_add_fwd, "bcast_add_fwd") ||
        !have((const void *)gpu->ops->bcast_add_bwd, "bcast_add_bwd"))
        return;
    char shape[64];
    snprintf(shape, sizeof shape, "rows%d d%d vocab%d%s", rows, d, vocab, affine ? "" : " no affine");
    size_t nx = (size_t)rows * d, nw = (size_t)vocab * d;
    float *x = host_rand(nx, -2, 3), *dy = host_rand(nx, -1, 1), *g = host_rand((size_t)d, 0.5, 1.5);
    float *b = host_rand((size_t)d, -0.5, 0.5), *w = host_rand(nw, -1, 1), *dw = host_rand(nw, -1, 1);
    float *y = host_zero(nx * 4), *dx = host_zero(nx * 4), *saved = host_zero((size_t)rows * 8);
    float *dg = host_zero((size_t)d * 4), *db = host_zero((size_t)d * 4), *ids = host_zero((size_t)rows * 4);
    for (int r = 0; r < rows; r++)
        ids[r] = (float)((int)(frand(0, 1) * (float)vocab) % vocab);
    float *gx = up(x, nx * 4), *gdy = up(dy, nx * 4), *gg = affine ? up(g, (size_t)d * 4) : NULL;
    float *gb = affine ? up(b, (size_t)d * 4) : NULL, *gy = up(NULL, nx * 4), *gdx = up(NULL, nx * 4);
    float *gsaved = up(NULL, (size_t)rows * 8), *gdg = up(NULL, (size_t)d * 4);
    float *gdb = up(NULL, (size_t)d * 4), *gdg2 = up(NULL, (size_t)d * 4);
    const float *cg = affine ? g : NULL, *cb = affine ? b : NULL;
    cpu->ops->layernorm_fwd(cpu, rows, d, x, cg, cb, 1e-5f, y, saved);
    gpu->ops->layernorm_fwd(gpu, rows, d, gx, gg, gb, 1e-5f, gy, gsaved);
    cmp("layernorm_fwd y", shape, gy, y, nx, 1e-6, 0);
    cmp("layernorm_fwd saved", shape, gsaved, saved, 2 * (size_t)rows, 1e-6, 0);
    /* The backward from the CPU's saved statistics: measured alone. */
    gpu->ops->to_device(gpu, gsaved, saved, (size_t)rows * 8);
    cpu->ops->layernorm_bwd(cpu, rows, d, x, cg, saved, dy, dx, dg, db);
    gpu->ops->layernorm_bwd(gpu, rows, d, gx, gg, gsaved, gdy, gdx, gdg, gdb);
    cmp("layernorm_bwd dx", shape, gdx, dx, nx, 1e-5, 0);
    cmp("layernorm_bwd dgamma", shape, gdg, dg, (size_t)d, 1e-6, 0);
    cmp("layernorm_bwd dbeta", shape, gdb, db, (size_t)d, 1e-6, 0);
    gpu->ops->layernorm_bwd(gpu, rows, d, gx, gg, gsaved, gdy, gy, gdg2, NULL);
    same_bits("layernorm_bwd reproducible", shape, gdg, gdg2, (size_t)d * 4);
    same_bits("layernorm_bwd dx without dbeta", shape, gdx, gy, nx * 4);

    float *gw = up(w, nw * 4), *gdw = up(dw, nw * 4), *gids = up(ids, (size_t)rows * 4);
    cpu->ops->embedding_fwd(cpu, rows, d, ids, w, y);
    gpu->ops->embedding_fwd(gpu, rows, d, gids, gw, gy);
    cmp_exact("embedding_fwd", shape, gy, y, nx * 4);
    cpu->ops->embedding_bwd(cpu, rows, d, vocab, ids, dy, dw);   /* adds to dw */
    gpu->ops->embedding_bwd(gpu, rows, d, vocab, gids, gdy, gdw);
    cmp_exact("embedding_bwd (accumulates)", shape, gdw, dw, nw * 4);

    /* bcast_add over (4, nx/4) with b the first nx/4 of dy; in place too. */
    size_t m = nx / 4;
    cpu->ops->bcast_add_fwd(cpu, 4, m, x, dy, y);
    gpu->ops->bcast_add_fwd(gpu, 4, m, gx, gdy, gy);
    cmp_exact("bcast_add_fwd", shape, gy, y, 4 * m * 4);
    gpu->ops->bcast_add_fwd(gpu, 4, m, gx, gdy, gx);
    same_bits("bcast_add_fwd in place", shape, gx, gy, 4 * m * 4);
    cpu->ops->bcast_add_bwd(cpu, 4, m, dy, y);
    gpu->ops->bcast_add_bwd(gpu, 4, m, gdy, gy);
    cmp_exact("bcast_add_bwd", shape, gy, y, m * 4);

    void *gbufs[] = {gx, gdy, gg, gb, gy, gdx, gsaved, gdg, gdb, gdg2, gw, gdw, gids};
    for (size_t i = 0; i < sizeof gbufs / sizeof gbufs[0]; i++)
        if (gbufs[i])
            gpu->ops->free(gpu, gbufs[i]);
    free(x), free(dy), free(g), free(b), free(w), free(dw), free(y), free(dx), free(saved);
    free(dg), free(db), free(ids);
}

/* embedding_bwd against the CPU bit for bit at a GPT-2 vocabulary: each
 * dw element must be the CPU's sum in row order (the GPU sorts rows by id,
 * then sums each id's rows in row order). ids: 0 random over the
 * vocabulary, 1 a few ids repeated many times (the first and last id among
 * them), 2 one id on every row. It accumulates twice (a tied output
 * layer's part, then the input's, then again), and a second run gives the
 * same bits. */
static void check_embedding(int rows, int d, int vocab, int ids_kind)
{
    if (!have((const void *)gpu->ops->embedding_bwd, "embedding_bwd"))
        return;
    static const char *kinds[] = {"random ids", "7 ids repeated", "one id"};
    char shape[64];
    snprintf(shape, sizeof shape, "rows%d d%d vocab%d %s", rows, d, vocab, kinds[ids_kind]);
    size_t nx = (size_t)rows * d, nw = (size_t)vocab * d;
    float *dy = host_rand(nx, -1, 1), *dw = host_rand(nw, -1, 1), *ids = host_zero((size_t)rows * 4);
    const int few[] = {0, vocab - 1, 13 % vocab, 50 % vocab, vocab / 2, 7 % vocab, vocab / 3};
    for (int r = 0; r < rows; r++) {
        int id = (int)(frand(0, 1) * (float)vocab) % vocab;
        if (ids_kind == 1)
            id = few[(int)(frand(0, 1) * 7.0f) % 7];
        else if (ids_kind == 2)
            id = vocab / 2;
        ids[r] = (float)id;
    }
    float *gdy = up(dy, nx * 4), *gids = up(ids, (size_t)rows * 4);
    float *gdw = up(dw, nw * 4), *gdw2 = up(dw, nw * 4);
    for (int pass = 0; pass < 2; pass++) {
        cpu->ops->embedding_bwd(cpu, rows, d, vocab, ids, dy, dw);
        gpu->ops->embedding_bwd(gpu, rows, d, vocab, gids, gdy, gdw);
        cmp_exact(pass ? "embedding_bwd again" : "embedding_bwd", shape, gdw, dw, nw * 4);
    }
    for (int pass = 0; pass < 2; pass++)
        gpu->ops->embedding_bwd(gpu, rows, d, vocab, gids, gdy, gdw2);
    same_bits("embedding_bwd reproducible", shape, gdw, gdw2, nw * 4);
    gpu->ops->free(gpu, gdy), gpu->ops->free(gpu, gids);
    gpu->ops->free(gpu, gdw), gpu->ops->free(gpu, gdw2);
    free(dy), free(dw), free(ids);
}

/* --clip-grad on the device: sumsq_dev gives sumsq's bits (and with acc the
 * parts' sum in the order the host adds them), clip_scale the host's
 * coefficient (grads.c: max_norm / ((float)norm + 1e-6f)) applied by the
 * CPU's scale, bit for bit; above the limit nothing changes. */
static void check_clip(size_t n)
{
    if (!have((const void *)gpu->ops->sumsq_dev, "sumsq_dev") ||
        !have((const void *)gpu->ops->clip_scale, "clip_scale"))
        return;
    char shape[64];
    snprintf(shape, sizeof shape, "n%zu", n);
    float *x = host_rand(n, -2, 2), *y = host_zero(n * 4);
    float *gx = up(x, n * 4);
    double *gsq = up(NULL, 2 * sizeof(double)), sq[2];
    size_t half = n / 2;
    gpu->ops->sumsq_dev(gpu, gx, n, gsq, 0);
    double want = gpu->ops->sumsq(gpu, gx, n);
    gpu->ops->to_host(gpu, sq, gsq, sizeof(double));
    gpu->ops->sync(gpu);
    report("sumsq_dev = sumsq", shape, memcmp(&sq[0], &want, sizeof want) ? INFINITY : 0, 0, 0);
    gpu->ops->sumsq_dev(gpu, gx, half, gsq + 1, 0);
    gpu->ops->sumsq_dev(gpu, gx + half, n - half, gsq + 1, 1);
    double parts = gpu->ops->sumsq(gpu, gx, half);
    parts = parts + gpu->ops->sumsq(gpu, gx + half, n - half);
    gpu->ops->to_host(gpu, sq, gsq, 2 * sizeof(double));
    gpu->ops->sync(gpu);
    report("sumsq_dev acc", shape, memcmp(&sq[1], &parts, sizeof parts) ? INFINITY : 0, 0, 0);
    const float limits[] = {(float)sqrt(want) * 0.37f, (float)sqrt(want) * 2.0f};
    for (int k = 0; k < 2; k++) {
        char s2[96];
        snprintf(s2, sizeof s2, "%s %s", shape, k ? "above norm" : "below norm");
        memcpy(y, x, n * 4);
        float coef = limits[k] / ((float)sqrt(want) + 1e-6f);
        if (coef < 1.0f)
            cpu->ops->scale(cpu, y, coef, n);
        gpu->ops->to_device(gpu, gx, x, n * 4);
        gpu->ops->clip_scale(gpu, gx, n, gsq, limits[k]);
        cmp_exact("clip_scale", s2, gx, y, n * 4);
        if (k == 1)
            cmp_exact("clip_scale no-op", s2, gx, x, n * 4);
    }
    gpu->ops->free(gpu, gx), gpu->ops->free(gpu, gsq);
    free(x), free(y);
}

/* ------------------------------------------------------------ optimizers */

/* Causal self-attention forward and backward against the CPU backend: the
 * straightforward kernels (T <= 128, or heads wider than 64) and the
 * flash-style ones (longer T), partial tiles, head sizes 5 to 80; dqkv
 * overwritten (NaN beforehand), reproducible bit for bit. Sums of up to
 * T*hd products in other orders: 1e-5. */
static void check_attn(int n, int T, int C, int nh)
{
    if (!have((const void *)gpu->ops->attn_fwd, "attn_fwd") ||
        !have((const void *)gpu->ops->attn_bwd, "attn_bwd"))
        return;
    char shape[48];
    snprintf(shape, sizeof shape, "n%d T%d C%d heads%d", n, T, C, nh);
    size_t nq = (size_t)n * T * 3 * C, ny = (size_t)n * T * C, nl = (size_t)n * nh * T;
    float *qkv = host_rand(nq, -1.5f, 1.5f), *dy = host_rand(ny, -1, 1);
    float *y = host_zero(ny * 4), *lse = host_zero(nl * 4), *dqkv = host_zero(nq * 4);
    float *cws = host_zero(cpu->ops->attn_workspace(cpu, n, T, C, nh) * 4);
    cpu->ops->attn_fwd(cpu, n, T, C, nh, qkv, y, lse, cws);
    cpu->ops->attn_bwd(cpu, n, T, C, nh, qkv, y, lse, dy, dqkv, cws);
    size_t gw = gpu->ops->attn_workspace(gpu, n, T, C, nh);
    float *gqkv = up(qkv, nq * 4), *gdy = up(dy, ny * 4), *gy = up(NULL, ny * 4);
    float *glse = up(NULL, nl * 4), *gd = up(NULL, nq * 4), *gd2 = up(NULL, nq * 4);
    float *gws = up(NULL, gw * 4);
    gpu->ops->fill(gpu, gd, NAN, nq);
    gpu->ops->attn_fwd(gpu, n, T, C, nh, gqkv, gy, glse, gws);
    gpu->ops->attn_bwd(gpu, n, T, C, nh, gqkv, gy, glse, gdy, gd, gws);
    cmp("attn_fwd y", shape, gy, y, ny, 1e-5, 0);
    cmp("attn_fwd lse", shape, glse, lse, nl, 1e-5, 0);
    cmp("attn_bwd dqkv", shape, gd, dqkv, nq, 1e-5, 0);
    gpu->ops->fill(gpu, gd2, NAN, nq);
    gpu->ops->attn_bwd(gpu, n, T, C, nh, gqkv, gy, glse, gdy, gd2, gws);
    same_bits("attn_bwd reproducible", shape, gd, gd2, nq * 4);
    gpu->ops->free(gpu, gqkv), gpu->ops->free(gpu, gdy), gpu->ops->free(gpu, gy);
    gpu->ops->free(gpu, glse), gpu->ops->free(gpu, gd), gpu->ops->free(gpu, gd2);
    gpu->ops->free(gpu, gws);
    free(qkv), free(dy), free(y), free(lse), free(dqkv), free(cws);
}

static void check_sgd(size_t n, cdl_sgd_hparams hp, const char *name)
{
    float *p = host_rand(n, -1, 1), *buf = host_zero(n * 4);
    float *gp = up(p, n * 4), *gbuf = up(NULL, n * 4), *gg = up(NULL, n * 4);
    for (int step = 0; step < 3; step++) {
        float *g = host_rand(n, -1, 1);
        gpu->ops->to_device(gpu, gg, g, n * 4);
        hp.first_step = step == 0;
        hp.lr *= 0.9f;
        cpu->ops->sgd_step(cpu, n, p, g, hp.momentum != 0 ? buf : NULL, &hp);
        gpu->ops->sgd_step(gpu, n, gp, gg, hp.momentum != 0 ? gbuf : NULL, &hp);
        free(g);
    }
    /* FMA on the GPU: an ulp per operation. */
    cmp(name, "3 steps", gp, p, n, 1e-6, 0);
    if (hp.momentum != 0)
        cmp(name, "momentum_buffer", gbuf, buf, n, 1e-6, 0);
    gpu->ops->free(gpu, gp), gpu->ops->free(gpu, gbuf), gpu->ops->free(gpu, gg);
    free(p), free(buf);
}

static void check_adam(size_t n, int decoupled)
{
    const char *name = decoupled ? "adamw_step" : "adam_step";
    float *p = host_rand(n, -1, 1), *m = host_zero(n * 4), *v = host_zero(n * 4);
    float *gp = up(p, n * 4), *gm = up(NULL, n * 4), *gv = up(NULL, n * 4), *gg = up(NULL, n * 4);
    for (long step = 1; step <= 3; step++) {
        float *g = host_rand(n, -1, 1);
        gpu->ops->to_device(gpu, gg, g, n * 4);
        cdl_adam_hparams hp = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                               .weight_decay = decoupled ? 1e-2f : 1e-4f,
                               .decoupled = decoupled, .step = step};
        cpu->ops->adam_step(cpu, n, p, g, m, v, &hp);
        gpu->ops->adam_step(gpu, n, gp, gg, gm, gv, &hp);
        free(g);
    }
    cmp(name, "3 steps", gp, p, n, 1e-6, 0);
    cmp(name, "exp_avg", gm, m, n, 1e-6, 0);
    cmp(name, "exp_avg_sq", gv, v, n, 1e-6, 0);
    gpu->ops->free(gpu, gp), gpu->ops->free(gpu, gm), gpu->ops->free(gpu, gv);
    gpu->ops->free(gpu, gg);
    free(p), free(m), free(v);
}

/* --clip-grad's hold (hold_updates): after a squared norm whose float
 * norm is not finite (NaN here: a NaN gradient element), adam_step and
 * sgd_step with momentum change neither p nor their state, and stay held
 * after a finite norm behind it; cleared, adam_step is the CPU's again. */
static void check_hold(size_t n)
{
    if (!have((const void *)gpu->ops->hold_updates, "hold_updates") ||
        !have((const void *)gpu->ops->sumsq_dev, "sumsq_dev"))
        return;
    char shape[64];
    snprintf(shape, sizeof shape, "n%zu", n);
    float *p = host_rand(n, -1, 1), *m = host_rand(n, -1, 1), *v = host_rand(n, 0, 1);
    float *g = host_rand(n, -1, 1), *bad = host_rand(n, -1, 1);
    bad[n / 2] = NAN;
    float *gp = up(p, n * 4), *gm = up(m, n * 4), *gv = up(v, n * 4), *gg = up(bad, n * 4);
    double *gsq = up(NULL, sizeof(double));
    cdl_adam_hparams hp = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                           .weight_decay = 1e-2f, .decoupled = 1, .step = 2};
    cdl_sgd_hparams sp = {.lr = 0.05f, .momentum = 0.9f, .weight_decay = 5e-4f};
    gpu->ops->hold_updates(gpu, NULL);
    gpu->ops->sumsq_dev(gpu, gg, n, gsq, 0);   /* NaN */
    gpu->ops->hold_updates(gpu, gsq);
    gpu->ops->adam_step(gpu, n, gp, gg, gm, gv, &hp);
    gpu->ops->sgd_step(gpu, n, gp, gg, gm, &sp);
    gpu->ops->to_device(gpu, gg, g, n * 4);
    gpu->ops->sumsq_dev(gpu, gg, n, gsq, 0);   /* finite: the hold stays */
    gpu->ops->hold_updates(gpu, gsq);
    gpu->ops->adam_step(gpu, n, gp, gg, gm, gv, &hp);
    cmp_exact("hold_updates p", shape, gp, p, n * 4);
    cmp_exact("hold_updates exp_avg", shape, gm, m, n * 4);
    cmp_exact("hold_updates exp_avg_sq", shape, gv, v, n * 4);
    gpu->ops->hold_updates(gpu, NULL);
    gpu->ops->adam_step(gpu, n, gp, gg, gm, gv, &hp);
    cpu->ops->adam_step(cpu, n, p, g, m, v, &hp);
    cmp("hold_updates cleared", shape, gp, p, n, 1e-6, 0);
    gpu->ops->free(gpu, gp), gpu->ops->free(gpu, gm), gpu->ops->free(gpu, gv);
    gpu->ops->free(gpu, gg), gpu->ops->free(gpu, gsq);
    free(p), free(m), free(v), free(g), free(bad);
}

/* -------------------------------------------------------------- graphs */

/* A small training step: x (n,in) -> linear -> relu -> dropout -> linear
 * -> xent -> backward -> SGD, with the input copied in from pinned memory and
 * the loss copied out, the learning rate and dropout seed changing each
 * step. Run eagerly, and as warm-up + capture + replays; the weights and
 * losses must be the same bits. */
enum { GN = 64, GIN = 50, GH = 40, GOUT = 10 };

typedef struct mini {
    float *x, *w1, *b1, *h, *hd, *w2, *b2, *z, *dz, *dh, *dw1, *db1, *dw2, *db2, *loss, *buf;
    uint8_t *mask;
    int32_t *y, *pred;
    float *params;   /* w1 b1 w2 b2, flat */
    float *grads;
    size_t np;
} mini;

static void mini_make(mini *m, const float *init)
{
    size_t off[5] = {0, (size_t)GH * GIN, 0, 0, 0};
    off[2] = off[1] + GH;
    off[3] = off[2] + (size_t)GOUT * GH;
    off[4] = off[3] + GOUT;
    m->np = off[4];
    m->params = up(init, m->np * 4);
    m->grads = up(NULL, m->np * 4);
    m->buf = up(NULL, m->np * 4);
    m->w1 = m->params, m->b1 = m->params + off[1], m->w2 = m->params + off[2];
    m->b2 = m->params + off[3];
    m->dw1 = m->grads, m->db1 = m->grads + off[1], m->dw2 = m->grads + off[2];
    m->db2 = m->grads + off[3];
    m->x = up(NULL, (size_t)GN * GIN * 4);
    m->h = up(NULL, (size_t)GN * GH * 4);
    m->hd = up(NULL, (size_t)GN * GH * 4);
    m->dh = up(NULL, (size_t)GN * GH * 4);
    m->z = up(NULL, (size_t)GN * GOUT * 4);
    m->dz = up(NULL, (size_t)GN * GOUT * 4);
    m->loss = up(NULL, GN * 4);
    m->mask = up(NULL, (size_t)GN * GH);
    m->y = up(NULL, GN * 4);
    m->pred = up(NULL, GN * 4);
}

static void mini_free(mini *m)
{
    void *bufs[] = {m->params, m->grads, m->buf, m->x, m->h, m->hd, m->dh, m->z, m->dz,
                    m->loss, m->mask, m->y, m->pred};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        gpu->ops->free(gpu, bufs[i]);
}

static void mini_step(mini *m, const float *x_pinned, const int32_t *y_pinned, float *loss_pinned,
                      int step)
{
    cdl_backend *be = gpu;
    be->ops->to_device(be, m->x, x_pinned, (size_t)GN * GIN * 4);
    be->ops->to_device(be, m->y, y_pinned, GN * 4);
    be->ops->linear_fwd(be, GN, GIN, GH, m->x, m->w1, m->b1, m->h, NULL);
    be->ops->relu_fwd(be, (size_t)GN * GH, m->h, m->h);
    be->ops->dropout_fwd(be, (size_t)GN * GH, 0.2f, 1000 + (uint64_t)step, m->h, m->hd, m->mask);
    be->ops->linear_fwd(be, GN, GH, GOUT, m->hd, m->w2, m->b2, m->z, NULL);
    be->ops->xent_fwd_bwd(be, GN, GOUT, m->z, m->y, 1.0f / GN, m->dz, m->loss, m->pred);
    be->ops->linear_bwd(be, GN, GH, GOUT, m->hd, m->w2, m->dz, m->dh, m->dw2, m->db2, NULL);
    be->ops->dropout_bwd(be, (size_t)GN * GH, 0.2f, m->mask, m->dh, m->dh);
    be->ops->relu_bwd(be, (size_t)GN * GH, m->h, m->dh, m->dh);
    be->ops->linear_bwd(be, GN, GIN, GH, m->x, m->w1, m->dh, NULL, m->dw1, m->db1, NULL);
    cdl_sgd_hparams hp = {.lr = 0.1f / (float)(step + 1), .momentum = 0.9f,
                          .weight_decay = 1e-4f, .first_step = step == 0};
    be->ops->sgd_step(be, m->np, m->params, m->grads, m->buf, &hp);
    be->ops->to_host(be, loss_pinned, m->loss, GN * 4);
}

static void check_graph(void)
{
    enum { STEPS = 6 };
    size_t np = (size_t)GH * GIN + GH + (size_t)GOUT * GH + GOUT;
    float *init = host_rand(np, -0.1f, 0.1f);
    float *xs = host_rand((size_t)STEPS * GN * GIN, -1, 1);
    int32_t *ys = host_zero((size_t)STEPS * GN * 4);
    for (size_t i = 0; i < (size_t)STEPS * GN; i++)
        ys[i] = (int32_t)(i * 7 % GOUT);
    float *xp = cdl_backend_host_alloc(gpu, (size_t)GN * GIN * 4);
    int32_t *yp = cdl_backend_host_alloc(gpu, GN * 4);
    float *lp = cdl_backend_host_alloc(gpu, GN * 4);
    float *loss_eager = host_zero((size_t)STEPS * GN * 4);
    float *loss_graph = host_zero((size_t)STEPS * GN * 4);
    if (!xp || !yp || !lp) {
        report("graph: pinned buffers", cdl_last_error(), INFINITY, 0, 0);
        return;
    }
    mini a, b;
    mini_make(&a, init);
    mini_make(&b, init);
    int modes_ok = 1;
    for (int s = 0; s < STEPS; s++) {
        memcpy(xp, xs + (size_t)s * GN * GIN, (size_t)GN * GIN * 4);
        memcpy(yp, ys + (size_t)s * GN, GN * 4);
        mini_step(&a, xp, yp, lp, s);
        if (gpu->ops->sync(gpu) != 0)
            modes_ok = 0;
        memcpy(loss_eager + (size_t)s * GN, lp, GN * 4);
        /* Step 0 eager (warm-up), 1 captured, 2.. replayed. */
        int mode = s == 0 ? -2 : cdl_backend_graph_begin(gpu, 1);
        modes_ok &= mode == (s == 0 ? -2 : s == 1 ? 0 : 1);
        mini_step(&b, xp, yp, lp, s);
        if (s > 0 && cdl_backend_graph_end(gpu) != 0)
            modes_ok = 0;
        if (gpu->ops->sync(gpu) != 0)
            modes_ok = 0;
        memcpy(loss_graph + (size_t)s * GN, lp, GN * 4);
    }
    if (!modes_ok)
        printf("     graph: %s\n", cdl_last_error());
    report("graph: begin/end modes", "capture once, replay 4", modes_ok ? 0 : INFINITY, 0, 0);
    /* The same kernels in the same order: equal up to cuBLAS choosing other
     * kernels under capture (it should not). */
    report("graph: losses", "6 steps", norm_err(loss_graph, loss_eager, (size_t)STEPS * GN), 1e-6,
           0);
    float *wa = down(a.params, np * 4), *wb = down(b.params, np * 4);
    float *ma = down(a.buf, np * 4), *mb = down(b.buf, np * 4);
    report("graph: weights", "6 steps", norm_err(wb, wa, np), 1e-6, 0);
    report("graph: momentum", "6 steps", norm_err(mb, ma, np), 1e-6, 0);
    printf("     graph and eager weights are %s\n",
           memcmp(wa, wb, np * 4) ? "close but not bitwise equal" : "bitwise equal");
    free(wa), free(wb), free(ma), free(mb);

    /* A step that differs from the capture is refused, not run. */
    cdl_backend_graph_begin(gpu, 1);
    gpu->ops->relu_fwd(gpu, 10, a.h, a.h);
    int rc = cdl_backend_graph_end(gpu);
    int synced = gpu->ops->sync(gpu);
    report("graph: divergent step refused", "", rc == -1 && synced == -1 ? 0 : INFINITY, 0, 0);

    cdl_backend_host_free(gpu, xp);
    cdl_backend_host_free(gpu, yp);
    cdl_backend_host_free(gpu, lp);
    mini_free(&a);
    mini_free(&b);
    free(init), free(xs), free(ys), free(loss_eager), free(loss_graph);
}

/* The ops of residual networks inside a CUDA graph: a block x -> BN+ReLU
 * -> GELU -> + x -> concat with x -> global average pool -> label-smoothing
 * xent, backward through all of it (accumulate at the fan-out of x), BN
 * running statistics; run eagerly on one set of buffers and as warm-up,
 * capture and replays on another. Every op must be capturable (no
 * allocation, no host wait) and the replayed steps must give the eager
 * bits. */
enum { RN = 8, RC = 4, RHW = 16, RCLS = 2 * RC };

typedef struct rblock {
    float *x, *sum, *sq, *saved, *h, *g, *r, *cat, *pool, *dpool, *dcat, *dr, *dg, *dh, *dx;
    float *gamma, *beta, *dgamma, *dbeta, *rm, *rv, *nbt, *loss;
    int32_t *labels, *pred;
} rblock;

static void rblock_make(rblock *b, const float *x, const int32_t *labels)
{
    size_t nx = (size_t)RN * RC * RHW, ncat = 2 * nx, C = RC;
    float ones[RC], zeros[RC];
    for (int i = 0; i < RC; i++)
        ones[i] = 1.0f, zeros[i] = 0.0f;
    b->x = up(x, nx * 4);
    b->sum = up(NULL, (C + 1) * 4), b->sq = up(NULL, C * 4), b->saved = up(NULL, (2 * C + 1) * 4);
    b->h = up(NULL, nx * 4), b->g = up(NULL, nx * 4), b->r = up(NULL, nx * 4);
    b->cat = up(NULL, ncat * 4), b->dcat = up(NULL, ncat * 4);
    b->pool = up(NULL, (size_t)RN * RCLS * 4), b->dpool = up(NULL, (size_t)RN * RCLS * 4);
    b->dr = up(NULL, nx * 4), b->dg = up(NULL, nx * 4), b->dh = up(NULL, nx * 4);
    b->dx = up(NULL, nx * 4);
    b->gamma = up(ones, C * 4), b->beta = up(zeros, C * 4), b->rv = up(ones, C * 4);
    b->dgamma = up(NULL, C * 4), b->dbeta = up(NULL, C * 4), b->rm = up(zeros, C * 4);
    b->nbt = up(zeros, 4), b->loss = up(NULL, RN * 4);
    b->labels = up(labels, RN * 4), b->pred = up(NULL, RN * 4);
}

static void rblock_free(rblock *b)
{
    void *bufs[] = {b->x, b->sum, b->sq, b->saved, b->h, b->g, b->r, b->cat, b->pool, b->dpool,
                    b->dcat, b->dr, b->dg, b->dh, b->dx, b->gamma, b->beta, b->dgamma, b->dbeta,
                    b->rm, b->rv, b->nbt, b->loss, b->labels, b->pred};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        gpu->ops->free(gpu, bufs[i]);
}

static void rblock_step(rblock *b, const float *x_pinned, float *loss_pinned)
{
    cdl_backend *be = gpu;
    const cdl_backend_ops *o = be->ops;
    size_t nx = (size_t)RN * RC * RHW;
    o->to_device(be, b->x, x_pinned, nx * 4);
    o->bn_sum(be, RN, RC, RHW, b->x, b->sum);
    o->bn_sqdev(be, RN, RC, RHW, b->x, b->sum, b->sq);
    o->bn_apply(be, RN, RC, RHW, b->x, b->sum, b->sq, 1e-5f, b->gamma, b->beta, 1, b->h, b->saved);
    o->bn_running(be, RC, b->sum, b->sq, 0.1f, b->rm, b->rv, b->nbt);
    o->act_fwd(be, CDL_ACT_GELU, 0.0f, nx, b->h, b->g);
    o->add(be, nx, b->g, b->x, b->r);
    o->channel_copy(be, RN, RC, RHW, b->r, RC, 0, b->cat, 2 * RC, 0, 0);
    o->channel_copy(be, RN, RC, RHW, b->x, RC, 0, b->cat, 2 * RC, RC, 0);
    o->gap_fwd(be, RN, 2 * RC, RHW, b->cat, b->pool);
    o->xent_ls_fwd_bwd(be, RN, RCLS, b->pool, b->labels, 0.1f, 1.0f / RN, b->dpool, b->loss,
                       b->pred);
    o->gap_bwd(be, RN, 2 * RC, RHW, b->dpool, b->dcat);
    o->channel_copy(be, RN, RC, RHW, b->dcat, 2 * RC, 0, b->dr, RC, 0, 0);
    o->channel_copy(be, RN, RC, RHW, b->dcat, 2 * RC, RC, b->dx, RC, 0, 0);
    o->accumulate(be, nx, b->dr, b->dx);            /* the residual branch of x */
    o->act_bwd(be, CDL_ACT_GELU, 0.0f, nx, b->h, b->g, b->dr, b->dg);
    o->bn_bwd_sums(be, RN, RC, RHW, b->x, b->h, b->dg, b->saved, b->dgamma, b->dbeta);
    o->bn_bwd_apply(be, RN, RC, RHW, b->x, b->h, b->dg, b->saved, b->gamma, b->dbeta, b->dgamma,
                    b->dh);
    o->accumulate(be, nx, b->dh, b->dx);
    o->to_host(be, loss_pinned, b->loss, RN * 4);
}

static void check_graph_resnet_ops(void)
{
    if (!gpu->ops->bn_sum || !gpu->ops->xent_ls_fwd_bwd || !gpu->ops->channel_copy) {
        printf("skip graph of residual-network ops: the %s backend lacks some\n", gpu->ops->name);
        return;
    }
    enum { STEPS = 5 };
    size_t nx = (size_t)RN * RC * RHW;
    float *xs = host_rand(STEPS * nx, -2, 2);
    int32_t labels[RN];
    for (int i = 0; i < RN; i++)
        labels[i] = (int32_t)(i * 3 % RCLS);
    float *xp = cdl_backend_host_alloc(gpu, nx * 4), *lp = cdl_backend_host_alloc(gpu, RN * 4);
    if (!xp || !lp) {
        report("graph resnet ops: pinned buffers", cdl_last_error(), INFINITY, 0, 0);
        return;
    }
    float loss_eager[STEPS * RN], loss_graph[STEPS * RN];
    rblock a, b;
    rblock_make(&a, xs, labels);
    rblock_make(&b, xs, labels);
    int modes_ok = 1;
    for (int s = 0; s < STEPS; s++) {
        memcpy(xp, xs + (size_t)s * nx, nx * 4);
        rblock_step(&a, xp, lp);
        modes_ok &= gpu->ops->sync(gpu) == 0;
        memcpy(loss_eager + s * RN, lp, RN * 4);
        int mode = s == 0 ? -2 : cdl_backend_graph_begin(gpu, 2);
        modes_ok &= mode == (s == 0 ? -2 : s == 1 ? 0 : 1);
        rblock_step(&b, xp, lp);
        if (s > 0 && cdl_backend_graph_end(gpu) != 0)
            modes_ok = 0;
        modes_ok &= gpu->ops->sync(gpu) == 0;
        memcpy(loss_graph + s * RN, lp, RN * 4);
    }
    if (!modes_ok)
        printf("     graph resnet ops: %s\n", cdl_last_error());
    report("graph resnet ops: modes", "capture once, replay 3", modes_ok ? 0 : INFINITY, 0, 0);
    report("graph resnet ops: losses", "5 steps",
           memcmp(loss_eager, loss_graph, sizeof loss_eager) ? INFINITY : 0, 0, 0);
    same_bits("graph resnet ops: dx", "5 steps", a.dx, b.dx, nx * 4);
    same_bits("graph resnet ops: dgamma", "5 steps", a.dgamma, b.dgamma, RC * 4);
    same_bits("graph resnet ops: running_var", "5 steps", a.rv, b.rv, RC * 4);
    same_bits("graph resnet ops: num_batches_tracked", "5 steps", a.nbt, b.nbt, 4);
    cdl_backend_graph_reset(gpu);
    cdl_backend_host_free(gpu, xp);
    cdl_backend_host_free(gpu, lp);
    rblock_free(&a);
    rblock_free(&b);
    free(xs);
}

/* The backend under test, TF32 on or off. The CPU backend is tested with
 * another thread count than the reference's, so the harness checks
 * something there too (reductions split differently). */
static cdl_backend *open_backend(const char *name, int tf32)
{
    cdl_backend_params p;
    cdl_backend_params_from_env(&p);   /* CDL_LOG=cudnn: tests/fakegpu/ops.sh */
    p.tf32_conv = p.tf32_matmul = tf32;
    p.threads = cpu->threads > 1 ? 1 : 2;
    cdl_backend *be = cdl_backend_create_with(name, &p);
    if (!be)
        fprintf(stderr, "ops_vs_cpu: %s\n", cdl_last_error());
    return be;
}

/* Linear layers on more backends of the same GPU: bf16 products (shapes
 * padded to out % 8 == 0, n = 1), and the cuBLAS fallback of every
 * precision: CDL_CUBLASLT=0 (read at creation), and on the fake GPU its
 * cuBLASLt refusing (CDL_FAKE_CUBLASLT=heuristic: no algorithm; =matmul:
 * the matmul says NOT_SUPPORTED; =create: no handle; a real GPU ignores
 * the variable). */
static void check_linear_variants(const char *name)
{
    static const struct {
        const char *var, *value, *tag;
    } modes[] = {{NULL, NULL, ""},
                 {"CDL_CUBLASLT", "0", " lt=0"},
                 {"CDL_FAKE_CUBLASLT", "heuristic", " lt:none"},
                 {"CDL_FAKE_CUBLASLT", "matmul", " lt:refuse"},
                 {"CDL_FAKE_CUBLASLT", "create", " lt:nohandle"}};
    const int lins[][3] = {{512, 400, 120}, {64, 64, 96}, {3, 7, 5}, {1, 1000, 33}, {37, 256, 1}};
    cdl_backend *saved = gpu;
    for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++)
        for (int bf16 = 0; bf16 < 2; bf16++) {
            if (!m && !bf16)
                continue;   /* the strict FP32 backend did these */
            if (modes[m].var)
                setenv(modes[m].var, modes[m].value, 1);
            cdl_backend_params p;
            cdl_backend_params_from_env(&p);
            p.tf32_conv = p.tf32_matmul = 0;
            p.precision = bf16 ? CDL_PRECISION_BF16 : CDL_PRECISION_FP32;
            gpu = cdl_backend_create_with(name, &p);
            if (modes[m].var)
                unsetenv(modes[m].var);
            if (!gpu) {
                printf("FAIL %s backend%s%s: %s\n", name, bf16 ? " bf16" : "", modes[m].tag,
                       cdl_last_error());
                failures++, checks++;
                continue;
            }
            for (size_t i = 0; i < sizeof lins / sizeof lins[0]; i++)
                check_linear_on(modes[m].tag, lins[i][0], lins[i][1], lins[i][2], 0, bf16);
            if (gpu->ops->sync(gpu) != 0) {
                printf("FAIL backend error%s%s: %s\n", bf16 ? " bf16" : "", modes[m].tag,
                       cdl_last_error());
                failures++, checks++;
            }
            cdl_backend_destroy(gpu);
        }
    gpu = saved;
}

int main(int argc, char **argv)
{
    rng_seed(&rng, 42);
    const char *name = argc > 1 ? argv[1] : "cuda";
    setvbuf(stdout, NULL, _IOLBF, 0);   /* whole lines between the backend's logs */
    if (argc > 2 || (strcmp(name, "cuda") && strcmp(name, "cpu"))) {
        fprintf(stderr, "usage: ops_vs_cpu [cuda|cpu]\n");
        return 2;
    }
    cpu = cdl_backend_cpu_create(0);
    if (!cpu) {
        fprintf(stderr, "ops_vs_cpu: CPU backend: %s\n", cdl_last_error());
        return 1;
    }
    gpu = open_backend(name, 0);
    if (!gpu) {
        cdl_backend_destroy(cpu);
        return 1;
    }
    printf("%s backend (%d threads) vs CPU backend (%d threads), strict FP32 then TF32\n",
           gpu->ops->name, gpu->threads, cpu->threads);

    const cdl_conv2d_desc convs[] = {
        conv_desc(512, 3, 32, 32, 6, 5, 1, 0),   /* the seed CNN's conv1 */
        conv_desc(512, 6, 14, 14, 16, 5, 1, 0),  /* and conv2 */
        conv_desc(64, 1, 28, 28, 6, 5, 1, 2),    /* LeNet-5 on Fashion-MNIST */
        conv_desc(8, 3, 17, 19, 7, 3, 2, 1),
        conv_desc(4, 16, 8, 8, 32, 1, 1, 0),
        conv_desc(1, 2, 5, 5, 3, 5, 1, 0),
    };
    for (size_t i = 0; i < sizeof convs / sizeof convs[0]; i++)
        check_conv(convs[i], 0);
    /* Rectangular kernels, per-axis stride and padding, dilation. */
    const cdl_conv2d_desc shaped[] = {
        conv_desc_full(8, 5, 13, 11, 6, 3, 1, 1, 1, 1, 0, 1, 1, 1),   /* 3x1 */
        conv_desc_full(8, 5, 13, 11, 6, 1, 5, 2, 1, 0, 2, 1, 1, 1),   /* 1x5, stride 2x1 */
        conv_desc_full(4, 6, 16, 16, 8, 3, 3, 1, 1, 2, 2, 2, 2, 1),   /* dilation 2 */
        conv_desc_full(4, 6, 15, 17, 4, 3, 2, 2, 1, 3, 1, 3, 1, 1),   /* dilation 3x1 */
    };
    for (size_t i = 0; i < sizeof shaped / sizeof shaped[0]; i++)
        check_conv(shaped[i], 0);
    /* Grouped and depthwise, against the CPU backend and against nn.Conv2d's
     * definition in double (naive_conv). */
    const cdl_conv2d_desc grouped[] = {
        conv_desc_full(4, 8, 9, 9, 12, 3, 3, 1, 1, 1, 1, 1, 1, 4),    /* 4 groups */
        conv_desc_full(4, 16, 10, 10, 16, 3, 3, 2, 2, 1, 1, 1, 1, 16),/* depthwise, stride 2 */
        conv_desc_full(2, 6, 11, 8, 12, 5, 3, 1, 1, 2, 1, 2, 1, 3),   /* groups, 5x3, dilation */
        conv_desc_full(2, 32, 8, 8, 64, 3, 3, 1, 1, 1, 1, 1, 1, 32),  /* depthwise multiplier 2 */
    };
    for (conv_reference_naive = 0; conv_reference_naive < 2; conv_reference_naive++)
        for (size_t i = 0; i < sizeof grouped / sizeof grouped[0]; i++)
            check_conv(grouped[i], 0);
    conv_reference_naive = 0;
    const int lins[][3] = {{512, 400, 120}, {512, 120, 84}, {512, 84, 10}, {3, 7, 5},
                           {1, 1000, 33}, {37, 256, 1}};
    for (size_t i = 0; i < sizeof lins / sizeof lins[0]; i++)
        check_linear(lins[i][0], lins[i][1], lins[i][2], 0);
    check_pool(512, 6, 28, 28, 2, 2, 0);
    check_pool(3, 4, 9, 7, 3, 2, 1);
    check_pool(2, 3, 8, 8, 3, 1, 1);
    check_eltwise(1000003);
    check_eltwise(17);
    check_xent(512, 10, 0, 0.0f);
    check_xent(37, 1000, 0, 0.0f);
    check_xent(512, 10, 1, 0.1f);
    check_xent(37, 1000, 1, 0.3f);
    check_xent(64, 10, 1, 0.0f);
    check_act(100003);
    check_act(17);
    check_join(8, 16, 8, 8);
    check_join(3, 5, 7, 9);
    check_bn(16, 16, 8, 8, 0, 1);    /* resnet20's first stage, a small batch */
    check_bn(16, 16, 8, 8, 1, 1);    /* fused ReLU */
    check_bn(5, 7, 3, 5, 1, 0);      /* odd shapes, affine=False */
    check_bn(64, 3, 1, 1, 0, 1);     /* BatchNorm1d: hw = 1 */
    check_bn(37, 3, 15, 15, 1, 1);   /* several image groups of unequal size (chan.cu) */
    check_bn(600, 2, 4, 4, 0, 1);    /* 4x4 planes: two groups of 300 images */
    check_attn(2, 40, 48, 3);      /* straightforward kernels, head size 16 */
    check_attn(1, 129, 160, 2);    /* long T, head size 80: straightforward */
    check_attn(2, 150, 64, 2);     /* flash-style, head size 32, partial tiles */
    check_attn(1, 140, 128, 2);    /* flash-style, head size 64 */
    check_attn(1, 130, 20, 4);     /* flash-style, head size 5 */
    check_seq(256, 384, 65, 1);      /* a char GPT's rows (n*T), n_embd, vocab */
    check_seq(37, 100, 1000, 0);     /* odd shapes, no gamma/beta */
    check_seq(5, 1, 3, 1);           /* d = 1: y = beta */
    check_embedding(1000, 24, 50257, 0);   /* GPT-2's vocabulary, small T and width */
    check_embedding(3000, 130, 50257, 1);  /* repeated ids, partial column blocks */
    check_embedding(600, 7, 50257, 2);     /* one id on every row */
    check_embedding(300, 16, 1, 2);        /* vocabulary of one */
    check_clip(100003);
    check_clip(3);
    check_sgd(100003, (cdl_sgd_hparams){.lr = 0.1f}, "sgd_step");
    check_sgd(100003, (cdl_sgd_hparams){.lr = 0.05f, .momentum = 0.9f, .weight_decay = 5e-4f},
              "sgd_step momentum");
    check_sgd(100003, (cdl_sgd_hparams){.lr = 0.05f, .momentum = 0.9f, .dampening = 0.1f,
                                        .nesterov = 1, .weight_decay = 1e-2f},
              "sgd_step nesterov");
    check_adam(100003, 0);
    check_adam(100003, 1);
    check_hold(100003);
    if (gpu->ops->graph_begin) {
        check_graph();
        check_graph_resnet_ops();
    }
    else
        printf("skip graph checks: the %s backend has no whole-step graphs\n", gpu->ops->name);

    int rc = gpu->ops->sync(gpu);
    if (rc != 0)
        printf("FAIL backend error: %s\n", cdl_last_error());
    cdl_backend *strict = gpu;
    gpu = open_backend(name, 1);
    if (!gpu) {
        cdl_backend_destroy(strict);
        cdl_backend_destroy(cpu);
        return 1;
    }
    check_conv(convs[0], 1);
    check_conv(convs[1], 1);
    check_linear(512, 400, 120, 1);
    check_shared_workspace();
    if (!strcmp(name, "cuda"))
        check_linear_variants(name);

    int rc_tf32 = gpu->ops->sync(gpu);
    if (rc_tf32 != 0)
        printf("FAIL backend error: %s\n", cdl_last_error());
    rc |= rc_tf32;
    printf("ops_vs_cpu: %d of %d checks passed; worst strict-FP32 error %.2e\n", checks - failures,
           checks, worst_strict);
    cdl_backend_destroy(gpu);
    cdl_backend_destroy(strict);
    cdl_backend_destroy(cpu);
    return failures || rc ? 1 : 0;
}
