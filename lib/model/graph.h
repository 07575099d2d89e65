/* The model's internal state, shared by model.c (planning, memory) and
 * run.c (forward and backward). */
#ifndef CDL_MODEL_GRAPH_H
#define CDL_MODEL_GRAPH_H

#include <stdint.h>

#include <cdl/cdl.h>

#include "model_internal.h"

typedef struct layer {
    const cdl_layer_spec *s;       /* into the model's copy of the spec */
    int nin;
    int in[CDL_MAX_INPUTS];        /* spec indices of the inputs, -1 = the model's input */
    cdl_shape ishape, out;         /* first input's and the output's shape */
    size_t in_numel, out_numel;    /* floats per sample */
    size_t poff, pcount;           /* the layer's range of params/grads (weight, then bias) */
    int wview, bview;              /* view indices, -1 if none */
    int bufview;                   /* batchnorm: its running_mean buffer view (then var, count) */
    cdl_conv2d_desc conv;          /* n is set per batch */
    cdl_pool2d_desc pool;
    float *y;                      /* output, max_batch samples; may be an input's buffer */
    float *dy;                     /* gradient of the output (planned, may be shared) */
    int32_t *argmax;               /* maxpool: n*c*oh*ow */
    uint8_t *mask;                 /* dropout: n*numel */
    float *stats;                  /* batchnorm: sum (c+1), sqdev (c), saved (2c+1) */
    int dropped;                   /* dropout: the last forward applied a mask */
    int need_grad;                 /* a layer with parameters is at or before it */
    int ncons;                     /* reads of its output by later layers */
    int last_reader;               /* the highest layer reading it: writes dy first */
    int fused;                     /* relu: computed by the batchnorm or add before it */
    int fuse_relu;                 /* batchnorm, add: applies the relu after it */
    int bn_one_call;               /* batchnorm: training forward in bn_train_fwd (no sync) */
    int bn_bwd_one_call;           /* batchnorm: backward in bn_train_bwd (no sync) */
    int dy_alias;                  /* dy is the dy of layer dy_alias (its only reader) or -1 */
    int defer_dx;                  /* conv2d, not its input's last reader: leaves its dx in
                                    * tmp for the input's own backward to add (no accumulate) */
    int adds_tmp;                  /* add with fused relu: its dy is dy + tmp (defer_dx) */
    int fuse_add;                  /* batchnorm: in training also computes the add (and its
                                    * fused relu) that alone reads it; its y is the add's */
    int by_bn;                     /* add: its training forward is its input's (fuse_add) */
    /* Products fused with the elementwise layer next to them where the
     * backend has the ops (plan_linear_eps): */
    int fuse_act;                  /* linear: its forward also computes the activation that
                                    * alone reads it (linear_act_fwd) */
    int fuse_res;                  /* linear: its forward computes the add that alone reads
                                    * it (linear_add_fwd); its y is the add's */
    int bwd_act;                   /* linear: its backward's dx goes through the activation
                                    * that is its input (linear_act_bwd) */
    int fwd_by_linear;             /* activation, add: forward made by the linear before */
    int bwd_by_linear;             /* activation: backward made by the linear after */
    int keeps_factor;              /* activation made and differentiated by those two
                                    * linears: its input buffer holds act' of the input
                                    * (linear_act_grad_fwd, linear_mul_bwd) */
    int dx_acc;                    /* layernorm, not its input's last reader: its backward
                                    * adds dx onto the input's dy itself
                                    * (layernorm_bwd_acc), not through tmp */
    /* Sequences: an output of T positions of E features is (T, 1, E). */
    int seq, in_seq;               /* the output / first input is a sequence */
    int rows;                      /* positions per sample that row-wise ops see (1 if flat) */
    int feat_in;                   /* features per row of the input (linear, layernorm) */
    int tied_by;                   /* embedding: a later linear writes its gradient first */
    float *saved;                  /* layernorm: mean, rstd per row; attention: lse (n,nh,T) */
} layer;

struct cdl_model {
    cdl_model_spec spec;
    char *spec_text;          /* the spec file's text, or NULL (cdl_model_set_spec_text) */
    cdl_backend *be;
    cdl_shape input;
    int max_batch, nlayers, nviews;
    int outputs;
    size_t nparams;
    layer layers[CDL_MAX_LAYERS];
    cdl_param_view views[2 * CDL_MAX_LAYERS];
    int naliases;                  /* tied linears' weights under their own names */
    cdl_param_view aliases[CDL_MAX_LAYERS];
    float *params, *grads;
    int nbuffers;                  /* non-trainable buffers (batchnorm running stats) */
    size_t nbuffer_floats;
    cdl_param_view bviews[3 * CDL_MAX_LAYERS];
    float *buffers;
    cdl_model_allreduce_fn allreduce;   /* SyncBatchNorm hook; NULL = none */
    void *allreduce_ctx;
    float *x;                      /* the model's copy of the input batch */
    float *acts;                   /* every activation buffer */
    float *gpool;                  /* gradient buffers, shared by liveness */
    float *tmp;                    /* one input gradient before it is accumulated */
    float *dlogits;                /* copy of the caller's dlogits */
    float *ws;                     /* shared conv/linear workspace */
    float *bnstats, *sync_scratch;
    float *seqsaved;               /* layernorm and attention statistics (layer.saved) */
    int32_t *argmax;
    uint8_t *masks;
    int n;                         /* batch of the last forward; 0 = none yet */
    int train;                     /* mode of the last forward */
    /* The parameters were set: cdl_model_init, or cdl_model_params handed
     * out for writing (every loader of weights and checkpoints writes
     * through it). A forward before refuses: from all zeros a model runs
     * without an error and learns nothing. A flag, not a scan of the
     * weights: nothing added to a start-up. */
    int weights_set;
};

/* Layer i's input j as a device pointer. */
static inline float *model_in(const cdl_model *m, const layer *L, int j)
{
    return L->in[j] < 0 ? m->x : m->layers[L->in[j]].y;
}

/* Resets the batchnorm buffers to PyTorch's initial values. */
void model_reset_buffers(cdl_model *m);

#endif
