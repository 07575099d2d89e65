/* cdl-generate's sampling (cli/sample.c): greedy at temperature 0 and
 * top-k 1, draws that follow softmax(logits / T) restricted to the top k,
 * the same tokens for the same seed, and the --prompt-tokens parser. */
#include "testutil.h"

#include <string.h>

#include <cdl/cdl.h>

#include "cli/sample.h"

enum { V = 6, DRAWS = 20000 };

/* Frequencies of DRAWS draws of sample_next from one seed. */
static void frequencies(const float *z, double t, int k, uint64_t seed, double freq[V])
{
    double scratch[2 * V];
    rng_state r;
    rng_seed(&r, seed);
    memset(freq, 0, V * sizeof *freq);
    for (int i = 0; i < DRAWS; i++) {
        int tok = sample_next(z, V, t, k, &r, scratch);
        assert_true(tok >= 0 && tok < V);
        freq[tok] += 1.0 / DRAWS;
    }
}

static void test_greedy(void **state)
{
    (void)state;
    const float z[V] = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f, 0.0f};
    double scratch[2 * V];
    rng_state r;
    rng_seed(&r, 7);
    /* Temperature 0 and top-k 1: the largest logit, ties to the lower id,
     * and no draw (the generator is left alone). */
    rng_state before = r;
    assert_int_equal(sample_next(z, V, 0, 0, &r, scratch), 1);
    assert_int_equal(sample_next(z, V, 0.8, 1, &r, scratch), 1);
    assert_memory_equal(&before, &r, sizeof r);
    /* A temperature so small that logit / temperature overflows is still
     * the likeliest id (it drew the last id, 5, from NaN probabilities). */
    const float y[V] = {0.5f, 1.0f, -1.0f, 3.0f, 1.0f, 0.0f};
    for (int i = 0; i < 20; i++)
        assert_int_equal(sample_next(y, V, 1e-310, 0, &r, scratch), 3);
}

static void test_softmax_temperature(void **state)
{
    (void)state;
    /* p = softmax(z / T): at T = 1, ids 0..2 in ratio 1:3:9 (z = 0, ln 3,
     * ln 9); ids 3..5 never (very negative). At T = 2 the ratio is
     * 1:sqrt(3):3. 20000 draws: standard error < 0.004. */
    const float z[V] = {0, logf(3), logf(9), -1e30f, -1e30f, -1e30f};
    double f[V];
    frequencies(z, 1.0, 0, 42, f);
    assert_true(fabs(f[0] - 1.0 / 13) < 0.015);
    assert_true(fabs(f[1] - 3.0 / 13) < 0.015);
    assert_true(fabs(f[2] - 9.0 / 13) < 0.015);
    assert_true(f[3] + f[4] + f[5] == 0);
    frequencies(z, 2.0, 0, 42, f);
    double s = 1 + sqrt(3) + 3;
    assert_true(fabs(f[0] - 1 / s) < 0.015);
    assert_true(fabs(f[1] - sqrt(3) / s) < 0.015);
    assert_true(fabs(f[2] - 3 / s) < 0.015);
}

static void test_top_k(void **state)
{
    (void)state;
    /* Equal logits but for the order: top-2 keeps ids 4 and 1 only, each
     * with about half the draws; top-3 keeps the tie at the cut (3 and 5
     * equal the third largest) as nanoGPT does. */
    const float z[V] = {0.0f, 2.0f, 0.5f, 1.0f, 2.0f, 1.0f};
    double f[V];
    frequencies(z, 1.0, 2, 3, f);
    assert_true(f[0] + f[2] + f[3] + f[5] == 0);
    assert_true(fabs(f[1] - 0.5) < 0.02 && fabs(f[4] - 0.5) < 0.02);
    frequencies(z, 1.0, 3, 3, f);
    assert_true(f[0] + f[2] == 0);
    assert_true(f[3] > 0.05 && f[5] > 0.05);
    /* top_k >= vocab keeps every id. */
    frequencies(z, 1.0, V, 3, f);
    for (int k = 0; k < V; k++)
        assert_true(f[k] > 0);
}

static void test_seeded(void **state)
{
    (void)state;
    const float z[V] = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f};
    double scratch[2 * V];
    int a[64], b[64], c[64];
    rng_state ra, rb, rc;
    rng_seed(&ra, 1);
    rng_seed(&rb, 1);
    rng_seed(&rc, 2);
    for (int i = 0; i < 64; i++) {
        a[i] = sample_next(z, V, 1.0, 0, &ra, scratch);
        b[i] = sample_next(z, V, 1.0, 0, &rb, scratch);
        c[i] = sample_next(z, V, 1.0, 0, &rc, scratch);
    }
    assert_memory_equal(a, b, sizeof a);
    assert_memory_not_equal(a, c, sizeof a);
}

static void test_parse_tokens(void **state)
{
    (void)state;
    int *ids, n;
    assert_int_equal(sample_parse_tokens("15496,11,995", 50257, &ids, &n), 0);
    assert_int_equal(n, 3);
    assert_int_equal(ids[0], 15496);
    assert_int_equal(ids[2], 995);
    cdl_free(ids);
    assert_int_equal(sample_parse_tokens("7", 256, &ids, &n), 0);
    assert_int_equal(n, 1);
    cdl_free(ids);
    assert_int_equal(sample_parse_tokens("1,256", 256, &ids, &n), -1);
    assert_non_null(strstr(cdl_last_error(), "256"));
    assert_null(ids);
    assert_int_equal(sample_parse_tokens("1,,2", 256, &ids, &n), -1);
    assert_int_equal(sample_parse_tokens("1,x", 256, &ids, &n), -1);
    assert_non_null(strstr(cdl_last_error(), "entry 2"));
    assert_int_equal(sample_parse_tokens("-1", 256, &ids, &n), -1);
    assert_int_equal(sample_parse_tokens("", 256, &ids, &n), -1);
    assert_int_equal(sample_parse_tokens("1,", 256, &ids, &n), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy),
        cmocka_unit_test(test_softmax_temperature),
        cmocka_unit_test(test_top_k),
        cmocka_unit_test(test_seeded),
        cmocka_unit_test(test_parse_tokens),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
