/* The batch loader: a ring of preallocated batch slots filled by worker
 * threads, handed out strictly in batch order.
 *
 * Batch b of an epoch always lives in slot b % nslots. Workers claim batch
 * numbers in order (next_claim), each only once its slot is free, fill it
 * without holding the lock, and mark it ready; the consumer waits on a
 * condition variable for the slot of the batch it wants and keeps it (HELD)
 * until its next call. What a batch holds is a pure function of (seed,
 * epoch, rank, world, batch index), so the number of workers and their
 * timing change nothing but speed.
 *
 * Starting an epoch stops claims, waits for the workers' batches in flight
 * (they are small), recomputes the order and restarts from first_batch.
 * With workers = 0 the consumer fills slot 0 itself in cdl_loader_next.
 * Everything is allocated in cdl_loader_create.
 *
 * A loader made before fork() has no workers in the child
 * (lib/core/forked.h): there it becomes a loader of 0 workers at its next
 * call, with a fresh lock (the parent's may have been held by a worker at
 * the fork). Batches being what they are whoever fills them, the child
 * gets the same ones.
 */
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cdl/cdl.h>

#include "lib/core/forked.h"
#include "lib/core/sized.h"
#include "lib/data/internal.h"

#define MAX_WORKERS 256

enum slot_state { SLOT_FREE, SLOT_FILLING, SLOT_READY, SLOT_HELD };

typedef struct slot {
    float *x;        /* (batch_size, c, h, w) */
    int32_t *y;      /* batch_size * label_len */
    uint8_t *raw;    /* (c, h, w): a streamed picture, decoded here (NULL otherwise) */
    char *err;       /* why the batch could not be filled (a streamed file), or NULL */
    long batch;
    int n;
    enum slot_state state;
} slot;

struct cdl_loader {
    const cdl_dataset *d;
    cdl_loader_config cfg;
    size_t sample_size;          /* c*h*w */
    long samples, batches;       /* per epoch, for this rank */
    float luts[3][256];          /* per-channel normalisation of uint8 images */
    float *fmean, *fstd;         /* (c) the same for float features */
    int32_t *order;              /* (n) this epoch's order; read by workers (NULL for
                                  * token windows: their index is their position) */
    size_t label_len;            /* labels per sample (>= 1) */
    int epoch;

    slot *slots;
    int nslots;
    pthread_t *threads;
    int nthreads;
    unsigned long forks;         /* fork_count() when the workers started */

    /* Under mu: */
    pthread_mutex_t mu;
    pthread_cond_t ready;        /* a slot became READY: the consumer waits */
    pthread_cond_t space;        /* a slot became FREE or an epoch started: workers wait */
    pthread_cond_t idle;         /* busy dropped to 0: cdl_loader_start_epoch waits */
    long next_claim, next_deliver, end;
    int held;                    /* slot the consumer holds, -1 if none */
    int busy;                    /* workers filling a slot */
    int active;                  /* workers may claim */
    int started;                 /* an epoch was started */
    int quit;
};

/* Shuffled samples are scattered over the dataset (47 MB for Fashion-MNIST):
 * asking for the next one's cache lines while converting this one hides the
 * misses (a whole shuffled epoch went from ~930 to ~265 ns/sample). */
static void prefetch_sample(const uint8_t *p, size_t bytes)
{
    for (size_t o = 0; o < bytes; o += 64)
        __builtin_prefetch(p + o);
}

/* Token windows: sample k of this rank is window pos % n of the epoch (the
 * padded positions of DistributedSampler repeat the first windows), drawn
 * from (seed, epoch, window) when shuffling, else back to back. An id past
 * the vocabulary leaves s->err set, as a bad streamed picture does. */
