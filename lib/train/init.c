/* Starting from saved weights (--init, cdl-eval, cdl-predict): the tensors
 * of a safetensors file, matched to the model's by their PyTorch names.
 * Strict like torch's load_state_dict: a missing, unexpected or
 * differently shaped tensor is an error naming it, except the tensors a
 * glob sets aside (a classifier head replaced for a new task) and the
 * causal masks nanoGPT and Hugging Face keep with a GPT's weights. */
#include <fnmatch.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <cdl/cdl.h>

#include "init.h"

static int ignored(const char *name, const char *ignore)
{
    return ignore && *ignore && fnmatch(ignore, name, 0) == 0;
}

/* "(a, b, c)" of a shape into buf. */
static const char *shape_str(int nd, const int64_t *shape, char *buf, size_t len)
{
    size_t used = (size_t)snprintf(buf, len, "(");
    for (int d = 0; d < nd && used < len; d++)
        used += (size_t)snprintf(buf + used, len - used, "%s%" PRId64, d ? ", " : "", shape[d]);
    if (used < len)
        snprintf(buf + used, len - used, ")");
    return buf;
}

/* The model's buffer named name (batchnorm2d's running statistics), or NULL. */
static const cdl_param_view *find_buffer(const cdl_model *m, const char *name)
{
    for (int i = 0; i < cdl_model_nbuffers(m); i++)
        if (!strcmp(cdl_model_buffer(m, i)->name, name))
            return cdl_model_buffer(m, i);
    return NULL;
}

/* Whether name is a GPT block's causal mask, which nanoGPT (without flash
 * attention: PyTorch < 2.0) and Hugging Face's GPT-2 keep in the state
 * dict as buffers: P.attn.bias (1, 1, B, B), P.attn.masked_bias. They hold
 * no weights (the mask follows from the architecture, and cdl's attention
 * applies it), and nanoGPT's from_pretrained drops them too. Only where
 * the model's block P has an attention (P.attn.c_attn.weight). */
static int gpt_mask_buffer(const cdl_model *m, const char *name)
{
    size_t n = strlen(name);
    static const char *const ends[] = {".attn.bias", ".attn.masked_bias"};
    for (size_t k = 0; k < sizeof ends / sizeof ends[0]; k++) {
        size_t e = strlen(ends[k]);
        char qkv[512];
        if (n <= e || strcmp(name + n - e, ends[k]) ||
            (size_t)snprintf(qkv, sizeof qkv, "%.*s.attn.c_attn.weight", (int)(n - e), name) >=
                sizeof qkv)
            continue;
        return cdl_model_find(m, qkv) != NULL;
    }
    return 0;
}

/* The wrapper's prefix that name starts with when, without it (and any
 * further wrappers' prefixes), it is one of the model's tensors: "module."
 * of DistributedDataParallel and DataParallel, "_orig_mod." of
 * torch.compile (a compiled DDP model has both). NULL otherwise. */
static const char *wrapper_prefix(const cdl_model *m, const char *name)
{
    static const char *const wrappers[] = {"module.", "_orig_mod."};
    const char *first = NULL, *rest = name;
    for (int stripped = 1; stripped;) {
        stripped = 0;
        for (size_t k = 0; k < sizeof wrappers / sizeof wrappers[0]; k++) {
            size_t n = strlen(wrappers[k]);
            if (!strncmp(rest, wrappers[k], n)) {
                first = first ? first : wrappers[k];
                rest += n;
                stripped = 1;
            }
        }
    }
    if (!first || !(cdl_model_find(m, rest) || find_buffer(m, rest) || gpt_mask_buffer(m, rest)))
        return NULL;
    return first;
}

/* Whether the file's 2-D shape is the transpose of the view's (not square). */
static int transposed(int nd, const int64_t *shape, const cdl_param_view *v)
{
    return nd == 2 && v->ndim == 2 && shape[0] != shape[1] && shape[0] == v->shape[1] &&
           shape[1] == v->shape[0];
}

/* A NaN or an infinity in weights read (a model saved after its training
 * diverged, a file PyTorch wrote from one): refused, naming the tensor,
 * rather than a first loss of NaN or predictions of NaN. x: its numel
 * values as loaded. */
static int check_finite(const char *path, const cdl_param_view *v, const float *x,
                        const char *layer)
{
    size_t bad = 0, first = 0;
    for (size_t k = 0; k < v->numel; k++)
        if (!isfinite(x[k]) && !bad++)
            first = k;
    if (!bad)
        return 0;
    return cdl_error("%s: tensor '%s' holds %zu NaN or infinite value%s (the first at flat "
                     "index %zu, %s): weights saved after a training diverged; take a file "
                     "from before the divergence (or, with --init, leave the layer fresh with "
                     "--init-ignore '%s')", path, v->name, bad, bad == 1 ? "" : "s", first,
                     isnan(x[first]) ? "NaN" : x[first] > 0 ? "inf" : "-inf", layer);
}

