/* cdl_dist: picks a collective backend, connects the ranks through the
 * bootstrap and dispatches the public collectives to the backend's vtable.
 *
 * Backends (docs/data-parallel.md): single, shm (one node), mpi (flat Open
 * MPI), nccl (flat, GPUs), hier (shm inside a node or GPU, then mpi, nccl or
 * the TCP store between the leaders). "auto" takes single for one rank, shm
 * for one node, and for several nodes nccl (CUDA), else hier over mpi when
 * an MPI launcher started the job, else hier over the TCP store (slow but
 * correct). */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cdl/cdl.h>


#include "lib/core/sized.h"
#include "lib/core/log.h"

#include "announce.h"
#include "boot.h"
#include "contract.h"
#include "coll.h"
#include "reduce.h"
#include "dist_gpu.h"
#include "gpu_group.h"
#include "util.h"

#define STAGE_BYTES (4u << 20)   /* device <-> host staging, per chunk */

struct cdl_dist {
    cdl_rank_info info;
    cdl_dist_config cfg;         /* as this libcdl's struct, timeout resolved */
    double timeout;
    cdl_backend *be;
    boot *boot;
    store *extra_store;          /* hier over the store when the bootstrap is PMIx */
    int job_rpg;                 /* the largest CDL_REPLICAS_PER_GPU of any rank */
    coll *coll;
    int broken;                  /* a collective failed or was aborted: no peer is waited for */
    void *stage;                 /* STAGE_BYTES of host memory (pinned on a GPU), NULL if not needed */
    char name[32];
    int (*stop)(void);           /* dist_create's: leaves the set-up's waits */
    int stop_status;             /* dist_create's: exit status of a stop in MPI_Init */
};

/* What each rank tells the others at init, to check the layout. */
typedef struct rank_loc {
    int32_t node, local_rank, local_world, nnodes, world, gpu_slot;
    int32_t rpg;                 /* the rank's CDL_REPLICAS_PER_GPU, its node's value */
    unsigned char gpu[16];       /* the GPU's UUID; zero without a CUDA backend */
} rank_loc;

/* The layout all ranks agree on. */
typedef struct layout {
    rank_loc *loc;               /* world entries */
    int *local, nlocal, me_local;   /* global ranks of my local group, by local rank */
    int *leaders, nleaders, me_leader; /* leader of each local group; my index or -1 */
} layout;

static void layout_free(layout *l)
{
    cdl_free(l->loc);
    cdl_free(l->local);
    cdl_free(l->leaders);
}

static int same_group(const rank_loc *a, const rank_loc *b)
{
    return a->node == b->node && a->gpu_slot == b->gpu_slot;
}

/* The contract's GPU groups against the GPUs the ranks opened. */
static int check_gpus(const rank_loc *loc, int w)
{
    gpu_place *p = cdl_calloc((size_t)w, sizeof *p);
    if (!p)
        return -1;
    for (int r = 0; r < w; r++) {
        p[r].node = loc[r].node;
        p[r].local_rank = loc[r].local_rank;
        p[r].replicas_per_gpu = loc[r].rpg;
        memcpy(p[r].uuid, loc[r].gpu, sizeof p[r].uuid);
    }
    int rc = gpu_groups_check(p, w);
    cdl_free(p);
    return rc;
}

/* Gathers every rank's place and checks they describe one layout. Local
 * groups are the ranks of a node (or of one GPU when replicas share it);
 * their leaders are the members with the lowest local rank. by_gpu: groups
 * are GPUs (each node's ranks by its own CDL_REPLICAS_PER_GPU), and the GPUs
 * the ranks opened must match the contract's. */
