/* Helpers of the harness tests (test_train, test_train_lm): runs that
 * must succeed and the weights their checkpoints hold. */
#ifndef CDL_TRAIN_TESTUTIL_H
#define CDL_TRAIN_TESTUTIL_H

#include "testutil.h"

#include <string.h>

#include <cdl/cdl.h>

/* Loads every tensor of DIR/last.safetensors (F32 weights and optimizer
 * state, I64 counts) into one flat array of bytes. */
static inline unsigned char *load_weights(const char *dir, size_t *n)
{
    char path[1100];
    snprintf(path, sizeof path, "%s/last.safetensors", dir);
    cdl_st_file *f = cdl_st_open(path);
    if (!f)
        fail_msg("%s", cdl_last_error());
    size_t total = 0;
    unsigned char *w = NULL;
    for (int pass = 0; pass < 2; pass++) {
        size_t o = 0;
        for (int i = 0; i < cdl_st_count(f); i++) {
            size_t k;
            const void *d;
            size_t es = 4;
            if (!strcmp(cdl_st_dtype(f, i), "I64")) {
                d = cdl_st_data_i64(f, i, &k);
                es = 8;
            } else {
                d = cdl_st_data(f, i, &k);
            }
            assert_non_null(d);
            if (w)
                memcpy(w + o, d, k * es);
            o += k * es;
        }
        total = o;
        if (!pass)
            w = malloc(total + 1);
    }
    cdl_st_close(f);
    *n = total;
    return w;
}

static inline void assert_same_weights(const char *a, const char *b)
{
    size_t na, nb;
    unsigned char *wa = load_weights(a, &na), *wb = load_weights(b, &nb);
    assert_int_equal(na, nb);
    assert_memory_equal(wa, wb, na);
    free(wa);
    free(wb);
}

static inline void run_ok(const cdl_train_config *c)
{
    cdl_train_result res;
    if (cdl_train_run(c, &res) != 0)
        fail_msg("cdl_train_run: %s", cdl_last_error());
}

/* The floats of tensor `name` of DIR/last.safetensors (malloc'ed), *n of
 * them. */
static inline float *load_tensor(const char *dir, const char *name, size_t *n)
{
    char path[1100];
    snprintf(path, sizeof path, "%s/last.safetensors", dir);
    cdl_st_file *f = cdl_st_open(path);
    if (!f)
        fail_msg("%s", cdl_last_error());
    int i = cdl_st_find(f, name);
    if (i < 0)
        fail_msg("%s: no tensor %s", path, name);
    const float *d = cdl_st_data(f, i, n);
    assert_non_null(d);
    float *out = malloc(*n * sizeof *out + 1);
    memcpy(out, d, *n * sizeof *out);
    cdl_st_close(f);
    return out;
}

/* A CPU backend that declares step marks (done at once, its ops being
 * synchronous): the training loop (loop.c) then pipelines on it as on a
 * GPU, batches staged into two slots and results counted one step late. */
static inline int mark_now(cdl_backend *be, int slot)
{
    (void)be;
    (void)slot;
    return 0;
}

static inline int mark_done_now(cdl_backend *be, int slot)
{
    (void)slot;
    return be->ops->sync(be) == 0 ? 1 : -1;
}

static cdl_backend_ops pipelined_cpu_ops;

static inline cdl_backend *pipelined_cpu(void)
{
    cdl_backend *be = cdl_backend_cpu_create(2);   /* base_config's threads */
    assert_non_null(be);
    pipelined_cpu_ops = *be->ops;
    pipelined_cpu_ops.mark = mark_now;
    pipelined_cpu_ops.mark_done = mark_done_now;
    pipelined_cpu_ops.mark_wait = mark_now;
    be->ops = &pipelined_cpu_ops;
    assert_true(cdl_backend_is_async(be));
    return be;
}

#endif
