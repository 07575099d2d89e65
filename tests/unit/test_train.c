/* The harness end to end on small synthetic data: bitwise determinism,
 * resume from the middle of an epoch and after a signal, rejection of
 * corrupt or mismatched checkpoints, no allocation inside a step, and the
 * GPU loop's bookkeeping (run on the CPU) against the host loop. */
#include "testutil.h"

#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cdl/cdl.h>

#include "lib/train/report.h"
#include "train_testutil.h"

static char tmpdir[256];

static void base_config(cdl_train_config *c, const char *sub)
{
    cdl_train_defaults(c);
    snprintf(c->dataset, sizeof c->dataset, "synthetic");
    /* 6 steps per epoch either way (5 full batches and a partial one
     * after the validation split's 10%); under valgrind batches of 2. */
    c->synthetic_n = (int)test_size(192, 12);
    c->epochs = 2;
    c->batch_size = (int)test_size(32, 2);
    c->threads = 2;
    c->workers = 2;
    c->quiet = 1;
    c->seed = 7;
    snprintf(c->ckpt_dir, sizeof c->ckpt_dir, "%s/%s", tmpdir, sub);
}

/* What the checkpoint directory holds after given steps (on_step runs
 * after each optimizer step and its checkpoints and validation). */
typedef struct {
    const char *dir;
    long at[2];
    int last[2], best[2];
} ckpt_probe;

static int exists_in(const char *dir, const char *name)
{
    char path[1200];
    snprintf(path, sizeof path, "%.1024s/%.100s", dir, name);
    return access(path, F_OK) == 0;
}

static void probe_ckpts(void *ctx, long steps)
{
    ckpt_probe *p = ctx;
    for (int i = 0; i < 2; i++)
        if (steps == p->at[i]) {
            p->last[i] = exists_in(p->dir, "last.safetensors");
            p->best[i] = exists_in(p->dir, "best.safetensors");
        }
}

/* --eval-every keeps best.safetensors at the lowest validation loss before
 * any epoch ends (a long run on a large corpus may end none); --ckpt-every
 * N writes last.safetensors every N steps, not at every epoch's end too,
 * and always at the run's end. Without --ckpt-every, every epoch's end. */
static void test_checkpoint_cadence(void **state)
{
    (void)state;
    cdl_train_config c;
    base_config(&c, "cadence");
    c.eval_every = 2;
    c.ckpt_every = 100;
    ckpt_probe p = {.dir = c.ckpt_dir, .at = {3, 7}};
    c.on_step = probe_ckpts;
    c.on_step_ctx = &p;
    run_ok(&c);
    assert_int_equal(p.best[0], 1);   /* the validation at step 2 */
    assert_int_equal(p.last[0], 0);
    assert_int_equal(p.last[1], 0);   /* epoch 1 ended at step 6, 6 < 100 steps */
    assert_true(exists_in(c.ckpt_dir, "last.safetensors"));   /* the run's end */

    base_config(&c, "cadence-epochs");
    p = (ckpt_probe){.dir = c.ckpt_dir, .at = {3, 7}};
    c.on_step = probe_ckpts;
    c.on_step_ctx = &p;
    run_ok(&c);
    assert_int_equal(p.best[0], 0);   /* no --eval-every: nothing before the epoch's end */
    assert_int_equal(p.last[1], 1);
    assert_int_equal(p.best[1], 1);
}

static void test_deterministic(void **state)
{
    (void)state;
    cdl_train_config a, b;
    base_config(&a, "det-a");
    base_config(&b, "det-b");
    run_ok(&a);
    run_ok(&b);
    assert_same_weights(a.ckpt_dir, b.ckpt_dir);
    /* A different seed trains different weights: the check can fail. */
    cdl_train_config c;
    base_config(&c, "det-c");
    c.seed = 8;
    run_ok(&c);
    size_t na, nc;
    unsigned char *wa = load_weights(a.ckpt_dir, &na), *wc = load_weights(c.ckpt_dir, &nc);
    assert_int_equal(na, nc);
    assert_true(memcmp(wa, wc, na) != 0);
    free(wa);
    free(wc);
}

static void test_resume_mid_epoch(void **state)
{
    (void)state;
    cdl_train_config full, part;
    base_config(&full, "mid-full");
    run_ok(&full);
    base_config(&part, "mid-part");
    part.max_steps = 4;       /* stops inside epoch 1 */
    run_ok(&part);
    part.max_steps = 0;
    snprintf(part.resume, sizeof part.resume, "auto");
    run_ok(&part);
    assert_same_weights(full.ckpt_dir, part.ckpt_dir);
}

/* A run that reached --max-steps, started again with the same options,
 * takes no further step (it took one more on every restart). */
static void test_max_steps_reached(void **state)
{
    (void)state;
    cdl_train_config ref, part;
    base_config(&ref, "ms-ref");
    ref.max_steps = 4;
    run_ok(&ref);
    base_config(&part, "ms-again");
    part.max_steps = 4;
    run_ok(&part);
    cdl_train_result res;
    snprintf(part.resume, sizeof part.resume, "auto");
    if (cdl_train_run(&part, &res) != 0)
        fail_msg("cdl_train_run: %s", cdl_last_error());
    assert_int_equal(res.steps, 4);
    assert_same_weights(ref.ckpt_dir, part.ckpt_dir);
}

