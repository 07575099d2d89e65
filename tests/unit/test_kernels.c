/* The CPU backend against the double-precision reference ops (ref_ops.c),
 * the reference ops against finite differences, optimizer steps against
 * values from torch.optim 1.13, determinism and the no-allocation rule. */
#include "testutil.h"

#include <string.h>

#include <cdl/cdl.h>

#include "kernels/cpu/conv2d.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/pool.h"
#include "kernels/cpu/simd.h"
#include "lib/core/rng.h"
#include "avx512_testutil.h"
#include "kernel_testutil.h"
#include "ref_ops.h"

/* ------------------------------------------------------------ helpers */

static cdl_backend *backend(int threads)
{
    return test_cpu_backend(threads);
}

/* ------------------------------------------------------------ shapes */

/* stride/pad are both axes' unless groups > 0: then they are the h axis
 * and sw, pw, dh, dw, groups give the rest (dilation, groups). */
typedef struct conv_case {
    int n, c, h, w, oc, kh, kw, stride, pad;
    int sw, pw, dh, dw, groups;
} conv_case;

static const conv_case conv_cases[] = {
    {1, 1, 5, 5, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0},    /* 1x1 shortcut, n=1 */
    {2, 3, 7, 6, 4, 3, 3, 1, 1, 0, 0, 0, 0, 0},
    {3, 2, 9, 8, 3, 5, 5, 2, 2, 0, 0, 0, 0, 0},
    {5, 3, 8, 7, 2, 3, 3, 2, 0, 0, 0, 0, 0, 0},    /* n > threads, odd sizes */
    {1, 4, 6, 6, 5, 1, 1, 2, 1, 0, 0, 0, 0, 0},    /* 1x1 strided and padded */
    {4, 2, 5, 7, 3, 3, 5, 1, 2, 0, 0, 0, 0, 0},    /* non-square kernel */
    {7, 3, 32, 32, 6, 5, 5, 1, 0, 0, 0, 0, 0, 0},  /* the seed CNN's conv1 */
    {3, 6, 14, 14, 16, 5, 5, 1, 0, 0, 0, 0, 0, 0}, /* and its conv2 */
    {2, 16, 44, 44, 8, 5, 5, 1, 0, 0, 0, 0, 0, 0}, /* several im2col tiles per image */
    {3, 3, 9, 11, 13, 3, 3, 1, 1, 0, 0, 0, 0, 0},  /* channel-vectorised dW, 3x3, lane tail */
    {2, 4, 12, 12, 20, 5, 5, 1, 2, 0, 0, 0, 0, 0}, /* two blocks of 16 output channels */
    {2, 2, 4, 40, 7, 3, 3, 1, 1, 0, 0, 0, 0, 0},   /* rows of three 16-lane segments */
    {2, 3, 6, 6, 16, 5, 5, 1, 1, 0, 0, 0, 0, 0},   /* output smaller than a channel-vectorised tile */
    {2, 5, 13, 17, 24, 3, 3, 1, 0, 0, 0, 0, 0, 0}, /* overlapping 3x8 tiles, lane tail */
    /* groups, dilation, per-axis stride and padding (im2col path) */
    {2, 6, 7, 8, 6, 3, 3, 1, 1, 1, 1, 1, 1, 6},    /* depthwise 3x3 */
    {3, 4, 9, 9, 8, 3, 3, 2, 1, 2, 1, 1, 1, 4},    /* depthwise, channel multiplier 2, strided */
    {2, 6, 8, 7, 9, 3, 2, 1, 2, 2, 0, 1, 1, 3},    /* 3 groups, rectangular everything */
    {2, 3, 11, 10, 4, 3, 3, 1, 2, 1, 2, 2, 2, 1},  /* dilation 2 */
    {1, 4, 12, 9, 4, 3, 2, 2, 3, 1, 1, 3, 2, 2},   /* dilation 3x2, 2 groups */
    {2, 8, 5, 6, 4, 1, 1, 1, 0, 1, 0, 1, 1, 2},    /* grouped 1x1 shortcut */
    {1, 2, 9, 9, 3, 3, 3, 1, 1, 1, 0, 1, 1, 1},    /* unequal padding, stride 1 */
    {2, 16, 20, 20, 16, 3, 3, 1, 1, 1, 1, 1, 1, 16},/* depthwise, several channels */
    /* depthwise at stride 1: conv2d_dw.c */
    {1, 5, 9, 11, 15, 3, 3, 1, 3, 1, 3, 2, 2, 5},  /* multiplier 3, dilation 2, padding 3 */
    {3, 4, 5, 12, 4, 1, 7, 1, 0, 1, 3, 1, 1, 4},   /* 1x7, padding 0x3 */
    {2, 3, 12, 4, 6, 7, 1, 1, 3, 1, 0, 1, 1, 3},   /* 7x1, multiplier 2 */
    {2, 4, 1, 1, 4, 3, 3, 1, 1, 1, 1, 1, 1, 4},    /* one pixel */
    {1, 8, 6, 7, 8, 5, 5, 1, 2, 1, 2, 1, 1, 8},    /* 5x5 */
    {2, 3, 7, 9, 3, 3, 3, 1, 0, 1, 0, 1, 1, 3},    /* no padding */
    /* depthwise at stride 2 and more: conv2d_dw.c's phase planes */
    {1, 7, 13, 15, 7, 3, 3, 2, 1, 2, 1, 1, 1, 7},  /* MobileNet's 3x3/2, odd sizes, n=1 */
    {1, 5, 1, 9, 5, 3, 3, 2, 1, 2, 1, 1, 1, 5},    /* one row */
    {2, 3, 11, 1, 3, 3, 3, 2, 1, 2, 1, 1, 1, 3},   /* one column */
    {2, 6, 12, 10, 6, 3, 3, 2, 1, 1, 1, 1, 1, 6},  /* stride 2x1 */
    {2, 4, 14, 13, 8, 5, 5, 3, 2, 3, 2, 2, 1, 4},  /* stride 3, dilation 2x1, multiplier 2 */
    {1, 3, 16, 16, 3, 3, 3, 2, 0, 2, 0, 1, 1, 3},  /* no padding, even size */
    {2, 9, 2, 2, 9, 3, 3, 2, 1, 2, 1, 1, 1, 9},    /* 2x2 to 1x1 */
    {2, 16, 32, 32, 16, 3, 3, 1, 1, 0, 0, 0, 0, 0}, /* resnet20's first stage: 32-float im2col rows */
    {2, 16, 32, 32, 32, 3, 3, 2, 1, 0, 0, 0, 0, 0}, /* and its first stride-2 conv */
};
#define N_CONV_CASES (sizeof conv_cases / sizeof conv_cases[0])
#define N_FD_CONV_CASES 6

static cdl_conv2d_desc conv_desc(const conv_case *k)
{
    if (!k->groups)
        return ref_conv_desc(k->n, k->c, k->h, k->w, k->oc, k->kh, k->kw, k->stride, k->pad);
    return ref_conv_desc_full(k->n, k->c, k->h, k->w, k->oc, k->kh, k->kw, k->stride, k->sw,
                              k->pad, k->pw, k->dh, k->dw, k->groups);
}

/* Entries of w (oc, c/groups, kh, kw). */
static size_t conv_nw(const cdl_conv2d_desc *d)
{
    return (size_t)d->oc * (d->c / d->groups) * d->kh * d->kw;
}

/* The FD-checked cases: the first N_FD_CONV_CASES plain ones and every
 * grouped/dilated one. */
static int conv_fd_case(size_t k)
{
    return k < N_FD_CONV_CASES || (conv_cases[k].groups && conv_cases[k].c <= 8);
}

typedef struct pool_case {
    int n, c, h, w, k, stride, pad;
} pool_case;