static void fill_tokens(const cdl_loader *l, long k0, long k1, slot *s)
{
    const cdl_dataset *d = l->d;
    const cdl_loader_config *c = &l->cfg;
    /* A file rewritten in place (truncated, then written again) while it
     * is mapped: an error now rather than SIGBUS in the copy below. */
    if (tokens_intact(d) != 0) {
        s->err = strdup(cdl_last_error());
        s->n = 0;
        return;
    }
    for (long k = k0; k < k1; k++) {
        long idx = sampler_position(c->rank, c->world, k) % d->n;
        size_t start = tokens_window_start(d, c->shuffle, c->seed, l->epoch, idx);
        if (tokens_window(d, start, s->x + (size_t)(k - k0) * l->sample_size,
                          s->y + (size_t)(k - k0) * l->label_len) != 0) {
            s->err = strdup(cdl_last_error());
            s->n = 0;
            return;
        }
    }
    s->n = (int)(k1 - k0);
}

/* Converts batch b of the current epoch into s (no lock needed: the order
 * and epoch do not change while a batch is being filled). A streamed
 * picture that cannot be read leaves s->err set (the consumer reports it). */
static void fill_batch(const cdl_loader *l, long b, slot *s)
{
    const cdl_dataset *d = l->d;
    const cdl_loader_config *c = &l->cfg;
    long k0 = b * c->batch_size;
    long k1 = k0 + c->batch_size < l->samples ? k0 + c->batch_size : l->samples;
    free(s->err);
    s->err = NULL;
    if (d->tokens) {
        fill_tokens(l, k0, k1, s);
        return;
    }
    for (long k = k0; k < k1; k++) {
        long pos = sampler_position(c->rank, c->world, k);
        int32_t idx = l->order[pos % d->n];
        float *dst = s->x + (size_t)(k - k0) * l->sample_size;
        s->y[k - k0] = d->labels[idx];
        if (d->features) {
            convert_features(d->features + (size_t)idx * l->sample_size, d->shape, l->fmean,
                             l->fstd, dst);
            continue;
        }
        const uint8_t *px;
        if (d->stream) {
            if (image_stream_read(d->stream, idx, s->raw) != 0) {
                s->err = strdup(cdl_last_error());
                s->n = 0;
                return;
            }
            px = s->raw;
        } else {
            if (k + 1 < k1)
                prefetch_sample(d->images +
                                    (size_t)l->order[(pos + c->world) % d->n] * l->sample_size,
                                l->sample_size);
            px = d->images + (size_t)idx * l->sample_size;
        }
        aug_params a = c->augment ? augment_draw(c->seed, l->epoch, pos, c->augment)
                                  : augment_none();
        convert_sample(px, d->shape, (const float (*)[256])l->luts, a, dst);
    }
    s->n = (int)(k1 - k0);
}

static int claimable(const cdl_loader *l)
{
    return l->active && l->next_claim < l->end &&
           l->slots[l->next_claim % l->nslots].state == SLOT_FREE;
}

