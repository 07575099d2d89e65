/* ZeRO-1's collectives and optimizer shards (--shard-optimizer).
 *
 * - cdl_dist_reduce_scatter leaves in each rank's part (cdl_dist_shard)
 *   exactly the bits cdl_dist_allreduce gives there, and
 *   cdl_dist_allgather_shards rebuilds every rank's whole buffer from the
 *   parts: shm natively (1-3 ranks with 4 KiB slabs: parts cut across
 *   rounds, uneven and empty ones; 4 ranks with the default), hier over two
 *   emulated nodes (the generic path: allreduce, owners' broadcasts).
 * - The parts tile [0, n), are 64-element aligned and the last ones may be
 *   empty.
 * - An optimizer shard steps only its part, with state for that part
 *   only, and the shards' steps together equal the unsharded step bit for
 *   bit (Adam, SGD with momentum). */
#include "testutil.h"
#include "dist_fork.h"

#include <string.h>

#include <cdl/cdl.h>

typedef struct shard_case {
    const char *backend;
    int nodes;               /* emulated nodes (block layout) */
    const char *slab_kb;     /* CDL_SHM_SLAB_KB, NULL = default */
} shard_case;

static const size_t sizes[] = {1, 17, 1001, 20000};

static int shard_rank(int rank, int world, void *arg)
{
    const shard_case *c = arg;
    dist_set_nodes(rank, world, c->nodes);
    if (c->slab_kb)
        setenv("CDL_SHM_SLAB_KB", c->slab_kb, 1);
    cdl_rank_info info;
    cdl_dist_config dc;
    CHILD_CHECK(cdl_rank_discover(&info) == 0 && cdl_dist_config_from_env(&dc) == 0, "%s",
                cdl_last_error());
    dc.timeout_s = 30;
    cdl_dist *d = cdl_dist_create_with(&info, c->backend, NULL, &dc);
    CHILD_CHECK(d, "%s", cdl_last_error());
    size_t maxn = sizes[sizeof sizes / sizeof sizes[0] - 1];
    float *a = cdl_malloc(maxn * sizeof *a), *b = cdl_malloc(maxn * sizeof *b);
    CHILD_CHECK(a && b, "no memory");
    int bad = 0;
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0] && !bad; k++)
        for (int average = 0; average < 2 && !bad; average++) {
            size_t n = sizes[k], lo, hi;
            for (size_t i = 0; i < n; i++)
                a[i] = b[i] = test_value(rank, i);
            CHILD_CHECK(cdl_dist_allreduce(d, a, n, average) == 0, "%s", cdl_last_error());
            CHILD_CHECK(cdl_dist_reduce_scatter(d, b, n, average) == 0, "%s", cdl_last_error());
            cdl_dist_shard(n, world, rank, &lo, &hi);
            if (memcmp(a + lo, b + lo, (hi - lo) * sizeof *a)) {
                fprintf(stderr, "rank %d: n=%zu avg=%d: the reduce-scatter of [%zu, %zu) is not "
                        "the allreduce's\n", rank, n, average, lo, hi);
                bad = 1;
            }
            /* Poison the rest: the gather must bring every part back. */
            for (size_t i = 0; i < n; i++)
                if (i < lo || i >= hi)
                    b[i] = -1.0f;
            CHILD_CHECK(cdl_dist_allgather_shards(d, b, n) == 0, "%s", cdl_last_error());
            if (memcmp(a, b, n * sizeof *a)) {
                fprintf(stderr, "rank %d: n=%zu avg=%d: gathered parts differ\n", rank, n,
                        average);
                bad = 1;
            }
        }
    cdl_free(a);
    cdl_free(b);
    cdl_dist_destroy(d);
    return bad;
}

static void run_case(const shard_case *c, int world)
{
    if (run_world(world, shard_rank, (void *)c, guard_s(60)))
        fail_msg("%s reduce-scatter/allgather on %d ranks failed", c->backend, world);
}

static void test_shm(void **state)
{
    (void)state;
    shard_case c = {"shm", 1, "4"};   /* 4 KiB slabs: parts cut across rounds */
    for (int world = 1; world <= 3; world++)
        run_case(&c, world);
    shard_case big = {"shm", 1, NULL};
    run_case(&big, 4);
}

static void test_hier_two_nodes(void **state)
{
    (void)state;
    shard_case c = {"hier:store", 2, NULL};
    run_case(&c, 4);
}