/* The same with batch norm (running statistics and num_batches_tracked
 * go through the checkpoint) and a graph: resnet20, 6 steps of 8. */
static void test_resume_mid_epoch_resnet20(void **state)
{
    (void)state;
    /* ~24 resnet20 steps: minutes under valgrind; the plain pass runs it. */
    const char *scope = getenv("CDL_TEST_SCOPE");
    if (scope && !strcmp(scope, "unit"))
        skip();
    cdl_train_config full, part;
    base_config(&full, "r20-full");
    snprintf(full.model, sizeof full.model, "resnet20");
    full.synthetic_n = 48;
    full.batch_size = 8;
    full.epochs = 1;
    run_ok(&full);
    part = full;
    snprintf(part.ckpt_dir, sizeof part.ckpt_dir, "%s/r20-part", tmpdir);
    part.max_steps = 3;
    run_ok(&part);
    part.max_steps = 0;
    snprintf(part.resume, sizeof part.resume, "auto");
    run_ok(&part);
    assert_same_weights(full.ckpt_dir, part.ckpt_dir);
}

/* Issue 15: batchnorm2d's buffers (running_mean, running_var,
 * num_batches_tracked) are in the checkpoint under PyTorch's names, the
 * count as I64, and resuming from the middle of an epoch stays bitwise,
 * buffers included (assert_same_weights compares every tensor). */
static void test_resume_mid_epoch_batchnorm(void **state)
{
    (void)state;
    char spec[300];
    snprintf(spec, sizeof spec, "%s/bn.spec", tmpdir);
    FILE *f = fopen(spec, "w");
    assert_non_null(f);
    fputs("conv2d 4 kernel=3 padding=1\nbatchnorm2d\nrelu\nmaxpool2d 2\n"
          "conv2d 8 kernel=3 bias=false\nbatchnorm2d momentum=0.2\nrelu\n"
          "avgpool2d 14\nflatten\nlinear 10\n", f);
    fclose(f);
    cdl_train_config full, part;
    base_config(&full, "bn-full");
    snprintf(full.model, sizeof full.model, "%.255s", spec);
    run_ok(&full);
    base_config(&part, "bn-part");
    snprintf(part.model, sizeof part.model, "%.255s", spec);
    part.max_steps = 4;       /* stops inside epoch 1 */
    run_ok(&part);
    part.max_steps = 0;
    snprintf(part.resume, sizeof part.resume, "auto");
    run_ok(&part);
    assert_same_weights(full.ckpt_dir, part.ckpt_dir);

    char path[1100];
    snprintf(path, sizeof path, "%s/last.safetensors", full.ckpt_dir);
    cdl_st_file *st = cdl_st_open(path);
    assert_non_null(st);
    static const char *const names[] = {"bn1.running_mean", "bn1.running_var", "bn2.running_mean",
                                        "bn2.running_var"};
    for (int i = 0; i < 4; i++) {
        int t = cdl_st_find(st, names[i]);
        size_t n;
        assert_true(t >= 0);
        assert_string_equal(cdl_st_dtype(st, t), "F32");
        assert_non_null(cdl_st_data(st, t, &n));
        assert_int_equal(n, i < 2 ? 4 : 8);
    }
    for (int i = 1; i <= 2; i++) {
        char name[64];
        snprintf(name, sizeof name, "bn%d.num_batches_tracked", i);
        int t = cdl_st_find(st, name), nd;
        size_t n;
        int64_t shape[8];
        assert_true(t >= 0);
        const int64_t *q = cdl_st_data_i64(st, t, &n);
        assert_non_null(q);
        assert_int_equal(cdl_st_shape(st, t, &nd, shape), 0);
        assert_int_equal(nd, 0);
        assert_int_equal(q[0], 12);   /* 2 epochs of 6 training steps */
    }
    cdl_st_close(st);
}

static void raise_at_step(void *ctx, long steps)
{
    if (steps == *(long *)ctx)
        raise(SIGUSR1);
}

/* Runs c until SIGUSR1 arrives after step `at`: it must checkpoint there
 * and ask to be requeued. Then resumes it to the end. */
static void signal_then_resume(cdl_train_config *c, long at)
{
    c->on_step = raise_at_step;
    c->on_step_ctx = &at;
    cdl_train_result res;
    assert_int_equal(cdl_train_run(c, &res), CDL_EXIT_REQUEUE);
    assert_int_equal(res.interrupted, 1);
    assert_int_equal(res.steps, at);
    c->on_step = NULL;
    run_ok(c);
}

/* Without a checkpoint directory a stop by signal is an error, not
 * CDL_EXIT_REQUEUE: a requeueing script would start the run again at step
 * 1 at every time limit. */
