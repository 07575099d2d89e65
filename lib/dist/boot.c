/* The bootstrap dispatcher: PMIx when a PMIx server started the job (no
 * port needed), else the TCP store. Store keys are "<rank>/<key>". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cdl/cdl.h>

#include "boot.h"
#include "contract.h"
#include "util.h"

static int st_put(boot *b, const char *key, const void *val, size_t len)
{
    char k[256];
    snprintf(k, sizeof k, "%d/%s", b->rank, key);
    return store_set(b->st, k, val, len, 0);
}

static int st_fence(boot *b)
{
    char name[32];
    snprintf(name, sizeof name, "fence%ld", b->fences);
    return store_barrier(b->st, name);
}

static int st_get(boot *b, int rank, const char *key, void *buf, size_t len)
{
    char k[256];
    snprintf(k, sizeof k, "%d/%s", rank, key);
    size_t got;
    if (store_get(b->st, k, rank, buf, len, &got))
        return -1;
    if (got != len)
        return cdl_error("rank %d: value '%s' of rank %d has %zu bytes, expected %zu (ranks of "
                         "different libcdl builds?)", b->rank, key, rank, got, len);
    return 0;
}

static void st_close(boot *b)
{
    store_close(b->st);
}

static const struct boot_ops store_ops = {"store", st_put, st_fence, st_get, st_close};

void boot_release_of(boot_release *r, const char *release)
{
    memset(r, 0, sizeof *r);
    int n = snprintf(r->release, sizeof r->release, "cdl %s (rank contract %d)", release,
                     CDL_CONTRACT_VERSION);
    if (n > 0 && (size_t)n + 1 < sizeof r->release)
        snprintf(r->release + n + 1, sizeof r->release - (size_t)n - 1, "%s", cdl_build_id());
    const char *node = getenv("SLURMD_NODENAME");
    if (node && *node)
        snprintf(r->host, sizeof r->host, "%s", node);
    else if (gethostname(r->host, sizeof r->host - 1) != 0)
        snprintf(r->host, sizeof r->host, "?");
}

const char *boot_release_build(const boot_release *r)
{
    size_t n = strnlen(r->release, sizeof r->release);
    if (n + 1 >= sizeof r->release)
        return "";
    /* From another process: a plain id, whole, else none. */
    const char *b = r->release + n + 1;
    return dist_plain_len(b, sizeof r->release - n - 1, "._+-") ? b : "";
}

/* " (build v0.1.0-72-g755e68e)", or "" when r has no build id. */
static const char *build_note(const boot_release *r, char *buf, size_t len)
{
    const char *b = boot_release_build(r);
    if (*b)
        snprintf(buf, len, " (build %s)", b);
    else if (len)
        buf[0] = '\0';
    return buf;
}

/* Ranks of one job running different cdl releases (a $HOME install
 * shadowing the site's on some nodes, a node upgraded mid-job) would
 * otherwise exchange layouts, tensors and checkpoints whose meaning differs
 * and train garbage or hang later, naming no cause. Rank 0 compares every
 * rank's release with its own, every other rank its own with rank 0's:
 * both sides of a difference say it, with the nodes. */
int boot_release_compare(int rank, const boot_release *me, int other_rank,
                         const boot_release *other)
{
    boot_release o = *other;   /* from another process: terminated here */
    o.release[sizeof o.release - 1] = o.host[sizeof o.host - 1] = '\0';
    dist_printable(o.release, sizeof o.release);
    dist_printable(o.host, sizeof o.host);
    if (!strcmp(o.release, me->release))
        return 0;
    int mine = rank != 0;   /* the message names the non-zero rank first */
    const boot_release *them = mine ? &o : me, *it = mine ? me : &o;
    char b1[96], b0[96];
    return cdl_error("rank %d (on %s) runs %s%s but rank 0 (on %s) runs %s%s: every rank of a "
                     "job must run the same cdl release; see which cdl-train and libcdl.so "
                     "each node finds (PATH, LD_LIBRARY_PATH, a $HOME/.local install "
                     "shadowing the site's; cdl-train --version prints it)",
                     mine ? rank : other_rank, it->host, it->release,
                     build_note(it, b1, sizeof b1), them->host, them->release,
                     build_note(them, b0, sizeof b0));
}

static int agree_release(boot *b, const char *release)
{
    boot_release me, other;
    boot_release_of(&me, release);
    if (boot_put(b, "cdl.release", &me, sizeof me) || boot_fence(b))
        return -1;
    int differ = 0;
    for (int r = b->rank == 0 ? 1 : 0; r < (b->rank == 0 ? b->world : 1) && !differ; r++) {
        if (boot_get(b, r, "cdl.release", &other, sizeof other))
            return cdl_error("%s (rank %d runs a cdl release that does not publish its version, "
                             "older than this %s?)", cdl_last_error(), r, me.release);
        differ = boot_release_compare(b->rank, &me, r, &other);
    }
    /* Everyone has read rank 0's record before rank 0 may stop its store. */
    if (boot_fence(b))
        return -1;
    return differ;
}

static boot *open_boot(const cdl_rank_info *info, double timeout_s, double hello_s,
                       const char *release, int (*stop)(void));

boot *boot_open(const cdl_rank_info *info, double timeout_s, double hello_s,
                int (*stop)(void))
{
    return open_boot(info, timeout_s, hello_s, cdl_version(), stop);
}

boot *boot_open_as(const cdl_rank_info *info, double timeout_s, double hello_s,
                   const char *release)
{
    return open_boot(info, timeout_s, hello_s, release, NULL);
}

static boot *open_boot(const cdl_rank_info *info, double timeout_s, double hello_s,
                       const char *release, int (*stop)(void))
{
    boot *b = cdl_calloc(1, sizeof *b);
    if (!b)
        return NULL;
    b->rank = info->rank;
    b->world = info->world;
    b->timeout = timeout_s;
    b->stop = stop;
    if (pmix_present()) {
        if (pmix_boot_open(b, info)) {
            cdl_free(b);
            return NULL;
        }
    } else {
        b->st = store_open_stop(info, NULL, 0, timeout_s, hello_s, stop);
        if (!b->st) {
            cdl_free(b);
            return NULL;
        }
        b->ops = &store_ops;
    }
    if (agree_release(b, release)) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", cdl_last_error());
        if (b->st)
            store_linger_off(b->st);   /* rank 0's store must not wait for the others */
        boot_close(b);
        cdl_error("%s", msg);
        return NULL;
    }
    return b;
}

void boot_close(boot *b)
{
    if (!b)
        return;
    b->ops->close(b);
    cdl_free(b);
}

const char *boot_kind(const boot *b)
{
    return b->ops->kind;
}

int boot_put(boot *b, const char *key, const void *val, size_t len)
{
    return b->ops->put(b, key, val, len);
}

int boot_fence(boot *b)
{
    int rc = b->ops->fence(b);
    b->fences++;
    return rc;
}

int boot_get(boot *b, int rank, const char *key, void *buf, size_t len)
{
    return b->ops->get(b, rank, key, buf, len);
}

void boot_stop_off(boot *b)
{
    if (!b)
        return;
    b->stop = NULL;
    store_stop_off(b->st);
}

store *boot_store(boot *b)
{
    return b->st;
}
