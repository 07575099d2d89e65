/* The CUDA backend's own kernels, run on the CPU through tests/fakegpu/emu.h
 * (no GPU needed), against the CPU backend op by op.
 *
 * Pooling, ReLU, dropout, fill, scale and the optimizer updates perform the
 * same float operations in the same order as the CPU backend, so they must
 * agree bit for bit (emulated code is compiled without FMA contraction, like
 * the CPU backend; on a GPU, FMA makes the optimizers differ by an ulp, which
 * tests/gpu/ops_vs_cpu.c allows for). The cross-entropy and the reductions
 * sum in another order and are compared by normalised error.
 */
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#include <cdl/cdl.h>

#include "tests/test_rng.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/scalars.h"

static cdl_backend *cpu;

static int setup(void **state)
{
    (void)state;
    cpu = cdl_backend_cpu_create(1);
    return cpu ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    cdl_backend_destroy(cpu);
    return 0;
}

/* Uniform in [lo, hi); seeded once in main. */
static rng_state rng;
static double urand(double lo, double hi)
{
    return test_uniform(&rng, lo, hi);
}

/* Test buffers come from plain malloc, sized exactly, so valgrind (make
 * check-valgrind) catches a kernel that reads or writes one element past
 * the end (cdl_malloc rounds up to 64 bytes). */
static float *frand(size_t n, double lo, double hi)
{
    float *x = malloc(n * sizeof *x);
    assert_non_null(x);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)urand(lo, hi);
    return x;
}

/* Small integers: many ties for max pooling. */
static float *irand(size_t n, int span)
{
    float *x = malloc(n * sizeof *x);
    assert_non_null(x);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)((int)urand(0, span) - span / 2);
    return x;
}

static float *fzero(size_t n)
{
    float *x = calloc(n, sizeof *x);
    assert_non_null(x);
    return x;
}

static void assert_same_bits(const void *a, const void *b, size_t bytes, const char *what)
{
    if (memcmp(a, b, bytes) != 0) {
        const float *fa = a, *fb = b;
        for (size_t i = 0; i < bytes / 4; i++)
            if (memcmp(fa + i, fb + i, 4)) {
                print_error("%s: element %zu: emulated %.9g, CPU %.9g\n", what, i,
                            (double)fa[i], (double)fb[i]);
                break;
            }
        fail_msg("%s differs from the CPU backend", what);
    }
}

static double norm_err(const float *a, const float *b, size_t n)
{
    double *bd = malloc(n * sizeof *bd);
    assert_non_null(bd);
    for (size_t i = 0; i < n; i++)
        bd[i] = b[i];
    double e = test_norm_err(a, bd, n);
    free(bd);
    return e;
}

static cdl_pool2d_desc pool_desc(int n, int c, int h, int w, int k, int stride, int pad)
{
    cdl_pool2d_desc d = {n, c, h, w, k, stride, pad, (h + 2 * pad - k) / stride + 1,
                         (w + 2 * pad - k) / stride + 1};
    return d;
}

static const int pool_shapes[][7] = {
    {2, 3, 9, 7, 2, 2, 0},   /* the seed CNN's pooling, odd width */
    {2, 2, 8, 8, 3, 2, 1},   /* overlapping windows with padding */
    {1, 2, 7, 9, 3, 1, 1},   /* stride 1: every input in up to 9 windows */
    {1, 1, 5, 6, 5, 3, 2},   /* windows larger than the stride, pad k/2 */
};

static void test_maxpool(void **state)
{
    (void)state;
    for (size_t s = 0; s < sizeof pool_shapes / sizeof pool_shapes[0]; s++) {
        const int *p = pool_shapes[s];
        cdl_pool2d_desc d = pool_desc(p[0], p[1], p[2], p[3], p[4], p[5], p[6]);
        size_t nin = (size_t)d.n * d.c * d.h * d.w, nout = (size_t)d.n * d.c * d.oh * d.ow;
        float *x = irand(nin, 5);
        if (s == 1) {
            x[3] = NAN;          /* NaN wins its windows */
            x[10] = -INFINITY;
        }
        float *y_gpu = fzero(nout), *y_cpu = fzero(nout);
        int32_t *am_gpu = calloc(nout, 4), *am_cpu = calloc(nout, 4);
        assert_int_equal(cuk_maxpool_fwd(NULL, d, x, y_gpu, am_gpu), cudaSuccess);
        cpu->ops->maxpool_fwd(cpu, &d, x, y_cpu, am_cpu);
        assert_same_bits(y_gpu, y_cpu, nout * 4, "maxpool_fwd y");
        assert_memory_equal(am_gpu, am_cpu, nout * 4);

        float *dy = frand(nout, -1, 1), *dx_gpu = fzero(nin), *dx_cpu = fzero(nin);
        assert_int_equal(cuk_maxpool_bwd(NULL, d, dy, am_cpu, dx_gpu), cudaSuccess);
        cpu->ops->maxpool_bwd(cpu, &d, dy, am_cpu, dx_cpu);
        assert_same_bits(dx_gpu, dx_cpu, nin * 4, "maxpool_bwd dx");
        free(x), free(y_gpu), free(y_cpu), free(am_gpu), free(am_cpu);
        free(dy), free(dx_gpu), free(dx_cpu);
    }
}

