/* One CPU op at a time, through the backend's ops table: the cdl column of
 * bench/run_cpu_ops.sh (bench/torch_ops.py is PyTorch's). Each argument is
 * one case; each prints a line
 *   OP SHAPE fwd_ms bwd_ms
 * the fastest of --runs calls after 2 warm-up calls ("-" where an op has
 * no backward): on a shared machine the minimum is what the code costs,
 * the median what the neighbours left of the machine. Cases (all NCHW, float32):
 *   dw:N,C,H,W,K,S,P         depthwise conv, C->C, KxK, stride S, pad P,
 *                            bias; bwd = dx, dW and db
 *   conv:N,C,H,W,OC,K,S,P    dense conv with bias; bwd = dx, dW and db
 *   bn:N,C,H,W               BatchNorm2d training, fwd (statistics and y)
 *                            and bwd (dgamma, dbeta, dx)
 *   bneval:N,C,H,W           BatchNorm2d evaluation, fwd only
 *   maxpool:N,C,H,W,K,S,P    max pooling, fwd (y and argmax) and bwd
 * Usage: bench_ops [--threads T] [--runs R] [--cpu 1] [--fast-conv 1] CASE...
 * --fast-conv 1 creates the backend with fast_conv (cdl-train --fast-conv
 * on: Winograd F(4x4) where conv_use_wino allows it). --cpu 1 times the
 * process's CPU time instead of the wall clock: with one thread on a
 * loaded machine, time spent waiting for a core is left out.
 * The environment's switches (CDL_CPU_NO_AVX512, CDL_CPU_NO_WINOGRAD)
 * pick the paths, as in a training run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cdl/cdl.h>

#include "bench/bench_util.h"

static int threads = 1, runs = 20, cpu_clock = 0, fast_conv = 0;

static double now(void)
{
    struct timespec t;
    if (!cpu_clock)
        return bench_now();
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static float *buf(size_t n, unsigned seed)
{
    float *p = malloc((n ? n : 1) * sizeof *p);
    if (!p) {
        fprintf(stderr, "bench_ops: out of memory (%zu floats)\n", n);
        exit(1);
    }
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        p[i] = (float)((seed >> 9) & 0xffff) / 32768.0f - 1.0f;
    }
    return p;
}

typedef void (*op_fn)(cdl_backend *be, void *ctx);

/* The fastest of runs calls of fn after 2 warm-ups, in ms. */
static double time_ms(cdl_backend *be, op_fn fn, void *ctx)
{
    double *t = malloc((size_t)runs * sizeof *t), st[3];
    for (int i = -2; i < runs; i++) {
        double t0 = now();
        fn(be, ctx);
        if (i >= 0)
            t[i] = 1e3 * (now() - t0);
    }
    bench_stats(t, runs, st);
    free(t);
    return st[1];
}

typedef struct conv_ctx {
    cdl_conv2d_desc d;
    float *x, *w, *b, *y, *dy, *dx, *dw, *db, *ws;
} conv_ctx;

static void conv_fwd(cdl_backend *be, void *v)
{
    conv_ctx *c = v;
    be->ops->conv2d_fwd(be, &c->d, c->x, c->w, c->b, c->y, c->ws);
}

static void conv_bwd(cdl_backend *be, void *v)
{
    conv_ctx *c = v;
    be->ops->conv2d_bwd(be, &c->d, c->x, c->w, c->dy, c->dx, c->dw, c->db, c->ws);
}

