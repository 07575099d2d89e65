/* DDP gradient buckets: reduced by a communication thread while backward
 * runs, the result is bitwise what one allreduce of the whole gradient
 * buffer gives (the fixed summation order works element by element). And
 * the SyncBatchNorm hook (ddp_sync_sum), called in the middle of backward
 * while buckets are in flight, as a sync=true batchnorm2d does: its sums
 * are right and the buckets are not disturbed. */
#include "testutil.h"
#include "dist_fork.h"

#include <string.h>

#include <cdl/cdl.h>

#include "lib/train/ddp.h"

enum { BATCH = 8 };

/* Backward's callback: hands the range to ddp, then sums a few values over
 * the ranks through the model's hook, as SyncBatchNorm's backward would
 * between two layers. */
typedef struct hook_ctx {
    ddp *g;
    int rank, world, calls, bad;
} hook_ctx;

static void ready_then_sum(void *ctx, size_t offset, size_t count)
{
    hook_ctx *h = ctx;
    ddp_grad_ready(h->g, offset, count);
    float s[3] = {(float)(h->rank + 1), 1.0f, (float)h->calls};
    int w = h->world;
    if (ddp_sync_sum(h->g, s, 3) != 0 || s[0] != (float)(w * (w + 1) / 2) || s[1] != (float)w ||
        s[2] != (float)(w * h->calls))
        h->bad = 1;
    h->calls++;
}

/* One rank: forward/backward of LeNet on its own synthetic batch, gradients
 * averaged by ddp (tiny buckets: many of them, launched during backward)
 * and, for reference, by one allreduce of the whole buffer. */
static int ddp_rank(int rank, int world, void *arg)
{
    cdl_rank_info info;
    CHILD_CHECK(cdl_rank_discover(&info) == 0, "%s", cdl_last_error());
    cdl_dist *d = cdl_dist_create(&info, "shm", NULL, 30);
    CHILD_CHECK(d, "%s", cdl_last_error());
    cdl_backend *be = cdl_backend_cpu_create(1);
    CHILD_CHECK(be, "%s", cdl_last_error());
    cdl_model_spec spec;
    cdl_shape in = {1, 28, 28};
    CHILD_CHECK(cdl_spec_builtin("lenet", in, 10, &spec) == 0, "%s", cdl_last_error());
    cdl_model *m = cdl_model_create(&spec, in, BATCH, be);
    CHILD_CHECK(m, "%s", cdl_last_error());
    cdl_model_init(m, 7 + (uint64_t)rank);   /* different: the broadcast must fix it */
    ddp *g = ddp_create(d, m, (size_t)atol((const char *)arg) << 10);
    CHILD_CHECK(g && ddp_broadcast_params(g) == 0, "%s", cdl_last_error());
    size_t np = cdl_model_nparams(m);
    float *x = cdl_malloc(BATCH * 784 * sizeof *x), *dlogits = cdl_malloc(BATCH * 10 * sizeof *x);
    float *loss = cdl_malloc(BATCH * sizeof *loss), *want = cdl_malloc(np * sizeof *want);
    int32_t y[BATCH], pred[BATCH];
    CHILD_CHECK(x && dlogits && loss && want, "no memory");
    /* Under valgrind 2 samples and 2 steps: the same buckets, and a step
     * after the first still reuses them. */
    const int n = (int)test_size(BATCH, 2), steps = (int)test_size(3, 2);
    for (int step = 0; step < steps; step++) {
        for (size_t i = 0; i < (size_t)n * 784; i++)
            x[i] = test_value(rank * 10 + step, i);
        for (int i = 0; i < n; i++)
            y[i] = (rank * 3 + i + step) % 10;
        const float *logits = cdl_model_forward(m, x, n, 1, 0);
        be->ops->xent_fwd_bwd(be, n, 10, logits, y, 1.0f / (float)n, dlogits, loss, pred);
        cdl_model_backward(m, dlogits, NULL, NULL);
        memcpy(want, cdl_model_grads(m), np * sizeof *want);
        CHILD_CHECK(cdl_dist_allreduce(d, want, np, 1) == 0, "%s", cdl_last_error());
        hook_ctx hk = {.g = g, .rank = rank, .world = world};
        cdl_model_backward(m, dlogits, ready_then_sum, &hk);
        CHILD_CHECK(ddp_finish(g) == 0, "%s", cdl_last_error());
        CHILD_CHECK(hk.calls > 0 && !hk.bad, "step %d: the sync hook summed wrongly (%d calls)",
                    step, hk.calls);
        CHILD_CHECK(!memcmp(want, cdl_model_grads(m), np * sizeof *want),
                    "step %d: bucketed gradients differ from one allreduce", step);
        /* Parameters stay equal on all ranks: gather a checksum. */
        uint64_t h = 1469598103934665603ull, all[64];
        const unsigned char *p = (const unsigned char *)cdl_model_params(m);
        for (size_t i = 0; i < np * sizeof(float); i++)
            h = (h ^ p[i]) * 1099511628211ull;
        CHILD_CHECK(cdl_dist_allgather(d, &h, all, sizeof h) == 0, "%s", cdl_last_error());
        for (int r = 0; r < world; r++)
            CHILD_CHECK(all[r] == h, "rank %d has other parameters", r);
    }
    cdl_free(x);
    cdl_free(dlogits);
    cdl_free(loss);
    cdl_free(want);
    ddp_free(g);
    cdl_model_destroy(m);
    cdl_backend_destroy(be);
    cdl_dist_destroy(d);
    return 0;
}

static void test_buckets_equal_one_allreduce(void **state)
{
    (void)state;
    const char *kb[] = {"4", "64", "25600"};   /* many buckets, a few, one */
    for (int world = 2; world <= 3; world++)
        for (int k = 0; k < 3; k++)
            if (run_world(world, ddp_rank, (void *)kb[k], guard_s(60)))
                fail_msg("ddp on %d ranks with %s KB buckets failed", world, kb[k]);
}

/* One rank: every call is a no-op. */
static void test_single_rank_noop(void **state)
{
    (void)state;
    ddp *g = ddp_create(NULL, NULL, 0);
    assert_non_null(g);
    assert_int_equal(ddp_broadcast_params(g), 0);
    ddp_grad_ready(g, 0, 10);
    assert_int_equal(ddp_finish(g), 0);
    float s[2] = {1.5f, -2.0f};
    assert_int_equal(ddp_sync_sum(g, s, 2), 0);
    assert_true(s[0] == 1.5f && s[1] == -2.0f);
    assert_int_equal(ddp_broadcast_buffers(g), 0);
    ddp_free(g);
}

int main(void)
{
    clear_launcher_env();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_buckets_equal_one_allreduce),
        cmocka_unit_test(test_single_rank_noop),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