static const pool_case pool_cases[] = {
    {2, 3, 8, 8, 2, 2, 0}, {1, 2, 7, 9, 3, 2, 1}, {3, 1, 5, 5, 3, 1, 1},
    {5, 2, 6, 7, 2, 1, 0}, {1, 1, 4, 4, 3, 3, 1}, {3, 2, 7, 9, 2, 2, 0},
    {1, 2, 6, 37, 2, 2, 0}, {2, 3, 13, 37, 3, 2, 1}, {1, 2, 2, 1, 3, 2, 1},
    {1, 1, 6, 34, 3, 2, 1}, {4, 6, 28, 28, 2, 2, 0},
};
#define N_POOL_CASES (sizeof pool_cases / sizeof pool_cases[0])

static cdl_pool2d_desc pool_desc(const pool_case *k)
{
    return ref_pool_desc(k->n, k->c, k->h, k->w, k->k, k->stride, k->pad);
}

/* ------------------------------------------------------------ thread pool */

/* Each chunk records whether its thread flushes subnormals: both a
 * subnormal result (FTZ) and a subnormal operand (DAZ) must read as 0. */
typedef struct flush_ctx {
    int flushed[64];
} flush_ctx;

static int flushes_here(void)
{
    volatile float tiny = 1e-20f, sub = 1e-40f, one = 1.0f;
    float product = tiny * tiny;   /* 1e-40: subnormal */
    float operand = sub * one;     /* a subnormal read */
    return product == 0.0f && operand == 0.0f;
}

static void flush_fn(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    flush_ctx *c = vctx;
    (void)chunk;
    (void)tid;
    for (size_t i = b; i < e; i++)
        c->flushed[i] = flushes_here();
}

/* Ops run with subnormals flushed on every thread, and the caller gets
 * its own mode back. */
static void test_pool_flushes_subnormals(void **state)
{
    (void)state;
    if (!pool_fp_flush_bits)
        skip();
    unsigned mode = pool_fp_mode();
    assert_false(flushes_here());   /* the C default: gradual underflow */
    /* Valgrind runs the program on a synthetic CPU that ignores FTZ and
     * DAZ: there the mode cannot be observed at all. */
    pool_fp_set(mode | pool_fp_flush_bits);
    int observable = flushes_here();
    pool_fp_set(mode);
    if (!observable) {
        print_message("this CPU (or emulator) ignores the flush-to-zero mode: skipped\n");
        skip();
    }
    for (int t = 1; t <= 3; t++) {
        pool *p = pool_create(t);
        assert_non_null(p);
        for (int rep = 0; rep < 20; rep++) {
            flush_ctx c = {{0}};
            pool_run(p, 64, t == 1 ? 1 : 16, flush_fn, &c);
            for (int i = 0; i < 64; i++)
                assert_int_equal(c.flushed[i], 1);
            assert_int_equal(pool_fp_mode() & pool_fp_flush_bits, mode & pool_fp_flush_bits);
            assert_false(flushes_here());
        }
        pool_destroy(p);
    }
}

typedef struct cover_ctx {
    int hits[1000];
    int chunk[1000];
    int tid_ok;
    int nthreads;
} cover_ctx;

static void cover_fn(void *vctx, size_t b, size_t e, int chunk, int tid)
{
    cover_ctx *c = vctx;
    if (tid < 0 || tid >= c->nthreads)
        c->tid_ok = 0;
    for (size_t i = b; i < e; i++) {
        c->hits[i]++;
        c->chunk[i] = chunk;
    }
}

/* Every item runs exactly once, in the chunk whose bounds pool_chunk()
 * gives; the chunk count follows pool_chunks_for(). */
static void test_pool_runs_every_chunk_once(void **state)
{
    (void)state;
    for (int t = 1; t <= 4; t++) {
        pool *p = pool_create(t);
        assert_non_null(p);
        const size_t ns[] = {0, 1, 2, 3, 5, 999, 1000};
        for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
            static cover_ctx c;
            for (size_t grain = 1; grain <= 300; grain += 299) {
                memset(&c, 0, sizeof c);
                c.tid_ok = 1;
                c.nthreads = t;
                for (int rep = 0; rep < 3; rep++)
                    pool_for(p, ns[k], grain, cover_fn, &c);
                int chunks = pool_chunks(p, ns[k], grain);
                assert_int_equal(chunks, pool_chunks_for(t, ns[k], grain));
                assert_true(chunks >= 1 && chunks <= t * POOL_CHUNKS_PER_THREAD);
                if (t == 1 || ns[k] <= grain)
                    assert_int_equal(chunks, 1);
                assert_true(c.tid_ok);
                for (size_t i = 0; i < ns[k]; i++) {
                    assert_int_equal(c.hits[i], 3);
                    size_t b, e;
                    pool_chunk(ns[k], c.chunk[i], chunks, &b, &e);
                    assert_true(b <= i && i < e);
                }
            }
            /* An explicit chunk count, clamped to the item count. */
            memset(&c, 0, sizeof c);
            c.tid_ok = 1;
            c.nthreads = t;
            pool_run(p, ns[k], 7, cover_fn, &c);
            for (size_t i = 0; i < ns[k]; i++)
                assert_int_equal(c.hits[i], 1);
        }
        pool_destroy(p);
    }
}

/* Backward chunk counts: four per thread, capped by the partials' memory,
 * never fewer than one per thread (or image). */
static void test_conv_bwd_chunks(void **state)
{
    (void)state;
    assert_int_equal(conv_bwd_chunks(1, 512, 1000), 1);
    assert_int_equal(conv_bwd_chunks(2, 512, 1000), 2 * POOL_CHUNKS_PER_THREAD);
    assert_int_equal(conv_bwd_chunks(4, 3, 1000), 3);
    assert_int_equal(conv_bwd_chunks(16, 512, CONV_PARTIALS_MAX / 20), 20);
    assert_int_equal(conv_bwd_chunks(16, 512, CONV_PARTIALS_MAX), 16);
    assert_int_equal(conv_bwd_chunks(16, 5, CONV_PARTIALS_MAX), 5);
}

static void test_create_rejects_bad_thread_counts(void **state)
{
    (void)state;
    assert_null(cdl_backend_cpu_create(-1));
    assert_non_null(strstr(cdl_last_error(), "-1 threads"));
    assert_null(cdl_backend_cpu_create(100000));
    cdl_backend *be = cdl_backend_cpu_create(0);
    assert_non_null(be);
    assert_int_equal(be->threads, cdl_default_threads());
    assert_string_equal(be->ops->name, "cpu");
    cdl_backend_destroy(be);
}

/* ------------------------------------------------------------ reference vs finite differences */

typedef struct conv_fd {
    const cdl_conv2d_desc *d;
    double *x, *w, *b, *r, *y;
    size_t ny;
} conv_fd;

static double conv_loss(void *vctx)
{
    conv_fd *c = vctx;
    ref_conv2d_fwd(c->d, c->x, c->w, c->b, c->y);
    return dot(c->r, c->y, c->ny);
}

static void test_ref_conv_gradients(void **state)
{
    (void)state;
    for (size_t k = 0; k < N_CONV_CASES; k++) {
        if (!conv_fd_case(k))
            continue;
        cdl_conv2d_desc d = conv_desc(&conv_cases[k]);
        size_t nx = (size_t)d.n * d.c * d.h * d.w, nw = conv_nw(&d);
        size_t ny = (size_t)d.n * d.oc * d.oh * d.ow;
        pair x = pair_rand(nx, 1 + k, -1, 1), w = pair_rand(nw, 2 + k, -1, 1);
        pair b = pair_rand(d.oc, 3 + k, -1, 1), r = pair_rand(ny, 4 + k, -1, 1);
        pair y = pair_new(ny), dx = pair_new(nx), dw = pair_new(nw), db = pair_new(d.oc);
        ref_conv2d_bwd(&d, x.d, w.d, r.d, dx.d, dw.d, db.d);
        conv_fd c = {&d, x.d, w.d, b.d, r.d, y.d, ny};
        fd_check("conv dx", conv_loss, &c, x.d, nx, dx.d);
        fd_check("conv dw", conv_loss, &c, w.d, nw, dw.d);
        fd_check("conv db", conv_loss, &c, b.d, (size_t)d.oc, db.d);
        pair *all[] = {&x, &w, &b, &r, &y, &dx, &dw, &db};
        for (size_t i = 0; i < 8; i++)
            pair_free(all[i]);
    }
}

