/* The harness's options for large models on small synthetic data (LeNet,
 * no batch norm): --accum-steps equals one batch K times larger and
 * exchanges nothing before the last micro-batch; --clip-grad is PyTorch's
 * clip_grad_norm_; --decay-params 2d leaves biases undecayed; --eval-every
 * validates mid-epoch; all of them resume bitwise, and a resume that
 * changes them is refused. */
#include "train_testutil.h"

#include <math.h>

#include "lib/train/ddp.h"
#include "lib/train/grads.h"
#include "lib/train/mfu.h"
#include "lib/train/report.h"
#include "lib/train/run.h"

static char tmpdir[256];

/* Under valgrind (CDL_TEST_SCOPE=unit) whole training runs take minutes:
 * they are left to the plain pass (and the sanitizer build). */
static void skip_under_valgrind(void)
{
    const char *scope = getenv("CDL_TEST_SCOPE");
    if (scope && !strcmp(scope, "unit"))
        skip();
}

static void base_config(cdl_train_config *c, const char *sub)
{
    cdl_train_defaults(c);
    snprintf(c->dataset, sizeof c->dataset, "synthetic");
    c->synthetic_n = 192;     /* 173 training samples after the 10% validation split */
    c->epochs = 2;
    c->batch_size = 32;       /* 5 full batches and one of 13 per epoch */
    c->threads = 2;
    c->workers = 1;
    c->quiet = 1;
    c->seed = 5;
    snprintf(c->ckpt_dir, sizeof c->ckpt_dir, "%s/%s", tmpdir, sub);
}

/* The largest difference between the float tensors of two runs, relative
 * to the largest magnitude (optimizer state included). */
static double weights_diff(const char *a, const char *b)
{
    size_t na, nb;
    unsigned char *wa = load_weights(a, &na), *wb = load_weights(b, &nb);
    assert_int_equal(na, nb);
    double diff = 0, big = 1e-30;
    /* The I64 counts are equal or the memcmp-free part differs wildly;
     * reading everything as floats keeps the helper small. */
    for (size_t i = 0; i + 4 <= na; i += 4) {
        float x, y;
        memcpy(&x, wa + i, 4);
        memcpy(&y, wb + i, 4);
        if (isfinite(x) && isfinite(y)) {
            diff = fmax(diff, fabs((double)x - y));
            big = fmax(big, fabs((double)x));
        }
    }
    free(wa);
    free(wb);
    return diff / big;
}

/* Micro-batches of 16, two per step, against batches of 32: the same
 * samples per step (the epoch's short last group holds the same 13 samples
 * as the short last batch), the same weights within float rounding. */
static void test_accum_equals_big_batch(void **state)
{
    (void)state;
    skip_under_valgrind();
    cdl_train_config big, acc, small;
    base_config(&big, "acc-big");
    run_ok(&big);
    base_config(&acc, "acc-2x16");
    acc.batch_size = 16;
    acc.accum_steps = 2;
    run_ok(&acc);
    double d = weights_diff(big.ckpt_dir, acc.ckpt_dir);
    if (d > 1e-6)
        fail_msg("--accum-steps 2 of 16 against batch 32: relative difference %.3g", d);
    /* Without accumulation, batches of 16 train other weights: the check can fail. */
    base_config(&small, "acc-16");
    small.batch_size = 16;
    run_ok(&small);
    assert_true(weights_diff(big.ckpt_dir, small.ckpt_dir) > 1e-3);
}

/* PyTorch's coefficient: max_norm / (total + 1e-6), at most 1. */
static void test_clip_coef(void **state)
{
    (void)state;
    assert_true(train_clip_coef(3.0, 1.0f) == 1.0f / (3.0f + 1e-6f));
    assert_true(train_clip_coef(0.5, 1.0f) == 1.0f);
    assert_true(train_clip_coef(0.0, 1.0f) == 1.0f);
}

/* A gradient with an infinite or NaN element: clipping cannot make it
 * finite (an infinite norm's coefficient is 0, and 0 times infinity is NaN;
 * a NaN norm's coefficient was taken as 1), so train_clip_grads leaves the
 * gradient as it is and returns 1, for the caller to skip the update and
 * stop the run. Before, it returned 0 with the gradient scaled into NaNs,
 * and the update wrote them into the weights. */
