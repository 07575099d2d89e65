/* Parsing of the TF32 switch (CDL_TF32, --tf32), shared by builds with and
 * without CUDA so the option is checked the same way everywhere. */
#include <strings.h>

#include <cdl/cdl.h>

#include "kernels/cuda/cuda_backend.h"

int cuda_backend_parse_tf32(const char *s, const char *what, int *conv, int *matmul)
{
    if (s && !strcasecmp(s, "on")) {
        *conv = 1;
        *matmul = 1;
    } else if (s && !strcasecmp(s, "off")) {
        *conv = 0;
        *matmul = 0;
    } else if (s && !strcasecmp(s, "default")) {
        *conv = 1;
        *matmul = 0;
    } else {
        return cdl_error("%s '%s': use on (TF32 for convolutions and matrix products), off "
                         "(strict FP32) or default (TF32 for convolutions only, like PyTorch)",
                         what, s ? s : "(null)");
    }
    return 0;
}
