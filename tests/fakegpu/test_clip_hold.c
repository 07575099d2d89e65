/* --clip-grad on the (fake) GPU with a gradient norm that cannot be
 * clipped: the norm stays on the device and the host reads it a step late,
 * so the update cannot wait for the host. hold_updates makes the optimizer
 * kernels change nothing from that step on: after a NaN, an infinite, and
 * a beyond-float norm, then a finite step queued behind it (the pipelined
 * loop's next step), the weights and Adam's m and v are bit for bit those
 * of the step before, while the host learns the norm from the device as
 * the loop does (train_norm_clippable false: the run stops, with
 * train_norm_error's "the update was skipped", test_gpu_pipeline). Before,
 * the Adam kernel applied the NaN-scaled update. Once the hold is cleared
 * (a new run) a finite step updates again, so the test cannot pass on a
 * backend that never updates. Eager, and as CUDA graph steps (captured,
 * then replayed: the hold is read by the replayed kernels). The kernels
 * run as C++ on the fake GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cdl/cdl.h>

#include "lib/train/ddp.h"
#include "lib/train/grads.h"
#include "lib/train/run.h"

typedef struct snap {
    float *p, *m, *v;
} snap;

static void take(cdl_backend *be, cdl_model *mdl, cdl_optim *o, size_t np, snap *s)
{
    be->ops->to_host(be, s->p, cdl_model_params(mdl), np * sizeof(float));
    be->ops->to_host(be, s->m, cdl_optim_state(o, 0), np * sizeof(float));
    be->ops->to_host(be, s->v, cdl_optim_state(o, 1), np * sizeof(float));
    assert_int_equal(be->ops->sync(be), 0);
}

static int graphs;   /* steps as CUDA graphs, as the loop runs them */
static int replays;

/* One optimizer step as train_step_ops takes it: clip, then update. */
static void step(run *r, const float *grad, size_t np, float lr)
{
    cdl_backend *be = r->be;
    be->ops->to_device(be, cdl_model_grads(r->model), grad, np * sizeof(float));
    if (graphs) {
        int rc = cdl_backend_graph_begin(be, 1);
        assert_true(rc >= 0);
        replays += rc == 1;
    }
    assert_int_equal(train_clip_grads(r), 0);   /* on the device: no host read */
    assert_true(isnan(r->grad_norm));
    assert_int_equal(ddp_step(r->ddp, r->optim, lr), 0);
    if (graphs && cdl_backend_graph_end(be) != 0)
        fail_msg("graph step: %s", cdl_last_error());
}

static void same(const snap *a, const snap *b, size_t np, const char *what)
{
    if (memcmp(a->p, b->p, np * sizeof(float)))
        fail_msg("%s: the weights changed", what);
    if (memcmp(a->m, b->m, np * sizeof(float)) || memcmp(a->v, b->v, np * sizeof(float)))
        fail_msg("%s: Adam's state changed", what);
}

static void test_hold(void **state)
{
    graphs = *(int *)*state;
    cdl_backend *be = cdl_backend_cuda_create(0);
    if (!be)
        fail_msg("%s", cdl_last_error());
    cdl_model_spec spec;
    cdl_shape in = {1, 28, 28};
    assert_int_equal(cdl_spec_builtin("mlp", in, 10, &spec), 0);
    cdl_model *m = cdl_model_create(&spec, in, 2, be);
    if (!m)
        fail_msg("%s", cdl_last_error());
    cdl_train_config c;
    cdl_train_defaults(&c);
    c.clip_grad = 1.0f;
    c.optim = cdl_optim_defaults(CDL_OPTIM_ADAMW);   /* weight decay moves p on a zero gradient */
    run r = {.cfg = &c, .be = be, .model = m, .ddp = ddp_create(NULL, m, 0)};
    assert_non_null(r.ddp);
    r.optim = ddp_optim_create(r.ddp, &c.optim);
    assert_non_null(r.optim);
    assert_int_equal(cdl_optim_nstate(r.optim), 2);
    assert_true(train_clip_on_device(&r));
    r.norm_dev = be->ops->alloc(be, sizeof(double));
    assert_non_null(r.norm_dev);
    be->ops->hold_updates(be, NULL);
    size_t np = cdl_model_nparams(m);
    float *g = malloc(np * sizeof *g);
    snap a, b;
    a.p = malloc(np * sizeof(float)), a.m = malloc(np * sizeof(float));
    a.v = malloc(np * sizeof(float)), b.p = malloc(np * sizeof(float));
    b.m = malloc(np * sizeof(float)), b.v = malloc(np * sizeof(float));
    double *norm = be->ops->host_alloc ? be->ops->host_alloc(be, sizeof *norm) : NULL;
    assert_non_null(g), assert_non_null(norm);
    for (size_t i = 0; i < np; i++)
        g[i] = 0.5f;
    step(&r, g, np, 0.01f);   /* m and v not zero */
    const char *names[] = {"nan", "inf", "beyond float"};
    for (int k = 0; k < 3; k++) {
        take(be, m, r.optim, np, &a);
        for (size_t i = 0; i < np; i++)
            g[i] = 0.5f;
        if (k == 0)
            g[np / 2] = NAN;
        else if (k == 1)
            g[np / 2] = -INFINITY;
        else
            g[0] = g[1] = 3e38f;   /* norm 4.2e38: finite as a double only */
        step(&r, g, np, 0.01f);
        /* The loop's read of the norm, queued with the step's results. */
        be->ops->to_host(be, norm, r.norm_dev, sizeof *norm);
        for (size_t i = 0; i < np; i++)
            g[i] = 0.25f;
        step(&r, g, np, 0.01f);   /* the step queued behind it, finite */
        take(be, m, r.optim, np, &b);
        if (train_norm_clippable(sqrt(*norm)))
            fail_msg("%s: the norm read back is %g", names[k], sqrt(*norm));
        same(&a, &b, np, names[k]);
        /* A new run clears the hold: a finite step updates again. */
        be->ops->hold_updates(be, NULL);
        step(&r, g, np, 0.01f);
        take(be, m, r.optim, np, &b);
        if (!memcmp(a.p, b.p, np * sizeof(float)) || !memcmp(a.m, b.m, np * sizeof(float)))
            fail_msg("%s: no update after the hold was cleared", names[k]);
        for (size_t i = 0; i < np; i++)
            if (!isfinite(b.p[i]) || !isfinite(b.m[i]) || !isfinite(b.v[i]))
                fail_msg("%s: parameter %zu or its state is not finite", names[k], i);
    }
    if (graphs)
        assert_true(replays >= 6);   /* all but the first step */
    be->ops->host_free(be, norm);
    free(g), free(a.p), free(a.m), free(a.v), free(b.p), free(b.m), free(b.v);
    be->ops->free(be, r.norm_dev);
    cdl_optim_destroy(r.optim);
    ddp_free(r.ddp);
    cdl_model_destroy(m);
    cdl_backend_destroy(be);
}

int main(void)
{
    if (cdl_backend_cuda_device_count() < 1) {
        fprintf(stderr, "test_clip_hold: the fake GPU is not visible (CDL_FAKE_GPUS)\n");
        return 1;
    }
    static int eager = 0, graph = 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_prestate(test_hold, &eager),
        cmocka_unit_test_prestate(test_hold, &graph),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
