/* CPU binding plans from hwloc topologies (see bind.h). */
#ifdef HAVE_HWLOC
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/dist/bind.h"

#define fail contract_errorf

int bind_load(hwloc_topology_t *topo, const char *xml_path, int with_io, contract_err *e)
{
    if (hwloc_topology_init(topo) != 0)
        return fail(e, "hwloc: cannot initialise a topology");
    if (xml_path && *xml_path && hwloc_topology_set_xml(*topo, xml_path) != 0) {
        hwloc_topology_destroy(*topo);
        return fail(e, "topology=%s: hwloc cannot read this XML file", xml_path);
    }
    hwloc_topology_set_io_types_filter(*topo, with_io ? HWLOC_TYPE_FILTER_KEEP_IMPORTANT
                                                      : HWLOC_TYPE_FILTER_KEEP_NONE);
    if (hwloc_topology_load(*topo) != 0) {
        hwloc_topology_destroy(*topo);
        return fail(e, "hwloc: cannot load the topology%s%s", xml_path && *xml_path ? " " : "",
                         xml_path ? xml_path : "");
    }
    return 0;
}

int bind_check_node(hwloc_topology_t topo, int online, const char *xml_path, contract_err *e)
{
    int pus = hwloc_bitmap_weight(hwloc_topology_get_topology_cpuset(topo));
    if (online <= 0 || pus == online)
        return 0;
    return fail(e, "topology=%s describes a machine with %d CPUs, this node has %d online: the "
                "file must be `lstopo --of xml` of a node like this one, run outside any job "
                "(or leave topology= out to probe each node)", xml_path ? xml_path : "", pus,
                online);
}

static int is_nvidia_gpu(hwloc_obj_t o)
{
    return o->type == HWLOC_OBJ_PCI_DEVICE && o->attr->pcidev.vendor_id == 0x10de &&
           (o->attr->pcidev.class_id >> 8) == 0x03;
}

static int pci_cmp(const void *a, const void *b)
{
    const struct hwloc_pcidev_attr_s *x = &(*(hwloc_obj_t const *)a)->attr->pcidev;
    const struct hwloc_pcidev_attr_s *y = &(*(hwloc_obj_t const *)b)->attr->pcidev;
    unsigned long kx = ((unsigned long)x->domain << 24) | ((unsigned)x->bus << 16) |
                       ((unsigned)x->dev << 8) | x->func;
    unsigned long ky = ((unsigned long)y->domain << 24) | ((unsigned)y->bus << 16) |
                       ((unsigned)y->dev << 8) | y->func;
    return kx < ky ? -1 : kx > ky;
}

hwloc_obj_t bind_gpu(hwloc_topology_t topo, int k)
{
    hwloc_obj_t o = NULL, found = NULL, gpus[64];
    int nvml = 0, n = 0;
    char want[32];
    if (k < 0)
        return NULL;
    snprintf(want, sizeof want, "nvml%d", k);
    while ((o = hwloc_get_next_osdev(topo, o)) != NULL) {
        if (!o->name || strncmp(o->name, "nvml", 4))
            continue;
        nvml = 1;
        if (!strcmp(o->name, want))
            found = o;
    }
    if (nvml)
        return found;
    o = NULL;
    while ((o = hwloc_get_next_pcidev(topo, o)) != NULL && n < 64)
        if (is_nvidia_gpu(o))
            gpus[n++] = o;
    qsort(gpus, (size_t)n, sizeof gpus[0], pci_cmp);
    return k < n ? gpus[k] : NULL;
}

/* The allowed part of each core (or of each PU when hwloc knows no cores). */
struct units {
    int n;
    hwloc_cpuset_t *set;
};

static int units_get(hwloc_topology_t topo, hwloc_const_cpuset_t allowed, struct units *u,
                     contract_err *e)
{
    hwloc_obj_type_t t = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE) > 0 ? HWLOC_OBJ_CORE
                                                                           : HWLOC_OBJ_PU;
    int total = hwloc_get_nbobjs_by_type(topo, t);
    u->n = 0;
    u->set = calloc((size_t)(total > 0 ? total : 1), sizeof *u->set);
    if (!u->set)
        return fail(e, "out of memory");
    for (int i = 0; i < total; i++) {
        hwloc_obj_t c = hwloc_get_obj_by_type(topo, t, (unsigned)i);
        hwloc_cpuset_t s = hwloc_bitmap_alloc();
        hwloc_bitmap_and(s, c->cpuset, allowed);
        if (hwloc_bitmap_iszero(s))
            hwloc_bitmap_free(s);
        else
            u->set[u->n++] = s;
    }
    return 0;
}

static void units_free(struct units *u)
{
    for (int i = 0; i < u->n; i++)
        hwloc_bitmap_free(u->set[i]);
    free(u->set);
}

