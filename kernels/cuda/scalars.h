/* The kernels' per-call scalars from the ops' arguments (scalars.c). Pure
 * host code: the CPU emulation tests use it too. */
#ifndef CDL_KERNELS_CUDA_SCALARS_H
#define CDL_KERNELS_CUDA_SCALARS_H

#include <cdl/backend.h>

#include "kernels/cuda/kernels.h"

cuk_drop_sc cbe_dropout_scalars(float p, uint64_t seed);
cuk_sgd_sc cbe_sgd_scalars(const cdl_sgd_hparams *hp);
cuk_adam_sc cbe_adam_scalars(const cdl_adam_hparams *hp);

#endif
