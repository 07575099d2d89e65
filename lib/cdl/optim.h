/* Optimizers with PyTorch's exact update rules, over the model's flat
 * parameter buffer, and learning-rate schedules as pure functions of the
 * step (so resuming needs only the step count). */
#ifndef CDL_OPTIM_H
#define CDL_OPTIM_H

#include <stddef.h>

#include <cdl/backend.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cdl_optim_kind { CDL_OPTIM_SGD, CDL_OPTIM_ADAM, CDL_OPTIM_ADAMW } cdl_optim_kind;

typedef struct cdl_optim_config {
    cdl_optim_kind kind;
    float momentum, dampening, weight_decay;   /* SGD; weight_decay for all */
    int nesterov;
    float beta1, beta2, eps;                   /* Adam, AdamW */
} cdl_optim_config;

/* PyTorch's defaults for kind (SGD: no momentum; Adam: betas 0.9/0.999,
 * eps 1e-8, no decay; AdamW: weight decay 0.01). */
cdl_optim_config cdl_optim_defaults(cdl_optim_kind kind);
/* "sgd", "adam", "adamw" -> kind; -1 if unknown. */
int cdl_optim_kind_parse(const char *s);
const char *cdl_optim_kind_name(cdl_optim_kind kind);

typedef struct cdl_optim cdl_optim;

/* State buffers (momentum, or exp_avg and exp_avg_sq) are flat, nparams
 * floats each, in the backend's memory, laid out like the parameters. */
cdl_optim *cdl_optim_create(const cdl_optim_config *cfg, size_t nparams, cdl_backend *be);
/* ZeRO-1: an optimizer holding state for parameters [offset, offset+count)
 * of nparams only (count floats per state buffer; element k of a state is
 * parameter offset+k). Its steps update that range and no other. */
cdl_optim *cdl_optim_create_shard(const cdl_optim_config *cfg, size_t nparams, size_t offset,
                                  size_t count, cdl_backend *be);
/* The range the state covers: [0, nparams) unless created as a shard. */
void cdl_optim_shard(const cdl_optim *o, size_t *offset, size_t *count);
void cdl_optim_destroy(cdl_optim *o);

/* One update of params from grads at learning rate lr; increments steps. */
void cdl_optim_step(cdl_optim *o, float *params_dev, const float *grads_dev, float lr);
/* Same, over a sub-range (for sharded or bucketed updates); does not
 * increment steps: call cdl_optim_advance() once after all ranges. On a
 * shard, only the part of the range inside the shard is updated. */
void cdl_optim_step_range(cdl_optim *o, float *params_dev, const float *grads_dev,
                          size_t offset, size_t count, float lr);
void cdl_optim_advance(cdl_optim *o);
/* Parameter groups of nanoGPT's AdamW (cdl-train --decay-params 2d):
 * weight decay 0 on the n ranges [offsets[i], offsets[i]+counts[i]) of the
 * flat buffer (biases and norm weights), the configured decay elsewhere.
 * Ranges must be sorted and disjoint; they are copied. n = 0 (the default)
 * decays every parameter, like one PyTorch parameter group. Steps over any
 * sub-range (cdl_optim_step_range) honour the groups. -1 with cdl_error on
 * a range outside the parameters or out of order. */
int cdl_optim_set_no_decay(cdl_optim *o, const size_t *offsets, const size_t *counts, int n);

long cdl_optim_steps(const cdl_optim *o);       /* completed steps */
void cdl_optim_set_steps(cdl_optim *o, long steps);
const cdl_optim_config *cdl_optim_get_config(const cdl_optim *o);

/* 0, 1 or 2 state buffers, named as in PyTorch's optimizer state
 * ("momentum_buffer"; "exp_avg", "exp_avg_sq"). */
int cdl_optim_nstate(const cdl_optim *o);
float *cdl_optim_state(cdl_optim *o, int i);
const char *cdl_optim_state_name(const cdl_optim *o, int i);

typedef enum cdl_sched_kind { CDL_SCHED_CONSTANT, CDL_SCHED_STEP, CDL_SCHED_COSINE } cdl_sched_kind;

/* Learning rate at a step. Warmup ramps linearly from base_lr/warmup_steps
 * to base_lr over warmup_steps; after it: constant; step (base_lr *
 * gamma^floor(s/step_size), like StepLR; step_size <= 0 keeps base_lr);
 * cosine (CosineAnnealingLR from base_lr to min_lr over total_steps -
 * warmup_steps, then held at min_lr). s counts from the end of warmup.
 * Cosine needs total_steps: left 0 (or not above warmup_steps), every step
 * after warmup gets min_lr, 0 unless set. */
typedef struct cdl_schedule {
    cdl_sched_kind kind;
    float base_lr;
    long warmup_steps;
    long total_steps;
    long step_size;
    float gamma;
    float min_lr;
} cdl_schedule;

float cdl_schedule_lr(const cdl_schedule *s, long step);
/* "constant", "step", "cosine" -> kind; -1 if unknown. */
int cdl_sched_kind_parse(const char *s);
const char *cdl_sched_kind_name(cdl_sched_kind kind);

#ifdef __cplusplus
}
#endif
#endif
