/* Check wrappers for CUDA runtime, cuBLAS and cuDNN calls.
 *
 * Every failure becomes one line: where (file:line), what (the call as
 * written), the library's error name and text, and what to do about it.
 * The first failure since the last sync() is kept in the backend, because
 * ops return nothing and the caller learns of errors from sync(). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "kernels/cuda/impl.h"

/* __FILE__ is the path given to the compiler; out-of-tree builds prefix it
 * with ../ (or more). */
static const char *short_path(const char *file)
{
    while (!strncmp(file, "../", 3))
        file += 3;
    return file;
}

static void record(cbe *ci, const char *msg)
{
    if (ci && !ci->failed) {
        ci->failed = 1;
        snprintf(ci->err, sizeof ci->err, "%s", msg);
    }
    cdl_error("%s", msg);
}

int cbe_fail(cbe *ci, const char *fmt, ...)
{
    char msg[sizeof ci->err];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    record(ci, msg);
    return -1;
}

const char *cbe_cuda_hint(cudaError_t e)
{
    switch (e) {
    case cudaErrorMemoryAllocation:
        return "the GPU is out of memory: reduce --batch-size or the model, or pack fewer replicas "
               "on this GPU (nvidia-smi shows who holds memory)";
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorStubLibrary:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCompatNotSupportedOnDevice:
        return "no usable GPU or driver: use --device cpu, or run on a GPU node with the NVIDIA "
               "driver loaded (check nvidia-smi and CUDA_VISIBLE_DEVICES)";
    case cudaErrorInvalidDevice:
        return "the device number is not a visible GPU: check CUDA_VISIBLE_DEVICES and the "
               "--gpus request of the job";
    case cudaErrorDevicesUnavailable:
        return "the GPU is busy or in exclusive-process mode: start an MPS daemon to share it, "
               "or ask for a GPU of your own";
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorUnsupportedPtxVersion:
        return "this libcdl has no code for this GPU: reconfigure with NVCC_ARCH_FLAGS="
               "'-gencode arch=compute_XY,code=sm_XY' for its compute capability (nvidia-smi "
               "--query-gpu=compute_cap --format=csv) and rebuild";
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorMisalignedAddress:
    case cudaErrorIllegalInstruction:
        return "a kernel faulted and the GPU context is lost: this is a bug or a wrong buffer "
               "size; rerun with CUDA_LAUNCH_BLOCKING=1 under compute-sanitizer to find the op";
    case cudaErrorLaunchTimeout:
        return "a kernel ran into the display watchdog: use a compute GPU without a display";
    case cudaErrorECCUncorrectable:
    case cudaErrorHardwareStackError:
        return "the GPU reports a hardware error: tell the administrators (nvidia-smi -q) and "
               "resume from the last checkpoint on another node";
    case cudaErrorInvalidValue:
    case cudaErrorInvalidConfiguration:
        return "an argument is out of range (a shape or size too large?): this is a bug in the "
               "caller or in cdl";
    case cudaErrorStreamCaptureUnsupported:
    case cudaErrorStreamCaptureInvalidated:
    case cudaErrorStreamCaptureImplicit:
    case cudaErrorStreamCaptureUnjoined:
    case cudaErrorStreamCaptureIsolation:
    case cudaErrorStreamCaptureWrongThread:
        return "this operation cannot be part of a CUDA graph: keep host synchronisation, "
               "allocation and pageable copies out of captured steps (docs/cuda.md)";
    case cudaErrorNotPermitted:
    case cudaErrorNotSupported:
        return "the GPU or driver does not allow this (MPS client limits, or an old driver)";
    default:
        return "see the CUDA runtime API documentation of this error";
    }
}

/* Errors a faulting kernel leaves behind: the context is lost for good, and
 * the call that reports one is only the first to check, not the culprit. */
static int lost_context(cudaError_t e)
{
    switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorMisalignedAddress:
    case cudaErrorIllegalInstruction:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorAssert:
    case cudaErrorHardwareStackError:
    case cudaErrorECCUncorrectable:
        return 1;
    default:
        return 0;
    }
}

/* "a, b, c" (oldest first): the last ops issued, the suspects of a fault. */
static void recent_ops(const cbe *ci, char *out, size_t len)
{
    unsigned long n = ci->ops < CBE_RECENT ? ci->ops : CBE_RECENT;
    size_t used = 0;
    out[0] = 0;
    for (unsigned long i = ci->ops - n; i < ci->ops && used < len; i++)
        used += (size_t)snprintf(out + used, len - used, "%s%s", i == ci->ops - n ? "" : ", ",
                                 ci->recent[i % CBE_RECENT]);
    if (!n)
        snprintf(out, len, "(none yet)");
}

