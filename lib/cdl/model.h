/* Models: a graph of layers described by a spec (built-in or from a
 * plain-text file; each layer reads the previous one or named earlier ones),
 * with parameters and gradients in two flat buffers.
 *
 * The flat layout is what makes allreduce, checkpointing and clipping loops
 * over ranges: parameter views are laid out in forward order, so backward
 * finishes gradients from the end of the buffer towards the start and the
 * data-parallel runtime can reduce finished tail ranges while backward runs.
 */
#ifndef CDL_MODEL_H
#define CDL_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include <cdl/backend.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CDL_MAX_LAYERS 512   /* a ResNet-18 with its batch norms has ~70 */
#define CDL_NAME_MAX 48      /* PyTorch module paths: "layer4.1.downsample.0" */
#define CDL_MAX_INPUTS 8     /* inputs of one add / concat */

typedef enum cdl_layer_kind {
    CDL_LAYER_CONV2D,
    CDL_LAYER_MAXPOOL2D,
    CDL_LAYER_AVGPOOL2D,
    CDL_LAYER_LINEAR,
    CDL_LAYER_RELU,
    CDL_LAYER_FLATTEN,
    CDL_LAYER_DROPOUT,
    CDL_LAYER_ADD,            /* sum of its inputs (same shape): residual joins */
    CDL_LAYER_CONCAT,         /* its inputs along channels (same height, width) */
    CDL_LAYER_BATCHNORM2D,
    CDL_LAYER_GLOBALAVGPOOL,  /* adaptive average pooling to 1x1 */
    CDL_LAYER_GELU,
    CDL_LAYER_SILU,
    CDL_LAYER_SIGMOID,
    CDL_LAYER_TANH,
    CDL_LAYER_LEAKYRELU,
    /* Sequence layers (transformers): a per-sample sequence of T positions
     * of E features is the shape (T, 1, E), row-major like PyTorch's (B, T, C). */
    CDL_LAYER_EMBEDDING,      /* token ids (T,1,1) -> (T,1,E): weight (vocab, E) */
    CDL_LAYER_POSEMBEDDING,   /* (T,1,E) + learned positions: weight (block, E), T <= block */
    CDL_LAYER_LAYERNORM,      /* over the feature axis: weight, bias (E) */
    CDL_LAYER_ATTENTION       /* causal self-attention core: (T,1,3C) -> (T,1,C), heads */
} cdl_layer_kind;

/* Per-sample shape (channels, height, width); a flat vector of k is (k,1,1). */
typedef struct cdl_shape {
    int c, h, w;
} cdl_shape;

/* One layer. A zeroed spec plus kind and sizes is a valid layer reading the
 * previous layer's output (square kernel, no dilation, one group); the
 * parser sets momentum and slope, specs built in code set them too. */
typedef struct cdl_layer_spec {
    cdl_layer_kind kind;
    int out;                  /* conv2d: output channels; linear: output features */
    int kernel, stride, pad;  /* conv2d and pools (heights, and widths unless set below);
                               * pool stride 0 means = kernel */
    float p;                  /* dropout probability in [0,1) */
    int bias;                 /* conv2d, linear: 1 to have a bias (the default) */
    char name[CDL_NAME_MAX];  /* PyTorch module name ("conv1", "layer1.0.bn2"); "" = none */
    int line;                 /* spec file line, for error messages (0 = built-in) */
    int use_line;             /* the `use` line of the block it comes from (0 = none) */
    int auto_name;            /* 1 when the name was given automatically (convK, ...) */
    int kernel_w, stride_w, pad_w;  /* conv2d: widths when not square (0 = as above) */
    int dilation, dilation_w; /* conv2d (0 = 1) */
    int groups;               /* conv2d (0 = 1); groups == in == out is depthwise */
    float eps;                /* batchnorm2d (0 = PyTorch's 1e-5) */
    float momentum;           /* batchnorm2d: PyTorch's momentum (the parser's default 0.1) */
    int sync;                 /* batchnorm2d: statistics over every rank (SyncBatchNorm) */
    float slope;              /* leakyrelu: negative slope (the parser's default 0.01) */
    int approx_tanh;          /* gelu: the tanh approximation */
    int vocab;                /* embedding: rows of its weight (0 = not known yet: cdl_spec_fit) */
    int block;                /* posembedding: rows of its weight (0 = not known yet) */
    int heads;                /* attention: number of heads */
    int tie;                  /* linear: spec index + 1 of the embedding whose weight it
                               * uses (its gradient goes there too); 0 = own weight */
    float init_std;           /* linear, embedding, posembedding: weights start as
                               * N(0, init_std) and biases at 0 (GPT-2's init); 0 = the
                               * default (PyTorch's: kaiming for linear, N(0,1) embeddings) */
    /* Inputs, as spec layer indices before this one, -1 = the model's input.
     * nin = 0: the previous layer (or the input for the first layer). */
    int nin;
    int in[CDL_MAX_INPUTS];
} cdl_layer_spec;