static int exchange_layout(cdl_dist *d, int by_gpu, layout *l)
{
    const cdl_rank_info *in = &d->info;
    int w = in->world, rpg = in->replicas_per_gpu;
    rank_loc me = {in->node_rank, in->local_rank, in->local_world, in->nnodes, in->world,
                   by_gpu ? contract_gpu_slot(in->local_rank, rpg) : 0, rpg, {0}};
    memset(l, 0, sizeof *l);   /* first: callers layout_free it on every return */
    if (d->be && d->be->ops->device_uuid && cdl_backend_device_uuid(d->be, me.gpu))
        return -1;
    l->loc = cdl_calloc((size_t)w, sizeof *l->loc);
    l->local = cdl_calloc((size_t)w, sizeof *l->local);
    l->leaders = cdl_calloc((size_t)w, sizeof *l->leaders);
    if (!l->loc || !l->local || !l->leaders)
        return -1;
    if (boot_put(d->boot, "loc", &me, sizeof me) || boot_fence(d->boot))
        return -1;
    for (int r = 0; r < w; r++)
        if (boot_get(d->boot, r, "loc", &l->loc[r], sizeof me))
            return -1;
    int *seen = cdl_calloc((size_t)w, sizeof *seen);   /* local rank -> rank+1 on my node */
    if (!seen)
        return -1;
    int rc = 0, count = 0;
    for (int r = 0; r < w && !rc; r++) {
        const rank_loc *o = &l->loc[r];
        if (o->world != w || o->nnodes != in->nnodes)
            rc = cdl_error("rank %d sees WORLD_SIZE=%d and %d nodes, but rank %d sees %d and %d: "
                           "the launcher gave the ranks different layouts (without "
                           CDL_ENV_NNODES " each rank takes WORLD_SIZE / LOCAL_WORLD_SIZE "
                           "nodes, wrong when nodes run different numbers of ranks: export "
                           CDL_ENV_NNODES ")", r, o->world, o->nnodes, in->rank, w, in->nnodes);
        else if (o->node != me.node)
            continue;
        else if (o->local_world != me.local_world)
            rc = cdl_error("ranks %d and %d on node %d disagree on LOCAL_WORLD_SIZE (%d vs %d)", r,
                           in->rank, me.node, o->local_world, me.local_world);
        else if (seen[o->local_rank])
            rc = cdl_error("ranks %d and %d both have LOCAL_RANK=%d on node %d", seen[o->local_rank] - 1,
                           r, o->local_rank, me.node);
        else {
            seen[o->local_rank] = r + 1;
            count++;
        }
    }
    if (!rc && count != me.local_world)
        rc = cdl_error("node %d has %d ranks but LOCAL_WORLD_SIZE=%d: GROUP_RANK/NODE_RANK or "
                       "LOCAL_WORLD_SIZE is wrong for some rank", me.node, count, me.local_world);
    cdl_free(seen);
    if (!rc && by_gpu && d->be && d->be->ops->device_uuid)
        rc = check_gpus(l->loc, w);
    if (rc)
        return -1;
    /* My local group, ordered by local rank. */
    for (int lr = 0; lr < me.local_world; lr++)
        for (int r = 0; r < w; r++)
            if (same_group(&l->loc[r], &me) && l->loc[r].local_rank == lr) {
                if (r == in->rank)
                    l->me_local = l->nlocal;
                l->local[l->nlocal++] = r;
            }
    /* Leaders ordered by (node, gpu slot): rank order for block layouts. */
    l->me_leader = -1;
    for (int r = 0; r < w; r++) {
        int leader = 1;
        for (int q = 0; q < w && leader; q++)
            if (same_group(&l->loc[q], &l->loc[r]) && l->loc[q].local_rank < l->loc[r].local_rank)
                leader = 0;
        if (!leader)
            continue;
        if (r == in->rank)
            l->me_leader = l->nleaders;
        l->leaders[l->nleaders++] = r;
    }
    return 0;
}

/* ------------------------------------------------------------ choosing */

/* The largest CDL_REPLICAS_PER_GPU of all ranks into *out. Nodes may pack
 * differently (a node with one task of a packed step has 1, the others 2),
 * and every rank must choose the same collectives: a flat NCCL world on
 * some ranks and per-GPU groups on the others never meet. Collective over
 * all ranks. */
static int job_replicas_per_gpu(cdl_dist *d, int *out)
{
    int32_t mine = d->info.replicas_per_gpu, v;
    *out = mine;
    if (boot_put(d->boot, "rpg", &mine, sizeof mine) || boot_fence(d->boot))
        return -1;
    for (int r = 0; r < d->info.world; r++) {
        if (boot_get(d->boot, r, "rpg", &v, sizeof v))
            return -1;
        if (v > *out)
            *out = v;
    }
    return 0;
}

static int is_cuda(const cdl_backend *be)
{
    return be && !be->host_memory;
}

