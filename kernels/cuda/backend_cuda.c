/* The CUDA backend: creation, the ops table, TF32 settings.
 *
 * One backend = one GPU, one stream on which every op runs in order, a
 * cuBLAS and a cuDNN handle bound to that stream. Ops only enqueue work;
 * errors are kept and reported by sync() (check.c). Memory and copies are
 * in memory.c, convolutions in conv.c, linear layers in linear.c, our own
 * kernels behind ops.c, whole-step graphs in graph.c.
 */
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/impl.h"
#include "lib/core/backends.h"

/* Every entry makes the backend's GPU current on the calling thread, asking
 * the runtime which one is (a host-side lookup, no driver call): a cache of
 * the last one set here would go stale when the program, or another
 * library on the thread (NCCL's setup in lib/dist), selects another GPU,
 * and a kernel queued on this GPU's stream from another GPU fails. */
void cbe_enter(cbe *ci)
{
    int cur = -1;
    if (cudaGetDevice(&cur) != cudaSuccess || cur != ci->device)
        CU_CHECK(ci, cudaSetDevice(ci->device));
}

static void cbe_destroy(cdl_backend *be);

static const cdl_backend_ops cuda_ops = {
    .name = "cuda",
    .alloc = cbe_alloc,
    .free = cbe_free,
    .to_device = cbe_to_device,
    .to_host = cbe_to_host,
    .copy = cbe_copy,
    .fill = cbe_fill,
    .sync = cbe_sync,
    .conv2d_workspace = cbe_conv2d_workspace,
    .linear_workspace = cbe_linear_workspace,
    .conv2d_fwd = cbe_conv2d_fwd,
    .conv2d_bwd = cbe_conv2d_bwd,
    .linear_fwd = cbe_linear_fwd,
    .linear_bwd = cbe_linear_bwd,
    .maxpool_fwd = cbe_maxpool_fwd,
    .maxpool_bwd = cbe_maxpool_bwd,
    .avgpool_fwd = cbe_avgpool_fwd,
    .avgpool_bwd = cbe_avgpool_bwd,
    .relu_fwd = cbe_relu_fwd,
    .relu_bwd = cbe_relu_bwd,
    .dropout_fwd = cbe_dropout_fwd,
    .dropout_bwd = cbe_dropout_bwd,
    .xent_fwd_bwd = cbe_xent_fwd_bwd,
    .sgd_step = cbe_sgd_step,
    .adam_step = cbe_adam_step,
    .sumsq = cbe_sumsq,
    .scale = cbe_scale,
    .sumsq_dev = cbe_sumsq_dev,
    .clip_scale = cbe_clip_scale,
    .hold_updates = cbe_hold_updates,
    .destroy = cbe_destroy,
    /* The ops of residual networks (ops_nn.c). */
    .bn_sum = cbe_bn_sum,
    .bn_sqdev = cbe_bn_sqdev,
    .bn_apply = cbe_bn_apply,
    .bn_running = cbe_bn_running,
    .bn_eval = cbe_bn_eval,
    .bn_bwd_sums = cbe_bn_bwd_sums,
    .bn_bwd_apply = cbe_bn_bwd_apply,
    .bn_fold = cbe_bn_fold,
    .gap_fwd = cbe_gap_fwd,
    .gap_bwd = cbe_gap_bwd,
    .act_fwd = cbe_act_fwd,
    .act_bwd = cbe_act_bwd,
    .add = cbe_add,
    .accumulate = cbe_accumulate,
    .channel_copy = cbe_channel_copy,
    .xent_ls_fwd_bwd = cbe_xent_ls_fwd_bwd,
    .attn_workspace = cbe_attn_workspace,
    .attn_fwd = cbe_attn_fwd,
    .attn_bwd = cbe_attn_bwd,
    .layernorm_fwd = cbe_layernorm_fwd,
    .layernorm_bwd = cbe_layernorm_bwd,
    .embedding_fwd = cbe_embedding_fwd,
    .embedding_bwd = cbe_embedding_bwd,
    .bcast_add_fwd = cbe_bcast_add_fwd,
    .bcast_add_bwd = cbe_bcast_add_bwd,
    /* The asynchronous entries (memory.c, marks.c, graph.c). */
    .host_alloc = cuda_backend_host_alloc,
    .host_free = cuda_backend_host_free,
    .copy_in = cuda_backend_prefetch,
    .copy_in_wait = cuda_backend_prefetch_wait,
    .mark = cuda_backend_mark,
    .mark_done = cuda_backend_mark_done,
    .mark_wait = cuda_backend_mark_wait,
    .graph_begin = cuda_backend_graph_begin,
    .graph_end = cuda_backend_graph_end,
    .graph_reset = cuda_backend_graph_reset,
    .stream = cuda_backend_stream,
    .device_uuid = cuda_backend_gpu_uuid,
    .device_name = cuda_backend_gpu_name,
    .device_index = cuda_backend_gpu_index,
};