/* The file's tensor for view v (a parameter or a buffer) into dst + v->offset,
 * with load_state_dict's strictness. Counts (num_batches_tracked) are I64
 * in files PyTorch and cdl write; they live as floats in the model. cin:
 * the channels of the model's input (its pictures'). */
static int load_view(cdl_st_file *f, const cdl_param_view *v, float *dst, const char *model,
                     int cin)
{
    const char *path = cdl_st_path(f);
    int t = cdl_st_find(f, v->name), nd;
    int64_t shape[8];
    size_t numel;
    /* PyTorch's BatchNorm loads a state dict without num_batches_tracked
     * (torchvision's older ImageNet files, saved before the buffer existed)
     * and counts from 0: so does cdl. */
    size_t nl = strlen(v->name), el = strlen(".num_batches_tracked");
    if (t < 0 && v->is_count && nl > el && !strcmp(v->name + nl - el, ".num_batches_tracked")) {
        memset(dst + v->offset, 0, v->numel * sizeof *dst);
        return 0;
    }
    /* The advice names the layer ('fc.*'): its weight and bias differ
     * together, and a glob for one would stop at the next. */
    char layer[512];
    const char *dot = strrchr(v->name, '.');
    snprintf(layer, sizeof layer, "%.*s.*", dot ? (int)(dot - v->name) : (int)strlen(v->name),
             v->name);
    if (t < 0)
        return cdl_error("%s: the model's tensor '%s' is missing from the file (check "
                         "--model, or keep its layer freshly initialised with --init-ignore "
                         "'%s')", path, v->name, layer);
    if (cdl_st_shape(f, t, &nd, shape) != 0)
        return -1;
    int same = nd == v->ndim;
    for (int d = 0; same && d < nd; d++)
        same = shape[d] == v->shape[d];
    if (!same) {
        char a[96], b[96];
        /* torchvision's ImageNet weights on small pictures: the built-in
         * picked the CIFAR stem (3x3 conv1, no max-pool), the file has the
         * 7x7 one. Leaving conv1 fresh would throw away its first layer. */
        if (!strcmp(v->name, "conv1.weight") && nd == 4 && shape[2] == 7 && shape[3] == 7 &&
            v->ndim == 4 && v->shape[1] == shape[1] && v->shape[2] == 3)
            return cdl_error("%s: tensor 'conv1.weight' has shape %s, ImageNet's 7x7 stem, but "
                             "the model %s has the CIFAR stem %s (chosen for small pictures): "
                             "use --model %.*s:stem=imagenet to keep the file's stem", path,
                             shape_str(nd, shape, a, sizeof a), model,
                             shape_str(v->ndim, v->shape, b, sizeof b),
                             (int)strcspn(model, ":"), model);
        /* A first conv for RGB on grayscale pictures (or back): torchvision's
         * ImageFolder reads every picture as RGB, cdl keeps grayscale as 1
         * channel. Leaving the layer fresh would throw it away. */
        if (nd == 4 && v->ndim == 4 && shape[0] == v->shape[0] && shape[2] == v->shape[2] &&
            shape[3] == v->shape[3] && v->shape[1] == cin && (shape[1] == 1 || shape[1] == 3) &&
            (cin == 1 || cin == 3))
            return cdl_error("%s: tensor '%s' has shape %s but the model's is %s: the weights "
                             "are for samples of %d channel%s, the data has %d (pictures of an "
                             "image folder are read so with --channels %d%s)", path, v->name,
                             shape_str(nd, shape, a, sizeof a),
                             shape_str(v->ndim, v->shape, b, sizeof b), (int)shape[1],
                             shape[1] == 1 ? "" : "s", cin, (int)shape[1],
                             shape[1] == 3 ? "; torchvision's ImageFolder reads every picture "
                                             "as RGB" : "");
        /* Hugging Face's GPT-2 (transformers' Conv1D) stores c_attn, c_proj
         * and c_fc as (in, out), nn.Linear's transpose: leaving one out
         * would not help, and the square c_proj of attention would load
         * silently transposed if only the others were fixed. */
        if (transposed(nd, shape, v))
            return cdl_error("%s: tensor '%s' has shape %s, the transpose of the model's %s: "
                             "a Hugging Face GPT-2 file (its Conv1D layers store (in, out)); "
                             "transpose every attn.c_attn, attn.c_proj, mlp.c_fc and mlp.c_proj "
                             "weight, square ones too, as docs/transformers.md shows", path,
                             v->name, shape_str(nd, shape, a, sizeof a),
                             shape_str(v->ndim, v->shape, b, sizeof b));
        return cdl_error("%s: tensor '%s' has shape %s but the model's is %s (a replaced "
                         "layer? leave it out with --init-ignore '%s')", path, v->name,
                         shape_str(nd, shape, a, sizeof a),
                         shape_str(v->ndim, v->shape, b, sizeof b), layer);
    }
    const char *dtype = cdl_st_dtype(f, t);
    if (v->is_count && dtype && !strcmp(dtype, "I64")) {
        const int64_t *q = cdl_st_data_i64(f, t, &numel);
        if (!q)
            return -1;
        for (size_t k = 0; k < numel && k < v->numel; k++) {
            if (q[k] < 0)
                return cdl_error("%s: tensor '%s' holds the count %lld: the file is damaged",
                                 path, v->name, (long long)q[k]);
            dst[v->offset + k] = (float)q[k];
        }
        if (numel != v->numel)
            return cdl_error("%s: tensor '%s' holds %zu values, expected %zu", path, v->name,
                             numel, v->numel);
        return 0;
    }
    /* F16, BF16 and F64 (a model saved after .half(), in bfloat16 or in
     * double) become float32 as PyTorch's load_state_dict copies them. */
    if (cdl_st_data_float(f, t, dst + v->offset, v->numel) != 0)
        return -1;
    return check_finite(path, v, dst + v->offset, layer);
}

