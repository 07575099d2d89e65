/* Collectives among the ranks of one node through one POSIX shared-memory
 * segment.
 *
 * Layout: a header (one cache line per member for its phase counter), then
 * two sets of W input slabs (one per member) and a result slab, each `slab`
 * bytes. Consecutive rounds use the sets alternately:
 *
 *     [hdr | slots[W] | set 0: in[0..W-1], res | set 1: in[0..W-1], res]
 *
 * Allreduce of m elements, per round (one slab of the buffer):
 *   1. member i copies its slab into in[i], except its own part P_i (parts
 *      ~m/W, 64-byte aligned), which only it reads;                  sync
 *   2. member i reduces P_i: res[P_i] = x0[P_i] + x1[P_i] + ..., with x_i its
 *      own buffer (the reduce-scatter), writing the sum to res and in place
 *      to its buffer, and copies the previous round's res, but P_i, out
 *      (the allgather), which the sync completed.
 * After the last round one more sync, then its copy-out. Small buffers
 * (one round, at most SMALL_BYTES) take one sync: every member copies in
 * all of its slab and sums all of in[] itself, straight into its buffer.
 * Each element is summed in member order 0, 1, ..., W-1 (by one member, or
 * by each the same way), so every rank gets bitwise-identical results,
 * independent of timing, equal to a plain sequential sum.
 *
 * Why one sync per round is enough: a member is never more than one sync
 * ahead of another; a round writes only its own set (in[me] before its
 * sync, res after it) and reads a set only after the sync that completed
 * it; the next use of that set is two rounds later, after a sync that every
 * member reaches only once done reading it.
 *
 * Synchronisation: member i publishes its phase (C11 atomics) and rings a
 * shared futex word; waiters spin up to 1 ms (20 us when members share
 * CPUs), then sleep on the futex in 100 ms slices, checking the deadline, an abort
 * flag and whether the missing peers' processes are still alive. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cdl/cdl.h>

#include "lib/core/cpuquota.h"

#include "coll.h"
#include "oversub.h"
#include "reduce.h"
#include "util.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#elif defined(__aarch64__)
#define cpu_relax() __asm__ __volatile__("yield")
#else
#define cpu_relax() ((void)0)
#endif

#define SHM_MAGIC 0x4d4c4443u            /* "CDLM" */
#define LINE 64
#define SHM_NAME_MAX 200
#define DEFAULT_SLAB (2u << 20)          /* bytes per member and set; docs/data-parallel.md */
#define MIN_SLAB (256u << 10)            /* the default's floor for many members */
#define DEFAULT_DATA (32u << 20)         /* the default keeps both sets within this */
#define SHM_MAX_INLINE 64                /* members whose pointers fit on the stack */
#define SMALL_BYTES (32u << 10)          /* one-sync allreduce up to this size */
#define SPIN_US 1000.0                   /* spinning before sleeping, see shm_attach */
#define STREAM_BYTES (64u << 20)         /* streaming copy-out from this size */
#define MISS_MAX 256                     /* missing members named or checked at once */

/* A process, as published through the bootstrap (key "shmpid.TAG"). */
typedef struct shm_pid {
    int64_t pid;
    uint64_t start;
} shm_pid;

typedef struct shm_slot {
    _Atomic uint32_t phase;              /* syncs this member has arrived at */
    int32_t pid;
    uint64_t start;                      /* the pid's start time: tells pid reuse apart */
    char pad[LINE - 16];
} shm_slot;

typedef struct shm_hdr {
    _Atomic uint32_t magic;
    uint32_t nranks;
    uint64_t slab, data_off, total;
    char pad0[LINE - 32];
    _Atomic uint32_t bell;               /* futex word: bumped at every arrival */
    _Atomic uint32_t sleepers;           /* members inside futex_wait */
    _Atomic int32_t aborted;             /* 1 once a member gave up: abort_msg says why;
                                          * 2 when it gave up over a lost peer */
    _Atomic uint32_t opened;             /* members that opened the segment */
    char pad1[LINE - 16];
    char abort_msg[512];
    shm_slot slots[];
} shm_hdr;

struct shm_seg {
    int me, size;
    int *ranks;
    char name[SHM_NAME_MAX];
    char tag[32];
    double timeout;
    cdl_dist_config cfg;                 /* the tuning knobs (CDL_SHM_*) */
    shm_hdr *h;                          /* member 0: created here */
    size_t map_len;
};

