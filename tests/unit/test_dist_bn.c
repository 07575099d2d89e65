/* BatchNorm under data parallelism (lib/train/ddp.c), 2 forked ranks on the
 * shm collectives, each step as the harness runs it (ddp_broadcast_buffers,
 * forward, backward with the gradient buckets, ddp_finish, the update):
 *
 * - batchnorm2d: PyTorch DDP's semantics. Each rank normalises with its own
 *   batch and updates its own running statistics; at the start of every
 *   training forward rank 0's buffers are broadcast (broadcast_buffers).
 *   Compared bitwise with a single-process emulation of exactly that (two
 *   model replicas, rank 0's buffers copied to replica 1 before each
 *   forward, gradients averaged as (g0 + g1) / 2, which is what the
 *   fixed-order allreduce of 2 ranks computes). It fails if the buffers
 *   are not broadcast (replica 1's statistics differ) or if the statistics
 *   were reduced over the ranks (the gradients differ).
 * - batchnorm2d sync=true: SyncBatchNorm. The statistics are summed over
 *   the ranks through the model's allreduce hook, so 2 ranks of B/2 samples
 *   train like one process on the B samples: parameters and buffers after
 *   STEPS steps within 1e-6 of the parameters' change (another summation
 *   order; docs/hacking.md). It fails without the hook (each rank's own
 *   statistics).
 *
 * The model is smooth (no ReLU or max-pool) so that a rounding difference
 * cannot flip a branch. */
#include "testutil.h"
#include "dist_fork.h"

#include <string.h>

#include <cdl/cdl.h>

#include "lib/train/ddp.h"

enum { BATCH = 8, C = 3, H = 8, W = 8, CLASSES = 5, STEPS = 3 };

static const char *SPEC_PLAIN =
    "input 3x8x8\nconv2d 4 kernel=3 padding=1\nbatchnorm2d\navgpool2d 2\n"
    "conv2d 6 kernel=3 bias=false\nbatchnorm2d momentum=0.3\nflatten\nlinear 5\n";
static const char *SPEC_SYNC =
    "input 3x8x8\nconv2d 4 kernel=3 padding=1\nbatchnorm2d sync=true\navgpool2d 2\n"
    "conv2d 6 kernel=3 bias=false\nbatchnorm2d momentum=0.3 sync=true\nflatten\nlinear 5\n";

typedef struct replica {
    cdl_backend *be;
    cdl_model *m;
    cdl_optim *o;
    float *dlogits, *loss;
    int32_t pred[BATCH];
} replica;

static int replica_make(replica *r, const char *text, int batch)
{
    cdl_model_spec spec;
    cdl_optim_config oc = cdl_optim_defaults(CDL_OPTIM_SGD);
    oc.momentum = 0.9f;
    if (cdl_spec_parse(text, "test_dist_bn", &spec) || !(r->be = cdl_backend_cpu_create(1)) ||
        !(r->m = cdl_model_create(&spec, spec.input, batch, r->be)) ||
        !(r->o = cdl_optim_create(&oc, cdl_model_nparams(r->m), r->be)))
        return -1;
    cdl_model_init(r->m, 3);
    r->dlogits = cdl_malloc((size_t)batch * CLASSES * sizeof(float));
    r->loss = cdl_malloc((size_t)batch * sizeof(float));
    return r->dlogits && r->loss ? 0 : -1;
}

static void replica_free(replica *r)
{
    cdl_free(r->dlogits);
    cdl_free(r->loss);
    cdl_optim_destroy(r->o);
    cdl_model_destroy(r->m);
    cdl_backend_destroy(r->be);
}

/* Rank r's batch of step s: BATCH samples; the combined batch is rank 0's
 * then rank 1's. */
static void batch_of(int r, int s, float *x, int32_t *y, int n)
{
    for (size_t i = 0; i < (size_t)n * C * H * W; i++)
        x[i] = test_value(r * 100 + s, i) * (1.0f + 0.5f * (float)r);
    for (int i = 0; i < n; i++)
        y[i] = (r * 3 + i * 2 + s) % CLASSES;
}