/* The names choose() takes: auto, single, shm, mpi, nccl, hier and
 * hier:TRANSPORT. 0, or -1 with an error naming the bad part. */
static int check_name(const char *want)
{
    static const char *const kinds[] = {"auto", "single", "shm", "mpi", "nccl", "hier"};
    const char *colon = strchr(want, ':');
    size_t klen = colon ? (size_t)(colon - want) : strlen(want);
    if (colon && (klen != 4 || strncmp(want, "hier", 4)))
        return cdl_error("dist backend '%s': only hier takes a ':transport'", want);
    if (colon && strcmp(colon + 1, "mpi") && strcmp(colon + 1, "nccl") &&
        strcmp(colon + 1, "store"))
        return cdl_error("dist backend '%s': the transport between nodes is mpi, nccl or "
                         "store", want);
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (strlen(kinds[i]) == klen && !strncmp(want, kinds[i], klen))
            return 0;
    return cdl_error("unknown dist backend '%s': use auto, shm, mpi, nccl, hier (or hier:mpi, "
                     "hier:nccl, hier:store) or single", want);
}

/* Resolves "auto" and checks the others against the layout. */
static int choose(const cdl_dist *d, const char *want, char *kind, char *inter)
{
    const cdl_rank_info *in = &d->info;
    inter[0] = '\0';
    /* The name first: a typo ("ncll") is refused on one rank as on many,
     * not found out only when the job grows. */
    if (check_name(want) != 0)
        return -1;
    if (in->world == 1) {
        strcpy(kind, "single");
        return 0;
    }
    if (!strcmp(want, "auto")) {
        if (in->nnodes == 1 && !(is_cuda(d->be) && d->job_rpg < in->local_world))
            strcpy(kind, "shm");
        else if (is_cuda(d->be) && d->job_rpg == 1)
            strcpy(kind, "nccl");
        else {
            strcpy(kind, "hier");
            strcpy(inter, is_cuda(d->be) ? "nccl" : coll_mpi_available() ? "mpi" : "store");
        }
        return 0;
    }
    const char *colon = strchr(want, ':');
    size_t klen = colon ? (size_t)(colon - want) : strlen(want);
    if (klen >= 16)
        klen = 15;
    memcpy(kind, want, klen);
    kind[klen] = '\0';
    if (!strcmp(kind, "hier")) {
        snprintf(inter, 16, "%s", colon ? colon + 1
                 : is_cuda(d->be) ? "nccl" : coll_mpi_available() ? "mpi" : "store");
        if (!strcmp(inter, "nccl") && !is_cuda(d->be))
            return cdl_error("dist backend hier:nccl joins GPUs with NCCL and needs the cuda "
                             "backend (--device cuda): for CPU training use auto, hier:mpi or "
                             "hier:store");
        return 0;
    }
    if (!strcmp(kind, "shm")) {
        if (in->nnodes > 1)
            return cdl_error("dist backend shm needs all ranks on one node, but there are %d "
                             "nodes: use auto or hier", in->nnodes);
        return 0;
    }
    if (!strcmp(kind, "nccl") && !is_cuda(d->be))
        return cdl_error("dist backend nccl reduces GPU memory and needs the cuda backend "
                         "(--device cuda): for CPU training use auto, shm, mpi or hier");
    /* NCCL hangs or fails at init when two of its ranks share a GPU. */
    if (!strcmp(kind, "nccl") && d->job_rpg > 1)
        return cdl_error("dist backend nccl takes one rank per GPU, but "
                         CDL_ENV_REPLICAS_PER_GPU "=%d packs %d ranks on each%s: use auto or "
                         "hier:nccl (shared memory among the ranks of a GPU, NCCL between "
                         "GPUs)", d->job_rpg, d->job_rpg,
                         d->job_rpg == in->replicas_per_gpu ? "" : " on another node");
    if (!strcmp(kind, "single"))
        return cdl_error("dist backend single needs WORLD_SIZE=1, not %d", in->world);
    return 0;   /* mpi, nccl */
}

/* ------------------------------------------------------------ init */

