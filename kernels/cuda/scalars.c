/* Host-side preparation of the kernels' scalars from the ops' arguments:
 * the arithmetic done once per call in double, as the CPU backend does. */
#include <math.h>

#include "kernels/cuda/scalars.h"

/* 1/(1-p), or 0 when everything is dropped (like PyTorch for p = 1). */
cuk_drop_sc cbe_dropout_scalars(float p, uint64_t seed)
{
    cuk_drop_sc sc = {.seed = seed, .p = p, .scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f};
    return sc;
}

cuk_sgd_sc cbe_sgd_scalars(const cdl_sgd_hparams *hp)
{
    cuk_sgd_sc sc = {
        .lr = hp->lr, .momentum = hp->momentum,
        .one_minus_damp = (float)(1.0 - (double)hp->dampening),
        .wd = hp->weight_decay, .nesterov = hp->nesterov, .first = hp->first_step,
    };
    return sc;
}

/* Bias corrections in double, like PyTorch's Python scalars. */
cuk_adam_sc cbe_adam_scalars(const cdl_adam_hparams *hp)
{
    double step = hp->step > 0 ? (double)hp->step : 1.0;
    double bc1 = 1.0 - pow((double)hp->beta1, step);
    double bc2 = 1.0 - pow((double)hp->beta2, step);
    cuk_adam_sc sc = {
        .beta1 = hp->beta1, .one_minus_beta1 = (float)(1.0 - (double)hp->beta1),
        .beta2 = hp->beta2, .one_minus_beta2 = (float)(1.0 - (double)hp->beta2),
        .eps = hp->eps, .wd = hp->weight_decay,
        .decay = (float)(1.0 - (double)hp->lr * (double)hp->weight_decay),
        .step_size = (float)((double)hp->lr / bc1),
        .bc2_sqrt = (float)sqrt(bc2),
        .decoupled = hp->decoupled,
    };
    return sc;
}