/* Units whose CPUs lie in `near`, as a bitmap of unit indexes. */
static void domain_of(const struct units *u, hwloc_const_cpuset_t near, hwloc_bitmap_t dom)
{
    hwloc_bitmap_zero(dom);
    for (int i = 0; i < u->n; i++)
        if (hwloc_bitmap_intersects(u->set[i], near))
            hwloc_bitmap_set(dom, (unsigned)i);
}

/* Whole cores that do not divide evenly between k tasks, while their PUs
 * do: srun -n2 -c3 under CR_CPU on a node with 2 threads a core gives the
 * step 3 cores (6 PUs), and whole-core blocks gave one task 1 core (2 PUs)
 * and the other 2 (4 PUs), where Slurm granted each 3. Then the PUs, in
 * core order, are cut into equal blocks instead (one core is split between
 * neighbours). Only with no more tasks than cores: more tasks share cores
 * as before (contract_share). */
static int even_pus(const struct units *u, const int *idx, int nu, int k)
{
    int pus = 0;
    if (k > nu || nu % k == 0)
        return 0;
    for (int x = 0; x < nu; x++)
        pus += hwloc_bitmap_weight(u->set[idx[x]]);
    return pus > nu && pus % k == 0;
}

/* Task j of k: PUs [j*P/k, (j+1)*P/k) of the units' PUs in unit order. */
static void share_pus(const struct units *u, const int *idx, int nu, int j, int k,
                      hwloc_cpuset_t out)
{
    int pus = 0, at = 0;
    for (int x = 0; x < nu; x++)
        pus += hwloc_bitmap_weight(u->set[idx[x]]);
    int lo = j * (pus / k), hi = lo + pus / k, pu;
    for (int x = 0; x < nu; x++) {
        hwloc_bitmap_foreach_begin(pu, u->set[idx[x]]) {
            if (at >= lo && at < hi)
                hwloc_bitmap_set(out, (unsigned)pu);
            at++;
        }
        hwloc_bitmap_foreach_end();
    }
}

int bind_plan(hwloc_topology_t topo, hwloc_const_cpuset_t allowed, enum bind_mode mode,
              int ntasks, const int *task_gpu, hwloc_cpuset_t *out, char *note, size_t notelen,
              contract_err *e)
{
    struct units u;
    hwloc_bitmap_t *dom;
    int rc = -1;
    if (note && notelen)
        note[0] = '\0';
    if (ntasks < 1)
        return fail(e, "no local tasks to bind");
    if (units_get(topo, allowed, &u, e) != 0)
        return -1;
    if (u.n == 0) {
        units_free(&u);
        return fail(e, "the allowed CPUs are not in the topology");
    }
    dom = calloc((size_t)ntasks, sizeof *dom);
    if (!dom) {
        units_free(&u);
        return fail(e, "out of memory");
    }
    for (int t = 0; t < ntasks; t++) {
        dom[t] = hwloc_bitmap_alloc();
        hwloc_obj_t gpu = NULL;
        if (mode == BIND_CLOSEST) {
            int g = task_gpu ? task_gpu[t] : -1;
            gpu = bind_gpu(topo, g);
            if (!gpu && note && !note[0])
                snprintf(note, notelen, g < 0 ? "no GPU assigned: binding as with cores"
                                              : "GPU %d not found in the topology: binding as "
                                                "with cores", g);
        }
        if (gpu) {
            hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(topo, gpu);
            for (; anc; anc = anc->parent) {
                domain_of(&u, anc->cpuset, dom[t]);
                if (!hwloc_bitmap_iszero(dom[t]))
                    break;
            }
        }
        if (hwloc_bitmap_iszero(dom[t]))
            hwloc_bitmap_set_range(dom[t], 0, u.n - 1);
    }
    /* Tasks with the same domain split it in local-rank order. */
    for (int t = 0; t < ntasks; t++) {
        int k = 0, j = 0, idx[1024], nu = 0;
        for (int s = 0; s < ntasks; s++)
            if (hwloc_bitmap_isequal(dom[s], dom[t])) {
                if (s < t)
                    j++;
                k++;
            }
        int i;
        hwloc_bitmap_foreach_begin(i, dom[t]) {
            if (nu < 1024)
                idx[nu++] = i;
        }
        hwloc_bitmap_foreach_end();
        int lo, hi;
        hwloc_bitmap_zero(out[t]);
        if (even_pus(&u, idx, nu, k)) {
            share_pus(&u, idx, nu, j, k, out[t]);
            continue;
        }
        contract_share(j, k, nu, &lo, &hi);
        for (int x = lo; x < hi && x < nu; x++)
            hwloc_bitmap_or(out[t], out[t], u.set[idx[x]]);
    }
    rc = 0;
    for (int t = 0; t < ntasks; t++)
        hwloc_bitmap_free(dom[t]);
    free(dom);
    units_free(&u);
    return rc;
}