static void test_signal_without_ckpt_dir(void **state)
{
    (void)state;
    cdl_train_config c;
    base_config(&c, "sig-nodir");
    c.ckpt_dir[0] = '\0';
    long at = 3;
    c.on_step = raise_at_step;
    c.on_step_ctx = &at;
    cdl_train_result res;
    assert_int_equal(cdl_train_run(&c, &res), -1);
    assert_int_equal(res.interrupted, 1);
    assert_int_equal(res.steps, at);
    assert_non_null(strstr(cdl_last_error(), "with no --ckpt-dir: nothing saved"));
}

static void test_signal_checkpoint_and_resume(void **state)
{
    (void)state;
    cdl_train_config full, sig;
    base_config(&full, "sig-full");
    full.optim = cdl_optim_defaults(CDL_OPTIM_ADAMW);
    full.lr = 1e-3f;
    run_ok(&full);
    base_config(&sig, "sig-part");
    sig.optim = full.optim;
    sig.lr = full.lr;
    signal_then_resume(&sig, 8);   /* epoch 2, batch 2 */
    assert_same_weights(full.ckpt_dir, sig.ckpt_dir);
}

static int stop_from_step(void *ctx)
{
    const long *s = ctx;   /* [0] the step to stop at, [1] on_step's count */
    return s[1] >= s[0];
}

static void count_steps(void *ctx, long steps)
{
    ((long *)ctx)[1] = steps;
}

/* should_stop stops a run as a signal does, inside an epoch: the
 * checkpoint of that step, CDL_TRAIN_STOPPED, and the resumed run ends
 * with the weights of the run never stopped. Named test_signal* so that
 * tests/fakegpu/test_train_signals runs it on the pipelined GPU loop. */
static void test_signal_should_stop_resume(void **state)
{
    (void)state;
    cdl_train_config full, part;
    base_config(&full, "stop-full");
    run_ok(&full);
    base_config(&part, "stop-part");
    long s[2] = {8, 0};   /* epoch 2, batch 2 */
    part.on_step = count_steps;
    part.on_step_ctx = s;
    part.should_stop = stop_from_step;
    part.should_stop_ctx = s;
    cdl_train_result res;
    assert_int_equal(cdl_train_run(&part, &res), CDL_TRAIN_STOPPED);
    assert_int_equal(res.interrupted, 2);
    assert_int_equal(res.steps, 8);
    part.should_stop = NULL;
    run_ok(&part);
    assert_same_weights(full.ckpt_dir, part.ckpt_dir);
}

/* The metrics of every epoch from "epoch" up to images_per_sec (what
 * neither the run's id nor timing changes), one line after another; with
 * evals, the --eval-every records among them too. */
static void read_records(const char *path, int evals, char *out, size_t len)
{
    FILE *f = fopen(path, "r");
    if (!f)
        fail_msg("cannot open %s", path);
    char line[20000];
    out[0] = 0;
    while (fgets(line, sizeof line, f)) {
        int eval = !strncmp(line, "{\"type\":\"eval\",", 15);
        if (strncmp(line, "{\"type\":\"epoch\",", 16) != 0 && !(evals && eval))
            continue;
        char *from = strstr(line, "\"epoch\":");
        char *cut = eval ? strchr(line, '}') : strstr(line, ",\"images_per_sec\"");
        assert_non_null(from);
        assert_non_null(cut);
        *cut = 0;
        strncat(out, from, len - strlen(out) - 2);
        strcat(out, "\n");
    }
    fclose(f);
}

static void read_metrics(const char *path, char *out, size_t len)
{
    read_records(path, 0, out, len);
}

/* Runs "NAME-full" and "NAME-sig" with --max-steps max_steps and
 * --eval-every eval_every (0: none), the second signalled after step `at`
 * and resumed: the same weights, best.safetensors and epoch and eval
 * records (into a, b of len bytes, equal; the first epoch's there). */
static void signal_like_unsignalled(const char *name, long max_steps, long eval_every, long at,
                                    char *a, char *b, size_t len)
{
    cdl_train_config full, sig;
    char sub[64];
    snprintf(sub, sizeof sub, "%s-full", name);
    base_config(&full, sub);
    full.max_steps = max_steps;
    full.eval_every = eval_every;
    snprintf(full.metrics, sizeof full.metrics, "%s/%s.jsonl", tmpdir, sub);
    run_ok(&full);
    snprintf(sub, sizeof sub, "%s-sig", name);
    base_config(&sig, sub);
    sig.max_steps = max_steps;
    sig.eval_every = eval_every;
    snprintf(sig.metrics, sizeof sig.metrics, "%s/%s.jsonl", tmpdir, sub);
    signal_then_resume(&sig, at);
    assert_same_weights(full.ckpt_dir, sig.ckpt_dir);
    char best_a[1100], best_b[1100];
    snprintf(best_a, sizeof best_a, "%s/best.safetensors", full.ckpt_dir);
    snprintf(best_b, sizeof best_b, "%s/best.safetensors", sig.ckpt_dir);
    cdl_st_file *fa = cdl_st_open(best_a), *fb = cdl_st_open(best_b);
    assert_non_null(fa);
    assert_non_null(fb);
    assert_string_equal(cdl_st_meta_get(fa, "step"), cdl_st_meta_get(fb, "step"));
    assert_string_equal(cdl_st_meta_get(fa, "best_val_loss"), cdl_st_meta_get(fb, "best_val_loss"));
    cdl_st_close(fa);
    cdl_st_close(fb);
    read_records(full.metrics, 1, a, len);
    read_records(sig.metrics, 1, b, len);
    assert_non_null(strstr(a, "\"epoch\":1,"));
    assert_string_equal(a, b);
}

