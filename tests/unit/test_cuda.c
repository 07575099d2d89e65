/* The CUDA backend's host side, on any machine: creation without a GPU
 * (a clear error, no crash), the TF32 switch, the device copy of the
 * dropout mask function, and the recorder of whole-step CUDA graphs. On a
 * machine with a GPU the no-GPU assertions are skipped; tests/gpu/run.sh
 * checks the ops there. */
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#include <cdl/cdl.h>

#include "kernels/cuda/dropout_keep.h"
#ifdef HAVE_CUDA
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/impl.h"
#endif

/* The __host__ __device__ copy must draw exactly backend.h's masks. */
static void test_dropout_keep_copy(void **state)
{
    (void)state;
    const float ps[] = {0.0f, 1e-7f, 0.1f, 0.25f, 0.5f, 0.9f, 0.999999f, 1.0f};
    uint64_t seed = 1;
    for (int s = 0; s < 64; s++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        for (size_t k = 0; k < sizeof ps / sizeof ps[0]; k++)
            for (uint64_t i = 0; i < 512; i++) {
                uint64_t idx = i * 2654435761ull + (uint64_t)s;
                assert_int_equal(cuk_dropout_keep(seed, idx, ps[k]),
                                 cdl_dropout_keep(seed, idx, ps[k]));
            }
    }
}

static void test_parse_tf32(void **state)
{
    (void)state;
    int conv = -1, mm = -1;
    assert_int_equal(cdl_backend_parse_tf32("on", "--tf32", &conv, &mm), 0);
    assert_true(conv == 1 && mm == 1);
    assert_int_equal(cdl_backend_parse_tf32("OFF", "--tf32", &conv, &mm), 0);
    assert_true(conv == 0 && mm == 0);
    assert_int_equal(cdl_backend_parse_tf32("default", "--tf32", &conv, &mm), 0);
    assert_true(conv == 1 && mm == 0);
    assert_int_equal(cdl_backend_parse_tf32("yes", "--tf32", &conv, &mm), -1);
    assert_non_null(strstr(cdl_last_error(), "--tf32 'yes'"));
    assert_non_null(strstr(cdl_last_error(), "on"));
    assert_int_equal(cdl_backend_parse_tf32(NULL, "CDL_TF32", &conv, &mm), -1);
}

/* A backend without asynchronous entries (the CPU): the fallbacks make
 * one loop work on it, nothing CUDA-specific happens, nothing breaks. */
static void test_cpu_backend_passthrough(void **state)
{
    (void)state;
    cdl_backend *be = cdl_backend_cpu_create(1);
    if (!be)
        skip();   /* the CPU backend is not built in this tree yet */
    assert_false(cdl_backend_is_async(be));
    assert_int_equal(cdl_backend_graph_begin(be, 7), 0);
    assert_int_equal(cdl_backend_graph_end(be), 0);
    cdl_backend_graph_reset(be);
    /* Host buffers are plain zeroed memory; copy_in is a plain copy. */
    float *h = cdl_backend_host_alloc(be, 4 * sizeof(float));
    assert_non_null(h);
    assert_true(h[0] == 0 && h[3] == 0);
    float *d = be->ops->alloc(be, 4 * sizeof(float));
    h[2] = 5.0f;
    assert_int_equal(cdl_backend_copy_in(be, d, h, 4 * sizeof(float)), 0);
    assert_int_equal(cdl_backend_copy_in_wait(be), 0);
    assert_true(d[2] == 5.0f);
    be->ops->free(be, d);
    cdl_backend_host_free(be, h);
    /* Its ops finish before they return: every step mark is done. */
    assert_int_equal(cdl_backend_mark(be, 1), 0);
    assert_int_equal(cdl_backend_mark_done(be, 1), 1);
    assert_int_equal(cdl_backend_mark_wait(be, 1), 0);
    assert_int_equal(cdl_backend_mark(be, CDL_BACKEND_MARKS), -1);
    assert_non_null(strstr(cdl_last_error(), "slot"));
    assert_null(cdl_backend_stream(be));
    unsigned char uuid[16];
    assert_int_equal(cdl_backend_device_uuid(be, uuid), -1);
    assert_non_null(strstr(cdl_last_error(), "cpu"));
    cdl_backend_destroy(be);
}

