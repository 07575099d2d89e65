/* Hierarchical collectives: `local` among the ranks of a group (a node, or
 * the replicas sharing one GPU) over shared memory, `inter` among the group
 * leaders (local member 0) over mpi, nccl or the store.
 *
 * Allreduce: local sum (shm), leaders sum the group sums (inter), leaders
 * divide by the world size for an average, local broadcast from the leader.
 * Every rank gets the leader's bits; the order is fixed: the groups' sums,
 * each in local-rank order, added in group order. */
#include <string.h>

#include <cdl/cdl.h>

#include "coll.h"
#include "reduce.h"

typedef struct hier {
    coll base;                   /* rank, size: global */
    coll *local, *inter;         /* inter: NULL unless this rank leads its group */
    int group, ngroups, maxlocal;
    int *group_of, *local_of;    /* per global rank */
    long ops;
} hier;

static int h_allreduce(coll *c, void *buf, size_t n, coll_dtype t, int average)
{
    hier *h = (hier *)c;
    if (h->local->ops->allreduce(h->local, buf, n, t, 0))
        return -1;
    if (h->inter) {
        if (h->inter->ops->allreduce(h->inter, buf, n, t, 0))
            return -1;
        if (average)
            reduce_divide(t, buf, n, c->size);
    }
    return h->local->ops->broadcast(h->local, buf, n * coll_dtype_size(t), 0);
}

static int h_broadcast(coll *c, void *buf, size_t bytes, int root)
{
    hier *h = (hier *)c;
    int rg = h->group_of[root];
    if (h->group == rg && h->local->ops->broadcast(h->local, buf, bytes, h->local_of[root]))
        return -1;
    if (h->inter && h->inter->ops->broadcast(h->inter, buf, bytes, rg))
        return -1;
    if (h->group != rg && h->local->ops->broadcast(h->local, buf, bytes, 0))
        return -1;
    return 0;
}

static int h_barrier(coll *c)
{
    hier *h = (hier *)c;
    if (h->local->ops->barrier(h->local))
        return -1;
    if (h->inter && h->inter->ops->barrier(h->inter))
        return -1;
    return h->local->ops->barrier(h->local);
}

/* Local allgather into a group block (maxlocal slots), leaders exchange the
 * blocks, leaders share them locally, then every rank picks rank order. */
static int h_allgather(coll *c, const void *in, void *out, size_t bytes)
{
    hier *h = (hier *)c;
    size_t block = (size_t)h->maxlocal * bytes, all = block * (size_t)h->ngroups;
    char *tmp = cdl_calloc(all + block, 1);
    if (!tmp)
        return -1;
    char *mine = tmp + all;
    int rc = h->local->ops->allgather(h->local, in, mine, bytes);
    if (!rc && h->inter)
        rc = h->inter->ops->allgather(h->inter, mine, tmp, block);
    if (!rc)
        rc = h->local->ops->broadcast(h->local, tmp, all, 0);
    for (int r = 0; !rc && r < c->size; r++)
        memcpy((char *)out + (size_t)r * bytes,
               tmp + (size_t)h->group_of[r] * block + (size_t)h->local_of[r] * bytes, bytes);
    cdl_free(tmp);
    return rc;
}

/* A failure anywhere fails the whole local group at once: a leader whose
 * peers between nodes died must not leave its local ranks waiting; and a
 * leader that gave up tells the other nodes' leaders where it can. */
static void h_abort(coll *c, const char *why)
{
    hier *h = (hier *)c;
    if (h->local->ops->abort)
        h->local->ops->abort(h->local, why);
    if (h->inter && h->inter->ops->abort)
        h->inter->ops->abort(h->inter, why);
}

static void h_destroy(coll *c)
{
    hier *h = (hier *)c;
    h->local->ops->destroy(h->local);
    if (h->inter)
        h->inter->ops->destroy(h->inter);
    cdl_free(h->group_of);
    cdl_free(h);
}

static const coll_ops hier_ops = {
    .name = "hier", .allreduce = h_allreduce, .broadcast = h_broadcast,
    .barrier = h_barrier, .allgather = h_allgather, .abort = h_abort,
    .destroy = h_destroy,
};

coll *coll_hier_create(coll *local, coll *inter, int group, int ngroups, const int *group_of,
                       const int *local_of, int world, int rank)
{
    hier *h = cdl_calloc(1, sizeof *h);
    if (!h)
        return NULL;
    h->group_of = cdl_calloc(2 * (size_t)world, sizeof *h->group_of);
    if (!h->group_of) {
        cdl_free(h);
        return NULL;
    }
    h->local_of = h->group_of + world;
    memcpy(h->group_of, group_of, (size_t)world * sizeof *h->group_of);
    memcpy(h->local_of, local_of, (size_t)world * sizeof *h->local_of);
    for (int r = 0; r < world; r++)
        if (local_of[r] + 1 > h->maxlocal)
            h->maxlocal = local_of[r] + 1;
    h->base = (coll){&hier_ops, rank, world, 0};
    h->local = local;
    h->inter = inter;
    h->group = group;
    h->ngroups = ngroups;
    return &h->base;
}
