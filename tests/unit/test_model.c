/* The model graph: parameter views, initialisation, gradients against
 * central finite differences of a float64 forward built from the reference
 * ops (tests/unit/ref_ops.h), the grad-ready callback, determinism, and no
 * allocation inside a training step. */
#include "model_testutil.h"

#include "model/graph.h"
#include "model/model_internal.h"
#include "ref_ops.h"

TEST_CPU_BACKEND_GROUP()

static cdl_model *lenet(cdl_shape in, int max_batch)
{
    cdl_model_spec spec;
    assert_int_equal(cdl_spec_builtin("lenet", in, 10, &spec), 0);
    cdl_model *m = cdl_model_create(&spec, in, max_batch, be);
    assert_non_null(m);
    return m;
}

static cdl_model *from_text(const char *text, cdl_shape in, int max_batch)
{
    cdl_model_spec spec;
    assert_int_equal(cdl_spec_parse(text, "test.spec", &spec), 0);
    cdl_model *m = cdl_model_create(&spec, in, max_batch, be);
    if (!m)
        fail_msg("%s", cdl_last_error());
    return m;
}

/* n samples of standard-normal-ish inputs from a fixed seed. */
static float *random_input(cdl_shape in, int n, uint64_t seed)
{
    size_t count = (size_t)n * in.c * in.h * in.w;
    float *x = malloc(count * sizeof *x);
    uint64_t s = seed;
    for (size_t i = 0; i < count; i++) {
        double u = 0;
        for (int k = 0; k < 4; k++) {   /* Irwin-Hall: mean 2, var 1/3 */
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            u += (double)(s >> 11) / 9007199254740992.0;
        }
        x[i] = (float)((u - 2.0) * 1.7320508);
    }
    return x;
}

static void random_labels(int32_t *labels, int n, int classes)
{
    for (int i = 0; i < n; i++)
        labels[i] = (i * 7 + 3) % classes;
}

static void test_views(void **state)
{
    (void)state;
    cdl_model *m = lenet((cdl_shape){1, 28, 28}, 4);
    static const struct {
        const char *name;
        int ndim;
        int64_t shape[4];
        int fan_in;
    } want[] = {
        {"conv1.weight", 4, {6, 1, 5, 5}, 25},   {"conv1.bias", 1, {6}, 25},
        {"conv2.weight", 4, {16, 6, 5, 5}, 150}, {"conv2.bias", 1, {16}, 150},
        {"fc1.weight", 2, {120, 400}, 400},      {"fc1.bias", 1, {120}, 400},
        {"fc2.weight", 2, {84, 120}, 120},       {"fc2.bias", 1, {84}, 120},
        {"fc3.weight", 2, {10, 84}, 84},         {"fc3.bias", 1, {10}, 84},
    };
    assert_int_equal(cdl_model_nviews(m), 10);
    size_t offset = 0;
    for (int v = 0; v < 10; v++) {
        const cdl_param_view *pv = cdl_model_view(m, v);
        assert_string_equal(pv->name, want[v].name);
        assert_int_equal(pv->ndim, want[v].ndim);
        size_t numel = 1;
        for (int d = 0; d < pv->ndim; d++) {
            assert_int_equal(pv->shape[d], want[v].shape[d]);
            numel *= (size_t)pv->shape[d];
        }
        assert_int_equal(pv->numel, numel);
        assert_int_equal(pv->offset, offset);   /* forward order, no gaps */
        assert_int_equal(pv->fan_in, want[v].fan_in);
        assert_int_equal(pv->is_bias, v % 2);
        offset += numel;
    }
    assert_int_equal(cdl_model_nparams(m), offset);
    assert_int_equal(offset, 61706);
    assert_null(cdl_model_view(m, 10));
    assert_null(cdl_model_view(m, -1));
    assert_ptr_equal(cdl_model_find(m, "fc2.weight"), cdl_model_view(m, 6));
    assert_null(cdl_model_find(m, "fc4.weight"));
    assert_int_equal(cdl_model_outputs(m), 10);
    assert_int_equal(cdl_model_max_batch(m), 4);
    assert_int_equal(cdl_model_input(m).h, 28);
    assert_ptr_equal(cdl_model_backend(m), be);
    assert_string_equal(cdl_model_get_spec(m)->source, "lenet");
    cdl_model_destroy(m);

    /* Layers without bias have one view. */
    m = from_text("conv2d 3 kernel=3 bias=false\nflatten\nlinear 2 bias=false name=out\n",
                  (cdl_shape){2, 4, 4}, 1);
    assert_int_equal(cdl_model_nviews(m), 2);
    assert_string_equal(cdl_model_view(m, 1)->name, "out.weight");
    assert_int_equal(cdl_model_nparams(m), 3 * 2 * 9 + 2 * 12);
    cdl_model_destroy(m);
}

/* The spec file's text a checkpoint carries: a copy the model owns (the
 * caller's buffer may go), replaced by a second call, NULL for built-ins;
 * freed with the model (the unit tests' valgrind pass sees a leak). */
static void test_spec_text(void **state)
{
    (void)state;
    cdl_model *m = lenet((cdl_shape){1, 28, 28}, 1);
    assert_null(cdl_model_spec_text(m));
    char text[] = "flatten\nlinear 10\n";
    assert_int_equal(cdl_model_set_spec_text(m, text), 0);
    text[0] = 'X';
    assert_string_equal(cdl_model_spec_text(m), "flatten\nlinear 10\n");
    assert_int_equal(cdl_model_set_spec_text(m, "relu\n"), 0);
    assert_string_equal(cdl_model_spec_text(m), "relu\n");
    assert_int_equal(cdl_model_set_spec_text(m, NULL), 0);
    assert_null(cdl_model_spec_text(m));
    assert_int_equal(cdl_model_set_spec_text(m, "relu\n"), 0);
    cdl_model_destroy(m);
}

