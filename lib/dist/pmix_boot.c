/* PMIx: rank discovery from job-level keys and the bootstrap exchange by
 * Put / Commit / Fence (collecting data) / Get. No TCP port is needed.
 *
 * PMIx is initialised once per process and finalised at exit: PMIx counts
 * PMIx_Init calls (Open MPI's MPI_Init makes its own), but after the count
 * drops to zero a second PMIx_Init leaves it broken (MPI_Init then fails
 * with "getting local rank failed"), and mpirun reports a process that exits
 * without PMIx_Finalize. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cdl/cdl.h>

#include "boot.h"
#include "contract.h"
#include "util.h"

int pmix_present(void)
{
#ifdef HAVE_PMIX
    const char *r = getenv("PMIX_RANK"), *ns = getenv("PMIX_NAMESPACE");
    return (r && *r) || (ns && *ns);
#else
    return 0;
#endif
}

#ifndef HAVE_PMIX
int pmix_discover(cdl_rank_info *info)
{
    (void)info;
    return cdl_error("this libcdl was built without PMIx: install libpmix-dev and reconfigure");
}

int pmix_boot_open(boot *b, const cdl_rank_info *info)
{
    (void)b;
    (void)info;
    return cdl_error("this libcdl was built without PMIx: install libpmix-dev and reconfigure");
}
#else
#include <errno.h>
#include <pthread.h>
#include <time.h>

#include <pmix.h>

static int pmix_fail(const char *what, pmix_status_t st)
{
    return cdl_error("PMIx: %s failed: %s; was the job started by a PMIx server "
                     "(srun --mpi=pmix, mpirun)?", what, PMIx_Error_string(st));
}

/* A numeric PMIx value as a long (servers differ in the types they use). */
static int value_long(const pmix_value_t *v, long *out)
{
    switch (v->type) {
    case PMIX_UINT32: *out = (long)v->data.uint32; return 0;
    case PMIX_UINT16: *out = (long)v->data.uint16; return 0;
    case PMIX_UINT8: *out = (long)v->data.uint8; return 0;
    case PMIX_UINT64: *out = (long)v->data.uint64; return 0;
    case PMIX_INT: *out = (long)v->data.integer; return 0;
    case PMIX_INT32: *out = (long)v->data.int32; return 0;
    case PMIX_UINT: *out = (long)v->data.uint; return 0;
    case PMIX_PROC_RANK: *out = (long)v->data.rank; return 0;
    case PMIX_SIZE: *out = (long)v->data.size; return 0;
    default: return -1;
    }
}

static int get_long(const pmix_proc_t *proc, const char *key, long *out)
{
    pmix_value_t *v = NULL;
    pmix_status_t st = PMIx_Get(proc, key, NULL, 0, &v);
    if (st != PMIX_SUCCESS)
        return pmix_fail(key, st);
    int rc = value_long(v, out);
    PMIX_VALUE_RELEASE(v);
    if (rc)
        return cdl_error("PMIx: key %s has an unexpected type", key);
    return 0;
}

static pmix_proc_t self;
static int inited;

static void finalize_at_exit(void)
{
    PMIx_Finalize(NULL, 0);
}

/* PMIx_Init on first use; *me gets this process's name. */
static int pmix_up(pmix_proc_t *me)
{
    if (!inited) {
        pmix_status_t st = PMIx_Init(&self, NULL, 0);
        if (st != PMIX_SUCCESS)
            return pmix_fail("PMIx_Init", st);
        inited = 1;
        atexit(finalize_at_exit);
    }
    *me = self;
    return 0;
}

