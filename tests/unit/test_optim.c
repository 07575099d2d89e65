/* Optimizers and schedules: against torch.optim on a flat parameter vector
 * (tests/fixtures/optim.fix: SGD plain, momentum, nesterov, dampening,
 * weight decay; Adam with and without L2; AdamW), sub-range steps, resume
 * from saved state, and the schedules against torch's LR schedulers. */
#include "model_testutil.h"

#include "fixture.h"

#define N 301
#define STEPS 3
#define PARAM_TOL 1e-6   /* normalised, float32 against float32 PyTorch */

static cdl_backend *be;
static fixture *fx;

static int setup(void **state)
{
    (void)state;
    be = cdl_backend_cpu_create(2);
    fx = fixture_load("tests/fixtures/optim.fix");
    return be ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    fixture_free(fx);
    cdl_backend_destroy(be);
    return 0;
}

/* A fixture config record: kind, momentum, dampening, weight_decay,
 * nesterov, beta1, beta2, eps. */
static cdl_optim_config config_of(const float *r)
{
    cdl_optim_config c = cdl_optim_defaults((cdl_optim_kind)(int)r[0]);
    c.momentum = r[1];
    c.dampening = r[2];
    c.weight_decay = r[3];
    c.nesterov = r[4] != 0.0f;
    c.beta1 = r[5];
    c.beta2 = r[6];
    c.eps = r[7];
    return c;
}

static void run_case(const char *name)
{
    char key[128];
    snprintf(key, sizeof key, "%s/config", name);
    cdl_optim_config c = config_of(fixture_f32(fx, key, 8));
    snprintf(key, sizeof key, "%s/lrs", name);
    const float *lrs = fixture_f32(fx, key, STEPS);
    snprintf(key, sizeof key, "%s/params", name);
    const float *want = fixture_f32(fx, key, STEPS * N);
    const float *grads = fixture_f32(fx, "optim/grads", STEPS * N);

    cdl_optim *o = cdl_optim_create(&c, N, be);
    if (!o)
        fail_msg("%s: %s", name, cdl_last_error());
    float *p = dev_upload(be, fixture_f32(fx, "optim/p0", N), N * sizeof(float));
    float *g = be->ops->alloc(be, N * sizeof(float));
    for (int s = 0; s < STEPS; s++) {
        be->ops->to_device(be, g, grads + s * N, N * sizeof(float));
        cdl_optim_step(o, p, g, lrs[s]);
        assert_int_equal(cdl_optim_steps(o), s + 1);
        float *host = host_copy(be, p, N);
        double err = norm_err_ff(host, want + s * N, N);
        if (err > PARAM_TOL)
            fail_msg("%s: parameters after step %d: normalised error %.3g", name, s + 1, err);
        free(host);
    }
    /* State buffers have PyTorch's names and values. */
    int in_fixture = 0;
    for (int i = 0; i < fx->count; i++) {
        snprintf(key, sizeof key, "%s/state/", name);
        in_fixture += !strncmp(fx->recs[i].name, key, strlen(key));
    }
    assert_int_equal(cdl_optim_nstate(o), in_fixture);
    for (int i = 0; i < cdl_optim_nstate(o); i++) {
        snprintf(key, sizeof key, "%s/state/%s", name, cdl_optim_state_name(o, i));
        float *host = host_copy(be, cdl_optim_state(o, i), N);
        double err = norm_err_ff(host, fixture_f32(fx, key, N), N);
        if (err > PARAM_TOL)
            fail_msg("%s: normalised error %.3g", key, err);
        free(host);
    }
    be->ops->free(be, p);
    be->ops->free(be, g);
    cdl_optim_destroy(o);
}

static void test_against_torch(void **state)
{
    (void)state;
    int cases = 0;
    for (int i = 0; i < fx->count; i++) {
        const char *name = fx->recs[i].name, *slash = strchr(name, '/');
        if (strncmp(name, "sched/", 6) && slash && !strcmp(slash, "/config")) {
            char base[64];
            snprintf(base, sizeof base, "%.*s", (int)(slash - name), name);
            run_case(base);
            cases++;
        }
    }
    assert_int_equal(cases, 11);
}

