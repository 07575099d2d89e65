/* Host-side preparation of the kernels' scalars from the ops' arguments:
 * the arithmetic done once per call in double, as the CPU backend does. */
#include "kernels/cuda/scalars.h"

/* 1/(1-p), or 0 when everything is dropped (like PyTorch for p = 1). */
cuk_drop_sc cbe_dropout_scalars(float p, uint64_t seed)
{
    cuk_drop_sc sc = {.seed = seed, .p = p, .scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f};
    return sc;
}