int pmix_discover(cdl_rank_info *info)
{
    pmix_proc_t me, wild, zero;
    if (pmix_up(&me))
        return -1;
    PMIX_LOAD_PROCID(&wild, me.nspace, PMIX_RANK_WILDCARD);
    PMIX_LOAD_PROCID(&zero, me.nspace, 0);
    long size, local_size, local_rank, nodeid, nnodes = 1;
    int rc = 0;
    if (get_long(&wild, PMIX_JOB_SIZE, &size) || get_long(&wild, PMIX_LOCAL_SIZE, &local_size) ||
        get_long(&me, PMIX_LOCAL_RANK, &local_rank) || get_long(&me, PMIX_NODEID, &nodeid))
        rc = -1;
    if (rc == 0 && get_long(&wild, PMIX_NUM_NODES, &nnodes))
        nnodes = 1;   /* optional: some servers do not provide it */
    if (rc == 0) {
        info->rank = (int)me.rank;
        info->world = (int)size;
        info->local_rank = (int)local_rank;
        info->local_world = (int)local_size;
        info->node_rank = (int)nodeid;
        info->nnodes = (int)(nnodes > 0 ? nnodes : 1);
        pmix_value_t *v = NULL;
        if (PMIx_Get(&zero, PMIX_HOSTNAME, NULL, 0, &v) == PMIX_SUCCESS && v->type == PMIX_STRING)
            snprintf(info->master_addr, sizeof info->master_addr, "%s", v->data.string);
        if (v)
            PMIX_VALUE_RELEASE(v);
        snprintf(info->job_id, sizeof info->job_id, "%.63s", me.nspace);
        const char *s = getenv(CDL_ENV_JOB_ID);
        if (s && *s)
            snprintf(info->job_id, sizeof info->job_id, "%s", s);
        /* Launcher knobs next to PMIx's layout, read as strictly as the contract. */
        long port = 0, rpg = 1;
        contract_err e;
        s = getenv(CDL_ENV_MASTER_PORT);
        if (s && *s && contract_parse_int(CDL_ENV_MASTER_PORT, s, 1, 65535, &port, &e))
            rc = cdl_error("%s", e.msg);
        s = getenv(CDL_ENV_REPLICAS_PER_GPU);
        if (s && *s && contract_parse_int(CDL_ENV_REPLICAS_PER_GPU, s, 1, 4096, &rpg, &e))
            rc = cdl_error("%s", e.msg);
        info->master_port = (int)port;
        info->replicas_per_gpu = (int)rpg;
        info->source = "pmix";
    }
    return rc;
}

typedef struct pmix_boot {
    pmix_proc_t me;
} pmix_boot;

static int pb_put(boot *b, const char *key, const void *val, size_t len)
{
    (void)b;
    pmix_value_t v;
    pmix_byte_object_t bo = {.bytes = (char *)val, .size = len};
    PMIx_Value_load(&v, &bo, PMIX_BYTE_OBJECT);
    pmix_status_t st = PMIx_Put(PMIX_GLOBAL, key, &v);
    PMIx_Value_destruct(&v);
    return st == PMIX_SUCCESS ? 0 : pmix_fail("PMIx_Put", st);
}

/* One fence in flight: PMIx_Fence_nb's callback fills it in PMIx's progress
 * thread. The fence's info stays here until the callback (PMIx reads it
 * while the fence runs); a fence given up on is left to its callback. */
typedef struct fence_wait {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
    pmix_status_t st;
    pmix_info_t info[2];
} fence_wait;

static void fence_done(pmix_status_t st, void *arg)
{
    fence_wait *f = arg;
    pthread_mutex_lock(&f->mu);
    f->st = st;
    f->done = 1;
    pthread_cond_signal(&f->cv);
    pthread_mutex_unlock(&f->mu);
}

/* Which ranks have reached fence `key` (answered[r] = 1): each rank puts
 * and commits "cdl.at<fence>" before entering the fence, and a rank that
 * never did (it never started, stopped, died or lost its node) is the one
 * the fence waits for. PMIx_Get_nb of that key from every rank, waited for
 * at most wait_s: a rank that committed it answers at once (its server
 * holds the value), one that did not never does, or with an error. PMIx
 * itself does not say who is missing from a fence. The probe's memory
 * stays with the callbacks that have not come yet (the last one frees it).
 * -1 when it could not run. */
typedef struct probe {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int outstanding, abandoned;
    unsigned char *answered;
    struct probe_ref {
        struct probe *p;
        int rank;
    } *refs;
} probe;

