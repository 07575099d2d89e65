/* The constructors of the backends built into this libcdl, for
 * lib/core/backend.c (the registry behind cdl_backend_create_with). Each
 * backend folder defines its own; kernels/cuda/none.c stands in for CUDA in
 * a build without it. Internal. */
#ifndef CDL_CORE_BACKENDS_H
#define CDL_CORE_BACKENDS_H

#include <cdl/backend.h>

/* params is complete (cdl_backend_params_init, then the caller's fields);
 * cpu_backend_open leaves precision to its caller (backend.c refuses bf16). */
cdl_backend *cpu_backend_open(const cdl_backend_params *params);
cdl_backend *cuda_backend_open(const cdl_backend_params *params);
/* --device auto's: cuda_backend_open, except that where there is plainly
 * no GPU it fails without loading anything (the shared libcdl's loader,
 * kernels/cuda/loader.c: no NVIDIA driver on the node). */
cdl_backend *cuda_backend_open_auto(const cdl_backend_params *params);
int cuda_backend_visible(void);

/* Whether a log list (CDL_LOG's: comma-separated topics, or "all") names
 * topic. */
int backend_log_has(const char *list, const char *topic);

#endif
