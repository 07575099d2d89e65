/* The AVX-512 twin of attn.c's AVX2 register-tile product (attn_avx512.c). */
#ifndef KERNELS_CPU_ATTN_AVX512_H
#define KERNELS_CPU_ATTN_AVX512_H

#include <stddef.h>

/* How the causal mask limits a product C (M x N) = A (M x K) B (K x N)
 * whose rows are tiled by 4 (row tile r .. r+3, off = the block's first
 * query row):
 *   ATTN_ALL    every term;
 *   ATTN_UPPER  C is a score block (rows = queries off+r.., columns = keys):
 *               column tiles past the tile's last query are not computed
 *               (nor written: every reader zeroes a row past its query);
 *   ATTN_KEYS   K runs over keys: only k <= off + r + 3 (P, dS are 0 past it);
 *   ATTN_QUERY  rows are keys s, K runs over the block's queries: only
 *               off + k >= r (P, dS are 0 before). */
enum { ATTN_ALL, ATTN_UPPER, ATTN_KEYS, ATTN_QUERY };

/* C (M x N, ldc) (+)= A (M x K) B (K x N, row stride ldb) under the mask
 * rule `mask` for a block starting at query row off, A(r, k) at
 * A[r ars + k acs]; only where cpu_has_avx512(). */
void attn512_gemm(int M, int N, int K, const float *A, size_t ars, size_t acs, const float *B,
                  size_t ldb, float *C, size_t ldc, int acc, int mask, int off);

#endif