static void probe_free(probe *p)
{
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    cdl_free(p->answered);
    cdl_free(p->refs);
    cdl_free(p);
}

static void probe_done(pmix_status_t st, pmix_value_t *kv, void *arg)
{
    (void)kv;   /* PMIx's; released when the callback returns */
    struct probe_ref *ref = arg;
    probe *p = ref->p;
    pthread_mutex_lock(&p->mu);
    p->answered[ref->rank] = st == PMIX_SUCCESS;
    int last = --p->outstanding == 0 && p->abandoned;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
    if (last)
        probe_free(p);
}

static int probe_arrivals(const pmix_boot *pb, int world, const char *key, double wait_s,
                          unsigned char *answered)
{
    probe *p = cdl_calloc(1, sizeof *p);
    if (!p)
        return -1;
    p->answered = cdl_calloc((size_t)world, 1);
    p->refs = cdl_calloc((size_t)world, sizeof *p->refs);
    if (!p->answered || !p->refs) {
        cdl_free(p->answered);
        cdl_free(p->refs);
        cdl_free(p);
        return -1;
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&p->cv, &ca);
    pthread_condattr_destroy(&ca);
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    double end = (double)until.tv_sec + until.tv_nsec * 1e-9 + wait_s;
    until.tv_sec = (time_t)end;
    until.tv_nsec = (long)((end - (double)until.tv_sec) * 1e9);
    p->answered[pb->me.rank] = 1;
    for (int r = 0; r < world; r++)
        p->refs[r] = (struct probe_ref){p, r};
    /* All counted first: a callback may come before the next request. */
    p->outstanding = world - 1;
    for (int r = 0; r < world; r++) {
        if (r == (int)pb->me.rank)
            continue;
        pmix_proc_t peer;
        PMIX_LOAD_PROCID(&peer, pb->me.nspace, (pmix_rank_t)r);
        if (PMIx_Get_nb(&peer, key, NULL, 0, probe_done, &p->refs[r]) != PMIX_SUCCESS) {
            pthread_mutex_lock(&p->mu);
            p->outstanding--;   /* refused: no callback comes; not answered */
            pthread_mutex_unlock(&p->mu);
        }
    }
    pthread_mutex_lock(&p->mu);
    int rc = 0;
    while (p->outstanding > 0 && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&p->cv, &p->mu, &until);
    memcpy(answered, p->answered, (size_t)world);
    p->abandoned = 1;
    int none = p->outstanding == 0;
    pthread_mutex_unlock(&p->mu);
    if (none)
        probe_free(p);
    return 0;
}

/* Rank r's node as PMIx's job data gives it (never asked of r's server:
 * that node may be gone), "" when not known. */
static void host_of(const pmix_boot *pb, int r, char *out, size_t len)
{
    pmix_proc_t peer;
    pmix_value_t *v = NULL;
    pmix_info_t opt;
    bool yes = true;
    out[0] = '\0';
    PMIX_LOAD_PROCID(&peer, pb->me.nspace, (pmix_rank_t)r);
    PMIx_Info_load(&opt, PMIX_OPTIONAL, &yes, PMIX_BOOL);
    if (PMIx_Get(&peer, PMIX_HOSTNAME, &opt, 1, &v) == PMIX_SUCCESS && v &&
        v->type == PMIX_STRING && v->data.string) {
        size_t k = dist_plain_len(v->data.string, 255, "._-");
        if (k && k < len)
            snprintf(out, len, "%s", v->data.string);
    }
    if (v)
        PMIX_VALUE_RELEASE(v);
    PMIX_INFO_DESTRUCT(&opt);
}

/* " rank 1 (on n2) did not reach it" or "" when every rank did (or the
 * probe could not run): the ranks that never committed fence `key`, with
 * the distinct nodes of the first few. */