static void test_init(void **state)
{
    (void)state;
    cdl_model *a = lenet((cdl_shape){1, 28, 28}, 1), *b = lenet((cdl_shape){1, 28, 28}, 1);
    size_t np = cdl_model_nparams(a);
    cdl_model_init(a, 42);
    cdl_model_init(b, 42);
    float *pa = host_copy(be, cdl_model_params(a), np), *pb = host_copy(be, cdl_model_params(b), np);
    assert_memory_equal(pa, pb, np * sizeof *pa);
    cdl_model_init(b, 43);
    free(pb);
    pb = host_copy(be, cdl_model_params(b), np);
    size_t same = 0;
    for (size_t i = 0; i < np; i++)
        same += pa[i] == pb[i];
    assert_true(same < np / 1000);

    /* U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weights and biases alike. */
    for (int v = 0; v < cdl_model_nviews(a); v++) {
        const cdl_param_view *pv = cdl_model_view(a, v);
        double bound = 1.0 / sqrt((double)pv->fan_in), sum = 0, sumsq = 0, maxabs = 0;
        for (size_t i = 0; i < pv->numel; i++) {
            double x = pa[pv->offset + i];
            sum += x;
            sumsq += x * x;
            maxabs = fabs(x) > maxabs ? fabs(x) : maxabs;
        }
        assert_true(maxabs <= bound);
        if (pv->numel < 1000)
            continue;
        /* Uniform: mean 0, variance b^2/3; 5 sigma bands (fixed seed). */
        double nn = (double)pv->numel, mean = sum / nn, var = sumsq / nn - mean * mean;
        assert_true(fabs(mean) < 5 * bound / sqrt(3 * nn));
        assert_true(fabs(var / (bound * bound / 3) - 1) < 5 * sqrt(0.8 / nn));
        assert_true(maxabs > 0.99 * bound);
    }
    free(pa);
    free(pb);
    cdl_model_destroy(a);
    cdl_model_destroy(b);

    /* Each view has its own stream: a layer added at the end leaves the
     * others' initial values alone. */
    a = from_text("flatten\nlinear 5\nlinear 3\n", (cdl_shape){1, 2, 2}, 1);
    b = from_text("flatten\nlinear 5\nlinear 3\nlinear 2\n", (cdl_shape){1, 2, 2}, 1);
    cdl_model_init(a, 7);
    cdl_model_init(b, 7);
    pa = host_copy(be, cdl_model_params(a), cdl_model_nparams(a));
    pb = host_copy(be, cdl_model_params(b), cdl_model_nparams(b));
    assert_memory_equal(pa, pb, cdl_model_nparams(a) * sizeof *pa);
    free(pa);
    free(pb);
    cdl_model_destroy(a);
    cdl_model_destroy(b);
}

/* ------------------------------------------------ float64 reference model */

/* Every layer kind, with strides, padding, layers without bias and a
 * dropout layer; small enough to difference every parameter. */
static const char fd_spec[] =
    "conv2d 3 kernel=3 padding=1\n"            /* 2x7x7 -> 3x7x7 */
    "relu\n"
    "maxpool2d 3 stride=2 padding=1\n"         /* 3x4x4 */
    "conv2d 4 kernel=2 stride=2 bias=false\n"  /* 4x2x2 */
    "avgpool2d 2 stride=1 padding=1\n"         /* 4x3x3 */
    "relu\n"
    "flatten\n"                                /* 36 */
    "dropout 0.3\n"
    "linear 8\n"
    "relu\n"
    "linear 3\n";

/* A residual net with a fan-out (the stem feeds a branch, a shortcut and
 * a concat), an add whose inputs differ in depth, a concat, a 1x1
 * shortcut conv read through from=, and a flatten read by two layers. */
static const char fd_graph_spec[] =
    "conv2d 4 kernel=3 padding=1 name=stem\n"          /* 2x7x7 -> 4x7x7 */
    "relu name=r0\n"                                   /* read 3 times */
    "conv2d 4 kernel=3 padding=1 name=a1\n"
    "relu\n"
    "conv2d 4 kernel=3 padding=1 bias=false name=a2\n"
    "add r0 name=sum\n"                                /* a2 + r0 */
    "relu name=r1\n"
    "conv2d 3 kernel=1 from=r0 name=side\n"            /* 3x7x7 */
    "concat r1 side r0 name=cat\n"                     /* 11x7x7 */
    "avgpool2d 2 stride=2\n"                           /* 11x3x3 */
    "flatten name=flat\n"                              /* 99 */
    "linear 5 name=fc\n"
    "linear 5 from=flat name=fc_b\n"
    "add fc\n"
    "relu\n"
    "linear 3 name=head\n";

/* A residual stream as in a transformer: each block's input feeds a layer
 * norm and the block's add, so the add shares its dy with that input
 * (plan_shared_dy) and the layer norm adds its dx onto it. */
static const char fd_res_spec[] =
    "flatten\n"                 /* 98 */
    "linear 6 name=x0\n"
    "layernorm\n"
    "linear 6\n"
    "add x0 name=s1\n"
    "layernorm\n"
    "gelu\n"
    "linear 6\n"
    "add s1\n"
    "linear 3\n";

/* Batch norms (one fused with its ReLU, one not), a rectangular, a
 * dilated grouped conv, every activation and global average pooling. */
static const char fd_bn_spec[] =
    "conv2d 4 kernel=3 padding=1 bias=false name=stem\n"
    "batchnorm2d\n"
    "relu name=r0\n"
    "conv2d 4 kernel=3x1 padding=1x0 bias=false\n"
    "batchnorm2d momentum=0.3 eps=1e-3\n"
    "add r0\n"
    "leakyrelu negative_slope=0.2 name=lr\n"
    "conv2d 4 kernel=3 dilation=2 padding=2 groups=2 from=r0\n"
    "tanh name=t\n"
    "concat lr t\n"
    "gelu\n"
    "globalavgpool\n"
    "flatten\n"
    "silu\n"
    "linear 5\n"
    "sigmoid\n"
    "linear 3\n";

/* The model's batchnorm buffers in double (for evaluation mode). */
static double *ref_bufs;

/* Mean cross-entropy of the model's spec evaluated in float64 with the
 * reference ops, at parameters p (laid out like the model's views). Each
 * layer's output is kept, so any graph evaluates in spec order. */