static void test_avgpool(void **state)
{
    (void)state;
    for (size_t s = 0; s < sizeof pool_shapes / sizeof pool_shapes[0]; s++) {
        const int *p = pool_shapes[s];
        cdl_pool2d_desc d = pool_desc(p[0], p[1], p[2], p[3], p[4], p[5], p[6]);
        size_t nin = (size_t)d.n * d.c * d.h * d.w, nout = (size_t)d.n * d.c * d.oh * d.ow;
        float *x = frand(nin, -2, 2), *y_gpu = fzero(nout), *y_cpu = fzero(nout);
        assert_int_equal(cuk_avgpool_fwd(NULL, d, x, y_gpu), cudaSuccess);
        cpu->ops->avgpool_fwd(cpu, &d, x, y_cpu);
        assert_same_bits(y_gpu, y_cpu, nout * 4, "avgpool_fwd y");
        float *dy = frand(nout, -1, 1), *dx_gpu = fzero(nin), *dx_cpu = fzero(nin);
        assert_int_equal(cuk_avgpool_bwd(NULL, d, dy, dx_gpu), cudaSuccess);
        cpu->ops->avgpool_bwd(cpu, &d, dy, dx_cpu);
        assert_same_bits(dx_gpu, dx_cpu, nin * 4, "avgpool_bwd dx");
        free(x), free(y_gpu), free(y_cpu), free(dy), free(dx_gpu);
        free(dx_cpu);
    }
}

static void test_relu(void **state)
{
    (void)state;
    size_t n = 1000;
    float *x = frand(n, -1, 1);
    x[0] = NAN;
    x[1] = -0.0f;
    x[2] = 0.0f;
    float *y_gpu = fzero(n), *y_cpu = fzero(n);
    assert_int_equal(cuk_relu_fwd(NULL, n, x, y_gpu), cudaSuccess);
    cpu->ops->relu_fwd(cpu, n, x, y_cpu);
    assert_same_bits(y_gpu, y_cpu, n * 4, "relu_fwd");
    /* In place: dx aliases dy. */
    float *g_gpu = frand(n, -1, 1), *g_cpu = fzero(n);
    memcpy(g_cpu, g_gpu, n * 4);
    assert_int_equal(cuk_relu_bwd(NULL, n, y_cpu, g_gpu, g_gpu), cudaSuccess);
    cpu->ops->relu_bwd(cpu, n, y_cpu, g_cpu, g_cpu);
    assert_same_bits(g_gpu, g_cpu, n * 4, "relu_bwd");
    free(x), free(y_gpu), free(y_cpu), free(g_gpu), free(g_cpu);
}

static void test_dropout(void **state)
{
    (void)state;
    const float ps[] = {0.0f, 0.3f, 0.5f, 1.0f};
    size_t n = 3001;
    for (size_t k = 0; k < 4; k++) {
        uint64_t seed = 12345 + k * 977;
        float *x = frand(n, -1, 1), *y_gpu = fzero(n), *y_cpu = fzero(n);
        uint8_t *m_gpu = calloc(n, 1), *m_cpu = calloc(n, 1);
        cuk_drop_sc sc = cbe_dropout_scalars(ps[k], seed);
        assert_int_equal(cuk_dropout_fwd(NULL, n, x, y_gpu, m_gpu, sc, NULL), cudaSuccess);
        cpu->ops->dropout_fwd(cpu, n, ps[k], seed, x, y_cpu, m_cpu);
        assert_memory_equal(m_gpu, m_cpu, n);
        assert_same_bits(y_gpu, y_cpu, n * 4, "dropout_fwd");
        float *dy = frand(n, -1, 1), *dx_gpu = fzero(n), *dx_cpu = fzero(n);
        /* The scalars by device pointer (graph replay) give the same. */
        assert_int_equal(cuk_dropout_bwd(NULL, n, m_cpu, dy, dx_gpu, cbe_dropout_scalars(0, 0), &sc),
                         cudaSuccess);
        cpu->ops->dropout_bwd(cpu, n, ps[k], m_cpu, dy, dx_cpu);
        assert_same_bits(dx_gpu, dx_cpu, n * 4, "dropout_bwd");
        free(x), free(y_gpu), free(y_cpu), free(m_gpu), free(m_cpu);
        free(dy), free(dx_gpu), free(dx_cpu);
    }
}