/* Under PMIx the TCP store (hier:store) needs a secret only the job's ranks
 * know, and the others need its port: rank 0 makes the secret (unless
 * CDL_STORE_TOKEN is set: store_token() takes that one), starts the store,
 * which moves to one of the alternates derived from the secret when
 * another account holds MASTER_PORT, and publishes both through PMIx; the
 * others read them after the fence and connect to that port directly
 * (without PMIx they find a moved store by trying the alternates in turn).
 * Rank 0 publishes port 0 when its store failed, so that the others stop
 * at once. Collective over all ranks. */
typedef struct pmix_store_pub {
    char token[CONTRACT_TOKEN_LEN + 1];   /* "" when CDL_STORE_TOKEN is set */
    char port[8];                         /* decimal; "0": no store */
} pmix_store_pub;

static store *pmix_store_open(cdl_dist *d)
{
    boot *b = d->boot;
    const char *env = getenv(CDL_ENV_STORE_TOKEN);
    int have_env = env && *env;
    pmix_store_pub pub;
    store *st = NULL;
    memset(&pub, 0, sizeof pub);
    if (d->info.rank == 0) {
        contract_err e;
        char err[2048] = "";
        if (!have_env && contract_token_make(pub.token, sizeof pub.token, &e))
            cdl_error("rank 0: %s", e.msg);
        else
            st = store_open_stop(&d->info, have_env ? NULL : pub.token, 0, d->timeout,
                                 d->cfg.store_hello_s, d->stop);
        if (!st)
            snprintf(err, sizeof err, "%s", cdl_last_error());
        snprintf(pub.port, sizeof pub.port, "%d", st ? store_port(st) : 0);
        if (boot_put(b, "cdl.store", &pub, sizeof pub) || boot_fence(b)) {
            store_linger_off(st);
            store_close(st);
            return NULL;
        }
        if (!st)
            cdl_error("%s", err);
        return st;
    }
    if (boot_fence(b) || boot_get(b, 0, "cdl.store", &pub, sizeof pub))
        return NULL;
    pub.token[CONTRACT_TOKEN_LEN] = '\0';
    pub.port[sizeof pub.port - 1] = '\0';
    int port = atoi(pub.port);
    if (port <= 0)
        return cdl_error("rank %d: rank 0 could not start the TCP store of hier:store (its "
                         "error says why)", d->info.rank), NULL;
    return store_open_stop(&d->info, have_env ? NULL : pub.token, port, d->timeout,
                           d->cfg.store_hello_s, d->stop);
}

/* The compute backend's GPU, where NCCL's communicator must live (the
 * thread creating it may have another one current); -1: none known. */
static int backend_gpu(const cdl_dist *d)
{
    return d->be && d->be->ops->device_index ? d->be->ops->device_index(d->be) : -1;
}

static coll *make_hier(cdl_dist *d, const char *inter_kind, int by_gpu)
{
    layout l;
    coll *local = NULL, *inter = NULL, *c = NULL;
    shm_seg *seg = NULL;
    int *node_of = NULL, *local_of = NULL;
    if (exchange_layout(d, by_gpu, &l))
        goto out;
    char tag[32];
    const rank_loc *me = &l.loc[d->info.rank];
    snprintf(tag, sizeof tag, by_gpu ? "n%dg%d" : "n%d", me->node, me->gpu_slot);
    coll_group lg = {l.me_local, l.nlocal, l.local, tag};
    coll_group leaders = {l.me_leader, l.nleaders, l.leaders, "leaders"};
    if (!(seg = shm_prepare(&lg, d->info.job_id, d->boot, &d->cfg)))
        goto out;
    if (!strcmp(inter_kind, "nccl") && l.me_leader == 0 && nccl_prepare(&leaders, d->boot))
        goto out;
    if (boot_fence(d->boot))
        goto out;
    local = shm_attach(seg, d->boot, d->be ? d->be->threads : 1);
    seg = NULL;
    if (!local)
        goto out;
    if (!strcmp(inter_kind, "mpi")) {
        int member;
        inter = coll_mpi_create(&leaders, d->info.rank, d->info.world, d->timeout, &member,
                                d->stop, d->stop_status);
        if (!inter && member)
            goto out;
    } else if (l.me_leader >= 0 && !strcmp(inter_kind, "nccl")) {
        if (!(inter = coll_nccl_create(&leaders, d->boot, backend_gpu(d), 1, d->timeout, NULL)))
            goto out;
    } else if (!strcmp(inter_kind, "store")) {
        store *st = boot_store(d->boot);
        if (!st)
            st = d->extra_store = pmix_store_open(d);
        if (!st)
            goto out;
        if (l.me_leader >= 0 && !(inter = coll_store_create(&leaders, st)))
            goto out;
    }
    /* Groups by node for the hierarchy's bookkeeping. */
    node_of = cdl_calloc((size_t)d->info.world, sizeof *node_of);
    local_of = cdl_calloc((size_t)d->info.world, sizeof *local_of);
    if (!node_of || !local_of)
        goto out;
    for (int r = 0; r < d->info.world; r++) {
        for (int g = 0; g < l.nleaders; g++)
            if (same_group(&l.loc[l.leaders[g]], &l.loc[r]))
                node_of[r] = g;
        /* Rank r's place in its group, by its own node's packing. */
        int rpg_r = l.loc[r].rpg > 0 ? l.loc[r].rpg : 1;
        local_of[r] = l.loc[r].local_rank - (by_gpu ? l.loc[r].gpu_slot * rpg_r : 0);
    }
    c = coll_hier_create(local, inter, node_of[d->info.rank], l.nleaders, node_of, local_of,
                         d->info.world, d->info.rank);
    if (c)
        local = inter = NULL;
out:
    if (seg)
        shm_seg_discard(seg);
    /* Failed after the node's group attached (the transport between nodes
     * did not come up here): the group's other members must not wait for
     * this rank in their first collective. */
    if (local && local->ops->abort)
        local->ops->abort(local, cdl_last_error());
    if (local)
        local->ops->destroy(local);
    if (inter)
        inter->ops->destroy(inter);
    cdl_free(node_of);
    cdl_free(local_of);
    layout_free(&l);
    return c;
}