typedef struct shm_coll {
    coll base;
    shm_hdr *h;
    size_t map_len, slab;
    char *data;
    int *ranks;
    uint32_t phase;
    unsigned long round;                 /* rounds so far: set = round & 1 */
    double timeout;
    double spin_s;                       /* seconds of spinning before sleeping */
    int spin_yield;                      /* spin with sched_yield, not pause */
    int oversubscribed;                  /* more threads than CPUs (oversub.h) */
    int threads;                         /* this rank's CPU threads (shm_attach's) */
    double spin_us_set;                  /* CDL_SHM_SPIN_US, -1 if not set */
    size_t small_bytes;                  /* one-sync allreduce up to this size */
    size_t stream_bytes;                 /* allreduces this big copy out with streaming stores */
    long ops;                            /* collectives so far, for messages */
    const char *op;                      /* the current one */
    char label[48];
    void **ptrs;                         /* size pointers, when size > SHM_MAX_INLINE */
    shm_pid *peers;                      /* member 0: every member's process, published
                                          * before the attach fence, so one that dies
                                          * before attaching is seen dead, not waited for */
    int (*stop)(void);                   /* the attach only: the bootstrap's stop (boot.h),
                                          * NULL during training */
} shm_coll;

/* ------------------------------------------------------------ futex */

static void futex_wait(_Atomic uint32_t *addr, uint32_t val, long ns)
{
    struct timespec ts = {ns / 1000000000L, ns % 1000000000L};
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT, val, &ts, NULL, 0);
}

