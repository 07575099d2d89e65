/* Sampling of cdl-generate (sample.h). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cdl/cdl.h>

#include "sample.h"

static int cmp_desc(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x < y) - (x > y);
}

int sample_next(const float *logits, int vocab, double temperature, int top_k, rng_state *r,
                double *scratch)
{
    int best = 0;
    for (int k = 1; k < vocab; k++)
        if (logits[k] > logits[best])
            best = k;
    if (temperature <= 0 || top_k == 1)
        return best;
    double *p = scratch, *sorted = scratch + vocab;
    /* The k-th largest logit: what top-k keeps is everything >= it. */
    double cut = -INFINITY;
    if (top_k > 0 && top_k < vocab) {
        for (int k = 0; k < vocab; k++)
            sorted[k] = logits[k];
        qsort(sorted, (size_t)vocab, sizeof *sorted, cmp_desc);
        cut = sorted[top_k - 1];
    }
    /* Softmax of logits / temperature, shifted by the largest before the
     * division: each exponent is <= 0 even for a temperature so small that
     * logit / temperature overflows (1e-310: inf - inf was NaN, and the
     * draw fell through to the last id); dropped entries get 0. */
    double sum = 0;
    for (int k = 0; k < vocab; k++) {
        p[k] = logits[k] >= cut ? exp(((double)logits[k] - logits[best]) / temperature) : 0;
        sum += p[k];
    }
    /* Inverse CDF in id order; the last id of non-zero probability catches
     * a u that rounding leaves past the sum. */
    double u = rng_uniform(r) * sum, acc = 0;
    int last = best;
    for (int k = 0; k < vocab; k++) {
        if (p[k] <= 0)
            continue;
        acc += p[k];
        last = k;
        if (u < acc)
            return k;
    }
    return last;
}

int sample_parse_tokens(const char *s, int vocab, int **ids, int *n)
{
    *ids = NULL;
    *n = 0;
    if (!s || !*s)
        return cdl_error("--prompt-tokens: empty: give token ids such as 15496,11,995");
    int count = 1;
    for (const char *q = s; *q; q++)
        count += *q == ',';
    int *v = cdl_malloc((size_t)count * sizeof *v);
    if (!v)
        return -1;
    for (int k = 0; k < count; k++) {
        char *end;
        errno = 0;
        long t = strtol(s, &end, 10);
        if (end == s || errno == ERANGE || *end != (k + 1 < count ? ',' : '\0')) {
            cdl_free(v);
            return cdl_error("--prompt-tokens: entry %d ('%.20s') is not an integer: give "
                             "comma-separated token ids such as 15496,11,995", k + 1, s);
        }
        if (t < 0 || t >= vocab) {
            cdl_free(v);
            return cdl_error("--prompt-tokens: token %ld (entry %d) is outside the model's "
                             "vocabulary [0, %d)", t, k + 1, vocab);
        }
        v[k] = (int)t;
        s = end + (*end == ',');
    }
    *ids = v;
    *n = count;
    return 0;
}
