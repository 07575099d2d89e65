/* Training speed of a built-in CNN on the CPU backend, through the public API.
 *
 * The network is a built-in model on 3x32x32 inputs: by default LeNet (conv
 * 6@5x5, relu, maxpool 2, conv 16@5x5, relu, maxpool 2, fc 120, relu, fc 84,
 * relu, fc 10, the same as bench/torch_cnn.py), or --model resnet20 /
 * resnet18 (bench/torch_speed.py has the PyTorch side); cross-entropy, SGD
 * with momentum 0.9 and weight decay 1e-4. Each step is forward, the fused softmax cross-entropy
 * op, backward and the optimizer step on pre-generated synthetic batches in
 * memory (no loader). After warm-up steps, --runs timed runs of --steps
 * steps each give the median, min and max images/s.
 *
 * After the training runs (so OpenBLAS's own threads cannot disturb them) the
 * same program measures this machine's SGEMM speed with OpenBLAS on the same
 * number of threads (a large square product) and reports the share of it
 * that the training step reaches: multiply-add FLOPs of the convolutions and
 * linear layers (forward, weight gradients and input gradients) per second,
 * divided by SGEMM FLOP/s.
 *
 * Usage: bench_cnn [--model NAME] [--batch N] [--threads T] [--steps S] [--runs R]
 *                  [--sgemm 0] (0: skip the SGEMM peak check; the % of peak reads 0)
 *                  [--fast-conv 1] (the backend's fast_conv: Winograd F(4x4) on AVX2
 *                  CPUs and Zen 4; the FLOPs counted stay the direct convolutions')
 * Prints a human-readable report and one line "RESULT key=value ..." for
 * bench/run_cnn.sh.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include <cblas.h>

#include <cdl/cdl.h>

#include "bench/bench_util.h"
#include "lib/core/rng.h"

#define BATCHES 4      /* distinct synthetic batches, used in turn */
#define CLASSES 10

/* Best SGEMM GFLOP/s of an n x n x n product on `threads` OpenBLAS threads. */
static double sgemm_gflops(int threads, int n)
{
    size_t nn = (size_t)n * n;
    float *a = cdl_malloc(nn * sizeof *a), *b = cdl_malloc(nn * sizeof *b), *c = cdl_malloc(nn * sizeof *c);
    if (!a || !b || !c) {
        fprintf(stderr, "bench_cnn: %s\n", cdl_last_error());
        exit(1);
    }
    for (size_t i = 0; i < nn; i++) {
        a[i] = (float)(i % 13) * 0.01f;
        b[i] = (float)(i % 7) * 0.02f;
    }
    openblas_set_num_threads(threads);
    double best = 1e30;
    for (int r = 0; r < 4; r++) {
        double t = bench_now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        t = bench_now() - t;
        if (r > 0 && t < best)   /* the first call warms up */
            best = t;
    }
    openblas_set_num_threads(1);
    cdl_free(a);
    cdl_free(b);
    cdl_free(c);
    return 2.0 * n * (double)nn / best / 1e9;
}

/* Multiply-add FLOPs per image of one training step (forward, dW, dx). */
static double cpu_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static double step_flops(const cdl_model_spec *spec, cdl_shape in)
{
    cdl_shape shapes[CDL_MAX_LAYERS + 1];
    if (cdl_spec_infer(spec, in, shapes))
        return 0;
    double total = 0;
    int first = 1;
    for (int i = 0; i < spec->nlayers; i++) {
        const cdl_layer_spec *l = &spec->layers[i];
        double f;
        /* A layer's input is the previous layer's output unless it names
         * others; only add/concat read several, and they have no FLOPs. */
        int src = l->nin > 0 ? l->in[0] + 1 : i;
        cdl_shape x = shapes[src], y = shapes[i + 1];
        if (l->kind == CDL_LAYER_CONV2D)
            f = 2.0 * y.c * y.h * y.w * (x.c / (l->groups > 1 ? l->groups : 1)) * l->kernel *
                (l->kernel_w ? l->kernel_w : l->kernel);
        else if (l->kind == CDL_LAYER_LINEAR)
            f = 2.0 * x.c * x.h * x.w * l->out;
        else
            continue;
        total += f * (first ? 2 : 3);   /* the first layer needs no dx */
        first = 0;
    }
    return total;
}

