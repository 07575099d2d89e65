/* Aligned allocation with a counter, so tests can prove that a training step
 * allocates nothing. */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <cdl/cdl.h>

static atomic_uint_fast64_t alloc_count;

void *cdl_malloc(size_t bytes)
{
    void *p = NULL;
    size_t rounded = (bytes + 63) & ~(size_t)63;
    if (rounded < bytes || posix_memalign(&p, 64, rounded ? rounded : 64) != 0) {
        cdl_error("out of memory allocating %zu bytes: reduce --batch-size or the model size", bytes);
        return NULL;
    }
    atomic_fetch_add_explicit(&alloc_count, 1, memory_order_relaxed);
    return p;
}

void *cdl_calloc(size_t n, size_t size)
{
    if (size && n > SIZE_MAX / size) {
        cdl_error("allocation of %zu x %zu bytes overflows", n, size);
        return NULL;
    }
    void *p = cdl_malloc(n * size);
    if (p)
        memset(p, 0, n * size);
    return p;
}

void cdl_free(void *p)
{
    free(p);
}

uint64_t cdl_alloc_count(void)
{
    return atomic_load_explicit(&alloc_count, memory_order_relaxed);
}