typedef struct linear_fd {
    int n, in, out;
    double *x, *w, *b, *r, *y;
} linear_fd;

static double linear_loss(void *vctx)
{
    linear_fd *c = vctx;
    ref_linear_fwd(c->n, c->in, c->out, c->x, c->w, c->b, c->y);
    return dot(c->r, c->y, (size_t)c->n * c->out);
}

static void test_ref_linear_gradients(void **state)
{
    (void)state;
    int n = 3, in = 7, out = 5;
    pair x = pair_rand((size_t)n * in, 1, -1, 1), w = pair_rand((size_t)out * in, 2, -1, 1);
    pair b = pair_rand(out, 3, -1, 1), r = pair_rand((size_t)n * out, 4, -1, 1);
    pair y = pair_new((size_t)n * out), dx = pair_new((size_t)n * in);
    pair dw = pair_new((size_t)out * in), db = pair_new(out);
    ref_linear_bwd(n, in, out, x.d, w.d, r.d, dx.d, dw.d, db.d);
    linear_fd c = {n, in, out, x.d, w.d, b.d, r.d, y.d};
    fd_check("linear dx", linear_loss, &c, x.d, x.n, dx.d);
    fd_check("linear dw", linear_loss, &c, w.d, w.n, dw.d);
    fd_check("linear db", linear_loss, &c, b.d, b.n, db.d);
    pair *all[] = {&x, &w, &b, &r, &y, &dx, &dw, &db};
    for (size_t i = 0; i < 8; i++)
        pair_free(all[i]);
}

typedef struct pool_fd {
    const cdl_pool2d_desc *d;
    int max;
    double *x, *r, *y;
    int32_t *am;
    size_t ny;
} pool_fd;

static double pool_loss(void *vctx)
{
    pool_fd *c = vctx;
    if (c->max)
        ref_maxpool_fwd(c->d, c->x, c->y, c->am);
    else
        ref_avgpool_fwd(c->d, c->x, c->y);
    return dot(c->r, c->y, c->ny);
}

static void test_ref_pool_gradients(void **state)
{
    (void)state;
    for (size_t k = 0; k + 1 < N_POOL_CASES; k++)
        for (int max = 0; max <= 1; max++) {
            cdl_pool2d_desc d = pool_desc(&pool_cases[k]);
            size_t nx = (size_t)d.n * d.c * d.h * d.w, ny = (size_t)d.n * d.c * d.oh * d.ow;
            /* Values 1/nx apart, far beyond the step h: no ties, no kinks. */
            pair x = pair_distinct(nx, 10 + k), r = pair_rand(ny, 20 + k, -1, 1);
            pair y = pair_new(ny), dx = pair_new(nx);
            int32_t *am = cdl_calloc(ny, sizeof *am);
            if (max) {
                ref_maxpool_fwd(&d, x.d, y.d, am);
                ref_maxpool_bwd(&d, r.d, am, dx.d);
            } else {
                ref_avgpool_bwd(&d, r.d, dx.d);
            }
            pool_fd c = {&d, max, x.d, r.d, y.d, am, ny};
            fd_check(max ? "maxpool dx" : "avgpool dx", pool_loss, &c, x.d, nx, dx.d);
            cdl_free(am);
            pair *all[] = {&x, &r, &y, &dx};
            for (size_t i = 0; i < 4; i++)
                pair_free(all[i]);
        }
}

typedef struct relu_fd {
    size_t n;
    double *x, *r, *y;
} relu_fd;

static double relu_loss(void *vctx)
{
    relu_fd *c = vctx;
    ref_relu_fwd(c->n, c->x, c->y);
    return dot(c->r, c->y, c->n);
}

static void test_ref_relu_gradient(void **state)
{
    (void)state;
    size_t n = 200;
    pair x = pair_rand(n, 5, -1, 1), r = pair_rand(n, 6, -1, 1), y = pair_new(n), dx = pair_new(n);
    for (size_t i = 0; i < n; i++)   /* keep clear of the kink at 0 */
        if (fabs(x.d[i]) < 0.05)
            x.d[i] = x.f[i] = 0.5f;
    ref_relu_fwd(n, x.d, y.d);
    ref_relu_bwd(n, y.d, r.d, dx.d);
    relu_fd c = {n, x.d, r.d, y.d};
    fd_check("relu dx", relu_loss, &c, x.d, n, dx.d);
    pair *all[] = {&x, &r, &y, &dx};
    for (size_t i = 0; i < 4; i++)
        pair_free(all[i]);
}

typedef struct xent_fd {
    int n, classes;
    double *z, *dz, *loss;
    const int32_t *labels;
    int32_t *pred;
    double scale;
} xent_fd;

static double xent_total(void *vctx)
{
    xent_fd *c = vctx;
    ref_xent(c->n, c->classes, c->z, c->labels, c->scale, c->dz, c->loss, c->pred);
    double s = 0.0;
    for (int i = 0; i < c->n; i++)
        s += c->loss[i];
    return s * c->scale;
}

static void test_ref_xent_gradient(void **state)
{
    (void)state;
    int n = 4, k = 6;
    int32_t labels[4] = {0, 5, 2, 2}, pred[4];
    pair z = pair_rand((size_t)n * k, 7, -3, 3), dz = pair_new(z.n), dz2 = pair_new(z.n);
    double loss[4];
    ref_xent(n, k, z.d, labels, 0.25, dz.d, loss, pred);
    xent_fd c = {n, k, z.d, dz2.d, loss, labels, pred, 0.25};
    fd_check("xent dlogits", xent_total, &c, z.d, z.n, dz.d);
    pair_free(&z);
    pair_free(&dz);
    pair_free(&dz2);
}

/* ------------------------------------------------------------ CPU kernels vs reference */

static void test_conv2d_matches_reference(void **state)
{
    (void)state;
    const int threads[] = {1, 3};
    for (size_t ti = 0; ti < 2; ti++) {
        cdl_backend *be = backend(threads[ti]);
        for (size_t k = 0; k < N_CONV_CASES; k++) {
            cdl_conv2d_desc d = conv_desc(&conv_cases[k]);
            size_t nx = (size_t)d.n * d.c * d.h * d.w, nw = conv_nw(&d);
            size_t ny = (size_t)d.n * d.oc * d.oh * d.ow;
            pair x = pair_rand(nx, 31 + k, -1, 1), w = pair_rand(nw, 32 + k, -1, 1);
            pair b = pair_rand(d.oc, 33 + k, -1, 1), dy = pair_rand(ny, 34 + k, -1, 1);
            pair y = pair_new(ny), dx = pair_new(nx), dw = pair_new(nw), db = pair_new(d.oc);
            float *ws = cdl_calloc(be->ops->conv2d_workspace(be, &d) + 1, sizeof *ws);
            assert_non_null(ws);

            ref_conv2d_fwd(&d, x.d, w.d, b.d, y.d);
            be->ops->conv2d_fwd(be, &d, x.f, w.f, b.f, y.f, ws);
            check_close("conv2d y", y.f, y.d, ny, 1e-5);
            ref_conv2d_fwd(&d, x.d, w.d, NULL, y.d);
            be->ops->conv2d_fwd(be, &d, x.f, w.f, NULL, y.f, ws);
            check_close("conv2d y (no bias)", y.f, y.d, ny, 1e-5);

            ref_conv2d_bwd(&d, x.d, w.d, dy.d, dx.d, dw.d, db.d);
            /* Poison the outputs: the op must overwrite, not accumulate. */
            for (size_t i = 0; i < nx; i++)
                dx.f[i] = 1e6f;
            be->ops->conv2d_bwd(be, &d, x.f, w.f, dy.f, dx.f, dw.f, db.f, ws);
            check_close("conv2d dx", dx.f, dx.d, nx, 1e-5);
            check_close("conv2d dw", dw.f, dw.d, nw, 1e-5);
            check_close("conv2d db", db.f, db.d, (size_t)d.oc, 1e-5);
            /* The first layer: no dx, no db. */
            be->ops->conv2d_bwd(be, &d, x.f, w.f, dy.f, NULL, dw.f, NULL, ws);
            check_close("conv2d dw (no dx)", dw.f, dw.d, nw, 1e-5);

            cdl_free(ws);
            pair *all[] = {&x, &w, &b, &dy, &y, &dx, &dw, &db};
            for (size_t i = 0; i < 8; i++)
                pair_free(all[i]);
        }
        cdl_backend_destroy(be);
    }
}