static void run_conv(cdl_backend *be, const char *spec, int n, int ch, int h, int w, int oc, int k,
                     int s, int p, int groups)
{
    conv_ctx c = {.d = {.n = n, .c = ch, .h = h, .w = w, .oc = oc, .kh = k, .kw = k, .stride_h = s,
                        .stride_w = s, .pad_h = p, .pad_w = p, .dil_h = 1, .dil_w = 1,
                        .groups = groups}};
    c.d.oh = cdl_conv2d_out(h, k, s, p, 1);
    c.d.ow = cdl_conv2d_out(w, k, s, p, 1);
    size_t nx = (size_t)n * ch * h * w, ny = (size_t)n * oc * c.d.oh * c.d.ow;
    size_t nw = (size_t)oc * (ch / groups) * k * k;
    c.x = buf(nx, 1), c.w = buf(nw, 2), c.b = buf((size_t)oc, 3), c.dy = buf(ny, 4);
    c.y = buf(ny, 5), c.dx = buf(nx, 6), c.dw = buf(nw, 7), c.db = buf((size_t)oc, 8);
    c.ws = buf(be->ops->conv2d_workspace(be, &c.d) + 1, 9);
    double f = time_ms(be, conv_fwd, &c), b = time_ms(be, conv_bwd, &c);
    printf("%s %.3f %.3f\n", spec, f, b);
    float *all[] = {c.x, c.w, c.b, c.dy, c.y, c.dx, c.dw, c.db, c.ws};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        free(all[i]);
}

typedef struct bn_ctx {
    int n, c, hw;
    float *x, *y, *dy, *dx, *gamma, *beta, *sum, *sqdev, *saved, *dg, *dbt, *rm, *rv;
} bn_ctx;

static void bn_fwd(cdl_backend *be, void *v)
{
    bn_ctx *c = v;
    be->ops->bn_train_fwd(be, c->n, c->c, c->hw, c->x, 1e-5f, c->gamma, c->beta, 0, c->y, c->sum,
                          c->sqdev, c->saved);
}

static void bn_bwd(cdl_backend *be, void *v)
{
    bn_ctx *c = v;
    be->ops->bn_train_bwd(be, c->n, c->c, c->hw, c->x, NULL, c->dy, c->saved, c->gamma, c->dg,
                          c->dbt, c->dx);
}

static void bn_ev(cdl_backend *be, void *v)
{
    bn_ctx *c = v;
    be->ops->bn_eval(be, c->n, c->c, c->hw, c->x, c->rm, c->rv, 1e-5f, c->gamma, c->beta, 0, c->y);
}

static void run_bn(cdl_backend *be, const char *spec, int n, int ch, int h, int w, int eval)
{
    bn_ctx c = {.n = n, .c = ch, .hw = h * w};
    size_t nx = (size_t)n * ch * h * w;
    c.x = buf(nx, 1), c.y = buf(nx, 2), c.dy = buf(nx, 3), c.dx = buf(nx, 4);
    c.gamma = buf((size_t)ch, 5), c.beta = buf((size_t)ch, 6), c.sum = buf((size_t)ch + 1, 7);
    c.sqdev = buf((size_t)ch, 8), c.saved = buf(2 * (size_t)ch + 1, 9), c.dg = buf((size_t)ch, 10);
    c.dbt = buf((size_t)ch, 11), c.rm = buf((size_t)ch, 12), c.rv = buf((size_t)ch, 13);
    for (int i = 0; i < ch; i++)
        c.rv[i] = 1.0f + 0.5f * c.rv[i];
    if (eval) {
        printf("%s %.3f -\n", spec, time_ms(be, bn_ev, &c));
    } else {
        double f = time_ms(be, bn_fwd, &c), b = time_ms(be, bn_bwd, &c);
        printf("%s %.3f %.3f\n", spec, f, b);
    }
    float *all[] = {c.x, c.y, c.dy, c.dx, c.gamma, c.beta, c.sum, c.sqdev, c.saved, c.dg, c.dbt,
                    c.rm, c.rv};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        free(all[i]);
}

typedef struct pool_ctx {
    cdl_pool2d_desc d;
    float *x, *y, *dy, *dx;
    int32_t *am;
} pool_ctx;

static void pool_fwd(cdl_backend *be, void *v)
{
    pool_ctx *c = v;
    be->ops->maxpool_fwd(be, &c->d, c->x, c->y, c->am);
}