/* A tensor of the model (parameter or buffer) that the file lacks and the
 * glob ignore does not set aside, of the same kind (last name part,
 * ".weight") and shape as the file's tensor t: the same layer under
 * another name. NULL when there is none (then the file is most likely of
 * another model). */
static const char *missing_view(cdl_st_file *f, const cdl_model *m, const char *ignore, int t)
{
    const char *name = cdl_st_name(f, t);
    const char *kind = strrchr(name, '.') ? strrchr(name, '.') : name;
    int nd;
    int64_t shape[8];
    if (cdl_st_shape(f, t, &nd, shape) != 0)
        return NULL;
    for (int i = 0; i < cdl_model_nviews(m) + cdl_model_nbuffers(m); i++) {
        const cdl_param_view *v = i < cdl_model_nviews(m)
                                      ? cdl_model_view(m, i)
                                      : cdl_model_buffer(m, i - cdl_model_nviews(m));
        if (ignored(v->name, ignore) || cdl_st_find(f, v->name) >= 0)
            continue;
        size_t nl = strlen(v->name), kl = strlen(kind);
        int same = nl >= kl && !strcmp(v->name + nl - kl, kind) && v->ndim == nd;
        for (int d = 0; same && d < nd; d++)
            same = v->shape[d] == shape[d];
        if (same)
            return v->name;
    }
    return NULL;
}