static double ref_loss(const cdl_model *m, const double *p, const double *x, int n,
                       const int32_t *labels, int train, uint64_t seed)
{
    int bufview = 0;
    const cdl_model_spec *spec = cdl_model_get_spec(m);
    cdl_shape sh[CDL_MAX_LAYERS + 1];
    assert_int_equal(cdl_spec_infer(spec, cdl_model_input(m), sh), 0);
    double *out[CDL_MAX_LAYERS + 1];
    size_t maxn = 0;
    for (int i = 0; i <= spec->nlayers; i++) {
        size_t c = (size_t)n * sh[i].c * sh[i].h * sh[i].w;
        maxn = c > maxn ? c : maxn;
        out[i] = malloc(c * sizeof(double));
    }
    int32_t *argmax = malloc(maxn * sizeof *argmax);
    uint8_t *mask = malloc(maxn);
    memcpy(out[0], x, (size_t)n * sh[0].c * sh[0].h * sh[0].w * sizeof(double));
    int view = 0;
    for (int i = 0; i < spec->nlayers; i++) {
        const cdl_layer_spec *l = &spec->layers[i];
        int src = spec_in(l, i, 0) + 1;
        cdl_shape a = sh[src];
        const double *cur = out[src];
        double *next = out[i + 1];
        size_t count = (size_t)n * a.c * a.h * a.w;
        const double *w = NULL, *b = NULL;
        if (l->kind == CDL_LAYER_CONV2D || l->kind == CDL_LAYER_LINEAR) {
            w = p + cdl_model_view(m, view++)->offset;
            b = l->bias ? p + cdl_model_view(m, view++)->offset : NULL;
        }
        if (l->kind == CDL_LAYER_BATCHNORM2D) {
            w = p + cdl_model_view(m, view++)->offset;
            b = p + cdl_model_view(m, view++)->offset;
        }
        if (l->kind == CDL_LAYER_LAYERNORM) {   /* weight, and bias unless bias=false */
            w = p + cdl_model_view(m, view++)->offset;
            b = l->bias ? p + cdl_model_view(m, view++)->offset : NULL;
        }
        int stride = l->stride ? l->stride : l->kernel;
        int hw = a.h * a.w;
        cdl_conv2d_desc cd;
        cdl_pool2d_desc pd;
        switch (l->kind) {
        case CDL_LAYER_CONV2D: {
            spec_conv c = spec_conv_of(l);
            cd = ref_conv_desc_full(n, a.c, a.h, a.w, l->out, c.kh, c.kw, c.sh, c.sw, c.ph, c.pw,
                                    c.dh, c.dw, c.groups);
            ref_conv2d_fwd(&cd, cur, w, b, next);
            break;
        }
        case CDL_LAYER_LINEAR:
            ref_linear_fwd(n, a.c, l->out, cur, w, b, next);
            break;
        case CDL_LAYER_MAXPOOL2D:
            pd = ref_pool_desc(n, a.c, a.h, a.w, l->kernel, stride, l->pad);
            ref_maxpool_fwd(&pd, cur, next, argmax);
            break;
        case CDL_LAYER_AVGPOOL2D:
            pd = ref_pool_desc(n, a.c, a.h, a.w, l->kernel, stride, l->pad);
            ref_avgpool_fwd(&pd, cur, next);
            break;
        case CDL_LAYER_RELU:
            ref_relu_fwd(count, cur, next);
            break;
        case CDL_LAYER_DROPOUT:
            if (train)
                ref_dropout_fwd(count, (double)l->p, model_dropout_seed(seed, i), cur, next, mask);
            else
                memcpy(next, cur, count * sizeof *cur);
            break;
        case CDL_LAYER_FLATTEN:
            memcpy(next, cur, count * sizeof *cur);
            break;
        case CDL_LAYER_ADD:
            memcpy(next, cur, count * sizeof *cur);
            for (int j = 1; j < spec_nin(l); j++)
                for (size_t e = 0; e < count; e++)
                    next[e] += out[spec_in(l, i, j) + 1][e];
            break;
        case CDL_LAYER_CONCAT: {
            size_t plane = (size_t)hw, oc = (size_t)sh[i + 1].c, off = 0;
            for (int j = 0; j < spec_nin(l); j++) {
                int k = spec_in(l, i, j) + 1;
                size_t cj = (size_t)sh[k].c;
                for (int s = 0; s < n; s++)
                    memcpy(next + ((size_t)s * oc + off) * plane, out[k] + (size_t)s * cj * plane,
                           cj * plane * sizeof(double));
                off += cj;
            }
            break;
        }
        case CDL_LAYER_LAYERNORM:   /* flat inputs here: a row per sample */
            ref_layernorm_fwd(n, (int)(count / (size_t)n), cur, w, b, l->eps > 0 ? l->eps : 1e-5,
                              next);
            break;
        case CDL_LAYER_EMBEDDING:
        case CDL_LAYER_POSEMBEDDING:
        case CDL_LAYER_ATTENTION:
            /* Sequence models: test_model_torch's gpt against PyTorch. */
            fail_msg("no double reference for %s layers here", spec_kind_name(l->kind));
            break;
        case CDL_LAYER_BATCHNORM2D: {
            double eps = l->eps > 0 ? l->eps : 1e-5;
            if (train)
                ref_bn_train_fwd(n, a.c, hw, cur, w, b, eps, 0, next, NULL, NULL);
            else
                ref_bn_eval(n, a.c, hw, cur, ref_bufs + cdl_model_buffer(m, bufview)->offset,
                            ref_bufs + cdl_model_buffer(m, bufview + 1)->offset, eps, w, b, 0,
                            next);
            bufview += 3;
            break;
        }
        case CDL_LAYER_GLOBALAVGPOOL:
            ref_gap_fwd(n, a.c, hw, cur, next);
            break;
        case CDL_LAYER_GELU:
        case CDL_LAYER_SILU:
        case CDL_LAYER_SIGMOID:
        case CDL_LAYER_TANH:
        case CDL_LAYER_LEAKYRELU: {
            cdl_act act = l->kind == CDL_LAYER_GELU ? (l->approx_tanh ? CDL_ACT_GELU_TANH
                                                                      : CDL_ACT_GELU)
                        : l->kind == CDL_LAYER_SILU ? CDL_ACT_SILU
                        : l->kind == CDL_LAYER_SIGMOID ? CDL_ACT_SIGMOID
                        : l->kind == CDL_LAYER_TANH ? CDL_ACT_TANH : CDL_ACT_LEAKYRELU;
            for (size_t e = 0; e < count; e++)
                next[e] = ref_act(act, l->slope, cur[e]);
            break;
        }
        }
    }
    int classes = sh[spec->nlayers].c;
    double *loss = malloc((size_t)n * sizeof *loss), total = 0;
    double *dl = malloc((size_t)n * classes * sizeof *dl);
    ref_xent(n, classes, out[spec->nlayers], labels, 1.0, dl, loss, argmax);
    for (int i = 0; i < n; i++)
        total += loss[i];
    free(loss);
    free(dl);
    for (int i = 0; i <= spec->nlayers; i++)
        free(out[i]);
    free(argmax);
    free(mask);
    return total / n;
}

/* The float model's gradient of the mean loss against central differences
 * of the float64 reference at the same (float) parameters and input. */