static void *worker_main(void *arg)
{
    cdl_loader *l = arg;
    pthread_mutex_lock(&l->mu);
    for (;;) {
        while (!l->quit && !claimable(l))
            pthread_cond_wait(&l->space, &l->mu);
        if (l->quit)
            break;
        long b = l->next_claim++;
        slot *s = &l->slots[b % l->nslots];
        s->state = SLOT_FILLING;
        s->batch = b;
        l->busy++;
        pthread_mutex_unlock(&l->mu);

        fill_batch(l, b, s);

        pthread_mutex_lock(&l->mu);
        s->state = SLOT_READY;
        pthread_cond_signal(&l->ready);
        if (--l->busy == 0)
            pthread_cond_broadcast(&l->idle);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

static int check_config(const cdl_dataset *d, const cdl_loader_config *c)
{
    if (!d || !c)
        return cdl_error("cdl_loader_create: dataset or config is NULL");
    if (d->tokens && (d->n <= 0 || d->label_len < 1 || d->token_bytes < 1 ||
                      d->token_bytes > 2 || d->ntokens <= (size_t)d->label_len ||
                      d->shape.c != d->label_len || d->shape.h != 1 || d->shape.w != 1 ||
                      (size_t)d->n > (d->ntokens - 1) / (size_t)d->label_len))
        return cdl_error("cdl_loader_create: token dataset '%s' is inconsistent: %d windows of "
                         "%d of %zu tokens", d->name, d->n, d->label_len, d->ntokens);
    if (!d->tokens && (d->n <= 0 || (!d->images && !d->features && !d->stream) || !d->labels ||
                       d->shape.c <= 0 ||
        d->shape.h <= 0 || d->shape.w <= 0))
        return cdl_error("cdl_loader_create: dataset '%s' is empty or not loaded", d->name);
    if ((d->images || d->stream) && d->shape.c > 3)
        return cdl_error("dataset '%s': uint8 images have at most 3 channels, not %d", d->name,
                         d->shape.c);
    if (!d->tokens && d->shape.c > 3 && (!d->channel_mean || !d->channel_std))
        return cdl_error("dataset '%s': %d channels need channel_mean/channel_std", d->name,
                         d->shape.c);
    for (int k = 0; !d->tokens && k < d->shape.c; k++) {
        float sd = d->shape.c > 3 ? d->channel_std[k] : d->std[k];
        if (!(sd > 0))
            return cdl_error("dataset '%s': std[%d] = %g must be > 0", d->name, k, (double)sd);
    }
    if (c->augment < 0 || c->augment > CDL_AUGMENT_FLIP)
        return cdl_error("loader: augment %d: use enum cdl_augment (--augment "
                         "none|crop|flip|crop+flip)", c->augment);
    if (c->augment && !d->images && !d->stream)
        return cdl_error("--augment crop/flip needs pictures, but dataset '%s' holds %s: "
                         "use --augment none", d->name, d->tokens ? "tokens" : "features");
    /* cdl_loader_defaults leaves both at 0: a program's first mistake. */
    if (c->batch_size <= 0)
        return cdl_error("loader: batch size %d must be >= 1 (--batch-size; "
                         "cdl_loader_config.batch_size, which cdl_loader_defaults leaves 0)",
                         c->batch_size);
    if (c->world <= 0 || c->rank < 0 || c->rank >= c->world)
        return cdl_error("loader: rank %d of world %d: need 0 <= rank < world%s", c->rank,
                         c->world, c->world ? "" : " (cdl_loader_defaults leaves world 0: "
                                               "set it, 1 for one process)");
    if (c->workers < 0 || c->workers > MAX_WORKERS)
        return cdl_error("loader: %d workers: use 0..%d (--workers)", c->workers, MAX_WORKERS);
    if (c->prefetch < 0 || c->prefetch > 4 * MAX_WORKERS)
        return cdl_error("loader: prefetch %d: use 0 (automatic) .. %d", c->prefetch,
                         4 * MAX_WORKERS);
    return 0;
}

/* In a child of fork(): forget the workers and the lock they may have held;
 * from now on the consumer fills the batches (workers = 0). */
static void adopt_after_fork(cdl_loader *l)
{
    if (!l->nthreads || fork_count() == l->forks)
        return;
    l->nthreads = 0;
    l->cfg.workers = 0;
    l->busy = 0;
    l->held = -1;
    l->active = 0;
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->ready, NULL);
    pthread_cond_init(&l->space, NULL);
    pthread_cond_init(&l->idle, NULL);
}

static void loader_destroy(cdl_loader *l, int sync_ready)
{
    if (sync_ready) {
        adopt_after_fork(l);
        pthread_mutex_lock(&l->mu);
        l->quit = 1;
        pthread_cond_broadcast(&l->space);
        pthread_mutex_unlock(&l->mu);
        for (int i = 0; i < l->nthreads; i++)
            pthread_join(l->threads[i], NULL);
        pthread_cond_destroy(&l->idle);
        pthread_cond_destroy(&l->space);
        pthread_cond_destroy(&l->ready);
        pthread_mutex_destroy(&l->mu);
    }
    for (int i = 0; l->slots && i < l->nslots; i++) {
        cdl_free(l->slots[i].x);
        cdl_free(l->slots[i].y);
        cdl_free(l->slots[i].raw);
        free(l->slots[i].err);
    }
    cdl_free(l->slots);
    cdl_free(l->threads);
    cdl_free(l->order);
    cdl_free(l->fmean);
    cdl_free(l->fstd);
    cdl_free(l);
}

/* Programs built before the macro of that name (lib/core/sized.h) call
 * the plain function: their struct ended with world at the latest. */
void cdl_loader_defaults_sized(cdl_loader_config *cfg, size_t size)
{
    sized_zeros(cfg, size);
}

void (cdl_loader_defaults)(cdl_loader_config *cfg)
{
    sized_zeros(cfg, SIZED_UPTO(cdl_loader_config, world));
}

/* cfg as this libcdl's struct: fields a caller built against an older,
 * smaller one does not know keep their defaults (zero). The first struct
 * with a size ends with world. */
static int read_config(const cdl_loader_config *in, cdl_loader_config *out)
{
    cdl_loader_defaults(out);
    if (!in)
        return cdl_error("cdl_loader_create: dataset or config is NULL");
    return sized_read(in, out, sizeof *out, offsetof(cdl_loader_config, world) + sizeof in->world,
                      "cdl_loader_config", "cdl_loader_defaults");
}

cdl_loader *cdl_loader_create(const cdl_dataset *d, const cdl_loader_config *cfg)
{
    cdl_loader_config cv;
    if (read_config(cfg, &cv) || check_config(d, &cv))
        return NULL;
    const cdl_loader_config *c = &cv;
    long samples = sampler_count(d->n, c->rank, c->world, c->pad);
    long batches = c->drop_last ? samples / c->batch_size
                                : (samples + c->batch_size - 1) / c->batch_size;
    if (c->drop_last && samples > 0 && batches == 0) {
        cdl_error("loader: batch size %d is larger than the %ld samples of rank %d of %d and "
                  "drop_last drops the only batch: lower --batch-size", c->batch_size, samples,
                  c->rank, c->world);
        return NULL;
    }

    cdl_loader *l = cdl_calloc(1, sizeof *l);
    if (!l)
        return NULL;
    l->d = d;
    l->cfg = *c;
    l->sample_size = (size_t)d->shape.c * d->shape.h * d->shape.w;
    l->label_len = d->label_len > 1 ? (size_t)d->label_len : 1;
    l->samples = samples;
    l->batches = batches;
    l->held = -1;
    for (int k = 0; k < 3; k++)
        normalise_lut(l->luts[k], d->mean[k < d->shape.c ? k : d->shape.c - 1],
                      d->std[k < d->shape.c ? k : d->shape.c - 1]);

    /* workers = 0 fills one slot in the caller; otherwise prefetch slots,
     * never more than there are batches. */
    int nslots = c->workers == 0 ? 1 : c->prefetch ? c->prefetch : 2 * c->workers;
    if (c->workers && nslots < 2)
        nslots = 2;
    if (nslots > batches)
        nslots = batches > 0 ? (int)batches : 1;
    l->nslots = nslots;
    if (d->features) {
        l->fmean = cdl_malloc((size_t)d->shape.c * sizeof(float));
        l->fstd = cdl_malloc((size_t)d->shape.c * sizeof(float));
        if (!l->fmean || !l->fstd) {
            loader_destroy(l, 0);
            return NULL;
        }
        for (int k = 0; k < d->shape.c; k++) {
            l->fmean[k] = d->shape.c > 3 ? d->channel_mean[k] : d->mean[k];
            l->fstd[k] = d->shape.c > 3 ? d->channel_std[k] : d->std[k];
        }
    }
    l->order = d->tokens ? NULL : cdl_malloc((size_t)d->n * sizeof *l->order);
    l->slots = cdl_calloc((size_t)nslots, sizeof *l->slots);
    l->threads = cdl_calloc(c->workers ? (size_t)c->workers : 1, sizeof *l->threads);
    if ((!l->order && !d->tokens) || !l->slots || !l->threads) {
        loader_destroy(l, 0);
        return NULL;
    }
    for (int i = 0; i < nslots; i++) {
        l->slots[i].x = cdl_malloc((size_t)c->batch_size * l->sample_size * sizeof(float));
        l->slots[i].y = cdl_malloc((size_t)c->batch_size * l->label_len * sizeof(int32_t));
        if (d->stream && !(l->slots[i].raw = cdl_malloc(l->sample_size))) {
            loader_destroy(l, 0);
            return NULL;
        }
        if (!l->slots[i].x || !l->slots[i].y) {
            loader_destroy(l, 0);
            return NULL;
        }
    }

    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->ready, NULL);
    pthread_cond_init(&l->space, NULL);
    pthread_cond_init(&l->idle, NULL);
    l->forks = fork_count();
    for (int i = 0; i < c->workers; i++) {
        int err = pthread_create(&l->threads[i], NULL, worker_main, l);
        if (err) {
            cdl_error("loader: cannot start worker thread %d of %d: %s: use fewer --workers", i,
                      c->workers, strerror(err));
            loader_destroy(l, 1);
            return NULL;
        }
        l->nthreads++;
    }
    return l;
}

