/* Placeholder until the CUDA backend lands. */
#include <cdl/cdl.h>

cdl_backend *cdl_backend_cuda_create(int device)
{
    (void)device;
    cdl_error("the CUDA backend is not implemented yet: use --device cpu");
    return NULL;
}