static void test_linear_matches_reference(void **state)
{
    (void)state;
    /* (n, in, out): tiny (runs serially), the seed CNN's fc layers, n=1. */
    const int cases[][3] = {{3, 7, 5}, {64, 400, 120}, {37, 120, 84}, {64, 84, 10}, {1, 50, 3}, {5, 2, 9}};
    const int threads[] = {1, 3};
    for (size_t ti = 0; ti < 2; ti++) {
        cdl_backend *be = backend(threads[ti]);
        for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
            int n = cases[k][0], in = cases[k][1], out = cases[k][2];
            pair x = pair_rand((size_t)n * in, 41 + k, -1, 1), w = pair_rand((size_t)out * in, 42 + k, -1, 1);
            pair b = pair_rand(out, 43 + k, -1, 1), dy = pair_rand((size_t)n * out, 44 + k, -1, 1);
            pair y = pair_new((size_t)n * out), dx = pair_new(x.n), dw = pair_new(w.n), db = pair_new(out);
            float *ws = cdl_calloc(be->ops->linear_workspace(be, n, in, out) + 1, sizeof *ws);

            ref_linear_fwd(n, in, out, x.d, w.d, b.d, y.d);
            be->ops->linear_fwd(be, n, in, out, x.f, w.f, b.f, y.f, ws);
            check_close("linear y", y.f, y.d, y.n, 1e-5);
            ref_linear_fwd(n, in, out, x.d, w.d, NULL, y.d);
            be->ops->linear_fwd(be, n, in, out, x.f, w.f, NULL, y.f, ws);
            check_close("linear y (no bias)", y.f, y.d, y.n, 1e-5);

            ref_linear_bwd(n, in, out, x.d, w.d, dy.d, dx.d, dw.d, db.d);
            for (size_t i = 0; i < dw.n; i++)
                dw.f[i] = 1e6f;
            be->ops->linear_bwd(be, n, in, out, x.f, w.f, dy.f, dx.f, dw.f, db.f, ws);
            check_close("linear dx", dx.f, dx.d, dx.n, 1e-5);
            check_close("linear dw", dw.f, dw.d, dw.n, 1e-5);
            check_close("linear db", db.f, db.d, db.n, 1e-5);
            be->ops->linear_bwd(be, n, in, out, x.f, w.f, dy.f, NULL, dw.f, NULL, ws);
            check_close("linear dw (no dx)", dw.f, dw.d, dw.n, 1e-5);

            cdl_free(ws);
            pair *all[] = {&x, &w, &b, &dy, &y, &dx, &dw, &db};
            for (size_t i = 0; i < 8; i++)
                pair_free(all[i]);
        }
        cdl_backend_destroy(be);
    }
}

static void test_pooling_matches_reference(void **state)
{
    (void)state;
    const int threads[] = {1, 3};
    for (size_t ti = 0; ti < 2; ti++) {
        cdl_backend *be = backend(threads[ti]);
        for (size_t k = 0; k < N_POOL_CASES; k++) {
            cdl_pool2d_desc d = pool_desc(&pool_cases[k]);
            size_t nx = (size_t)d.n * d.c * d.h * d.w, ny = (size_t)d.n * d.c * d.oh * d.ow;
            pair x = pair_distinct(nx, 51 + k), dy = pair_rand(ny, 52 + k, -1, 1);
            pair y = pair_new(ny), dx = pair_new(nx);
            int32_t *am = cdl_calloc(ny, sizeof *am), *am_ref = cdl_calloc(ny, sizeof *am);

            ref_maxpool_fwd(&d, x.d, y.d, am_ref);
            be->ops->maxpool_fwd(be, &d, x.f, y.f, am);
            check_close("maxpool y", y.f, y.d, ny, 0);
            assert_memory_equal(am, am_ref, ny * sizeof *am);
            ref_maxpool_bwd(&d, dy.d, am_ref, dx.d);
            for (size_t i = 0; i < nx; i++)
                dx.f[i] = 1e6f;
            be->ops->maxpool_bwd(be, &d, dy.f, am, dx.f);
            check_close("maxpool dx", dx.f, dx.d, nx, 1e-6);

            ref_avgpool_fwd(&d, x.d, y.d);
            be->ops->avgpool_fwd(be, &d, x.f, y.f);
            check_close("avgpool y", y.f, y.d, ny, 1e-6);
            ref_avgpool_bwd(&d, dy.d, dx.d);
            for (size_t i = 0; i < nx; i++)
                dx.f[i] = 1e6f;
            be->ops->avgpool_bwd(be, &d, dy.f, dx.f);
            check_close("avgpool dx", dx.f, dx.d, nx, 1e-6);

            cdl_free(am);
            cdl_free(am_ref);
            pair *all[] = {&x, &dy, &y, &dx};
            for (size_t i = 0; i < 4; i++)
                pair_free(all[i]);
        }
        cdl_backend_destroy(be);
    }
}

/* Ties go to the first maximum in row-major window order, like PyTorch; a
 * padded window's first candidate is its first in-plane tap. */
static void test_maxpool_ties_pick_first(void **state)
{
    (void)state;
    cdl_backend *be = backend(2);
    cdl_pool2d_desc d = ref_pool_desc(1, 2, 4, 4, 3, 1, 1);
    float x[32], y[32];
    int32_t am[32];
    for (int i = 0; i < 32; i++)
        x[i] = 1.0f;
    be->ops->maxpool_fwd(be, &d, x, y, am);
    for (int oy = 0; oy < 4; oy++)
        for (int ox = 0; ox < 4; ox++) {
            int iy = oy - 1 < 0 ? 0 : oy - 1, ix = ox - 1 < 0 ? 0 : ox - 1;
            assert_int_equal(am[oy * 4 + ox], iy * 4 + ix);
            assert_int_equal(am[16 + oy * 4 + ox], iy * 4 + ix);
            assert_true(y[oy * 4 + ox] == 1.0f);
        }
    /* NaN wins, and a later NaN replaces an earlier one (PyTorch's CPU
     * rule), for the 2x2/2 fast path and the generic loop alike. */
    const cdl_pool2d_desc dd[2] = {ref_pool_desc(1, 1, 2, 4, 2, 2, 0), ref_pool_desc(1, 1, 2, 4, 2, 1, 0)};
    float xn[8] = {1, NAN, 5, 2, 3, NAN, -INFINITY, -INFINITY};
    for (int k = 0; k < 2; k++) {
        be->ops->maxpool_fwd(be, &dd[k], xn, y, am);
        assert_true(isnan(y[0]));
        assert_int_equal(am[0], 5);
    }
    assert_true(isnan(y[1]) && am[1] == 5);     /* stride 1: NaN, 5, NaN, -inf */
    assert_true(y[2] == 5.0f && am[2] == 2);
    be->ops->maxpool_fwd(be, &dd[0], xn, y, am);
    assert_true(y[1] == 5.0f && am[1] == 2);
    float xi[8] = {-INFINITY, -INFINITY, 0, 0, -INFINITY, -INFINITY, 0, 0};
    be->ops->maxpool_fwd(be, &dd[0], xi, y, am);
    assert_true(y[0] == -INFINITY && am[0] == 0);
    cdl_backend_destroy(be);
}

/* The scalar rule in float: first maximum in window order, NaN wins and a
 * later NaN replaces an earlier one; padding is skipped. */
