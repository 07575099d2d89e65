/* The optimizers' per-call scalars from the ops' hyperparameters, shared by
 * the CPU backend (kernels/cpu/optim.c, which defines the functions) and the
 * CUDA kernels (kernels/cuda/optim.cu, as cuk_sgd_sc / cuk_adam_sc), so both
 * backends update with the same floats. Plain C types: nvcc includes this
 * through kernels/cuda/kernels.h.
 */
#ifndef CDL_KERNELS_OPTIM_SCALARS_H
#define CDL_KERNELS_OPTIM_SCALARS_H

#include <cdl/backend.h>

#ifdef __cplusplus
extern "C" {
#endif

/* torch.optim.SGD. one_minus_damp = 1 - dampening. */
typedef struct kern_sgd_sc {
    float lr, momentum, one_minus_damp, wd;
    int nesterov, first;
} kern_sgd_sc;

/* torch.optim.Adam / AdamW. step_size = lr / bc1, bc2_sqrt = sqrt(bc2),
 * decay = 1 - lr*wd (AdamW), computed in double. */
typedef struct kern_adam_sc {
    float beta1, one_minus_beta1, beta2, one_minus_beta2, eps;
    float wd, decay, step_size, bc2_sqrt;
    int decoupled;
} kern_adam_sc;

kern_sgd_sc kern_sgd_scalars(const cdl_sgd_hparams *hp);
kern_adam_sc kern_adam_scalars(const cdl_adam_hparams *hp);

#ifdef __cplusplus
}
#endif
#endif
