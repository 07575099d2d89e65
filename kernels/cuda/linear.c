/* Fully connected layers with cuBLAS, like torch.nn.Linear: x is (n,in),
 * w is (out,in), b is (out), y is (n,out), all row-major.
 *
 * cuBLAS is column-major, and a row-major (r,c) matrix is the column-major
 * (c,r) matrix with leading dimension c, so in cuBLAS terms:
 *   y  = x w^T :  C (out,n)  = op_T(w as (in,out)) * (x as (in,n))
 *   dx = dy w  :  C (in,n)   = (w as (in,out)) * (dy as (out,n))
 *   dw = dy^T x:  C (in,out) = (x as (in,n)) * op_T(dy as (out,n))
 * Bias add and bias gradient are our kernels (bias.cu); the bias gradient
 * sums in a fixed order. Matrix products use TF32 only when enabled
 * (default off, like PyTorch).
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
 * dw as fp32 (out_p, in). */
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

/* Each returns 0, or -1 with the backend's pending error. */
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

static int linear_fwd_bf16(cbe *ci, int n, int in, int out, const float *x, const float *w,
                           float *y, float *ws)
{
    unsigned char *p = bf16_ws(ci, "linear_fwd", n, in, out, ws);
    int fresh, op = padded(out);
    uint16_t *wb = p ? weight_bf16(ci, w, out, in, &fresh) : NULL;
    if (!wb)
        return -1;
    uint16_t *xb = (uint16_t *)p;
    if (CU_CHECK(ci, cuk_to_bf16(ci->stream, (size_t)out * in, w, wb, (size_t)n * in, x, xb)))
        return -1;
    if (op == out)
        return gemm_bf16(ci, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, wb, in, xb, in, y, out);
    float *yp = (float *)(p + bf16_span((size_t)n * in));
    return gemm_bf16(ci, CUBLAS_OP_T, CUBLAS_OP_N, op, n, in, wb, in, xb, in, yp, op) ||
           CU_CHECK(ci, cuk_copy_rows(ci->stream, (size_t)n, out, op, yp, y));
}

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
    if (ci->precision == CDL_PRECISION_BF16 ? linear_fwd_bf16(ci, n, in, out, x, w, y, ws)
        : CUBLAS_CHECK(ci, cublasSgemm(ci->blas, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, &one, w,
                                       in, x, in, &zero, y, out)))
        return;
    if (b)
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
        if (dw && CUBLAS_CHECK(ci, cublasSgemm(ci->blas, CUBLAS_OP_N, CUBLAS_OP_T, in, out, n,
                                               &one, x, in, dy, out, &zero, dw, in)))
            return;
    }
    if (db)
        CU_CHECK(ci, cuk_bias_grad_rows(ci->stream, dy, db, n, out));
}
