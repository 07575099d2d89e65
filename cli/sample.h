/* What cdl-generate does with one position's logits and with the prompt,
 * kept apart from the model so it is tested on its own
 * (tests/unit/test_sample.c). */
#ifndef CDL_CLI_SAMPLE_H
#define CDL_CLI_SAMPLE_H

#include <stddef.h>

#include "core/rng.h"

/* The next token drawn from logits (vocab) as nanoGPT's sample.py does:
 * logits / temperature, all but the top_k largest dropped (0 = keep all;
 * ties with the k-th largest are kept), softmax, one draw from r.
 * temperature 0 is greedy: the largest logit, ties to the lower id (as
 * argmax), without drawing. scratch: 2 * vocab doubles. */
int sample_next(const float *logits, int vocab, double temperature, int top_k, rng_state *r,
                double *scratch);

/* "1,2,3" -> token ids (cdl_malloc'd into *ids, *n of them), each in
 * [0, vocab). 0, or -1 with cdl_last_error naming the bad entry. */
int sample_parse_tokens(const char *s, int vocab, int **ids, int *n);

#endif