/* "0-3,8" as a bitmap; -1 unless it is such a list of numbers below 1<<16. */
static int core_list(const char *s, hwloc_bitmap_t out)
{
    hwloc_bitmap_zero(out);
    while (*s) {
        char *end;
        unsigned long lo, hi;
        if (*s < '0' || *s > '9')
            return -1;
        lo = hi = strtoul(s, &end, 10);
        if (*end == '-') {
            if (end[1] < '0' || end[1] > '9')
                return -1;
            hi = strtoul(end + 1, &end, 10);
        }
        if (hi < lo || hi >= 1u << 16 || (*end && *end != ','))
            return -1;
        hwloc_bitmap_set_range(out, (unsigned)lo, (int)hi);
        s = *end ? end + 1 : end;
        if (*end && !*s)
            return -1;   /* a trailing comma */
    }
    return hwloc_bitmap_iszero(out) ? -1 : 0;
}

int bind_slurm_cores(hwloc_topology_t topo, hwloc_cpuset_t allowed, const char *cores,
                     char *note, size_t notelen)
{
    hwloc_const_cpuset_t all = hwloc_topology_get_topology_cpuset(topo);
    int ncores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE), rc = 0;
    if (note && notelen)
        note[0] = '\0';
    /* Already a part of the node: Slurm's binding or the step's cpuset.
     * A topology without some of the node's CPUs was loaded inside a
     * cpuset (hwloc leaves out the CPUs a process may not use) or on a
     * node with offline CPUs: its core numbers need not be Slurm's. */
    if (!cores || !*cores || !hwloc_bitmap_isincluded(all, allowed) ||
        !hwloc_bitmap_isequal(all, hwloc_topology_get_complete_cpuset(topo)))
        return 0;
    hwloc_bitmap_t ids = hwloc_bitmap_alloc(), set = hwloc_bitmap_alloc();
    const char *why = NULL;
    if (core_list(cores, ids) != 0)
        why = "cannot read them";
    else if (ncores < 1)
        why = "the topology shows no cores";
    else if (hwloc_bitmap_last(ids) >= ncores)
        why = "the topology has fewer cores: slurm.conf describes another machine";
    if (why) {
        if (note && notelen)
            snprintf(note, notelen, "Slurm's cores %.40s not used (%s): binding within all "
                     "the node's CPUs", cores, why);
        goto out;
    }
    int i;
    hwloc_bitmap_foreach_begin(i, ids) {
        hwloc_obj_t c = hwloc_get_obj_by_type(topo, HWLOC_OBJ_CORE, (unsigned)i);
        hwloc_bitmap_or(set, set, c->cpuset);
    }
    hwloc_bitmap_foreach_end();
    hwloc_bitmap_and(set, set, allowed);
    if (!hwloc_bitmap_iszero(set) && !hwloc_bitmap_isequal(set, allowed)) {
        hwloc_bitmap_copy(allowed, set);
        rc = 1;
    }
out:
    hwloc_bitmap_free(ids);
    hwloc_bitmap_free(set);
    return rc;
}

void bind_one_pu_per_core(hwloc_topology_t topo, hwloc_cpuset_t allowed)
{
    hwloc_bitmap_t keep = hwloc_bitmap_alloc(), part = hwloc_bitmap_alloc();
    hwloc_obj_t c = NULL;
    if (hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE) < 1)
        goto out;   /* no cores known: every PU counts as one */
    while ((c = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_CORE, c)) != NULL) {
        hwloc_bitmap_and(part, c->cpuset, allowed);
        int first = hwloc_bitmap_first(part);
        if (first >= 0)
            hwloc_bitmap_set(keep, (unsigned)first);
    }
    /* PUs outside any core (none in hwloc 2) stay as they were. */
    hwloc_bitmap_andnot(part, allowed, hwloc_topology_get_topology_cpuset(topo));
    hwloc_bitmap_or(allowed, keep, part);
out:
    hwloc_bitmap_free(keep);
    hwloc_bitmap_free(part);
}

int bind_count_units(hwloc_topology_t topo, hwloc_const_cpuset_t allowed)
{
    struct units u;
    contract_err e;
    if (units_get(topo, allowed, &u, &e) != 0)
        return 0;
    int n = u.n;
    units_free(&u);
    return n;
}

void bind_describe(hwloc_topology_t topo, hwloc_const_cpuset_t set, char *buf, size_t len)
{
    hwloc_bitmap_t cores = hwloc_bitmap_alloc();
    char c[256], p[256];
    hwloc_obj_t o = NULL;
    while ((o = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_CORE, o)) != NULL)
        if (hwloc_bitmap_intersects(o->cpuset, set))
            hwloc_bitmap_set(cores, o->logical_index);
    hwloc_bitmap_list_snprintf(c, sizeof c, cores);
    hwloc_bitmap_list_snprintf(p, sizeof p, set);
    snprintf(buf, len, "cores %s (PUs %s)", hwloc_bitmap_iszero(cores) ? "-" : c, p);
    hwloc_bitmap_free(cores);
}
#endif /* HAVE_HWLOC */
