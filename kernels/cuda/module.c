/* The entry of cdl-cuda.so (kernels/cuda/module.h): its one exported
 * symbol, and the internal libcdl functions the CUDA code calls, forwarded
 * to the libcdl that loaded the module (which does not export them). Only
 * in the module: programs linking the CUDA code statically
 * (libcdl_core.la) get the real functions instead. */
#include <cdl/cdl.h>

#include "kernels/cuda/module.h"
#include "lib/core/backends.h"
#include "lib/dist/util.h"

static cdl_cuda_host host;

static void module_init(const cdl_cuda_host *h)
{
    host = *h;
}

int backend_log_has(const char *list, const char *topic)
{
    return host.backend_log_has(list, topic);
}

int boot_put(boot *b, const char *key, const void *val, size_t len)
{
    return host.boot_put(b, key, val, len);
}

int boot_get(boot *b, int rank, const char *key, void *buf, size_t len)
{
    return host.boot_get(b, rank, key, buf, len);
}

double dist_now(void)
{
    return host.dist_now();
}

void dist_note_peer_lost(void)
{
    host.dist_note_peer_lost();
}

kern_sgd_sc kern_sgd_scalars(const cdl_sgd_hparams *hp)
{
    return host.kern_sgd_scalars(hp);
}

kern_adam_sc kern_adam_scalars(const cdl_adam_hparams *hp)
{
    return host.kern_adam_scalars(hp);
}

/* The module's own copy of cdl_build_id.c (not exported: module.map). */
const char *cdl_build_id(void);

const cdl_cuda_module cdl_cuda_module_1 = {
    .abi = CDL_CUDA_MODULE_ABI,
    .version = CDL_VERSION_STRING,
    .build_id = cdl_build_id,
    .params_size = sizeof(cdl_backend_params),
    .ops_size = sizeof(cdl_backend_ops),
    .init = module_init,
    .backend_open = cuda_backend_open,
    .backend_visible = cuda_backend_visible,
#ifdef HAVE_NCCL
    .nccl_prepare = nccl_prepare,
    .coll_nccl_create = coll_nccl_create,
#endif
};
