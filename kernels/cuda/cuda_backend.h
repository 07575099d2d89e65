/* The CUDA backend's asynchronous entries (page-locked host buffers,
 * prefetching on a copy stream, step marks, whole-step CUDA graphs, the
 * stream, the GPU's identity) and its TF32 switch, by name. libcdl reaches
 * the entries only through cdl_backend_ops (lib/cdl/backend.h): nothing
 * under lib/ or cli/ includes this header; kernels/cuda and the CUDA
 * backend's own tests do. Built only with CUDA. Internal: not exported.
 *
 * Every function takes any backend: on a non-CUDA backend
 * cuda_backend_is_cuda() is 0 and the others fail with a cdl_error
 * (set_tf32 and graph_begin/end are no-ops there, see below).
 */
#ifndef CDL_KERNELS_CUDA_CUDA_BACKEND_H
#define CDL_KERNELS_CUDA_CUDA_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include <cdl/backend.h>

/* 1 when be was made by cdl_backend_cuda_create. */
int cuda_backend_is_cuda(const cdl_backend *be);

/* TF32 tensor-core math. conv: cuDNN convolutions; matmul: cuBLAS linear
 * layers. Set at creation (cdl_backend_params); these change it later (the
 * op tests compare both). Return 0; no-ops returning 0 on other backends. */
int cuda_backend_set_tf32(cdl_backend *be, int conv, int matmul);
int cuda_backend_get_tf32(const cdl_backend *be, int *conv, int *matmul);

/* Page-locked (pinned) host memory: to_device/to_host with it are fully
 * asynchronous (see memory.c); such buffers must stay untouched until
 * sync(). register/unregister pin existing memory (e.g. a loader's batch
 * buffers; page-aligned is best). */
void *cuda_backend_host_alloc(cdl_backend *be, size_t bytes);
void cuda_backend_host_free(cdl_backend *be, void *p);
int cuda_backend_host_register(cdl_backend *be, void *p, size_t bytes);
int cuda_backend_host_unregister(cdl_backend *be, void *p);

/* Input prefetch on a second stream, so the next batch's copy overlaps this
 * step's compute. prefetch enqueues dst_dev <- src_pinned on the copy
 * stream; prefetch_wait makes the ops issued after it wait for every
 * prefetch issued before it. The caller guarantees that no queued op still
 * reads dst_dev (double-buffer the input: prefetch into the buffer the
 * previous, already synced step used). Not inside graph steps. */
int cuda_backend_prefetch(cdl_backend *be, void *dst_dev, const void *src_pinned, size_t bytes);
int cuda_backend_prefetch_wait(cdl_backend *be);

/* Whole-step CUDA graphs. Between graph_begin and graph_end the caller
 * issues one training step (copies in, forward, loss, backward, update,
 * copies out). The first time for a key the step is captured, instantiated
 * and launched; later steps with that key only check that the same ops
 * arrive with the same buffers, collect their per-step scalars (learning
 * rate, Adam's step, dropout seed, ...) and launch the graph in one call.
 * The key names the step's shape (e.g. the batch size): a step with another
 * key is captured anew (the old graph is dropped).
 *
 * Rules inside a graph step: no alloc/free, no sync (call graph_end first,
 * then sync), no sumsq, and host buffers of to_device/to_host must be
 * page-locked and the same every step. A step that diverges from its
 * capture is an error reported by graph_end (and the next begin captures
 * again). Run one eager step first (cuDNN and cuBLAS settle their plans).
 *
 * graph_begin returns 1 when it will replay, 0 when it captures, -1 on
 * error; graph_end returns 0 or -1. On other backends both return 0 and do
 * nothing, so a loop can call them unconditionally. */
int cuda_backend_graph_begin(cdl_backend *be, uint64_t key);
int cuda_backend_graph_end(cdl_backend *be);
/* Drops the captured graph (e.g. after changing TF32). */
void cuda_backend_graph_reset(cdl_backend *be);

/* Step marks: events on the backend's stream, so a pipelined loop can wait
 * for one earlier step while later ones are already queued (a sync would
 * wait for all of them). mark records slot (0..CUDA_BACKEND_MARKS-1) after
 * everything enqueued so far; mark_done says 1 when that work has finished,
 * 0 when not yet; mark_wait blocks until it has. done and wait report the
 * first failure since the last sync like sync() does (and clear it). Not
 * inside graph steps. Other backends: no-ops that return 0 (done: 1), as
 * their ops finish before they return. */
#define CUDA_BACKEND_MARKS CDL_BACKEND_MARKS
int cuda_backend_mark(cdl_backend *be, int slot);
int cuda_backend_mark_done(cdl_backend *be, int slot);
int cuda_backend_mark_wait(cdl_backend *be, int slot);

/* The backend's stream as a cudaStream_t (void * keeps CUDA headers out of
 * callers), for libraries that enqueue work in order with the ops (NCCL).
 * NULL on other backends. */
void *cuda_backend_stream(cdl_backend *be);

/* The identity of the backend's GPU (cudaDeviceProp.uuid, the same in every
 * process whatever CUDA_VISIBLE_DEVICES says), to find ranks sharing a GPU.
 * Returns 0; -1 with cdl_error on other backends. */
int cuda_backend_gpu_uuid(cdl_backend *be, unsigned char uuid[16]);
/* The GPU's name from cudaGetDeviceProperties (device_name). */
const char *cuda_backend_gpu_name(cdl_backend *be);
/* The backend's GPU as a visible device index, what cudaSetDevice takes
 * (device_index); -1 on other backends. */
int cuda_backend_gpu_index(cdl_backend *be);

#endif
