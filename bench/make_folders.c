/* Writes the image folders bench/run_readers.sh reads (not a test):
 *   make_folders OUT N_PNG N_JPEG
 * OUT/png/{train,test}/classK/NNNNN.png: the first N_PNG Fashion-MNIST training
 * pictures (28x28 gray) and the whole test set; OUT/jpeg/classK/NNNNN.jpg:
 * N_JPEG 256x256 RGB JPEGs (Fashion-MNIST pictures scaled up and tinted by
 * class, quality 100). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cdl/cdl.h>

#include "tests/unit/img_write.h"   /* the writers the reader tests use */

static void mkdirs(const char *a, const char *b, int classes)
{
    char p[4096];
    snprintf(p, sizeof p, "%s", a);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/%s", a, b);
    mkdir(p, 0755);
    for (int k = 0; k < classes; k++) {
        snprintf(p, sizeof p, "%s/%s/class%d", a, b, k);
        if (mkdir(p, 0755) != 0 && errno != EEXIST) {
            perror(p);
            exit(1);
        }
    }
}

static void check(int rc, const char *path)
{
    if (rc != 0) {
        fprintf(stderr, "make_folders: cannot write %s\n", path);
        exit(1);
    }
}

static void pngs(const char *out, const char *split, const cdl_dataset *d, int n)
{
    char p[4096];
    mkdirs(out, split, 10);
    for (int i = 0; i < n && i < d->n; i++) {
        snprintf(p, sizeof p, "%s/%s/class%d/%05d.png", out, split, d->labels[i], i);
        check(test_write_png(p, d->images + (size_t)i * 784, 28, 28, 1), p);
    }
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: make_folders OUT N_PNG N_JPEG\n");
        return 2;
    }
    const char *out = argv[1];
    int npng = atoi(argv[2]), njpg = atoi(argv[3]);
    cdl_dataset tr, te;
    if (cdl_dataset_load("fashion-mnist", NULL, 1, &tr) || cdl_dataset_load("fashion-mnist", NULL, 0, &te)) {
        fprintf(stderr, "make_folders: %s\n", cdl_last_error());
        return 1;
    }
    char p[4096];
    snprintf(p, sizeof p, "%s/png", out);
    mkdir(out, 0755);
    pngs(p, "train", &tr, npng);
    pngs(p, "test", &te, te.n);

    snprintf(p, sizeof p, "%s/jpeg", out);
    mkdirs(p, ".", 10);
    static uint8_t rgb[256 * 256 * 3];
    for (int i = 0; i < njpg; i++) {
        const uint8_t *src = tr.images + (size_t)(i % tr.n) * 784;
        int c = tr.labels[i % tr.n];
        for (int y = 0; y < 256; y++)
            for (int x = 0; x < 256; x++) {
                int v = src[(y * 28 / 256) * 28 + x * 28 / 256];
                uint8_t *o = rgb + ((size_t)y * 256 + x) * 3;
                o[0] = (uint8_t)(v * (c + 3) / 12);
                o[1] = (uint8_t)(v * (12 - c) / 12);
                o[2] = (uint8_t)((v + x + y) / 3);
            }
        char f[4200];
        snprintf(f, sizeof f, "%s/class%d/%05d.jpg", p, c, i);
        check(test_write_jpeg(f, rgb, 256, 256, 3), f);
    }
    cdl_dataset_free(&tr);
    cdl_dataset_free(&te);
    return 0;
}