/* A signal at an epoch's last step (6 of 6): the resumed run still ends
 * that epoch (validation, its record, best.safetensors) before the next;
 * it went straight on to epoch 2 and the record of epoch 1 was lost. */
static void test_signal_at_epoch_end(void **state)
{
    (void)state;
    char a[4096], b[4096];
    signal_like_unsignalled("end", 0, 0, 6, a, b, sizeof a);
}

/* The same when that last step is also --max-steps's (a job signalled as
 * it reached its last step): the resumed run ends the epoch as the run
 * that was not signalled does. It found --max-steps reached, said
 * "nothing to train" and skipped the epoch's end: no validation, no epoch
 * record. Started once more, it takes no step and writes no record. */
static void test_signal_at_max_steps_epoch_end(void **state)
{
    (void)state;
    char a[4096], b[4096];
    signal_like_unsignalled("maxend", 6, 0, 6, a, b, sizeof a);
    cdl_train_config again;
    base_config(&again, "maxend-sig");
    again.max_steps = 6;
    snprintf(again.metrics, sizeof again.metrics, "%s/maxend-sig.jsonl", tmpdir);
    snprintf(again.resume, sizeof again.resume, "auto");
    cdl_train_result res;
    assert_int_equal(cdl_train_run(&again, &res), 0);
    assert_int_equal(res.steps, 6);
    read_records(again.metrics, 1, b, sizeof b);
    assert_string_equal(a, b);
}

/* A signal at a step that owes a validation inside an epoch: --eval-every's
 * (step 4 of 6), or the run's end at --max-steps 4. The resumed run does
 * it first, as the run that was not signalled did at that step: the
 * signal skipped it, and its record and best.safetensors were lost. */
static void test_signal_at_owed_validation(void **state)
{
    (void)state;
    char a[4096], b[4096];
    signal_like_unsignalled("evalstep", 0, 2, 4, a, b, sizeof a);
    assert_non_null(strstr(a, "\"step\":4,\"val_loss\""));
    signal_like_unsignalled("maxmid", 4, 0, 4, a, b, sizeof a);
    assert_non_null(strstr(a, "\"epoch\":1,\"step\":4,"));
}

/* Line i (0-based) of path into line (of len bytes); 0 if there is none. */
static int metrics_line(const char *path, int i, char *line, size_t len)
{
    FILE *f = fopen(path, "r");
    if (!f)
        fail_msg("cannot open %s", path);
    int found = 0;
    for (int k = 0; !found && fgets(line, (int)len, f); k++)
        found = k == i;
    fclose(f);
    return found;
}

/* The value of "key" in a JSON line, as text up to the next , or }. */
static void json_value(const char *line, const char *key, char *out, size_t len)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(line, pat);
    if (!p)
        fail_msg("no %s in %s", key, line);
    p += strlen(pat);
    size_t n = strcspn(p, ",}");
    snprintf(out, len, "%.*s", (int)(n < len ? n : len - 1), p);
}

/* Every line of path ends with "}\n": no torn record. The number of lines. */
static int whole_lines(const char *path)
{
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char line[20000];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        size_t len = strlen(line);
        if (len < 2 || strcmp(line + len - 2, "}\n") != 0)
            fail_msg("%s: line %d is torn: %.80s", path, n + 1, line);
        n++;
    }
    fclose(f);
    return n;
}

/* The --metrics file on a full disk (here the file size limit): the run
 * stops after the step with an error naming the file (and the checkpoint,
 * which the limit stops too), and the file keeps whole records only, so
 * the resumed run's records do not start inside a torn one.
 * tests/e2e/ckpt-limits.sh has the checkpoint written at that step. */
