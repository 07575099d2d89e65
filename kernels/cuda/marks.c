/* Step marks, the stream handle and the GPU's identity (cuda_backend.h).
 *
 * A pipelined training loop keeps two steps in flight: it queues step k,
 * then reads step k-1's results. sync() would wait for step k as well and
 * empty the GPU's queue; an event recorded after step k-1 waits for that
 * step only. */
#include <string.h>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/impl.h"
#include "lib/core/backends.h"

static cbe *mark_target(cdl_backend *be, int slot, const char *fn)
{
    if (!cuda_backend_is_cuda(be))
        return NULL;
    cbe *ci = cbe_of(be);
    cbe_enter(ci);
    if (slot < 0 || slot >= CUDA_BACKEND_MARKS) {
        cbe_fail(ci, "%s: slot %d is not 0..%d", fn, slot, CUDA_BACKEND_MARKS - 1);
        return ci;
    }
    if (cbe_graph_busy(ci))
        cbe_fail(ci, "%s during CUDA graph %s: mark steps after cuda_backend_graph_end", fn,
                 cbe_graph_busy(ci));
    return ci;
}

/* Like sync(): the first failure since the last report, then cleared. */
static int report(cbe *ci)
{
    if (!ci->failed)
        return 0;
    ci->failed = 0;
    return cdl_error("%s", ci->err);
}

int cuda_backend_mark(cdl_backend *be, int slot)
{
    cbe *ci = mark_target(be, slot, "cuda_backend_mark");
    if (!ci)
        return 0;
    if (ci->failed)
        return report(ci);
    return CU_CHECK(ci, cudaEventRecord(ci->marks[slot], ci->stream)) ? report(ci) : 0;
}

int cuda_backend_mark_done(cdl_backend *be, int slot)
{
    cbe *ci = mark_target(be, slot, "cuda_backend_mark_done");
    if (!ci)
        return 1;
    if (ci->failed)
        return report(ci);
    cudaError_t e = cudaEventQuery(ci->marks[slot]);
    if (e == cudaErrorNotReady)
        return 0;
    return CU_CHECK(ci, e) ? report(ci) : 1;
}

int cuda_backend_mark_wait(cdl_backend *be, int slot)
{
    cbe *ci = mark_target(be, slot, "cuda_backend_mark_wait");
    if (!ci)
        return 0;
    if (!ci->failed)
        CU_CHECK(ci, cudaEventSynchronize(ci->marks[slot]));
    return report(ci);
}

void *cuda_backend_stream(cdl_backend *be)
{
    return cuda_backend_is_cuda(be) ? (void *)cbe_of(be)->stream : NULL;
}

const char *cuda_backend_gpu_name(cdl_backend *be)
{
    return cuda_backend_is_cuda(be) ? cbe_of(be)->gpu_name : NULL;
}

int cuda_backend_gpu_index(cdl_backend *be)
{
    return cuda_backend_is_cuda(be) ? cbe_of(be)->device : -1;
}

int cuda_backend_gpu_uuid(cdl_backend *be, unsigned char uuid[16])
{
    if (!cuda_backend_is_cuda(be))
        return cdl_error("cuda_backend_gpu_uuid: the backend is %s, not cuda",
                         be ? be->ops->name : "NULL");
    cbe *ci = cbe_of(be);
    memcpy(uuid, ci->uuid, 16);
    return 0;
}

int cuda_backend_visible(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n;
}
