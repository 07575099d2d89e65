/* cuBLASLt of the fake GPU: the subset linear.c uses, from cuBLAS's
 * documentation and cublasLt.h.
 *
 * cublasLtMatmul computes D = alpha op(A) op(B) + beta C (column-major;
 * op(A) m x k, op(B) k x n, C and D m x n, their layouts give the stored
 * rows, columns and leading dimension), alpha and beta read from host
 * memory (the default pointer mode), then the epilogue:
 *   CUBLASLT_EPILOGUE_DEFAULT: nothing;
 *   CUBLASLT_EPILOGUE_BIAS: bias (the descriptor's BIAS_POINTER, length =
 *     D's rows, packed) added to every column of D;
 *   CUBLASLT_EPILOGUE_BGRADA / BGRADB: the bias gradient of A (length =
 *     D's rows) or B (length = D's columns), "the reduction happens over
 *     the GEMM's k dimension": sums of op(A)'s rows or op(B)'s columns,
 *     stored at BIAS_POINTER.
 * The bias (or its gradient) has D's type unless BIAS_DATA_TYPE says
 * otherwise; here D must be fp32 and so must the bias. Inputs: fp32 or bf16
 * A and B (same type), fp32 C and D, scale type fp32, compute type
 * CUBLAS_COMPUTE_32F (strict: fp32 inputs are not rounded; bf16 products
 * are exact in fp32) or, for fp32 inputs, CUBLAS_COMPUTE_32F_FAST_TF32
 * (operands rounded to TF32 unless NVIDIA_TF32_OVERRIDE=0). fp32 products
 * are accumulated in double, bf16 ones in fp32 in order, as fake_blas.cc
 * does for cublasSgemm and cublasGemmEx; bias gradients likewise.
 *
 * Checked as the library would refuse or crash: live handle and
 * descriptors, attribute sizes, known attributes and values, layouts that
 * agree with the transposes (op(A) m x k etc.), leading dimensions at
 * least the rows, every matrix, the bias and the workspace inside device
 * allocations, pointers aligned as the preference told the heuristic (the
 * algorithm it returns remembers those), the stream. A misuse prints a
 * "fakegpu:" line (which fails the tests) and returns INVALID_VALUE or
 * NOT_SUPPORTED. The heuristic returns one algorithm, needing no
 * workspace. */
#include "fake.h"

#include <cublasLt.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>

using namespace fakegpu;
#define LOCKED std::lock_guard<std::recursive_mutex> guard_(fakegpu::lock())

/* CDL_FAKE_CUBLASLT, read when the handle is made: "heuristic": the
 * heuristic finds no algorithm; "matmul": cublasLtMatmul answers
 * NOT_SUPPORTED; "create": cublasLtCreate fails. So the tests reach the
 * fallbacks of a library that refuses a product. */
struct cublasLtContext {
    bool no_algo = false, refuse = false;
};