int main(int argc, char **argv)
{
    int batch = 512, threads = 1, steps = 0, runs = 7, peak_check = 1, fast_conv = 0;
    const char *model = "lenet";
    for (int i = 1; i < argc; i += 2) {
        int *dst = NULL;
        if (!strcmp(argv[i], "--model") && i + 1 < argc && cdl_spec_is_builtin(argv[i + 1])) {
            model = argv[i + 1];
            continue;
        }
        if (!strcmp(argv[i], "--batch"))
            dst = &batch;
        else if (!strcmp(argv[i], "--threads"))
            dst = &threads;
        else if (!strcmp(argv[i], "--steps"))
            dst = &steps;
        else if (!strcmp(argv[i], "--runs"))
            dst = &runs;
        else if (!strcmp(argv[i], "--sgemm") && i + 1 < argc) {
            peak_check = atoi(argv[i + 1]) != 0;
            continue;
        }
        else if (!strcmp(argv[i], "--fast-conv") && i + 1 < argc) {
            fast_conv = atoi(argv[i + 1]) != 0;
            continue;
        }
        if (!dst || i + 1 >= argc || (*dst = atoi(argv[i + 1])) < 1) {
            fprintf(stderr, "usage: %s [--model lenet|mlp|resnet20|resnet18] [--batch N] [--threads T] "
                            "[--steps S] [--runs R] (numbers >= 1) [--sgemm 0|1] [--fast-conv 0|1]\n",
                    argv[0]);
            return 2;
        }
    }
    if (!steps)   /* ~1 s per run */
        steps = !strcmp(model, "lenet") || !strcmp(model, "mlp") ? (16384 / batch > 4 ? 16384 / batch : 4)
                                                                 : 4;
    if (runs < 5)
        runs = 5;

    cdl_backend_params bp;
    cdl_backend_params_init(&bp);
    bp.threads = threads;
    bp.fast_conv = fast_conv;
    cdl_backend *be = cdl_backend_create_with("cpu", &bp);
    cdl_shape in = {3, 32, 32};
    cdl_model_spec spec;
    if (!be || cdl_spec_builtin(model, in, CLASSES, &spec)) {
        fprintf(stderr, "bench_cnn: %s\n", cdl_last_error());
        return 1;
    }
    cdl_model *m = cdl_model_create(&spec, in, batch, be);
    cdl_optim_config oc = cdl_optim_defaults(CDL_OPTIM_SGD);
    oc.momentum = 0.9f;
    oc.weight_decay = 1e-4f;
    cdl_optim *opt = m ? cdl_optim_create(&oc, cdl_model_nparams(m), be) : NULL;
    if (!m || !opt) {
        fprintf(stderr, "bench_cnn: %s\n", cdl_last_error());
        return 1;
    }
    cdl_model_init(m, 1);

    /* Synthetic batches: uniform pixels in [-1,1), uniform labels. */
    const cdl_backend_ops *op = be->ops;
    size_t img = (size_t)in.c * in.h * in.w;
    float *x[BATCHES], *dlogits = op->alloc(be, (size_t)batch * CLASSES * sizeof(float));
    float *loss = op->alloc(be, (size_t)batch * sizeof(float));
    int32_t *labels[BATCHES], *pred = op->alloc(be, (size_t)batch * sizeof(int32_t));
    float *hx = cdl_malloc((size_t)batch * img * sizeof *hx);
    int32_t *hl = cdl_malloc((size_t)batch * sizeof *hl);
    rng_state r;
    rng_seed(&r, 42);
    for (int b = 0; b < BATCHES; b++) {
        x[b] = op->alloc(be, (size_t)batch * img * sizeof(float));
        labels[b] = op->alloc(be, (size_t)batch * sizeof(int32_t));
        if (!x[b] || !labels[b] || !hx || !hl || !dlogits || !loss || !pred) {
            fprintf(stderr, "bench_cnn: %s\n", cdl_last_error());
            return 1;
        }
        for (size_t i = 0; i < (size_t)batch * img; i++)
            hx[i] = (float)(2.0 * rng_uniform(&r) - 1.0);
        for (int i = 0; i < batch; i++)
            hl[i] = (int32_t)rng_below(&r, CLASSES);
        op->to_device(be, x[b], hx, (size_t)batch * img * sizeof *hx);
        op->to_device(be, labels[b], hl, (size_t)batch * sizeof *hl);
    }

    long step = 0;
    double *ips = cdl_calloc(2 * (size_t)runs, sizeof *ips), *cpu_ips = ips + runs;
    for (int run = -1; run < runs; run++) {   /* run -1 warms up */
        double t = bench_now(), c = cpu_now();
        for (int s = 0; s < steps; s++, step++) {
            int b = (int)(step % BATCHES);
            const float *logits = cdl_model_forward(m, x[b], batch, 1, (uint64_t)step);
            op->xent_fwd_bwd(be, batch, CLASSES, logits, labels[b], 1.0f / batch, dlogits, loss, pred);
            cdl_model_backward(m, dlogits, NULL, NULL);
            cdl_optim_step(opt, cdl_model_params(m), cdl_model_grads(m), 0.01f);
        }
        op->sync(be);
        t = bench_now() - t;
        c = cpu_now() - c;
        if (run >= 0) {
            ips[run] = (double)batch * steps / t;
            cpu_ips[run] = (double)batch * steps / (c > 0.0 ? c : 1e-9);
        }
    }
    float last_loss;
    op->to_host(be, &last_loss, loss, sizeof last_loss);

    qsort(ips, (size_t)runs, sizeof *ips, bench_cmp_double);
    qsort(cpu_ips, (size_t)runs, sizeof *cpu_ips, bench_cmp_double);
    struct rusage ru;   /* before the SGEMM buffers exist */
    getrusage(RUSAGE_SELF, &ru);
    double peak = peak_check ? sgemm_gflops(threads, 2048) : 0.0;
    double median = ips[runs / 2], flops = step_flops(&spec, in);
    double gflops = median * flops / 1e9;

    printf("cdl %s, %s, CPU backend%s, %d thread(s), batch %d, %d runs x %d steps (after 1 warm-up "
           "run)\n", cdl_version(), model, fast_conv ? " with fast_conv" : "", threads, batch, runs,
           steps);
    printf("  images/s: median %.0f  min %.0f  max %.0f\n", median, ips[0], ips[runs - 1]);
    /* Per second of this process's CPU time (user+sys): on a shared core
     * the wall-clock rate drops, this one does not (with one thread; more
     * threads add their spinning). */
    printf("  images per CPU second: median %.1f  min %.1f  max %.1f\n", cpu_ips[runs / 2], cpu_ips[0],
           cpu_ips[runs - 1]);
    printf("  %.2f MFLOP per image (conv+linear, fwd+bwd) -> %.1f GFLOP/s = %.1f%% of SGEMM %.1f GFLOP/s "
           "(%d thread(s), 2048^3)\n",
           flops / 1e6, gflops, peak > 0.0 ? 100 * gflops / peak : 0.0, peak, threads);
    printf("  peak RSS %ld MiB (before the SGEMM check), last sample loss %.4f\n", ru.ru_maxrss / 1024, (double)last_loss);
    printf("RESULT impl=%s model=%s batch=%d threads=%d img_s=%.0f min=%.0f max=%.0f gflops=%.2f "
           "sgemm_gflops=%.2f peak_pct=%.1f rss_kb=%ld\n",
           fast_conv ? "cdl-fast-conv" : "cdl", model, batch, threads, median, ips[0], ips[runs - 1],
           gflops, peak, peak > 0.0 ? 100 * gflops / peak : 0.0,
           ru.ru_maxrss);

    for (int b = 0; b < BATCHES; b++) {
        op->free(be, x[b]);
        op->free(be, labels[b]);
    }
    op->free(be, dlogits);
    op->free(be, loss);
    op->free(be, pred);
    cdl_free(hx);
    cdl_free(hl);
    cdl_free(ips);
    cdl_optim_destroy(opt);
    cdl_model_destroy(m);
    cdl_backend_destroy(be);
    return 0;
}