static coll *make_shm(cdl_dist *d)
{
    layout l;
    coll *c = NULL;
    if (exchange_layout(d, 0, &l) == 0) {
        coll_group g = {l.me_local, l.nlocal, l.local, "n0"};
        shm_seg *seg = shm_prepare(&g, d->info.job_id, d->boot, &d->cfg);
        if (seg && boot_fence(d->boot) == 0)
            c = shm_attach(seg, d->boot, d->be ? d->be->threads : 1);
        else
            shm_seg_discard(seg);
    }
    layout_free(&l);
    return c;
}

static coll *make_flat(cdl_dist *d, const char *kind)
{
    int *all = cdl_calloc((size_t)d->info.world, sizeof *all);
    if (!all)
        return NULL;
    for (int r = 0; r < d->info.world; r++)
        all[r] = r;
    coll_group g = {d->info.rank, d->info.world, all, "world"};
    coll *c = NULL;
    if (!strcmp(kind, "mpi")) {
        int member;
        c = coll_mpi_create(&g, d->info.rank, d->info.world, d->timeout, &member, d->stop,
                            d->stop_status);
    } else {
        /* NCCL hangs when two of its ranks share a GPU: refuse that first. */
        layout l;
        int ok = exchange_layout(d, 1, &l) == 0;
        layout_free(&l);
        if (ok && nccl_prepare(&g, d->boot) == 0 && boot_fence(d->boot) == 0)
            c = coll_nccl_create(&g, d->boot, backend_gpu(d), 0, d->timeout,
                                 cdl_backend_stream(d->be));
    }
    cdl_free(all);
    return c;
}

/* cfg as this libcdl's struct: fields a caller built against an older,
 * smaller one does not know keep their defaults. */
static int read_config(const cdl_dist_config *in, cdl_dist_config *out)
{
    cdl_dist_config_init(out);
    if (!in)
        return 0;
    return sized_read(in, out, sizeof *out,
                      offsetof(cdl_dist_config, store_hello_s) + sizeof in->store_hello_s,
                      "cdl_dist_config", "cdl_dist_config_init");
}

cdl_dist *cdl_dist_create(const cdl_rank_info *info, const char *backend, cdl_backend *be,
                          double timeout_s)
{
    cdl_dist_config cfg;
    cdl_dist_config_init(&cfg);
    cfg.timeout_s = timeout_s;
    return cdl_dist_create_with(info, backend, be, &cfg);
}

cdl_dist *cdl_dist_create_with(const cdl_rank_info *info, const char *backend, cdl_backend *be,
                               const cdl_dist_config *cfg)
{
    return dist_create(info, backend, be, cfg, 1, NULL, 1);
}