static void maxpool_rule(const cdl_pool2d_desc *d, const float *x, float *y, int32_t *am)
{
    for (int oy = 0; oy < d->oh; oy++)
        for (int ox = 0; ox < d->ow; ox++) {
            float best = -INFINITY;
            int32_t bi = -1;
            for (int iy = oy * d->stride - d->pad; iy < oy * d->stride - d->pad + d->k; iy++)
                for (int ix = ox * d->stride - d->pad; ix < ox * d->stride - d->pad + d->k; ix++) {
                    if (iy < 0 || iy >= d->h || ix < 0 || ix >= d->w)
                        continue;
                    float v = x[iy * d->w + ix];
                    if (bi < 0 || v > best || isnan(v)) {
                        best = v;
                        bi = iy * d->w + ix;
                    }
                }
            y[oy * d->ow + ox] = best;
            am[oy * d->ow + ox] = bi;
        }
}

static void maxpool_3x3s2_cases(const char *path)
{
    cdl_backend *be = backend(1);
    const int shapes[][2] = {{5, 35}, {6, 34}, {1, 3}, {9, 17}, {1, 1}, {3, 1}, {1, 2}, {2, 2},
                             {7, 16}, {4, 15}, {3, 49}, {11, 33}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        cdl_pool2d_desc d = ref_pool_desc(1, 1, shapes[s][0], shapes[s][1], 3, 2, 1);
        assert_string_equal(cpu_maxpool_fwd_path(&d), path);
        size_t nx = (size_t)d.h * d.w, ny = (size_t)d.oh * d.ow;
        float *x = cdl_calloc(nx, sizeof *x), *y = cdl_calloc(ny, sizeof *y), *ye = cdl_calloc(ny, sizeof *y);
        int32_t *am = cdl_calloc(ny, sizeof *am), *ame = cdl_calloc(ny, sizeof *am);
        rng_state r;
        rng_seed(&r, 90 + s);
        const float vals[4] = {0.0f, 1.0f, -INFINITY, NAN};
        for (int round = 0; round < 4; round++) {
            for (size_t i = 0; i < nx; i++) {
                int u = (int)(rng_next(&r) % 16);   /* round 0: ties only; then -inf, then NaN */
                x[i] = round == 3 ? (float)u - 7.5f : vals[u < 14 ? u % 2 : (round ? 1 + round : 1)];
            }
            if (round == 3 && nx > 1)
                x[nx - 1] = -INFINITY;   /* all -inf windows at the far edge */
            maxpool_rule(&d, x, ye, ame);
            be->ops->maxpool_fwd(be, &d, x, y, am);
            assert_memory_equal(am, ame, ny * sizeof *am);
            for (size_t i = 0; i < ny; i++)
                assert_true(isnan(y[i]) ? isnan(ye[i]) : y[i] == ye[i]);
        }
        cdl_free(x);
        cdl_free(y);
        cdl_free(ye);
        cdl_free(am);
        cdl_free(ame);
    }
    cdl_backend_destroy(be);
}

/* The 3x3/2 padding-1 fast paths (the ResNet stem pool), AVX-512 and AVX2
 * (CDL_CPU_NO_AVX512=1), are taken and keep the scalar rule on ties, NaN
 * and -inf, at the plane's padded edges and past 16 outputs a row, for
 * even and odd widths, one row or column, and planes of 1 to 3 pixels. */
static void test_maxpool_3x3s2_ties_nan(void **state)
{
    (void)state;
    int avx512 = cpu_has_avx512(), avx2 = cpu_has_avx2();
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1 && !avx512)
            break;   /* the AVX2 pass needs AVX-512 to be switched off */
        if (pass == 1)
            test_avx2_only(1);
        maxpool_3x3s2_cases(pass ? "3x3/2/1 avx2" : avx512 ? "3x3/2/1 avx512" : avx2 ? "3x3/2/1 avx2" : "plain");
        if (pass == 1)
            test_avx2_only(0);
    }
}

static void test_eltwise_ops(void **state)
{
    (void)state;
    cdl_backend *be = backend(3);
    size_t n = 100003;   /* several chunks, odd tail */
    pair x = pair_rand(n, 61, -1, 1), dy = pair_rand(n, 62, -1, 1), y = pair_new(n), dx = pair_new(n);
    ref_relu_fwd(n, x.d, y.d);
    be->ops->relu_fwd(be, n, x.f, y.f);
    check_close("relu y", y.f, y.d, n, 0);
    ref_relu_bwd(n, y.d, dy.d, dx.d);
    be->ops->relu_bwd(be, n, y.f, dy.f, dx.f);
    check_close("relu dx", dx.f, dx.d, n, 0);
    /* dx may alias dy. */
    be->ops->relu_bwd(be, n, y.f, dy.f, dy.f);
    check_close("relu dx in place", dy.f, dx.d, n, 0);

    uint8_t *mask = cdl_calloc(n, 1), *mask_ref = cdl_calloc(n, 1);
    const float ps[] = {0.0f, 0.3f, 1.0f};
    for (size_t k = 0; k < 3; k++) {
        ref_dropout_fwd(n, ps[k], 77, x.d, y.d, mask_ref);
        be->ops->dropout_fwd(be, n, ps[k], 77, x.f, y.f, mask);
        assert_memory_equal(mask, mask_ref, n);
        check_close("dropout y", y.f, y.d, n, 1e-6);
        be->ops->dropout_bwd(be, n, ps[k], mask, x.f, dx.f);
        check_close("dropout dx", dx.f, y.d, n, 1e-6);
    }
    size_t kept = 0;
    ref_dropout_fwd(n, 0.3, 78, x.d, y.d, mask_ref);
    for (size_t i = 0; i < n; i++)
        kept += mask_ref[i];
    assert_true(fabs((double)kept / n - 0.7) < 0.01);

    be->ops->fill(be, y.f, 2.5f, n);
    for (size_t i = 0; i < n; i++)
        assert_true(y.f[i] == 2.5f);
    be->ops->scale(be, x.f, -2.0f, n);
    for (size_t i = 0; i < n; i++)
        assert_true(x.f[i] == (float)(-2.0 * x.d[i]));

    cdl_free(mask);
    cdl_free(mask_ref);
    pair *all[] = {&x, &dy, &y, &dx};
    for (size_t i = 0; i < 4; i++)
        pair_free(all[i]);
    cdl_backend_destroy(be);
}

static void test_xent_matches_reference(void **state)
{
    (void)state;
    cdl_backend *be = backend(3);
    int n = 37, k = 10;
    pair z = pair_rand((size_t)n * k, 71, -5, 5), dz = pair_new(z.n);
    /* Huge logits: a naive softmax would overflow. */
    for (int j = 0; j < k; j++) {
        z.f[j] = 1000.0f + (float)j;
        z.d[j] = z.f[j];
    }
    int32_t labels[37], pred[37], pred_ref[37];
    for (int i = 0; i < n; i++)
        labels[i] = (i * 7) % k;
    float loss[37];
    double loss_ref[37];
    ref_xent(n, k, z.d, labels, 1.0 / n, dz.d, loss_ref, pred_ref);
    be->ops->xent_fwd_bwd(be, n, k, z.f, labels, 1.0f / n, dz.f, loss, pred);
    check_close("xent loss", loss, loss_ref, (size_t)n, 1e-6);
    check_close("xent dlogits", dz.f, dz.d, z.n, 1e-6);
    assert_memory_equal(pred, pred_ref, sizeof pred);
    assert_int_equal(pred[0], k - 1);
    /* A label out of range is flagged by a NaN loss. */
    labels[3] = k;
    be->ops->xent_fwd_bwd(be, n, k, z.f, labels, 1.0f, dz.f, loss, pred);
    assert_true(isnan(loss[3]));
    assert_false(isnan(loss[2]));
    pair_free(&z);
    pair_free(&dz);
    cdl_backend_destroy(be);
}

/* ------------------------------------------------------------ optimizers */

/* Three steps on p0 with gradients g_k = g0*(k+1) - 0.02*k; the expected
 * values were printed by torch 1.13 (torch.optim.SGD/Adam/AdamW, float32). */
