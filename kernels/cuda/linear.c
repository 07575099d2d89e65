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
 */
#include "kernels/cuda/impl.h"

int cbe_apply_matmul_math(cbe *ci)
{
    return CUBLAS_CHECK(ci, cublasSetMathMode(ci->blas, ci->tf32_matmul ? CUBLAS_TF32_TENSOR_OP_MATH
                                                                        : CUBLAS_DEFAULT_MATH));
}

/* cuBLAS uses its own fixed workspace (set at creation); nothing from ws. */
size_t cbe_linear_workspace(cdl_backend *be, int n, int in, int out)
{
    (void)be;
    (void)n;
    (void)in;
    (void)out;
    return 0;
}

void cbe_linear_fwd(cdl_backend *be, int n, int in, int out, const float *x, const float *w,
                    const float *b, float *y, float *ws)
{
    cbe *ci = cbe_of(be);
    (void)ws;
    if (n <= 0 || out <= 0 || in <= 0)
        return;
    cbe_enter(ci);
    const uint64_t a[] = {(uint64_t)n, (uint64_t)in, (uint64_t)out, sigp(x), sigp(w), sigp(b), sigp(y)};
    const void *dyn;
    if (cbe_graph_op(ci, "linear_fwd", cbe_sig(OPSIG_LINEAR_FWD, a, 7), NULL, 0, &dyn))
        return;
    const float one = 1.0f, zero = 0.0f;
    if (CUBLAS_CHECK(ci, cublasSgemm(ci->blas, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, &one, w, in,
                                     x, in, &zero, y, out)))
        return;
    if (b)
        CU_CHECK(ci, cuk_bias_add_rows(ci->stream, y, b, n, out));
}

void cbe_linear_bwd(cdl_backend *be, int n, int in, int out, const float *x, const float *w,
                    const float *dy, float *dx, float *dw, float *db, float *ws)
{
    cbe *ci = cbe_of(be);
    (void)ws;
    if (n <= 0 || out <= 0 || in <= 0)
        return;
    cbe_enter(ci);
    const uint64_t a[] = {(uint64_t)n, (uint64_t)in, (uint64_t)out, sigp(x), sigp(w), sigp(dy),
                          sigp(dx), sigp(dw), sigp(db)};
    const void *dyn;
    if (cbe_graph_op(ci, "linear_bwd", cbe_sig(OPSIG_LINEAR_BWD, a, 9), NULL, 0, &dyn))
        return;
    const float one = 1.0f, zero = 0.0f;
    if (dx && CUBLAS_CHECK(ci, cublasSgemm(ci->blas, CUBLAS_OP_N, CUBLAS_OP_N, in, n, out, &one, w,
                                           in, dy, out, &zero, dx, in)))
        return;
    if (dw && CUBLAS_CHECK(ci, cublasSgemm(ci->blas, CUBLAS_OP_N, CUBLAS_OP_T, in, out, n, &one, x,
                                           in, dy, out, &zero, dw, in)))
        return;
    if (db)
        CU_CHECK(ci, cuk_bias_grad_rows(ci->stream, dy, db, n, out));
}