/* Steps over sub-ranges plus one advance equal one whole step, bit for
 * bit; a copy of the state with set_steps resumes exactly. */
static void test_ranges_and_resume(void **state)
{
    (void)state;
    const cdl_optim_kind kinds[3] = {CDL_OPTIM_SGD, CDL_OPTIM_ADAM, CDL_OPTIM_ADAMW};
    const float *grads = fixture_f32(fx, "optim/grads", STEPS * N);
    for (int k = 0; k < 3; k++) {
        cdl_optim_config c = cdl_optim_defaults(kinds[k]);
        if (kinds[k] == CDL_OPTIM_SGD) {
            c.momentum = 0.9f;
            c.dampening = 0.1f;
        }
        cdl_optim *whole = cdl_optim_create(&c, N, be), *parts = cdl_optim_create(&c, N, be);
        float *pw = dev_upload(be, fixture_f32(fx, "optim/p0", N), N * sizeof(float));
        float *pp = dev_upload(be, fixture_f32(fx, "optim/p0", N), N * sizeof(float));
        float *g = be->ops->alloc(be, N * sizeof(float));
        for (int s = 0; s < 2; s++) {
            be->ops->to_device(be, g, grads + s * N, N * sizeof(float));
            cdl_optim_step(whole, pw, g, 0.01f);
            cdl_optim_step_range(parts, pp, g, 200, N - 200, 0.01f);   /* from the end, like DDP */
            cdl_optim_step_range(parts, pp, g, 0, 200, 0.01f);
            assert_int_equal(cdl_optim_steps(parts), s);
            cdl_optim_advance(parts);
        }
        float *a = host_copy(be, pw, N), *b = host_copy(be, pp, N);
        assert_memory_equal(a, b, N * sizeof *a);
        free(a);
        free(b);

        /* Resume `parts` as a fresh optimizer from its saved state. */
        cdl_optim *resumed = cdl_optim_create(&c, N, be);
        for (int i = 0; i < cdl_optim_nstate(parts); i++) {
            float *st = host_copy(be, cdl_optim_state(parts, i), N);
            be->ops->to_device(be, cdl_optim_state(resumed, i), st, N * sizeof(float));
            free(st);
        }
        cdl_optim_set_steps(resumed, cdl_optim_steps(parts));
        be->ops->to_device(be, g, grads + 2 * N, N * sizeof(float));
        cdl_optim_step(whole, pw, g, 0.005f);
        cdl_optim_step(resumed, pp, g, 0.005f);
        a = host_copy(be, pw, N);
        b = host_copy(be, pp, N);
        assert_memory_equal(a, b, N * sizeof *a);
        free(a);
        free(b);

        be->ops->free(be, pw);
        be->ops->free(be, pp);
        be->ops->free(be, g);
        cdl_optim_destroy(whole);
        cdl_optim_destroy(parts);
        cdl_optim_destroy(resumed);
    }
}

/* nanoGPT's groups (cdl_optim_set_no_decay): the no-decay ranges move
 * exactly like an optimizer without weight decay, the rest like one with
 * it, for whole steps and for sub-range steps that cut across groups. */
