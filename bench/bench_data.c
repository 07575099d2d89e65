/* Does the data loader keep up? One training epoch of the seed CNN over
 * real Fashion-MNIST through cdl_loader (uint8 images decoded, normalised
 * and shuffled by background workers) against the same number of synthetic
 * 1x28x28 images already in memory as float batches (no loader at all).
 *
 * Both sides run the same model (the built-in LeNet on 1x28x28), the same
 * batch sizes in the same sequence (the real epoch's last batch is partial,
 * so is the synthetic one), SGD with momentum 0.9 and weight decay 1e-4.
 * Runs alternate synthetic, real, synthetic, real ... so load from
 * elsewhere hits both alike; the figure is the median of the per-pair
 * ratios real / synthetic. Target (issue 3): a real epoch within 10% of the
 * synthetic speed.
 *
 * Usage: bench_data [--batch N] [--threads T] [--workers W] [--runs R] [--data-dir DIR]
 * Prints a report and one line "RESULT key=value ..." for bench/run_cnn.sh;
 * exits 77 when the dataset is not installed (dataset-fashion-mnist).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cdl/cdl.h>

#include "bench/bench_util.h"
#include "lib/core/rng.h"

#define BATCHES 4      /* distinct synthetic batches, used in turn */

typedef struct bench {
    cdl_backend *be;
    cdl_model *m;
    cdl_optim *opt;
    int batch, classes;
    float *dlogits, *loss;
    int32_t *pred;
    long step;
} bench;

static void die(void)
{
    fprintf(stderr, "bench_data: %s\n", cdl_last_error());
    exit(1);
}

/* One training step: the same work whichever side the batch came from. */
static void train_step(bench *b, const float *x, const int32_t *y, int n)
{
    const cdl_backend_ops *op = b->be->ops;
    const float *logits = cdl_model_forward(b->m, x, n, 1, (uint64_t)b->step);
    op->xent_fwd_bwd(b->be, n, b->classes, logits, y, 1.0f / (float)n, b->dlogits, b->loss,
                     b->pred);
    cdl_model_backward(b->m, b->dlogits, NULL, NULL);
    cdl_optim_step(b->opt, cdl_model_params(b->m), cdl_model_grads(b->m), 0.01f);
    b->step++;
}

/* Images/s of `total` synthetic images from memory, in loader-sized batches. */
static double synthetic_epoch(bench *b, float *const *x, int32_t *const *y, long total)
{
    double t = bench_now();
    for (long done = 0, k = 0; done < total; k++) {
        int n = total - done < b->batch ? (int)(total - done) : b->batch;
        train_step(b, x[k % BATCHES], y[k % BATCHES], n);
        done += n;
    }
    b->be->ops->sync(b->be);
    return (double)total / (bench_now() - t);
}

/* Images/s of one shuffled epoch through the loader. */
static double real_epoch(bench *b, cdl_loader *l, int epoch, long *seen)
{
    cdl_batch bt;
    int got;
    *seen = 0;
    double t = bench_now();
    if (cdl_loader_start_epoch(l, epoch, 0))
        die();
    while ((got = cdl_loader_next(l, &bt)) == 1) {
        train_step(b, bt.x, bt.y, bt.n);
        *seen += bt.n;
    }
    if (got < 0)
        die();
    b->be->ops->sync(b->be);
    return (double)*seen / (bench_now() - t);
}