static const double opt_p0[4] = {0.5, -1.0, 2.0, 0.25};
static const double opt_g0[4] = {0.1, 0.2, -0.3, 0.05};

static void opt_grad(int k, size_t n, float *g)
{
    for (size_t i = 0; i < n; i++)
        g[i] = (float)(opt_g0[i % 4] * (k + 1) - 0.02 * k);
}

static void check_params(const char *what, const float *p, size_t n, const double expect[4])
{
    for (size_t i = 0; i < n; i++)
        if (fabs(p[i] - expect[i % 4]) > 2e-6 * fabs(expect[i % 4])) {
            print_error("%s p[%zu] = %.9g, torch gives %.9g\n", what, i, p[i], expect[i % 4]);
            fail();
        }
}

static void test_sgd_matches_torch(void **state)
{
    (void)state;
    const double mom[4] = {0.416110873, -1.16416502, 2.26113582, 0.211564615};
    const double nest[4] = {0.363580346, -1.26978183, 2.43318748, 0.188296556};
    const double plain[4] = {0.44600001, -1.11399996, 2.18600011, 0.225999996};
    const cdl_sgd_hparams hps[3] = {
        {.lr = 0.1f, .momentum = 0.9f, .dampening = 0.1f, .weight_decay = 0.01f},
        {.lr = 0.1f, .momentum = 0.9f, .weight_decay = 0.01f, .nesterov = 1},
        {.lr = 0.1f},
    };
    const double *expect[3] = {mom, nest, plain};
    const char *names[3] = {"sgd momentum+dampening", "sgd nesterov", "sgd plain"};
    const int threads[] = {1, 3};
    for (size_t ti = 0; ti < 2; ti++) {
        cdl_backend *be = backend(threads[ti]);
        size_t n = ti ? 40000 : 4;   /* many copies: spans every thread */
        float *p = cdl_calloc(n, sizeof *p), *g = cdl_calloc(n, sizeof *g), *buf = cdl_calloc(n, sizeof *g);
        for (int c = 0; c < 3; c++) {
            for (size_t i = 0; i < n; i++)
                p[i] = (float)opt_p0[i % 4];
            for (int k = 0; k < 3; k++) {
                cdl_sgd_hparams hp = hps[c];
                hp.first_step = k == 0;
                opt_grad(k, n, g);
                be->ops->sgd_step(be, n, p, g, c == 2 ? NULL : buf, &hp);
            }
            check_params(names[c], p, n, expect[c]);
        }
        cdl_free(p);
        cdl_free(g);
        cdl_free(buf);
        cdl_backend_destroy(be);
    }
}

/* The same steps written out by hand from PyTorch's rules, for one value. */
static void test_sgd_first_step_copies_gradient(void **state)
{
    (void)state;
    cdl_backend *be = backend(1);
    float p = 1.0f, g = 0.5f, buf = 123.0f;
    cdl_sgd_hparams hp = {.lr = 0.1f, .momentum = 0.9f, .dampening = 0.5f, .first_step = 1};
    be->ops->sgd_step(be, 1, &p, &g, &buf, &hp);
    assert_true(buf == 0.5f);                 /* copied, no dampening */
    assert_true(p == 1.0f - 0.1f * 0.5f);
    hp.first_step = 0;
    be->ops->sgd_step(be, 1, &p, &g, &buf, &hp);
    assert_true(buf == 0.5f * 0.9f + 0.5f * 0.5f);
    cdl_backend_destroy(be);
}

static void test_adam_matches_torch(void **state)
{
    (void)state;
    const double adam[4] = {0.470247865, -1.02851856, 2.02773571, 0.220105991};
    const double adamw[4] = {0.469082177, -1.02631247, 2.02313876, 0.219608471};
    const int threads[] = {1, 3};
    for (size_t ti = 0; ti < 2; ti++) {
        cdl_backend *be = backend(threads[ti]);
        size_t n = ti ? 40000 : 4;
        float *p = cdl_calloc(n, sizeof *p), *g = cdl_calloc(n, sizeof *g);
        float *m = cdl_calloc(n, sizeof *m), *v = cdl_calloc(n, sizeof *v);
        for (int decoupled = 0; decoupled <= 1; decoupled++) {
            for (size_t i = 0; i < n; i++) {
                p[i] = (float)opt_p0[i % 4];
                m[i] = v[i] = 0.0f;
            }
            for (int k = 0; k < 3; k++) {
                cdl_adam_hparams hp = {.lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                                       .weight_decay = 0.1f, .decoupled = decoupled, .step = k + 1};
                opt_grad(k, n, g);
                be->ops->adam_step(be, n, p, g, m, v, &hp);
            }
            check_params(decoupled ? "adamw" : "adam", p, n, decoupled ? adamw : adam);
        }
        cdl_free(p);
        cdl_free(g);
        cdl_free(m);
        cdl_free(v);
        cdl_backend_destroy(be);
    }
}

/* The AVX2 paths of AdamW, SGD, of linear's bias gradient and of sumsq do
 * the portable loops' operations in the same order: their bits must be
 * equal (odd sizes, so the scalar tails run too). */
static void test_simd_paths_equal_portable(void **state)
{
    (void)state;
    int simd_before = cpu_has_avx2() || cpu_has_avx512();
    cdl_backend *be = backend(2);
    size_t n = 40003;
    pair p0 = pair_rand(n, 91, -2, 2), g = pair_rand(n, 92, -1, 1), m0 = pair_rand(n, 93, -1, 1);
    pair v0 = pair_rand(n, 94, 0, 1);
    float *run[2][3];
    for (int mode = 0; mode < 3; mode++) {   /* AdamW, Adam with L2, Adam without decay */
        for (int off = 0; off <= 1; off++) {
            cpu_disable_avx512(off);
            for (int k = 0; k < 3; k++) {
                run[off][k] = cdl_calloc(n, sizeof(float));
                memcpy(run[off][k], (k == 0 ? p0 : k == 1 ? m0 : v0).f, n * sizeof(float));
            }
            for (long step = 1; step <= 2; step++) {
                cdl_adam_hparams hp = {.lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                                       .weight_decay = mode == 2 ? 0.0f : 0.1f,
                                       .decoupled = mode == 0, .step = step};
                be->ops->adam_step(be, n, run[off][0], g.f, run[off][1], run[off][2], &hp);
            }
        }
        for (int k = 0; k < 3; k++) {
            assert_memory_equal(run[0][k], run[1][k], n * sizeof(float));
            cdl_free(run[0][k]);
            cdl_free(run[1][k]);
        }
    }
    /* SGD: plain, momentum with L2 and dampening, nesterov; the first
     * step (buf = d) and the next two. */
    for (int mode = 0; mode < 3; mode++) {
        for (int off = 0; off <= 1; off++) {
            cpu_disable_avx512(off);
            for (int k = 0; k < 2; k++) {
                run[off][k] = cdl_calloc(n, sizeof(float));
                memcpy(run[off][k], (k == 0 ? p0 : m0).f, n * sizeof(float));
            }
            for (int step = 0; step < 3; step++) {
                cdl_sgd_hparams hp = {.lr = 0.05f, .momentum = mode ? 0.9f : 0.0f,
                                      .dampening = mode == 1 ? 0.3f : 0.0f,
                                      .weight_decay = mode == 1 ? 5e-4f : 0.0f,
                                      .nesterov = mode == 2, .first_step = step == 0};
                be->ops->sgd_step(be, n, run[off][0], g.f, mode ? run[off][1] : NULL, &hp);
            }
        }
        for (int k = 0; k < 2; k++) {
            assert_memory_equal(run[0][k], run[1][k], n * sizeof(float));
            cdl_free(run[0][k]);
            cdl_free(run[1][k]);
        }
    }
    int rows = 50, in = 3, out = 77;
    pair x = pair_rand((size_t)rows * in, 95, -1, 1), w = pair_rand((size_t)out * in, 96, -1, 1);
    pair dy = pair_rand((size_t)rows * out, 97, -1, 1);
    float *dw = cdl_calloc((size_t)out * in, sizeof *dw), *db[2];
    for (int off = 0; off <= 1; off++) {
        cpu_disable_avx512(off);
        db[off] = cdl_calloc(out, sizeof(float));
        be->ops->linear_bwd(be, rows, in, out, x.f, w.f, dy.f, NULL, dw, db[off], NULL);
    }
    assert_memory_equal(db[0], db[1], out * sizeof(float));
    double ss[2];
    for (int off = 0; off <= 1; off++) {
        cpu_disable_avx512(off);
        ss[off] = be->ops->sumsq(be, p0.f, n);
    }
    assert_memory_equal(&ss[0], &ss[1], sizeof ss[0]);
    cpu_disable_avx512(!simd_before);
    pair *all[] = {&p0, &g, &m0, &v0, &x, &w, &dy};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        pair_free(all[i]);
    cdl_free(dw);
    cdl_free(db[0]);
    cdl_free(db[1]);
    cdl_backend_destroy(be);
}