static void pool_bwd(cdl_backend *be, void *v)
{
    pool_ctx *c = v;
    be->ops->maxpool_bwd(be, &c->d, c->dy, c->am, c->dx);
}

static void run_pool(cdl_backend *be, const char *spec, int n, int ch, int h, int w, int k, int s,
                     int p)
{
    pool_ctx c = {.d = {.n = n, .c = ch, .h = h, .w = w, .k = k, .stride = s, .pad = p,
                        .oh = (h + 2 * p - k) / s + 1, .ow = (w + 2 * p - k) / s + 1}};
    size_t nx = (size_t)n * ch * h * w, ny = (size_t)n * ch * c.d.oh * c.d.ow;
    c.x = buf(nx, 1), c.y = buf(ny, 2), c.dy = buf(ny, 3), c.dx = buf(nx, 4);
    c.am = calloc(ny ? ny : 1, sizeof *c.am);
    if (!c.am)
        exit(1);
    double f = time_ms(be, pool_fwd, &c), b = time_ms(be, pool_bwd, &c);
    printf("%s %.3f %.3f\n", spec, f, b);
    free(c.x), free(c.y), free(c.dy), free(c.dx), free(c.am);
}

int main(int argc, char **argv)
{
    int i = 1;
    for (; i < argc && !strncmp(argv[i], "--", 2); i += 2) {
        if (i + 1 >= argc)
            goto usage;
        if (!strcmp(argv[i], "--threads"))
            threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--runs"))
            runs = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--cpu"))
            cpu_clock = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--fast-conv"))
            fast_conv = atoi(argv[i + 1]) != 0;
        else
            goto usage;
    }
    if (i >= argc || threads < 1 || runs < 1)
        goto usage;
    cdl_backend_params bp;
    cdl_backend_params_init(&bp);
    bp.threads = threads;
    bp.fast_conv = fast_conv;
    cdl_backend *be = cdl_backend_create_with("cpu", &bp);
    if (!be) {
        fprintf(stderr, "bench_ops: %s\n", cdl_last_error());
        return 1;
    }
    for (; i < argc; i++) {
        int v[8] = {0}, nv = 0;
        const char *colon = strchr(argv[i], ':');
        if (colon) {
            char *end;
            const char *q = colon + 1;
            for (; nv < 8; nv++) {
                long x = strtol(q, &end, 10);
                if (end == q || x < 0 || x > 1 << 20)
                    break;
                v[nv] = (int)x;
                if (*end != ',') {
                    nv++;
                    break;
                }
                q = end + 1;
            }
            if (*end)
                nv = -1;
        }
        size_t len = colon ? (size_t)(colon - argv[i]) : 0;
#define IS(name, count) (len == strlen(name) && !strncmp(argv[i], name, len) && nv == (count))
        if (IS("dw", 7))
            run_conv(be, argv[i], v[0], v[1], v[2], v[3], v[1], v[4], v[5], v[6], v[1]);
        else if (IS("conv", 8))
            run_conv(be, argv[i], v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], 1);
        else if (IS("bn", 4) || IS("bneval", 4))
            run_bn(be, argv[i], v[0], v[1], v[2], v[3], len == 6);
        else if (IS("maxpool", 7))
            run_pool(be, argv[i], v[0], v[1], v[2], v[3], v[4], v[5], v[6]);
        else {
            fprintf(stderr, "bench_ops: case '%s' not understood (see the comment atop bench_ops.c)\n",
                    argv[i]);
            cdl_backend_destroy(be);
            return 2;
        }
#undef IS
        fflush(stdout);
    }
    cdl_backend_destroy(be);
    return 0;
usage:
    fprintf(stderr, "usage: bench_ops [--threads T] [--runs R] [--cpu 1] [--fast-conv 1] CASE... (dw:N,C,H,W,K,S,P "
                    "conv:N,C,H,W,OC,K,S,P bn:N,C,H,W bneval:N,C,H,W maxpool:N,C,H,W,K,S,P)\n");
    return 2;
}
