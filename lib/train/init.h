/* What --init did, for the run's report (init.c). */
#ifndef CDL_TRAIN_INIT_H
#define CDL_TRAIN_INIT_H

#include <stddef.h>

#include <cdl/cdl.h>

/* The model's tensors (parameters, then buffers) whose names match the glob
 * `ignore`, comma-separated into buf ("fc.weight, fc.bias"; "" when none);
 * returns how many. A glob that leaves nothing out is most often a typo. */
int init_fresh_names(const cdl_model *m, const char *ignore, char *buf, size_t len);

/* 0 when every parameter and buffer of m (on its backend, a GPU's too) is
 * finite; else -1 with an error naming path (the --init file the weights
 * came from), how many values are NaN or infinite and the first tensor
 * holding one. */
int init_refuse_nonfinite(cdl_model *m, const char *path);

#endif
