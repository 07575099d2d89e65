/* Helpers shared by the model tests: device copies, the mean
 * cross-entropy through the backend, and error measures. */
#ifndef CDL_MODEL_TESTUTIL_H
#define CDL_MODEL_TESTUTIL_H

#include "testutil.h"

#include <string.h>

#include <cdl/cdl.h>

/* Device copy of n host floats (or int32s). */
static inline void *dev_upload(cdl_backend *be, const void *host, size_t bytes)
{
    void *d = be->ops->alloc(be, bytes);
    assert_non_null(d);
    be->ops->to_device(be, d, host, bytes);
    return d;
}

/* Host copy (malloc'd) of n device floats. */
static inline float *host_copy(cdl_backend *be, const float *dev, size_t n)
{
    float *h = malloc(n * sizeof *h + 1);
    be->ops->to_host(be, h, dev, n * sizeof *h);
    return h;
}

/* Max |a-b| / max|b| (both float): the error relative to the tensor's
 * scale, so small gradients are held to the same standard as large ones. */
static inline double norm_err_ff(const float *a, const float *b, size_t n)
{
    double maxdiff = 0, maxref = 1e-30;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        maxdiff = d > maxdiff ? d : maxdiff;
        maxref = fabs((double)b[i]) > maxref ? fabs((double)b[i]) : maxref;
    }
    return maxdiff / maxref;
}

/* Mean softmax cross-entropy of a batch and its logits' gradient, through
 * the backend's fused op (the way the harness computes it). */
typedef struct loss_bufs {
    cdl_backend *be;
    int n, classes;
    int32_t *labels, *pred;
    float *dlogits, *loss;
} loss_bufs;

static inline void loss_bufs_init(loss_bufs *b, cdl_backend *be, int n, int classes,
                                  const int32_t *labels_host)
{
    b->be = be;
    b->n = n;
    b->classes = classes;
    b->labels = dev_upload(be, labels_host, (size_t)n * sizeof(int32_t));
    b->pred = be->ops->alloc(be, (size_t)n * sizeof(int32_t));
    b->loss = be->ops->alloc(be, (size_t)n * sizeof(float));
    b->dlogits = be->ops->alloc(be, (size_t)n * classes * sizeof(float));
    assert_true(b->pred && b->loss && b->dlogits);
}

static inline double loss_bufs_run(loss_bufs *b, const float *logits_dev)
{
    float loss[1024];
    assert_true(b->n <= 1024);
    b->be->ops->xent_fwd_bwd(b->be, b->n, b->classes, logits_dev, b->labels, 1.0f / (float)b->n,
                             b->dlogits, b->loss, b->pred);
    b->be->ops->to_host(b->be, loss, b->loss, (size_t)b->n * sizeof(float));
    double sum = 0;
    for (int i = 0; i < b->n; i++)
        sum += loss[i];
    return sum / b->n;
}

static inline void loss_bufs_free(loss_bufs *b)
{
    void *p[] = {b->labels, b->pred, b->loss, b->dlogits};
    for (int i = 0; i < 4; i++)
        b->be->ops->free(b->be, p[i]);
}

#endif
