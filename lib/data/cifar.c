/* CIFAR-10 binary batches: data_batch_1..5.bin (train), test_batch.bin.
 *
 * Each record is 1 label byte (0..9) and 3072 image bytes: 1024 red, 1024
 * green, 1024 blue, each 32x32 row-major, i.e. already (c,h,w). A file must
 * be a non-empty whole number of records.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cdl/cdl.h>

#include "lib/data/internal.h"

#define CIFAR_PIXELS (3 * 32 * 32)
#define CIFAR_RECORD (1 + CIFAR_PIXELS)
#define CIFAR_CLASSES 10
#define CIFAR_TRAIN_FILES 5

static void cifar_path(char *buf, size_t len, const char *dir, int train, int i)
{
    if (train)
        snprintf(buf, len, "%s/data_batch_%d.bin", dir, i + 1);
    else
        snprintf(buf, len, "%s/test_batch.bin", dir);
}

/* Opens path and returns its record count, or -1. */
static long cifar_open(const char *path, const char *hint, FILE **f)
{
    int fd = data_open_regular(path, hint);
    if (fd < 0)
        return -1;
    *f = fdopen(fd, "rb");
    if (!*f) {
        close(fd);
        return cdl_error("cannot open %s: %s: %s", path, strerror(errno), hint);
    }
    struct stat st;
    if (fstat(fileno(*f), &st) != 0)
        return cdl_error("cannot stat %s: %s", path, strerror(errno));
    if (st.st_size <= 0 || st.st_size % CIFAR_RECORD != 0)
        return cdl_error("%s is %lld bytes, not a non-zero multiple of the %d-byte CIFAR-10 "
                         "record (1 label + 3x32x32 pixels): it is truncated or not a binary "
                         "CIFAR-10 batch; re-download the binary version",
                         path, (long long)st.st_size, CIFAR_RECORD);
    return (long)(st.st_size / CIFAR_RECORD);
}

/* Reads count records into images/labels (already offset for this file). */
static int cifar_records(FILE *f, const char *path, long count, uint8_t *images, int32_t *labels)
{
    for (long i = 0; i < count; i++) {
        int label = getc(f);
        uint8_t *img = images + (size_t)i * CIFAR_PIXELS;
        if (label == EOF || fread(img, 1, CIFAR_PIXELS, f) != CIFAR_PIXELS)
            return cdl_error("cannot read record %ld of %s: %s: the file changed while reading "
                             "or is damaged", i, path, ferror(f) ? strerror(errno) : "short read");
        if (label >= CIFAR_CLASSES)
            return cdl_error("%s: label %d of record %ld is out of range 0..%d: not a CIFAR-10 "
                             "batch (CIFAR-100's files have two label bytes); re-download it",
                             path, label, i, CIFAR_CLASSES - 1);
        labels[i] = label;
    }
    return 0;
}

int cifar_read(const char *dir, int train, const char *hint, cdl_dataset *out)
{
    int nfiles = train ? CIFAR_TRAIN_FILES : 1;
    FILE *files[CIFAR_TRAIN_FILES] = { 0 };
    long counts[CIFAR_TRAIN_FILES];
    char path[4096];
    long total = 0;
    int rc = 0;

    /* Size everything first so the dataset is allocated once. */
    for (int i = 0; i < nfiles && rc == 0; i++) {
        cifar_path(path, sizeof path, dir, train, i);
        counts[i] = cifar_open(path, hint, &files[i]);
        if (counts[i] < 0)
            rc = -1;
        else if (counts[i] > INT_MAX - total)
            rc = cdl_error("%s: %ld records make more than %d samples in all", path, counts[i],
                           INT_MAX);
        else
            total += counts[i];
    }
    if (rc == 0) {
        out->n = (int)total;
        out->shape = (cdl_shape){ 3, 32, 32 };
        out->images = cdl_malloc((size_t)total * CIFAR_PIXELS);
        out->labels = cdl_malloc((size_t)total * sizeof *out->labels);
        if (!out->images || !out->labels)
            rc = -1;
    }
    long first = 0;
    for (int i = 0; i < nfiles && rc == 0; i++) {
        cifar_path(path, sizeof path, dir, train, i);
        rc = cifar_records(files[i], path, counts[i], out->images + (size_t)first * CIFAR_PIXELS,
                           out->labels + first);
        first += counts[i];
    }
    for (int i = 0; i < nfiles; i++)
        if (files[i])
            fclose(files[i]);
    return rc;
}