typedef struct cdl_model_spec {
    cdl_shape input;          /* c == 0: not given; taken from the dataset */
    int nlayers;
    cdl_layer_spec layers[CDL_MAX_LAYERS];
    char source[256];         /* "lenet", "mlp" or the spec file's path */
} cdl_model_spec;

/* Fills in what a spec left to the data (a `gpt` line without vocab_size or
 * block_size): the vocabulary of embeddings and tied linears with 0 rows
 * from `classes`, the block of posembeddings with 0 rows from input.c (the
 * sequence length). A size the spec gives must match: the error names both. */
int cdl_spec_fit(cdl_model_spec *spec, cdl_shape input, int classes);

/* The block size (positions) a model argument fixes: block_size= of a
 * "gpt:..." built-in; of a spec file, the T of its input line "input Tx1x1",
 * else the rows of its first posembedding (its gpt line's block_size);
 * 0 when it fixes none (the data's choice),
 * -1 with cdl_error when the argument cannot be read. */
int cdl_spec_block_size(const char *model);

/* Parses the text of a model spec file (format: docs/model-spec.md). Errors
 * name `filename` and the line. Automatic names are filled in: convK for the
 * K-th conv2d, fcK for the K-th linear, so a spec of LeNet gets the names of
 * the classic PyTorch module. */
int cdl_spec_parse(const char *text, const char *filename, cdl_model_spec *out);
int cdl_spec_load(const char *path, cdl_model_spec *out);
/* The text of the spec file at `path`, checked as cdl_spec_load does (at
 * most 1 MiB, no NUL bytes); *text is the caller's to cdl_free. */
int cdl_spec_read(const char *path, char **text);

/* Whether specs a and b compute the same function at inference: 0 when
 * every layer does the same (names, initialisation and training-only
 * settings aside: dropout is the identity, batch norm's momentum unused),
 * 1 when they differ, with the first difference in why ("FILE:LINE:
 * 'tanh', where lenet has 'relu'"). Weights that fit both (relu and tanh
 * have no tensors; n_head does not shape them) give other outputs. */
int cdl_spec_compare(const cdl_model_spec *a, const cdl_model_spec *b, char *why, size_t len);

/* Built-in models: "lenet" (conv 6@5x5, relu, maxpool 2, conv 16@5x5, relu,
 * maxpool 2, fc 120, relu, fc 84, relu, fc classes; conv1 is padded by 2 for
 * 28x28 inputs, the classic LeNet-5) and "mlp" (flatten, fc 256, relu, fc 128,
 * relu, fc classes). */
int cdl_spec_builtin(const char *name, cdl_shape input, int classes, cdl_model_spec *out);
/* "gpt" (or "gpt:KEY=VALUE,...", keys n_layer, n_head, n_embd, block_size,
 * vocab_size, bias, dropout; defaults 4, 4, 128, the input's length, the
 * classes, true, 0) is nanoGPT's GPT with its parameter names and GPT-2's
 * initialisation, for (T,1,1) inputs of token ids; a spec file's `gpt`
 * line takes the same keys (docs/model-spec.md). */

/* 1 if name is a built-in model (lenet, mlp, resnet20, resnet18, resnet34,
 * resnet50, resnet101, each of the last four also as NAME:stem=S, gpt or
 * gpt:KEY=VALUE,...). "resnet20" is He et al.'s CIFAR ResNet-20 (3x3 basic
 * blocks, 16/32/64 channels, projection shortcuts named shortcut.0/1, head
 * "linear"); "resnet18" to "resnet101" are torchvision's, with its
 * parameter names, and with its ImageNet stem (7x7 stride-2 conv1, 3x3
 * stride-2 max-pool) for inputs above 64 pixels on the shorter side or with
 * stem=imagenet, else (or with stem=cifar) a 3x3 stride-1 conv1 and no
 * max-pool. */
int cdl_spec_is_builtin(const char *name);

/* Checks the spec against an input shape and computes every layer's output
 * shape; errors name the layer (and file:line) and the shapes involved. */
int cdl_spec_infer(const cdl_model_spec *spec, cdl_shape input, cdl_shape *shapes_out /* nlayers+1 */);

/* One parameter tensor inside the flat buffers, with its PyTorch name and
 * layout ("conv1.weight" is (out,in,kh,kw), "fc1.weight" is (out,in)). */
typedef struct cdl_param_view {
    char name[CDL_NAME_MAX + 24];   /* + ".num_batches_tracked" */
    size_t offset, numel;     /* in floats, into params/grads */
    int ndim;
    int64_t shape[4];
    int fan_in;               /* for PyTorch's default initialisation */
    int is_bias;
    int is_bn;                /* batchnorm2d: weight starts at 1, bias at 0 (PyTorch's) */
    int is_count;             /* buffers: a float count (num_batches_tracked) that
                               * checkpoints write as I64 for PyTorch */
    int is_norm;              /* layernorm: weight starts at 1, bias at 0 */
    float init_std;           /* > 0: weights start as N(0, init_std), biases at 0;
                               * < 0: N(0, 1) (PyTorch's nn.Embedding) */
} cdl_param_view;