/* Forward (train) and backward of one replica; cb as in cdl_model_backward. */
static int fwd_bwd(replica *r, const float *x, const int32_t *y, int n, cdl_grad_ready_fn cb,
                   void *ctx)
{
    const float *logits = cdl_model_forward(r->m, x, n, 1, 0);
    if (!logits)
        return -1;
    r->be->ops->xent_fwd_bwd(r->be, n, CLASSES, logits, y, 1.0f / (float)n, r->dlogits, r->loss,
                             r->pred);
    cdl_model_backward(r->m, r->dlogits, cb, ctx);
    return 0;
}

/* Max |a - b| over max(|c - b|, tiny): a and b against the change from c. */
static double rel_to_change(const float *a, const float *b, const float *c, size_t n)
{
    double d = 0, ref = 1e-30;
    for (size_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - b[i]));
        ref = fmax(ref, fabs((double)b[i] - c[i]));
    }
    return d / ref;
}

/* DDP semantics: the real 2-rank run against the emulation, bitwise. */
static int plain_rank(int rank, int world, void *arg)
{
    (void)arg;
    cdl_rank_info info;
    CHILD_CHECK(world == 2 && cdl_rank_discover(&info) == 0, "%s", cdl_last_error());
    cdl_dist *d = cdl_dist_create(&info, "shm", NULL, 30);
    CHILD_CHECK(d, "%s", cdl_last_error());
    replica me = {0}, e[2] = {{0}};
    CHILD_CHECK(replica_make(&me, SPEC_PLAIN, BATCH) == 0 && replica_make(&e[0], SPEC_PLAIN, BATCH) == 0 &&
                    replica_make(&e[1], SPEC_PLAIN, BATCH) == 0,
                "%s", cdl_last_error());
    CHILD_CHECK(cdl_model_nbuffers(me.m) == 6, "the model has %d buffers, not 6",
                cdl_model_nbuffers(me.m));
    ddp *g = ddp_create(d, me.m, 1 << 10);   /* small buckets: the thread overlaps */
    CHILD_CHECK(g && ddp_broadcast_params(g) == 0, "%s", cdl_last_error());
    size_t np = cdl_model_nparams(me.m), nb = cdl_model_nbuffer_floats(me.m);
    float x[BATCH * C * H * W];
    int32_t y[BATCH];
    for (int s = 0; s < STEPS; s++) {
        CHILD_CHECK(ddp_broadcast_buffers(g) == 0, "%s", cdl_last_error());
        batch_of(rank, s, x, y, BATCH);
        CHILD_CHECK(fwd_bwd(&me, x, y, BATCH, ddp_grad_ready, g) == 0 && ddp_finish(g) == 0, "%s",
                    cdl_last_error());
        cdl_optim_step(me.o, cdl_model_params(me.m), cdl_model_grads(me.m), 0.1f);

        memcpy(cdl_model_buffers(e[1].m), cdl_model_buffers(e[0].m), nb * sizeof(float));
        for (int r = 0; r < 2; r++) {
            batch_of(r, s, x, y, BATCH);
            CHILD_CHECK(fwd_bwd(&e[r], x, y, BATCH, NULL, NULL) == 0, "%s", cdl_last_error());
        }
        float *g0 = cdl_model_grads(e[0].m), *g1 = cdl_model_grads(e[1].m);
        for (size_t i = 0; i < np; i++)
            g0[i] = g1[i] = (g0[i] + g1[i]) / 2;
        for (int r = 0; r < 2; r++)
            cdl_optim_step(e[r].o, cdl_model_params(e[r].m), cdl_model_grads(e[r].m), 0.1f);

        CHILD_CHECK(!memcmp(cdl_model_params(me.m), cdl_model_params(e[rank].m), np * sizeof(float)),
                    "step %d: parameters differ from the emulation of PyTorch DDP", s);
        CHILD_CHECK(!memcmp(cdl_model_buffers(me.m), cdl_model_buffers(e[rank].m), nb * sizeof(float)),
                    "step %d: buffers differ from the emulation (own batch statistics, rank 0's "
                    "buffers at each forward)", s);
    }
    /* The ranks' own statistics differ: the check above could fail. */
    CHILD_CHECK(memcmp(cdl_model_buffers(e[0].m), cdl_model_buffers(e[1].m), nb * sizeof(float)),
                "both replicas ended with the same running statistics: the test shows nothing");
    ddp_free(g);
    replica_free(&me);
    replica_free(&e[0]);
    replica_free(&e[1]);
    cdl_dist_destroy(d);
    return 0;
}