int main(int argc, char **argv)
{
    int batch = 64, threads = 1, workers = 1, runs = 5;
    const char *dir = NULL;
    for (int i = 1; i < argc; i += 2) {
        int *dst = NULL;
        if (!strcmp(argv[i], "--data-dir") && i + 1 < argc) {
            dir = argv[i + 1];
            continue;
        }
        if (!strcmp(argv[i], "--batch"))
            dst = &batch;
        else if (!strcmp(argv[i], "--threads"))
            dst = &threads;
        else if (!strcmp(argv[i], "--workers"))
            dst = &workers;
        else if (!strcmp(argv[i], "--runs"))
            dst = &runs;
        if (!dst || i + 1 >= argc || (*dst = atoi(argv[i + 1])) < (dst == &workers ? 0 : 1)) {
            fprintf(stderr, "usage: %s [--batch N] [--threads T] [--workers W] [--runs R] "
                            "[--data-dir DIR] (N, T, R >= 1; W >= 0)\n", argv[0]);
            return 2;
        }
    }

    const char *where = dir ? dir : CDL_FASHION_MNIST_DIR;
    if (access(where, R_OK) != 0) {
        printf("bench_data: no Fashion-MNIST in %s (install dataset-fashion-mnist): skipped\n",
               where);
        return 77;
    }
    cdl_dataset ds;
    if (cdl_dataset_load("fashion-mnist", dir, 1, &ds))
        die();

    bench b = {.batch = batch, .classes = ds.classes};
    cdl_model_spec spec;
    b.be = cdl_backend_cpu_create(threads);
    if (!b.be || cdl_spec_builtin("lenet", ds.shape, ds.classes, &spec))
        die();
    b.m = cdl_model_create(&spec, ds.shape, batch, b.be);
    cdl_optim_config oc = cdl_optim_defaults(CDL_OPTIM_SGD);
    oc.momentum = 0.9f;
    oc.weight_decay = 1e-4f;
    b.opt = b.m ? cdl_optim_create(&oc, cdl_model_nparams(b.m), b.be) : NULL;
    if (!b.m || !b.opt)
        die();
    cdl_model_init(b.m, 1);
    const cdl_backend_ops *op = b.be->ops;
    b.dlogits = op->alloc(b.be, (size_t)batch * (size_t)ds.classes * sizeof(float));
    b.loss = op->alloc(b.be, (size_t)batch * sizeof(float));
    b.pred = op->alloc(b.be, (size_t)batch * sizeof(int32_t));

    /* Synthetic batches already normalised in memory: what the loader's
     * output would be if producing it cost nothing. */
    size_t img = (size_t)ds.shape.c * ds.shape.h * ds.shape.w;
    float *x[BATCHES];
    int32_t *y[BATCHES];
    rng_state r;
    rng_seed(&r, 42);
    for (int k = 0; k < BATCHES; k++) {
        x[k] = cdl_malloc((size_t)batch * img * sizeof(float));
        y[k] = cdl_malloc((size_t)batch * sizeof(int32_t));
        if (!x[k] || !y[k] || !b.dlogits || !b.loss || !b.pred)
            die();
        for (size_t i = 0; i < (size_t)batch * img; i++)
            x[k][i] = (float)(2.0 * rng_uniform(&r) - 1.0);
        for (int i = 0; i < batch; i++)
            y[k][i] = (int32_t)rng_below(&r, (uint64_t)ds.classes);
    }

    cdl_loader_config lc = {.size = sizeof lc, .batch_size = batch, .shuffle = 1,
                            .workers = workers, .seed = 1, .rank = 0, .world = 1};
    cdl_loader *l = cdl_loader_create(&ds, &lc);
    if (!l)
        die();

    double *syn = cdl_calloc((size_t)runs, sizeof *syn), *real = cdl_calloc((size_t)runs, sizeof *real);
    double *ratio = cdl_calloc((size_t)runs, sizeof *ratio);
    if (!syn || !real || !ratio)
        die();
    long seen = 0;
    real_epoch(&b, l, 0, &seen);                 /* warm-up: page cache, plans, threads */
    synthetic_epoch(&b, x, y, seen);
    for (int k = 0; k < runs; k++) {
        syn[k] = synthetic_epoch(&b, x, y, seen);
        real[k] = real_epoch(&b, l, k + 1, &seen);
        ratio[k] = real[k] / syn[k];
    }
    double s[3], rl[3], q[3];
    bench_stats(syn, runs, s);
    bench_stats(real, runs, rl);
    bench_stats(ratio, runs, q);
    printf("cdl %s, seed CNN on 1x28x28, %d thread(s), batch %d, %d loader worker(s), %d pairs of "
           "epochs of %ld images\n", cdl_version(), threads, batch, workers, runs, seen);
    printf("  synthetic in memory: median %.0f img/s (min %.0f, max %.0f)\n", s[0], s[1], s[2]);
    printf("  Fashion-MNIST through the loader: median %.0f img/s (min %.0f, max %.0f)\n", rl[0],
           rl[1], rl[2]);
    printf("  real / synthetic: median of pairs %.3f (min %.3f, max %.3f): %s\n", q[0], q[1], q[2],
           q[0] >= 0.9 ? "within 10%" : "MORE than 10% slower");
    printf("RESULT impl=data batch=%d threads=%d workers=%d synthetic=%.0f real=%.0f ratio=%.3f "
           "ratio_min=%.3f ratio_max=%.3f\n",
           batch, threads, workers, s[0], rl[0], q[0], q[1], q[2]);

    for (int k = 0; k < BATCHES; k++) {
        cdl_free(x[k]);
        cdl_free(y[k]);
    }
    cdl_free(syn);
    cdl_free(real);
    cdl_free(ratio);
    cdl_loader_destroy(l);
    op->free(b.be, b.dlogits);
    op->free(b.be, b.loss);
    op->free(b.be, b.pred);
    cdl_optim_destroy(b.opt);
    cdl_model_destroy(b.m);
    cdl_backend_destroy(b.be);
    cdl_dataset_free(&ds);
    return 0;
}