cdl_dist *cdl_dist_create_stoppable(const cdl_rank_info *info, const char *backend,
                                    cdl_backend *be, const cdl_dist_config *cfg,
                                    int (*stop)(void))
{
    return dist_create(info, backend, be, cfg, 1, stop, 1);
}

/* The bootstrap compares the ranks' cdl releases (boot.c); MPI's ranks,
 * started without one (an mpirun without PMIx), compare them over MPI itself. */
static int mpi_release_agree(cdl_dist *d)
{
    int w = d->info.world, rc = 0;
    boot_release me, *all = cdl_calloc((size_t)w, sizeof *all);
    if (!all)
        return -1;
    boot_release_of(&me, cdl_version());
    if (d->coll->ops->allgather(d->coll, &me, all, sizeof me))
        rc = -1;
    for (int r = d->info.rank == 0 ? 1 : 0; !rc && r < (d->info.rank == 0 ? w : 1); r++)
        rc = boot_release_compare(d->info.rank, &me, r, &all[r]);
    cdl_free(all);
    return rc;
}

cdl_dist *dist_create(const cdl_rank_info *info, const char *backend, cdl_backend *be,
                      const cdl_dist_config *cfg, int announce, int (*stop)(void),
                      int stop_status)
{
    dist_clear_peer_lost();   /* a new world: an old loss says nothing of it */
    if (!info) {
        cdl_error("cdl_dist_create: info is NULL: fill a cdl_rank_info with cdl_rank_discover");
        return NULL;
    }
    cdl_dist *d = cdl_calloc(1, sizeof *d);
    if (!d)
        return NULL;
    d->info = *info;
    d->be = be;
    d->stop = stop;
    d->stop_status = stop_status;
    char kind[16], inter[16];
    if (read_config(cfg, &d->cfg) || dist_resolve_timeout(d->cfg.timeout_s, &d->timeout))
        goto fail;
    d->cfg.timeout_s = d->timeout;
    const char *want = backend && *backend ? backend : "auto";
    /* GPUs on several nodes: the choice depends on every node's packing. */
    d->job_rpg = info->replicas_per_gpu;
    if (is_cuda(be) && info->world > 1 && info->nnodes > 1 && strcmp(want, "mpi") &&
        strcmp(want, "single") &&
        (!(d->boot = boot_open(info, d->timeout, d->cfg.store_hello_s, stop)) ||
         job_replicas_per_gpu(d, &d->job_rpg)))
        goto fail;
    if (choose(d, want, kind, inter))
        goto fail;
    if (!strcmp(kind, "single")) {
        d->coll = coll_single_create();
    } else {
        /* mpi needs no bootstrap, but under PMIx it gets one first: MPI_Init's
         * own fence has no timeout (srun --mpi=pmix waits for a rank that never
         * comes for good), the bootstrap's keeps CDL_TIMEOUT. */
        if ((strcmp(kind, "mpi") || pmix_present()) && !d->boot &&
            !(d->boot = boot_open(info, d->timeout, d->cfg.store_hello_s, stop)))
            goto fail;
        if (!strcmp(kind, "shm"))
            d->coll = make_shm(d);
        else if (!strcmp(kind, "hier"))
            d->coll = make_hier(d, inter, is_cuda(be) && d->job_rpg > 1);
        else
            d->coll = make_flat(d, kind);
    }
    if (!d->coll || (!d->boot && info->world > 1 && mpi_release_agree(d)))
        goto fail;
    if (inter[0])
        snprintf(d->name, sizeof d->name, "%s:%s", kind, inter);
    else
        snprintf(d->name, sizeof d->name, "%s", kind);
    /* Device buffers reach host collectives through a page-locked stage:
     * faster copies, and the same buffer every time. */
    if (is_cuda(be) && !d->coll->device_memory &&
        !(d->stage = cdl_backend_host_alloc(be, STAGE_BYTES)))
        goto fail;
    /* Set up: a stop asked from here on (SIGTERM during training) lets the
     * step end and its checkpoint be written over the same stores. */
    boot_stop_off(d->boot);
    store_stop_off(d->extra_store);
    if (announce && info->rank == 0 && info->world > 1)
        log_line(CDL_LOG_INFO, stderr,
                 "cdl: rank 0: collectives over %s (%d ranks, %d node%s, bootstrap %s)", d->name, info->world, info->nnodes, info->nnodes == 1 ? "" : "s",
                d->boot ? boot_kind(d->boot) : "mpi");
    return d;
fail:
    {
        char msg[2048];
        snprintf(msg, sizeof msg, "%s", cdl_last_error());
        d->broken = 1;   /* rank 0's store must not wait for peers that wait for it */
        cdl_dist_destroy(d);
        cdl_error("%s", msg);
    }
    return NULL;
}

