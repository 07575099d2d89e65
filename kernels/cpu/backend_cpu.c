/* Placeholder until the CPU kernels land. */
#include <cdl/cdl.h>

cdl_backend *cdl_backend_cpu_create(int threads)
{
    (void)threads;
    cdl_error("CPU backend not built yet");
    return NULL;
}
