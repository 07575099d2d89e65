/* Training speed of the seed CNN through the backend ops (tests/gpu/run.sh
 * steps 3 and 4): LeNet for 3x32x32 inputs, conv 6@5x5, ReLU, maxpool 2,
 * conv 16@5x5, ReLU, maxpool 2, fc 120, ReLU, fc 84, ReLU, fc 10, softmax
 * cross-entropy, SGD (lr 0.01, momentum 0.9, weight decay 5e-4), the same
 * step as bench_torch.py. One fixed random batch stays on the device, as in
 * the PyTorch script, so both measure the training step and not the input
 * pipeline; --input pinned copies it in from page-locked memory each step.
 *
 * Usage: bench_lenet [--device cuda|cpu] [--batch N] [--seconds S] [--graph]
 *                    [--input device|pinned] [--start-at UNIX_TIME] [--warmup N]
 * --graph runs each step as a CUDA graph (captured once, then replayed).
 * --warmup: untimed steps first [20]; the first is eager, the second
 * captures the graph (run.sh's rehearsal on the fake GPU takes 3).
 * --start-at: after warming up, wait until this wall-clock time (seconds
 * since the epoch) before timing, so packed replicas measure together.
 * The last line is "images_per_sec X".
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cdl/cdl.h>
#include "tests/test_rng.h"

typedef struct net {
    cdl_backend *be;
    int B;
    cdl_conv2d_desc c1, c2;
    cdl_pool2d_desc p1, p2;
    size_t np;
    float *params, *grads, *mom;
    float *c1w, *c1b, *c2w, *c2b, *f1w, *f1b, *f2w, *f2b, *f3w, *f3b;
    float *dc1w, *dc1b, *dc2w, *dc2b, *df1w, *df1b, *df2w, *df2b, *df3w, *df3b;
    float *x, *a1, *o1, *a2, *o2, *h1, *h2, *z, *dz, *loss, *ws;
    float *g_h2, *g_h1, *g_o2, *g_a2, *g_o1, *g_a1;
    int32_t *am1, *am2, *labels, *pred;
    float *x_pinned;   /* --input pinned */
    int32_t *labels_pinned;
    long steps;
} net;

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void *dev(net *m, size_t bytes)
{
    void *p = m->be->ops->alloc(m->be, bytes);
    if (!p) {
        fprintf(stderr, "bench_lenet: %s\n", cdl_last_error());
        exit(1);
    }
    return p;
}

static rng_state rng; /* seeded at the top of main */
static float frand(float lo, float hi)
{
    return (float)test_uniform(&rng, lo, hi);
}

/* A square 5x5 stride-1 unpadded conv: x (n,c,hw,hw) -> y (n,oc,ohw,ohw). */
static cdl_conv2d_desc conv5x5(int n, int c, int hw, int oc, int ohw)
{
    return (cdl_conv2d_desc){.n = n, .c = c, .h = hw, .w = hw, .oc = oc, .kh = 5, .kw = 5,
                             .stride_h = 1, .stride_w = 1, .dil_h = 1, .dil_w = 1, .groups = 1,
                             .oh = ohw, .ow = ohw};
}

