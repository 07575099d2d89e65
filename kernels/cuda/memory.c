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
#include <stdint.h>
#include <stdlib.h>
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

/* ------------------------------------------------------ the block table */

/* Each live block of alloc(), sorted by address, so an op handed a pointer
 * into one (a conv workspace) knows how much room it really has. Models
 * allocate a handful of blocks once: a sorted array is enough. */
struct cbe_block {
    uintptr_t base;
    size_t bytes;
};

/* The index of the first block whose base is above a. */
static size_t blocks_above(const cbe *ci, uintptr_t a)
{
    size_t lo = 0, hi = ci->nblocks;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (ci->blocks[mid].base <= a)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

size_t cbe_room(const cbe *ci, const void *p)
{
    uintptr_t a = (uintptr_t)p;
    size_t i = blocks_above(ci, a);
    if (i == 0)
        return 0;
    const struct cbe_block *b = &ci->blocks[i - 1];
    return a - b->base < b->bytes ? b->bytes - (a - b->base) : 0;
}

static int blocks_add(cbe *ci, void *p, size_t bytes)
{
    if (ci->nblocks == ci->cap_blocks) {
        size_t cap = ci->cap_blocks ? 2 * ci->cap_blocks : 64;
        struct cbe_block *nb = realloc(ci->blocks, cap * sizeof *nb);
        if (!nb)
            return -1;
        ci->blocks = nb;
        ci->cap_blocks = cap;
    }
    uintptr_t a = (uintptr_t)p;
    size_t i = blocks_above(ci, a);
    memmove(&ci->blocks[i + 1], &ci->blocks[i], (ci->nblocks - i) * sizeof *ci->blocks);
    ci->blocks[i] = (struct cbe_block){a, bytes};
    ci->nblocks++;
    return 0;
}

static void blocks_remove(cbe *ci, const void *p)
{
    size_t i = blocks_above(ci, (uintptr_t)p);
    if (i == 0 || ci->blocks[i - 1].base != (uintptr_t)p)
        return;
    i--;
    memmove(&ci->blocks[i], &ci->blocks[i + 1], (ci->nblocks - i - 1) * sizeof *ci->blocks);
    ci->nblocks--;
}

void cbe_blocks_free(cbe *ci)
{
    free(ci->blocks);
    ci->blocks = NULL;
    ci->nblocks = ci->cap_blocks = 0;
}

/* ------------------------------------------------------------- the ops */

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
    if (blocks_add(ci, p, b)) {
        (void)cudaFree(p);
        cdl_error("cannot allocate %zu bytes on GPU %d: out of host memory for its record",
                  bytes, ci->device);
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
    size_t bytes = cbe_room(ci, p);
    if (CU_CHECK(ci, cudaFree(p)) == 0) {
        blocks_remove(ci, p);
        cbe_bf16_forget(ci, p, bytes);   /* bf16 copies of weights that lived in p */
    }
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