static void test_clip_nonfinite(void **state)
{
    (void)state;
    cdl_backend *be = cdl_backend_cpu_create(1);
    cdl_model_spec spec;
    cdl_shape in = {1, 28, 28};
    assert_int_equal(cdl_spec_builtin("mlp", in, 10, &spec), 0);
    cdl_model *m = cdl_model_create(&spec, in, 2, be);
    if (!m)
        fail_msg("%s", cdl_last_error());
    cdl_train_config c;
    cdl_train_defaults(&c);
    c.clip_grad = 1.0f;
    run r = {.cfg = &c, .be = be, .model = m, .ddp = ddp_create(NULL, m, 0)};
    assert_non_null(r.ddp);
    float *g = cdl_model_grads(m);   /* the CPU's: host memory */
    size_t np = cdl_model_nparams(m);
    const float bad[] = {INFINITY, -INFINITY, NAN};
    for (int k = 0; k < 3; k++) {
        for (size_t i = 0; i < np; i++)
            g[i] = 0.5f;
        g[np / 2] = bad[k];
        assert_int_equal(train_clip_grads(&r), 1);
        assert_false(isfinite(r.grad_norm));
        assert_true(k == 2 ? isnan(g[np / 2]) : g[np / 2] == bad[k]);
        for (size_t i = 0; i < np; i++)
            if (i != np / 2 && g[i] != 0.5f)
                fail_msg("bad[%d]: gradient %zu is %g, not 0.5 as it was", k, i, (double)g[i]);
    }
    /* A norm beyond float's range: its coefficient was 0, and the step's
     * update a zero one in silence (PyTorch's float norm is inf there). */
    for (size_t i = 0; i < np; i++)
        g[i] = 0.5f;
    g[0] = g[1] = 3e38f;
    assert_int_equal(train_clip_grads(&r), 1);
    assert_true(isfinite(r.grad_norm) && r.grad_norm > 4e38);
    assert_true(g[0] == 3e38f && g[1] == 3e38f && g[2] == 0.5f);
    /* A finite norm above the limit is clipped, as before. */
    for (size_t i = 0; i < np; i++)
        g[i] = 0.5f;
    assert_int_equal(train_clip_grads(&r), 0);
    assert_true(fabs(r.grad_norm - 0.5 * sqrt((double)np)) < 1e-6 * r.grad_norm);
    assert_true(g[0] == 0.5f * train_clip_coef(r.grad_norm, 1.0f));
    ddp_free(r.ddp);
    cdl_model_destroy(m);
    cdl_backend_destroy(be);
}

/* A limit above every norm changes no bit; a small one changes the
 * weights; the step records show the norm before clipping. */
/* The peaks by GPU name (whole words: an L4 is not an L40S) and MFU. */
static void test_mfu(void **state)
{
    (void)state;
    assert_true(train_gpu_peak_tflops("NVIDIA A100-SXM4-80GB") == 312.0);
    assert_true(train_gpu_peak_tflops("NVIDIA H100 80GB HBM3") == 989.4);
    assert_true(train_gpu_peak_tflops("NVIDIA H100 PCIe") == 756.0);
    assert_true(train_gpu_peak_tflops("NVIDIA L4") == 121.0);
    assert_true(train_gpu_peak_tflops("NVIDIA L40S") == 362.0);
    assert_true(train_gpu_peak_tflops("NVIDIA A10G") == 70.0);
    assert_true(train_gpu_peak_tflops("Tesla T4") == 65.0);
    assert_true(train_gpu_peak_tflops("NVIDIA GH200 480GB") == 989.4);
    assert_true(train_gpu_peak_tflops("Fake GPU") == 0);
    assert_true(train_gpu_peak_tflops(NULL) == 0);
    /* GPT-2 small as nanoGPT counts it: 6N + 12 L C T per token. */
    double f = train_flops_per_token(124e6, 12.0 * 768 * 1024);
    assert_true(fabs(f - (6 * 124e6 + 12.0 * 12 * 768 * 1024)) < 1);
    /* 100k tokens/s on 4 devices of 312 TFLOP/s. */
    assert_true(fabs(train_mfu(f, 1e5, 4, 312) - f * 1e5 / 4 / 312e12) < 1e-12);
    assert_true(isnan(train_mfu(f, 1e5, 1, 0)));
    assert_true(isnan(train_mfu(0, 1e5, 1, 312)));
}