static void test_metrics_write_fails(void **state)
{
    (void)state;
    cdl_train_config c;
    base_config(&c, "metrics-full");
    c.workers = 0;
    c.metrics_every = 1;
    snprintf(c.metrics, sizeof c.metrics, "%s/metrics-full.jsonl", tmpdir);
    struct rlimit old, lim;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim = old;
    lim.rlim_cur = 1800;   /* the config record and a few step records */
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    int rc = cdl_train_run(&c, NULL);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, prev);
    assert_int_equal(rc, -1);
    const char *msg = cdl_last_error();
    if (!strstr(msg, c.metrics) || !strstr(msg, "ulimit -f") ||
        !strstr(msg, "and its checkpoint failed too: "))
        fail_msg("unexpected message: %s", msg);
    int before = whole_lines(c.metrics);
    assert_true(before >= 2);
    run_ok(&c);   /* space again: the run goes on, appending */
    char line[20000], v[64];
    assert_true(whole_lines(c.metrics) > before);
    assert_true(metrics_line(c.metrics, before, line, sizeof line));
    json_value(line, "type", v, sizeof v);
    assert_string_equal(v, "\"config\"");

    /* A pipe (--metrics /dev/stdout into a consumer) has no offset: every
     * record still arrives. */
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    fcntl(fds[1], F_SETPIPE_SZ, 1 << 20);   /* the whole run's records fit */
    snprintf(c.metrics, sizeof c.metrics, "/proc/self/fd/%d", fds[1]);
    c.ckpt_dir[0] = '\0';
    c.metrics_every = 0;
    run_ok(&c);
    close(fds[1]);
    static char got[1 << 16];
    ssize_t n, len = 0;
    while ((n = read(fds[0], got + len, sizeof got - 1 - (size_t)len)) > 0)
        len += n;
    close(fds[0]);
    got[len > 0 ? len : 0] = '\0';
    assert_true(strstr(got, "{\"type\":\"config\"") == got);
    assert_non_null(strstr(got, "{\"type\":\"test\""));
}

/* The metrics file: a config record first (run id, rank, world, every
 * option), step records every --metrics-every steps with a gradient norm,
 * epoch records; a resumed run keeps its id; --resume never into the used
 * directory is refused and leaves the file alone. */
static void test_metrics_records(void **state)
{
    (void)state;
    cdl_train_config c;
    base_config(&c, "metrics");
    snprintf(c.metrics, sizeof c.metrics, "%s/metrics.jsonl", tmpdir);
    c.metrics_every = 2;
    c.max_steps = 4;
    run_ok(&c);
    c.max_steps = 0;
    run_ok(&c);   /* --resume auto: the same run goes on */
    char line[20000], v[128], id[128];
    /* Each run (the first ended by --max-steps) ends with the test set's record. */
    static const char *const types[] = {"config", "step", "step", "epoch", "test", "config",
                                        "step", "epoch", "step", "step", "step", "epoch",
                                        "test", NULL};
    static const char *const steps[] = {"", "2", "4", "4", "", "", "6", "6", "8", "10", "12",
                                        "12", ""};
    assert_true(metrics_line(c.metrics, 0, line, sizeof line));
    json_value(line, "run_id", id, sizeof id);
    assert_int_equal(strlen(id), 34);   /* 32 hex digits, quoted */
    for (int i = 0; types[i]; i++) {
        assert_true(metrics_line(c.metrics, i, line, sizeof line));
        json_value(line, "type", v, sizeof v);
        char want[32];
        snprintf(want, sizeof want, "\"%s\"", types[i]);
        assert_string_equal(v, want);
        json_value(line, "run_id", v, sizeof v);
        assert_string_equal(v, id);
        json_value(line, "rank", v, sizeof v);
        assert_string_equal(v, "0");
        if (!strcmp(types[i], "config")) {
            json_value(line, "world", v, sizeof v);
            assert_string_equal(v, "1");
            json_value(line, "metrics_every", v, sizeof v);
            assert_string_equal(v, "2");
            json_value(line, "batch_size", v, sizeof v);
            assert_int_equal(atoi(v), c.batch_size);
            json_value(line, "start_step", v, sizeof v);
            assert_string_equal(v, i ? "4" : "0");
            json_value(line, "version", v, sizeof v);
            assert_true(strlen(v) > 2);
            continue;
        }
        if (!strcmp(types[i], "test")) {
            json_value(line, "test_samples", v, sizeof v);
            assert_int_equal(atoi(v), c.synthetic_n / 5);   /* synthetic 192 / 5: 38 */
            continue;
        }
        json_value(line, "step", v, sizeof v);
        assert_string_equal(v, steps[i]);
        if (!strcmp(types[i], "step")) {
            json_value(line, "grad_norm", v, sizeof v);
            assert_true(atof(v) > 0);
            json_value(line, "loss", v, sizeof v);
            assert_true(atof(v) > 0);
        }
    }
    assert_false(metrics_line(c.metrics, 13, line, sizeof line));

    /* A second run into the same place: refused, nothing appended. */
    snprintf(c.resume, sizeof c.resume, "never");
    assert_int_equal(cdl_train_run(&c, NULL), -1);
    assert_non_null(strstr(cdl_last_error(), "--resume never"));
    assert_non_null(strstr(cdl_last_error(), "--resume auto"));
    assert_false(metrics_line(c.metrics, 13, line, sizeof line));
    /* Its own directory and file: a new run with another id. */
    base_config(&c, "metrics-2");
    snprintf(c.metrics, sizeof c.metrics, "%s/metrics-2.jsonl", tmpdir);
    c.epochs = 1;
    snprintf(c.resume, sizeof c.resume, "never");
    run_ok(&c);
    assert_true(metrics_line(c.metrics, 0, line, sizeof line));
    json_value(line, "run_id", v, sizeof v);
    assert_string_not_equal(v, id);
    /* A metrics file alone (no checkpoints) counts as a used place too. */
    c.ckpt_dir[0] = 0;
    assert_int_equal(cdl_train_run(&c, NULL), -1);
    assert_non_null(strstr(cdl_last_error(), "metrics-2.jsonl"));
}

