/* Synchronous gradient averaging: one allreduce of the whole flat gradient
 * buffer after backward. (Bucketed, overlapped averaging replaces this.) */
#include <cdl/cdl.h>

#include "ddp.h"

struct ddp {
    cdl_dist *dist;
    cdl_model *model;
};

ddp *ddp_create(cdl_dist *d, cdl_model *m, size_t bucket_bytes)
{
    (void)bucket_bytes;
    ddp *g = cdl_calloc(1, sizeof *g);
    if (!g)
        return NULL;
    g->dist = (d && cdl_dist_world(d) > 1) ? d : NULL;
    g->model = m;
    return g;
}

void ddp_free(ddp *g)
{
    cdl_free(g);
}

int ddp_broadcast_params(ddp *g)
{
    if (!g->dist)
        return 0;
    return cdl_dist_broadcast(g->dist, cdl_model_params(g->model),
                              cdl_model_nparams(g->model) * sizeof(float), 0);
}

void ddp_grad_ready(void *g, size_t offset, size_t count)
{
    (void)g;
    (void)offset;
    (void)count;
}

int ddp_finish(ddp *g)
{
    if (!g->dist)
        return 0;
    return cdl_dist_allreduce(g->dist, cdl_model_grads(g->model), cdl_model_nparams(g->model), 1);
}
