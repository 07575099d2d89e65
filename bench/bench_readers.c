/* Loader throughput on an image folder (bench/run_readers.sh, not a test):
 *   bench_readers DIR IMAGE_SIZE WORKERS [BATCH [memory|stream]]
 * Loads DIR (memory: decoding with WORKERS threads; stream: listing it),
 * then runs two shuffled epochs through the loader with WORKERS workers
 * (stream: they decode). Prints one RESULT line: the load and epoch times
 * and images/s of load + first epoch (what a PyTorch DataLoader epoch does:
 * decode, resize, normalise) and of a later epoch. The normalisation is
 * given (mean 0.5, std 0.25, as bench/torch_loader.py's), not computed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cdl/cdl.h>

#include "bench_util.h"

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: bench_readers DIR IMAGE_SIZE WORKERS [BATCH]\n");
        return 2;
    }
    int workers = atoi(argv[3]), batch = argc > 4 ? atoi(argv[4]) : 256;
    int stream = argc > 5 && !strcmp(argv[5], "stream");
    cdl_dataset_options o;
    cdl_dataset_options_defaults(&o);
    o.image_size = atoi(argv[2]);
    o.threads = workers;
    o.decode = stream ? CDL_DECODE_STREAM : CDL_DECODE_MEMORY;
    static const float mean[1] = {0.5f}, sd[1] = {0.25f};
    o.normalize = CDL_NORMALIZE_GIVEN;
    o.norm_count = 1;
    o.norm_mean = mean;
    o.norm_std = sd;
    cdl_dataset d;
    double t0 = bench_now();
    if (cdl_dataset_load_with("imagefolder", argv[1], 1, &o, &d) != 0) {
        fprintf(stderr, "bench_readers: %s\n", cdl_last_error());
        return 1;
    }
    double t1 = bench_now();
    cdl_loader_config lc;
    cdl_loader_defaults(&lc);
    lc.batch_size = batch;
    lc.shuffle = 1;
    lc.workers = workers;
    lc.world = 1;
    cdl_loader *l = cdl_loader_create(&d, &lc);
    if (!l) {
        fprintf(stderr, "bench_readers: %s\n", cdl_last_error());
        return 1;
    }
    double epoch[2];
    double sink = 0;
    for (int e = 0; e < 2; e++) {
        double s = bench_now();
        cdl_batch b;
        cdl_loader_start_epoch(l, e, 0);
        int got;
        while ((got = cdl_loader_next(l, &b)) == 1)
            sink += b.x[0];
        if (got < 0) {
            fprintf(stderr, "bench_readers: %s\n", cdl_last_error());
            return 1;
        }
        epoch[e] = bench_now() - s;
    }
    printf("RESULT n=%d shape=%dx%dx%d decode=%s workers=%d load_s=%.3f epoch_s=%.3f first_img_s=%.0f "
           "later_img_s=%.0f (sink %g)\n", d.n, d.shape.c, d.shape.h, d.shape.w, stream ? "stream" : "memory", workers, t1 - t0,
           epoch[0], d.n / (t1 - t0 + epoch[0]), d.n / epoch[1], sink);
    cdl_loader_destroy(l);
    cdl_dataset_free(&d);
    return 0;
}