/* on_record sees what --metrics writes, record for record. */
typedef struct {
    int n;
    cdl_train_record rec[64];
} record_log;

static void log_record(void *ctx, const cdl_train_record *rec)
{
    record_log *l = ctx;
    assert_true(rec->size >= sizeof *rec);
    assert_in_range(l->n, 0, 63);
    l->rec[l->n++] = *rec;
}

static void assert_close(const char *text, double want)
{
    double got = atof(text);
    assert_true(fabs(got - want) <= 1e-5 * fmax(1, fabs(want)));
}

static void test_on_record(void **state)
{
    (void)state;
    cdl_train_config c;
    base_config(&c, "records");
    snprintf(c.metrics, sizeof c.metrics, "%s/records.jsonl", tmpdir);
    c.metrics_every = 2;
    c.eval_every = 3;
    c.clip_grad = 100;   /* a grad_norm in the step records */
    record_log log = {0};
    c.on_record = log_record;
    c.on_record_ctx = &log;
    run_ok(&c);
    /* 2 epochs of 6 steps: steps 2 4 6, eval 3 (at 6 the epoch's own
     * validation), epoch 6, steps 8 10 12, eval 9, epoch 12, test. */
    static const enum cdl_record_type want[] = {
        CDL_RECORD_STEP, CDL_RECORD_EVAL, CDL_RECORD_STEP, CDL_RECORD_STEP, CDL_RECORD_EPOCH,
        CDL_RECORD_STEP, CDL_RECORD_EVAL, CDL_RECORD_STEP, CDL_RECORD_STEP, CDL_RECORD_EPOCH,
        CDL_RECORD_TEST};
    static const char *const names[] = {"", "\"step\"", "\"eval\"", "\"epoch\"", "\"test\""};
    assert_int_equal(log.n, (int)(sizeof want / sizeof want[0]));
    char line[20000], v[128];
    for (int i = 0; i < log.n; i++) {
        const cdl_train_record *r = &log.rec[i];
        assert_int_equal(r->type, want[i]);
        assert_true(metrics_line(c.metrics, i + 1, line, sizeof line));   /* after config */
        json_value(line, "type", v, sizeof v);
        assert_string_equal(v, names[r->type]);
        if (r->type == CDL_RECORD_TEST) {
            json_value(line, "test_loss", v, sizeof v);
            assert_close(v, r->loss);
            json_value(line, "test_samples", v, sizeof v);
            assert_int_equal(atol(v), r->samples);
            assert_int_equal(r->epoch, 0);
            continue;
        }
        json_value(line, "step", v, sizeof v);
        assert_int_equal(atol(v), r->step);
        json_value(line, "epoch", v, sizeof v);
        assert_int_equal(atoi(v), r->epoch);
        json_value(line, r->type == CDL_RECORD_EPOCH ? "train_loss" : r->type == CDL_RECORD_EVAL
                                                                        ? "val_loss" : "loss",
                   v, sizeof v);
        assert_close(v, r->loss);
        assert_true(r->loss > 0);
        if (r->type == CDL_RECORD_EPOCH) {
            json_value(line, "val_acc", v, sizeof v);
            assert_close(v, r->val_acc);
            assert_true(r->seconds > 0 && r->samples_per_sec > 0);
        } else {
            assert_true(isnan(r->val_loss));
        }
        if (r->type != CDL_RECORD_STEP)
            assert_int_equal(r->grad_norm_taken, 0);
        if (r->type == CDL_RECORD_STEP) {
            json_value(line, "grad_norm", v, sizeof v);
            assert_close(v, r->grad_norm);
            assert_int_equal(r->grad_norm_taken, 1);
            json_value(line, "lr", v, sizeof v);
            assert_close(v, r->lr);
        }
    }
}

/* A diverging run (diverge.sh's: a small GPT, SGD at lr 1000): its last
 * step record's norm overflowed (NaN or inf) and says it was taken, so a
 * program tells the divergence from a norm never computed (both were a
 * bare NaN to on_record). */
static void test_on_record_diverged(void **state)
{
    (void)state;
    char text[1100];
    snprintf(text, sizeof text, "%s/lm.txt", tmpdir);
    FILE *f = fopen(text, "w");
    assert_non_null(f);
    for (int i = 1; i <= 3000; i++)
        fprintf(f, "line %d of a small text, with some words %d\n", i, i * 7 % 13);
    assert_int_equal(fclose(f), 0);
    cdl_train_config c;
    base_config(&c, "records-nan");
    c.ckpt_dir[0] = '\0';
    snprintf(c.dataset, sizeof c.dataset, "text");
    snprintf(c.data_dir, sizeof c.data_dir, "%.1000s", text);
    snprintf(c.model, sizeof c.model, "gpt:n_layer=1,n_head=1,n_embd=16");
    c.block_size = 16;
    c.batch_size = 4;
    c.optim = cdl_optim_defaults(CDL_OPTIM_SGD);
    c.lr = 1000;
    c.epochs = 100;
    c.max_steps = 100;
    c.threads = 1;
    c.workers = 0;
    c.metrics_every = 1;
    record_log log = {0};
    c.on_record = log_record;
    c.on_record_ctx = &log;
    assert_int_equal(cdl_train_run(&c, NULL), -1);
    assert_non_null(strstr(cdl_last_error(), "training diverged"));
    assert_true(log.n >= 2);
    const cdl_train_record *r = &log.rec[log.n - 1];
    assert_int_equal(r->type, CDL_RECORD_STEP);
    assert_false(isfinite(r->grad_norm));
    assert_int_equal(r->grad_norm_taken, 1);
    assert_true(isfinite(log.rec[0].grad_norm) && log.rec[0].grad_norm_taken);
}

