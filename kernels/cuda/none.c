/* The CUDA backend's constructor in a libcdl built without CUDA. */
#include <cdl/cdl.h>

#include "lib/core/backends.h"

cdl_backend *cuda_backend_open(const cdl_backend_params *params)
{
    (void)params;
    cdl_error("this libcdl was built without CUDA: reconfigure with --with-cuda (CUDA toolkit "
              "with cuDNN) or use --device cpu");
    return NULL;
}

cdl_backend *cuda_backend_open_auto(const cdl_backend_params *params)
{
    return cuda_backend_open(params);
}

int cuda_backend_visible(void)
{
    return 0;
}
