/* Pictures decoded when a batch needs them (an image folder read with
 * --decode stream, or auto when the decoded pictures would not fit in
 * memory): the dataset keeps the file list, and the loader's workers read
 * and decode each sample into their batch. One decoder for both ways of
 * reading a folder (image_file_fit), so a sample's bytes are the same
 * whether it was decoded at load or in a worker. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cdl/cdl.h>

#include "lib/data/internal.h"

int image_colour_in_gray(const char *path, const char *first)
{
    char pn[512], pf[512];
    return cdl_error("%s is a colour picture, but the samples are grayscale because the first "
                     "picture, %s, is: pass --channels 3 to read every picture as RGB (as "
                     "torchvision's ImageFolder does), or --channels 1 to make them all "
                     "grayscale", data_printable(path, pn, sizeof pn),
                     data_printable(first, pf, sizeof pf));
}

int image_file_fit(const char *path, int h, int w, int c, uint8_t *dst, int *src_c)
{
    return image_file_fit_as(path, h, w, c, 0, dst, src_c);
}

int image_file_fit_as(const char *path, int h, int w, int c, int jpeg_full, uint8_t *dst,
                      int *src_c)
{
    char pn[512];
    const char *name = data_printable(path, pn, sizeof pn);
    uint8_t *buf;
    size_t len;
    if (data_read_file(path, IMAGE_MAX_FILE_BYTES, "check the folder layout (docs/data.md)",
                       &buf, &len))
        return -1;
    /* What decoding and shrinking it holds (RGBA or CMYK at most, the
     * float rows of the shrink), told by its header. */
    int ph, pw, pc, gated = 0;
    size_t need = 0;
    if (image_probe(buf, len, name, &ph, &pw, &pc) == 0) {
        need = (size_t)ph * (size_t)pw * 4 + ((size_t)ph + 1) * (size_t)w * 3 * sizeof(float);
        gated = decode_gate_enter(need, name, ph, pw);
    }
    if (gated < 0) {
        cdl_free(buf);
        return -1;
    }
    image_buf im;
    int rc = jpeg_full ? image_decode(buf, len, name, &im)
                       : image_decode_for(buf, len, name, h, w, &im);
    cdl_free(buf);
    if (rc) {
        if (gated)
            decode_gate_leave(need);
        return -1;
    }
    rc = image_fit(&im, h, w, c, dst);
    if (src_c)
        *src_c = im.c;
    cdl_free(im.px);
    if (gated)
        decode_gate_leave(need);
    return rc ? cdl_error("%s: %s", name, cdl_last_error()) : 0;
}

int image_stream_read(const image_stream *s, long i, uint8_t *dst)
{
    if (i < 0 || i >= s->n)
        return cdl_error("image stream: sample %ld of %d", i, s->n);
    int src_c;
    if (image_file_fit_as(s->paths[i], s->h, s->w, s->c, s->jpeg_full, dst, &src_c) == 0)
        return s->gray_from && src_c != 1 ? image_colour_in_gray(s->paths[i], s->gray_from) : 0;
    /* Found while training: say how to find such files before the run. */
    char msg[2048];
    snprintf(msg, sizeof msg, "%s", cdl_last_error());
    return cdl_error("%s (the pictures are decoded as batches need them, --decode stream: "
                     "--skip-bad-files checks every picture before the first epoch and "
                     "leaves the bad ones out)", msg);
}

void image_stream_free(image_stream *s)
{
    if (!s)
        return;
    for (int i = 0; s->paths && i < s->n; i++)
        free(s->paths[i]);
    free(s->paths);
    free(s->gray_from);
    free(s);
}

image_stream *image_stream_subset(const image_stream *s, const uint8_t *pick, uint8_t want,
                                  long count)
{
    image_stream *o = calloc(1, sizeof *o);
    if (!o || !(o->paths = calloc((size_t)count + 1, sizeof *o->paths))) {
        free(o);
        cdl_error("out of memory for a list of %ld pictures", count);
        return NULL;
    }
    o->h = s->h;
    o->w = s->w;
    o->c = s->c;
    o->threads = s->threads;
    if (s->gray_from && !(o->gray_from = strdup(s->gray_from))) {
        image_stream_free(o);
        cdl_error("out of memory for a list of %ld pictures", count);
        return NULL;
    }
    for (long i = 0; i < s->n && o->n < count; i++) {
        if (pick[i] != want)
            continue;
        if (!(o->paths[o->n] = strdup(s->paths[i]))) {
            image_stream_free(o);
            cdl_error("out of memory for a list of %ld pictures", count);
            return NULL;
        }
        o->n++;
    }
    return o;
}

/* The normalisation's histograms: every picture decoded once (in parallel,
 * nothing kept), so the statistics equal those of the same folder decoded
 * into memory. */
typedef struct stats_job {
    const image_stream *s;
    long count;
    pthread_mutex_t mu;
    long next;
    uint64_t hist[3][256];
    int failed;
    char err[1024];
} stats_job;

static void *stats_worker(void *arg)
{
    stats_job *j = arg;
    const image_stream *s = j->s;
    size_t plane = (size_t)s->h * s->w;
    uint8_t *px = cdl_malloc(plane * (size_t)s->c);
    uint64_t hist[3][256];
    memset(hist, 0, sizeof hist);
    int failed = !px;
    char err[1024] = "out of memory";
    for (;;) {
        pthread_mutex_lock(&j->mu);
        long k = j->next++;
        pthread_mutex_unlock(&j->mu);
        if (failed || k >= j->count)
            break;
        if (image_stream_read(s, k, px) != 0) {
            failed = 1;
            snprintf(err, sizeof err, "%s", cdl_last_error());
            break;
        }
        for (int ch = 0; ch < s->c; ch++)
            for (size_t i = 0; i < plane; i++)
                hist[ch][px[ch * plane + i]]++;
    }
    cdl_free(px);
    pthread_mutex_lock(&j->mu);
    for (int ch = 0; ch < 3; ch++)
        for (int v = 0; v < 256; v++)
            j->hist[ch][v] += hist[ch][v];   /* integer sums: the order does not matter */
    if (failed && !j->failed) {
        j->failed = 1;
        snprintf(j->err, sizeof j->err, "%s", err);
    }
    pthread_mutex_unlock(&j->mu);
    return NULL;
}

int image_stream_histograms(const image_stream *s, int threads, uint64_t hist[3][256],
                            double *pixels)
{
    if (s->have_hist) {   /* counted while every file was checked */
        memcpy(hist, s->hist, sizeof s->hist);
        *pixels = (double)s->n * s->h * s->w;
        return 0;
    }
    stats_job j = {.s = s, .count = s->n};
    pthread_mutex_init(&j.mu, NULL);
    if (threads < 1)
        threads = s->threads > 0 ? s->threads : cdl_default_threads();
    if (threads > 64)
        threads = 64;
    if (threads > j.count)
        threads = (int)j.count;
    pthread_t tid[64];
    int started = 0;
    for (int t = 1; t < threads; t++)
        if (pthread_create(&tid[started], NULL, stats_worker, &j) == 0)
            started++;   /* fewer threads only make it slower */
    stats_worker(&j);
    for (int t = 0; t < started; t++)
        pthread_join(tid[t], NULL);
    pthread_mutex_destroy(&j.mu);
    if (j.failed)
        return cdl_error("%s", j.err);
    memcpy(hist, j.hist, sizeof j.hist);
    *pixels = (double)j.count * s->h * s->w;
    return 0;
}
