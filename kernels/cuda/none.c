/* cuda_backend.h for a libcdl built without CUDA: there is never a CUDA
 * backend, so callers need no #ifdef. (cdl_backend_cuda_create itself says
 * so in lib/core/backend.c.) */
#include "kernels/cuda/cuda_backend.h"

#include <string.h>

#include <cdl/cdl.h>

static int no_cuda(const char *fn)
{
    return cdl_error("%s: this libcdl was built without CUDA: reconfigure with --with-cuda "
                     "(CUDA toolkit with cuDNN) or use --device cpu", fn);
}

int cuda_backend_is_cuda(const cdl_backend *be)
{
    (void)be;
    return 0;
}

int cuda_backend_set_tf32(cdl_backend *be, int conv, int matmul)
{
    (void)be;
    (void)conv;
    (void)matmul;
    return 0;
}

int cuda_backend_get_tf32(const cdl_backend *be, int *conv, int *matmul)
{
    (void)be;
    *conv = *matmul = 0;
    return 0;
}

void *cuda_backend_host_alloc(cdl_backend *be, size_t bytes)
{
    (void)be;
    (void)bytes;
    no_cuda("cuda_backend_host_alloc");
    return NULL;
}

void cuda_backend_host_free(cdl_backend *be, void *p)
{
    (void)be;
    (void)p;
}

int cuda_backend_host_register(cdl_backend *be, void *p, size_t bytes)
{
    (void)be;
    (void)p;
    (void)bytes;
    return no_cuda("cuda_backend_host_register");
}

int cuda_backend_host_unregister(cdl_backend *be, void *p)
{
    (void)be;
    (void)p;
    return no_cuda("cuda_backend_host_unregister");
}

int cuda_backend_prefetch(cdl_backend *be, void *dst_dev, const void *src_pinned, size_t bytes)
{
    (void)be;
    (void)dst_dev;
    (void)src_pinned;
    (void)bytes;
    return no_cuda("cuda_backend_prefetch");
}

int cuda_backend_prefetch_wait(cdl_backend *be)
{
    (void)be;
    return no_cuda("cuda_backend_prefetch_wait");
}

int cuda_backend_graph_begin(cdl_backend *be, uint64_t key)
{
    (void)be;
    (void)key;
    return 0;
}

int cuda_backend_graph_end(cdl_backend *be)
{
    (void)be;
    return 0;
}

void cuda_backend_graph_reset(cdl_backend *be)
{
    (void)be;
}

int cuda_backend_mark(cdl_backend *be, int slot)
{
    (void)be;
    (void)slot;
    return 0;
}

int cuda_backend_mark_done(cdl_backend *be, int slot)
{
    (void)be;
    (void)slot;
    return 1;
}

int cuda_backend_mark_wait(cdl_backend *be, int slot)
{
    (void)be;
    (void)slot;
    return 0;
}

void *cuda_backend_stream(cdl_backend *be)
{
    (void)be;
    return NULL;
}

int cuda_backend_gpu_uuid(cdl_backend *be, unsigned char uuid[16])
{
    (void)be;
    memset(uuid, 0, 16);
    return no_cuda("cuda_backend_gpu_uuid");
}

int cuda_backend_device_count(void)
{
    return 0;
}
