/* A cheap fingerprint of a training split's contents, stored in checkpoints
 * so that a resume notices data replaced by other data of the same size (a
 * regenerated dataset, a corpus grown by less than one window).
 *
 * It hashes what was loaded, not the files' names or times: a copy of the
 * data on another machine, in another folder or staged to a node's disk
 * gives the same fingerprint (an mtime would not survive `cp` or `rsync`
 * without -t). CRC-32 (zlib) of, in this order:
 *   n, shape (c,h,w), classes, label_len, token_bytes, ntokens (8-byte LE);
 *   the class names; the labels; the samples' bytes (images, features or
 *   tokens); an image folder decoded as batches need them: every picture's
 *   path below the folder, and the size and first 64 KiB of up to 256 of
 *   them, evenly spread.
 * A region of up to 256 MiB is hashed whole; a larger one by 1024 pieces of
 * 64 KiB evenly spread, first and last included (64 MiB). Measured on this
 * project's 2-core build machine, a 2 GiB file: CRC-32 runs at 3.4 GB/s in
 * memory, the whole file read cold takes 1.7 s (and a 10 GB corpus on a
 * cluster's network file system far longer, on every rank), the 1024 pieces
 * read with pread 0.15 s cold. So every byte counts up to 256 MiB (under 0.1
 * s), beyond it a change in a stretch the pieces miss goes unseen: a
 * regenerated or re-tokenized corpus changes everywhere, an edit of a few
 * bytes in a large one does not.
 *
 * The value is "v1 crc32=XXXXXXXX"; a later scheme gets another prefix and
 * is compared only with its own. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include <cdl/cdl.h>

#include "lib/data/internal.h"

enum {
    WHOLE_MAX = 256 << 20,   /* bytes hashed whole */
    PIECES = 1024,
    PIECE = 64 << 10,
    STREAM_FILES = 256,      /* pictures of a stream whose bytes count */
};

static uint32_t crc_u64(uint32_t crc, uint64_t v)
{
    uint8_t b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)(v >> (8 * i));
    return (uint32_t)crc32(crc, b, 8);
}

/* crc32 over len bytes of any size (zlib takes uInt lengths). */
static uint32_t crc_bytes(uint32_t crc, const uint8_t *p, size_t len)
{
    while (len > 0) {
        size_t n = len > (1u << 30) ? (1u << 30) : len;
        crc = (uint32_t)crc32(crc, p, (uInt)n);
        p += n;
        len -= n;
    }
    return crc;
}

/* The offset of piece i of a region of len bytes (> WHOLE_MAX). */
static size_t piece_at(size_t len, int i)
{
    return (size_t)((double)(len - PIECE) * i / (PIECES - 1));
}

/* A region in memory, by the rule above. */
static uint32_t crc_region(uint32_t crc, const uint8_t *p, size_t len)
{
    crc = crc_u64(crc, len);
    if (len <= WHOLE_MAX)
        return crc_bytes(crc, p, len);
    for (int i = 0; i < PIECES; i++)
        crc = crc_bytes(crc, p + piece_at(len, i), PIECE);
    return crc;
}

/* The same region read from fd at offset: pread, not the mapping, since a
 * page fault per piece reads ahead around it (1.4 s cold for the 2 GiB
 * file above, against 0.15 s). */
static int crc_region_fd(uint32_t *crc, int fd, size_t offset, const uint8_t *mem, size_t len,
                         const char *name)
{
    if (len <= WHOLE_MAX || fd < 0) {
        *crc = crc_region(*crc, mem, len);
        return 0;
    }
    uint8_t *buf = malloc(PIECE);
    if (!buf)
        return cdl_error("out of memory");
    uint32_t c = crc_u64(*crc, len);
    for (int i = 0; i < PIECES; i++) {
        size_t at = offset + piece_at(len, i), got = 0;
        while (got < PIECE) {
            ssize_t r = pread(fd, buf + got, PIECE - got, (off_t)(at + got));
            if (r <= 0) {
                int err = r < 0 ? errno : EIO;
                free(buf);
                return cdl_error("%s: reading it for the data's fingerprint: %s (was it cut "
                                 "short?)", name, strerror(err));
            }
            got += (size_t)r;
        }
        c = crc_bytes(c, buf, PIECE);
    }
    free(buf);
    *crc = c;
    return 0;
}