static const char *missing_note(boot *b, const char *key, char *out, size_t len)
{
    pmix_boot *pb = b->impl;
    out[0] = '\0';
    unsigned char *answered = cdl_calloc((size_t)b->world, 1);
    int *missing = cdl_calloc((size_t)b->world, sizeof *missing);
    int n = 0;
    double wait_s = b->timeout < 10 ? b->timeout : 10;
    if (answered && missing && probe_arrivals(pb, b->world, key, wait_s, answered) == 0)
        for (int r = 0; r < b->world; r++)
            if (!answered[r])
                missing[n++] = r;
    if (n > 0) {
        char list[512], hosts[512] = "", h[256], seen[9][256];
        int shown = 0;
        dist_rank_list(list, sizeof list, missing, n);
        for (int i = 0; i < n && i < 9; i++) {
            host_of(pb, missing[i], h, sizeof h);
            int dup = !h[0];
            for (int j = 0; j < shown && !dup; j++)
                dup = !strcmp(seen[j], h);
            if (dup || strlen(hosts) + strlen(h) + 8 >= sizeof hosts)
                continue;
            snprintf(seen[shown], sizeof seen[shown], "%s", h);
            size_t u = strlen(hosts);
            snprintf(hosts + u, sizeof hosts - u, "%s%s", shown++ ? ", " : " (on ", h);
        }
        if (shown)
            snprintf(hosts + strlen(hosts), sizeof hosts - strlen(hosts), ")");
        snprintf(out, len, "%s%s did not reach it (never started, stopped, died or lost %s "
                 "node: see %s own error, if any, and the launcher's)", list, hosts,
                 n == 1 ? "its" : "their", n == 1 ? "its" : "their");
    }
    cdl_free(answered);
    cdl_free(missing);
    return out;
}

/* A fence past CDL_TIMEOUT, whether our own wait or PMIx's PMIX_TIMEOUT
 * ended it first (both are CDL_TIMEOUT: one message, so that what a rank
 * prints does not depend on which timer won). */
static int fence_timed_out(boot *b, const char *key)
{
    char note[1024];
    dist_note_peer_lost();
    if (*missing_note(b, key, note, sizeof note))
        return cdl_error("rank %d: PMIx fence #%ld did not complete within %.0f s "
                         "(CDL_TIMEOUT): %s", b->rank, b->fences, b->timeout, note);
    return cdl_error("rank %d: PMIx fence #%ld did not complete within %.0f s "
                     "(CDL_TIMEOUT): some rank did not arrive, stopped or lost its node "
                     "(PMIx does not say which; see the other ranks' errors)",
                     b->rank, b->fences, b->timeout);
}

/* PMIx_Fence with CDL_TIMEOUT kept by us: Slurm's pmix plugin (22.05)
 * ignores PMIX_TIMEOUT, so a rank that never arrives (stopped, hung before
 * its first fence, its node gone) held the others in PMIx_Fence for good.
 * Before it, each rank commits "cdl.at<fence>": at a timeout the ranks
 * that did not are named (missing_note). */