int cuda_backend_is_cuda(const cdl_backend *be)
{
    return be && be->ops == &cuda_ops;
}

/* ----------------------------------------------------------------- TF32 */

int cuda_backend_set_tf32(cdl_backend *be, int conv, int matmul)
{
    if (!cuda_backend_is_cuda(be))
        return 0;
    cbe *ci = cbe_of(be);
    cbe_enter(ci);
    ci->tf32_conv = conv != 0;
    ci->tf32_matmul = matmul != 0;
    /* Conv plans are keyed by the setting; a captured graph is not. */
    cuda_backend_graph_reset(be);
    return cbe_apply_matmul_math(ci);
}

int cuda_backend_get_tf32(const cdl_backend *be, int *conv, int *matmul)
{
    if (!cuda_backend_is_cuda(be)) {
        *conv = *matmul = 0;
        return 0;
    }
    const cbe *ci = be->impl;
    *conv = ci->tf32_conv;
    *matmul = ci->tf32_matmul;
    return 0;
}

/* ------------------------------------------------------ create, destroy */

static void release(cbe *ci)
{
    if (ci->stream)
        (void)cudaStreamSynchronize(ci->stream);
    if (ci->copy_stream)
        (void)cudaStreamSynchronize(ci->copy_stream);
    cbe_graph_destroy(ci);
    cbe_conv_cache_clear(ci);
    cbe_bf16_clear(ci);
    cbe_lt_clear(ci);
    cbe_blocks_free(ci);
    if (ci->dnn)
        (void)cudnnDestroy(ci->dnn);
    if (ci->blas)
        (void)cublasDestroy(ci->blas);
    if (ci->blas_ws)
        (void)cudaFree(ci->blas_ws);
    if (ci->sumsq_dev)
        (void)cudaFree(ci->sumsq_dev);
    if (ci->sumsq_host)
        (void)cudaFreeHost(ci->sumsq_host);
    if (ci->hold_dev)
        (void)cudaFree(ci->hold_dev);
    if (ci->bias_partials)
        (void)cudaFree(ci->bias_partials);
    if (ci->chan_partials)
        (void)cudaFree(ci->chan_partials);
    if (ci->emb_order)
        (void)cudaFree(ci->emb_order);
    if (ci->copy_done)
        (void)cudaEventDestroy(ci->copy_done);
    for (int i = 0; i < CUDA_BACKEND_MARKS; i++)
        if (ci->marks[i])
            (void)cudaEventDestroy(ci->marks[i]);
    if (ci->copy_stream)
        (void)cudaStreamDestroy(ci->copy_stream);
    if (ci->stream)
        (void)cudaStreamDestroy(ci->stream);
    (void)cudaGetLastError();
}

static void cbe_destroy(cdl_backend *be)
{
    cbe *ci = cbe_of(be);
    cbe_enter(ci);
    release(ci);
    cdl_free(ci);
    cdl_free(be);
}