typedef struct cdl_model cdl_model;

/* Builds the model for batches of at most max_batch samples of `input`
 * shape, allocating every buffer a step needs (activations, workspaces).
 * Its parameters and buffers are all 0, norm scales included, until
 * cdl_model_init or cdl_model_load_weights sets them (or a program writes
 * them through cdl_model_params, which counts as setting them): before,
 * cdl_model_forward returns NULL with an error naming cdl_model_init, as
 * a model trained from zeros would run and learn nothing. */
cdl_model *cdl_model_create(const cdl_model_spec *spec, cdl_shape input, int max_batch,
                            cdl_backend *be);
void cdl_model_destroy(cdl_model *m);

/* PyTorch's default initialisation (kaiming_uniform a=sqrt(5) for weights,
 * U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for biases), from a seeded generator. */
void cdl_model_init(cdl_model *m, uint64_t seed);

size_t cdl_model_nparams(const cdl_model *m);
float *cdl_model_params(cdl_model *m);         /* device, nparams floats */
float *cdl_model_grads(cdl_model *m);          /* device, nparams floats */
int cdl_model_nviews(const cdl_model *m);
const cdl_param_view *cdl_model_view(const cdl_model *m, int i);
const cdl_param_view *cdl_model_find(const cdl_model *m, const char *name);
cdl_shape cdl_model_input(const cdl_model *m);
int cdl_model_outputs(const cdl_model *m);     /* logits per sample (positions * classes) */
/* T when the last layer's output is a sequence of T positions (a language
 * model: one prediction per position), else 1. */
int cdl_model_positions(const cdl_model *m);
/* Other names of parameter tensors: a linear tied to an embedding's weight
 * (lm_head.weight = transformer.wte.weight) has no view of its own; its
 * alias, a copy of the embedding's view under the linear's name, is what
 * checkpoints also write so that PyTorch loads them strictly. */
int cdl_model_naliases(const cdl_model *m);
const cdl_param_view *cdl_model_alias(const cdl_model *m, int i);
int cdl_model_max_batch(const cdl_model *m);
cdl_backend *cdl_model_backend(const cdl_model *m);
const cdl_model_spec *cdl_model_get_spec(const cdl_model *m);
/* The spec file's text the model was built from (a copy), so a checkpoint
 * can carry it: an evaluation then builds the model the run trained even
 * where the file is not found or has changed since. NULL for built-ins. */
int cdl_model_set_spec_text(cdl_model *m, const char *text);
const char *cdl_model_spec_text(const cdl_model *m);

/* Forward pass on n <= max_batch samples; returns the (n, outputs) logits in
 * device memory, valid until the next forward. `train` enables dropout, whose
 * masks come from dropout_seed (pass a per-step value for reproducibility). */
const float *cdl_model_forward(cdl_model *m, const float *x_dev, int n, int train,
                               uint64_t dropout_seed);

/* Called during backward each time the gradients of [offset, offset+count)
 * are final; ranges arrive from the end of the buffer towards the start. */
typedef void (*cdl_grad_ready_fn)(void *ctx, size_t offset, size_t count);

/* Backward from dlogits (n, outputs) of the last forward. Gradients are
 * overwritten, not accumulated. cb may be NULL. */
void cdl_model_backward(cdl_model *m, const float *dlogits_dev, cdl_grad_ready_fn cb, void *ctx);

/* Non-trainable buffers (batchnorm2d's running_mean, running_var and
 * num_batches_tracked, PyTorch's names) in one flat device buffer of floats,
 * separate from the parameters: the optimizer and the gradient allreduce
 * never see them. num_batches_tracked is a float count (exact to 2^24
 * steps) whose view has is_count = 1. Offsets are into cdl_model_buffers.
 * A model without batchnorm has 0 buffers (cdl_model_buffers is NULL). */
int cdl_model_nbuffers(const cdl_model *m);
const cdl_param_view *cdl_model_buffer(const cdl_model *m, int i);
float *cdl_model_buffers(cdl_model *m);        /* device, nbuffer_floats floats */
size_t cdl_model_nbuffer_floats(const cdl_model *m);

/* SyncBatchNorm: batchnorm2d layers with sync=true call fn during forward
 * and backward to sum `count` floats of device memory in place across the
 * data-parallel ranks (per-channel statistics). Without a hook (fn NULL,
 * the default) they use their own batch, like a single process. */
typedef int (*cdl_model_allreduce_fn)(void *ctx, float *buf, size_t count);
void cdl_model_set_allreduce(cdl_model *m, cdl_model_allreduce_fn fn, void *ctx);

/* Writes a one-line-per-layer summary (shapes, parameter counts) to f. */
void cdl_model_print(const cdl_model *m, void *file /* FILE* */);

#ifdef __cplusplus
}
#endif
#endif