static void test_fill_scale(void **state)
{
    (void)state;
    size_t n = 777;
    float *a = frand(n, -3, 3), *b = fzero(n);
    memcpy(b, a, n * 4);
    cuk_val_sc v = {0.37f};
    assert_int_equal(cuk_scale(NULL, a, n, v, NULL), cudaSuccess);
    cpu->ops->scale(cpu, b, 0.37f, n);
    assert_same_bits(a, b, n * 4, "scale");
    cuk_val_sc w = {-2.5f};
    assert_int_equal(cuk_fill(NULL, a, n - 1, v, &w), cudaSuccess);
    cpu->ops->fill(cpu, b, -2.5f, n - 1);
    assert_same_bits(a, b, n * 4, "fill");
    free(a), free(b);
}

static void test_xent(void **state)
{
    (void)state;
    const int classes[] = {10, 1, 33, 100};
    int n = 37;
    for (size_t k = 0; k < 4; k++) {
        int c = classes[k];
        size_t nz = (size_t)n * c;
        float *z = frand(nz, -8, 8);
        int32_t *labels = calloc((size_t)n, 4);
        for (int i = 0; i < n; i++)
            labels[i] = (int32_t)urand(0, c);
        labels[5] = c;                  /* out of range: NaN loss */
        labels[6] = -1;                 /* ignored: loss 0, dlogits row 0 */
        if (c >= 3) {                   /* a tie: the first maximum is the prediction */
            z[2 * c + 1] = 20.0f;
            z[2 * c + 2] = 20.0f;
        }
        float *dz_gpu = fzero(nz), *dz_cpu = fzero(nz), *l_gpu = fzero(n), *l_cpu = fzero(n);
        int32_t *p_gpu = calloc((size_t)n, 4), *p_cpu = calloc((size_t)n, 4);
        cuk_xent_sc sc = {.grad_scale = 1.0f / (float)n};
        assert_int_equal(cuk_xent(NULL, n, c, z, labels, dz_gpu, l_gpu, p_gpu, sc, NULL),
                         cudaSuccess);
        cpu->ops->xent_fwd_bwd(cpu, n, c, z, labels, 1.0f / (float)n, dz_cpu, l_cpu, p_cpu);
        assert_memory_equal(p_gpu, p_cpu, (size_t)n * 4);
        if (c >= 3)
            assert_int_equal(p_gpu[2], 1);
        assert_true(isnan(l_gpu[5]) && isnan(l_cpu[5]));
        l_gpu[5] = l_cpu[5] = 0;
        assert_true(l_gpu[6] == 0.0f && p_gpu[6] == p_cpu[6]);
        for (int j = 0; j < c; j++)
            assert_true(dz_gpu[6 * (size_t)c + j] == 0.0f);
        assert_true(norm_err(l_gpu, l_cpu, (size_t)n) < 1e-6);
        assert_true(norm_err(dz_gpu, dz_cpu, nz) < 1e-6);
        free(z), free(labels), free(dz_gpu), free(dz_cpu), free(l_gpu);
        free(l_cpu), free(p_gpu), free(p_cpu);
    }
}

static const int no_hold = 0;   /* hold_updates not set: the updates go through */

