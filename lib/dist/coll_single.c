/* The collectives of a world of one: nothing to exchange. */
#include <string.h>

#include <cdl/cdl.h>

#include "coll.h"

static int single_allreduce(coll *c, void *buf, size_t n, coll_dtype t, int average)
{
    (void)c, (void)buf, (void)n, (void)t, (void)average;   /* sum of one; average divides by 1 */
    return 0;
}

static int single_broadcast(coll *c, void *buf, size_t bytes, int root)
{
    (void)c, (void)buf, (void)bytes;
    return root == 0 ? 0 : cdl_error("broadcast from rank %d in a world of 1", root);
}

static int single_barrier(coll *c)
{
    (void)c;
    return 0;
}

static int single_allgather(coll *c, const void *in, void *out, size_t bytes)
{
    (void)c;
    memmove(out, in, bytes);
    return 0;
}

static int single_reduce_scatter(coll *c, void *buf, size_t n, coll_dtype t, int average)
{
    return single_allreduce(c, buf, n, t, average);   /* the one part is everything */
}

static int single_allgather_parts(coll *c, void *buf, size_t n, coll_dtype t)
{
    (void)c, (void)buf, (void)n, (void)t;
    return 0;
}

static void single_destroy(coll *c)
{
    cdl_free(c);
}

static const coll_ops single_ops = {
    .name = "single", .allreduce = single_allreduce, .broadcast = single_broadcast,
    .barrier = single_barrier, .allgather = single_allgather, .destroy = single_destroy,
    .reduce_scatter = single_reduce_scatter, .allgather_parts = single_allgather_parts,
};

coll *coll_single_create(void)
{
    coll *c = cdl_calloc(1, sizeof *c);
    if (c)
        *c = (coll){&single_ops, 0, 1, 0};
    return c;
}