static void test_create_without_gpu(void **state)
{
    (void)state;
    cdl_backend *be = cdl_backend_cuda_create(-1);
    if (be) {   /* a GPU machine: run.sh checks it */
        assert_string_equal(be->ops->name, "cuda");
        assert_int_equal(be->ops->sync(be), 0);
        cdl_backend_destroy(be);
        skip();
    }
#ifdef HAVE_CUDA
    assert_non_null(strstr(cdl_last_error(), "no CUDA GPU is visible"));
#else
    assert_non_null(strstr(cdl_last_error(), "built without CUDA"));
#endif
    assert_non_null(strstr(cdl_last_error(), "--device cpu"));
    assert_int_equal(cdl_backend_cuda_device_count(), 0);
    /* Any device number fails the same way, and again and again. */
    assert_null(cdl_backend_cuda_create(3));
    assert_null(cdl_backend_cuda_create(0));
    assert_null(cdl_backend_create("cuda", 1));
    assert_non_null(strstr(cdl_last_error(), "--device cpu"));
}

/* Creation parameters: a struct of another size is refused with what to
 * do, NULL means the defaults, the TF32 switch reaches the backend (libcdl
 * reads no CDL_TF32: cdl-train does, tests/e2e/cli.sh). */
static void test_backend_params(void **state)
{
    (void)state;
    cdl_backend_params p;
    cdl_backend_params_init(&p);
    assert_int_equal(p.size, sizeof p);
    assert_int_equal(p.device, -1);
    assert_true(p.tf32_conv == -1 && p.tf32_matmul == -1);
    p.size = 3;
    assert_null(cdl_backend_create_with("cpu", &p));
    assert_non_null(strstr(cdl_last_error(), "cdl_backend_params_init"));
    cdl_backend_params_init(&p);
    p.threads = 2;
    cdl_backend *be = cdl_backend_create_with("cpu", &p);
    assert_non_null(be);
    assert_int_equal(be->threads, 2);
    cdl_backend_destroy(be);
    be = cdl_backend_create_with(NULL, NULL);
    assert_non_null(be);
    cdl_backend_destroy(be);
    assert_null(cdl_backend_create_with("tpu", NULL));
    assert_non_null(strstr(cdl_last_error(), "use cpu, cuda or auto"));
#ifdef HAVE_CUDA
    cdl_backend_params_init(&p);
    p.tf32_conv = 0;
    p.tf32_matmul = 1;
    be = cdl_backend_create_with("cuda", &p);
    if (be) {   /* a GPU (or the fake one) */
        int conv = -1, mm = -1;
        assert_int_equal(cuda_backend_get_tf32(be, &conv, &mm), 0);
        assert_true(conv == 0 && mm == 1);
        cdl_backend_destroy(be);
    }
#endif
}

#ifdef HAVE_CUDA
/* A backend state with only the recorder's buffers: cbe_graph_op is host
 * logic and touches nothing else. */
static cbe *recorder(void)
{
    cbe *ci = cdl_calloc(1, sizeof *ci);
    assert_non_null(ci);
    ci->graph.slots[0].sigs = cdl_calloc(GRAPH_MAX_OPS, sizeof *ci->graph.slots[0].sigs);
    ci->graph.host_scalars = cdl_calloc(GRAPH_SCALAR_BYTES, 1);
    ci->graph.dev_scalars = cdl_calloc(GRAPH_SCALAR_BYTES, 1);
    assert_true(ci->graph.slots[0].sigs && ci->graph.host_scalars && ci->graph.dev_scalars);
    return ci;
}

static void recorder_free(cbe *ci)
{
    cdl_free(ci->graph.slots[0].sigs);
    cdl_free(ci->graph.host_scalars);
    cdl_free(ci->graph.dev_scalars);
    cdl_free(ci);
}

static void test_graph_signatures(void **state)
{
    (void)state;
    const uint64_t a[] = {1, 2, 3}, b[] = {1, 2, 4};
    assert_true(cbe_sig(1, a, 3) == cbe_sig(1, a, 3));
    assert_true(cbe_sig(1, a, 3) != cbe_sig(1, b, 3));
    assert_true(cbe_sig(1, a, 3) != cbe_sig(2, a, 3));
    assert_true(cbe_sig(1, a, 2) != cbe_sig(1, a, 3));
}