static void test_sgd(void **state)
{
    (void)state;
    const cdl_sgd_hparams hps[] = {
        {.lr = 0.1f},
        {.lr = 0.05f, .momentum = 0.9f, .weight_decay = 5e-4f},
        {.lr = 0.05f, .momentum = 0.9f, .dampening = 0.1f, .nesterov = 1, .weight_decay = 1e-2f},
    };
    size_t n = 2049;
    for (size_t k = 0; k < 3; k++) {
        float *p_gpu = frand(n, -1, 1), *p_cpu = fzero(n), *b_gpu = fzero(n), *b_cpu = fzero(n);
        memcpy(p_cpu, p_gpu, n * 4);
        for (int step = 0; step < 3; step++) {
            float *g = frand(n, -1, 1);
            cdl_sgd_hparams hp = hps[k];
            hp.first_step = step == 0;
            assert_int_equal(cuk_sgd(NULL, n, p_gpu, g, b_gpu, &no_hold, kern_sgd_scalars(&hp), NULL),
                             cudaSuccess);
            cpu->ops->sgd_step(cpu, n, p_cpu, g, b_cpu, &hp);
            free(g);
        }
        assert_same_bits(p_gpu, p_cpu, n * 4, "sgd params");
        assert_same_bits(b_gpu, b_cpu, n * 4, "sgd momentum");
        free(p_gpu), free(p_cpu), free(b_gpu), free(b_cpu);
    }
}

static void test_adam(void **state)
{
    (void)state;
    size_t n = 1500;
    for (int decoupled = 0; decoupled < 2; decoupled++) {
        float *p_gpu = frand(n, -1, 1), *p_cpu = fzero(n);
        float *m_gpu = fzero(n), *m_cpu = fzero(n), *v_gpu = fzero(n), *v_cpu = fzero(n);
        memcpy(p_cpu, p_gpu, n * 4);
        for (long step = 1; step <= 3; step++) {
            float *g = frand(n, -1, 1);
            cdl_adam_hparams hp = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                                   .weight_decay = decoupled ? 1e-2f : 1e-4f,
                                   .decoupled = decoupled, .step = step};
            assert_int_equal(cuk_adam(NULL, n, p_gpu, g, m_gpu, v_gpu, &no_hold,
                                      kern_adam_scalars(&hp), NULL),
                             cudaSuccess);
            cpu->ops->adam_step(cpu, n, p_cpu, g, m_cpu, v_cpu, &hp);
            free(g);
        }
        assert_same_bits(p_gpu, p_cpu, n * 4, "adam params");
        assert_same_bits(m_gpu, m_cpu, n * 4, "adam exp_avg");
        assert_same_bits(v_gpu, v_cpu, n * 4, "adam exp_avg_sq");
        free(p_gpu), free(p_cpu), free(m_gpu), free(m_cpu), free(v_gpu);
        free(v_cpu);
    }
}

/* cuk_hold (hold_updates): a squared norm whose float norm is not finite
 * (NaN, infinite, 2e77: beyond a float) sets the hold, a finite one leaves
 * it as it is (0, or set); held, SGD and Adam change neither p nor the
 * state. */
static void test_hold(void **state)
{
    (void)state;
    const double sqs[] = {NAN, INFINITY, 2e77, 1e76, 4.0};
    const int want[] = {1, 1, 1, 0, 0};
    for (int k = 0; k < 5; k++) {
        int hold = 0;
        assert_int_equal(cuk_hold(NULL, &sqs[k], &hold), cudaSuccess);
        assert_int_equal(hold, want[k]);
        hold = 1;
        assert_int_equal(cuk_hold(NULL, &sqs[k], &hold), cudaSuccess);
        assert_int_equal(hold, 1);
    }
    size_t n = 1001;
    float *p = frand(n, -1, 1), *m = frand(n, -1, 1), *v = frand(n, 0, 1), *g = frand(n, -1, 1);
    float *p0 = fzero(n), *m0 = fzero(n), *v0 = fzero(n);
    memcpy(p0, p, n * 4), memcpy(m0, m, n * 4), memcpy(v0, v, n * 4);
    g[7] = NAN;
    const int held = 1;
    cdl_adam_hparams hp = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                           .weight_decay = 1e-2f, .decoupled = 1, .step = 2};
    cdl_sgd_hparams sp = {.lr = 0.05f, .momentum = 0.9f, .weight_decay = 5e-4f};
    assert_int_equal(cuk_adam(NULL, n, p, g, m, v, &held, kern_adam_scalars(&hp), NULL),
                     cudaSuccess);
    assert_int_equal(cuk_sgd(NULL, n, p, g, m, &held, kern_sgd_scalars(&sp), NULL), cudaSuccess);
    assert_same_bits(p, p0, n * 4, "held params");
    assert_same_bits(m, m0, n * 4, "held exp_avg / momentum");
    assert_same_bits(v, v0, n * 4, "held exp_avg_sq");
    free(p), free(m), free(v), free(g), free(p0), free(m0), free(v0);
}