void cdl_loader_destroy(cdl_loader *l)
{
    if (l)
        loader_destroy(l, 1);
}

long cdl_loader_samples(const cdl_loader *l)
{
    return l ? l->samples : 0;
}

long cdl_loader_batches(const cdl_loader *l)
{
    return l ? l->batches : 0;
}

int cdl_loader_start_epoch(cdl_loader *l, int epoch, long first_batch)
{
    if (!l)
        return cdl_error("cdl_loader_start_epoch: loader is NULL");
    if (epoch < 0)
        return cdl_error("loader: epoch %d must be >= 0", epoch);
    if (first_batch < 0 || first_batch > l->batches)
        return cdl_error("loader: cannot resume at batch %ld of an epoch of %ld batches: "
                         "the checkpoint is from another batch size, world size or dataset",
                         first_batch, l->batches);
    adopt_after_fork(l);

    /* Stop claims and let the batches in flight finish: afterwards no
     * worker reads the order. The slot the consumer holds stays valid
     * until its next cdl_loader_next; the ring waits for it. */
    pthread_mutex_lock(&l->mu);
    l->active = 0;
    while (l->busy)
        pthread_cond_wait(&l->idle, &l->mu);
    for (int i = 0; i < l->nslots; i++)
        if (i != l->held)
            l->slots[i].state = SLOT_FREE;
    pthread_mutex_unlock(&l->mu);

    if (l->order)
        sampler_order(l->order, l->d->n, l->cfg.shuffle, l->cfg.seed, epoch);

    pthread_mutex_lock(&l->mu);
    l->epoch = epoch;
    l->next_claim = l->next_deliver = first_batch;
    l->end = l->batches;
    l->active = 1;
    l->started = 1;
    pthread_cond_broadcast(&l->space);
    pthread_mutex_unlock(&l->mu);
    return 0;
}