static void loop_config(cdl_train_config *c, const char *sub)
{
    base_config(c, sub);
    /* 6 full batches and one of 8 per epoch (under valgrind of 1) */
    c->synthetic_n = (int)test_size(200, 13);
    c->val_split = 0;         /* (all 200 train) */
    snprintf(c->metrics, sizeof c->metrics, "%s/%s.json", tmpdir, sub);
}

/* The pipelined loop (steps in flight counted before every checkpoint)
 * against the same loop step by step: bitwise the same weights and epoch
 * metrics, also when stopped by --max-steps with --ckpt-every on the way
 * and resumed, and when stopped by a signal and resumed. */
static void test_gpu_loop_matches_host_loop(void **state)
{
    (void)state;
    cdl_train_config host, pipe, part, sig;
    loop_config(&host, "loop-host");
    run_ok(&host);
    cdl_backend *be = pipelined_cpu();
    loop_config(&pipe, "loop-pipe");
    pipe.backend = be;
    run_ok(&pipe);
    assert_same_weights(host.ckpt_dir, pipe.ckpt_dir);
    char mh[2048], mp[2048];
    read_metrics(host.metrics, mh, sizeof mh);
    read_metrics(pipe.metrics, mp, sizeof mp);
    assert_string_equal(mh, mp);
    assert_non_null(strstr(mh, "\"epoch\":2,\"step\":14,"));

    loop_config(&part, "loop-part");
    part.backend = be;
    part.max_steps = 5;
    part.ckpt_every = 3;
    run_ok(&part);
    part.max_steps = 0;
    snprintf(part.resume, sizeof part.resume, "auto");
    run_ok(&part);
    assert_same_weights(host.ckpt_dir, part.ckpt_dir);

    loop_config(&sig, "loop-sig");
    sig.backend = be;
    signal_then_resume(&sig, 9);   /* epoch 2, batch 2 */
    assert_same_weights(host.ckpt_dir, sig.ckpt_dir);
    read_metrics(sig.metrics, mp, sizeof mp);
    /* Epoch 2's metrics survive the restart: the same as the host loop's. */
    const char *last = mp;
    for (const char *p = mp; (p = strstr(p, "\"epoch\":")); p++)
        last = p;
    assert_non_null(strstr(mh, last));
    cdl_backend_destroy(be);
}

static void test_corrupt_checkpoint_is_an_error(void **state)
{
    (void)state;
    cdl_train_config c;
    base_config(&c, "corrupt");
    c.epochs = 1;
    run_ok(&c);
    char path[1100];
    snprintf(path, sizeof path, "%s/last.safetensors", c.ckpt_dir);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(truncate(path, st.st_size - 3), 0);
    c.epochs = 2;
    assert_int_equal(cdl_train_run(&c, NULL), -1);
    assert_non_null(strstr(cdl_last_error(), "last.safetensors"));
}

static void test_mismatched_model_is_an_error(void **state)
{
    (void)state;
    cdl_train_config c;
    base_config(&c, "mismatch");
    c.epochs = 1;
    run_ok(&c);
    snprintf(c.model, sizeof c.model, "mlp");
    c.epochs = 2;
    assert_int_equal(cdl_train_run(&c, NULL), -1);
    assert_non_null(strstr(cdl_last_error(), "another model"));
    /* Another optimizer is named too. */
    snprintf(c.model, sizeof c.model, "lenet");
    c.optim = cdl_optim_defaults(CDL_OPTIM_ADAM);
    assert_int_equal(cdl_train_run(&c, NULL), -1);
    assert_non_null(strstr(cdl_last_error(), "--optimizer sgd"));
}

/* The checkpoint's "model" metadata holds the spec file's whole path, also
 * one longer than 127 characters (it used to be cut there). */
static void test_checkpoint_keeps_long_model_path(void **state)
{
    (void)state;
    cdl_train_config c;
    base_config(&c, "longpath");
    c.epochs = 1;
    char dir[200];
    snprintf(dir, sizeof dir, "%.60s/a-folder-with-a-name-long-enough-that-the-spec-path-passes-"
             "one-hundred-and-twenty-seven-characters", tmpdir);
    assert_int_equal(mkdir(dir, 0755), 0);
    snprintf(c.model, sizeof c.model, "%s/linear.spec", dir);
    assert_true(strlen(c.model) > 127);
    FILE *spec = fopen(c.model, "w");
    assert_non_null(spec);
    fputs("flatten\nlinear 10\n", spec);
    fclose(spec);
    run_ok(&c);
    char path[1100];
    snprintf(path, sizeof path, "%s/last.safetensors", c.ckpt_dir);
    cdl_st_file *f = cdl_st_open(path);
    if (!f)
        fail_msg("%s", cdl_last_error());
    assert_non_null(cdl_st_meta_get(f, "model"));
    assert_string_equal(cdl_st_meta_get(f, "model"), c.model);
    cdl_st_close(f);
}

