/* Stand-ins for the backends this libcdl was built without. */
#include <cdl/cdl.h>

#include "coll.h"

#ifndef HAVE_MPI
coll *coll_mpi_create(const coll_group *g, int world_rank, int world, double timeout_s,
                      int *member, int (*stop)(void), int stop_status)
{
    (void)g, (void)world_rank, (void)world, (void)timeout_s, (void)stop, (void)stop_status;
    *member = 1;
    cdl_error("this libcdl was built without MPI: install libopenmpi-dev and reconfigure, or "
              "use the shm or hier:store dist backend");
    return NULL;
}
#endif

#ifndef HAVE_NCCL
int nccl_prepare(const coll_group *g, boot *b)
{
    (void)g, (void)b;
    return cdl_error("this libcdl was built without NCCL: reconfigure with --with-cuda and NCCL");
}

coll *coll_nccl_create(const coll_group *g, boot *b, int device, int host_buffers,
                       double timeout_s, void *compute_stream)
{
    (void)g, (void)b, (void)device, (void)host_buffers, (void)timeout_s, (void)compute_stream;
    cdl_error("this libcdl was built without NCCL: reconfigure with --with-cuda and NCCL");
    return NULL;
}
#endif
