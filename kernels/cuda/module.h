/* The CUDA backend as a module that libcdl loads when a program first asks
 * for a GPU (kernels/cuda/loader.c), so that a CUDA build's CPU processes
 * never load the NVIDIA libraries (about 95 MB of private memory a
 * process, and a node without them could start no program) and one
 * installation serves CPU and GPU nodes.
 *
 * The module (cdl-cuda.so in $(pkglibdir): kernels/cuda/module.c, the CUDA
 * host code, its kernels and lib/dist/coll_nccl.c) exports one symbol,
 * CDL_CUDA_MODULE_SYMBOL, a cdl_cuda_module. What crosses: libcdl calls
 * the four functions below; the module calls libcdl's exported cdl_*
 * functions (cdl_error, cdl_calloc, ...) through the shared library, and
 * the few internal ones in cdl_cuda_host, which libcdl does not export.
 * A module of another build is refused (build, version, struct sizes).
 *
 * Programs that link libcdl statically with the CUDA code (the tests,
 * tests/fakegpu: libcdl_core.la) call the four functions directly and
 * load nothing. Internal. */
#ifndef CDL_KERNELS_CUDA_MODULE_H
#define CDL_KERNELS_CUDA_MODULE_H

#include <stddef.h>

#include <cdl/backend.h>

#include "kernels/optim_scalars.h"
#include "lib/dist/boot.h"
#include "lib/dist/coll.h"

/* Bumped whenever cdl_cuda_host or cdl_cuda_module changes. */
#define CDL_CUDA_MODULE_ABI 1
#define CDL_CUDA_MODULE_SYMBOL "cdl_cuda_module_1"
#define CDL_CUDA_MODULE_FILE "cdl-cuda.so"

/* libcdl's internal functions that the module's code calls. */
typedef struct cdl_cuda_host {
    int (*backend_log_has)(const char *list, const char *topic);
    int (*boot_put)(boot *b, const char *key, const void *val, size_t len);
    int (*boot_get)(boot *b, int rank, const char *key, void *buf, size_t len);
    double (*dist_now)(void);
    void (*dist_note_peer_lost)(void);
    kern_sgd_sc (*kern_sgd_scalars)(const cdl_sgd_hparams *hp);
    kern_adam_sc (*kern_adam_scalars)(const cdl_adam_hparams *hp);
} cdl_cuda_host;

typedef struct cdl_cuda_module {
    int abi;                   /* CDL_CUDA_MODULE_ABI */
    const char *version;       /* CDL_VERSION_STRING of its build */
    const char *(*build_id)(void);   /* cdl_build_id() of its build */
    size_t params_size, ops_size;    /* cdl_backend_params, cdl_backend_ops */
    /* Called once, before anything else. */
    void (*init)(const cdl_cuda_host *host);
    /* The functions of lib/core/backends.h and lib/dist/coll.h; the NCCL
     * ones NULL in a module built without NCCL. */
    cdl_backend *(*backend_open)(const cdl_backend_params *params);
    int (*backend_visible)(void);
    int (*nccl_prepare)(const coll_group *g, boot *b);
    coll *(*coll_nccl_create)(const coll_group *g, boot *b, int device, int host_buffers,
                              double timeout_s, void *compute_stream);
} cdl_cuda_module;

#endif