static void test_no_decay_groups(void **state)
{
    (void)state;
    const cdl_optim_kind kinds[3] = {CDL_OPTIM_SGD, CDL_OPTIM_ADAM, CDL_OPTIM_ADAMW};
    const float *grads = fixture_f32(fx, "optim/grads", STEPS * N);
    const size_t off[2] = {100, 290}, cnt[2] = {50, 11};   /* the second ends the buffer */
    for (int k = 0; k < 3; k++) {
        cdl_optim_config c = cdl_optim_defaults(kinds[k]), c0;
        c.weight_decay = 0.1f;
        c.momentum = kinds[k] == CDL_OPTIM_SGD ? 0.9f : 0.0f;
        c0 = c;
        c0.weight_decay = 0.0f;
        cdl_optim *grouped = cdl_optim_create(&c, N, be), *parts = cdl_optim_create(&c, N, be);
        cdl_optim *decay = cdl_optim_create(&c, N, be), *none = cdl_optim_create(&c0, N, be);
        assert_int_equal(cdl_optim_set_no_decay(grouped, off, cnt, 2), 0);
        assert_int_equal(cdl_optim_set_no_decay(parts, off, cnt, 2), 0);
        float *p[4], *g = be->ops->alloc(be, N * sizeof(float));
        for (int i = 0; i < 4; i++)
            p[i] = dev_upload(be, fixture_f32(fx, "optim/p0", N), N * sizeof(float));
        for (int s = 0; s < 2; s++) {
            be->ops->to_device(be, g, grads + s * N, N * sizeof(float));
            cdl_optim_step(grouped, p[0], g, 0.01f);
            cdl_optim_step_range(parts, p[1], g, 120, N - 120, 0.01f);
            cdl_optim_step_range(parts, p[1], g, 0, 120, 0.01f);
            cdl_optim_advance(parts);
            cdl_optim_step(decay, p[2], g, 0.01f);
            cdl_optim_step(none, p[3], g, 0.01f);
        }
        float *h[4];
        for (int i = 0; i < 4; i++)
            h[i] = host_copy(be, p[i], N);
        assert_memory_equal(h[0], h[1], N * sizeof(float));
        for (int i = 0; i < N; i++) {
            int nd = (i >= 100 && i < 150) || i >= 290;
            assert_memory_equal(&h[0][i], &h[nd ? 3 : 2][i], sizeof(float));
        }
        /* The two references differ, so the check can fail. */
        assert_true(memcmp(h[2], h[3], N * sizeof(float)) != 0);
        for (int i = 0; i < 4; i++) {
            free(h[i]);
            be->ops->free(be, p[i]);
        }
        be->ops->free(be, g);
        /* Out of order or outside the buffer: refused. */
        const size_t boff[2] = {100, 90}, bcnt[2] = {5, 5}, big = N;
        assert_int_equal(cdl_optim_set_no_decay(decay, boff, bcnt, 2), -1);
        assert_int_equal(cdl_optim_set_no_decay(decay, &off[1], &big, 1), -1);
        cdl_optim_destroy(grouped);
        cdl_optim_destroy(parts);
        cdl_optim_destroy(decay);
        cdl_optim_destroy(none);
    }
}

