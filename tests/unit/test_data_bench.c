/* How much a sample costs the loader: uint8 -> normalised float with and
 * without the crop/flip augmentation, and whole epochs through the loader.
 * Built by make check, run by hand (not a test: it only prints timings):
 *   tests/unit/test_data_bench [fashion-mnist-dir]
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <cdl/cdl.h>

#include "lib/data/internal.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Best of 3 passes over the dataset's samples, in ns per sample. */
static double convert_ns(const cdl_dataset *d, int augment)
{
    size_t ss = (size_t)d->shape.c * d->shape.h * d->shape.w;
    float luts[3][256], *out = cdl_malloc(64 * ss * sizeof *out);
    for (int k = 0; k < 3; k++)
        normalise_lut(luts[k], d->mean[k], d->std[k] > 0 ? d->std[k] : 1);
    double best = 1e30;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = now();
        for (long i = 0; i < d->n; i++) {
            aug_params a = augment ? augment_draw(1, rep, i, CDL_AUGMENT_CROP_FLIP) : augment_none();
            convert_sample(d->images + (size_t)i * ss, d->shape, (const float (*)[256])luts, a,
                           out + (size_t)(i % 64) * ss);
        }
        double t = (now() - t0) / d->n * 1e9;
        best = t < best ? t : best;
    }
    cdl_free(out);
    return best;
}

/* One epoch through the loader (workers threads), best of 3, ns per sample. */
static double loader_ns(const cdl_dataset *d, int augment, int workers)
{
    cdl_loader_config cfg = { .size = sizeof cfg, .batch_size = 64, .shuffle = 1,
                              .augment = augment, .pad = 1, .workers = workers, .seed = 1,
                              .world = 1 };
    if (getenv("PREFETCH"))
        cfg.prefetch = atoi(getenv("PREFETCH"));
    cdl_loader *l = cdl_loader_create(d, &cfg);
    if (!l) {
        fprintf(stderr, "%s\n", cdl_last_error());
        exit(1);
    }
    double best = 1e30;
    cdl_batch b;
    for (int e = 0; e < 3; e++) {
        double t0 = now();
        cdl_loader_start_epoch(l, e, 0);
        long n = 0;
        while (cdl_loader_next(l, &b) == 1)
            n += b.n;
        double t = (now() - t0) / n * 1e9;
        best = t < best ? t : best;
    }
    cdl_loader_destroy(l);
    return best;
}

int main(int argc, char **argv)
{
    cdl_dataset fm, synth, cifar;
    if (cdl_dataset_load("fashion-mnist", argc > 1 ? argv[1] : NULL, 1, &fm) != 0) {
        fprintf(stderr, "%s\nusing synthetic 1x28x28 data instead\n", cdl_last_error());
        if (cdl_dataset_synthetic(60000, (cdl_shape){ 1, 28, 28 }, 10, 1, &fm) != 0)
            return 1;
    }
    if (cdl_dataset_synthetic(fm.n, fm.shape, 10, 1, &synth) != 0)
        return 1;
    if (cdl_dataset_synthetic(50000, (cdl_shape){ 3, 32, 32 }, 10, 1, &cifar) != 0)
        return 1;
    printf("conversion only (one thread), ns/sample:\n");
    printf("  %-14s 1x28x28 plain    %8.1f\n", fm.name, convert_ns(&fm, 0));
    printf("  %-14s 3x32x32 plain    %8.1f\n", "cifar-shaped", convert_ns(&cifar, 0));
    printf("  %-14s 3x32x32 augment  %8.1f\n", "cifar-shaped", convert_ns(&cifar, 1));
    printf("whole epochs through the loader (batch 64, shuffled), ns/sample:\n");
    for (int w = 0; w <= 2; w++) {
        printf("  workers=%d  %-14s plain %8.1f", w, fm.name, loader_ns(&fm, 0, w));
        printf("   cifar-shaped plain %8.1f augment %8.1f\n", loader_ns(&cifar, 0, w),
               loader_ns(&cifar, 1, w));
    }
    printf("  workers=0  synthetic of the same shape  plain %8.1f\n", loader_ns(&synth, 0, 0));
    cdl_dataset_free(&fm);
    cdl_dataset_free(&synth);
    cdl_dataset_free(&cifar);
    return 0;
}
