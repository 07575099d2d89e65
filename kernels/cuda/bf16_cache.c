/* The bf16 copies of weight matrices for bf16 matrix products (linear.c).
 *
 * Each weight matrix the backend has seen in a bf16 product has one bf16
 * buffer here, keyed by the fp32 weight's device address and size. The
 * forward op casts the weight into it (once per forward, so every step
 * sees the optimizer's latest fp32 master weights); the backward op of the
 * same layer reads it again, the weights being unchanged between a forward
 * and its backward. A buffer is made the first time a weight is seen
 * (cudaMalloc: the first, eager step of a training run; never inside a
 * captured graph step) and dropped when the block holding the weight is
 * freed (memory.c), so the cache follows the models living on the backend.
 * Models have tens of weight matrices: a plain array is enough. */
#include <stdlib.h>

#include "kernels/cuda/impl.h"

uint16_t *cbe_bf16_weight(cbe *ci, const float *w, size_t n, int *fresh)
{
    *fresh = 0;
    for (size_t i = 0; i < ci->nbf16; i++)
        if (ci->bf16[i].w == w && ci->bf16[i].n == n)
            return ci->bf16[i].bf;
    const char *mode = cbe_graph_busy(ci);
    if (mode) {
        cbe_fail(ci, "CUDA backend: a linear layer's bf16 weights (%zu values at %p) first seen "
                 "during CUDA graph %s: run one step eagerly before capturing, so the bf16 "
                 "weight cache is made outside the graph", n, (const void *)w, mode);
        return NULL;
    }
    if (ci->nbf16 == ci->cap_bf16) {
        size_t cap = ci->cap_bf16 ? 2 * ci->cap_bf16 : 32;
        cbe_bf16_entry *nb = realloc(ci->bf16, cap * sizeof *nb);
        if (!nb) {
            cbe_fail(ci, "CUDA backend: out of host memory for the bf16 weight cache");
            return NULL;
        }
        ci->bf16 = nb;
        ci->cap_bf16 = cap;
    }
    uint16_t *bf = NULL;
    if (CU_CHECK(ci, cudaMalloc((void **)&bf, n * sizeof *bf)))
        return NULL;
    ci->bf16[ci->nbf16++] = (cbe_bf16_entry){w, n, bf};
    *fresh = 1;
    return bf;
}

void cbe_bf16_forget(cbe *ci, const void *base, size_t bytes)
{
    uintptr_t lo = (uintptr_t)base, hi = lo + bytes;
    size_t j = 0;
    for (size_t i = 0; i < ci->nbf16; i++) {
        uintptr_t a = (uintptr_t)ci->bf16[i].w;
        if (a >= lo && a < hi)
            (void)cudaFree(ci->bf16[i].bf);
        else
            ci->bf16[j++] = ci->bf16[i];
    }
    ci->nbf16 = j;
}

void cbe_bf16_clear(cbe *ci)
{
    for (size_t i = 0; i < ci->nbf16; i++)
        (void)cudaFree(ci->bf16[i].bf);
    free(ci->bf16);
    ci->bf16 = NULL;
    ci->nbf16 = ci->cap_bf16 = 0;
}
