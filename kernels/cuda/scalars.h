/* The kernels' per-call scalars from the ops' arguments (scalars.c). Pure
 * host code: the CPU emulation tests use it too. The optimizers' scalars are
 * shared with the CPU backend: kernels/optim_scalars.h. */
#ifndef CDL_KERNELS_CUDA_SCALARS_H
#define CDL_KERNELS_CUDA_SCALARS_H

#include <cdl/backend.h>

#include "kernels/cuda/kernels.h"

cuk_drop_sc cbe_dropout_scalars(float p, uint64_t seed);

#endif