int cdl_loader_next(cdl_loader *l, cdl_batch *b)
{
    if (!l || !b)
        return cdl_error("cdl_loader_next: loader or batch is NULL");
    if (!l->started)
        return cdl_error("cdl_loader_next: call cdl_loader_start_epoch first");
    adopt_after_fork(l);
    slot *s;
    if (l->cfg.workers == 0) {
        if (l->next_deliver >= l->end)
            return 0;
        s = &l->slots[0];
        s->batch = l->next_deliver++;
        fill_batch(l, s->batch, s);
    } else {
        pthread_mutex_lock(&l->mu);
        if (l->held >= 0) {
            l->slots[l->held].state = SLOT_FREE;
            l->held = -1;
            pthread_cond_signal(&l->space);
        }
        if (l->next_deliver >= l->end) {
            pthread_mutex_unlock(&l->mu);
            return 0;
        }
        int i = (int)(l->next_deliver % l->nslots);
        s = &l->slots[i];
        while (!(s->state == SLOT_READY && s->batch == l->next_deliver))
            pthread_cond_wait(&l->ready, &l->mu);
        s->state = SLOT_HELD;
        l->held = i;
        l->next_deliver++;
        pthread_mutex_unlock(&l->mu);
    }
    if (s->err)   /* the slot stays held: the next call frees it */
        return cdl_error("rank %d: %s", l->cfg.rank, s->err);
    b->n = s->n;
    b->x = s->x;
    b->y = s->y;
    b->index = s->batch;
    return 1;
}
