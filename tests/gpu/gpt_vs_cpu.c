/* The gpt built-in on a backend (CUDA by default) against the same model
 * on the CPU backend, from the same weights: logits, loss, every gradient
 * (the tied wte/lm_head one included) and one AdamW step, in strict FP32.
 * Where ops_vs_cpu checks each op alone, this checks how the model puts
 * them together: sequence shapes, the embedding's accumulating backward
 * after the tied head, layer norm and attention statistics, workspaces.
 * Exit 77 (skipped) when the backend lacks an op of the model.
 * Usage: gpt_vs_cpu [cuda|cpu] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cdl/cdl.h>

enum { N = 4, T = 16, V = 37 };
#define MODEL "gpt:n_layer=2,n_head=4,n_embd=32,block_size=24"
#define TOL 1e-4   /* normalised by each tensor's largest value */

typedef struct side {
    cdl_backend *be;
    cdl_model *m;
    cdl_optim *o;
    float *x, *dlogits, *loss;
    int32_t *labels, *pred;
} side;

static int failures;

static void *upload(cdl_backend *be, const void *host, size_t bytes)
{
    void *d = be->ops->alloc(be, bytes);
    if (d)
        be->ops->to_device(be, d, host, bytes);
    return d;
}

static float *download(cdl_backend *be, const float *dev, size_t n)
{
    float *h = malloc(n * sizeof *h + 1);
    if (!h)
        abort();
    be->ops->sync(be);
    be->ops->to_host(be, h, dev, n * sizeof *h);
    be->ops->sync(be);
    return h;
}

/* The model and its buffers on be; 77 when be lacks one of its ops. */
static int side_init(side *s, cdl_backend *be, const float *params, const float *ids,
                     const int32_t *labels)
{
    cdl_model_spec *spec = malloc(sizeof *spec);
    cdl_shape in = {T, 1, 1};
    memset(s, 0, sizeof *s);
    s->be = be;
    if (!spec || cdl_spec_builtin(MODEL, in, V, spec) != 0)
        return fprintf(stderr, "gpt_vs_cpu: %s\n", cdl_last_error()), 1;
    s->m = cdl_model_create(spec, in, N, be);
    free(spec);
    if (!s->m) {
        int missing = strstr(cdl_last_error(), " has no ") != NULL;
        fprintf(stderr, "gpt_vs_cpu: %s\n", cdl_last_error());
        return missing ? 77 : 1;
    }
    cdl_optim_config oc = cdl_optim_defaults(CDL_OPTIM_ADAMW);
    oc.beta2 = 0.95f;
    oc.eps = 1e-5f;   /* as tests/fixtures/make_gpt_fixture.py, which says why */
    oc.weight_decay = 0.1f;
    s->o = cdl_optim_create(&oc, cdl_model_nparams(s->m), be);
    s->x = upload(be, ids, N * T * sizeof *ids);
    s->labels = upload(be, labels, N * T * sizeof *labels);
    s->dlogits = be->ops->alloc(be, (size_t)N * T * V * sizeof(float));
    s->loss = be->ops->alloc(be, N * T * sizeof(float));
    s->pred = be->ops->alloc(be, N * T * sizeof(int32_t));
    if (!s->o || !s->x || !s->labels || !s->dlogits || !s->loss || !s->pred)
        return fprintf(stderr, "gpt_vs_cpu: %s\n", cdl_last_error()), 1;
    if (params)
        be->ops->to_device(be, cdl_model_params(s->m), params,
                           cdl_model_nparams(s->m) * sizeof *params);
    return 0;
}

static void side_free(side *s)
{
    void *bufs[] = {s->x, s->dlogits, s->loss, s->labels, s->pred};
    for (size_t i = 0; s->be && i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i])
            s->be->ops->free(s->be, bufs[i]);
    cdl_optim_destroy(s->o);
    cdl_model_destroy(s->m);
}

static void check(const char *what, const float *got, const float *want, size_t n)
{
    double maxabs = 1e-30, maxdiff = 0;
    for (size_t i = 0; i < n; i++) {
        maxabs = fmax(maxabs, fabs((double)want[i]));
        maxdiff = fmax(maxdiff, fabs((double)got[i] - (double)want[i]));
    }
    double err = maxdiff / maxabs;
    int bad = !(err <= TOL);
    failures += bad;
    printf("%s %-44s normalised error %.3g\n", bad ? "FAIL" : "ok  ", what, err);
}

