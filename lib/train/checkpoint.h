/* Checkpoint files and the run's position in them (checkpoint.c, config.c).
 * Only rank 0 writes; every rank reads. */
#ifndef CDL_TRAIN_CHECKPOINT_H
#define CDL_TRAIN_CHECKPOINT_H

#include <stddef.h>

#include <cdl/cdl.h>

/* Where a run stands: everything besides tensors that resuming needs. */
typedef struct train_position {
    int epoch;                /* epoch in progress (0-based) */
    long batch;               /* batches of that epoch already done */
    long step;                /* optimizer steps done in total */
    int world;                /* world size that wrote it */
    double best_val_loss;     /* lowest validation loss so far (INFINITY if none) */
    double loss_sum;          /* running sums of the epoch in progress (this rank, */
    double correct, seen;     /* so epoch metrics survive a mid-epoch restart) */
} train_position;

int train_ckpt_save(const char *path, cdl_model *m, cdl_optim *o, const cdl_train_config *cfg,
                    const train_position *pos);
/* Loads model weights, optimizer state and position from path, checking
 * that the file belongs to this model and optimizer. */
int train_ckpt_load(const char *path, cdl_model *m, cdl_optim *o, const cdl_train_config *cfg,
                    train_position *pos);

/* The run's configuration as one JSON object (config.c), stored in each
 * checkpoint's metadata and printed by --verbose runs. */
int train_config_json(const cdl_train_config *cfg, char *buf, size_t len);

#endif