static void net_make(net *m, cdl_backend *be, int B, int pinned)
{
    memset(m, 0, sizeof *m);
    m->be = be;
    m->B = B;
    m->c1 = conv5x5(B, 3, 32, 6, 28);
    m->p1 = (cdl_pool2d_desc){B, 6, 28, 28, 2, 2, 0, 14, 14};
    m->c2 = conv5x5(B, 6, 14, 16, 10);
    m->p2 = (cdl_pool2d_desc){B, 16, 10, 10, 2, 2, 0, 5, 5};
    /* Flat parameters in forward order: (size, fan_in) per tensor. */
    const size_t sizes[10] = {450, 6, 2400, 16, 48000, 120, 10080, 84, 840, 10};
    const int fan_in[10] = {75, 75, 150, 150, 400, 400, 120, 120, 84, 84};
    float **pv[10] = {&m->c1w, &m->c1b, &m->c2w, &m->c2b, &m->f1w,
                      &m->f1b, &m->f2w, &m->f2b, &m->f3w, &m->f3b};
    float **gv[10] = {&m->dc1w, &m->dc1b, &m->dc2w, &m->dc2b, &m->df1w,
                      &m->df1b, &m->df2w, &m->df2b, &m->df3w, &m->df3b};
    for (int i = 0; i < 10; i++)
        m->np += sizes[i];
    m->params = dev(m, m->np * 4);
    m->grads = dev(m, m->np * 4);
    m->mom = dev(m, m->np * 4);
    float *init = malloc(m->np * 4);
    size_t off = 0;
    for (int i = 0; i < 10; i++) {
        *pv[i] = m->params + off;
        *gv[i] = m->grads + off;
        float bound = 1.0f / sqrtf((float)fan_in[i]);
        for (size_t j = 0; j < sizes[i]; j++)
            init[off + j] = frand(-bound, bound);
        off += sizes[i];
    }
    be->ops->to_device(be, m->params, init, m->np * 4);
    free(init);

    size_t b = (size_t)B;
    m->x = dev(m, b * 3072 * 4);
    m->a1 = dev(m, b * 4704 * 4);
    m->o1 = dev(m, b * 1176 * 4);
    m->a2 = dev(m, b * 1600 * 4);
    m->o2 = dev(m, b * 400 * 4);
    m->h1 = dev(m, b * 120 * 4);
    m->h2 = dev(m, b * 84 * 4);
    m->z = dev(m, b * 10 * 4);
    m->dz = dev(m, b * 10 * 4);
    m->loss = dev(m, b * 4);
    m->g_h2 = dev(m, b * 84 * 4);
    m->g_h1 = dev(m, b * 120 * 4);
    m->g_o2 = dev(m, b * 400 * 4);
    m->g_a2 = dev(m, b * 1600 * 4);
    m->g_o1 = dev(m, b * 1176 * 4);
    m->g_a1 = dev(m, b * 4704 * 4);
    m->am1 = dev(m, b * 1176 * 4);
    m->am2 = dev(m, b * 400 * 4);
    m->labels = dev(m, b * 4);
    m->pred = dev(m, b * 4);
    size_t ws = be->ops->conv2d_workspace(be, &m->c1);
    size_t w2 = be->ops->conv2d_workspace(be, &m->c2);
    m->ws = dev(m, (ws > w2 ? ws : w2) * 4 + 4);

    float *x = malloc(b * 3072 * 4);
    int32_t *y = malloc(b * 4);
    for (size_t i = 0; i < b * 3072; i++)
        x[i] = frand(-1, 1);
    for (size_t i = 0; i < b; i++)
        y[i] = (int32_t)(i * 7919 % 10);
    be->ops->to_device(be, m->x, x, b * 3072 * 4);
    be->ops->to_device(be, m->labels, y, b * 4);
    if (pinned) {
        m->x_pinned = cdl_backend_host_alloc(be, b * 3072 * 4);
        m->labels_pinned = cdl_backend_host_alloc(be, b * 4);
        if (!m->x_pinned || !m->labels_pinned) {
            fprintf(stderr, "bench_lenet: %s\n", cdl_last_error());
            exit(1);
        }
        memcpy(m->x_pinned, x, b * 3072 * 4);
        memcpy(m->labels_pinned, y, b * 4);
    }
    free(x);
    free(y);
}

static void net_step(net *m)
{
    cdl_backend *be = m->be;
    const cdl_backend_ops *o = be->ops;
    int B = m->B;
    size_t b = (size_t)B;
    if (m->x_pinned) {
        o->to_device(be, m->x, m->x_pinned, b * 3072 * 4);
        o->to_device(be, m->labels, m->labels_pinned, b * 4);
    }
    o->conv2d_fwd(be, &m->c1, m->x, m->c1w, m->c1b, m->a1, m->ws);
    o->relu_fwd(be, b * 4704, m->a1, m->a1);
    o->maxpool_fwd(be, &m->p1, m->a1, m->o1, m->am1);
    o->conv2d_fwd(be, &m->c2, m->o1, m->c2w, m->c2b, m->a2, m->ws);
    o->relu_fwd(be, b * 1600, m->a2, m->a2);
    o->maxpool_fwd(be, &m->p2, m->a2, m->o2, m->am2);
    o->linear_fwd(be, B, 400, 120, m->o2, m->f1w, m->f1b, m->h1, m->ws);
    o->relu_fwd(be, b * 120, m->h1, m->h1);
    o->linear_fwd(be, B, 120, 84, m->h1, m->f2w, m->f2b, m->h2, m->ws);
    o->relu_fwd(be, b * 84, m->h2, m->h2);
    o->linear_fwd(be, B, 84, 10, m->h2, m->f3w, m->f3b, m->z, m->ws);
    o->xent_fwd_bwd(be, B, 10, m->z, m->labels, 1.0f / (float)B, m->dz, m->loss, m->pred);

    o->linear_bwd(be, B, 84, 10, m->h2, m->f3w, m->dz, m->g_h2, m->df3w, m->df3b, m->ws);
    o->relu_bwd(be, b * 84, m->h2, m->g_h2, m->g_h2);
    o->linear_bwd(be, B, 120, 84, m->h1, m->f2w, m->g_h2, m->g_h1, m->df2w, m->df2b, m->ws);
    o->relu_bwd(be, b * 120, m->h1, m->g_h1, m->g_h1);
    o->linear_bwd(be, B, 400, 120, m->o2, m->f1w, m->g_h1, m->g_o2, m->df1w, m->df1b, m->ws);
    o->maxpool_bwd(be, &m->p2, m->g_o2, m->am2, m->g_a2);
    o->relu_bwd(be, b * 1600, m->a2, m->g_a2, m->g_a2);
    o->conv2d_bwd(be, &m->c2, m->o1, m->c2w, m->g_a2, m->g_o1, m->dc2w, m->dc2b, m->ws);
    o->maxpool_bwd(be, &m->p1, m->g_o1, m->am1, m->g_a1);
    o->relu_bwd(be, b * 4704, m->a1, m->g_a1, m->g_a1);
    o->conv2d_bwd(be, &m->c1, m->x, m->c1w, m->g_a1, NULL, m->dc1w, m->dc1b, m->ws);

    cdl_sgd_hparams hp = {.lr = 0.01f, .momentum = 0.9f, .weight_decay = 5e-4f,
                          .first_step = m->steps == 0};
    o->sgd_step(be, m->np, m->params, m->grads, m->mom, &hp);
    m->steps++;
}

