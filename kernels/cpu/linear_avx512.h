/* The AVX-512 products of linear.c (linear_avx512.c): the AVX2 path's
 * tiles at twice the width, with each result element summed in the same
 * order (start, then one FMA per k in order), so the bits equal the AVX2
 * path's. Only where cpu_has_avx512(); columns a multiple of 16. */
#ifndef KERNELS_CPU_LINEAR_AVX512_H
#define KERNELS_CPU_LINEAR_AVX512_H

#include <stddef.h>

/* Rows of a tile: chunks of the row split are whole multiples of it. */
#define LIN512_MR 8

/* What a fused product (linear.c) does with rows [r0, r1) of its result C
 * (cols columns) once they are complete, while they are still in cache;
 * NULL: nothing. */
typedef struct lin_epi lin_epi;
void lin_epi_rows(const lin_epi *ep, float *C, int cols, int r0, int r1);

/* C rows [r0, r1) (cols columns, row stride cols) = bias (or 0) + A rows
 * (K long, stride lda) times B, whose column block j (16 wide) is at
 * B + j * bstep with rows ldb apart; then ep over each block of rows. */
void lin512_rows(int r0, int r1, int K, const float *A, size_t lda, const float *B, size_t bstep,
                 size_t ldb, float *C, int cols, const float *bias, const lin_epi *ep);

/* dw rows [o0, o1), columns [j0, j1) (multiples of 16, or in) = dy^T x
 * over the n batch rows (dy is n x out, x is n x in). */
void lin512_dw_rows(int o0, int o1, int j0, int j1, int n, int in, int out, const float *dy,
                    const float *x, float *dw);

#endif
