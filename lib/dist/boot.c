/* The bootstrap dispatcher: PMIx when a PMIx server started the job (no
 * port needed), else the TCP store. Store keys are "<rank>/<key>". */
#include <stdio.h>
#include <string.h>

#include <cdl/cdl.h>

#include "boot.h"
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

boot *boot_open(const cdl_rank_info *info, double timeout_s, double hello_s)
{
    boot *b = cdl_calloc(1, sizeof *b);
    if (!b)
        return NULL;
    b->rank = info->rank;
    b->world = info->world;
    b->timeout = timeout_s;
    if (pmix_present()) {
        if (pmix_boot_open(b, info)) {
            cdl_free(b);
            return NULL;
        }
        return b;
    }
    b->st = store_open(info, NULL, timeout_s, hello_s);
    if (!b->st) {
        cdl_free(b);
        return NULL;
    }
    b->ops = &store_ops;
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

store *boot_store(boot *b)
{
    return b->st;
}
