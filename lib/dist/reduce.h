/* The fixed-order reduction every backend shares, so shm, mpi and the store
 * fallback give the same bits: element i is x0[i] + x1[i] + ... + x(w-1)[i],
 * summed left to right, then divided by w for an average. */
#ifndef CDL_DIST_REDUCE_H
#define CDL_DIST_REDUCE_H

#include <stddef.h>

#include "coll.h"

/* Member i's part [lo, hi) of m elements split over `size` members, with
 * boundaries on 64-byte lines (no false sharing between writers). */
void reduce_part(size_t m, int size, int i, size_t esize, size_t *lo, size_t *hi);

/* Part i of n elements sharded over `size` members (ZeRO-1, cdl_dist_shard):
 * equal parts of ceil(n / size) rounded up to SHARD_ALIGN elements, the
 * last ones shorter or empty. Aligned so that every part starts on a
 * 256-byte boundary of the buffer: an elementwise kernel over a part then
 * takes each element through the same (vector or tail) path as over the
 * whole buffer. */
#define SHARD_ALIGN 64
void shard_part(size_t n, int size, int i, size_t *lo, size_t *hi);

/* out[lo,hi) = sum over j < w of x_j[lo,hi), where x_j = base + j * stride
 * bytes; divided by w when average. out may not alias the inputs. */
void reduce_strided(coll_dtype t, void *out, const void *base, size_t stride, int w, size_t lo,
                    size_t hi, int average);

/* The same sum over w arrays x[j][0..n), written to out (not aliasing any
 * x) and to also (which may be one of the x, element for element). */
void reduce_into2(coll_dtype t, void *out, void *also, const void *const *x, int w, size_t n,
                  int average);

/* acc[i] += x[i] (one more term of the left-to-right sum). */
void reduce_add(coll_dtype t, void *acc, const void *x, size_t n);
/* acc[i] /= w. */
void reduce_divide(coll_dtype t, void *acc, size_t n, int w);

#endif