namespace {

struct Desc {
    cublasComputeType_t compute;
    cudaDataType_t scale;
    int32_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_N;
    uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    const void *bias = nullptr;
    int32_t bias_type = -1;
};

struct Layout {
    cudaDataType type;
    uint64_t rows, cols;
    int64_t ld;
};

struct Pref {
    uint64_t max_ws = 0;
    uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_MASK;
    uint32_t align[4] = {256, 256, 256, 256};
};

/* What the fake's one algorithm carries in cublasLtMatmulAlgo_t.data. */
const uint64_t ALGO_MAGIC = 0x66616b656c74ull;   /* "fakelt" */

std::set<cublasLtContext *> handles;
std::set<Desc *> descs;
std::set<Layout *> layouts;
std::set<Pref *> prefs;

template <class T> bool size_is(size_t bytes, const char *call, int attr)
{
    if (bytes == sizeof(T))
        return true;
    complain("%s: attribute %d given %zu bytes, it takes %zu", call, attr, bytes, sizeof(T));
    return false;
}

/* bf16 (its 16 bits) as the fp32 it stands for: exact. */
float bf16_value(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

bool transposed(int32_t op)
{
    return op == CUBLAS_OP_T || op == CUBLAS_OP_C;
}

bool matrix_ok(const char *name, const void *p, const Layout *l, size_t elem)
{
    if (l->rows == 0 || l->cols == 0)
        return true;
    size_t bytes = ((size_t)(l->cols - 1) * (size_t)l->ld + l->rows) * elem;
    char why[160];
    if (device_range(p, bytes, why, sizeof why))
        return true;
    complain("cublasLtMatmul: %s (%llu x %llu, ld %lld): %s", name, (unsigned long long)l->rows,
             (unsigned long long)l->cols, (long long)l->ld, why);
    return false;
}

/* The operation's types and shapes; m, n, k out. NOT_SUPPORTED or
 * INVALID_VALUE with a complaint, else SUCCESS. */
cublasStatus_t check_op(const char *call, const Desc *d, const Layout *a, const Layout *b,
                        const Layout *c, const Layout *dl, int *m, int *n, int *k)
{
    bool fp32 = a->type == CUDA_R_32F, bf = a->type == CUDA_R_16BF;
    bool types = (fp32 || bf) && b->type == a->type && c->type == CUDA_R_32F &&
                 dl->type == CUDA_R_32F && d->scale == CUDA_R_32F &&
                 (d->compute == CUBLAS_COMPUTE_32F ||
                  (fp32 && d->compute == CUBLAS_COMPUTE_32F_FAST_TF32)) &&
                 (d->bias_type == -1 || d->bias_type == CUDA_R_32F);
    if (!types) {
        complain("%s: types A %d B %d C %d D %d, scale %d, compute %d, bias %d: the fake knows fp32 "
                 "or bf16 A and B, fp32 C, D and bias, fp32 scale, 32F compute (or 32F_FAST_TF32 "
                 "for fp32 inputs)", call, (int)a->type, (int)b->type, (int)c->type,
                 (int)dl->type, (int)d->scale, (int)d->compute, (int)d->bias_type);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    bool at = transposed(d->ta), bt = transposed(d->tb);
    uint64_t am = at ? a->cols : a->rows, ak = at ? a->rows : a->cols;
    uint64_t bk = bt ? b->cols : b->rows, bn = bt ? b->rows : b->cols;
    if (ak != bk || am != dl->rows || bn != dl->cols || c->rows != dl->rows ||
        c->cols != dl->cols || c->ld != dl->ld) {
        complain("%s: op(A) %llu x %llu, op(B) %llu x %llu, C %llu x %llu (ld %lld), D %llu x %llu "
                 "(ld %lld) do not make a product", call, (unsigned long long)am,
                 (unsigned long long)ak, (unsigned long long)bk, (unsigned long long)bn,
                 (unsigned long long)c->rows, (unsigned long long)c->cols, (long long)c->ld,
                 (unsigned long long)dl->rows, (unsigned long long)dl->cols, (long long)dl->ld);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (d->epilogue != CUBLASLT_EPILOGUE_DEFAULT && d->epilogue != CUBLASLT_EPILOGUE_BIAS &&
        d->epilogue != CUBLASLT_EPILOGUE_BGRADA && d->epilogue != CUBLASLT_EPILOGUE_BGRADB) {
        complain("%s: epilogue %u: the fake knows DEFAULT, BIAS, BGRADA, BGRADB", call,
                 (unsigned)d->epilogue);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (d->epilogue != CUBLASLT_EPILOGUE_DEFAULT && !d->bias) {
        complain("%s: epilogue %u without CUBLASLT_MATMUL_DESC_BIAS_POINTER", call,
                 (unsigned)d->epilogue);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    *m = (int)dl->rows, *n = (int)dl->cols, *k = (int)ak;
    return CUBLAS_STATUS_SUCCESS;
}

} // namespace

cublasStatus_t cublasLtCreate(cublasLtHandle_t *h)
{
    LOCKED;
    if (!h)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (device_count() == 0)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    const char *mode = getenv("CDL_FAKE_CUBLASLT");
    std::string m = mode ? mode : "";
    if (m == "create")
        return CUBLAS_STATUS_NOT_SUPPORTED;
    *h = new cublasLtContext;
    (*h)->no_algo = m == "heuristic";
    (*h)->refuse = m == "matmul";
    handles.insert(*h);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t h)
{
    LOCKED;
    if (!handles.count(h))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    handles.erase(h);
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}

const char *cublasLtGetStatusName(cublasStatus_t s)
{
    return cublasGetStatusName(s);
}

const char *cublasLtGetStatusString(cublasStatus_t s)
{
    return cublasGetStatusString(s);
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *desc, cublasComputeType_t compute,
                                        cudaDataType_t scale)
{
    LOCKED;
    if (!desc)
        return CUBLAS_STATUS_INVALID_VALUE;
    Desc *d = new Desc;
    d->compute = compute;
    d->scale = scale;
    descs.insert(d);
    *desc = reinterpret_cast<cublasLtMatmulDesc_t>(d);
    return CUBLAS_STATUS_SUCCESS;
}

static Desc *desc_of(cublasLtMatmulDesc_t desc, const char *call)
{
    Desc *d = reinterpret_cast<Desc *>(desc);
    if (descs.count(d))
        return d;
    complain("%s: matmul descriptor %p does not exist", call, (void *)desc);
    return nullptr;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc)
{
    LOCKED;
    Desc *d = desc_of(desc, "cublasLtMatmulDescDestroy");
    if (!d)
        return CUBLAS_STATUS_INVALID_VALUE;
    descs.erase(d);
    delete d;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                              cublasLtMatmulDescAttributes_t attr,
                                              const void *buf, size_t bytes)
{
    LOCKED;
    const char *call = "cublasLtMatmulDescSetAttribute";
    Desc *d = desc_of(desc, call);
    if (!d || !buf)
        return CUBLAS_STATUS_INVALID_VALUE;
    int32_t i32;
    switch (attr) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE:
        if (!size_is<int32_t>(bytes, call, attr))
            return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&i32, buf, sizeof i32);
        d->compute = (cublasComputeType_t)i32;
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE:
        if (!size_is<int32_t>(bytes, call, attr))
            return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&i32, buf, sizeof i32);
        d->scale = (cudaDataType_t)i32;
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_TRANSA:
    case CUBLASLT_MATMUL_DESC_TRANSB:
        if (!size_is<int32_t>(bytes, call, attr))
            return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&i32, buf, sizeof i32);
        if (i32 != CUBLAS_OP_N && i32 != CUBLAS_OP_T) {
            complain("%s: transpose %d: the fake knows CUBLAS_OP_N and CUBLAS_OP_T", call, i32);
            return CUBLAS_STATUS_INVALID_VALUE;
        }
        (attr == CUBLASLT_MATMUL_DESC_TRANSA ? d->ta : d->tb) = i32;
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
        if (!size_is<uint32_t>(bytes, call, attr))
            return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&d->epilogue, buf, sizeof d->epilogue);
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
        if (!size_is<const void *>(bytes, call, attr))
            return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&d->bias, buf, sizeof d->bias);
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
        if (!size_is<int32_t>(bytes, call, attr))
            return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&d->bias_type, buf, sizeof d->bias_type);
        return CUBLAS_STATUS_SUCCESS;
    default:
        complain("%s: attribute %d is not one the fake knows", call, (int)attr);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *layout, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld)
{
    LOCKED;
    if (!layout)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (ld < (int64_t)(rows > 1 ? rows : 1) || rows > INT32_MAX || cols > INT32_MAX) {
        complain("cublasLtMatrixLayoutCreate(rows %llu, cols %llu, ld %lld): the leading "
                 "dimension is smaller than the rows", (unsigned long long)rows,
                 (unsigned long long)cols, (long long)ld);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    Layout *l = new Layout{type, rows, cols, ld};
    layouts.insert(l);
    *layout = reinterpret_cast<cublasLtMatrixLayout_t>(l);
    return CUBLAS_STATUS_SUCCESS;
}

static Layout *layout_of(cublasLtMatrixLayout_t layout, const char *call)
{
    Layout *l = reinterpret_cast<Layout *>(layout);
    if (layouts.count(l))
        return l;
    complain("%s: matrix layout %p does not exist", call, (void *)layout);
    return nullptr;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout)
{
    LOCKED;
    Layout *l = layout_of(layout, "cublasLtMatrixLayoutDestroy");
    if (!l)
        return CUBLAS_STATUS_INVALID_VALUE;
    layouts.erase(l);
    delete l;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *pref)
{
    LOCKED;
    if (!pref)
        return CUBLAS_STATUS_INVALID_VALUE;
    Pref *p = new Pref;
    prefs.insert(p);
    *pref = reinterpret_cast<cublasLtMatmulPreference_t>(p);
    return CUBLAS_STATUS_SUCCESS;
}

static Pref *pref_of(cublasLtMatmulPreference_t pref, const char *call)
{
    Pref *p = reinterpret_cast<Pref *>(pref);
    if (prefs.count(p))
        return p;
    complain("%s: preference %p does not exist", call, (void *)pref);
    return nullptr;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref)
{
    LOCKED;
    Pref *p = pref_of(pref, "cublasLtMatmulPreferenceDestroy");
    if (!p)
        return CUBLAS_STATUS_INVALID_VALUE;
    prefs.erase(p);
    delete p;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void *buf, size_t bytes)
{
    LOCKED;
    const char *call = "cublasLtMatmulPreferenceSetAttribute";
    Pref *p = pref_of(pref, call);
    if (!p || !buf)
        return CUBLAS_STATUS_INVALID_VALUE;
    uint32_t u32;
    switch (attr) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
        if (!size_is<uint64_t>(bytes, call, attr))
            return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&p->max_ws, buf, sizeof p->max_ws);
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK:
        if (!size_is<uint32_t>(bytes, call, attr))
            return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&p->schemes, buf, sizeof p->schemes);
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
        if (!size_is<uint32_t>(bytes, call, attr))
            return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&u32, buf, sizeof u32);
        if (u32 == 0 || (u32 & (u32 - 1))) {
            complain("%s: alignment %u is not a power of two", call, u32);
            return CUBLAS_STATUS_INVALID_VALUE;
        }
        p->align[attr - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES] = u32;
        return CUBLAS_STATUS_SUCCESS;
    default:
        complain("%s: attribute %d is not one the fake knows", call, (int)attr);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t Adesc,
                                              cublasLtMatrixLayout_t Bdesc,
                                              cublasLtMatrixLayout_t Cdesc,
                                              cublasLtMatrixLayout_t Ddesc,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t results[],
                                              int *returned)
{
    LOCKED;
    const char *call = "cublasLtMatmulAlgoGetHeuristic";
    if (!handles.count(h))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    Desc *d = desc_of(desc, call);
    Layout *a = layout_of(Adesc, call), *b = layout_of(Bdesc, call);
    Layout *c = layout_of(Cdesc, call), *dl = layout_of(Ddesc, call);
    Pref *p = pref_of(pref, call);
    if (!d || !a || !b || !c || !dl || !p || requested < 1 || !results || !returned)
        return CUBLAS_STATUS_INVALID_VALUE;
    int m, n, k;
    cublasStatus_t s = check_op(call, d, a, b, c, dl, &m, &n, &k);
    if (s != CUBLAS_STATUS_SUCCESS)
        return s;
    /* An input's alignment below its element size cannot be served. */
    size_t in_elem = a->type == CUDA_R_16BF ? 2 : 4;
    if (h->no_algo || p->align[0] < in_elem || p->align[1] < in_elem || p->align[2] < 4 || p->align[3] < 4) {
        *returned = 0;
        return CUBLAS_STATUS_SUCCESS;
    }
    memset(&results[0], 0, sizeof results[0]);
    results[0].algo.data[0] = ALGO_MAGIC;
    for (int i = 0; i < 4; i++)
        results[0].algo.data[1 + i] = p->align[i];
    results[0].workspaceSize = 0;
    results[0].state = CUBLAS_STATUS_SUCCESS;
    results[0].wavesCount = 1.0f;
    *returned = 1;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t desc, const void *alpha,
                              const void *A, cublasLtMatrixLayout_t Adesc, const void *B,
                              cublasLtMatrixLayout_t Bdesc, const void *beta, const void *C,
                              cublasLtMatrixLayout_t Cdesc, void *D, cublasLtMatrixLayout_t Ddesc,
                              const cublasLtMatmulAlgo_t *algo, void *workspace,
                              size_t ws_bytes, cudaStream_t stream)
{
    LOCKED;
    const char *call = "cublasLtMatmul";
    if (!handles.count(h))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    Desc *d = desc_of(desc, call);
    Layout *a = layout_of(Adesc, call), *b = layout_of(Bdesc, call);
    Layout *c = layout_of(Cdesc, call), *dl = layout_of(Ddesc, call);
    if (!d || !a || !b || !c || !dl || !alpha || !beta)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (!algo || algo->data[0] != ALGO_MAGIC) {
        complain("%s: the algorithm is not one the heuristic returned", call);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (!stream_ok(stream)) {
        complain("%s: stream %p does not exist", call, (void *)stream);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    char why[160];
    if (ws_bytes && !device_range(workspace, ws_bytes, why, sizeof why)) {
        complain("%s: workspace: %s", call, why);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    int m, n, k;
    cublasStatus_t s = check_op(call, d, a, b, c, dl, &m, &n, &k);
    if (s != CUBLAS_STATUS_SUCCESS)
        return s;
    if (h->refuse)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (m == 0 || n == 0)
        return CUBLAS_STATUS_SUCCESS;
    bool bf = a->type == CUDA_R_16BF;
    size_t elem = bf ? 2 : 4;
    float al = *(const float *)alpha, be = *(const float *)beta;
    if ((k && (!matrix_ok("A", A, a, elem) || !matrix_ok("B", B, b, elem))) ||
        (be != 0.0f && !matrix_ok("C", C, c, 4)) || !matrix_ok("D", D, dl, 4))
        return CUBLAS_STATUS_INVALID_VALUE;
    const void *ptrs[4] = {A, B, C, D};
    for (int i = 0; i < 4; i++)
        if ((uintptr_t)ptrs[i] % algo->data[1 + i]) {
            complain("%s: %c at %p is not aligned to the %llu bytes the heuristic was told", call,
                     "ABCD"[i], ptrs[i], (unsigned long long)algo->data[1 + i]);
            return CUBLAS_STATUS_NOT_SUPPORTED;
        }
    uint32_t epi = d->epilogue;
    int nbias = epi == CUBLASLT_EPILOGUE_BGRADB ? n : m;
    float *bias = (float *)d->bias;
    if (epi != CUBLASLT_EPILOGUE_DEFAULT) {
        if (!device_range(bias, (size_t)nbias * 4, why, sizeof why)) {
            complain("%s: bias (%d floats): %s", call, nbias, why);
            return CUBLAS_STATUS_INVALID_VALUE;
        }
        if ((uintptr_t)bias % 4) {
            complain("%s: bias %p is not 4-byte aligned", call, (void *)bias);
            return CUBLAS_STATUS_INVALID_VALUE;
        }
    }
    bool at = transposed(d->ta), bt = transposed(d->tb);
    int lda = (int)a->ld, ldb = (int)b->ld, ldd = (int)dl->ld, ldc = (int)c->ld;
    bool tf32 = !bf && d->compute == CUBLAS_COMPUTE_32F_FAST_TF32 && tf32_allowed();
    cudaError_t e = enqueue(stream, [=]() {
        auto raw = [=](const void *p, size_t i) {
            return bf ? bf16_value(((const uint16_t *)p)[i]) : ((const float *)p)[i];
        };
        /* op(A)[i][p] and op(B)[p][j]; rounded to TF32 for the product
         * only (the bias gradient sums the values as stored). */
        auto ga = [=](int i, int p, bool round = true) {
            float v = raw(A, at ? (size_t)i * lda + p : (size_t)p * lda + i);
            return tf32 && round ? tf32_round(v) : v;
        };
        auto gb = [=](int p, int j, bool round = true) {
            float v = raw(B, bt ? (size_t)p * ldb + j : (size_t)j * ldb + p);
            return tf32 && round ? tf32_round(v) : v;
        };
        const float *c_ = (const float *)C;
        float *d_ = (float *)D;
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) {
                float r;
                if (bf) {
                    float acc = 0;
                    for (int p = 0; p < k; p++)
                        acc += ga(i, p) * gb(p, j);
                    r = al * acc;
                } else {
                    double acc = 0;
                    for (int p = 0; p < k; p++)
                        acc += (double)ga(i, p) * gb(p, j);
                    r = (float)(al * acc);
                }
                if (be != 0.0f)
                    r += be * c_[(size_t)j * ldc + i];
                if (epi == CUBLASLT_EPILOGUE_BIAS)
                    r += bias[i];
                d_[(size_t)j * ldd + i] = r;
            }
        if (epi == CUBLASLT_EPILOGUE_BGRADA || epi == CUBLASLT_EPILOGUE_BGRADB) {
            bool of_b = epi == CUBLASLT_EPILOGUE_BGRADB;
            for (int t = 0; t < nbias; t++) {
                double acc = 0;
                float facc = 0;
                for (int p = 0; p < k; p++) {
                    float v = of_b ? gb(p, t, false) : ga(t, p, false);
                    acc += v;
                    facc += v;
                }
                bias[t] = bf ? facc : (float)acc;
            }
        }
    });
    return e == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}
