/* cuBLAS of the fake GPU: handles and SGEMM, from cuBLAS's documented
 * semantics (column-major storage, op(A) is m x k, op(B) k x n, C m x n;
 * alpha and beta read from host memory when the call is made; beta == 0
 * means C is not read). Arguments are checked as cuBLAS checks them
 * (CUBLAS_STATUS_INVALID_VALUE for a negative size or a leading dimension
 * too small), and every matrix must lie inside one device allocation. The
 * product runs on the handle's stream. Under CUBLAS_TF32_TENSOR_OP_MATH
 * the operands are rounded to TF32 first, as tensor cores do. */
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

/* Checks that a rows x cols column-major matrix with leading dimension ld
 * lies in device memory. */
static bool matrix_ok(const char *name, const float *p, int rows, int cols, int ld)
{
    if (rows == 0 || cols == 0)
        return true;
    size_t bytes = ((size_t)(cols - 1) * ld + rows) * sizeof(float);
    char why[160];
    if (device_range(p, bytes, why, sizeof why))
        return true;
    complain("cublasSgemm: %s (%d x %d, ld %d): %s", name, rows, cols, ld, why);
    return false;
}

static bool transposed(cublasOperation_t op)
{
    return op == CUBLAS_OP_T || op == CUBLAS_OP_C;
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
    if (m < 0 || n < 0 || k < 0 || lda < (a_rows > 1 ? a_rows : 1) ||
        ldb < (b_rows > 1 ? b_rows : 1) || ldc < (m > 1 ? m : 1)) {
        complain("cublasSgemm(m=%d n=%d k=%d lda=%d ldb=%d ldc=%d): a size is negative or a "
                 "leading dimension too small", m, n, k, lda, ldb, ldc);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
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
