/* A resume with another batch geometry than the checkpoint's (world size,
 * --batch-size, --accum-steps; the last two only with --resume-allow): the
 * checkpoint counts the unfinished epoch in batches of the run that wrote
 * it, so the batch index has to be converted, or the run would skip or
 * repeat samples (batch 10 of 32 samples is sample 320; of 64, 640).
 *
 * An epoch's order is one permutation read rank-interleaved (rank r takes
 * positions r, r+world, ...; lib/data/sampler.c), so batch b of every rank
 * done means positions [0, b * batch * world) done. On the same number of
 * ranks the new batch index is exact when that count is a whole number of
 * new batches, and refused otherwise; on another number of ranks the
 * positions may fall between ranks, and the epoch continues at the last
 * whole batch before (with a warning, as before --batch-size could
 * change). A resume inside an --accum-steps group takes the group's rest
 * as a shorter step (grads.c). The step
 * count becomes the one the new geometry has there, so the schedule (in
 * steps) still ends with the last epoch. */
#include <stdio.h>

#include "checkpoint.h"

int train_resume_realign(const train_geometry *was, const train_geometry *now, int epoch,
                         long steps_now, long *batch, long *step, int *exact)
{
    long b = *batch;
    *exact = 1;
    if (b >= was->batches) {
        b = now->batches;   /* the epoch's end: its end is still to do */
    } else {
        long done = b * was->batch_size * was->world;   /* positions of the epoch done */
        long per = (long)now->batch_size * now->world;
        if (was->world == now->world && done % per != 0) {
            long rank_done = b * was->batch_size;
            /* The old geometry's step at the epoch's end: groups of
             * --accum-steps on the epoch's grid (grads.c). */
            long left = (was->batches + was->accum - 1) / was->accum - b / was->accum;
            return cdl_error("cannot resume epoch %d with --batch-size %d: each rank has done %ld "
                             "of its samples (%ld batches of %d), not a whole number of batches "
                             "of %d, so the epoch would skip or repeat samples. Finish the epoch "
                             "with the checkpoint's --batch-size %d --accum-steps %d and "
                             "--max-steps %ld first, then resume with the new ones at the next "
                             "epoch's start; or pick a --batch-size that divides %ld",
                             epoch + 1, now->batch_size, rank_done, b, was->batch_size,
                             now->batch_size, was->batch_size, was->accum, *step + left,
                             rank_done);
        }
        b = done / per;   /* on another world size: repeats less than a batch */
        *exact = was->world == now->world;
        if (b > now->batches)
            b = now->batches;
    }
    *batch = b;
    /* Micro-batches group on the epoch's grid of --accum-steps (grads.c):
     * b / accum whole steps lie before b. */
    *step = (long)epoch * steps_now + (b >= now->batches ? steps_now : b / now->accum);
    return 0;
}
