/* Gradient averaging for data-parallel training, wired into backward.
 *
 * The harness passes ddp_grad_ready as the model's cdl_grad_ready_fn; an
 * implementation may reduce finished gradient buckets while backward still
 * runs, and ddp_finish waits until every gradient is averaged over ranks. */
#ifndef CDL_TRAIN_DDP_H
#define CDL_TRAIN_DDP_H

#include <stddef.h>

#include <cdl/dist.h>
#include <cdl/model.h>

typedef struct ddp ddp;

/* d may be NULL or a world of one: then every call is a no-op. */
ddp *ddp_create(cdl_dist *d, cdl_model *m, size_t bucket_bytes);
void ddp_free(ddp *g);
/* Makes every rank's parameters equal to rank 0's. */
int ddp_broadcast_params(ddp *g);
/* cdl_grad_ready_fn: [offset, offset+count) of the gradients is final. */
void ddp_grad_ready(void *g, size_t offset, size_t count);
/* Waits for all buckets; afterwards the gradients are averaged. */
int ddp_finish(ddp *g);

#endif