static void check_fd(const char *spec, int train)
{
    const int n = 4, classes = 3;
    cdl_shape in = {2, 7, 7};
    const uint64_t seed = 99;
    cdl_model *m = from_text(spec, in, n);
    cdl_model_init(m, 5);
    size_t np = cdl_model_nparams(m);
    float *xh = random_input(in, n, 17);
    float *x = dev_upload(be, xh, (size_t)n * 98 * sizeof(float));
    int32_t labels[4];
    random_labels(labels, n, classes);
    loss_bufs lb;
    loss_bufs_init(&lb, be, n, classes, labels);

    if (!train && cdl_model_nbuffers(m))   /* running statistics from one batch */
        assert_non_null(cdl_model_forward(m, x, n, 1, seed));
    size_t nb = cdl_model_nbuffer_floats(m);
    float *bf = nb ? host_copy(be, cdl_model_buffers(m), nb) : NULL;
    ref_bufs = malloc((nb + 1) * sizeof *ref_bufs);
    for (size_t i = 0; i < nb; i++)
        ref_bufs[i] = bf[i];
    free(bf);
    const float *logits = cdl_model_forward(m, x, n, train, seed);
    double loss = loss_bufs_run(&lb, logits);
    cdl_model_backward(m, lb.dlogits, NULL, NULL);
    float *g = host_copy(be, cdl_model_grads(m), np), *pf = host_copy(be, cdl_model_params(m), np);

    double *p = malloc(np * sizeof *p), *xd = malloc((size_t)n * 98 * sizeof *xd);
    for (size_t i = 0; i < np; i++)
        p[i] = pf[i];
    for (int i = 0; i < n * 98; i++)
        xd[i] = xh[i];
    double ref = ref_loss(m, p, xd, n, labels, train, seed);
    if (!(fabs(loss - ref) < 1e-5 * fabs(ref)))
        fail_msg("train %d: loss %.9g, float64 reference %.9g", train, loss, ref);
    if (!train && nb) {   /* batch norm: no backward in evaluation mode */
        cdl_model_backward(m, lb.dlogits, NULL, NULL);
        assert_non_null(strstr(cdl_last_error(), "backward after an evaluation forward"));
        goto out;
    }

    /* h = 1e-6: truncation ~1e-12, rounding ~1e-10; no ReLU or max-pool
     * decision is this close to its kink for this input. */
    const double h = 1e-6;
    for (int v = 0; v < cdl_model_nviews(m); v++) {
        const cdl_param_view *pv = cdl_model_view(m, v);
        double maxdiff = 0, maxref = 0;
        for (size_t i = pv->offset; i < pv->offset + pv->numel; i++) {
            double keep = p[i];
            p[i] = keep + h;
            double up = ref_loss(m, p, xd, n, labels, train, seed);
            p[i] = keep - h;
            double down = ref_loss(m, p, xd, n, labels, train, seed);
            p[i] = keep;
            double fd = (up - down) / (2 * h);
            maxdiff = fmax(maxdiff, fabs(fd - g[i]));
            maxref = fmax(maxref, fabs(fd));
        }
        assert_true(maxref > 0);
        if (maxdiff / maxref > 1e-4)
            fail_msg("%s (train %d): gradient vs finite differences: normalised error %.3g",
                     pv->name, train, maxdiff / maxref);
    }
out:
    free(p);
    free(xd);
    free(g);
    free(pf);
    free(xh);
    free(ref_bufs);
    ref_bufs = NULL;
    loss_bufs_free(&lb);
    be->ops->free(be, x);
    cdl_model_destroy(m);
}

static void test_finite_differences_train(void **state)
{
    (void)state;
    check_fd(fd_spec, 1);
}

static void test_finite_differences_eval(void **state)
{
    (void)state;
    check_fd(fd_spec, 0);
}

/* Backward over a graph: gradients summed at the fan-outs, split at the
 * concat, passed through the adds. */
static void test_finite_differences_graph(void **state)
{
    (void)state;
    check_fd(fd_graph_spec, 1);
}

/* Adds whose input other layers read too, sharing that input's gradient
 * buffer (both blocks' adds here; none in the ResNets, whose adds carry
 * a fused ReLU and keep their copy). */
static int count_shared_dy(const cdl_model *m)
{
    int shared = 0;
    for (int i = 0; i < m->nlayers; i++)
        for (int j = 0; j < m->layers[i].nin; j++) {
            int q = m->layers[i].in[j];
            shared += q >= 0 && m->layers[q].ncons > 1 && m->layers[q].dy_alias == i;
        }
    return shared;
}

static void test_finite_differences_residual_stream(void **state)
{
    (void)state;
    cdl_model *m = from_text(fd_res_spec, (cdl_shape){2, 7, 7}, 4);
    assert_int_equal(count_shared_dy(m), 2);
    cdl_model_destroy(m);
    cdl_model_spec spec;
    assert_int_equal(cdl_spec_builtin("resnet20", (cdl_shape){3, 32, 32}, 10, &spec), 0);
    m = cdl_model_create(&spec, (cdl_shape){3, 32, 32}, 2, be);
    assert_non_null(m);
    assert_int_equal(count_shared_dy(m), 0);
    cdl_model_destroy(m);
    check_fd(fd_res_spec, 1);
}

/* Batch norm (training: batch statistics; evaluation: running ones after
 * a training batch), grouped and dilated convs, activations, pooling. */
static void test_finite_differences_bn(void **state)
{
    (void)state;
    check_fd(fd_bn_spec, 1);
    check_fd(fd_bn_spec, 0);
}

/* ------------------------------------------------------------ callbacks */

typedef struct ranges {
    int count;
    size_t offset[16], len[16];
    cdl_model *m;
    float *snapshot;   /* grads as they were when reported */
} ranges;

static void record_range(void *ctx, size_t offset, size_t count)
{
    ranges *r = ctx;
    assert_true(r->count < 16);
    r->offset[r->count] = offset;
    r->len[r->count] = count;
    r->count++;
    be->ops->to_host(be, r->snapshot + offset, cdl_model_grads(r->m) + offset, count * sizeof(float));
}

static void test_grad_ready_ranges(void **state)
{
    (void)state;
    /* Starts with a layer without parameters, has a layer without bias. */
    static const char *specs[] = {
        "relu\nconv2d 3 kernel=3\nmaxpool2d 2\nflatten\nlinear 4 bias=false\nrelu\nlinear 2\n",
        "conv2d 3 kernel=3\nrelu\nflatten\nlinear 2\n",
        /* A graph: layers in spec order finish from the end. */
        ("conv2d 3 kernel=3 padding=1\nrelu name=r\nconv2d 3 kernel=3 padding=1\nadd r name=sum\n"
         "conv2d 2 kernel=1 from=r name=s\nconcat sum s\nflatten\nlinear 2\n"),
    };
    cdl_shape in = {1, 6, 6};
    for (int s = 0; s < 3; s++) {
        cdl_model *m = from_text(specs[s], in, 3);
        cdl_model_init(m, 1);
        size_t np = cdl_model_nparams(m);
        float *xh = random_input(in, 3, 4);
        float *x = dev_upload(be, xh, 3 * 36 * sizeof(float));
        int32_t labels[3] = {0, 1, 1};
        loss_bufs lb;
        loss_bufs_init(&lb, be, 3, 2, labels);
        ranges r = {.m = m, .snapshot = calloc(np, sizeof(float))};
        loss_bufs_run(&lb, cdl_model_forward(m, x, 3, 1, 0));
        cdl_model_backward(m, lb.dlogits, record_range, &r);

        /* One range per layer with parameters, from the end, contiguous. */
        int nparam_layers = 0;
        for (int i = 0; i < cdl_model_get_spec(m)->nlayers; i++)
            nparam_layers += cdl_model_get_spec(m)->layers[i].kind == CDL_LAYER_CONV2D ||
                             cdl_model_get_spec(m)->layers[i].kind == CDL_LAYER_LINEAR;
        assert_int_equal(r.count, nparam_layers);
        size_t end = np;
        for (int i = 0; i < r.count; i++) {
            assert_int_equal(r.offset[i] + r.len[i], end);
            assert_true(r.len[i] > 0);
            end = r.offset[i];
        }
        assert_int_equal(end, 0);
        /* Reported ranges were final. */
        float *g = host_copy(be, cdl_model_grads(m), np);
        assert_memory_equal(g, r.snapshot, np * sizeof *g);
        free(g);
        free(r.snapshot);
        free(xh);
        loss_bufs_free(&lb);
        be->ops->free(be, x);
        cdl_model_destroy(m);
    }
}

