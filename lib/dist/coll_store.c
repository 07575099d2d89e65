/* The slow fallback between node leaders when there is no MPI: every value
 * goes through rank 0's TCP store (set once, dropped after the other
 * members read it). O(W) traffic per member and through one server: correct,
 * and enough to try multi-node runs; build with MPI for speed. The sum keeps
 * member order (reduce.h), so all leaders get the same bits. */
#include <stdio.h>
#include <string.h>

#include <cdl/cdl.h>

#include "coll.h"
#include "store_proto.h"
#include "reduce.h"

typedef struct store_coll {
    coll base;
    store *st;
    int *ranks;
    long seq;
    void *acc, *tmp;              /* scratch, grown to the largest allreduce */
    size_t cap;
} store_coll;

static int grow(store_coll *s, size_t bytes)
{
    if (bytes <= s->cap)
        return 0;
    cdl_free(s->acc);
    cdl_free(s->tmp);
    s->acc = cdl_malloc(bytes);
    s->tmp = cdl_malloc(bytes);
    s->cap = s->acc && s->tmp ? bytes : 0;
    return s->cap ? 0 : -1;
}

/* The store takes values of at most STORE_VAL_MAX bytes: larger buffers
 * go in pieces "<op><seq>/<rank>:<piece>". */
static size_t piece_len(size_t len, size_t off)
{
    return len - off < STORE_VAL_MAX ? len - off : (size_t)STORE_VAL_MAX;
}

/* Publishes mine for the size-1 others. */
static int publish(store_coll *s, const char *op, const void *val, size_t len)
{
    char key[64];
    size_t off = 0, i = 0;
    do {
        snprintf(key, sizeof key, "%s%ld/%d:%zu", op, s->seq, s->base.rank, i++);
        if (store_set(s->st, key, (const char *)val + off, piece_len(len, off), s->base.size - 1))
            return -1;
        off += piece_len(len, off);
    } while (off < len);
    return 0;
}

static int fetch(store_coll *s, const char *op, int j, void *buf, size_t len)
{
    char key[64];
    size_t got, off = 0, i = 0;
    do {
        size_t want = piece_len(len, off);
        snprintf(key, sizeof key, "%s%ld/%d:%zu", op, s->seq, j, i++);
        if (store_get(s->st, key, s->ranks[j], (char *)buf + off, want, &got))
            return -1;
        if (got != want)
            return cdl_error("store value '%s' has %zu bytes, expected %zu", key, got, want);
        off += want;
    } while (off < len);
    return 0;
}

static int st_allreduce(coll *c, void *buf, size_t n, coll_dtype t, int average)
{
    store_coll *s = (store_coll *)c;
    size_t bytes = n * coll_dtype_size(t);
    if (c->size == 1)
        return 0;
    s->seq++;
    if (grow(s, bytes) || publish(s, "ar", buf, bytes))
        return -1;
    for (int j = 0; j < c->size; j++) {
        void *x = j == c->rank ? buf : (j == 0 ? s->acc : s->tmp);
        if (j != c->rank && fetch(s, "ar", j, x, bytes))
            return -1;
        if (j == 0 && x != s->acc)
            memcpy(s->acc, x, bytes);
        else if (j > 0)
            reduce_add(t, s->acc, x, n);
    }
    if (average)
        reduce_divide(t, s->acc, n, c->size);
    memcpy(buf, s->acc, bytes);
    return 0;
}

static int st_broadcast(coll *c, void *buf, size_t bytes, int root)
{
    store_coll *s = (store_coll *)c;
    if (c->size == 1)
        return 0;
    s->seq++;
    if (c->rank == root)
        return publish(s, "bc", buf, bytes);
    return fetch(s, "bc", root, buf, bytes);
}

static int st_allgather(coll *c, const void *in, void *out, size_t bytes)
{
    store_coll *s = (store_coll *)c;
    if (c->size == 1) {
        memmove(out, in, bytes);
        return 0;
    }
    s->seq++;
    if (publish(s, "ag", in, bytes))
        return -1;
    for (int j = 0; j < c->size; j++) {
        char *dst = (char *)out + (size_t)j * bytes;
        if (j == c->rank)
            memmove(dst, in, bytes);
        else if (fetch(s, "ag", j, dst, bytes))
            return -1;
    }
    return 0;
}

static int st_barrier(coll *c)
{
    store_coll *s = (store_coll *)c;
    char none = 0;
    if (c->size == 1)
        return 0;
    s->seq++;
    if (publish(s, "ba", &none, 1))
        return -1;
    for (int j = 0; j < c->size; j++)
        if (j != c->rank && fetch(s, "ba", j, &none, 1))
            return -1;
    return 0;
}

static void st_destroy(coll *c)
{
    store_coll *s = (store_coll *)c;
    cdl_free(s->acc);
    cdl_free(s->tmp);
    cdl_free(s->ranks);
    cdl_free(s);
}

static const coll_ops store_coll_ops = {
    .name = "store", .allreduce = st_allreduce, .broadcast = st_broadcast,
    .barrier = st_barrier, .allgather = st_allgather, .destroy = st_destroy,
};

coll *coll_store_create(const coll_group *g, store *st)
{
    store_coll *s = cdl_calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->ranks = cdl_calloc((size_t)g->size, sizeof *s->ranks);
    if (!s->ranks) {
        cdl_free(s);
        return NULL;
    }
    memcpy(s->ranks, g->ranks, (size_t)g->size * sizeof *s->ranks);
    s->base = (coll){&store_coll_ops, g->me, g->size, 0};
    s->st = st;
    return &s->base;
}