typedef struct alloc_probe {
    long first, last;
    uint64_t at_first, at_last;
} alloc_probe;

static void count_allocs(void *ctx, long steps)
{
    alloc_probe *p = ctx;
    if (steps == p->first)
        p->at_first = cdl_alloc_count();
    if (steps == p->last)
        p->at_last = cdl_alloc_count();
}

static void test_no_allocation_inside_steps(void **state)
{
    (void)state;
    cdl_train_config c;
    base_config(&c, "alloc");
    c.ckpt_dir[0] = 0;
    c.epochs = 1;
    alloc_probe p = {.first = 1, .last = 5};
    c.on_step = count_allocs;
    c.on_step_ctx = &p;
    run_ok(&c);
    assert_true(p.at_first > 0);
    assert_int_equal(p.at_last, p.at_first);
}

static void test_bad_config(void **state)
{
    (void)state;
    cdl_train_config c;
    base_config(&c, "bad");
    c.batch_size = 0;
    assert_int_equal(cdl_train_run(&c, NULL), -1);
    assert_non_null(strstr(cdl_last_error(), "--batch-size"));
    base_config(&c, "bad");
    snprintf(c.dataset, sizeof c.dataset, "fashion-mnist");
    snprintf(c.data_dir, sizeof c.data_dir, "%s/nowhere", tmpdir);
    assert_int_equal(cdl_train_run(&c, NULL), -1);
    assert_non_null(strstr(cdl_last_error(), "nowhere"));
    /* A label smoothing out of PyTorch's [0, 1]: NaN was taken as none
     * and written as "nan" into the checkpoint's JSON; inf or 2 gave a NaN
     * loss at the first step, blamed on the data. */
    const float smooth[] = {NAN, INFINITY, 2.0f, -0.1f};
    for (int i = 0; i < 4; i++) {
        base_config(&c, "bad");
        c.label_smoothing = smooth[i];
        assert_int_equal(cdl_train_run(&c, NULL), -1);
        assert_non_null(strstr(cdl_last_error(), "--label-smoothing"));
    }
    /* A config not started from cdl_train_defaults (no size) is refused. */
    base_config(&c, "bad");
    c.size = 0;
    assert_int_equal(cdl_train_run(&c, NULL), -1);
    assert_non_null(strstr(cdl_last_error(), "cdl_train_defaults"));
}

/* The progress bar's ETA (lib/train/report.c). */
static void test_eta_format(void **state)
{
    (void)state;
    char b[32];
    train_format_duration(0, b, sizeof b);
    assert_string_equal(b, "0:00");
    train_format_duration(59.6, b, sizeof b);
    assert_string_equal(b, "1:00");
    train_format_duration(3725, b, sizeof b);
    assert_string_equal(b, "1:02:05");
    train_format_duration(NAN, b, sizeof b);
    assert_string_equal(b, "?");
    train_format_duration(-1, b, sizeof b);
    assert_string_equal(b, "?");
}

static int setup(void **state)
{
    (void)state;
    return test_mkdtemp(tmpdir, sizeof tmpdir, "train");
}

static int teardown(void **state)
{
    (void)state;
    return test_rm_rf(tmpdir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_resume_mid_epoch),
        cmocka_unit_test(test_max_steps_reached),
        cmocka_unit_test(test_resume_mid_epoch_batchnorm),
        cmocka_unit_test(test_resume_mid_epoch_resnet20),
        cmocka_unit_test(test_signal_checkpoint_and_resume),
        cmocka_unit_test(test_signal_without_ckpt_dir),
        cmocka_unit_test(test_signal_should_stop_resume),
        cmocka_unit_test(test_gpu_loop_matches_host_loop),
        cmocka_unit_test(test_corrupt_checkpoint_is_an_error),
        cmocka_unit_test(test_mismatched_model_is_an_error),
        cmocka_unit_test(test_checkpoint_keeps_long_model_path),
        cmocka_unit_test(test_no_allocation_inside_steps),
        cmocka_unit_test(test_bad_config),
        cmocka_unit_test(test_metrics_records),
        cmocka_unit_test(test_metrics_write_fails),
        cmocka_unit_test(test_signal_at_epoch_end),
        cmocka_unit_test(test_signal_at_max_steps_epoch_end),
        cmocka_unit_test(test_signal_at_owed_validation),
        cmocka_unit_test(test_checkpoint_cadence),
        cmocka_unit_test(test_on_record),
        cmocka_unit_test(test_on_record_diverged),
        cmocka_unit_test(test_eta_format),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