static void test_clip_grad(void **state)
{
    (void)state;
    skip_under_valgrind();
    cdl_train_config plain, loose, tight;
    base_config(&plain, "clip-none");
    plain.epochs = 1;
    run_ok(&plain);
    base_config(&loose, "clip-loose");
    loose.epochs = 1;
    loose.clip_grad = 1e30f;
    run_ok(&loose);
    assert_same_weights(plain.ckpt_dir, loose.ckpt_dir);
    base_config(&tight, "clip-tight");
    tight.epochs = 1;
    tight.clip_grad = 0.01f;
    tight.metrics_every = 1;
    snprintf(tight.metrics, sizeof tight.metrics, "%s/clip.jsonl", tmpdir);
    run_ok(&tight);
    assert_true(weights_diff(plain.ckpt_dir, tight.ckpt_dir) > 1e-4);
    FILE *f = fopen(tight.metrics, "r");
    assert_non_null(f);
    char line[20000];
    int steps = 0;
    while (fgets(line, sizeof line, f)) {
        const char *g = strstr(line, "\"grad_norm\":");
        if (!strstr(line, "\"type\":\"step\""))
            continue;
        assert_non_null(g);
        assert_true(atof(g + 12) > 0.01);   /* before clipping */
        steps++;
    }
    fclose(f);
    assert_int_equal(steps, 6);
}

/* After one AdamW step (its update depends only on that step's gradient):
 * with --decay-params 2d the biases moved as without weight decay and the
 * weights as with it on every parameter. */
static void test_decay_params(void **state)
{
    (void)state;
    skip_under_valgrind();
    cdl_train_config two, all, none;
    base_config(&two, "decay-2d");
    two.optim = cdl_optim_defaults(CDL_OPTIM_ADAMW);
    two.optim.weight_decay = 0.5f;
    two.max_steps = 1;
    two.decay_params = CDL_DECAY_2D;
    all = two;
    none = two;
    snprintf(all.ckpt_dir, sizeof all.ckpt_dir, "%s/decay-all", tmpdir);
    all.decay_params = CDL_DECAY_ALL;
    snprintf(none.ckpt_dir, sizeof none.ckpt_dir, "%s/decay-none", tmpdir);
    none.optim.weight_decay = 0;
    run_ok(&two);
    run_ok(&all);
    run_ok(&none);
    const char *names[] = {"conv1.bias", "fc3.bias", "conv1.weight", "fc3.weight"};
    for (int i = 0; i < 4; i++) {
        size_t n2, nr, no;
        float *t = load_tensor(two.ckpt_dir, names[i], &n2);
        float *r = load_tensor(i < 2 ? none.ckpt_dir : all.ckpt_dir, names[i], &nr);
        float *o = load_tensor(i < 2 ? all.ckpt_dir : none.ckpt_dir, names[i], &no);
        assert_int_equal(n2, nr);
        assert_memory_equal(t, r, n2 * sizeof *t);
        assert_true(memcmp(t, o, n2 * sizeof *t) != 0);   /* the groups matter */
        free(t);
        free(r);
        free(o);
    }
}

/* A gpt model: --decay-params auto means 2d, all means all; MFU's FLOPs
 * per token leave the position embedding out and add the attention term. */
