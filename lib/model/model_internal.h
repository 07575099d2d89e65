/* Helpers shared by the spec parser, shape inference and the model (and
 * the tests, which link the library statically). */
#ifndef CDL_MODEL_MODEL_INTERNAL_H
#define CDL_MODEL_MODEL_INTERNAL_H

#include <stdint.h>

#include <stddef.h>

#include <cdl/model.h>

/* Limits on the numbers a spec may hold: generous for the models cdl is
 * for, small enough that no shape arithmetic below overflows an int. */
#define SPEC_MAX_FEATURES 1000000  /* conv2d / linear output size */
#define SPEC_MAX_DIM 65536         /* kernel, stride, padding, input dims */
#define SPEC_MAX_NUMEL (1L << 30)  /* floats per sample of any activation */

/* "conv2d", "relu", ... as written in spec files. */
const char *spec_kind_name(cdl_layer_kind kind);

/* Where layer i comes from, for error messages: "file:line", or
 * "lenet (layer 3)" for built-ins and specs built in code. */
void spec_where(const cdl_model_spec *spec, int i, char *buf, size_t len);

/* The layer as a spec-file line without its name: "conv2d 6 kernel=5 padding=2". */
void spec_layer_str(const cdl_layer_spec *l, char *buf, size_t len);

/* The inputs of layer i: how many, and the spec index of input j (-1 =
 * the model's input); nin = 0 in the spec means the previous layer. */
static inline int spec_nin(const cdl_layer_spec *l)
{
    return l->nin > 0 ? l->nin : 1;
}

static inline int spec_in(const cdl_layer_spec *l, int i, int j)
{
    return l->nin > 0 ? l->in[j] : i - 1;
}

/* The effective conv2d sizes (widths default to heights, 0 to 1). */
typedef struct spec_conv {
    int kh, kw, sh, sw, ph, pw, dh, dw, groups;
} spec_conv;
spec_conv spec_conv_of(const cdl_layer_spec *l);

/* Kinds with automatic names (stem + K for the K-th in its scope): 0 conv,
 * 1 fc, 2 bn, 3 emb, 4 pos, 5 ln; -1 for the others. */
#define SPEC_AUTO_KINDS 6
extern const char *const spec_auto_stem[SPEC_AUTO_KINDS];
int spec_auto_kind(cdl_layer_kind kind);

/* 1 for the layers that own parameters (conv2d, linear, batchnorm2d,
 * embedding, posembedding, layernorm; a tied linear owns only its bias). */
int spec_has_params(cdl_layer_kind kind);

/* 1 if s is a valid layer name (a PyTorch module path: [A-Za-z0-9_] parts
 * joined by dots, not starting with a digit), shorter than
 * CDL_NAME_MAX (so "name.weight" fits a parameter view's name). */
int spec_name_ok(const char *s);

/* Fills empty names with convK / fcK (K counts that kind's layers from 1)
 * and rejects invalid or duplicate names; errors name the layer's place. */
int spec_finish_names(cdl_model_spec *spec);

/* The seed of the dropout layer at spec index `layer` in a forward with
 * dropout_seed `seed`: its mask is cdl_dropout_keep(that, i, p) for the
 * element i of its (n, numel) input, so two dropout layers never share a
 * mask. (docs/model-spec.md gives the formula for other implementations.) */
uint64_t model_dropout_seed(uint64_t seed, int layer);

/* cdl_spec_infer that also says which outputs are sequences (seq[i + 1]
 * for layer i, seq[0] for the input: never); seq may be NULL. */
int spec_infer_seq(const cdl_model_spec *spec, cdl_shape input, cdl_shape *shapes, int *seq);

/* The text of the gpt built-in for these options (a spec-file `gpt` line's
 * key=value words, or the "gpt:k=v,..." built-in's), or -1 with cdl_error.
 * Sizes not given are 0 in the text (cdl_spec_fit fills them) unless
 * block / vocab are > 0. */
#define SPEC_GPT_TEXT 32768
int spec_gpt_text(char **kv, int nkv, const char *where, int block, int vocab, char *text,
                  size_t len);

/* builtin_resnet.c: 1 if name is one of the built-in ResNets (resnet20,
 * resnet18/34/50/101, also as resnetNN:stem=...); their spec text for the
 * input and classes into text (len bytes), 0 or -1 with the error set. */
int spec_is_resnet(const char *name);
int spec_resnet_text(const char *name, cdl_shape input, int classes, char *text, size_t len);
/* The stem a torchvision ResNet (resnet18/34/50/101[:stem=...]) takes for
 * input: 1 ImageNet's, 0 CIFAR's; -1 for any other name or a bad option. */
int spec_resnet_stem(const char *name, cdl_shape input);

#endif