/* ------------------------------------------------------------ fusions */

/* Residual blocks whose add feeds a ReLU: r0 feeds a conv, the first add
 * and the later sc (the add's share of r0's gradient is added to sc's);
 * the second add reads two sole inputs (the second's gradient written). */
static const char fuse_spec[] =
    "conv2d 4 kernel=3 padding=1 bias=false name=stem\n"
    "batchnorm2d\n"
    "relu name=r0\n"
    "conv2d 4 kernel=3 padding=1 bias=false\n"
    "batchnorm2d\n"
    "relu\n"
    "conv2d 4 kernel=3 padding=1 bias=false\n"
    "batchnorm2d name=b2\n"
    "add r0\n"
    "relu name=r1\n"
    "conv2d 4 kernel=1 bias=false from=r0 name=sc\n"
    "conv2d 4 kernel=3 padding=1 bias=false from=r1\n"
    "add sc\n"
    "relu\n"
    "globalavgpool\n"
    "flatten\n"
    "linear 3\n";

static int count_fused_adds(const cdl_model *m)
{
    int fused = 0;
    for (int i = 0; i < m->nlayers; i++)
        fused += m->layers[i].s->kind == CDL_LAYER_ADD && m->layers[i].fuse_relu;
    return fused;
}

static int count_deferred(const cdl_model *m)
{
    int deferred = 0, adds = 0;
    for (int i = 0; i < m->nlayers; i++) {
        deferred += m->layers[i].defer_dx;
        adds += m->layers[i].adds_tmp;
    }
    assert_int_equal(deferred, adds);
    return deferred;
}

/* One training step of spec on the n samples xh (shape in), whose output
 * is rows rows of classes logits with labels (rows: n, or n times a
 * sequence's positions), on the CPU backend and on be2 (2 threads, some
 * fused ops removed) gives the same logits and gradients, bit for bit, and
 * so does the evaluation forward; count(model) is want[0] on the first and
 * want[1] on the second. */
static void step_bits(const cdl_model_spec *spec, cdl_shape in, int n, const float *xh, int rows,
                      int classes, const int32_t *labels, cdl_backend *be2,
                      int (*count)(const cdl_model *), const int want[2])
{
    cdl_model *m[2] = {cdl_model_create(spec, in, n, be), cdl_model_create(spec, in, n, be2)};
    cdl_backend *bes[2] = {be, be2};
    float *g[2], *y[2], *ye[2];
    size_t numel = (size_t)in.c * in.h * in.w, nout = (size_t)rows * classes;
    for (int k = 0; k < 2; k++) {
        assert_non_null(m[k]);
        assert_int_equal(count(m[k]), want[k]);
        cdl_model_init(m[k], 4);
        float *x = dev_upload(bes[k], xh, (size_t)n * numel * sizeof(float));
        loss_bufs lb;
        loss_bufs_init(&lb, bes[k], rows, classes, labels);
        const float *logits = cdl_model_forward(m[k], x, n, 1, 1);
        y[k] = host_copy(bes[k], logits, nout);
        loss_bufs_run(&lb, logits);
        cdl_model_backward(m[k], lb.dlogits, NULL, NULL);
        g[k] = host_copy(bes[k], cdl_model_grads(m[k]), cdl_model_nparams(m[k]));
        /* Evaluation (running statistics) runs every layer: the same. */
        ye[k] = host_copy(bes[k], cdl_model_forward(m[k], x, n, 0, 1), nout);
        loss_bufs_free(&lb);
        bes[k]->ops->free(bes[k], x);
    }
    assert_memory_equal(y[0], y[1], nout * sizeof(float));
    assert_memory_equal(g[0], g[1], cdl_model_nparams(m[0]) * sizeof(float));
    assert_memory_equal(ye[0], ye[1], nout * sizeof(float));
    for (int k = 0; k < 2; k++) {
        free(g[k]);
        free(y[k]);
        free(ye[k]);
        cdl_model_destroy(m[k]);
    }
}

/* step_bits on n random samples of shape in with random labels among
 * classes. */
static void same_step_bits(const cdl_model_spec *spec, cdl_shape in, int n, int classes,
                           cdl_backend *be2, int (*count)(const cdl_model *), const int want[2])
{
    float *xh = random_input(in, n, 21);
    int32_t labels[8];
    assert_true(n <= 8);
    random_labels(labels, n, classes);
    step_bits(spec, in, n, xh, n, classes, labels, be2, count, want);
    free(xh);
}

/* The add+ReLU fusion (the CPU backend's add_relu and relu_bwd_split)
 * gives the bits of the unfused add, relu_fwd, relu_bwd and copies, which
 * run when a backend lacks the fused ops. */
static void test_add_relu_fusion_bitwise(void **state)
{
    (void)state;
    static cdl_backend_ops plain_ops;
    cdl_shape in = {2, 7, 7};   /* 5*4*49 floats: AVX2 tails */
    cdl_backend *be2 = cdl_backend_cpu_create(2);
    assert_non_null(be2);
    plain_ops = *be2->ops;
    plain_ops.add_relu = NULL;
    plain_ops.relu_bwd_split = NULL;
    plain_ops.relu_bwd_split_add = NULL;
    be2->ops = &plain_ops;
    cdl_model_spec spec;
    assert_int_equal(cdl_spec_parse(fuse_spec, "fuse.spec", &spec), 0);
    /* Both adds' ReLUs are fused on the CPU backend, none without the ops. */
    same_step_bits(&spec, in, 5, 3, be2, count_fused_adds, (const int[2]){2, 0});
    cdl_backend_destroy(be2);
}

static int count_bn_adds(const cdl_model *m)
{
    int fused = 0, adds = 0;
    for (int i = 0; i < m->nlayers; i++) {
        fused += m->layers[i].fuse_add;
        adds += m->layers[i].by_bn;
    }
    assert_int_equal(fused, adds);
    return fused;
}

/* resnet20 (3x10x10: AVX2 tails) on the CPU backend and, on 2 threads,
 * without the fused ops that strip() removes: same_step_bits. */
static void resnet20_without(void (*strip)(cdl_backend_ops *), int (*count)(const cdl_model *),
                             int want)
{
    static cdl_backend_ops plain_ops;
    cdl_shape in = {3, 10, 10};
    cdl_backend *be2 = cdl_backend_cpu_create(2);
    assert_non_null(be2);
    plain_ops = *be2->ops;
    strip(&plain_ops);
    be2->ops = &plain_ops;
    cdl_model_spec spec;
    assert_int_equal(cdl_spec_builtin("resnet20", in, 10, &spec), 0);
    same_step_bits(&spec, in, 3, 10, be2, count, (const int[2]){want, 0});
    cdl_backend_destroy(be2);
}

static void strip_bn_add(cdl_backend_ops *ops)
{
    ops->bn_train_fwd_add_relu = NULL;
}

static void strip_split_add(cdl_backend_ops *ops)
{
    ops->relu_bwd_split_add = NULL;
}