/* Buffer (params or grads) of both models, view by view. */
static void check_views(side *g, side *c, int grads, const char *stage)
{
    size_t np = cdl_model_nparams(c->m);
    float *hg = download(g->be, grads ? cdl_model_grads(g->m) : cdl_model_params(g->m), np);
    float *hc = download(c->be, grads ? cdl_model_grads(c->m) : cdl_model_params(c->m), np);
    for (int v = 0; v < cdl_model_nviews(c->m); v++) {
        const cdl_param_view *pv = cdl_model_view(c->m, v);
        char what[128];
        snprintf(what, sizeof what, "%s %s", stage, pv->name);
        check(what, hg + pv->offset, hc + pv->offset, pv->numel);
    }
    free(hg);
    free(hc);
}

/* Forward, loss (one label ignored: mean over the others), backward. */
static float *forward_backward(side *s, int valid)
{
    const float *logits = cdl_model_forward(s->m, s->x, N, 1, 0);
    if (!logits) {
        fprintf(stderr, "gpt_vs_cpu: %s\n", cdl_last_error());
        exit(1);
    }
    s->be->ops->xent_fwd_bwd(s->be, N * T, V, logits, s->labels, 1.0f / (float)valid,
                             s->dlogits, s->loss, s->pred);
    float *h = download(s->be, logits, (size_t)N * T * V);
    cdl_model_backward(s->m, s->dlogits, NULL, NULL);
    return h;
}

int main(int argc, char **argv)
{
    const char *name = argc > 1 ? argv[1] : "cuda";
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc > 2 || (strcmp(name, "cuda") && strcmp(name, "cpu"))) {
        fprintf(stderr, "usage: gpt_vs_cpu [cuda|cpu]\n");
        return 2;
    }
    cdl_backend *cpu = cdl_backend_cpu_create(0);
    cdl_backend_params p;
    cdl_backend_params_from_env(&p);
    p.tf32_conv = p.tf32_matmul = 0;   /* strict FP32 */
    p.threads = 1;
    cdl_backend *be = cdl_backend_create_with(name, &p);
    if (!cpu || !be) {
        fprintf(stderr, "gpt_vs_cpu: %s\n", cdl_last_error());
        return 1;
    }
    float ids[N * T];
    int32_t labels[N * T];
    for (int i = 0; i < N * T; i++) {
        ids[i] = (float)((i * 13 + 5) % V);
        labels[i] = (i * 7 + 2) % V;
    }
    labels[T + 5] = -1;   /* ignored */
    const int valid = N * T - 1;

    side c, g;
    int rc = side_init(&c, cpu, NULL, ids, labels);
    float *params = NULL;
    if (rc == 0) {
        /* GPT-2's initialisation, made once on the CPU, copied to both;
         * biases not 0 and layer norms not 1, so that each tensor's
         * largest value (what errors are measured against) is not just
         * the size of one AdamW step. */
        cdl_model_init(c.m, 7);
        params = download(cpu, cdl_model_params(c.m), cdl_model_nparams(c.m));
        for (size_t i = 0; i < cdl_model_nparams(c.m); i++)
            params[i] += 0.05f * sinf((float)i);
        cpu->ops->to_device(cpu, cdl_model_params(c.m), params,
                            cdl_model_nparams(c.m) * sizeof *params);
        rc = side_init(&g, be, params, ids, labels);
    }
    if (rc == 77)
        printf("SKIP: the %s backend has not every op of the gpt model yet\n", name);
    if (rc == 0) {
        printf("gpt (%s, batch %d, T %d, vocab %d): %s backend vs CPU, strict FP32\n", MODEL, N,
               T, V, name);
        float *lg = forward_backward(&g, valid), *lc = forward_backward(&c, valid);
        check("logits", lg, lc, (size_t)N * T * V);
        free(lg);
        free(lc);
        check_views(&g, &c, 1, "grad");
        cdl_optim_step(g.o, cdl_model_params(g.m), cdl_model_grads(g.m), 1e-3f);
        cdl_optim_step(c.o, cdl_model_params(c.m), cdl_model_grads(c.m), 1e-3f);
        check_views(&g, &c, 0, "adamw");
        printf("%s: %d failure%s\n", failures ? "FAILED" : "PASS", failures,
               failures == 1 ? "" : "s");
        rc = failures ? 1 : 0;
    }
    if (params)
        side_free(&g);
    side_free(&c);
    free(params);
    cdl_backend_destroy(be);
    cdl_backend_destroy(cpu);
    return rc;
}
