/* Device memory and copies of the CUDA backend.
 *
 * Memory is plain cudaMalloc (no managed memory): models allocate every
 * buffer once, so an arena would only hide out-of-memory errors. All copies
 * run on the backend's stream, in order with the ops.
 *
 * Host memory comes in two kinds, told apart per call:
 *  - pageable (malloc, the stack): the copy completes before the call
 *    returns, so the caller may reuse or read the buffer at once;
 *  - page-locked (cuda_backend_host_alloc / _register): the copy is truly
 *    asynchronous and overlaps whatever runs on the host; the buffer must
 *    stay untouched until sync().
 */
#include <string.h>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/impl.h"

int cbe_is_pinned(const void *p)
{
    struct cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return a.type == cudaMemoryTypeHost;
}

static int refuse_in_graph(cbe *ci, const char *what)
{
    const char *mode = cbe_graph_busy(ci);
    if (!mode)
        return 0;
    return cbe_fail(ci, "CUDA backend: %s during CUDA graph %s: allocate and free buffers outside "
                    "captured steps (cuda_backend_graph_begin/end)", what, mode);
}

void *cbe_alloc(cdl_backend *be, size_t bytes)
{
    cbe *ci = cbe_of(be);
    cbe_enter(ci);
    if (refuse_in_graph(ci, "alloc"))
        return NULL;
    size_t b = bytes ? bytes : 1;
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, b);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        size_t avail = 0, total = 0;
        (void)cudaMemGetInfo(&avail, &total);
        (void)cudaGetLastError();
        cdl_error("cannot allocate %zu bytes on GPU %d (%s: %zu of %zu MiB free): %s: %s", bytes,
                  ci->device, ci->gpu_name, avail >> 20, total >> 20, cudaGetErrorString(e),
                  cbe_cuda_hint(e));
        return NULL;
    }
    /* Zeroed, and finished before any other stream (prefetch) may use it. */
    if (CU_CHECK(ci, cudaMemsetAsync(p, 0, b, ci->stream)) ||
        CU_CHECK(ci, cudaStreamSynchronize(ci->stream))) {
        (void)cudaFree(p);
        return NULL;
    }
    return p;
}

void cbe_free(cdl_backend *be, void *p)
{
    cbe *ci = cbe_of(be);
    if (!p)
        return;
    cbe_enter(ci);
    if (refuse_in_graph(ci, "free"))
        return;
    /* cudaFree waits for the device: no queued op still uses p. */
    CU_CHECK(ci, cudaFree(p));
}

void cbe_to_device(cdl_backend *be, void *dst, const void *src, size_t bytes)
{
    cbe *ci = cbe_of(be);
    if (!bytes)
        return;
    cbe_enter(ci);
    int pinned = cbe_is_pinned(src);
    const uint64_t a[] = {sigp(dst), sigp(src), bytes};
    const void *dyn;
    if (cbe_graph_busy(ci) && !pinned) {
        cbe_fail(ci, "CUDA backend: to_device from pageable memory %p during CUDA graph %s: "
                 "copy from a buffer of cuda_backend_host_alloc instead", src,
                 cbe_graph_busy(ci));
        return;
    }
    if (cbe_graph_op(ci, "to_device", cbe_sig(OPSIG_TO_DEVICE, a, 3), NULL, 0, &dyn))
        return;
    if (CU_CHECK(ci, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, ci->stream)))
        return;
    if (!pinned)
        CU_CHECK(ci, cudaStreamSynchronize(ci->stream));
}

void cbe_to_host(cdl_backend *be, void *dst, const void *src, size_t bytes)
{
    cbe *ci = cbe_of(be);
    if (!bytes)
        return;
    cbe_enter(ci);
    int pinned = cbe_is_pinned(dst);
    const uint64_t a[] = {sigp(dst), sigp(src), bytes};
    const void *dyn;
    if (cbe_graph_busy(ci) && !pinned) {
        cbe_fail(ci, "CUDA backend: to_host into pageable memory %p during CUDA graph %s: copy "
                 "into a buffer of cuda_backend_host_alloc instead", dst, cbe_graph_busy(ci));
        return;
    }
    if (cbe_graph_op(ci, "to_host", cbe_sig(OPSIG_TO_HOST, a, 3), NULL, 0, &dyn))
        return;
    if (CU_CHECK(ci, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, ci->stream)))
        return;
    if (!pinned)
        CU_CHECK(ci, cudaStreamSynchronize(ci->stream));
}