static void test_graph_recorder(void **state)
{
    (void)state;
    cbe *ci = recorder();
    step_graph *g = &ci->graph;
    graph_slot *c = &g->slots[g->cur];   /* the open step's (slot 0) */
    const void *dyn = (const void *)1;
    float lr = 0.5f;
    double big[2] = {1.5, 2.5};

    /* Outside graphs ops run and read by-value scalars. */
    assert_int_equal(cbe_graph_op(ci, "a", 11, &lr, sizeof lr, &dyn), 0);
    assert_null(dyn);

    /* Capture: ops run (are captured), scalars go to aligned slots. */
    g->mode = GRAPH_CAPTURE;
    assert_int_equal(cbe_graph_op(ci, "a", 11, NULL, 0, &dyn), 0);
    assert_null(dyn);
    assert_int_equal(cbe_graph_op(ci, "b", 22, &lr, sizeof lr, &dyn), 0);
    assert_ptr_equal(dyn, g->dev_scalars);
    assert_int_equal(cbe_graph_op(ci, "c", 33, big, sizeof big, &dyn), 0);
    assert_ptr_equal(dyn, g->dev_scalars + 16);
    assert_int_equal(c->nsigs, 3);
    assert_memory_equal(g->host_scalars, &lr, sizeof lr);

    /* Replay: nothing is enqueued; new scalars land in the same slots. */
    g->mode = GRAPH_REPLAY;
    g->pos = 0;
    g->scalars_used = 0;
    lr = 0.25f;
    big[1] = -7.0;
    assert_int_equal(cbe_graph_op(ci, "a", 11, NULL, 0, &dyn), 1);
    assert_int_equal(cbe_graph_op(ci, "b", 22, &lr, sizeof lr, &dyn), 1);
    assert_int_equal(cbe_graph_op(ci, "c", 33, big, sizeof big, &dyn), 1);
    assert_int_equal(g->pos, 3);
    assert_memory_equal(g->host_scalars, &lr, sizeof lr);
    assert_memory_equal(g->host_scalars + 16, big, sizeof big);
    assert_false(c->broken || ci->failed);

    /* A replay that diverges is refused and reported. */
    g->pos = 0;
    g->scalars_used = 0;
    assert_int_equal(cbe_graph_op(ci, "a", 11, NULL, 0, &dyn), 1);
    assert_int_equal(cbe_graph_op(ci, "relu_fwd", 99, NULL, 0, &dyn), 1);
    assert_true(c->broken && ci->failed);
    assert_non_null(strstr(ci->err, "op 2 of the step (relu_fwd) differs"));
    assert_non_null(strstr(cdl_last_error(), "differs from the captured step"));
    recorder_free(ci);
}

static void test_graph_scalar_overflow(void **state)
{
    (void)state;
    cbe *ci = recorder();
    const void *dyn;
    static unsigned char sc[GRAPH_SCALAR_BYTES / 4];
    ci->graph.mode = GRAPH_CAPTURE;
    for (int i = 0; i < 4; i++)
        assert_int_equal(cbe_graph_op(ci, "sgd_step", 5, sc, sizeof sc, &dyn), 0);
    assert_false(ci->failed);
    cbe_graph_op(ci, "adam_step", 6, sc, sizeof sc, &dyn);
    assert_true(ci->failed);
    assert_non_null(strstr(ci->err, "exceed"));
    recorder_free(ci);
}

static void test_error_hints(void **state)
{
    (void)state;
    assert_non_null(strstr(cbe_cuda_hint(cudaErrorMemoryAllocation), "--batch-size"));
    assert_non_null(strstr(cbe_cuda_hint(cudaErrorNoKernelImageForDevice), "NVCC_ARCH_FLAGS"));
    assert_non_null(strstr(cbe_cuda_hint(cudaErrorInsufficientDriver), "--device cpu"));
    cbe *ci = recorder();
    assert_int_equal(CU_CHECK(ci, cudaErrorInvalidValue), -1);
    /* file:line, the call as written, the error, the hint */
    assert_non_null(strstr(ci->err, "tests/unit/test_cuda.c:"));
    assert_non_null(strstr(ci->err, "cudaErrorInvalidValue"));
    assert_non_null(strstr(ci->err, "out of range"));
    assert_int_equal(CU_CHECK(ci, cudaSuccess), 0);
    recorder_free(ci);
}
#endif

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dropout_keep_copy),
        cmocka_unit_test(test_parse_tf32),
        cmocka_unit_test(test_cpu_backend_passthrough),
        cmocka_unit_test(test_create_without_gpu),
        cmocka_unit_test(test_backend_params),
#ifdef HAVE_CUDA
        cmocka_unit_test(test_graph_signatures),
        cmocka_unit_test(test_graph_recorder),
        cmocka_unit_test(test_graph_scalar_overflow),
        cmocka_unit_test(test_error_hints),
#endif
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