/* Where the paths of a stream's pictures begin to differ: the length of
 * their common folder (ending in '/'), so a copy elsewhere hashes alike. */
static size_t common_folder(const image_stream *s)
{
    if (s->n == 0)
        return 0;
    const char *a = s->paths[0];
    size_t len = strlen(a);
    for (int i = 1; i < s->n && len > 0; i++) {
        size_t k = 0;
        while (k < len && a[k] == s->paths[i][k])
            k++;
        len = k;
    }
    while (len > 0 && a[len - 1] != '/')
        len--;
    return len;
}

static int crc_stream(uint32_t *crc, const image_stream *s)
{
    size_t skip = common_folder(s);
    uint32_t c = *crc;
    for (int i = 0; i < s->n; i++)
        c = (uint32_t)crc32(c, (const uint8_t *)s->paths[i] + skip,
                            (uInt)strlen(s->paths[i] + skip) + 1);
    int files = s->n < STREAM_FILES ? s->n : STREAM_FILES;
    uint8_t *buf = files ? malloc(PIECE) : NULL;
    if (files && !buf)
        return cdl_error("out of memory");
    for (int k = 0; k < files; k++) {
        long i = files == 1 ? 0 : (long)((double)(s->n - 1) * k / (files - 1));
        size_t size;
        int fd = data_open_size(s->paths[i], "the picture was there when the folder was read",
                                &size);
        if (fd < 0) {
            free(buf);
            return -1;
        }
        size_t want = size < PIECE ? size : PIECE, got = 0;
        while (got < want) {
            ssize_t r = read(fd, buf + got, want - got);
            if (r <= 0)
                break;
            got += (size_t)r;
        }
        close(fd);
        c = crc_u64(c, size);
        c = crc_bytes(c, buf, got);
    }
    free(buf);
    *crc = c;
    return 0;
}

int data_fingerprint(const cdl_dataset *d, char *out, size_t len)
{
    uint32_t c = (uint32_t)crc32(0, NULL, 0);
    const uint64_t head[] = {(uint64_t)d->n, (uint64_t)d->shape.c, (uint64_t)d->shape.h,
                             (uint64_t)d->shape.w, (uint64_t)d->classes, (uint64_t)d->label_len,
                             (uint64_t)d->token_bytes, (uint64_t)d->ntokens};
    for (size_t i = 0; i < sizeof head / sizeof head[0]; i++)
        c = crc_u64(c, head[i]);
    for (int i = 0; d->class_names && i < d->classes; i++)
        if (d->class_names[i])
            c = (uint32_t)crc32(c, (const uint8_t *)d->class_names[i],
                                (uInt)strlen(d->class_names[i]) + 1);
    size_t per = (size_t)d->shape.c * d->shape.h * d->shape.w;
    if (d->labels)
        c = crc_region(c, (const uint8_t *)d->labels, (size_t)d->n * sizeof *d->labels);
    int rc = 0;
    if (d->tokens) {
        int fd;
        size_t at;
        const char *name = tokens_source(d, &fd, &at);
        rc = crc_region_fd(&c, fd, at, d->tokens, d->ntokens * (size_t)d->token_bytes, name);
    } else if (d->images) {
        c = crc_region(c, d->images, (size_t)d->n * per);
    } else if (d->features) {
        c = crc_region(c, (const uint8_t *)d->features, (size_t)d->n * per * sizeof(float));
    } else if (d->stream) {
        rc = crc_stream(&c, d->stream);
    }
    if (rc != 0)
        return -1;
    snprintf(out, len, "v1 crc32=%08x", (unsigned)c);
    return 0;
}