/* Parameters into params, buffers into bufs (host copies of the model's). */
static int load(cdl_st_file *f, cdl_model *m, const char *ignore, float *params, float *bufs)
{
    const char *path = cdl_st_path(f), *model = cdl_model_get_spec(m)->source;
    /* A cdl checkpoint also holds the optimizer's state (optimizer.*):
     * not weights, and a fresh run's optimizer starts afresh. */
    const char *fmt = cdl_st_meta_get(f, "format");
    int cdl_ckpt = fmt && !strncmp(fmt, "cdl-checkpoint", 14);
    /* Unexpected tensors first: a file of another model says so at once. */
    for (int t = 0; t < cdl_st_count(f); t++) {
        const char *name = cdl_st_name(f, t);
        if (cdl_ckpt && !strncmp(name, "optimizer.", 10))
            continue;
        int alias = 0;   /* a tied weight's other name (lm_head.weight): read as its view */
        for (int k = 0; k < cdl_model_naliases(m); k++)
            alias |= !strcmp(cdl_model_alias(m, k)->name, name);
        if (cdl_model_find(m, name) || find_buffer(m, name) || alias || ignored(name, ignore) ||
            gpt_mask_buffer(m, name))
            continue;
        const char *wrap = wrapper_prefix(m, name);
        if (wrap)
            return cdl_error("%s: tensor '%s' is not in the model %s: its name starts with "
                             "'%s', which %s adds to every name of the model it wraps; save "
                             "%s.state_dict() (the inner model's) instead, or strip the prefix: "
                             "{k.removeprefix('%s'): v for k, v in sd.items()}", path, name,
                             model, wrap,
                             strcmp(wrap, "module.") ? "torch.compile"
                                                     : "DistributedDataParallel (or DataParallel)",
                             strcmp(wrap, "module.") ? "model._orig_mod" : "model.module", wrap);
        char prefixed[512];   /* Hugging Face's GPT2Model names: no "transformer." */
        snprintf(prefixed, sizeof prefixed, "transformer.%s", name);
        if (cdl_model_find(m, prefixed) || gpt_mask_buffer(m, prefixed))
            return cdl_error("%s: tensor '%s' is not in the model %s: the file has Hugging "
                             "Face's GPT2Model names, without the prefix 'transformer.'; add it "
                             "to its names, as docs/transformers.md shows", path, name, model);
        /* A spec written from a PyTorch module with other layer names
         * (nn.Sequential's features.0): the file then also lacks one of
         * the model's tensors, and the pair shows what to rename. */
        const char *lack = missing_view(f, m, ignore, t), *dot = strrchr(name, '.');
        int layer = dot ? (int)(dot - name) : (int)strlen(name);   /* "features.0" */
        if (lack)
            return cdl_error("%s: tensor '%s' is not in the model %s, whose '%s' is not in the "
                             "file (a spec written from a PyTorch module needs the module's "
                             "names: name=%.*s on this tensor's layer; cdl-train --summary lists "
                             "the model's): the file belongs to another model (check --model), "
                             "or name what to leave out with --init-ignore PATTERN", path, name,
                             model, lack, layer, name);
        return cdl_error("%s: tensor '%s' is not in the model %s: the file belongs to "
                         "another model (check --model), or name what to leave out with "
                         "--init-ignore PATTERN", path, name, model);
    }
    int cin = cdl_model_input(m).c;   /* the pictures' channels */
    for (int i = 0; i < cdl_model_nviews(m); i++) {
        const cdl_param_view *v = cdl_model_view(m, i);
        if (!ignored(v->name, ignore) && load_view(f, v, params, model, cin) != 0)
            return -1;
    }
    for (int i = 0; i < cdl_model_nbuffers(m); i++) {
        const cdl_param_view *v = cdl_model_buffer(m, i);
        if (!ignored(v->name, ignore) && load_view(f, v, bufs, model, cin) != 0)
            return -1;
    }
    return 0;
}

int cdl_model_load_weights(cdl_model *m, const char *path, const char *ignore)
{
    if (!m || !path)
        return cdl_error("cdl_model_load_weights: model or path is NULL");
    cdl_backend *be = cdl_model_backend(m);
    size_t np = cdl_model_nparams(m), nb = cdl_model_nbuffer_floats(m);
    float *host = cdl_malloc((np + nb) * sizeof *host + 1);
    if (!host)
        return -1;
    float *bufs = host + np;
    /* Tensors set aside keep their current values: start from them. */
    int rc = -1;
    if (be->ops->sync(be) != 0)
        goto out;
    be->ops->to_host(be, host, cdl_model_params(m), np * sizeof *host);
    if (nb)
        be->ops->to_host(be, bufs, cdl_model_buffers(m), nb * sizeof *host);
    if (be->ops->sync(be) != 0)
        goto out;
    cdl_st_file *f = cdl_st_open(path);
    if (!f)
        goto out;
    /* A newer cdl's checkpoint: its tensors may mean something else. */
    rc = cdl_ckpt_check_format(f) != 0 ? -1 : load(f, m, ignore, host, bufs);
    cdl_st_close(f);
    if (rc == 0) {
        be->ops->to_device(be, cdl_model_params(m), host, np * sizeof *host);
        if (nb)
            be->ops->to_device(be, cdl_model_buffers(m), bufs, nb * sizeof *host);
        rc = be->ops->sync(be);
    }
out:
    cdl_free(host);
    return rc;
}

int init_fresh_names(const cdl_model *m, const char *ignore, char *buf, size_t len)
{
    int n = 0;
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < cdl_model_nviews(m) + cdl_model_nbuffers(m); i++) {
        const cdl_param_view *v = i < cdl_model_nviews(m)
                                      ? cdl_model_view(m, i)
                                      : cdl_model_buffer(m, i - cdl_model_nviews(m));
        if (!ignored(v->name, ignore))
            continue;
        if (used < len)
            used += (size_t)snprintf(buf + used, len - used, "%s%s", n ? ", " : "", v->name);
        n++;
    }
    if (used >= len && len > 4)
        memcpy(buf + len - 4, "...", 4);   /* a long list is cut, not wrong */
    return n;
}