void cdl_dist_destroy(cdl_dist *d)
{
    if (!d)
        return;
    if (d->coll)
        d->coll->ops->destroy(d->coll);
    if (d->broken) {   /* a rank that hangs would hold rank 0's exit for CDL_TIMEOUT */
        store_linger_off(d->extra_store);
        if (d->boot)
            store_linger_off(boot_store(d->boot));
    }
    store_close(d->extra_store);
    boot_close(d->boot);
    if (d->stage)
        cdl_backend_host_free(d->be, d->stage);
    cdl_free(d);
}

int cdl_dist_rank(const cdl_dist *d)
{
    return d->info.rank;
}

int cdl_dist_world(const cdl_dist *d)
{
    return d->info.world;
}

const char *cdl_dist_backend_name(const cdl_dist *d)
{
    return d->name;
}

/* ------------------------------------------------------------ dispatch */

static int staged(const cdl_dist *d)
{
    return d->stage != NULL;
}

/* After a failed collective: tell the peers that wait for this rank. */
static int failed(cdl_dist *d)
{
    d->broken = 1;
    if (d->coll->ops->abort)
        d->coll->ops->abort(d->coll, cdl_last_error());
    return -1;
}

/* The public collectives refuse a NULL cdl_dist (a cdl_dist_create that
 * failed, or a single process that made none) with an error. */
#define NEED_DIST(d)                                                                               \
    do {                                                                                           \
        if (!(d))                                                                                  \
            return cdl_error("%s: the cdl_dist is NULL (did cdl_dist_create fail?)", __func__);   \
    } while (0)

int cdl_dist_allreduce(cdl_dist *d, float *buf, size_t n, int average)
{
    NEED_DIST(d);
    if (!staged(d))
        return d->coll->ops->allreduce(d->coll, buf, n, COLL_F32, average) ? failed(d) : 0;
    /* Device memory through host chunks: element-wise, so the fixed order holds. */
    size_t per = STAGE_BYTES / sizeof(float);
    cdl_backend *be = d->be;
    for (size_t off = 0; off < n; off += per) {
        size_t m = n - off < per ? n - off : per;
        be->ops->to_host(be, d->stage, buf + off, m * sizeof(float));
        if (be->ops->sync(be) || d->coll->ops->allreduce(d->coll, d->stage, m, COLL_F32, average))
            return failed(d);
        be->ops->to_device(be, buf + off, d->stage, m * sizeof(float));
    }
    return be->ops->sync(be);
}

int cdl_dist_allreduce_f64(cdl_dist *d, double *buf, size_t n)
{
    NEED_DIST(d);
    return d->coll->ops->allreduce(d->coll, buf, n, COLL_F64, 0) ? failed(d) : 0;
}

int cdl_dist_broadcast(cdl_dist *d, void *buf, size_t bytes, int root)
{
    NEED_DIST(d);
    if (root < 0 || root >= d->info.world)
        return cdl_error("broadcast root %d is not a rank (world of %d)", root, d->info.world);
    if (!staged(d))
        return d->coll->ops->broadcast(d->coll, buf, bytes, root) ? failed(d) : 0;
    cdl_backend *be = d->be;
    char *p = buf;
    for (size_t off = 0; off < bytes; off += STAGE_BYTES) {
        size_t m = bytes - off < STAGE_BYTES ? bytes - off : STAGE_BYTES;
        if (d->info.rank == root)
            be->ops->to_host(be, d->stage, p + off, m);
        if (be->ops->sync(be) || d->coll->ops->broadcast(d->coll, d->stage, m, root))
            return failed(d);
        if (d->info.rank != root)
            be->ops->to_device(be, p + off, d->stage, m);
    }
    return be->ops->sync(be);
}

