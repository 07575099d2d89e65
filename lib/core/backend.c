/* Choosing a backend by name. */
#include <string.h>

#include <cdl/cdl.h>

cdl_backend *cdl_backend_create(const char *name, int threads)
{
    if (!name || !strcmp(name, "cpu"))
        return cdl_backend_cpu_create(threads);
    if (!strcmp(name, "cuda"))
        return cdl_backend_cuda_create(-1);
    if (!strcmp(name, "auto")) {
        cdl_backend *be = cdl_backend_cuda_create(-1);
        return be ? be : cdl_backend_cpu_create(threads);
    }
    cdl_error("unknown device '%s': use cpu, cuda or auto", name);
    return NULL;
}

void cdl_backend_destroy(cdl_backend *be)
{
    if (be)
        be->ops->destroy(be);
}

#ifndef HAVE_CUDA
cdl_backend *cdl_backend_cuda_create(int device)
{
    (void)device;
    cdl_error("this libcdl was built without CUDA: reconfigure with --with-cuda (CUDA toolkit with cuDNN) or use --device cpu");
    return NULL;
}
#endif