/* ResNet-20's last BN of each block computes the add and its ReLU
 * (bn_train_fwd_add_relu) with the bits of bn_train_fwd + add_relu: 7
 * basic blocks' bn2, 2 projection shortcuts' BN. */
static void test_bn_add_fusion_bitwise(void **state)
{
    (void)state;
    resnet20_without(strip_bn_add, count_bn_adds, 9);
}

/* ResNet-20's block inputs: the next block's first conv leaves its dx for
 * the add's backward to sum in its own pass (relu_bwd_split_add), the bits
 * of the accumulate it replaces; every block input but the stem's (a
 * batchnorm's ReLU): 8. */
static void test_deferred_fanout_bitwise(void **state)
{
    (void)state;
    resnet20_without(strip_split_add, count_deferred, 8);
}

static int count_linear_eps(const cdl_model *m)
{
    int fused = 0;
    for (int i = 0; i < m->nlayers; i++)
        fused += m->layers[i].fuse_act + m->layers[i].fuse_res + m->layers[i].bwd_act +
                 m->layers[i].dx_acc + m->layers[i].keeps_factor;
    return fused;
}

static void strip_linear_eps(cdl_backend_ops *ops)
{
    ops->linear_act_fwd = NULL;
    ops->linear_add_fwd = NULL;
    ops->linear_act_bwd = NULL;
    ops->layernorm_bwd_acc = NULL;
    ops->linear_act_grad_fwd = NULL;
    ops->linear_mul_bwd = NULL;
}

/* A CPU backend of 2 threads without the fused products (its table:
 * *ops, which must outlive it). */
static cdl_backend *plain_linear_backend(cdl_backend_ops *ops)
{
    cdl_backend *be2 = cdl_backend_cpu_create(2);
    assert_non_null(be2);
    *ops = *be2->ops;
    strip_linear_eps(ops);
    be2->ops = ops;
    return be2;
}

/* The GPT's products fused with their GELU and residual adds
 * (plan_linear_eps: per block c_fc's GELU forward, c_proj's dx through it,
 * both projections' adds, and the GELU's factor kept in place of its
 * input between the two: 5) and its layer norms adding their dx onto the
 * residual stream's gradient (plan_dx_acc: ln_1, ln_2, not ln_f: 2 per
 * block) give the bits of the separate ops: logits, every gradient and
 * the evaluation forward, on 1 and (stripped) 2 threads. n_embd 48: the
 * fast products (columns a multiple of 16). */
static void test_linear_fusion_bitwise(void **state)
{
    (void)state;
    enum { N = 3, T = 8, V = 16 };
    static cdl_backend_ops plain_ops;
    cdl_backend *be2 = plain_linear_backend(&plain_ops);
    cdl_shape in = {T, 1, 1};
    cdl_model_spec spec;
    assert_int_equal(cdl_spec_builtin("gpt:n_layer=2,n_head=3,n_embd=48", in, V, &spec), 0);
    float ids[N * T];
    int32_t labels[N * T];
    for (int i = 0; i < N * T; i++) {
        ids[i] = (float)((i * 7 + 3) % V);
        labels[i] = (i * 5 + 1) % V;
    }
    step_bits(&spec, in, N, ids, N * T, V, labels, be2, count_linear_eps,
              (const int[2]){2 * (5 + 2), 0});
    cdl_backend_destroy(be2);
}

static int count_kept_factors(const cdl_model *m)
{
    int kept = 0;
    for (int i = 0; i < m->nlayers; i++)
        kept += m->layers[i].keeps_factor;
    return kept;
}

/* A GELU between two fused products keeps its backward's factor in place
 * of its input (both forms; linear_act_grad_fwd, linear_mul_bwd); one
 * whose backward is not fused (a dropout before the next product) keeps
 * its input. Logits, gradients and the evaluation forward: the bits of the
 * separate ops, on 1 and (stripped) 2 threads. Widths of 16: the fast
 * products. */
static void test_gelu_factor_bitwise(void **state)
{
    (void)state;
    static cdl_backend_ops plain_ops;
    cdl_backend *be2 = plain_linear_backend(&plain_ops);
    cdl_shape in = {1, 4, 8};
    cdl_model_spec spec;
    assert_int_equal(cdl_spec_parse("flatten\nlinear 48\ngelu approximate=tanh\nlinear 32\n"
                                    "gelu\nlinear 16\ngelu\ndropout 0.25\nlinear 10\n",
                                    "gelu.spec", &spec),
                     0);
    same_step_bits(&spec, in, 7, 10, be2, count_kept_factors, (const int[2]){2, 0});
    cdl_backend_destroy(be2);
}

/* The fused add+ReLU's gradients against central differences. */
static void test_finite_differences_add_relu(void **state)
{
    (void)state;
    check_fd(fuse_spec, 1);
}

/* ----------------------------------------------- determinism, allocation */

static void test_deterministic_and_overwrites(void **state)
{
    (void)state;
    cdl_shape in = {3, 32, 32};
    const int n = 5;
    cdl_model *a = lenet(in, n), *b = lenet(in, n);
    cdl_model_init(a, 3);
    cdl_model_init(b, 3);
    size_t np = cdl_model_nparams(a);
    float *xh = random_input(in, n, 8);
    float *x = dev_upload(be, xh, (size_t)n * 3072 * sizeof(float));
    int32_t labels[5];
    random_labels(labels, n, 10);
    loss_bufs lb;
    loss_bufs_init(&lb, be, n, 10, labels);

    loss_bufs_run(&lb, cdl_model_forward(a, x, n, 1, 11));
    cdl_model_backward(a, lb.dlogits, NULL, NULL);
    float *ga = host_copy(be, cdl_model_grads(a), np);
    /* Again on the same model: gradients are overwritten, not summed. */
    loss_bufs_run(&lb, cdl_model_forward(a, x, n, 1, 11));
    cdl_model_backward(a, lb.dlogits, NULL, NULL);
    float *ga2 = host_copy(be, cdl_model_grads(a), np);
    assert_memory_equal(ga, ga2, np * sizeof *ga);
    /* And on a second model built the same way. */
    loss_bufs_run(&lb, cdl_model_forward(b, x, n, 1, 11));
    cdl_model_backward(b, lb.dlogits, NULL, NULL);
    float *gb = host_copy(be, cdl_model_grads(b), np);
    assert_memory_equal(ga, gb, np * sizeof *ga);

    free(ga);
    free(ga2);
    free(gb);
    free(xh);
    loss_bufs_free(&lb);
    be->ops->free(be, x);
    cdl_model_destroy(a);
    cdl_model_destroy(b);
}

/* The model keeps its own copy of the input: refilling the caller's buffer
 * between forward and backward (a prefetching loader) changes nothing. */
