/* cuBLAS of the fake GPU: handles and SGEMM, from cuBLAS's documented
 * semantics (column-major storage, op(A) is m x k, op(B) k x n, C m x n;
 * alpha and beta read from host memory when the call is made; beta == 0
 * means C is not read). Arguments are checked as cuBLAS checks them
 * (CUBLAS_STATUS_INVALID_VALUE for a negative size or a leading dimension
 * too small), and every matrix must lie inside one device allocation. The
 * product runs on the handle's stream. Under CUBLAS_TF32_TENSOR_OP_MATH
 * the operands are rounded to TF32 first, as tensor cores do.
 *
 * cublasGemmEx: fp32 or bf16 (CUDA_R_16BF) A and B, fp32 C, compute type
 * CUBLAS_COMPUTE_32F (or ..._FAST_16BF, which rounds fp32 inputs to bf16
 * first): bf16 inputs are exact in fp32 and so are their products (8 + 8
 * significant bits), which are added in fp32 in order, as the tensor
 * cores' fp32 accumulation does (in some order of their own). Other type
 * combinations are CUBLAS_STATUS_NOT_SUPPORTED here (cdl uses none). */
#include "fake.h"

#include <cublas_v2.h>

#include <cstdio>
#include <cstring>
#include <set>

using namespace fakegpu;
#define LOCKED std::lock_guard<std::recursive_mutex> guard_(fakegpu::lock())

struct cublasContext {
    cudaStream_t stream = nullptr;
    void *workspace = nullptr;
    size_t workspace_bytes = 0;
    cublasMath_t math = CUBLAS_DEFAULT_MATH;
};

static std::set<cublasContext *> handles;

static bool live(cublasHandle_t h)
{
    return handles.count(h) != 0;
}

