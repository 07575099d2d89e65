/* Fully connected layers with cuBLAS, like torch.nn.Linear: x is (n,in),
 * w is (out,in), b is (out), y is (n,out), all row-major.
 *
 * cuBLAS is column-major, and a row-major (r,c) matrix is the column-major
 * (c,r) matrix with leading dimension c, so in cuBLAS terms:
 *   y  = x w^T :  C (out,n)  = op_T(w as (in,out)) * (x as (in,n))
 *   dx = dy w  :  C (in,n)   = (w as (in,out)) * (dy as (out,n))
 *   dw = dy^T x:  C (in,out) = (x as (in,n)) * op_T(dy as (out,n))
 * Matrix products use TF32 only when enabled (default off, like PyTorch).
 *
 * The bias rides in cuBLASLt epilogues (cuBLAS documentation, cublasLt.h):
 *   forward, y with bias: CUBLASLT_EPILOGUE_BIAS adds a vector whose length
 *     is D's row count, broadcast over D's columns: D (out,n) above, so
 *     b[o] goes to every row of y. Bias type: unset, it is D's type (fp32).
 *   backward, dw with db (fp32 only): CUBLASLT_EPILOGUE_BGRADB stores the
 *     bias gradient of B, one value per column of D (out), reduced over the
 *     product's k dimension (n): B is dy as (out,n) under op_T, so
 *     db[o] = sum over rows of dy[r][o]. (BGRADA would reduce A = x.)
 * With precision bf16 the backward keeps bias.cu for db: cuBLASLt would
 * sum the bf16 copy of dy, and db is promised in fp32 (tests/gpu/ops_bf16.c
 * bounds it by fp32 sums); its forward uses the epilogue (the fp32 bias is
 * added to the fp32 accumulator, as the kernel did).
 * When cuBLASLt refuses a shape (no algorithm from the heuristic, or the
 * matmul says NOT_SUPPORTED, INVALID_VALUE or ARCH_MISMATCH), or it is off
 * (CDL_CUBLASLT=0, or cublasLtCreate failed), that product runs on
 * cublasSgemm/cublasGemmEx and the bias on our kernels (bias.cu, fixed
 * summation order), reported once on stderr. Plans (descriptors, layouts,
 * the algorithm) are made once per shape and alignment, outside the hot
 * path of later steps; the workspace is cuBLAS's fixed one (nothing is
 * allocated in a step, graphs can capture the matmul), and split-K
 * schemes are limited to those that reduce in a separate step
 * (CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE / _OUTPUT_TYPE, or none): cuBLAS
 * documents its results as bitwise reproducible run to run on one GPU
 * model with one stream; INPLACE, which adds partials into the output in
 * an order kept by counters in the workspace, is left out to keep to the
 * fixed-order reductions the rest of the backend uses.
 *
 * With precision bf16 the three products take bf16 inputs and accumulate
 * in fp32 into fp32 outputs (cublasGemmEx, CUDA_R_16BF x CUDA_R_16BF ->
 * CUDA_R_32F, CUBLAS_COMPUTE_32F: tensor cores). The weight is cast into
 * the backend's bf16 cache by the forward (bf16_cache.c) and read from it
 * by the backward; x and dy are cast into the op's workspace, which
 * linear_workspace sizes: x (n*in) then dy (n*out) as bf16, each from a
 * 256-byte boundary. y, dx, dw and db stay fp32, like the weights and
 * the optimizer state.
 *
 * Outputs whose count is not a multiple of 8 (GPT-2's tied head: out =
 * 50257) make the row length of y and dy odd, and cuBLAS then runs
 * alignment-1 kernels (on an H200: sm75 CUTLASS kernels, about a third of
 * a GPT-2-small step). In bf16 such products run on out_p = out rounded up
 * to 8, padded with zeros: the cached weight has out_p rows (the last
 * zero), dy is cast into (n, out_p) rows (the last columns zero), and y and
 * dw are made (n, out_p) and (out_p, in) in the workspace, then copied out.
 * The zero rows and columns add exact zeros, so the products are those of
 * the unpadded sizes.
 */
#include <stdio.h>

#include "kernels/cuda/impl.h"

/* Bytes of k bf16 values, to the next 256-byte boundary (cuBLAS's
 * preferred alignment for tensor-core operands). */