static void test_input_may_change_before_backward(void **state)
{
    (void)state;
    cdl_shape in = {1, 28, 28};
    const int n = 3;
    cdl_model *m = from_text("flatten\nlinear 16\nrelu\nlinear 4\n", in, n);
    cdl_model_init(m, 1);
    size_t np = cdl_model_nparams(m);
    float *xh = random_input(in, n, 2);
    float *x = dev_upload(be, xh, (size_t)n * 784 * sizeof(float));
    int32_t labels[3] = {0, 1, 2};
    loss_bufs lb;
    loss_bufs_init(&lb, be, n, 4, labels);

    loss_bufs_run(&lb, cdl_model_forward(m, x, n, 0, 0));
    cdl_model_backward(m, lb.dlogits, NULL, NULL);
    float *g1 = host_copy(be, cdl_model_grads(m), np);
    loss_bufs_run(&lb, cdl_model_forward(m, x, n, 0, 0));
    be->ops->fill(be, x, 100.0f, (size_t)n * 784);
    cdl_model_backward(m, lb.dlogits, NULL, NULL);
    float *g2 = host_copy(be, cdl_model_grads(m), np);
    assert_memory_equal(g1, g2, np * sizeof *g1);
    free(g1);
    free(g2);
    free(xh);
    loss_bufs_free(&lb);
    be->ops->free(be, x);
    cdl_model_destroy(m);
}

/* A batch smaller than max_batch gives the same rows as a full one. */
static void test_partial_batch(void **state)
{
    (void)state;
    cdl_shape in = {1, 28, 28};
    cdl_model *m = lenet(in, 8);
    cdl_model_init(m, 9);
    float *xh = random_input(in, 8, 5);
    float *x = dev_upload(be, xh, 8 * 784 * sizeof(float));
    float *full = host_copy(be, cdl_model_forward(m, x, 8, 0, 0), 80);
    float *part = host_copy(be, cdl_model_forward(m, x, 3, 0, 0), 30);
    assert_true(norm_err_ff(part, full, 30) < 1e-6);
    free(full);
    free(part);
    free(xh);
    be->ops->free(be, x);
    cdl_model_destroy(m);
}

static void test_no_allocation_in_step(void **state)
{
    (void)state;
    cdl_shape in = {1, 28, 28};
    const int n = 16;
    cdl_model *m = from_text("conv2d 6 kernel=5 padding=2\nrelu\nmaxpool2d 2\navgpool2d 2\n"
                             "flatten\ndropout 0.5\nlinear 10\n", in, n);
    cdl_model_init(m, 1);
    cdl_optim_config oc = cdl_optim_defaults(CDL_OPTIM_ADAMW);
    cdl_optim *opt = cdl_optim_create(&oc, cdl_model_nparams(m), be);
    float *xh = random_input(in, n, 3);
    float *x = dev_upload(be, xh, (size_t)n * 784 * sizeof(float));
    int32_t labels[16];
    random_labels(labels, n, 10);
    loss_bufs lb;
    loss_bufs_init(&lb, be, n, 10, labels);

    uint64_t before = cdl_alloc_count();
    for (int step = 0; step < 3; step++) {
        loss_bufs_run(&lb, cdl_model_forward(m, x, step ? n : n / 2, 1, (uint64_t)step));
        cdl_model_backward(m, lb.dlogits, NULL, NULL);
        cdl_optim_step(opt, cdl_model_params(m), cdl_model_grads(m), 1e-3f);
    }
    assert_true(cdl_model_forward(m, x, n, 0, 0) != NULL);
    assert_int_equal(cdl_alloc_count(), before);

    free(xh);
    loss_bufs_free(&lb);
    be->ops->free(be, x);
    cdl_optim_destroy(opt);
    cdl_model_destroy(m);
}

/* -------------------------------------------------------------- misuse */

static void test_errors(void **state)
{
    (void)state;
    cdl_model_spec spec;
    cdl_shape in = {1, 28, 28};
    assert_int_equal(cdl_spec_builtin("lenet", in, 10, &spec), 0);
    assert_null(cdl_model_create(&spec, in, 0, be));
    assert_non_null(strstr(cdl_last_error(), "batch size 0 is invalid"));
    assert_null(cdl_model_create(&spec, (cdl_shape){3, 32, 32}, 4, be));
    assert_non_null(strstr(cdl_last_error(), "the spec is for 1x28x28 inputs but the data is 3x32x32"));
    assert_int_equal(cdl_spec_parse("flatten\nlinear 3\n", "x.spec", &spec), 0);
    assert_null(cdl_model_create(&spec, (cdl_shape){0, 0, 0}, 4, be));
    assert_non_null(strstr(cdl_last_error(), "x.spec: no input shape"));
    assert_null(cdl_model_create(&spec, (cdl_shape){3, 32, 32}, 1 << 20, be));
    assert_non_null(strstr(cdl_last_error(), "more than 2^31 values"));
    /* Specs built in code: duplicate names are caught here too. */
    assert_int_equal(cdl_spec_parse("flatten\nlinear 3\nlinear 2\n", "x.spec", &spec), 0);
    strcpy(spec.layers[2].name, "fc1");
    assert_null(cdl_model_create(&spec, in, 4, be));
    assert_non_null(strstr(cdl_last_error(), "x.spec:3: the name 'fc1' is used twice (here and at x.spec:2"));
    spec.layers[2].name[0] = '\0';   /* "" = automatic */
    cdl_model *m = cdl_model_create(&spec, in, 4, be);
    assert_non_null(m);
    assert_non_null(cdl_model_find(m, "fc2.weight"));

    float *x = be->ops->alloc(be, 5 * 784 * sizeof(float));
    cdl_model_backward(m, x, NULL, NULL);
    assert_non_null(strstr(cdl_last_error(), "backward without a forward"));
    assert_null(cdl_model_forward(m, x, 5, 0, 0));
    assert_non_null(strstr(cdl_last_error(), "forward of 5 samples"));
    assert_non_null(strstr(cdl_last_error(), "batches of 1 to 4"));
    assert_null(cdl_model_forward(m, x, 0, 0, 0));
    assert_null(cdl_model_forward(m, NULL, 2, 0, 0));
    be->ops->free(be, x);
    cdl_model_destroy(m);
    cdl_model_destroy(NULL);
}

/* Models without batchnorm have no buffers; the allreduce hook is stored
 * and never called by them. */
static int hook_calls;
static int count_hook(void *ctx, float *buf, size_t count)
{
    (void)ctx, (void)buf, (void)count;
    hook_calls++;
    return 0;
}

static void test_no_buffers_without_batchnorm(void **state)
{
    (void)state;
    cdl_shape in = {1, 28, 28};
    cdl_model *m = lenet(in, 2);
    assert_int_equal(cdl_model_nbuffers(m), 0);
    assert_int_equal(cdl_model_nbuffer_floats(m), 0);
    assert_null(cdl_model_buffers(m));
    assert_null(cdl_model_buffer(m, 0));
    cdl_model_set_allreduce(m, count_hook, NULL);
    cdl_model_init(m, 1);
    float *x = random_input(in, 2, 5);
    float *xd = dev_upload(be, x, 2 * 28 * 28 * sizeof(float));
    const float *logits = cdl_model_forward(m, xd, 2, 1, 0);
    assert_non_null(logits);
    float dl[20] = {0};
    float *dld = dev_upload(be, dl, sizeof dl);
    cdl_model_backward(m, dld, NULL, NULL);
    assert_int_equal(hook_calls, 0);
    be->ops->free(be, xd);
    be->ops->free(be, dld);
    free(x);
    cdl_model_destroy(m);
}