static void test_gpt_groups_and_flops(void **state)
{
    (void)state;
    cdl_backend *be = cdl_backend_cpu_create(1);
    if (!be->ops->attn_fwd) {   /* until the CPU backend's table has attention */
        cdl_backend_destroy(be);
        skip();
    }
    cdl_model_spec spec;
    cdl_shape in = {8, 1, 1};   /* block 8 */
    assert_int_equal(cdl_spec_builtin("gpt:n_layer=2,n_head=2,n_embd=16", in, 32, &spec), 0);
    cdl_model *m = cdl_model_create(&spec, in, 2, be);
    if (!m)
        fail_msg("%s", cdl_last_error());
    cdl_train_config c;
    cdl_train_defaults(&c);
    c.peak_tflops = 1;
    run r = {.cfg = &c, .be = be, .model = m, .positions = cdl_model_positions(m)};
    r.ri.world = 1;
    assert_int_equal(r.positions, 8);
    r.rep = train_report_open(&c, 1);   /* rank 1: silent */
    cdl_optim_config oc = cdl_optim_defaults(CDL_OPTIM_ADAMW);
    r.optim = cdl_optim_create(&oc, cdl_model_nparams(m), be);
    assert_int_equal(train_decay_groups(&r), 0);
    assert_int_equal(r.decay_2d, 1);
    c.decay_params = CDL_DECAY_ALL;
    assert_int_equal(train_decay_groups(&r), 0);
    assert_int_equal(r.decay_2d, 0);
    train_speed_setup(&r);
    double params = (double)cdl_model_nparams(m) - 8 * 16;   /* without wpe */
    assert_true(fabs(r.flops_per_token - (6 * params + 12.0 * 2 * 16 * 8)) < 1e-6);
    assert_true(r.peak_tflops == 1);
    double sps, tps, mfu;
    train_speed(&r, 800, &sps, &tps, &mfu);   /* 800 tokens/s: 100 samples/s */
    assert_true(sps == 100 && tps == 800);
    assert_true(fabs(mfu - r.flops_per_token * 800 / 1e12) < 1e-15);
    train_report_free(r.rep);
    cdl_optim_destroy(r.optim);
    cdl_model_destroy(m);
    cdl_backend_destroy(be);
}

/* Stopped at step 4 (inside a group of two micro-batches' worth of
 * steps) and resumed: bitwise the uninterrupted run, with accumulation,
 * clipping, decay groups and mid-epoch validation together; validation
 * records every 2 steps; a resume with another --accum-steps is refused. */
static void test_resume_with_options(void **state)
{
    (void)state;
    skip_under_valgrind();
    cdl_train_config full, part;
    base_config(&full, "opts-full");
    full.batch_size = 16;
    full.accum_steps = 2;
    full.clip_grad = 0.5f;
    full.decay_params = CDL_DECAY_2D;
    full.optim = cdl_optim_defaults(CDL_OPTIM_ADAMW);
    full.lr = 0.003f;
    run_ok(&full);
    part = full;
    snprintf(part.ckpt_dir, sizeof part.ckpt_dir, "%s/opts-part", tmpdir);
    snprintf(part.metrics, sizeof part.metrics, "%s/opts.jsonl", tmpdir);
    part.eval_every = 2;
    part.max_steps = 4;
    run_ok(&part);
    part.max_steps = 0;
    part.accum_steps = 3;
    assert_int_equal(cdl_train_run(&part, NULL), -1);
    assert_non_null(strstr(cdl_last_error(), "--accum-steps 2 -> 3"));
    part.accum_steps = 2;
    run_ok(&part);
    assert_same_weights(full.ckpt_dir, part.ckpt_dir);
    /* 6 steps per epoch: validation after steps 2, 4 (before the stop:
     * none at the --max-steps step itself) and 8, 10; the epochs' own
     * at 6 and 12. */
    FILE *f = fopen(part.metrics, "r");
    assert_non_null(f);
    char line[20000], steps[64] = "";
    while (fgets(line, sizeof line, f)) {
        const char *p = strstr(line, "\"type\":\"eval\"");
        if (p) {
            const char *s = strstr(line, "\"step\":");
            assert_non_null(s);
            assert_non_null(strstr(line, "\"val_loss\":"));
            snprintf(steps + strlen(steps), sizeof steps - strlen(steps), "%ld,",
                     strtol(s + 7, NULL, 10));
        }
    }
    fclose(f);
    assert_string_equal(steps, "2,8,10,");

    /* The pipelined loop of GPUs (results read one step late), stopped
     * and resumed too: the same weights, one step record per optimizer
     * step, not per micro-batch. */
    cdl_backend *be = pipelined_cpu();
    cdl_train_config pipe = full;
    snprintf(pipe.ckpt_dir, sizeof pipe.ckpt_dir, "%s/opts-pipe", tmpdir);
    snprintf(pipe.metrics, sizeof pipe.metrics, "%s/pipe.jsonl", tmpdir);
    pipe.backend = be;
    pipe.metrics_every = 1;
    pipe.max_steps = 3;
    run_ok(&pipe);
    pipe.max_steps = 0;
    run_ok(&pipe);
    cdl_backend_destroy(be);
    assert_same_weights(full.ckpt_dir, pipe.ckpt_dir);
    f = fopen(pipe.metrics, "r");
    assert_non_null(f);
    int records = 0;
    while (fgets(line, sizeof line, f))
        records += strstr(line, "\"type\":\"step\"") != NULL;
    fclose(f);
    assert_int_equal(records, 12);
}