int cdl_dist_barrier(cdl_dist *d)
{
    NEED_DIST(d);
    return d->coll->ops->barrier(d->coll) ? failed(d) : 0;
}

int cdl_dist_allgather(cdl_dist *d, const void *in, void *out, size_t bytes)
{
    NEED_DIST(d);
    return d->coll->ops->allgather(d->coll, in, out, bytes) ? failed(d) : 0;
}

/* ------------------------------------------------------------ ZeRO-1 */

void cdl_dist_shard(size_t n, int world, int rank, size_t *lo, size_t *hi)
{
    shard_part(n, world > 0 ? world : 1, rank, lo, hi);
}

/* The native parts need host buffers and the top group's member order to
 * be the ranks' (flat backends); otherwise the generic path. */
static int native_parts(const cdl_dist *d)
{
    return !staged(d) && d->coll->rank == d->info.rank && d->coll->size == d->info.world;
}

int cdl_dist_reduce_scatter(cdl_dist *d, float *buf, size_t n, int average)
{
    NEED_DIST(d);
    if (!native_parts(d) || !d->coll->ops->reduce_scatter)
        return cdl_dist_allreduce(d, buf, n, average);
    return d->coll->ops->reduce_scatter(d->coll, buf, n, COLL_F32, average) ? failed(d) : 0;
}

int cdl_dist_allgather_shards(cdl_dist *d, float *buf, size_t n)
{
    NEED_DIST(d);
    if (native_parts(d) && d->coll->ops->allgather_parts)
        return d->coll->ops->allgather_parts(d->coll, buf, n, COLL_F32) ? failed(d) : 0;
    /* Each owner broadcasts its part: the traffic of an allgather. */
    for (int r = 0; r < d->info.world; r++) {
        size_t lo, hi;
        cdl_dist_shard(n, d->info.world, r, &lo, &hi);
        if (hi > lo && cdl_dist_broadcast(d, buf + lo, (hi - lo) * sizeof(float), r) != 0)
            return -1;
    }
    return 0;
}

/* ------------------------------------------------- queued on the GPU */

int dist_can_enqueue(const cdl_dist *d)
{
    return d && d->be && cdl_backend_stream(d->be) && d->coll->device_memory &&
           d->coll->ops->enqueue_allreduce && d->coll->ops->join && d->coll->ops->poll;
}

int dist_enqueue_allreduce(cdl_dist *d, float *dev, size_t n)
{
    if (!dist_can_enqueue(d))
        return cdl_error("dist backend %s cannot queue allreduces on the GPU", d->name);
    return d->coll->ops->enqueue_allreduce(d->coll, dev, n, COLL_F32, 1,
                                           cdl_backend_stream(d->be)) ? failed(d) : 0;
}

int dist_can_enqueue_shards(const cdl_dist *d)
{
    /* Roots are members of the top group: they must be the ranks. */
    return dist_can_enqueue(d) && d->coll->ops->enqueue_broadcast &&
           d->coll->rank == d->info.rank && d->coll->size == d->info.world;
}

int dist_enqueue_allgather_shards(cdl_dist *d, float *dev, size_t n)
{
    if (!dist_can_enqueue_shards(d))
        return cdl_error("dist backend %s cannot queue the parameter allgather on the GPU",
                         d->name);
    for (int r = 0; r < d->info.world; r++) {
        size_t lo, hi;
        cdl_dist_shard(n, d->info.world, r, &lo, &hi);
        if (hi > lo && d->coll->ops->enqueue_broadcast(d->coll, dev + lo, (hi - lo) * sizeof(float),
                                                       r, cdl_backend_stream(d->be)))
            return failed(d);
    }
    return 0;
}

int dist_enqueue_join(cdl_dist *d)
{
    return d->coll->ops->join(d->coll, cdl_backend_stream(d->be)) ? failed(d) : 0;
}

int dist_enqueue_poll(cdl_dist *d)
{
    return d->coll->ops->poll(d->coll) ? failed(d) : 0;
}

void dist_abort(cdl_dist *d, const char *why)
{
    if (d)
        d->broken = 1;
    if (d && d->coll && d->coll->ops->abort)
        d->coll->ops->abort(d->coll, why);
}

double dist_timeout(const cdl_dist *d)
{
    return d->timeout;
}