/* ------------------------------------------------------------ reductions */

static void test_sumsq(void **state)
{
    (void)state;
    size_t n = 1000003;
    pair x = pair_rand(n, 81, -2, 2);
    double ref = dot(x.d, x.d, n);
    cdl_backend *b1 = backend(1), *b3 = backend(3);
    double s1 = b1->ops->sumsq(b1, x.f, n), s3 = b3->ops->sumsq(b3, x.f, n);
    assert_true(fabs(s1 - ref) <= 1e-12 * ref);
    assert_true(fabs(s3 - ref) <= 1e-12 * ref);
    double again = b3->ops->sumsq(b3, x.f, n);
    assert_memory_equal(&again, &s3, sizeof s3);
    assert_true(b3->ops->sumsq(b3, x.f, 0) == 0.0);
    float three[3] = {1.0f, -2.0f, 3.0f};
    assert_true(b3->ops->sumsq(b3, three, 3) == 14.0);
    pair_free(&x);
    cdl_backend_destroy(b1);
    cdl_backend_destroy(b3);
}

/* ------------------------------------------------------------ determinism and allocation */

typedef struct grads {
    float *dx, *dw, *db, *ldx, *ldw, *ldb;
} grads;

/* One conv2d and one linear backward pass (the batch-summed ops). */
static grads run_backward(cdl_backend *be, const cdl_conv2d_desc *d, const pair *x, const pair *w,
                          const pair *dy, int ln, int lin, int lout)
{
    size_t nx = x->n, nw = w->n;
    grads g = {cdl_calloc(nx, 4), cdl_calloc(nw, 4), cdl_calloc(d->oc, 4),
               cdl_calloc((size_t)ln * lin, 4), cdl_calloc((size_t)lout * lin, 4), cdl_calloc(lout, 4)};
    float *ws = cdl_calloc(be->ops->conv2d_workspace(be, d) + 1, 4);
    be->ops->conv2d_bwd(be, d, x->f, w->f, dy->f, g.dx, g.dw, g.db, ws);
    /* Reuse the conv tensors as linear ones: x is (ln,lin), w (lout,lin). */
    be->ops->linear_bwd(be, ln, lin, lout, x->f, w->f, dy->f, g.ldx, g.ldw, g.ldb, ws);
    cdl_free(ws);
    return g;
}

static void grads_free(grads *g)
{
    cdl_free(g->dx);
    cdl_free(g->dw);
    cdl_free(g->db);
    cdl_free(g->ldx);
    cdl_free(g->ldw);
    cdl_free(g->ldb);
}

static double max_rel_diff(const float *a, const float *b, size_t n)
{
    double m = 0.0, ref = 1.0;
    for (size_t i = 0; i < n; i++) {
        if (fabs(a[i] - b[i]) > m)
            m = fabs(a[i] - b[i]);
        if (fabs(b[i]) > ref)
            ref = fabs(b[i]);
    }
    return m / ref;
}

/* Depthwise convolutions (conv2d_dw.c), at stride 1 and 2, take the
 * depthwise loops, whose forward gives conv_dw_ref_fwd's bits, and give
 * the same bits on 1 and 3 threads: forward and dx per (image, channel),
 * dW and db summed per output channel in image order. */
static void test_depthwise_independent_of_threads(void **state)
{
    (void)state;
    const cdl_conv2d_desc shapes[] = {
        ref_conv_desc_full(5, 6, 10, 9, 12, 3, 3, 1, 1, 1, 1, 1, 1, 6),
        ref_conv_desc_full(5, 6, 10, 9, 12, 3, 3, 2, 2, 1, 1, 1, 1, 6),
        ref_conv_desc_full(3, 11, 17, 23, 11, 3, 3, 2, 2, 1, 1, 1, 1, 11),
    };
    cdl_conv2d_desc s5 = ref_conv_desc_full(1, 6, 20, 20, 6, 3, 3, 5, 5, 1, 1, 1, 1, 6);
    assert_false(conv_dw_supported(&s5));   /* 25 phase planes: im2col+SGEMM */
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const cdl_conv2d_desc d = shapes[si];
        assert_true(conv_dw_supported(&d));
        size_t nx = (size_t)d.n * d.c * d.h * d.w, nw = conv_nw(&d);
        size_t ny = (size_t)d.n * d.oc * d.oh * d.ow;
        pair x = pair_rand(nx, 95, -1, 1), w = pair_rand(nw, 96, -1, 1);
        pair b = pair_rand(d.oc, 97, -1, 1), dy = pair_rand(ny, 98, -1, 1);
        float *yref = cdl_calloc(ny, 4);
        conv_dw_ref_fwd(&d, x.f, w.f, b.f, yref);
        float *out[2][4];
        for (int t = 0; t < 2; t++) {
            cdl_backend *be = backend(t ? 3 : 1);
            float *ws = cdl_calloc(be->ops->conv2d_workspace(be, &d) + 1, sizeof *ws);
            float *y = cdl_calloc(ny, 4), *dx = cdl_calloc(nx, 4), *dw = cdl_calloc(nw, 4);
            float *db = cdl_calloc((size_t)d.oc, 4);
            assert_true(ws && y && dx && dw && db);
            be->ops->conv2d_fwd(be, &d, x.f, w.f, b.f, y, ws);
            be->ops->conv2d_bwd(be, &d, x.f, w.f, dy.f, dx, dw, db, ws);
            out[t][0] = y, out[t][1] = dx, out[t][2] = dw, out[t][3] = db;
            cdl_free(ws);
            cdl_backend_destroy(be);
        }
        assert_memory_equal(out[0][0], yref, ny * sizeof(float));
        const size_t sizes[4] = {ny, nx, nw, (size_t)d.oc};
        for (int i = 0; i < 4; i++) {
            assert_memory_equal(out[0][i], out[1][i], sizes[i] * sizeof(float));
            cdl_free(out[0][i]);
            cdl_free(out[1][i]);
        }
        cdl_free(yref);
        pair *all[] = {&x, &w, &b, &dy};
        for (size_t i = 0; i < 4; i++)
            pair_free(all[i]);
    }
}