static void test_sumsq(void **state)
{
    (void)state;
    const size_t sizes[] = {1, 1000, 100003};
    double partials[CUK_SUMSQ_BLOCKS], out = -1, again = -2;
    for (size_t k = 0; k < 3; k++) {
        size_t n = sizes[k];
        float *x = frand(n, -2, 2);
        assert_int_equal(cuk_sumsq(NULL, x, n, partials, &out, 0), cudaSuccess);
        double want = cpu->ops->sumsq(cpu, x, n);
        assert_true(fabs(out - want) <= 1e-12 * want);
        if (k == 2) {   /* fixed order: the same bits every time */
            assert_int_equal(cuk_sumsq(NULL, x, n, partials, &again, 0), cudaSuccess);
            assert_memory_equal(&out, &again, sizeof out);
        }
        free(x);
    }
}

static void test_bias(void **state)
{
    (void)state;
    /* NCHW: 130 images exceed the 64 image groups; a tiny partials budget
     * forces fewer groups. */
    const int shapes[][4] = {{3, 5, 49, 4096}, {130, 2, 3, 4096}, {70, 9, 10, 20}};
    for (size_t k = 0; k < 3; k++) {
        int n = shapes[k][0], c = shapes[k][1], plane = shapes[k][2];
        size_t total = (size_t)n * c * plane;
        float *y = frand(total, -1, 1), *b = frand((size_t)c, -1, 1), *want = fzero(total);
        for (size_t i = 0; i < total; i++)
            want[i] = y[i] + b[(i / (size_t)plane) % (size_t)c];
        assert_int_equal(cuk_bias_add_nchw(NULL, y, b, n, c, plane), cudaSuccess);
        assert_same_bits(y, want, total * 4, "bias_add_nchw");
        size_t max_partials = (size_t)shapes[k][3];
        float *db = fzero((size_t)c), *partials = fzero(max_partials);
        double *ref = calloc((size_t)c, sizeof *ref);
        for (size_t i = 0; i < total; i++)
            ref[(i / (size_t)plane) % (size_t)c] += y[i];
        assert_int_equal(cuk_bias_grad_nchw(NULL, y, db, n, c, plane, partials, max_partials),
                         cudaSuccess);
        assert_true(test_norm_err(db, ref, (size_t)c) < 1e-5);
        free(y), free(b), free(want), free(db), free(partials), free(ref);
    }
    /* Rows: 45 columns span two column blocks; 70 rows, 16 row lanes. */
    int rows = 70, cols = 45;
    size_t total = (size_t)rows * cols;
    float *y = frand(total, -1, 1), *b = frand((size_t)cols, -1, 1), *want = fzero(total);
    for (size_t i = 0; i < total; i++)
        want[i] = y[i] + b[i % (size_t)cols];
    assert_int_equal(cuk_bias_add_rows(NULL, y, b, rows, cols), cudaSuccess);
    assert_same_bits(y, want, total * 4, "bias_add_rows");
    float *db = fzero((size_t)cols);
    double *ref = calloc((size_t)cols, sizeof *ref);
    for (size_t i = 0; i < total; i++)
        ref[i % (size_t)cols] += y[i];
    assert_int_equal(cuk_bias_grad_rows(NULL, y, db, rows, cols), cudaSuccess);
    assert_true(test_norm_err(db, ref, (size_t)cols) < 1e-5);
    free(y), free(b), free(want), free(db), free(ref);
}

/* A launch the GPU would refuse is refused here too (the error path the
 * backend's check wrappers report). */
static void test_bad_launch(void **state)
{
    (void)state;
    float db[1] = {0};
    assert_int_equal(cuk_bias_grad_rows(NULL, db, db, 1, 0), cudaErrorInvalidConfiguration);
}

int main(void)
{
    rng_seed(&rng, 0x9e3779b97f4a7c15ull);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_maxpool),    cmocka_unit_test(test_avgpool),
        cmocka_unit_test(test_relu),       cmocka_unit_test(test_dropout),
        cmocka_unit_test(test_fill_scale), cmocka_unit_test(test_xent),
        cmocka_unit_test(test_sgd),        cmocka_unit_test(test_adam),
        cmocka_unit_test(test_hold),
        cmocka_unit_test(test_sumsq),      cmocka_unit_test(test_bias),
        cmocka_unit_test(test_bad_launch),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