int cbe_check_cuda(cbe *ci, cudaError_t e, const char *call, const char *file, int line)
{
    if (e == cudaSuccess)
        return 0;
    /* Clears a non-sticky error so the next call does not report it again
     * (a lost context keeps failing anyway). */
    (void)cudaGetLastError();
    if (ci && lost_context(e)) {
        /* Let everything queued finish or fail, so the report is final. */
        (void)cudaDeviceSynchronize();
        char ops[256];
        recent_ops(ci, ops, sizeof ops);
        return cbe_fail(ci, "%s:%d: %s: %s (%s): an asynchronous fault on GPU %d, reported by "
                        "this call but caused by an op queued before it; the last %lu ops issued "
                        "(oldest first): %s. The GPU context is lost: this process cannot use "
                        "the GPU again; resume from the last checkpoint in a new process. To "
                        "find the op: rerun with CUDA_LAUNCH_BLOCKING=1 under compute-sanitizer "
                        "--tool memcheck (tests/gpu/run.sh --diagnose)",
                        short_path(file), line, call, cudaGetErrorString(e), cudaGetErrorName(e),
                        ci->device, ci->ops < CBE_RECENT ? ci->ops : (unsigned long)CBE_RECENT,
                        ops);
    }
    return cbe_fail(ci, "%s:%d: %s: %s (%s): %s", short_path(file), line, call,
                    cudaGetErrorString(e), cudaGetErrorName(e), cbe_cuda_hint(e));
}

static const char *cublas_hint(cublasStatus_t s)
{
    switch (s) {
    case CUBLAS_STATUS_NOT_INITIALIZED:
        return "cuBLAS could not start: check that libcublas matches the CUDA runtime and driver";
    case CUBLAS_STATUS_ALLOC_FAILED:
        return "out of GPU or host memory: reduce --batch-size or the model";
    case CUBLAS_STATUS_INVALID_VALUE:
        return "a size or leading dimension is invalid: this is a bug in the caller or in cdl";
    case CUBLAS_STATUS_ARCH_MISMATCH:
        return "this GPU lacks a feature the call needs (TF32 needs compute capability 8.0): "
               "set CDL_TF32=off";
    case CUBLAS_STATUS_EXECUTION_FAILED:
        return "the GPU kernel failed: rerun with CUDA_LAUNCH_BLOCKING=1 to see the first error";
    case CUBLAS_STATUS_NOT_SUPPORTED:
        return "the operation is not supported with these settings";
    default:
        return "see the cuBLAS documentation of this status";
    }
}

/* A library call that failed because a kernel queued earlier faulted: the
 * runtime's sticky error says so; reported as the fault it is. */
static int fault_behind(cbe *ci, const char *call, const char *file, int line)
{
    cudaError_t e = cudaPeekAtLastError();
    return ci && lost_context(e) ? cbe_check_cuda(ci, e, call, file, line) : 0;
}

int cbe_check_cublas(cbe *ci, cublasStatus_t s, const char *call, const char *file, int line)
{
    if (s == CUBLAS_STATUS_SUCCESS)
        return 0;
    if (fault_behind(ci, call, file, line))
        return -1;
    return cbe_fail(ci, "%s:%d: %s: %s (%s): %s", short_path(file), line, call,
                    cublasGetStatusString(s), cublasGetStatusName(s), cublas_hint(s));
}

static const char *cudnn_hint(cudnnStatus_t s)
{
    switch (CUDNN_STATUS_CATEGORY(s)) {
    case CUDNN_STATUS_NOT_INITIALIZED:
        return "cuDNN could not start: check that all of cuDNN's libraries (libcudnn_*.so.9) are "
               "on the library path and match the CUDA runtime";
    case CUDNN_STATUS_BAD_PARAM:
        return "a shape or argument is invalid for cuDNN: check the layer's sizes (docs/cuda.md)";
    case CUDNN_STATUS_NOT_SUPPORTED:
        return "cuDNN has no algorithm for this shape or setting: try CDL_TF32=off or another "
               "layer configuration";
    case CUDNN_STATUS_INTERNAL_ERROR:
        return "cuDNN failed inside (often out of memory): reduce --batch-size";
    case CUDNN_STATUS_EXECUTION_FAILED:
        return "the GPU kernel failed: rerun with CUDA_LAUNCH_BLOCKING=1 to see the first error";
    default:
        return "see the cuDNN documentation of this status";
    }
}

int cbe_check_cudnn(cbe *ci, cudnnStatus_t s, const char *call, const char *file, int line)
{
    if (s == CUDNN_STATUS_SUCCESS)
        return 0;
    if (fault_behind(ci, call, file, line))
        return -1;
    char detail[512];
    detail[0] = 0;
    cudnnGetLastErrorString(detail, sizeof detail);
    return cbe_fail(ci, "%s:%d: %s: %s%s%s: %s", short_path(file), line, call,
                    cudnnGetErrorString(s), detail[0] ? " - " : "", detail, cudnn_hint(s));
}
