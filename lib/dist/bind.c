/* CPU binding plans from hwloc topologies (see bind.h). */
#ifdef HAVE_HWLOC
#include <stdarg.h>
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
    /* The node's numbering even inside a cpuset (slurmstepd in a step's
     * cgroup, cdlrun in a job's): hwloc left out the CPUs the process may
     * not use, and its core 0 was the first allowed one, not Slurm's core
     * 0. What a task may use comes from its affinity, never from here. */
    hwloc_topology_set_flags(*topo, HWLOC_TOPOLOGY_FLAG_INCLUDE_DISALLOWED);
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

/* Appends a remark to the plan's note ("; " between remarks). */
static void note_add(char *note, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void note_add(char *note, size_t len, const char *fmt, ...)
{
    size_t used;
    va_list ap;
    if (!note || !len)
        return;
    used = strlen(note);
    if (used && used + 2 < len) {
        memcpy(note + used, "; ", 3);
        used += 2;
    }
    if (used + 1 >= len)
        return;
    va_start(ap, fmt);
    vsnprintf(note + used, len - used, fmt, ap);
    va_end(ap);
}

/* Whole cores that do not divide evenly between k tasks, while their PUs
 * do: srun -n2 -c3 under CR_CPU on a node with 2 threads a core gives the
 * step 3 cores (6 PUs), and whole-core blocks gave one task 1 core (2 PUs)
 * and the other 2 (4 PUs), where Slurm granted each 3. Then the PUs, in
 * core order, are cut into equal blocks instead (one core is split between
 * neighbours). */
static int even_pus(const struct units *u, const int *idx, int nu, int k)
{
    int pus = 0;
    if (k > nu || nu % k == 0)
        return 0;
    for (int x = 0; x < nu; x++)
        pus += hwloc_bitmap_weight(u->set[idx[x]]);
    return pus > nu && pus % k == 0;
}

/* Task j of k: the j-th balanced block of the units' PUs in unit order. */
static void share_pus(const struct units *u, const int *idx, int nu, int j, int k,
                      hwloc_cpuset_t out)
{
    int pus = 0, at = 0, pu, lo, hi;
    for (int x = 0; x < nu; x++)
        pus += hwloc_bitmap_weight(u->set[idx[x]]);
    contract_share(j, k, pus, &lo, &hi);
    for (int x = 0; x < nu; x++) {
        hwloc_bitmap_foreach_begin(pu, u->set[idx[x]]) {
            if (at >= lo && at < hi)
                hwloc_bitmap_set(out, (unsigned)pu);
            at++;
        }
        hwloc_bitmap_foreach_end();
    }
}

/* The m-th of the PUs of set in order, m from 0. */
static int nth_pu(hwloc_const_cpuset_t set, int m)
{
    int pu = hwloc_bitmap_first(set);
    while (m-- > 0 && pu >= 0)
        pu = hwloc_bitmap_next(set, pu);
    return pu;
}

/* Cuts units idx[0..nu-1] between k tasks, tasks[0..k-1] in that order:
 * balanced blocks of whole cores, or equal blocks of PUs where cores do
 * not divide evenly but PUs do (even_pus). With more tasks than cores the
 * tasks are spread over the cores in balanced runs and the tasks of one
 * core split its PUs (two tasks on a core of 2 PUs: one each; whole-core
 * blocks gave both tasks both PUs, doubling them up while the step's
 * other threads idled); only with more tasks on a core than it has PUs do
 * neighbours share one (consecutive local ranks share a GPU, so they also
 * share caches). */
static void split_units(const struct units *u, const int *idx, int nu, const int *tasks, int k,
                        hwloc_cpuset_t *out)
{
    /* Equal PUs only over all the allowed cores (Slurm's grant): a part
     * of them (closest's domains) is cut by whole cores. */
    int even = nu == u->n && even_pus(u, idx, nu, k);
    for (int j = 0; j < k; j++)
        hwloc_bitmap_zero(out[tasks[j]]);
    if (k > nu) {
        for (int x = 0; x < nu; x++) {
            hwloc_const_cpuset_t core = u->set[idx[x]];
            int first = (int)((long)x * k / nu), m = (int)((long)(x + 1) * k / nu) - first;
            int p = hwloc_bitmap_weight(core);
            for (int i = 0; i < m; i++) {
                int lo, hi;
                contract_share(i, m, p, &lo, &hi);
                for (int q = lo; q < hi && q < p; q++)
                    hwloc_bitmap_set(out[tasks[first + i]], (unsigned)nth_pu(core, q));
            }
        }
        return;
    }
    for (int j = 0; j < k; j++) {
        hwloc_cpuset_t o = out[tasks[j]];
        int lo, hi;
        if (even) {
            share_pus(u, idx, nu, j, k, o);
            continue;
        }
        contract_share(j, k, nu, &lo, &hi);
        for (int x = lo; x < hi && x < nu; x++)
            hwloc_bitmap_or(o, o, u->set[idx[x]]);
    }
}

/* Units (indexes into u) lying in obj's cpuset and in `pool`, in order. */
static int units_in(const struct units *u, hwloc_const_cpuset_t cpuset,
                    hwloc_const_bitmap_t pool, int *idx)
{
    int n = 0;
    for (int i = 0; i < u->n; i++)
        if (hwloc_bitmap_isset(pool, (unsigned)i) && hwloc_bitmap_intersects(u->set[i], cpuset))
            idx[n++] = i;
    return n;
}

/* One GPU's tasks, or (gpu NULL) the tasks without a GPU in the topology. */
struct group {
    hwloc_obj_t gpu;   /* the PCI or OS device */
    hwloc_obj_t dom;   /* its locality: lowest non-I/O ancestor with an allowed core */
    int gpu_index, first, k;
};

static int group_cmp(const void *a, const void *b)
{
    const struct group *x = a, *y = b;
    /* GPUs first, the most local domains first; no GPU last. */
    if (!x->gpu != !y->gpu)
        return x->gpu ? -1 : 1;
    if (x->gpu && x->dom->depth != y->dom->depth)
        return x->dom->depth > y->dom->depth ? -1 : 1;
    if (x->gpu && x->dom != y->dom)   /* the GPUs of one domain together */
        return x->dom->logical_index < y->dom->logical_index ? -1 : 1;
    return x->first < y->first ? -1 : x->first > y->first;
}

static void obj_name(hwloc_obj_t o, char *buf, size_t len)
{
    char t[32];
    hwloc_obj_type_snprintf(t, sizeof t, o, 0);
    if (o->type == HWLOC_OBJ_MACHINE)
        snprintf(buf, len, "the whole node");
    else
        snprintf(buf, len, "%s %u", t, o->logical_index);
}

/* closest: the tasks of each GPU get free cores local to it (its domain),
 * the most local domains served first; the GPUs of one domain share it in
 * proportion to their tasks, each GPU's tasks side by side. A domain with
 * fewer free cores than tasks is widened upwards (the nearest free cores
 * first) rather than doubling tasks up while other allowed cores stay
 * idle, and each domain leaves a core for every task still to be placed,
 * so that no two tasks share a core unless there are more tasks than
 * cores. Tasks without a GPU in the topology get the cores left. */
static int plan_closest(hwloc_topology_t topo, const struct units *u, int ntasks,
                        const int *task_gpu, hwloc_cpuset_t *out, char *note, size_t notelen,
                        contract_err *e)
{
    struct group *g = calloc((size_t)ntasks, sizeof *g);
    int *idx = calloc((size_t)u->n, sizeof *idx), *tasks = calloc((size_t)ntasks, sizeof *tasks);
    hwloc_bitmap_t pool = hwloc_bitmap_alloc(), all = hwloc_bitmap_alloc();
    int ng = 0, rc = -1, left = ntasks, missing = 0;
    if (!g || !idx || !tasks || !pool || !all) {
        fail(e, "out of memory");
        goto out;
    }
    hwloc_bitmap_set_range(pool, 0, u->n - 1);
    hwloc_bitmap_copy(all, pool);
    for (int t = 0; t < ntasks; t++) {
        int gi = task_gpu ? task_gpu[t] : -1;
        hwloc_obj_t gpu = bind_gpu(topo, gi);
        int x;
        if (!gpu && !missing++)
            note_add(note, notelen, gi < 0 ? "no GPU assigned: binding as with cores on the "
                     "cores the GPUs' tasks leave" : "GPU %d not found in the topology: binding "
                     "as with cores on the cores the GPUs' tasks leave", gi);
        for (x = 0; x < ng && g[x].gpu != gpu; x++)
            ;
        if (x == ng) {
            g[ng].gpu = gpu;
            g[ng].gpu_index = gpu ? gi : -1;
            g[ng].first = t;
            if (gpu)
                for (hwloc_obj_t a = hwloc_get_non_io_ancestor_obj(topo, gpu); a; a = a->parent)
                    if (units_in(u, a->cpuset, all, idx) > 0) {
                        g[ng].dom = a;
                        break;
                    }
            if (gpu && !g[ng].dom)
                g[ng].dom = hwloc_get_root_obj(topo);
            ng++;
        }
        g[x].k++;
    }
    qsort(g, (size_t)ng, sizeof *g, group_cmp);
    for (int a = 0; a < ng;) {
        /* The groups of one domain (all the GPU-less tasks: one group). */
        int b = a + 1, k = g[a].k, nt = 0;
        while (g[a].gpu && b < ng && g[b].gpu && g[b].dom == g[a].dom)
            k += g[b++].k;
        left -= k;
        hwloc_obj_t dom = g[a].gpu ? g[a].dom : hwloc_get_root_obj(topo);
        /* The cores these tasks may take: their share of the domain's free
         * cores, against the tasks still to come that need some of them
         * (those with too few free cores in their own domain outside this
         * one), at least one a task, and never so many that a task still
         * to come finds no free core at all. */
        int free_n = hwloc_bitmap_weight(pool), need = 0;
        int near = units_in(u, dom->cpuset, pool, idx), nu = near;
        for (int c = b; c < ng;) {
            int d = c + 1, kc = g[c].k;
            while (g[c].gpu && d < ng && g[d].gpu && g[d].dom == g[c].dom)
                kc += g[d++].k;
            hwloc_obj_t dc = g[c].gpu ? g[c].dom : hwloc_get_root_obj(topo);
            int own = 0;
            for (int i = 0; i < u->n; i++)
                own += hwloc_bitmap_isset(pool, (unsigned)i) &&
                       hwloc_bitmap_intersects(u->set[i], dc->cpuset) &&
                       !hwloc_bitmap_intersects(u->set[i], dom->cpuset);
            need += kc > own ? kc - own : 0;
            c = d;
        }
        int fair = (int)((long)near * k / (k + need));
        if (fair < k)
            fair = k;
        if (fair > free_n - left)
            fair = free_n - left;
        if (nu < k && fair > nu && g[a].gpu) {
            /* Too few free cores near these GPUs: the nearest others,
             * rather than two tasks on a core while cores stay idle. */
            hwloc_obj_t w = dom;
            while (w->parent && nu < k && nu < fair) {
                hwloc_obj_t inner = w;
                w = w->parent;
                for (int i = 0; i < u->n && nu < k && nu < fair; i++)
                    if (hwloc_bitmap_isset(pool, (unsigned)i) &&
                        hwloc_bitmap_intersects(u->set[i], w->cpuset) &&
                        !hwloc_bitmap_intersects(u->set[i], inner->cpuset))
                        idx[nu++] = i;
            }
            if (nu > near) {
                char where[64];
                obj_name(w, where, sizeof where);
                note_add(note, notelen, "GPU %d: %d tasks, %d free cores near it: also "
                         "given %d cores farther away (in %s)", g[a].gpu_index, k, near,
                         nu - near, where);
            }
        }
        if (nu > fair && fair > k)
            fair -= fair % k;   /* whole cores for each, the rest to others */
        if (nu > fair)
            nu = fair > 0 ? fair : nu < k ? nu : k;
        if (nu == 0)   /* every core taken (more tasks than cores): share */
            nu = units_in(u, dom->cpuset, all, idx);
        for (int x = a; x < b; x++)
            for (int t = 0; t < ntasks; t++) {
                int gi = task_gpu ? task_gpu[t] : -1;
                if (bind_gpu(topo, gi) == g[x].gpu)
                    tasks[nt++] = t;
            }
        split_units(u, idx, nu, tasks, k, out);
        for (int x = 0; x < nu; x++)
            hwloc_bitmap_clr(pool, (unsigned)idx[x]);
        a = b;
    }
    rc = 0;
out:
    free(g);
    free(idx);
    free(tasks);
    hwloc_bitmap_free(pool);
    hwloc_bitmap_free(all);
    return rc;
}

int bind_plan(hwloc_topology_t topo, hwloc_const_cpuset_t allowed, enum bind_mode mode,
              int ntasks, const int *task_gpu, hwloc_cpuset_t *out, char *note, size_t notelen,
              contract_err *e)
{
    struct units u;
    int rc = 0;
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
    if (mode == BIND_CLOSEST) {
        rc = plan_closest(topo, &u, ntasks, task_gpu, out, note, notelen, e);
    }
    else {
        int *idx = calloc((size_t)u.n, sizeof *idx), *tasks = calloc((size_t)ntasks, sizeof *tasks);
        if (!idx || !tasks)
            rc = fail(e, "out of memory");
        for (int i = 0; !rc && i < u.n; i++)
            idx[i] = i;
        for (int t = 0; !rc && t < ntasks; t++)
            tasks[t] = t;
        if (!rc)
            split_units(&u, idx, u.n, tasks, ntasks, out);
        free(idx);
        free(tasks);
    }
    int pus = 0;
    for (int i = 0; i < u.n; i++)
        pus += hwloc_bitmap_weight(u.set[i]);
    if (rc == 0 && ntasks > u.n)
        note_add(note, notelen, "%d tasks on %d core%s: tasks share cores (%s)", ntasks, u.n,
                 u.n == 1 ? "" : "s",
                 ntasks <= pus ? "one thread each" :
                 "more tasks than CPUs");
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
                     int slurm_threads, char *note, size_t notelen)
{
    hwloc_const_cpuset_t all = hwloc_topology_get_topology_cpuset(topo);
    int ncores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE), rc = 0;
    int npus = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU);
    if (note && notelen)
        note[0] = '\0';
    /* A topology without some of the node's CPUs (offline ones; bind_load
     * keeps those a cpuset leaves out): its numbers need not be Slurm's. */
    if (!cores || !*cores || !hwloc_bitmap_isequal(all, hwloc_topology_get_complete_cpuset(topo)))
        return 0;
    hwloc_bitmap_t ids = hwloc_bitmap_alloc(), set = hwloc_bitmap_alloc();
    const char *why = NULL;
    int last = core_list(cores, ids) == 0 ? hwloc_bitmap_last(ids) : -1;
    /* Slurm counts a PU as a core where slurm.conf gives the node no
     * threads (CPUs=N alone): its one CPU a listed core (slurm_threads 1),
     * or numbers past the cores, are PUs, in Slurm's order (core by core:
     * hwloc's logical PU order). Taken as cores, CPUs 0-1 of one job were
     * cores 0-1 (4 PUs, 2 of them another job's), and CPU 9 was no core. */
    int as_pus = last >= 0 && npus > ncores && ncores > 0 && last < npus &&
                 (slurm_threads == 1 || (slurm_threads == 0 && last >= ncores));
    if (last < 0)
        why = "cannot read them";
    else if (ncores < 1)
        why = "the topology shows no cores";
    else if (!as_pus && last >= ncores)
        why = "the topology has fewer cores: slurm.conf describes another machine";
    if (why) {
        if (note && notelen)
            snprintf(note, notelen, "Slurm's cores %.40s not used (%s): binding within all "
                     "the task's CPUs", cores, why);
        goto out;
    }
    int i;
    hwloc_bitmap_foreach_begin(i, ids) {
        hwloc_obj_t c = hwloc_get_obj_by_type(topo, as_pus ? HWLOC_OBJ_PU : HWLOC_OBJ_CORE,
                                              (unsigned)i);
        hwloc_bitmap_or(set, set, c->cpuset);
    }
    hwloc_bitmap_foreach_end();
    hwloc_bitmap_and(set, set, allowed);
    /* Only ever narrows: the task's own CPUs (a cpuset of the job, or of
     * the step an srun ran inside) are the bound; the step's cores within
     * them keep two steps of one job apart. */
    if (hwloc_bitmap_iszero(set)) {
        if (note && notelen)
            snprintf(note, notelen, "Slurm's %s %.40s are none of the task's CPUs: binding "
                     "within all of them", as_pus ? "CPUs" : "cores", cores);
    }
    else if (!hwloc_bitmap_isequal(set, allowed)) {
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
