/* Token embedding and the broadcast add of learned positions (backend.h's
 * embedding_fwd/bwd, bcast_add_fwd/bwd), like kernels/cpu/embedding.c.
 *
 * embedding_bwd must be deterministic although rows share ids: one thread
 * per column of dw walks the rows in order (dw[id][j] += dy[r][j]), so
 * each element is summed in row order, bit for bit the CPU's, with no
 * atomics. Adjacent threads touch adjacent columns (coalesced); the
 * parallelism is d threads, a sequential walk over the rows (8 rows'
 * loads in flight at a time).
 * bcast_add_bwd: one thread per column of db, rows in order.
 */
#include "kernels/cuda/cuk.cuh"

static __global__ void emb_fwd_kernel(size_t total, int d, const float *ids, const float *w,
                                      float *y)
{
    CUK_GRID_STRIDE(i, total) {
        size_t r = i / (size_t)d, j = i % (size_t)d;
        y[i] = w[(size_t)ids[r] * d + j];
    }
}

/* Rows go 8 at a time: their ids and dy values are loaded first (8 loads
 * in flight instead of one), then added in row order. */
#define EMB_UNROLL 8

static __global__ void emb_bwd_kernel(int rows, int d, const float *ids, const float *dy,
                                      float *dw)
{
    CUK_GRID_STRIDE(j, (size_t)d) {
        int r = 0;
        for (; r + EMB_UNROLL <= rows; r += EMB_UNROLL) {
            size_t at[EMB_UNROLL];
            float v[EMB_UNROLL];
            for (int k = 0; k < EMB_UNROLL; k++) {
                at[k] = (size_t)ids[r + k] * d + j;
                v[k] = dy[(size_t)(r + k) * d + j];
            }
            for (int k = 0; k < EMB_UNROLL; k++)
                dw[at[k]] += v[k];
        }
        for (; r < rows; r++)
            dw[(size_t)ids[r] * d + j] += dy[(size_t)r * d + j];
    }
}

static __global__ void bcast_fwd_kernel(size_t total, size_t m, const float *x, const float *b,
                                        float *y)
{
    CUK_GRID_STRIDE(i, total)
        y[i] = x[i] + b[i % m];
}

static __global__ void colsum_kernel(int n, size_t m, const float *dy, float *db)
{
    CUK_GRID_STRIDE(j, m) {
        float s = dy[j];
        for (int i = 1; i < n; i++)
            s += dy[(size_t)i * m + j];
        db[j] = s;
    }
}

extern "C" cudaError_t cuk_embedding_fwd(cudaStream_t s, int rows, int d, const float *ids,
                                         const float *w, float *y)
{
    size_t total = (size_t)rows * d;
    CUK_LAUNCH(emb_fwd_kernel, cuk_blocks(total), CUK_THREADS, s, total, d, ids, w, y);
    return cudaGetLastError();
}

extern "C" cudaError_t cuk_embedding_bwd(cudaStream_t s, int rows, int d, const float *ids,
                                         const float *dy, float *dw)
{
    CUK_LAUNCH(emb_bwd_kernel, cuk_blocks((size_t)d), CUK_THREADS, s, rows, d, ids, dy, dw);
    return cudaGetLastError();
}

extern "C" cudaError_t cuk_bcast_add_fwd(cudaStream_t s, int n, size_t m, const float *x,
                                         const float *b, float *y)
{
    size_t total = (size_t)n * m;
    CUK_LAUNCH(bcast_fwd_kernel, cuk_blocks(total), CUK_THREADS, s, total, m, x, b, y);
    return cudaGetLastError();
}

extern "C" cudaError_t cuk_bcast_add_bwd(cudaStream_t s, int n, size_t m, const float *dy,
                                         float *db)
{
    CUK_LAUNCH(colsum_kernel, cuk_blocks(m), CUK_THREADS, s, n, m, dy, db);
    return cudaGetLastError();
}