/* The built-in ResNets: parameter counts and names (resnet18's are
 * torchvision's state_dict keys, in its order), buffers per batch norm. */
static void test_builtin_resnets(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        cdl_shape in;
        size_t nparams;
        int unused, nbuffers;
    } want[] = {
        {"resnet20", {3, 32, 32}, 272474, 0, 3 * 21},
        {"resnet20", {1, 28, 28}, 272186, 0, 3 * 21},
        {"resnet18", {3, 32, 32}, 11173962, 0, 3 * 20},
        {"resnet18", {1, 28, 28}, 11173962 - 2 * 64 * 9, 0, 3 * 20},
        /* torchvision's counts for num_classes=10: the ImageNet stem's conv1
         * is 64x3x7x7, the CIFAR one's 64x3x3x3. */
        {"resnet18", {3, 72, 72}, 11181642, 0, 3 * 20},
        {"resnet34", {3, 32, 32}, 21289802 - 64 * 3 * (49 - 9), 0, 3 * 36},
        {"resnet50:stem=imagenet", {3, 32, 32}, 23528522, 0, 3 * 53},
    };
    for (size_t t = 0; t < sizeof want / sizeof want[0]; t++) {
        cdl_model_spec spec;
        assert_int_equal(cdl_spec_builtin(want[t].name, want[t].in, 10, &spec), 0);
        cdl_model *m = cdl_model_create(&spec, want[t].in, 2, be);
        if (!m)
            fail_msg("%s: %s", want[t].name, cdl_last_error());
        if (cdl_model_nparams(m) != want[t].nparams)
            fail_msg("%s %dx%dx%d: %zu parameters, want %zu", want[t].name, want[t].in.c,
                     want[t].in.h, want[t].in.w, cdl_model_nparams(m), want[t].nparams);
        assert_int_equal(cdl_model_nbuffers(m), want[t].nbuffers);
        assert_int_equal(cdl_model_outputs(m), 10);
        cdl_model_destroy(m);
    }

    /* resnet18: torchvision's names in state_dict order (parameters, and
     * the buffers of each batch norm after its weight and bias there). */
    cdl_model_spec spec;
    cdl_shape in = {3, 32, 32};
    assert_int_equal(cdl_spec_builtin("resnet18", in, 10, &spec), 0);
    cdl_model *m = cdl_model_create(&spec, in, 2, be);
    assert_non_null(m);
    char want_names[64][64];
    int k = 0;
    snprintf(want_names[k++], 64, "conv1.weight");
    snprintf(want_names[k++], 64, "bn1.weight");
    snprintf(want_names[k++], 64, "bn1.bias");
    for (int stage = 1; stage <= 4; stage++)
        for (int b = 0; b < 2; b++) {
            static const char *const parts[] = {"conv1.weight", "bn1.weight", "bn1.bias",
                                                "conv2.weight", "bn2.weight", "bn2.bias",
                                                "downsample.0.weight", "downsample.1.weight",
                                                "downsample.1.bias"};
            int nparts = stage > 1 && b == 0 ? 9 : 6;
            for (int p = 0; p < nparts; p++)
                snprintf(want_names[k++], 64, "layer%d.%d.%s", stage, b, parts[p]);
        }
    snprintf(want_names[k++], 64, "fc.weight");
    snprintf(want_names[k++], 64, "fc.bias");
    assert_int_equal(cdl_model_nviews(m), k);
    for (int i = 0; i < k; i++)
        assert_string_equal(cdl_model_view(m, i)->name, want_names[i]);
    const cdl_param_view *v = cdl_model_buffer(m, 2);
    assert_string_equal(v->name, "bn1.num_batches_tracked");
    assert_int_equal(v->is_count, 1);
    assert_int_equal(v->ndim, 0);
    assert_string_equal(cdl_model_buffer(m, 4)->name, "layer1.0.bn1.running_var");
    assert_int_equal(cdl_model_buffer(m, 4)->shape[0], 64);
    /* PyTorch's initial values: weight 1, bias 0, mean 0, var 1, count 0. */
    cdl_model_init(m, 3);
    float *bufs = host_copy(be, cdl_model_buffers(m), cdl_model_nbuffer_floats(m));
    assert_true(bufs[0] == 0.0f && bufs[64] == 1.0f && bufs[128] == 0.0f);
    free(bufs);
    const cdl_param_view *w = cdl_model_find(m, "layer4.1.bn2.weight");
    float *p = host_copy(be, cdl_model_params(m), cdl_model_nparams(m));
    assert_true(p[w->offset] == 1.0f && p[w->offset + w->numel] == 0.0f);
    free(p);
    cdl_model_destroy(m);
}

static void test_print(void **state)
{
    (void)state;
    cdl_model *m = lenet((cdl_shape){1, 28, 28}, 4);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    cdl_model_print(m, f);
    fclose(f);
    assert_non_null(strstr(buf, "model lenet: input 1x28x28, 61706 parameters"));
    assert_non_null(strstr(buf, "conv1 "));
    assert_non_null(strstr(buf, " conv2d 6 kernel=5 stride=1 padding=2"));
    assert_non_null(strstr(buf, "6x28x28"));
    assert_non_null(strstr(buf, "fc1 "));
    assert_non_null(strstr(buf, " linear 120"));
    assert_non_null(strstr(buf, "48120"));
    free(buf);
    cdl_model_destroy(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_views),
        cmocka_unit_test(test_spec_text),
        cmocka_unit_test(test_init),
        cmocka_unit_test(test_finite_differences_train),
        cmocka_unit_test(test_finite_differences_eval),
        cmocka_unit_test(test_finite_differences_graph),
        cmocka_unit_test(test_finite_differences_residual_stream),
        cmocka_unit_test(test_finite_differences_bn),
        cmocka_unit_test(test_grad_ready_ranges),
        cmocka_unit_test(test_add_relu_fusion_bitwise),
        cmocka_unit_test(test_deferred_fanout_bitwise),
        cmocka_unit_test(test_linear_fusion_bitwise),
        cmocka_unit_test(test_gelu_factor_bitwise),
        cmocka_unit_test(test_bn_add_fusion_bitwise),
        cmocka_unit_test(test_finite_differences_add_relu),
        cmocka_unit_test(test_deterministic_and_overwrites),
        cmocka_unit_test(test_input_may_change_before_backward),
        cmocka_unit_test(test_partial_batch),
        cmocka_unit_test(test_no_allocation_in_step),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_no_buffers_without_batchnorm),
        cmocka_unit_test(test_builtin_resnets),
        cmocka_unit_test(test_print),
    };
    return cmocka_run_group_tests(tests, backend_setup, backend_teardown);
}
