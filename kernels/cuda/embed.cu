/* Token embedding and the broadcast add of learned positions (backend.h's
 * embedding_fwd/bwd, bcast_add_fwd/bwd), like kernels/cpu/embedding.c.
 *
 * embedding_bwd must be deterministic although rows share ids: every
 * element dw[v][j] must be the CPU's dw[v][j] + dy[r1][j] + dy[r2][j] + ...
 * over the rows r1 < r2 < ... holding id v, in that order, bit for bit,
 * whatever the scheduling. Two kernels, no atomics:
 * - rank: the rows sorted by (id, row). Row r's place in that order is
 *   #(rows with a smaller id) + #(earlier rows with the same id); every
 *   thread counts both over all ids (read through shared-memory tiles) and
 *   writes order[place] = r. O(rows^2) compares, but only compares: 8192
 *   rows (GPT-2 small, 8 x 1024) are 67M, tens of microseconds, and the
 *   result is unique (keys are distinct), so it needs no stable sort and
 *   no vocabulary-sized scratch. Scratch: rows ints (the backend's, grown
 *   outside graph capture: ops_seq.c).
 * - sum: one block per place in the order and per EMB_COLS columns; the
 *   block at the first place of an id (the place before holds another id)
 *   walks that id's rows in row order, adding each dy row to its running
 *   dw[v][j] (threads over adjacent columns: coalesced); blocks at other
 *   places exit. The parallelism is (distinct ids) x (d / EMB_COLS)
 *   blocks; the serial walk is the id's count (a frequent token's few
 *   hundred rows, not all rows as a per-column walk was).
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

/* Ids per shared-memory tile of the rank kernel (its block size). */
#define EMB_TILE 256
/* Columns per block of the sum kernel (its block size). */
#define EMB_COLS 128

static __global__ void emb_rank_kernel(int rows, const float *ids, int *order)
{
    __shared__ int tile[EMB_TILE];
    int r = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    int v = r < rows ? (int)ids[r] : 0;
    int before = 0;   /* rows with a smaller id, or the same id earlier */
    for (int t0 = 0; t0 < rows; t0 += EMB_TILE) {
        int t = t0 + (int)threadIdx.x;
        tile[threadIdx.x] = t < rows ? (int)ids[t] : 0;
        __syncthreads();
        int n = rows - t0 < EMB_TILE ? rows - t0 : EMB_TILE;
        for (int k = 0; k < n; k++) {
            int w = tile[k];
            before += (w < v) | ((w == v) & (t0 + k < r));
        }
        __syncthreads();
    }
    if (r < rows)
        order[before] = r;
}

static __global__ void emb_sum_kernel(int rows, int d, const float *ids, const int *order,
                                      const float *dy, float *dw)
{
    int p = (int)blockIdx.x;
    int v = (int)ids[order[p]];
    if (p > 0 && (int)ids[order[p - 1]] == v)
        return;   /* not the id's first place: the block at it sums */
    int j = (int)(blockIdx.y * blockDim.x + threadIdx.x);
    if (j >= d)
        return;
    float *out = dw + (size_t)v * d + j;
    float acc = *out;
    for (int q = p; q < rows; q++) {
        int r = order[q];
        if ((int)ids[r] != v)
            break;
        acc += dy[(size_t)r * d + j];
    }
    *out = acc;
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
                                         const float *dy, float *dw, int *order)
{
    unsigned tiles = (unsigned)((rows + EMB_TILE - 1) / EMB_TILE);
    CUK_LAUNCH(emb_rank_kernel, tiles, EMB_TILE, s, rows, ids, order);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return e;
    dim3 grid((unsigned)rows, (unsigned)((d + EMB_COLS - 1) / EMB_COLS));
    CUK_LAUNCH(emb_sum_kernel, grid, EMB_COLS, s, rows, d, ids, order, dy, dw);
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
