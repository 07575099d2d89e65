/* A saved topology of tests/topologies for the binding tests. */
#ifndef CDL_TOPO_TESTUTIL_H
#define CDL_TOPO_TESTUTIL_H

#include <stdio.h>

#include "lib/dist/bind.h"
#include "testutil.h"

/* tests/topologies/NAME loaded as bind_load does (with_io: its GPUs and
 * other I/O devices too); fails the test with bind_load's message. */
static inline hwloc_topology_t test_topology(const char *name, int with_io)
{
    char rel[128], path[512];
    hwloc_topology_t t;
    snprintf(rel, sizeof rel, "tests/topologies/%s", name);
    test_path(rel, path, sizeof path);
    contract_err e;
    if (bind_load(&t, path, with_io, &e) != 0)
        fail_msg("%s", e.msg);
    return t;
}

#endif