/* Handles, streams and the small fixed buffers. */
static int setup(cbe *ci, int lt)
{
    struct cudaDeviceProp prop;
    if (CU_CHECK(ci, cudaSetDevice(ci->device)) ||
        CU_CHECK(ci, cudaGetDeviceProperties(&prop, ci->device)))
        return -1;
    /* Replicas packed on one GPU (MPS) would each spin a host core while
     * they wait for the GPU: they block instead (device and events). */
    unsigned int ev_flags = cudaEventDisableTiming;
    if (ci->packed > 1) {
        if (CU_CHECK(ci, cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync)))
            return -1;
        ev_flags |= cudaEventBlockingSync;
    }
    snprintf(ci->gpu_name, sizeof ci->gpu_name, "%s", prop.name);
    ci->cc_major = prop.major;
    ci->cc_minor = prop.minor;
    memcpy(ci->uuid, prop.uuid.bytes, sizeof ci->uuid);
    if (CU_CHECK(ci, cudaStreamCreateWithFlags(&ci->stream, cudaStreamNonBlocking)) ||
        CU_CHECK(ci, cudaStreamCreateWithFlags(&ci->copy_stream, cudaStreamNonBlocking)) ||
        CU_CHECK(ci, cudaEventCreateWithFlags(&ci->copy_done, ev_flags)) ||
        CU_CHECK(ci, cudaMalloc(&ci->blas_ws, BLAS_WS_BYTES)) ||
        CU_CHECK(ci, cudaMalloc((void **)&ci->sumsq_dev,
                                (CUK_SUMSQ_BLOCKS + 1) * sizeof(double))) ||
        CU_CHECK(ci, cudaHostAlloc((void **)&ci->sumsq_host, sizeof(double),
                                   cudaHostAllocPortable)) ||
        CU_CHECK(ci, cudaMalloc((void **)&ci->hold_dev, sizeof(int))) ||
        CU_CHECK(ci, cudaMemsetAsync(ci->hold_dev, 0, sizeof(int), ci->stream)) ||
        CU_CHECK(ci, cudaMalloc((void **)&ci->bias_partials,
                                CBE_BIAS_PARTIALS * sizeof(float))) ||
        CU_CHECK(ci, cudaMalloc((void **)&ci->chan_partials,
                                CBE_CHAN_PARTIALS * sizeof(double))))
        return -1;
    for (int i = 0; i < CUDA_BACKEND_MARKS; i++)
        if (CU_CHECK(ci, cudaEventCreateWithFlags(&ci->marks[i], ev_flags)))
            return -1;
    /* cublasSetStream resets the workspace: set the stream first. */
    if (CUBLAS_CHECK(ci, cublasCreate(&ci->blas)) ||
        CUBLAS_CHECK(ci, cublasSetStream(ci->blas, ci->stream)) ||
        CUBLAS_CHECK(ci, cublasSetWorkspace(ci->blas, ci->blas_ws, BLAS_WS_BYTES)) ||
        cbe_apply_matmul_math(ci))
        return -1;
    cbe_lt_open(ci, lt);
    if (CUDNN_CHECK(ci, cudnnCreate(&ci->dnn)) || CUDNN_CHECK(ci, cudnnSetStream(ci->dnn, ci->stream)))
        return -1;
    /* One tiny kernel now: a GPU this build has no code for fails here,
     * with a hint, rather than in the middle of a step. */
    cuk_val_sc one = {1.0f};
    if (CU_CHECK(ci, cuk_fill(ci->stream, (float *)(void *)ci->sumsq_dev, 2, one, NULL)) ||
        CU_CHECK(ci, cudaStreamSynchronize(ci->stream)))
        return -1;
    if (ci->log_cuda) {
        unsigned int f = 0;
        (void)cudaGetDeviceFlags(&f);
        fprintf(stderr, "cdl: cuda: GPU %d (%s, compute capability %d.%d): host waits %s "
                "(%d replica%s per GPU)\n", ci->device, ci->gpu_name, ci->cc_major, ci->cc_minor,
                (f & cudaDeviceScheduleMask) == cudaDeviceScheduleBlockingSync ? "block"
                : (f & cudaDeviceScheduleMask) == cudaDeviceScheduleYield ? "yield" : "spin or auto",
                ci->packed, ci->packed == 1 ? "" : "s");
    }
    return 0;
}

