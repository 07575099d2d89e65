/* Node-local staging of the dataset files (--stage, stage.c). Internal. */
#ifndef CDL_TRAIN_STAGE_H
#define CDL_TRAIN_STAGE_H

#include <stddef.h>

#include "run.h"

/* Before the data is read: with --stage auto|DIR, local rank 0 of every
 * node copies the files of the dataset's directory into a per-job
 * directory of node-local storage and verifies sizes and CRC-32s, while the
 * node's other ranks wait (in rounds of a collective while the copy
 * progresses, each bounded by CDL_TIMEOUT); then
 * every rank reads from there. Sets r->data_dir (the directory to read:
 * the staged copy, or the original when staging is off or skipped) and
 * reports what it did and how long it took. Returns 0, -1 on an error, or
 * 1 on every rank when SIGTERM/SIGUSR1 stopped a copy (signals.h): a copy
 * of many GB is not finished first, and an automatic copy is removed by
 * train_stage_cleanup as after an error. */
int train_stage(run *r);

/* At the end of the run (ok: it succeeded, so every rank meets in a
 * barrier first): removes the per-job copy this process made (never a DIR
 * the user gave). */
void train_stage_cleanup(run *r, int ok);

/* --stage auto's per-job copies under base: locks dir/.lock (shared) for
 * as long as the returned descriptor is open, creating dir (0700) if
 * needed, waiting at most timeout_s while another process holds it
 * exclusively (a sweep removing it); -1 with an error (naming the holder
 * when the wait timed out), -2 when dir is there but is not a folder of
 * this account's (another account took the name first). A copy whose lock nobody holds belongs to a
 * run that ended without removing it (SIGKILL, out of memory, a crash):
 * train_stage_sweep removes those of this account under base and returns
 * how many. */
int train_stage_lock(const char *dir, double timeout_s);
int train_stage_sweep(const char *base);

#endif