static void futex_wake(_Atomic uint32_t *addr)
{
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* ------------------------------------------------------------ sync */

/* The first member to give up tells the others why, and whether a peer was
 * lost (a hier leader whose peer on another node died; lost: a member
 * leaving for a stop, see stopped): they then exit as it does
 * (cdl_dist_peer_lost). */
static void post_abort_as(shm_hdr *h, const char *msg, int lost)
{
    int32_t zero = 0;
    if (atomic_compare_exchange_strong(&h->aborted, &zero, -1)) {
        snprintf(h->abort_msg, sizeof h->abort_msg, "%s", msg);
        atomic_store(&h->aborted, lost ? 2 : 1);
        atomic_fetch_add(&h->bell, 1);
        futex_wake(&h->bell);
    }
}

static void post_abort(shm_hdr *h, const char *msg)
{
    post_abort_as(h, msg, cdl_dist_peer_lost());
}

static int fail(shm_coll *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(shm_coll *s, const char *fmt, ...)
{
    char msg[512], posted[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* The others print it as their own error: name who gave up, so a rank
     * that was stopped reads "rank 0 gave up: ... rank 1 did not arrive",
     * not a timeout that seems its own. */
    snprintf(posted, sizeof posted, "rank %d gave up: %s", s->ranks[s->base.rank], msg);
    post_abort(s->h, posted);
    return cdl_error("rank %d: %s", s->ranks[s->base.rank], msg);
}

/* "allreduce #12" (the 12th collective on this group), or "attach". */
static const char *label(shm_coll *s)
{
    if (s->ops == 0)
        return s->op;
    snprintf(s->label, sizeof s->label, "%s #%ld", s->op, s->ops);
    return s->label;
}

static int arrived(const shm_coll *s, uint32_t target)
{
    for (int j = 0; j < s->base.size; j++)
        if ((int32_t)(atomic_load_explicit(&s->h->slots[j].phase, memory_order_acquire) - target) < 0)
            return 0;
    return 1;
}

/* Members that have not reached target, as member indices: the first cap
 * into out; returns how many there are in all. */
static int missing(const shm_coll *s, uint32_t target, int *out, int cap)
{
    int n = 0;
    for (int j = 0; j < s->base.size; j++)
        if ((int32_t)(atomic_load(&s->h->slots[j].phase) - target) < 0) {
            if (n < cap)
                out[n] = j;
            n++;
        }
    return n;
}

static int check_peers(shm_coll *s, uint32_t target)
{
    int miss[MISS_MAX];
    int n = missing(s, target, miss, MISS_MAX);
    for (int i = 0; i < n && i < MISS_MAX; i++) {
        shm_slot *sl = &s->h->slots[miss[i]];
        int pid = sl->pid;
        uint64_t start = sl->start;
        if (pid == 0 && s->peers) {   /* not attached yet: the process it announced */
            pid = (int)s->peers[miss[i]].pid;
            start = s->peers[miss[i]].start;
        }
        if (!dist_pid_alive(pid, start))
            return dist_note_peer_lost(), fail(s, "rank %d (pid %d) died%s: %s on shared memory cannot complete",
                        s->ranks[miss[i]], pid, sl->pid ? "" : " before attaching", label(s));
    }
    return 0;
}

/* This rank was asked to stop (s->stop) while it waited for members that
 * have not arrived: they are told (a member that comes later reads why).
 * This rank lost no peer; to the others it is a lost one, as a stop is
 * something a restart gets past (where the signal reached every rank,
 * each reports its own stop). */
static int stopped(shm_coll *s, uint32_t target)
{
    int miss[MISS_MAX], glob[MISS_MAX];
    int n = missing(s, target, miss, MISS_MAX);
    for (int i = 0; i < n && i < MISS_MAX; i++)
        glob[i] = s->ranks[miss[i]];
    char list[512], msg[700];
    dist_rank_list(list, sizeof list, glob, n);
    int me = s->ranks[s->base.rank];
    snprintf(msg, sizeof msg, "rank %d was asked to stop while it waited on shared memory "
             "(%s): %s did not arrive; it stopped waiting", me, label(s), list);
    post_abort_as(s->h, msg, 1);
    return cdl_error("%s", msg);
}

static int timed_out(shm_coll *s, uint32_t target)
{
    int miss[MISS_MAX], glob[MISS_MAX];
    int n = missing(s, target, miss, MISS_MAX);
    for (int i = 0; i < n && i < MISS_MAX; i++)
        glob[i] = s->ranks[miss[i]];
    char list[512];
    dist_rank_list(list, sizeof list, glob, n);   /* reads at most the first 9 */
    dist_note_peer_lost();
    return fail(s, "%s on shared memory timed out after %.0f s: %s did not arrive "
                "(stuck, or running a different number of steps?)", label(s), s->timeout, list);
}

/* Arrive at the next phase and wait for every member to get there. */
static int sync_all(shm_coll *s)
{
    shm_hdr *h = s->h;
    uint32_t target = ++s->phase;
    atomic_store_explicit(&h->slots[s->base.rank].phase, target, memory_order_seq_cst);
    atomic_fetch_add(&h->bell, 1);
    if (atomic_load(&h->sleepers))
        futex_wake(&h->bell);

    long spins = 0;
    int spinning = s->spin_s > 0;
    double spin_end = 0, deadline = 0, next_check = 0;
    for (;;) {
        uint32_t bell = atomic_load(&h->bell);
        if (arrived(s, target))
            return 0;
        int32_t ab = atomic_load_explicit(&h->aborted, memory_order_acquire);
        if (ab > 0) {
            if (ab == 2)
                dist_note_peer_lost();
            return cdl_error("rank %d: %s", s->ranks[s->base.rank], h->abort_msg);
        }
        if (spinning && (spins++ & 63) == 0) {
            double now = dist_now();
            if (spin_end == 0)
                spin_end = now + s->spin_s;
            else if (now >= spin_end)
                spinning = 0;
        }
        if (spinning) {
            /* Yield when CPUs are shared (with peers, or with this rank's
             * own threads on its one CPU): whoever still has work runs. */
            if (s->spin_yield)
                sched_yield();
            else
                cpu_relax();
            continue;
        }
        double now = dist_now();
        if (deadline == 0) {
            deadline = now + s->timeout;
            next_check = now + 0.1;
        }
        if (now >= next_check) {
            if (check_peers(s, target))
                return -1;
            next_check = now + 0.1;
        }
        if (now >= deadline)
            return timed_out(s, target);
        /* At most every 100 ms (the futex wait's slice): a signal's
         * handler may run in another thread and wake nothing here. */
        if (s->stop && s->stop())
            return stopped(s, target);
        atomic_fetch_add(&h->sleepers, 1);
        if (!arrived(s, target))
            futex_wait(&h->bell, bell, 100000000L);
        atomic_fetch_sub(&h->sleepers, 1);
    }
}

/* ------------------------------------------------------------ reduction */

/* Copies a round's result into the user's buffer. For buffers far larger
 * than the caches streaming (non-temporal) stores skip reading dst into the
 * cache first, a third of the memory traffic of the copy. */
static void copy_out(void *dst, const void *src, size_t n, int stream)
{
#if defined(__SSE2__)
    if (stream) {
        char *d = dst;
        const char *p = src;
        size_t head = (16 - ((uintptr_t)d & 15)) & 15;
        head = head < n ? head : n;
        memcpy(d, p, head);
        d += head, p += head, n -= head;
        size_t body = n & ~(size_t)63;
        for (size_t i = 0; i < body; i += 64) {
            __m128i a = _mm_loadu_si128((const __m128i *)(p + i));
            __m128i b = _mm_loadu_si128((const __m128i *)(p + i + 16));
            __m128i c = _mm_loadu_si128((const __m128i *)(p + i + 32));
            __m128i e = _mm_loadu_si128((const __m128i *)(p + i + 48));
            _mm_stream_si128((__m128i *)(d + i), a);
            _mm_stream_si128((__m128i *)(d + i + 16), b);
            _mm_stream_si128((__m128i *)(d + i + 32), c);
            _mm_stream_si128((__m128i *)(d + i + 48), e);
        }
        memcpy(d + body, p + body, n - body);
        _mm_sfence();   /* streaming stores are weakly ordered */
        return;
    }
#endif
    (void)stream;
    memcpy(dst, src, n);
}

/* Copies out a round's result but for this member's own part [lo, hi),
 * which is already in place. */
static void copy_around(char *dst, const char *res, size_t m, size_t lo, size_t hi, size_t es,
                        int stream)
{
    copy_out(dst, res, lo * es, stream);
    copy_out(dst + hi * es, res + hi * es, (m - hi) * es, stream);
}

/* The slab set of the next round. */
static char *next_set(shm_coll *s)
{
    return s->data + (size_t)(s->round++ & 1) * (size_t)(s->base.size + 1) * s->slab;
}

static char *in_slab(const shm_coll *s, char *set, int j)
{
    return set + (size_t)j * s->slab;
}

static char *res_slab(const shm_coll *s, char *set)
{
    return set + (size_t)s->base.size * s->slab;
}

static int shm_allreduce(coll *c, void *buf, size_t n, coll_dtype t, int average)
{
    shm_coll *s = (shm_coll *)c;
    if (c->size == 1)
        return 0;
    size_t es = coll_dtype_size(t), per = s->slab / es;
    char *p = buf;
    s->ops++;
    s->op = "allreduce";
    if (n * es <= s->small_bytes && n <= per) {
        char *set = next_set(s);
        memcpy(in_slab(s, set, c->rank), p, n * es);
        if (sync_all(s))
            return -1;
        reduce_strided(t, p, set, s->slab, c->size, 0, n, average);
        return 0;
    }
    /* Member i reads part i of its own buffer in place: it copies in only
     * the other parts, and writes its part's sum to res and its buffer. */
    const void *x[SHM_MAX_INLINE];
    const void **xs = c->size <= SHM_MAX_INLINE ? x : (const void **)s->ptrs;
    char *prev = NULL;
    size_t prev_off = 0, prev_m = 0, prev_lo = 0, prev_hi = 0;
    int stream = n * es >= s->stream_bytes, me = c->rank;
    for (size_t off = 0; off < n; off += per) {
        size_t m = n - off < per ? n - off : per, lo, hi;
        char *set = next_set(s), *mine = in_slab(s, set, me), *u = p + off * es;
        reduce_part(m, c->size, me, es, &lo, &hi);
        memcpy(mine, u, lo * es);
        memcpy(mine + hi * es, u + hi * es, (m - hi) * es);
        if (sync_all(s))
            return -1;
        for (int j = 0; j < c->size; j++)
            xs[j] = j == me ? u + lo * es : in_slab(s, set, j) + lo * es;
        reduce_into2(t, res_slab(s, set) + lo * es, u + lo * es, xs, c->size, hi - lo, average);
        if (prev)
            copy_around(p + prev_off * es, res_slab(s, prev), prev_m, prev_lo, prev_hi, es,
                        stream);
        prev = set;
        prev_off = off, prev_m = m, prev_lo = lo, prev_hi = hi;
    }
    if (sync_all(s))
        return -1;
    copy_around(p + prev_off * es, res_slab(s, prev), prev_m, prev_lo, prev_hi, es, stream);
    return 0;
}

static int shm_broadcast(coll *c, void *buf, size_t bytes, int root)
{
    shm_coll *s = (shm_coll *)c;
    if (c->size == 1)
        return 0;
    char *p = buf;
    s->ops++;
    s->op = "broadcast";
    for (size_t off = 0; off < bytes; off += s->slab) {
        size_t m = bytes - off < s->slab ? bytes - off : s->slab;
        char *set = next_set(s);
        if (c->rank == root)
            memcpy(in_slab(s, set, root), p + off, m);
        if (sync_all(s))
            return -1;
        if (c->rank != root)
            memcpy(p + off, in_slab(s, set, root), m);
    }
    return 0;
}

static int shm_barrier(coll *c)
{
    shm_coll *s = (shm_coll *)c;
    s->ops++;
    s->op = "barrier";
    return c->size == 1 ? 0 : sync_all(s);
}

static int shm_allgather(coll *c, const void *in, void *out, size_t bytes)
{
    shm_coll *s = (shm_coll *)c;
    s->ops++;
    s->op = "allgather";
    if (c->size == 1) {
        memmove(out, in, bytes);
        return 0;
    }
    for (size_t off = 0; off < bytes; off += s->slab) {
        size_t m = bytes - off < s->slab ? bytes - off : s->slab;
        char *set = next_set(s);
        memcpy(in_slab(s, set, c->rank), (const char *)in + off, m);
        if (sync_all(s))
            return -1;
        for (int j = 0; j < c->size; j++)
            memcpy((char *)out + (size_t)j * bytes + off, in_slab(s, set, j), m);
    }
    return 0;
}

/* [a, b): part `i` of n elements (shard_part) within the round [off, off+m). */
static void part_in_round(size_t n, int size, int i, size_t off, size_t m, size_t *a, size_t *b)
{
    size_t lo, hi;
    shard_part(n, size, i, &lo, &hi);
    *a = lo > off ? lo : off;
    *b = hi < off + m ? hi : off + m;
    if (*b < *a)   /* the part is before or after the round: empty, at its edge */
        *a = *b = hi <= off ? off : off + m;
}

/* ZeRO-1's reduce-scatter: per round, like the allreduce's first half, but
 * over the parts of the whole buffer: every member copies in its round's
 * slab but its own part, and sums its own part, in member order (the bits
 * of the allreduce). One sync per round, for the reason above. */
static int shm_reduce_scatter(coll *c, void *buf, size_t n, coll_dtype t, int average)
{
    shm_coll *s = (shm_coll *)c;
    if (c->size == 1)
        return 0;
    size_t es = coll_dtype_size(t), per = s->slab / es;
    char *p = buf;
    const void *x[SHM_MAX_INLINE];
    const void **xs = c->size <= SHM_MAX_INLINE ? x : (const void **)s->ptrs;
    int me = c->rank;
    s->ops++;
    s->op = "reduce-scatter";
    for (size_t off = 0; off < n; off += per) {
        size_t m = n - off < per ? n - off : per, a, b;
        part_in_round(n, c->size, me, off, m, &a, &b);
        char *set = next_set(s), *mine = in_slab(s, set, me), *u = p + off * es;
        memcpy(mine, u, (a - off) * es);
        memcpy(mine + (b - off) * es, p + b * es, (off + m - b) * es);
        if (sync_all(s))
            return -1;
        if (b == a)
            continue;
        for (int j = 0; j < c->size; j++)
            xs[j] = j == me ? p + a * es : in_slab(s, set, j) + (a - off) * es;
        reduce_into2(t, res_slab(s, set) + (a - off) * es, p + a * es, xs, c->size, b - a,
                     average);
    }
    return 0;
}

/* Each member's part of buf to every member, in place, a slab per round. */
static int shm_allgather_parts(coll *c, void *buf, size_t n, coll_dtype t)
{
    shm_coll *s = (shm_coll *)c;
    if (c->size == 1)
        return 0;
    size_t es = coll_dtype_size(t), per = s->slab / es;
    char *p = buf;
    s->ops++;
    s->op = "allgather";
    for (size_t off = 0; off < n; off += per) {
        size_t m = n - off < per ? n - off : per, a, b;
        char *set = next_set(s);
        part_in_round(n, c->size, c->rank, off, m, &a, &b);
        memcpy(in_slab(s, set, c->rank) + (a - off) * es, p + a * es, (b - a) * es);
        if (sync_all(s))
            return -1;
        for (int j = 0; j < c->size; j++) {
            if (j == c->rank)
                continue;
            part_in_round(n, c->size, j, off, m, &a, &b);
            memcpy(p + a * es, in_slab(s, set, j) + (a - off) * es, (b - a) * es);
        }
    }
    return 0;
}

static void shm_abort(coll *c, const char *why)
{
    shm_coll *s = (shm_coll *)c;
    char msg[512];
    if (c->size == 1)
        return;
    snprintf(msg, sizeof msg, "rank %d gave up: %s", s->ranks[c->rank], why);
    post_abort(s->h, msg);
}

static void shm_destroy(coll *c)
{
    shm_coll *s = (shm_coll *)c;
    munmap(s->h, s->map_len);
    cdl_free(s->ptrs);
    cdl_free(s->peers);
    cdl_free(s->ranks);
    cdl_free(s);
}

static const coll_ops shm_ops = {
    .name = "shm", .allreduce = shm_allreduce, .broadcast = shm_broadcast,
    .barrier = shm_barrier, .allgather = shm_allgather, .abort = shm_abort,
    .destroy = shm_destroy, .reduce_scatter = shm_reduce_scatter,
    .allgather_parts = shm_allgather_parts,
};

/* ------------------------------------------------------------ setup */

/* A tuning knob (CDL_SHM_*), in units of 1 << shift bytes; 0 = dflt. */
static size_t knob_bytes(long v, int shift, size_t dflt)
{
    return v > 0 && v <= (1L << 20) ? (size_t)v << shift : dflt;
}

/* Fewer, bigger rounds mean fewer syncs; the cap keeps /dev/shm use modest
 * for many members (containers often mount only 64 MB there). */
static size_t slab_bytes(int members, long kb)
{
    size_t b = kb >= 4 && kb <= (1L << 20) ? (size_t)kb << 10 : 0;
    if (!b) {
        b = DEFAULT_DATA / (2 * ((size_t)members + 1));
        b = b > DEFAULT_SLAB ? DEFAULT_SLAB : b < MIN_SLAB ? MIN_SLAB : b;
    }
    return b / LINE * LINE;
}

static size_t header_bytes(int n)
{
    size_t b = sizeof(shm_hdr) + (size_t)n * sizeof(shm_slot);
    return (b + 4095) / 4096 * 4096;
}

shm_seg *shm_prepare(const coll_group *g, const char *job_id, boot *b,
                     const cdl_dist_config *cfg)
{
    shm_seg *seg = cdl_calloc(1, sizeof *seg);
    if (!seg)
        return NULL;
    seg->ranks = cdl_calloc((size_t)g->size, sizeof *seg->ranks);
    if (!seg->ranks) {
        cdl_free(seg);
        return NULL;
    }
    memcpy(seg->ranks, g->ranks, (size_t)g->size * sizeof *seg->ranks);
    seg->me = g->me;
    seg->size = g->size;
    seg->timeout = cfg->timeout_s;
    seg->cfg = *cfg;
    snprintf(seg->tag, sizeof seg->tag, "%s", g->tag);
    if (g->size == 1)
        return seg;
    /* Who this member is, for member 0 to watch until it attaches. */
    char key[64];
    shm_pid mine = {getpid(), dist_pid_starttime((int)getpid())};
    snprintf(key, sizeof key, "shmpid.%s", g->tag);
    if (boot_put(b, key, &mine, sizeof mine))
        goto fail;
    if (g->me != 0)
        return seg;

    /* Member 0 creates a fresh segment under a random name (a crashed run's
     * leftover can never be mistaken for it) and publishes the name. */
    char job[96];
    unsigned char rnd[8];
    dist_sanitize(job_id && *job_id ? job_id : "nojob", job, sizeof job);
    if (dist_random(rnd, sizeof rnd))
        goto fail;
    snprintf(seg->name, sizeof seg->name, "/cdl-%s-%s-%02x%02x%02x%02x%02x%02x%02x%02x", job,
             g->tag, rnd[0], rnd[1], rnd[2], rnd[3], rnd[4], rnd[5], rnd[6], rnd[7]);
    size_t slab = slab_bytes(g->size, cfg->shm_slab_kb), hdr = header_bytes(g->size);
    size_t total = hdr + 2 * (size_t)(g->size + 1) * slab;
    int fd = shm_open(seg->name, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) {
        cdl_error("rank %d: shm_open(%s) failed: %s (is /dev/shm mounted and writable?)",
                  g->ranks[0], seg->name, strerror(errno));
        goto fail;
    }
    /* ftruncate only sets the size: on a full /dev/shm (another account may
     * have filled it) the first write into a missing page is a SIGBUS that
     * kills the rank with "Bus error" and no word of why. Reserve the pages
     * now, so that a lack of room is an error naming it. */
    int e = ftruncate(fd, (off_t)total) ? errno : 0;
    while (!e && (e = posix_fallocate(fd, 0, (off_t)total)) == EINTR)
        ;
    if (e) {
        struct statvfs vf;
        char room[96] = "";
        if (statvfs("/dev/shm", &vf) == 0)
            snprintf(room, sizeof room, "; /dev/shm has %.1f MB free",
                     (double)vf.f_bavail * (double)vf.f_frsize / 1e6);
        cdl_error("rank %d: cannot reserve %zu bytes of shared memory for %s: %s%s (%s"
                  "CDL_SHM_SLAB_KB makes the segment smaller)", g->ranks[0], total, seg->name,
                  strerror(e), room, e == ENOSPC ? "/dev/shm is full: see what fills it with "
                  "ls -la /dev/shm, free space there or ask the administrator; " : "");
        close(fd);
        shm_unlink(seg->name);
        goto fail;
    }
    void *map = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) {
        cdl_error("rank %d: mmap of %s failed: %s", g->ranks[0], seg->name, strerror(errno));
        shm_unlink(seg->name);
        goto fail;
    }
    shm_hdr *h = map;
    h->nranks = (uint32_t)g->size;
    h->slab = slab;
    h->data_off = hdr;
    h->total = total;
    atomic_store(&h->opened, 1);
    atomic_store_explicit(&h->magic, SHM_MAGIC, memory_order_release);
    seg->h = h;
    seg->map_len = total;
    snprintf(key, sizeof key, "shm.%s", g->tag);
    if (boot_put(b, key, seg->name, sizeof seg->name)) {
        shm_seg_discard(seg);
        return NULL;
    }
    return seg;
fail:
    cdl_free(seg->ranks);
    cdl_free(seg);
    return NULL;
}

void shm_seg_discard(shm_seg *seg)
{
    if (!seg)
        return;
    if (seg->h) {
        munmap(seg->h, seg->map_len);
        shm_unlink(seg->name);
    }
    cdl_free(seg->ranks);
    cdl_free(seg);
}

/* ranks: the members' global ranks (shm_attach has taken seg's). */
static int open_segment(shm_seg *seg, const int *ranks)
{
    int fd = shm_open(seg->name, O_RDWR, 0);
    struct stat st;
    if (fd < 0)
        return cdl_error("rank %d: cannot open the shared memory %s of rank %d: %s (%sranks of "
                         "one node must share /dev/shm and a user)", ranks[seg->me], seg->name,
                         ranks[0], strerror(errno), errno == ENOENT ? "gone: the other "
                         "members may have given up before this rank came, see their errors; "
                         : "");
    if (fstat(fd, &st) || (size_t)st.st_size < sizeof(shm_hdr)) {
        close(fd);
        return cdl_error("rank %d: shared memory %s is truncated", ranks[seg->me], seg->name);
    }
    void *map = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE,
                     fd, 0);
    close(fd);
    if (map == MAP_FAILED)
        return cdl_error("rank %d: mmap of %s failed: %s", ranks[seg->me], seg->name,
                         strerror(errno));
    shm_hdr *h = map;
    seg->h = h;
    seg->map_len = (size_t)st.st_size;
    if (atomic_load_explicit(&h->magic, memory_order_acquire) != SHM_MAGIC ||
        h->nranks != (uint32_t)seg->size || h->total != (uint64_t)st.st_size)
        return cdl_error("rank %d: shared memory %s does not hold a segment for %d ranks",
                         ranks[seg->me], seg->name, seg->size);
    /* The last member to open it unlinks the name: from then on the memory
     * goes away with the last mapping, whoever dies when. */
    if (atomic_fetch_add(&h->opened, 1) + 1 == h->nranks)
        shm_unlink(seg->name);
    return 0;
}

/* Before sleeping on the futex: spin for up to SPIN_US when every member
 * has a CPU, 20 us when members share CPUs. Waking a sleeping CPU costs
 * tens of microseconds (more under a hypervisor), and members of a
 * training step routinely arrive a few hundred microseconds apart, so a
 * short spin would sleep at nearly every step. Sharing (oversub.h) counts
 * the members' affinity masks (masks: NULL until they are known), the
 * cgroup's CPU quota and each member's threads: the members' count against
 * the node's online CPUs called 4 ranks of 4 threads in one 4-CPU mask (or
 * in a 2-CPU container) on a 64-core node "a CPU each", and their spinning
 * took the CPUs the slowest member's threads needed. */
static void set_spin(shm_coll *s, int me, const cpu_set_t *masks)
{
    cpu_set_t cpus;
    int ncpu = sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? CPU_COUNT(&cpus) : 0;
    s->oversubscribed = shm_oversubscribed(s->base.size, me, masks, s->threads, ncpu,
                                           sysconf(_SC_NPROCESSORS_ONLN), cpu_quota());
    double us = s->spin_us_set >= 0 ? s->spin_us_set : s->oversubscribed ? 20 : SPIN_US;
    s->spin_s = us * 1e-6;
    s->spin_yield = s->oversubscribed || ncpu <= 1;
}

coll *shm_attach(shm_seg *seg, boot *b, int threads)
{
    shm_coll *s = cdl_calloc(1, sizeof *s);
    if (!s) {
        shm_seg_discard(seg);
        return NULL;
    }
    s->base.ops = &shm_ops;
    s->base.rank = seg->me;
    s->base.size = seg->size;
    s->timeout = seg->timeout;
    s->ranks = seg->ranks;
    seg->ranks = NULL;
    s->op = "attaching to the segment";
    if (seg->size == 1) {
        cdl_free(seg);
        return &s->base;
    }
    char key[64];
    snprintf(key, sizeof key, "shm.%s", seg->tag);
    if (seg->me != 0 && (boot_get(b, s->ranks[0], key, seg->name, sizeof seg->name) ||
                         (seg->name[sizeof seg->name - 1] = '\0', open_segment(seg, s->ranks)))) {
        if (seg->h)
            munmap(seg->h, seg->map_len);
        cdl_free(seg);
        cdl_free(s->ranks);
        cdl_free(s);
        return NULL;
    }
    s->h = seg->h;
    s->map_len = seg->map_len;
    if (seg->size > SHM_MAX_INLINE && !(s->ptrs = cdl_calloc((size_t)seg->size, sizeof(void *)))) {
        munmap(seg->h, seg->map_len);
        cdl_free(seg);
        cdl_free(s->ranks);
        cdl_free(s);
        return NULL;
    }
    if (seg->me == 0 && !(s->peers = cdl_calloc((size_t)seg->size, sizeof *s->peers))) {
        munmap(seg->h, seg->map_len);
        shm_unlink(seg->name);
        cdl_free(seg);
        cdl_free(s->ptrs);
        cdl_free(s->ranks);
        cdl_free(s);
        return NULL;
    }
    snprintf(key, sizeof key, "shmpid.%s", seg->tag);
    for (int j = 1; s->peers && j < seg->size; j++)
        if (boot_get(b, s->ranks[j], key, &s->peers[j], sizeof s->peers[j]))
            s->peers[j] = (shm_pid){0, 0};   /* unknown: the timeout still bounds the wait */
    s->slab = s->h->slab;
    s->data = (char *)s->h + s->h->data_off;
    s->threads = threads;
    s->spin_us_set = seg->cfg.shm_spin_us >= 0 && seg->cfg.shm_spin_us <= 1e6
                         ? seg->cfg.shm_spin_us : -1;
    set_spin(s, s->base.rank, NULL);   /* until the members' masks are known */
    s->small_bytes = knob_bytes(seg->cfg.shm_small_kb, 10, SMALL_BYTES);
    s->stream_bytes = knob_bytes(seg->cfg.shm_stream_mb, 20, STREAM_BYTES);
    shm_slot *me = &s->h->slots[seg->me];
    me->pid = (int32_t)getpid();
    me->start = dist_pid_starttime((int)getpid());
    int is_creator = seg->me == 0;
    char name[SHM_NAME_MAX];
    memcpy(name, seg->name, sizeof name);
    cdl_free(seg);
    s->stop = b ? b->stop : NULL;   /* a stop leaves the attach, not a step */
    int rc = sync_all(s);
    s->stop = NULL;
    if (is_creator)
        shm_unlink(name);   /* all attached (or failed): nobody else opens it */
    if (rc) {
        shm_destroy(&s->base);
        return NULL;
    }
    /* Every member's pid is in its slot now: their masks tell who shares
     * this rank's CPUs. */
    cpu_set_t *masks = cdl_calloc((size_t)s->base.size, sizeof *masks);
    int known = masks != NULL;
    for (int j = 0; known && j < s->base.size; j++) {
        int pid = s->h->slots[j].pid;
        /* A member in another pid namespace (its own container) names a pid
         * that is not it here, or none: then the masks are not known. */
        known = pid > 0 && dist_pid_starttime(pid) == s->h->slots[j].start &&
                sched_getaffinity(pid, sizeof masks[j], &masks[j]) == 0;
    }
    set_spin(s, s->base.rank, known ? masks : NULL);
    cdl_free(masks);
    return &s->base;
}