/* A character GPT on a small text: labels per position; accumulation of
 * 2 x 4 windows equals batches of 8 within 1e-6 (no batch norm in a
 * GPT); stopped and resumed, bitwise the uninterrupted run. */
static void lm_config(cdl_train_config *c, const char *sub, const char *text)
{
    base_config(c, sub);
    snprintf(c->model, sizeof c->model, "gpt:n_layer=1,n_head=2,n_embd=16");
    snprintf(c->dataset, sizeof c->dataset, "text");
    snprintf(c->data_dir, sizeof c->data_dir, "%s", text);
    c->block_size = 16;
    c->batch_size = 8;
    c->epochs = 1;
    c->max_steps = 6;
    c->optim = cdl_optim_defaults(CDL_OPTIM_ADAMW);
    c->lr = 1e-3f;
    c->clip_grad = 1.0f;
}

static void test_language_model(void **state)
{
    (void)state;
    skip_under_valgrind();
    char text[300];
    snprintf(text, sizeof text, "%s/corpus.txt", tmpdir);
    FILE *f = fopen(text, "w");
    assert_non_null(f);
    for (int i = 0; i < 60; i++)
        fprintf(f, "line %d: the quick brown fox jumps over the lazy dog.\n", i * 7 % 13);
    fclose(f);
    cdl_train_config big, acc, part;
    lm_config(&big, "lm-big", text);
    snprintf(big.metrics, sizeof big.metrics, "%s/lm.jsonl", tmpdir);
    run_ok(&big);
    lm_config(&acc, "lm-acc", text);
    acc.batch_size = 4;
    acc.accum_steps = 2;
    run_ok(&acc);
    double d = weights_diff(big.ckpt_dir, acc.ckpt_dir);
    if (d > 1e-6)
        fail_msg("gpt, --accum-steps 2 of 4 against batch 8: relative difference %.3g", d);
    lm_config(&part, "lm-part", text);
    part.max_steps = 3;
    run_ok(&part);
    part.max_steps = 6;
    run_ok(&part);
    assert_same_weights(big.ckpt_dir, part.ckpt_dir);
    /* Per-token metrics: the epoch record has tokens/s (MFU n/a on a CPU
     * without --peak-tflops) and windows/s as samples_per_sec (it said
     * images_per_sec), a loss near ln(256) at the start. */
    f = fopen(big.metrics, "r");
    assert_non_null(f);
    char line[20000];
    int epochs = 0;
    while (fgets(line, sizeof line, f))
        if (strstr(line, "\"type\":\"epoch\"")) {
            epochs++;
            assert_non_null(strstr(line, "\"tokens_per_sec\":"));
            assert_null(strstr(line, "\"mfu\":"));
            /* Its samples are windows, not images. */
            assert_non_null(strstr(line, "\"samples_per_sec\":"));
            assert_null(strstr(line, "\"images_per_sec\":"));
            const char *l = strstr(line, "\"train_loss\":");
            assert_non_null(l);
            double loss = atof(l + 13);
            assert_true(loss > 1.0 && loss < 6.0);
        }
    fclose(f);
    assert_int_equal(epochs, 1);
}

static int setup(void **state)
{
    (void)state;
    return test_mkdtemp(tmpdir, sizeof tmpdir, "train-lm");
}

static int teardown(void **state)
{
    (void)state;
    return test_rm_rf(tmpdir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_accum_equals_big_batch),
        cmocka_unit_test(test_clip_coef),
        cmocka_unit_test(test_clip_nonfinite),
        cmocka_unit_test(test_mfu),
        cmocka_unit_test(test_clip_grad),
        cmocka_unit_test(test_decay_params),
        cmocka_unit_test(test_gpt_groups_and_flops),
        cmocka_unit_test(test_resume_with_options),
        cmocka_unit_test(test_language_model),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
