/* What --init did, for the run's report (init.c). */
#ifndef CDL_TRAIN_INIT_H
#define CDL_TRAIN_INIT_H

#include <stddef.h>

#include <cdl/cdl.h>

/* The model's tensors (parameters, then buffers) whose names match the glob
 * `ignore`, comma-separated into buf ("fc.weight, fc.bias"; "" when none);
 * returns how many. A glob that leaves nothing out is most often a typo. */
int init_fresh_names(const cdl_model *m, const char *ignore, char *buf, size_t len);

#endif