static void test_parts(void **state)
{
    (void)state;
    const size_t ns[] = {0, 1, 63, 64, 65, 1000, 62006};
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++)
        for (int w = 1; w <= 5; w++) {
            size_t at = 0;
            for (int r = 0; r < w; r++) {
                size_t lo, hi;
                cdl_dist_shard(ns[k], w, r, &lo, &hi);
                assert_true(lo == at && hi >= lo && hi <= ns[k]);
                assert_true(lo % 64 == 0 || lo == ns[k]);
                at = hi;
            }
            assert_int_equal(at, ns[k]);
        }
}

/* Each shard steps its part of the same parameters and gradients; pasted
 * together they are the unsharded optimizer's result, bit for bit. */
static void check_optim(cdl_optim_config oc, int world)
{
    enum { N = 1000, STEPS = 3 };
    cdl_backend *be = cdl_backend_cpu_create(1);
    assert_non_null(be);
    float *p = cdl_malloc(N * sizeof *p), *g = cdl_malloc(N * sizeof *g);
    float *q = cdl_malloc(N * sizeof *q), *got = cdl_malloc(N * sizeof *got);
    assert_true(p && g && q && got);
    for (size_t i = 0; i < N; i++)
        p[i] = test_value(0, i);
    memcpy(q, p, N * sizeof *p);
    cdl_optim *full = cdl_optim_create(&oc, N, be);
    assert_non_null(full);
    cdl_optim **part = cdl_calloc((size_t)world, sizeof *part);
    float **copy = cdl_calloc((size_t)world, sizeof *copy);
    for (int r = 0; r < world; r++) {
        size_t lo, hi, so, sn;
        cdl_dist_shard(N, world, r, &lo, &hi);
        part[r] = cdl_optim_create_shard(&oc, N, lo, hi - lo, be);
        assert_non_null(part[r]);
        cdl_optim_shard(part[r], &so, &sn);
        assert_true(so == lo && sn == hi - lo);
        copy[r] = cdl_malloc(N * sizeof **copy);
        memcpy(copy[r], p, N * sizeof *p);
    }
    for (int s = 0; s < STEPS; s++) {
        for (size_t i = 0; i < N; i++)
            g[i] = test_value(s + 1, i);
        cdl_optim_step(full, p, g, 0.01f);
        for (int r = 0; r < world; r++)
            cdl_optim_step(part[r], copy[r], g, 0.01f);
    }
    for (int r = 0; r < world; r++) {
        size_t lo, hi;
        cdl_dist_shard(N, world, r, &lo, &hi);
        memcpy(got + lo, copy[r] + lo, (hi - lo) * sizeof *got);
        /* Outside its part a shard changes nothing. */
        for (size_t i = 0; i < N; i++)
            if (i < lo || i >= hi)
                assert_memory_equal(&copy[r][i], &q[i], sizeof *q);
        for (int k = 0; k < cdl_optim_nstate(full); k++)
            if (hi > lo)
                assert_memory_equal(cdl_optim_state(part[r], k), cdl_optim_state(full, k) + lo,
                                    (hi - lo) * sizeof(float));
        cdl_optim_destroy(part[r]);
        cdl_free(copy[r]);
    }
    assert_memory_equal(got, p, N * sizeof *p);
    /* A shard outside the parameters is refused, naming the range. */
    assert_null(cdl_optim_create_shard(&oc, N, N - 10, 11, be));
    assert_non_null(strstr(cdl_last_error(), "outside the 1000 parameters"));
    cdl_free(part);
    cdl_free(copy);
    cdl_optim_destroy(full);
    cdl_free(p);
    cdl_free(g);
    cdl_free(q);
    cdl_free(got);
    cdl_backend_destroy(be);
}

static void test_optim_shards(void **state)
{
    (void)state;
    cdl_optim_config adam = cdl_optim_defaults(CDL_OPTIM_ADAMW);
    check_optim(adam, 3);
    cdl_optim_config sgd = cdl_optim_defaults(CDL_OPTIM_SGD);
    sgd.momentum = 0.9f;
    sgd.weight_decay = 1e-3f;
    check_optim(sgd, 4);
}

int main(void)
{
    clear_launcher_env();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parts),
        cmocka_unit_test(test_optim_shards),
        cmocka_unit_test(test_shm),
        cmocka_unit_test(test_hier_two_nodes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