static int pb_fence(boot *b)
{
    char key[32];
    int32_t here = b->rank;
    snprintf(key, sizeof key, "cdl.at%ld", b->fences);
    if (pb_put(b, key, &here, sizeof here))
        return -1;
    pmix_status_t st = PMIx_Commit();
    if (st != PMIX_SUCCESS)
        return pmix_fail("PMIx_Commit", st);
    fence_wait *f = cdl_calloc(1, sizeof *f);
    if (!f)
        return -1;
    pthread_mutex_init(&f->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&f->cv, &ca);
    pthread_condattr_destroy(&ca);
    bool collect = true;
    int timeout = (int)(b->timeout + 0.999);
    PMIx_Info_load(&f->info[0], PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
    PMIx_Info_load(&f->info[1], PMIX_TIMEOUT, &timeout, PMIX_INT);
    st = PMIx_Fence_nb(NULL, 0, f->info, 2, fence_done, f);
    if (st != PMIX_SUCCESS)   /* done at once (no callback comes), or refused */
        fence_done(st == PMIX_OPERATION_SUCCEEDED ? PMIX_SUCCESS : st, f);
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    double end = (double)until.tv_sec + until.tv_nsec * 1e-9 + b->timeout;
    until.tv_sec = (time_t)end;
    until.tv_nsec = (long)((end - (double)until.tv_sec) * 1e9);
    pthread_mutex_lock(&f->mu);
    int rc = 0, stopped = 0;
    /* In slices when a stop is looked for (boot_open's stop). */
    while (!f->done && rc != ETIMEDOUT && !(stopped = b->stop && b->stop())) {
        struct timespec slice = until;
        if (b->stop) {
            clock_gettime(CLOCK_MONOTONIC, &slice);
            double next = (double)slice.tv_sec + slice.tv_nsec * 1e-9 + 0.1;
            if (next < end) {
                slice.tv_sec = (time_t)next;
                slice.tv_nsec = (long)((next - (double)slice.tv_sec) * 1e9);
            } else {
                slice = until;
            }
        }
        rc = pthread_cond_timedwait(&f->cv, &f->mu, &slice);
        if (rc == ETIMEDOUT && b->stop) {   /* a slice's end, or the fence's */
            struct timespec now;
            clock_gettime(CLOCK_MONOTONIC, &now);
            if ((double)now.tv_sec + now.tv_nsec * 1e-9 < end)
                rc = 0;
        }
    }
    int done = f->done;
    st = f->st;
    pthread_mutex_unlock(&f->mu);
    if (!done && stopped)   /* f stays: the fence may still call back */
        return cdl_error("rank %d was asked to stop while it waited in PMIx fence #%ld; it "
                         "stopped waiting", b->rank, b->fences);
    if (!done)
        return fence_timed_out(b, key);
    PMIX_INFO_DESTRUCT(&f->info[0]);
    PMIX_INFO_DESTRUCT(&f->info[1]);
    pthread_cond_destroy(&f->cv);
    pthread_mutex_destroy(&f->mu);
    cdl_free(f);
    if (st == PMIX_ERR_TIMEOUT)
        return fence_timed_out(b, key);
    return st == PMIX_SUCCESS ? 0 : pmix_fail("PMIx_Fence", st);
}

static int pb_get(boot *b, int rank, const char *key, void *buf, size_t len)
{
    pmix_boot *p = b->impl;
    pmix_proc_t peer;
    PMIX_LOAD_PROCID(&peer, p->me.nspace, (pmix_rank_t)rank);
    pmix_value_t *v = NULL;
    pmix_status_t st = PMIx_Get(&peer, key, NULL, 0, &v);
    if (st != PMIX_SUCCESS)
        return cdl_error("rank %d: PMIx_Get of '%s' from rank %d failed: %s", b->rank, key, rank,
                         PMIx_Error_string(st));
    int rc = 0;
    if (v->type != PMIX_BYTE_OBJECT || v->data.bo.size != len)
        rc = cdl_error("rank %d: PMIx value '%s' of rank %d has %zu bytes, expected %zu "
                       "(ranks of different libcdl versions?)", b->rank, key, rank,
                       v->type == PMIX_BYTE_OBJECT ? v->data.bo.size : 0, len);
    else
        memcpy(buf, v->data.bo.bytes, len);
    PMIX_VALUE_RELEASE(v);
    return rc;
}

static void pb_close(boot *b)
{
    cdl_free(b->impl);
}

static const struct boot_ops pmix_ops = {"pmix", pb_put, pb_fence, pb_get, pb_close};

int pmix_boot_open(boot *b, const cdl_rank_info *info)
{
    pmix_boot *p = cdl_calloc(1, sizeof *p);
    if (!p)
        return -1;
    if (pmix_up(&p->me)) {
        cdl_free(p);
        return -1;
    }
    if ((int)p->me.rank != info->rank) {
        int pr = (int)p->me.rank;
        cdl_free(p);
        return cdl_error("RANK=%d (from %s) differs from the PMIx rank %d: the launcher's "
                         "contract and the PMIx server disagree", info->rank, info->source, pr);
    }
    b->ops = &pmix_ops;
    b->impl = p;
    return 0;
}
#endif