static void test_backward_is_deterministic(void **state)
{
    (void)state;
    /* Under valgrind 16 images, not 64 (a quarter of the time; each of 3
     * threads still sums several images' dw): the linear part keeps its 64
     * rows, past LIN_RB, with lin and lout a quarter as large. */
    cdl_conv2d_desc d = ref_conv_desc((int)test_size(64, 16), 6, 14, 14, 16, 5, 5, 1, 0);
    size_t nx = (size_t)d.n * d.c * d.h * d.w, nw = (size_t)d.oc * d.c * 25;
    size_t ny = (size_t)d.n * d.oc * d.oh * d.ow;
    int ln = 64, lin = (int)(nx / 64), lout = (int)(ny / 64);
    pair x = pair_rand(nx, 91, -1, 1), w = pair_rand(nw > (size_t)lout * lin ? nw : (size_t)lout * lin, 92, -1, 1);
    pair dy = pair_rand(ny, 93, -1, 1);
    cdl_backend *b1 = backend(1), *b2 = backend(2), *b3 = backend(3);
    grads a = run_backward(b3, &d, &x, &w, &dy, ln, lin, lout);
    grads b = run_backward(b3, &d, &x, &w, &dy, ln, lin, lout);
    assert_memory_equal(a.dx, b.dx, nx * 4);
    assert_memory_equal(a.dw, b.dw, nw * 4);
    assert_memory_equal(a.db, b.db, (size_t)d.oc * 4);
    assert_memory_equal(a.ldx, b.ldx, (size_t)ln * lin * 4);
    assert_memory_equal(a.ldw, b.ldw, (size_t)lout * lin * 4);
    assert_memory_equal(a.ldb, b.ldb, (size_t)lout * 4);
    grads s = run_backward(b1, &d, &x, &w, &dy, ln, lin, lout);
    grads t = run_backward(b2, &d, &x, &w, &dy, ln, lin, lout);
    assert_true(max_rel_diff(s.dw, t.dw, nw) < 1e-6);
    assert_true(max_rel_diff(s.db, t.db, (size_t)d.oc) < 1e-6);
    assert_true(max_rel_diff(s.dx, t.dx, nx) < 1e-6);
    assert_true(max_rel_diff(s.ldw, t.ldw, (size_t)lout * lin) < 1e-6);
    assert_true(max_rel_diff(s.ldb, t.ldb, (size_t)lout) < 1e-6);
    grads *all[] = {&a, &b, &s, &t};
    for (size_t i = 0; i < 4; i++)
        grads_free(all[i]);
    pair_free(&x);
    pair_free(&w);
    pair_free(&dy);
    cdl_backend_destroy(b1);
    cdl_backend_destroy(b2);
    cdl_backend_destroy(b3);
}

/* Every op of a training step, called after all buffers exist: the
 * allocation counter must not move. */
static void test_ops_do_not_allocate(void **state)
{
    (void)state;
    cdl_backend *be = backend(2);
    const cdl_backend_ops *o = be->ops;
    cdl_conv2d_desc cd = ref_conv_desc(8, 3, 12, 12, 4, 3, 3, 1, 1);
    cdl_pool2d_desc pd = ref_pool_desc(8, 4, 12, 12, 2, 2, 0);
    size_t nx = 8 * 3 * 144, ny = 8 * 4 * 144, np = 8 * 4 * 36, nw = 4 * 27;
    size_t wsn = o->conv2d_workspace(be, &cd);
    if (o->linear_workspace(be, 8, 144, 10) > wsn)
        wsn = o->linear_workspace(be, 8, 144, 10);
    float *x = o->alloc(be, nx * 4), *y = o->alloc(be, ny * 4), *w = o->alloc(be, nw * 4);
    float *b = o->alloc(be, 16 * 4), *ws = o->alloc(be, (wsn + 1) * 4), *pl = o->alloc(be, np * 4);
    float *dx = o->alloc(be, nx * 4), *dy = o->alloc(be, ny * 4), *dw = o->alloc(be, nw * 4);
    float *db = o->alloc(be, 16 * 4), *lw = o->alloc(be, 1440 * 4), *ly = o->alloc(be, 80 * 4);
    float *m = o->alloc(be, 1440 * 4), *v = o->alloc(be, 1440 * 4), *loss = o->alloc(be, 8 * 4);
    int32_t *am = o->alloc(be, np * 4), *labels = o->alloc(be, 8 * 4), *pred = o->alloc(be, 8 * 4);
    uint8_t *mask = o->alloc(be, ny);
    assert_non_null(x);
    assert_non_null(mask);
    cdl_sgd_hparams sgd = {.lr = 0.1f, .momentum = 0.9f, .weight_decay = 1e-4f, .first_step = 1};
    cdl_adam_hparams adam = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .step = 1};

    uint64_t before = cdl_alloc_count();
    o->fill(be, x, 0.5f, nx);
    o->conv2d_fwd(be, &cd, x, w, b, y, ws);
    o->relu_fwd(be, ny, y, y);
    o->dropout_fwd(be, ny, 0.1f, 5, y, y, mask);
    o->maxpool_fwd(be, &pd, y, pl, am);
    o->avgpool_fwd(be, &pd, y, pl);
    o->linear_fwd(be, 8, 144, 10, pl, lw, b, ly, ws);
    o->xent_fwd_bwd(be, 8, 10, ly, labels, 0.125f, ly, loss, pred);
    o->linear_bwd(be, 8, 144, 10, pl, lw, ly, pl, m, b, ws);
    o->avgpool_bwd(be, &pd, pl, dy);
    o->maxpool_bwd(be, &pd, pl, am, dy);
    o->dropout_bwd(be, ny, 0.1f, mask, dy, dy);
    o->relu_bwd(be, ny, y, dy, dy);
    o->conv2d_bwd(be, &cd, x, w, dy, dx, dw, db, ws);
    o->sgd_step(be, nw, w, dw, v, &sgd);
    o->adam_step(be, 1440, lw, m, v, m, &adam);
    o->scale(be, dw, 0.5f, nw);
    (void)o->sumsq(be, dw, nw);
    o->copy(be, dx, x, nx * 4);
    o->to_host(be, dx, x, nx * 4);
    o->to_device(be, x, dx, nx * 4);
    assert_int_equal(o->sync(be), 0);
    assert_int_equal(cdl_alloc_count(), before);

    void *all[] = {x, y, w, b, ws, pl, dx, dy, dw, db, lw, ly, m, v, loss, am, labels, pred, mask};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        o->free(be, all[i]);
    cdl_backend_destroy(be);
}

int main(void)
{
    /* The float64 references' own gradients (finite differences): no
     * kernel runs there, so once is enough. */
    const struct CMUnitTest ref_tests[] = {
        cmocka_unit_test(test_ref_conv_gradients),
        cmocka_unit_test(test_ref_linear_gradients),
        cmocka_unit_test(test_ref_pool_gradients),
        cmocka_unit_test(test_ref_relu_gradient),
        cmocka_unit_test(test_ref_xent_gradient),
    };
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pool_runs_every_chunk_once),
        cmocka_unit_test(test_pool_flushes_subnormals),
        cmocka_unit_test(test_conv_bwd_chunks),
        cmocka_unit_test(test_depthwise_independent_of_threads),
        cmocka_unit_test(test_create_rejects_bad_thread_counts),
        cmocka_unit_test(test_conv2d_matches_reference),
        cmocka_unit_test(test_linear_matches_reference),
        cmocka_unit_test(test_pooling_matches_reference),
        cmocka_unit_test(test_maxpool_ties_pick_first),
        cmocka_unit_test(test_maxpool_3x3s2_ties_nan),
        cmocka_unit_test(test_eltwise_ops),
        cmocka_unit_test(test_xent_matches_reference),
        cmocka_unit_test(test_sgd_matches_torch),
        cmocka_unit_test(test_sgd_first_step_copies_gradient),
        cmocka_unit_test(test_adam_matches_torch),
        cmocka_unit_test(test_simd_paths_equal_portable),
        cmocka_unit_test(test_sumsq),
        cmocka_unit_test(test_backward_is_deterministic),
        cmocka_unit_test(test_ops_do_not_allocate),
    };
    /* Every test twice: with the AVX-512 or AVX2 kernels where the CPU has
     * them, and with the portable paths (C loops, im2col+SGEMM) forced. */
    int failed = cmocka_run_group_tests_name("kernels (references)", ref_tests, NULL, NULL);
    if (cpu_has_avx512())
        failed += cmocka_run_group_tests_name("kernels (AVX-512)", tests, NULL, NULL);
    else if (cpu_has_avx2())
        failed += cmocka_run_group_tests_name("kernels (AVX2)", tests, NULL, NULL);
    cpu_disable_avx512(1);
    failed += cmocka_run_group_tests_name("kernels (portable)", tests, NULL, NULL);
    cpu_disable_avx512(0);
    return failed;
}