/* TF32 defaults to PyTorch's: on for convolutions, off for matmuls. */
cdl_backend *cuda_backend_open(const cdl_backend_params *params)
{
    int device = params->device;
    int tf32_conv = params->tf32_conv < 0 ? 1 : params->tf32_conv != 0;
    int tf32_matmul = params->tf32_matmul < 0 ? 0 : params->tf32_matmul != 0;

    /* MIG slices: not supported deliberately (no tests, and NCCL and MPS
     * packing assume whole GPUs): refused with what to do. */
    const char *vis_env = getenv("CUDA_VISIBLE_DEVICES");
    if (vis_env && strstr(vis_env, "MIG-")) {
        cdl_error("CUDA_VISIBLE_DEVICES=%s names a MIG slice: the CUDA backend does not support MIG "
                  "instances; ask for whole GPUs (e.g. srun --gpus=1 on a partition without MIG) "
                  "or use --device cpu", vis_env);
        return NULL;
    }
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count <= 0) {
        const char *vis = getenv("CUDA_VISIBLE_DEVICES");
        (void)cudaGetLastError();
        cdl_error("no CUDA GPU is visible (cudaGetDeviceCount: %s; CUDA_VISIBLE_DEVICES=%s): use "
                  "--device cpu, or run on a node with an NVIDIA GPU and its driver (e.g. srun "
                  "--gpus=1; check nvidia-smi)",
                  e != cudaSuccess ? cudaGetErrorString(e) : "0 devices", vis ? vis : "(unset)");
        return NULL;
    }
    if (device < -1 || device >= count) {
        cdl_error("CUDA device %d does not exist: %d GPU%s visible (0..%d; -1 = the first)", device,
                  count, count == 1 ? " is" : "s are", count - 1);
        return NULL;
    }

    /* CDL_CUBLASLT=0 (or off): linear layers' bias add and bias gradient
     * run as kernels of their own beside cuBLAS products, not in cuBLASLt
     * epilogues (linear.c): for A/B timing. */
    const char *lt_env = getenv("CDL_CUBLASLT");
    int lt = 1;
    if (lt_env && *lt_env) {
        if (!strcmp(lt_env, "0") || !strcmp(lt_env, "off"))
            lt = 0;
        else if (strcmp(lt_env, "1") && strcmp(lt_env, "on")) {
            cdl_error("CDL_CUBLASLT '%.80s': use 1 or on (the default: bias epilogues in "
                      "cuBLASLt), 0 or off (bias kernels of their own)", lt_env);
            return NULL;
        }
    }

    /* CDL_ATTN_KERNEL: the bf16 attention kernels (ops_attn.c). wmma (the
     * default) or mma: attn_bf16.cu's mma.sync kernels, for A/B timing until
     * a GPU has measured them (docs/cuda.md, "bf16 attention"). */
    const char *attn_env = getenv("CDL_ATTN_KERNEL");
    int attn_mma = 0;
    if (attn_env && *attn_env) {
        if (!strcmp(attn_env, "mma"))
            attn_mma = 1;
        else if (strcmp(attn_env, "wmma")) {
            cdl_error("CDL_ATTN_KERNEL '%.80s': use wmma (the default: bf16 attention on "
                      "nvcuda::wmma) or mma (the mma.sync kernels)", attn_env);
            return NULL;
        }
    }

    cdl_backend *be = cdl_calloc(1, sizeof *be);
    cbe *ci = cdl_calloc(1, sizeof *ci);
    if (!be || !ci) {
        cdl_free(be);
        cdl_free(ci);
        return NULL;
    }
    ci->device = device < 0 ? 0 : device;
    ci->tf32_conv = tf32_conv;
    ci->tf32_matmul = tf32_matmul;
    ci->precision = params->precision;
    ci->attn_mma = attn_mma;
    ci->log_cudnn = backend_log_has(params->log, "cudnn");
    ci->log_cuda = backend_log_has(params->log, "cuda");
    /* The launcher's contract says how many replicas share this GPU. */
    ci->packed = params->replicas_per_gpu > 1 ? params->replicas_per_gpu : 1;
    if (setup(ci, lt) != 0) {
        char msg[sizeof ci->err];
        snprintf(msg, sizeof msg, "%s", ci->err);
        release(ci);
        cdl_free(ci);
        cdl_free(be);
        cdl_error("cannot start the CUDA backend on GPU %d: %s", device < 0 ? 0 : device, msg);
        return NULL;
    }
    ci->failed = 0;
    be->ops = &cuda_ops;
    be->host_memory = 0;
    be->threads = 1;
    be->impl = ci;
    return be;
}

cdl_backend *cuda_backend_open_auto(const cdl_backend_params *params)
{
    return cuda_backend_open(params);
}