cublasStatus_t cublasCreate_v2(cublasHandle_t *h)
{
    LOCKED;
    if (device_count() == 0)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    *h = new cublasContext;
    handles.insert(*h);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t h)
{
    LOCKED;
    if (!live(h))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    handles.erase(h);
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t h, cudaStream_t s)
{
    LOCKED;
    if (!live(h))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!stream_ok(s)) {
        complain("cublasSetStream: stream %p does not exist", (void *)s);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    h->stream = s;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t h, void *ws, size_t bytes)
{
    LOCKED;
    if (!live(h))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    char why[160];
    if (bytes && !device_range(ws, bytes, why, sizeof why)) {
        complain("cublasSetWorkspace: %s", why);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (bytes && ((uintptr_t)ws % 256) != 0) {
        complain("cublasSetWorkspace: %p is not 256-byte aligned", ws);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    h->workspace = ws;
    h->workspace_bytes = bytes;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode)
{
    LOCKED;
    if (!live(h))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    h->math = mode;
    return CUBLAS_STATUS_SUCCESS;
}

static const struct {
    cublasStatus_t s;
    const char *name, *text;
} status_table[] = {
    {CUBLAS_STATUS_SUCCESS, "CUBLAS_STATUS_SUCCESS", "the operation completed successfully"},
    {CUBLAS_STATUS_NOT_INITIALIZED, "CUBLAS_STATUS_NOT_INITIALIZED", "the library was not initialized"},
    {CUBLAS_STATUS_ALLOC_FAILED, "CUBLAS_STATUS_ALLOC_FAILED", "the resource allocation failed"},
    {CUBLAS_STATUS_INVALID_VALUE, "CUBLAS_STATUS_INVALID_VALUE", "an invalid numeric value was used as an argument"},
    {CUBLAS_STATUS_EXECUTION_FAILED, "CUBLAS_STATUS_EXECUTION_FAILED", "the GPU program failed to execute"},
    {CUBLAS_STATUS_NOT_SUPPORTED, "CUBLAS_STATUS_NOT_SUPPORTED", "the functionality requested is not supported"},
};

const char *cublasGetStatusName(cublasStatus_t s)
{
    for (const auto &t : status_table)
        if (t.s == s)
            return t.name;
    return "CUBLAS_STATUS_UNKNOWN";
}

const char *cublasGetStatusString(cublasStatus_t s)
{
    for (const auto &t : status_table)
        if (t.s == s)
            return t.text;
    return "unknown error";
}

/* Checks that a rows x cols column-major matrix of elem-byte values with
 * leading dimension ld lies in device memory. */
static bool matrix_ok(const char *name, const void *p, int rows, int cols, int ld,
                      size_t elem = sizeof(float), const char *call = "cublasSgemm")
{
    if (rows == 0 || cols == 0)
        return true;
    size_t bytes = ((size_t)(cols - 1) * ld + rows) * elem;
    char why[160];
    if (device_range(p, bytes, why, sizeof why))
        return true;
    complain("%s: %s (%d x %d, ld %d): %s", call, name, rows, cols, ld, why);
    return false;
}

static bool transposed(cublasOperation_t op)
{
    return op == CUBLAS_OP_T || op == CUBLAS_OP_C;
}

/* cuBLAS's argument check of a GEMM: no negative size, leading dimensions
 * at least the rows stored (and 1). */
static bool sizes_ok(const char *call, int m, int n, int k, int a_rows, int lda, int b_rows,
                     int ldb, int ldc)
{
    if (m >= 0 && n >= 0 && k >= 0 && lda >= (a_rows > 1 ? a_rows : 1) &&
        ldb >= (b_rows > 1 ? b_rows : 1) && ldc >= (m > 1 ? m : 1))
        return true;
    complain("%s(m=%d n=%d k=%d lda=%d ldb=%d ldc=%d): a size is negative or a leading "
             "dimension too small", call, m, n, k, lda, ldb, ldc);
    return false;
}

cublasStatus_t cublasSgemm_v2(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                              int n, int k, const float *alpha, const float *A, int lda,
                              const float *B, int ldb, const float *beta, float *C, int ldc)
{
    LOCKED;
    if (!live(h))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    bool at = transposed(ta), bt = transposed(tb);
    int a_rows = at ? k : m, a_cols = at ? m : k;
    int b_rows = bt ? n : k, b_cols = bt ? k : n;
    if (!sizes_ok("cublasSgemm", m, n, k, a_rows, lda, b_rows, ldb, ldc))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (m == 0 || n == 0)
        return CUBLAS_STATUS_SUCCESS;
    float al = *alpha, be = *beta;
    if ((al == 0.0f || k == 0) && be == 1.0f)
        return CUBLAS_STATUS_SUCCESS;
    if ((k && al != 0.0f && (!matrix_ok("A", A, a_rows, a_cols, lda) ||
                             !matrix_ok("B", B, b_rows, b_cols, ldb))) ||
        !matrix_ok("C", C, m, n, ldc))
        return CUBLAS_STATUS_INVALID_VALUE;
    bool tf32 = h->math == CUBLAS_TF32_TENSOR_OP_MATH && tf32_allowed();
    cudaError_t e = enqueue(h->stream, [=]() {
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) {
                double acc = 0;
                if (al != 0.0f)
                    for (int p = 0; p < k; p++) {
                        float a = at ? A[(size_t)i * lda + p] : A[(size_t)p * lda + i];
                        float b = bt ? B[(size_t)p * ldb + j] : B[(size_t)j * ldb + p];
                        if (tf32)
                            a = tf32_round(a), b = tf32_round(b);
                        acc += (double)a * b;
                    }
                float *c = &C[(size_t)j * ldc + i];
                *c = be == 0.0f ? (float)(al * acc) : (float)(al * acc + (double)be * *c);
            }
    });
    return e == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

/* bf16 (its 16 bits) as the fp32 it stands for: exact. */
static float bf16_value(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* fp32 rounded to bf16 (nearest, ties to even; NaN stays NaN). */
static float bf16_round(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return f;
    u += 0x7fffu + ((u >> 16) & 1u);
    return bf16_value((uint16_t)(u >> 16));
}

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                            int n, int k, const void *alpha, const void *A, cudaDataType at_,
                            int lda, const void *B, cudaDataType bt_, int ldb, const void *beta,
                            void *C, cudaDataType ct_, int ldc, cublasComputeType_t compute,
                            cublasGemmAlgo_t algo)
{
    LOCKED;
    if (!live(h))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    bool type_ok = (at_ == CUDA_R_32F || at_ == CUDA_R_16BF) && bt_ == at_ && ct_ == CUDA_R_32F;
    if (!type_ok || (compute != CUBLAS_COMPUTE_32F && compute != CUBLAS_COMPUTE_32F_FAST_16BF) ||
        (algo != CUBLAS_GEMM_DEFAULT && algo != CUBLAS_GEMM_DEFAULT_TENSOR_OP)) {
        complain("cublasGemmEx: types A %d B %d C %d, compute %d, algo %d: the fake knows fp32 "
                 "or bf16 inputs, fp32 output, 32F compute, the default algorithm", (int)at_,
                 (int)bt_, (int)ct_, (int)compute, (int)algo);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    bool at = transposed(ta), bt = transposed(tb);
    int a_rows = at ? k : m, a_cols = at ? m : k;
    int b_rows = bt ? n : k, b_cols = bt ? k : n;
    if (!sizes_ok("cublasGemmEx", m, n, k, a_rows, lda, b_rows, ldb, ldc))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (m == 0 || n == 0)
        return CUBLAS_STATUS_SUCCESS;
    float al = *(const float *)alpha, be = *(const float *)beta;
    bool bf = at_ == CUDA_R_16BF;
    size_t elem = bf ? 2 : 4;
    if ((k && al != 0.0f && (!matrix_ok("A", A, a_rows, a_cols, lda, elem, "cublasGemmEx") ||
                             !matrix_ok("B", B, b_rows, b_cols, ldb, elem, "cublasGemmEx"))) ||
        !matrix_ok("C", C, m, n, ldc, 4, "cublasGemmEx"))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (bf && (((uintptr_t)A | (uintptr_t)B) & 1)) {
        complain("cublasGemmEx: bf16 operands %p, %p are not 2-byte aligned", A, B);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    bool round = !bf && compute == CUBLAS_COMPUTE_32F_FAST_16BF;
    cudaError_t e = enqueue(h->stream, [=]() {
        auto get = [=](const void *p, size_t i) {
            return bf ? bf16_value(((const uint16_t *)p)[i])
                      : round ? bf16_round(((const float *)p)[i]) : ((const float *)p)[i];
        };
        float *c_ = (float *)C;
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) {
                float acc = 0;
                if (al != 0.0f)
                    for (int p = 0; p < k; p++) {
                        float a = get(A, at ? (size_t)i * lda + p : (size_t)p * lda + i);
                        float b = get(B, bt ? (size_t)p * ldb + j : (size_t)j * ldb + p);
                        acc += a * b;
                    }
                float *c = &c_[(size_t)j * ldc + i];
                *c = be == 0.0f ? al * acc : al * acc + be * *c;
            }
    });
    return e == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}