void cbe_copy(cdl_backend *be, void *dst, const void *src, size_t bytes)
{
    cbe *ci = cbe_of(be);
    if (!bytes || dst == src)
        return;
    cbe_enter(ci);
    const uint64_t a[] = {sigp(dst), sigp(src), bytes};
    const void *dyn;
    if (cbe_graph_op(ci, "copy", cbe_sig(OPSIG_COPY, a, 3), NULL, 0, &dyn))
        return;
    CU_CHECK(ci, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, ci->stream));
}

int cbe_sync(cdl_backend *be)
{
    cbe *ci = cbe_of(be);
    cbe_enter(ci);
    if (cbe_graph_busy(ci)) {
        cbe_fail(ci, "CUDA backend: sync() inside a CUDA graph %s: call cuda_backend_graph_end() "
                 "first", cbe_graph_busy(ci));
    } else {
        CU_CHECK(ci, cudaStreamSynchronize(ci->stream));
    }
    if (!ci->failed)
        return 0;
    ci->failed = 0;
    return cdl_error("%s", ci->err);
}

/* ------------------------------------------------- page-locked host memory */

void *cuda_backend_host_alloc(cdl_backend *be, size_t bytes)
{
    if (!cuda_backend_is_cuda(be)) {
        cdl_error("cuda_backend_host_alloc: the backend is %s, not cuda: use cdl_malloc",
                  be ? be->ops->name : "NULL");
        return NULL;
    }
    cbe *ci = cbe_of(be);
    cbe_enter(ci);
    void *p = NULL;
    cudaError_t e = cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocPortable);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        cdl_error("cannot allocate %zu bytes of page-locked host memory: %s: lower the "
                  "memlock limit use (ulimit -l) or --batch-size", bytes, cudaGetErrorString(e));
        return NULL;
    }
    memset(p, 0, bytes);
    return p;
}

void cuda_backend_host_free(cdl_backend *be, void *p)
{
    if (!p || !cuda_backend_is_cuda(be))
        return;
    cbe *ci = cbe_of(be);
    cbe_enter(ci);
    CU_CHECK(ci, cudaFreeHost(p));
}

int cuda_backend_host_register(cdl_backend *be, void *p, size_t bytes)
{
    if (!cuda_backend_is_cuda(be))
        return cdl_error("cuda_backend_host_register: the backend is %s, not cuda",
                         be ? be->ops->name : "NULL");
    cbe *ci = cbe_of(be);
    cbe_enter(ci);
    return CU_CHECK(ci, cudaHostRegister(p, bytes, cudaHostRegisterPortable));
}

int cuda_backend_host_unregister(cdl_backend *be, void *p)
{
    if (!cuda_backend_is_cuda(be))
        return cdl_error("cuda_backend_host_unregister: the backend is %s, not cuda",
                         be ? be->ops->name : "NULL");
    cbe *ci = cbe_of(be);
    cbe_enter(ci);
    return CU_CHECK(ci, cudaHostUnregister(p));
}

/* ------------------------------------------------------------- prefetch */

int cuda_backend_prefetch(cdl_backend *be, void *dst_dev, const void *src_pinned, size_t bytes)
{
    if (!cuda_backend_is_cuda(be))
        return cdl_error("cuda_backend_prefetch: the backend is %s, not cuda",
                         be ? be->ops->name : "NULL");
    cbe *ci = cbe_of(be);
    cbe_enter(ci);
    if (cbe_graph_busy(ci))
        return cbe_fail(ci, "cuda_backend_prefetch during CUDA graph %s: copy inside the step "
                        "with to_device instead", cbe_graph_busy(ci));
    if (!cbe_is_pinned(src_pinned))
        return cbe_fail(ci, "cuda_backend_prefetch: source %p is pageable host memory, which "
                        "cannot be copied asynchronously: allocate it with "
                        "cuda_backend_host_alloc or register it", src_pinned);
    if (CU_CHECK(ci, cudaMemcpyAsync(dst_dev, src_pinned, bytes, cudaMemcpyHostToDevice,
                                     ci->copy_stream)) ||
        CU_CHECK(ci, cudaEventRecord(ci->copy_done, ci->copy_stream)))
        return -1;
    return 0;
}

int cuda_backend_prefetch_wait(cdl_backend *be)
{
    if (!cuda_backend_is_cuda(be))
        return cdl_error("cuda_backend_prefetch_wait: the backend is %s, not cuda",
                         be ? be->ops->name : "NULL");
    cbe *ci = cbe_of(be);
    cbe_enter(ci);
    if (cbe_graph_busy(ci))
        return cbe_fail(ci, "cuda_backend_prefetch_wait during CUDA graph %s",
                        cbe_graph_busy(ci));
    return CU_CHECK(ci, cudaStreamWaitEvent(ci->stream, ci->copy_done, 0));
}