static size_t bf16_span(size_t k)
{
    return (k * sizeof(uint16_t) + 255) & ~(size_t)255;
}

/* out rounded up to a multiple of 8: the padded row length (above). */
static int padded(int out)
{
    return (out + 7) & ~7;
}

/* Bytes of k floats, to the next 256-byte boundary. */
static size_t f32_span(size_t k)
{
    return (k * sizeof(float) + 255) & ~(size_t)255;
}

/* The bf16 workspace of one linear op: x (n, in) as bf16, then dy (n, out)
 * as bf16; padded (out % 8 != 0): x, then one region that holds y as fp32
 * (n, out_p) in the forward and dy as bf16 (n, out_p) in the backward, then
 * dw as fp32 (out_p, in), where the forward puts b padded to out_p for the
 * bias epilogue. */
static size_t bf16_ws_bytes(int n, int in, int out)
{
    if (out % 8 == 0)
        return bf16_span((size_t)n * in) + bf16_span((size_t)n * out);
    size_t op = (size_t)padded(out);
    return bf16_span((size_t)n * in) + f32_span((size_t)n * op) + f32_span(op * (size_t)in);
}

/* C (m,nn) fp32 = op(A) op(B), A and B bf16, fp32 accumulation. */
static int gemm_bf16(cbe *ci, cublasOperation_t ta, cublasOperation_t tb, int m, int nn, int k,
                     const uint16_t *a, int lda, const uint16_t *b, int ldb, float *c, int ldc)
{
    const float one = 1.0f, zero = 0.0f;
    return CUBLAS_CHECK(ci, cublasGemmEx(ci->blas, ta, tb, m, nn, k, &one, a, CUDA_R_16BF, lda,
                                         b, CUDA_R_16BF, ldb, &zero, c, CUDA_R_32F, ldc,
                                         CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

/* The workspace of a bf16 op, or NULL with a pending error when ws is too
 * small (a caller that sized it without linear_workspace). */
static unsigned char *bf16_ws(cbe *ci, const char *op, int n, int in, int out, float *ws)
{
    size_t need = bf16_ws_bytes(n, in, out), room = ws ? cbe_room(ci, ws) : 0;
    if (room < need) {
        cbe_fail(ci, "CUDA backend: %s (n %d, in %d, out %d) in bf16 needs a workspace of %zu "
                 "floats, but ws %p has room for %zu: allocate what linear_workspace returns "
                 "for these rows and pass it as ws", op, n, in, out, need / sizeof(float),
                 (void *)ws, room / sizeof(float));
        return NULL;
    }
    return (unsigned char *)ws;
}

/* ------------------------------------------------------------ cuBLASLt */

void cbe_lt_open(cbe *ci, int want)
{
    if (!want)
        return;
    cublasStatus_t s = cublasLtCreate(&ci->lt);
    if (s != CUBLAS_STATUS_SUCCESS) {
        ci->lt = NULL;
        ci->lt_said = 1;
        fprintf(stderr, "cdl: cuda: cublasLtCreate: %s: linear layers' bias runs in kernels of "
                "its own beside cuBLAS products\n", cublasGetStatusName(s));
    }
}

static void lt_plan_free(lt_plan *p)
{
    if (p->desc)
        (void)cublasLtMatmulDescDestroy(p->desc);
    if (p->a)
        (void)cublasLtMatrixLayoutDestroy(p->a);
    if (p->b)
        (void)cublasLtMatrixLayoutDestroy(p->b);
    if (p->d)
        (void)cublasLtMatrixLayoutDestroy(p->d);
    memset(p, 0, sizeof *p);
}

void cbe_lt_clear(cbe *ci)
{
    for (int i = 0; i < ci->nlt; i++)
        lt_plan_free(&ci->lt_plans[i]);
    ci->nlt = 0;
    if (ci->lt)
        (void)cublasLtDestroy(ci->lt);
    ci->lt = NULL;
}

/* The alignment cuBLASLt is told of p: the largest power of two up to 256
 * (its default requirement) that divides the address. */
static int lt_align(const void *p)
{
    int a = 256;
    while (a > 1 && (uintptr_t)p % (uintptr_t)a)
        a >>= 1;
    return a;
}

/* Statuses after which the cuBLAS path is the answer, not an error: the
 * library cannot do this product here (shape, alignment, epilogue, GPU). */
static int lt_refusal(cublasStatus_t s)
{
    return s == CUBLAS_STATUS_NOT_SUPPORTED || s == CUBLAS_STATUS_INVALID_VALUE ||
           s == CUBLAS_STATUS_ARCH_MISMATCH;
}

/* Marks plan p refused: its product runs on cuBLAS from now on. Said once
 * per backend (every time with CDL_LOG=cuda). Returns 1. */
static int lt_refuse(cbe *ci, lt_plan *p, const char *why)
{
    const lt_key *k = &p->key;
    if (!ci->lt_said || ci->log_cuda)
        fprintf(stderr, "cdl: cuda: cuBLASLt %s (%s, m %d, n %d, k %d): %s; this product and its "
                "bias run on cuBLAS and bias kernels instead\n",
                k->epilogue == CUBLASLT_EPILOGUE_BIAS ? "bias epilogue" : "bias-gradient epilogue",
                k->bf16 ? "bf16" : k->tf32 ? "tf32" : "fp32", k->m, k->n, k->k, why);
    ci->lt_said = 1;
    lt_key key = *k;
    uint64_t used = p->last_use;
    lt_plan_free(p);
    p->key = key;
    p->last_use = used;
    p->ok = 0;
    return 1;
}

/* A cuBLASLt call while making a plan: a refusal gives the cuBLAS path
 * (1), another failure is the backend's error (-1). */
#define LT_TRY(call)                                                                         \
    do {                                                                                     \
        cublasStatus_t s_ = (call);                                                          \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                     \
            return lt_refusal(s_) ? lt_refuse(ci, p, cublasGetStatusName(s_))                \
                                  : cbe_check_cublas(ci, s_, #call, __FILE__, __LINE__);     \
    } while (0)

/* Descriptors, layouts and the algorithm of key's product; bias (the
 * pointer cuBLASLt aligns for) set. 0 done, 1 refused, -1 error. */
static int lt_plan_make(cbe *ci, lt_plan *p, const void *bias)
{
    const lt_key *k = &p->key;
    cudaDataType_t in = k->bf16 ? CUDA_R_16BF : CUDA_R_32F;
    cublasComputeType_t ct = k->tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    int32_t ta = k->ta, tb = k->tb;
    uint32_t epi = (uint32_t)k->epilogue;
    int at = ta != CUBLAS_OP_N, bt = tb != CUBLAS_OP_N;
    LT_TRY(cublasLtMatmulDescCreate(&p->desc, ct, CUDA_R_32F));
    LT_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    LT_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    LT_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi,
                                          sizeof epi));
    LT_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                          sizeof bias));
    /* Stored shapes: op(A) is m x k, op(B) k x n, D m x n (C = D). */
    LT_TRY(cublasLtMatrixLayoutCreate(&p->a, in, (uint64_t)(at ? k->k : k->m),
                                      (uint64_t)(at ? k->m : k->k), k->lda));
    LT_TRY(cublasLtMatrixLayoutCreate(&p->b, in, (uint64_t)(bt ? k->n : k->k),
                                      (uint64_t)(bt ? k->k : k->n), k->ldb));
    LT_TRY(cublasLtMatrixLayoutCreate(&p->d, CUDA_R_32F, (uint64_t)k->m, (uint64_t)k->n,
                                      k->ldd));
    cublasLtMatmulPreference_t pref = NULL;
    LT_TRY(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t ws = BLAS_WS_BYTES;
    uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE |
                       CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE;
    uint32_t al[4] = {(uint32_t)k->align[0], (uint32_t)k->align[1], (uint32_t)k->align[2],
                      (uint32_t)k->align[2]};
    const cublasLtMatmulPreferenceAttributes_t al_attr[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    cublasStatus_t s = cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                                 &schemes, sizeof schemes);
    for (int i = 0; i < 4 && s == CUBLAS_STATUS_SUCCESS; i++)
        s = cublasLtMatmulPreferenceSetAttribute(pref, al_attr[i], &al[i], sizeof al[i]);
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    memset(&res, 0, sizeof res);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulAlgoGetHeuristic(ci->lt, p->desc, p->a, p->b, p->d, p->d, pref, 1,
                                           &res, &found);
    (void)cublasLtMatmulPreferenceDestroy(pref);
    LT_TRY(s);
    if (found < 1 || res.state != CUBLAS_STATUS_SUCCESS || res.workspaceSize > BLAS_WS_BYTES)
        return lt_refuse(ci, p, "the heuristic found no algorithm");
    p->algo = res.algo;
    p->ok = 1;
    return 0;
}

/* D (m,nn) fp32 = op(A) op(B) (bf16 or fp32 inputs, fp32 accumulation),
 * with epilogue epi on bias: BIAS adds bias (m) to every column, BGRADB
 * writes the sums of op(B) over k into bias (nn). Returns 0 when done, 1
 * when the caller must take the cuBLAS path (nothing was enqueued), -1
 * with a pending error. */
static int lt_gemm(cbe *ci, int epi, int bf16, cublasOperation_t ta, cublasOperation_t tb, int m,
                   int nn, int k, const void *a, int lda, const void *b, int ldb, float *d,
                   int ldd, float *bias)
{
    if (!ci->lt)
        return 1;
    lt_key key;
    memset(&key, 0, sizeof key);
    key.epilogue = epi;
    key.bf16 = bf16;
    key.tf32 = !bf16 && ci->tf32_matmul;
    key.ta = (int)ta;
    key.tb = (int)tb;
    key.m = m, key.n = nn, key.k = k, key.lda = lda, key.ldb = ldb, key.ldd = ldd;
    key.align[0] = lt_align(a), key.align[1] = lt_align(b), key.align[2] = lt_align(d);
    key.align[3] = lt_align(bias);
    lt_plan *p = NULL;
    for (int i = 0; i < ci->nlt && !p; i++)
        if (!memcmp(&ci->lt_plans[i].key, &key, sizeof key))
            p = &ci->lt_plans[i];
    if (!p) {
        if (ci->nlt < LT_CACHE_SIZE)
            p = &ci->lt_plans[ci->nlt++];
        else {
            p = &ci->lt_plans[0];
            for (int i = 1; i < LT_CACHE_SIZE; i++)
                if (ci->lt_plans[i].last_use < p->last_use)
                    p = &ci->lt_plans[i];
            lt_plan_free(p);
        }
        p->key = key;
        p->last_use = ++ci->lt_clock;
        int r = lt_plan_make(ci, p, bias);
        if (r)
            return r;
    }
    p->last_use = ++ci->lt_clock;
    if (!p->ok)
        return 1;
    /* The pointer changes from call to call (same alignment: the key). */
    if (CUBLAS_CHECK(ci, cublasLtMatmulDescSetAttribute(
                             p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias)))
        return -1;
    const float one = 1.0f, zero = 0.0f;
    cublasStatus_t s = cublasLtMatmul(ci->lt, p->desc, &one, a, p->a, b, p->b, &zero, d, p->d, d,
                                      p->d, &p->algo, ci->blas_ws, BLAS_WS_BYTES, ci->stream);
    if (s == CUBLAS_STATUS_SUCCESS)
        return 0;
    if (lt_refusal(s))
        return lt_refuse(ci, p, cublasGetStatusName(s));
    return cbe_check_cublas(ci, s, "cublasLtMatmul", __FILE__, __LINE__);
}

int cbe_apply_matmul_math(cbe *ci)
{
    return CUBLAS_CHECK(ci, cublasSetMathMode(ci->blas, ci->tf32_matmul ? CUBLAS_TF32_TENSOR_OP_MATH
                                                                        : CUBLAS_DEFAULT_MATH));
}

/* cuBLAS uses its own fixed workspace (set at creation); ws holds only the
 * bf16 copies of x and dy in bf16. */
size_t cbe_linear_workspace(cdl_backend *be, int n, int in, int out)
{
    if (cbe_of(be)->precision != CDL_PRECISION_BF16 || n <= 0 || in <= 0 || out <= 0)
        return 0;
    return bf16_ws_bytes(n, in, out) / sizeof(float);
}

/* The bf16 copy of w (out, in), with out_p rows: the pad rows are zeroed
 * once, when the cache entry is made (the forward's cast writes the first
 * out rows only). NULL with a pending error. */
static uint16_t *weight_bf16(cbe *ci, const float *w, int out, int in, int *fresh)
{
    int op = padded(out);
    uint16_t *wb = cbe_bf16_weight(ci, w, (size_t)op * in, fresh);
    if (wb && *fresh && op != out &&
        CU_CHECK(ci, cudaMemsetAsync(wb + (size_t)out * in, 0,
                                     (size_t)(op - out) * in * sizeof *wb, ci->stream)))
        return NULL;
    return wb;
}

/* y = x w^T, plus b unless b is NULL: 0 done (bias included), 1 done
 * without the bias (the caller adds it), -1 error. */
static int linear_fwd_bf16(cbe *ci, int n, int in, int out, const float *x, const float *w,
                           const float *b, float *y, float *ws)
{
    unsigned char *p = bf16_ws(ci, "linear_fwd", n, in, out, ws);
    int fresh, op = padded(out);
    uint16_t *wb = p ? weight_bf16(ci, w, out, in, &fresh) : NULL;
    if (!wb)
        return -1;
    uint16_t *xb = (uint16_t *)p;
    if (CU_CHECK(ci, cuk_to_bf16(ci->stream, (size_t)out * in, w, wb, (size_t)n * in, x, xb)))
        return -1;
    if (op == out) {
        int r = b ? lt_gemm(ci, CUBLASLT_EPILOGUE_BIAS, 1, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in,
                            wb, in, xb, in, y, out, (float *)b)
                  : 1;
        if (r <= 0)
            return r;
        return gemm_bf16(ci, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, wb, in, xb, in, y, out) ? -1
               : b ? 1 : 0;
    }
    /* Padded: the epilogue's bias has a value per row of D (out_p), so b is
     * copied into the forward-idle dw region with zeros after it. */
    float *yp = (float *)(p + bf16_span((size_t)n * in));
    float *bp = (float *)(p + bf16_span((size_t)n * in) + f32_span((size_t)n * op));
    int r = 1;
    if (b && ci->lt) {
        if (CU_CHECK(ci, cudaMemcpyAsync(bp, b, (size_t)out * sizeof *bp,
                                         cudaMemcpyDeviceToDevice, ci->stream)) ||
            CU_CHECK(ci, cudaMemsetAsync(bp + out, 0, (size_t)(op - out) * sizeof *bp,
                                         ci->stream)))
            return -1;
        r = lt_gemm(ci, CUBLASLT_EPILOGUE_BIAS, 1, CUBLAS_OP_T, CUBLAS_OP_N, op, n, in, wb, in,
                    xb, in, yp, op, bp);
        if (r < 0)
            return -1;
    }
    if (r && gemm_bf16(ci, CUBLAS_OP_T, CUBLAS_OP_N, op, n, in, wb, in, xb, in, yp, op))
        return -1;
    return CU_CHECK(ci, cuk_copy_rows(ci->stream, (size_t)n, out, op, yp, y)) ? -1
           : b && r ? 1 : 0;
}

/* dx and dw; 0, or -1 with the backend's pending error. */
static int linear_bwd_bf16(cbe *ci, int n, int in, int out, const float *x, const float *w,
                           const float *dy, float *dx, float *dw, float *ws)
{
    unsigned char *p = bf16_ws(ci, "linear_bwd", n, in, out, ws);
    if (!p)
        return -1;
    int op = padded(out);
    uint16_t *xb = (uint16_t *)p, *dyb = (uint16_t *)(p + bf16_span((size_t)n * in));
    /* dy always (rows padded to op); x only for dw. */
    if (op == out ? CU_CHECK(ci, cuk_to_bf16(ci->stream, (size_t)n * out, dy, dyb,
                                             dw ? (size_t)n * in : 0, x, xb))
                  : CU_CHECK(ci, cuk_to_bf16_rows(ci->stream, (size_t)n, out, op, dy, dyb)) ||
                        (dw && CU_CHECK(ci, cuk_to_bf16(ci->stream, (size_t)n * in, x, xb, 0,
                                                        NULL, NULL))))
        return -1;
    if (dx) {
        /* The forward's cast; a backward without its forward casts now. */
        int fresh;
        uint16_t *wb = weight_bf16(ci, w, out, in, &fresh);
        if (!wb || (fresh && CU_CHECK(ci, cuk_to_bf16(ci->stream, (size_t)out * in, w, wb, 0,
                                                      NULL, NULL))))
            return -1;
        if (gemm_bf16(ci, CUBLAS_OP_N, CUBLAS_OP_N, in, n, op, wb, in, dyb, op, dx, in))
            return -1;
    }
    if (!dw)
        return 0;
    if (op == out)
        return gemm_bf16(ci, CUBLAS_OP_N, CUBLAS_OP_T, in, out, n, xb, in, dyb, out, dw, in);
    /* dw (out, in) is the first out rows of the padded (op, in). */
    float *dwp = (float *)(p + bf16_span((size_t)n * in) + f32_span((size_t)n * op));
    return gemm_bf16(ci, CUBLAS_OP_N, CUBLAS_OP_T, in, op, n, xb, in, dyb, op, dwp, in) ||
           CU_CHECK(ci, cudaMemcpyAsync(dw, dwp, (size_t)out * in * sizeof *dw,
                                        cudaMemcpyDeviceToDevice, ci->stream));
}

void cbe_linear_fwd(cdl_backend *be, int n, int in, int out, const float *x, const float *w,
                    const float *b, float *y, float *ws)
{
    cbe *ci = cbe_of(be);
    if (n <= 0 || out <= 0 || in <= 0)
        return;
    cbe_enter(ci);
    const uint64_t a[] = {(uint64_t)n, (uint64_t)in, (uint64_t)out, sigp(x), sigp(w), sigp(b), sigp(y)};
    const void *dyn;
    if (cbe_graph_op(ci, "linear_fwd", cbe_sig(OPSIG_LINEAR_FWD, a, 7), NULL, 0, &dyn))
        return;
    const float one = 1.0f, zero = 0.0f;
    int r;   /* 0: done; 1: b still to add; -1: error */
    if (ci->precision == CDL_PRECISION_BF16)
        r = linear_fwd_bf16(ci, n, in, out, x, w, b, y, ws);
    else {
        r = b ? lt_gemm(ci, CUBLASLT_EPILOGUE_BIAS, 0, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, w,
                        in, x, in, y, out, (float *)b)
              : 1;
        if (r > 0)
            r = CUBLAS_CHECK(ci, cublasSgemm(ci->blas, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, &one,
                                             w, in, x, in, &zero, y, out)) ? -1 : b != NULL;
    }
    if (r > 0)
        CU_CHECK(ci, cuk_bias_add_rows(ci->stream, y, b, n, out));
}

void cbe_linear_bwd(cdl_backend *be, int n, int in, int out, const float *x, const float *w,
                    const float *dy, float *dx, float *dw, float *db, float *ws)
{
    cbe *ci = cbe_of(be);
    if (n <= 0 || out <= 0 || in <= 0)
        return;
    cbe_enter(ci);
    const uint64_t a[] = {(uint64_t)n, (uint64_t)in, (uint64_t)out, sigp(x), sigp(w), sigp(dy),
                          sigp(dx), sigp(dw), sigp(db)};
    const void *dyn;
    if (cbe_graph_op(ci, "linear_bwd", cbe_sig(OPSIG_LINEAR_BWD, a, 9), NULL, 0, &dyn))
        return;
    const float one = 1.0f, zero = 0.0f;
    if (ci->precision == CDL_PRECISION_BF16) {
        if (linear_bwd_bf16(ci, n, in, out, x, w, dy, dx, dw, ws))
            return;
    } else {
        if (dx && CUBLAS_CHECK(ci, cublasSgemm(ci->blas, CUBLAS_OP_N, CUBLAS_OP_N, in, n, out,
                                               &one, w, in, dy, out, &zero, dx, in)))
            return;
        /* dw with db in one product: the sums of B = dy over k = n. */
        int r = dw && db ? lt_gemm(ci, CUBLASLT_EPILOGUE_BGRADB, 0, CUBLAS_OP_N, CUBLAS_OP_T, in,
                                   out, n, x, in, dy, out, dw, in, db)
                         : 1;
        if (r < 0)
            return;
        if (r == 0)
            db = NULL;
        else if (dw && CUBLAS_CHECK(ci, cublasSgemm(ci->blas, CUBLAS_OP_N, CUBLAS_OP_T, in, out,
                                                    n, &one, x, in, dy, out, &zero, dw, in)))
            return;
    }
    if (db)
        CU_CHECK(ci, cuk_bias_grad_rows(ci->stream, dy, db, n, out));
}