static int step(net *m, int graph)
{
    if (graph && cdl_backend_graph_begin(m->be, (uint64_t)m->B) < 0)
        return -1;
    net_step(m);
    if (graph && cdl_backend_graph_end(m->be) != 0)
        return -1;
    return 0;
}

static float mean_loss(net *m)
{
    float *h = malloc((size_t)m->B * 4);
    m->be->ops->to_host(m->be, h, m->loss, (size_t)m->B * 4);
    m->be->ops->sync(m->be);
    double s = 0;
    for (int i = 0; i < m->B; i++)
        s += h[i];
    free(h);
    return (float)(s / m->B);
}

static void usage(void)
{
    fprintf(stderr, "usage: bench_lenet [--device cuda|cpu] [--batch N] [--seconds S] [--graph] "
                    "[--input device|pinned] [--start-at UNIX_TIME] [--warmup N]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    rng_seed(&rng, 7);
    const char *device = "cuda", *input = "device";
    int B = 512, graph = 0, warmup = 20;
    double seconds = 5, start_at = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--graph"))
            graph = 1;
        else if (!strcmp(a, "--device") && v)
            device = argv[++i];
        else if (!strcmp(a, "--input") && v)
            input = argv[++i];
        else if (!strcmp(a, "--batch") && v)
            B = atoi(argv[++i]);
        else if (!strcmp(a, "--seconds") && v)
            seconds = atof(argv[++i]);
        else if (!strcmp(a, "--start-at") && v)
            start_at = atof(argv[++i]);
        else if (!strcmp(a, "--warmup") && v)
            warmup = atoi(argv[++i]);
        else
            usage();
    }
    if (B < 1 || B > 65536 || warmup < 2 || warmup > 1000 || !(seconds > 0) ||
        (strcmp(input, "device") && strcmp(input, "pinned")))
        usage();
    cdl_backend_params p;
    cdl_backend_params_from_env(&p);   /* CDL_LOG=cudnn,cuda: tests/gpu/run.sh */
    cdl_backend *be = cdl_backend_create_with(device, &p);
    if (!be) {
        fprintf(stderr, "bench_lenet: %s\n", cdl_last_error());
        return 1;
    }
    net m;
    net_make(&m, be, B, !strcmp(input, "pinned"));

    /* Warm-up: one eager step (cuDNN and cuBLAS settle), then the graph is
     * captured and replayed. */
    for (int i = 0; i < warmup; i++)
        if (step(&m, graph && i > 0) != 0)
            goto fail;
    if (be->ops->sync(be) != 0)
        goto fail;
    float loss0 = mean_loss(&m);
    if (start_at > 0) {
        struct timespec now_rt;
        clock_gettime(CLOCK_REALTIME, &now_rt);
        double late = (double)now_rt.tv_sec + 1e-9 * (double)now_rt.tv_nsec - start_at;
        if (late > 0) {
            fprintf(stderr, "bench_lenet: warm-up ended %.2f s after --start-at\n", late);
        } else {
            struct timespec t = {(time_t)start_at, (long)((start_at - floor(start_at)) * 1e9)};
            while (clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &t, NULL) == EINTR)
                ;
        }
    }
    long steps = 0;
    double t0 = now(), t = t0;
    while (t - t0 < seconds) {
        for (int i = 0; i < 10; i++)
            if (step(&m, graph) != 0)
                goto fail;
        steps += 10;
        if (be->ops->sync(be) != 0)
            goto fail;
        t = now();
    }
    double ips = (double)steps * B / (t - t0);
    float loss1 = mean_loss(&m);
    printf("cdl %s%s batch %d input %s: %.0f images/s (%ld steps in %.2f s), loss %.4f -> %.4f\n",
           be->ops->name, graph ? " graph" : "", B, input, ips, steps, t - t0, (double)loss0,
           (double)loss1);
    printf("images_per_sec %.1f\n", ips);
    cdl_backend_destroy(be);
    return isfinite(loss1) ? 0 : 1;
fail:
    fprintf(stderr, "bench_lenet: %s\n", cdl_last_error());
    return 1;
}