/* SyncBatchNorm: 2 ranks of BATCH/2 against one process on BATCH. */
static int sync_rank(int rank, int world, void *arg)
{
    (void)arg;
    cdl_rank_info info;
    CHILD_CHECK(world == 2 && cdl_rank_discover(&info) == 0, "%s", cdl_last_error());
    cdl_dist *d = cdl_dist_create(&info, "shm", NULL, 30);
    CHILD_CHECK(d, "%s", cdl_last_error());
    enum { HALF = BATCH / 2 };
    replica me = {0}, one = {0};
    CHILD_CHECK(replica_make(&me, SPEC_SYNC, HALF) == 0 && replica_make(&one, SPEC_SYNC, BATCH) == 0,
                "%s", cdl_last_error());
    ddp *g = ddp_create(d, me.m, 1 << 10);
    CHILD_CHECK(g && ddp_broadcast_params(g) == 0, "%s", cdl_last_error());
    size_t np = cdl_model_nparams(me.m), nb = cdl_model_nbuffer_floats(me.m);
    float *w0 = cdl_malloc(np * sizeof *w0), *b0 = cdl_malloc(nb * sizeof *b0);
    CHILD_CHECK(w0 && b0, "no memory");
    memcpy(w0, cdl_model_params(one.m), np * sizeof *w0);
    memcpy(b0, cdl_model_buffers(one.m), nb * sizeof *b0);
    float x[BATCH * C * H * W];
    int32_t y[BATCH];
    for (int s = 0; s < STEPS; s++) {
        /* The combined batch: rank 0's half, then rank 1's. */
        for (int r = 0; r < 2; r++)
            batch_of(r, s, x + (size_t)r * HALF * C * H * W, y + r * HALF, HALF);
        CHILD_CHECK(ddp_broadcast_buffers(g) == 0, "%s", cdl_last_error());
        CHILD_CHECK(fwd_bwd(&me, x + (size_t)rank * HALF * C * H * W, y + rank * HALF, HALF,
                            ddp_grad_ready, g) == 0 && ddp_finish(g) == 0,
                    "%s", cdl_last_error());
        cdl_optim_step(me.o, cdl_model_params(me.m), cdl_model_grads(me.m), 0.1f);
        CHILD_CHECK(fwd_bwd(&one, x, y, BATCH, NULL, NULL) == 0, "%s", cdl_last_error());
        cdl_optim_step(one.o, cdl_model_params(one.m), cdl_model_grads(one.m), 0.1f);
    }
    double dw = rel_to_change(cdl_model_params(me.m), cdl_model_params(one.m), w0, np);
    double db = rel_to_change(cdl_model_buffers(me.m), cdl_model_buffers(one.m), b0, nb);
    if (rank == 0)
        fprintf(stderr, "sync=true, 2 ranks vs one process after %d steps: parameters %.3g, "
                "buffers %.3g of their change\n", STEPS, dw, db);
    CHILD_CHECK(dw <= 1e-6 && db <= 1e-6,
                "SyncBatchNorm on 2 ranks differs from one process on the combined batch: "
                "parameters by %.3g, buffers by %.3g of their change (tolerance 1e-6)", dw, db);
    cdl_free(w0);
    cdl_free(b0);
    ddp_free(g);
    replica_free(&me);
    replica_free(&one);
    cdl_dist_destroy(d);
    return 0;
}

static void test_ddp_semantics(void **state)
{
    (void)state;
    if (run_world(2, plain_rank, NULL, guard_s(120)))
        fail_msg("batchnorm2d on 2 ranks does not follow PyTorch DDP's semantics");
}

static void test_sync_batchnorm(void **state)
{
    (void)state;
    if (run_world(2, sync_rank, NULL, guard_s(120)))
        fail_msg("batchnorm2d sync=true on 2 ranks does not match one process");
}

int main(void)
{
    clear_launcher_env();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ddp_semantics),
        cmocka_unit_test(test_sync_batchnorm),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
