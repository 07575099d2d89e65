/* cdl_train_config.on_log: a program embedding libcdl takes the lines a
 * run prints (epoch lines, notes, warnings) into its own log, and nothing
 * reaches its stdout or stderr; quiet still silences CDL_LOG_INFO; a run
 * without on_log prints as before, also right after one with it. Through
 * the shared libcdl and its public header only. */
#include "testutil.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cdl/cdl.h>

typedef struct got {
    int lines, info, warnings;
    char all[8192];
} got;

static void on_log(void *ctx, int level, const char *line)
{
    got *g = ctx;
    g->lines++;
    g->info += level == CDL_LOG_INFO;
    g->warnings += level == CDL_LOG_WARNING;
    assert_null(strchr(line, '\n'));
    size_t n = strlen(g->all);
    snprintf(g->all + n, sizeof g->all - n, "%d %s\n", level, line);
}

static void setup(cdl_train_config *cfg, int quiet)
{
    cdl_train_defaults(cfg);
    snprintf(cfg->model, sizeof cfg->model, "mlp");
    snprintf(cfg->dataset, sizeof cfg->dataset, "synthetic");
    snprintf(cfg->device, sizeof cfg->device, "cpu");
    /* 4 steps an epoch: 3 full batches and a partial one after the
     * validation split's 10% (under valgrind, CDL_TEST_SMALL, of 8). */
    cfg->synthetic_n = (int)test_size(256, 32);
    cfg->batch_size = (int)test_size(64, 8);
    cfg->epochs = 2;
    cfg->threads = 1;
    cfg->progress = 1;      /* a bar, were the lines printed */
    cfg->max_steps = 100;   /* past the run's 8 steps: a warning */
    cfg->quiet = quiet;
}

/* Runs cfg with the process's stdout and stderr going to a file; returns
 * what was written there (static). */
static const char *run_captured(const cdl_train_config *cfg)
{
    static char out[8192];
    char path[] = "/tmp/cdl-test-log.XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    unlink(path);
    fflush(stdout);
    fflush(stderr);
    int o = dup(1), e = dup(2);
    dup2(fd, 1);
    dup2(fd, 2);
    int rc = cdl_train_run(cfg, NULL);
    fflush(stdout);
    fflush(stderr);
    dup2(o, 1);
    dup2(e, 2);
    close(o);
    close(e);
    if (rc != 0)
        fail_msg("%s", cdl_last_error());
    ssize_t n = pread(fd, out, sizeof out - 1, 0);
    close(fd);
    out[n > 0 ? n : 0] = '\0';
    return out;
}

static void test_lines_to_hook(void **state)
{
    (void)state;
    got g = {0};
    cdl_train_config cfg;
    setup(&cfg, 0);
    cfg.on_log = on_log;
    cfg.on_log_ctx = &g;
    const char *printed = run_captured(&cfg);
    if (printed[0])
        fail_msg("a run with on_log printed:\n%s", printed);
    if (!strstr(g.all, "1 epoch 1/2  train loss") || !strstr(g.all, "1 epoch 2/2  train loss") ||
        !strstr(g.all, "1 test  loss"))
        fail_msg("on_log missed the epoch or test lines:\n%s", g.all);
    if (!strstr(g.all, "2 cdl-train: warning: --max-steps 100 is past the run's end"))
        fail_msg("on_log missed the --max-steps warning:\n%s", g.all);
    assert_int_equal(g.lines, g.info + g.warnings);

    /* quiet: the warning only. */
    got q = {0};
    setup(&cfg, 1);
    cfg.on_log = on_log;
    cfg.on_log_ctx = &q;
    assert_string_equal(run_captured(&cfg), "");
    assert_int_equal(q.info, 0);
    assert_int_equal(q.warnings, 1);
}

/* After a run with on_log, one without prints again. */
static void test_hook_is_per_run(void **state)
{
    (void)state;
    got g = {0};
    cdl_train_config cfg;
    setup(&cfg, 0);
    cfg.progress = 0;
    cfg.on_log = on_log;
    cfg.on_log_ctx = &g;
    assert_string_equal(run_captured(&cfg), "");
    cfg.on_log = NULL;
    const char *printed = run_captured(&cfg);
    if (!strstr(printed, "epoch 2/2  train loss") ||
        !strstr(printed, "warning: --max-steps 100 is past the run's end"))
        fail_msg("a run without on_log did not print its lines:\n%s", printed);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lines_to_hook),
        cmocka_unit_test(test_hook_is_per_run),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