static void test_config(void **state)
{
    (void)state;
    cdl_optim_config c = cdl_optim_defaults(CDL_OPTIM_SGD);
    assert_true(c.momentum == 0.0f && c.weight_decay == 0.0f && !c.nesterov);
    c = cdl_optim_defaults(CDL_OPTIM_ADAM);
    assert_true(c.beta1 == 0.9f && c.beta2 == 0.999f && c.eps == 1e-8f && c.weight_decay == 0.0f);
    c = cdl_optim_defaults(CDL_OPTIM_ADAMW);
    assert_true(c.weight_decay == 0.01f && c.beta1 == 0.9f);

    assert_int_equal(cdl_optim_kind_parse("sgd"), CDL_OPTIM_SGD);
    assert_int_equal(cdl_optim_kind_parse("adam"), CDL_OPTIM_ADAM);
    assert_int_equal(cdl_optim_kind_parse("adamw"), CDL_OPTIM_ADAMW);
    assert_int_equal(cdl_optim_kind_parse("Adam"), -1);
    assert_int_equal(cdl_optim_kind_parse(NULL), -1);
    assert_string_equal(cdl_optim_kind_name(CDL_OPTIM_ADAMW), "adamw");

    /* State: none for plain SGD, PyTorch's names otherwise. */
    c = cdl_optim_defaults(CDL_OPTIM_SGD);
    cdl_optim *o = cdl_optim_create(&c, 10, be);
    assert_int_equal(cdl_optim_nstate(o), 0);
    assert_null(cdl_optim_state(o, 0));
    assert_null(cdl_optim_state_name(o, 0));
    assert_int_equal(cdl_optim_get_config(o)->kind, CDL_OPTIM_SGD);
    cdl_optim_destroy(o);
    c.momentum = 0.9f;
    o = cdl_optim_create(&c, 10, be);
    assert_int_equal(cdl_optim_nstate(o), 1);
    assert_string_equal(cdl_optim_state_name(o, 0), "momentum_buffer");
    assert_non_null(cdl_optim_state(o, 0));
    cdl_optim_destroy(o);
    c = cdl_optim_defaults(CDL_OPTIM_ADAM);
    o = cdl_optim_create(&c, 10, be);
    assert_int_equal(cdl_optim_nstate(o), 2);
    assert_string_equal(cdl_optim_state_name(o, 0), "exp_avg");
    assert_string_equal(cdl_optim_state_name(o, 1), "exp_avg_sq");
    assert_null(cdl_optim_state(o, 2));

    /* Misuse leaves the optimizer as it was. */
    float *p = be->ops->alloc(be, 10 * sizeof(float)), *g = be->ops->alloc(be, 10 * sizeof(float));
    cdl_optim_step_range(o, p, g, 8, 3, 0.1f);
    assert_non_null(strstr(cdl_last_error(), "adam: step over [8, 11) is outside the 10 parameters"));
    cdl_optim_set_steps(o, 5);
    cdl_optim_set_steps(o, -1);
    assert_int_equal(cdl_optim_steps(o), 5);
    assert_non_null(strstr(cdl_last_error(), "invalid step count -1"));
    be->ops->free(be, p);
    be->ops->free(be, g);
    cdl_optim_destroy(o);
    cdl_optim_destroy(NULL);

    static const struct {
        cdl_optim_kind kind;
        float momentum, dampening, wd, beta1, beta2, eps;
        int nesterov;
        const char *msg;
    } bad[] = {
        {CDL_OPTIM_SGD, -0.1f, 0, 0, 0.9f, 0.999f, 1e-8f, 0, "sgd: invalid momentum -0.1"},
        {CDL_OPTIM_SGD, 0.9f, 0.1f, 0, 0.9f, 0.999f, 1e-8f, 1, "nesterov momentum needs momentum > 0 and dampening 0"},
        {CDL_OPTIM_SGD, 0, 0, 0, 0.9f, 0.999f, 1e-8f, 1, "nesterov momentum needs"},
        {CDL_OPTIM_SGD, 0, 0, -1, 0.9f, 0.999f, 1e-8f, 0, "sgd: invalid weight decay -1"},
        {CDL_OPTIM_ADAM, 0, 0, 0, 1.0f, 0.999f, 1e-8f, 0, "adam: invalid betas (1, 0.999)"},
        {CDL_OPTIM_ADAMW, 0, 0, 0, 0.9f, -0.5f, 1e-8f, 0, "adamw: invalid betas"},
        {CDL_OPTIM_ADAM, 0, 0, 0, 0.9f, 0.999f, -1e-8f, 0, "adam: invalid eps"},
        {(cdl_optim_kind)7, 0, 0, 0, 0.9f, 0.999f, 1e-8f, 0, "unknown optimizer kind 7"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cdl_optim_config b = {bad[i].kind, bad[i].momentum, bad[i].dampening, bad[i].wd,
                              bad[i].nesterov, bad[i].beta1, bad[i].beta2, bad[i].eps};
        assert_null(cdl_optim_create(&b, 10, be));
        if (!strstr(cdl_last_error(), bad[i].msg))
            fail_msg("case %zu: \"%s\", want \"%s\"", i, cdl_last_error(), bad[i].msg);
    }
}

static void test_schedules_against_torch(void **state)
{
    (void)state;
    static const char *names[] = {"steplr", "cosine", "warmup", "warmup_cosine", "warmup_step"};
    for (int c = 0; c < 5; c++) {
        char key[64];
        snprintf(key, sizeof key, "sched/%s/config", names[c]);
        const float *r = fixture_f32(fx, key, 7);
        cdl_schedule s = {(cdl_sched_kind)(int)r[0], r[1], (long)r[2], (long)r[3], (long)r[4], r[5], r[6]};
        snprintf(key, sizeof key, "sched/%s/lr", names[c]);
        const fixture_rec *lr = fixture_get(fx, key, FIX_F32, 0);
        assert_true(lr->numel >= 9);
        for (size_t step = 0; step < lr->numel; step++) {
            double want = ((const float *)lr->data)[step], got = cdl_schedule_lr(&s, (long)step);
            if (fabs(got - want) > 1e-6 * fabs(want) + 1e-12)
                fail_msg("%s step %zu: lr %.9g, PyTorch %.9g", names[c], step, got, want);
        }
    }
}

static void test_schedule_properties(void **state)
{
    (void)state;
    /* Warmup from base/W to base over W steps, then the schedule from s=0. */
    cdl_schedule s = {CDL_SCHED_STEP, 0.4f, 4, 0, 2, 0.5f, 0};
    const float want[] = {0.1f, 0.2f, 0.3f, 0.4f, 0.4f, 0.4f, 0.2f, 0.2f, 0.1f};
    for (int i = 0; i < 9; i++)
        assert_float_equal(cdl_schedule_lr(&s, i), want[i], 1e-7);
    assert_float_equal(cdl_schedule_lr(&s, -3), 0.1f, 1e-7);   /* before the start: step 0 */
    s.step_size = 0;   /* no decay */
    assert_float_equal(cdl_schedule_lr(&s, 100), 0.4f, 1e-7);

    /* Cosine reaches min_lr at total_steps and stays there. */
    cdl_schedule c = {CDL_SCHED_COSINE, 1.0f, 0, 10, 0, 0, 0.1f};
    assert_float_equal(cdl_schedule_lr(&c, 0), 1.0f, 1e-7);
    assert_float_equal(cdl_schedule_lr(&c, 5), 0.55f, 1e-6);
    assert_float_equal(cdl_schedule_lr(&c, 10), 0.1f, 1e-7);
    assert_float_equal(cdl_schedule_lr(&c, 25), 0.1f, 1e-7);
    for (int i = 1; i <= 10; i++)
        assert_true(cdl_schedule_lr(&c, i) < cdl_schedule_lr(&c, i - 1));
    c.warmup_steps = 10;   /* nothing left after warmup */
    assert_float_equal(cdl_schedule_lr(&c, 9), 1.0f, 1e-7);
    assert_float_equal(cdl_schedule_lr(&c, 10), 0.1f, 1e-7);

    cdl_schedule k = {CDL_SCHED_CONSTANT, 0.05f, 0, 0, 0, 0, 0};
    assert_float_equal(cdl_schedule_lr(&k, 0), 0.05f, 0);
    assert_float_equal(cdl_schedule_lr(&k, 1000000), 0.05f, 0);

    assert_int_equal(cdl_sched_kind_parse("constant"), CDL_SCHED_CONSTANT);
    assert_int_equal(cdl_sched_kind_parse("step"), CDL_SCHED_STEP);
    assert_int_equal(cdl_sched_kind_parse("cosine"), CDL_SCHED_COSINE);
    assert_int_equal(cdl_sched_kind_parse("linear"), -1);
    assert_string_equal(cdl_sched_kind_name(CDL_SCHED_COSINE), "cosine");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_against_torch),
        cmocka_unit_test(test_ranges_and_resume),
        cmocka_unit_test(test_no_decay_groups),
        cmocka_unit_test(test_config),
        cmocka_unit_test(test_schedules_against_torch),
        cmocka_unit_test(test_schedule_properties),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
