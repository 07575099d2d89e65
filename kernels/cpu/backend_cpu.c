/* The CPU backend: the ops table, create/destroy and host "device" memory.
 * Kernels live in conv2d.c, linear.c, pool2d.c, eltwise.c, xent.c, optim.c,
 * reduce.c, bnorm.c, act.c, join.c, layernorm.c and embedding.c; threading
 * in pool.c. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "kernels/cpu/cpu.h"
#include "lib/core/backends.h"
#include "lib/core/log.h"

static void *cpu_alloc(cdl_backend *be, size_t bytes)
{
    (void)be;
    return cdl_calloc(1, bytes ? bytes : 1);
}

static void cpu_free(cdl_backend *be, void *p)
{
    (void)be;
    cdl_free(p);
}

/* Device memory is host memory: the copies are memmove (src and dst may be
 * the same buffer when a caller skips the host_memory shortcut). */
static void cpu_to_device(cdl_backend *be, void *dst, const void *src, size_t bytes)
{
    (void)be;
    if (bytes && dst != src)
        memmove(dst, src, bytes);
}

static void cpu_to_host(cdl_backend *be, void *dst, const void *src, size_t bytes)
{
    (void)be;
    if (bytes && dst != src)
        memmove(dst, src, bytes);
}

static void cpu_copy(cdl_backend *be, void *dst, const void *src, size_t bytes)
{
    (void)be;
    if (bytes && dst != src)
        memmove(dst, src, bytes);
}

/* Every op has returned by the time it is called: nothing to wait for. */
static int cpu_sync(cdl_backend *be)
{
    (void)be;
    return 0;
}

/* OpenBLAS's thread count is the process's, not the backend's: the first
 * live CPU backend sets it to 1 (our pool owns the threading, every worker
 * calls a single-threaded BLAS) and the last one gives the program its
 * count back, unless the program set another meanwhile. Before, a program
 * that trained a model and then ran its own OpenBLAS products ran them on
 * one core for the rest of its life. */
static pthread_mutex_t blas_lock = PTHREAD_MUTEX_INITIALIZER;
static int blas_users, blas_saved;

static void blas_hold(void)
{
    pthread_mutex_lock(&blas_lock);
    if (blas_users++ == 0) {
        blas_saved = openblas_get_num_threads();
        openblas_set_num_threads(1);
    }
    pthread_mutex_unlock(&blas_lock);
}

static void blas_release(void)
{
    pthread_mutex_lock(&blas_lock);
    if (blas_users > 0 && --blas_users == 0 && blas_saved > 1 &&
        openblas_get_num_threads() == 1)
        openblas_set_num_threads(blas_saved);
    pthread_mutex_unlock(&blas_lock);
}

static void cpu_destroy(cdl_backend *be)
{
    cpu_impl *impl = be->impl;
    pool_destroy(impl->pool);
    blas_release();
    cdl_free(impl);
    cdl_free(be);
}

static const cdl_backend_ops cpu_ops = {
    .name = "cpu",
    .alloc = cpu_alloc,
    .free = cpu_free,
    .to_device = cpu_to_device,
    .to_host = cpu_to_host,
    .copy = cpu_copy,
    .fill = cpu_fill,
    .sync = cpu_sync,
    .conv2d_workspace = cpu_conv2d_workspace,
    .linear_workspace = cpu_linear_workspace,
    .conv2d_fwd = cpu_conv2d_fwd,
    .conv2d_bwd = cpu_conv2d_bwd,
    .linear_fwd = cpu_linear_fwd,
    .linear_bwd = cpu_linear_bwd,
    .linear_act_fwd = cpu_linear_act_fwd,
    .linear_add_fwd = cpu_linear_add_fwd,
    .linear_act_bwd = cpu_linear_act_bwd,
    .linear_act_grad_fwd = cpu_linear_act_grad_fwd,
    .linear_mul_bwd = cpu_linear_mul_bwd,
    .maxpool_fwd = cpu_maxpool_fwd,
    .maxpool_bwd = cpu_maxpool_bwd,
    .avgpool_fwd = cpu_avgpool_fwd,
    .avgpool_bwd = cpu_avgpool_bwd,
    .relu_fwd = cpu_relu_fwd,
    .relu_bwd = cpu_relu_bwd,
    .dropout_fwd = cpu_dropout_fwd,
    .dropout_bwd = cpu_dropout_bwd,
    .xent_fwd_bwd = cpu_xent_fwd_bwd,
    .sgd_step = cpu_sgd_step,
    .adam_step = cpu_adam_step,
    .sumsq = cpu_sumsq,
    .scale = cpu_scale,
    .bn_sum = cpu_bn_sum,
    .bn_sqdev = cpu_bn_sqdev,
    .bn_train_fwd = cpu_bn_train_fwd,
    .bn_train_fwd_add_relu = cpu_bn_train_fwd_add_relu,
    .bn_train_bwd = cpu_bn_train_bwd,
    .bn_apply = cpu_bn_apply,
    .bn_running = cpu_bn_running,
    .bn_eval = cpu_bn_eval,
    .bn_bwd_sums = cpu_bn_bwd_sums,
    .bn_bwd_apply = cpu_bn_bwd_apply,
    .bn_fold = cpu_bn_fold,
    .gap_fwd = cpu_gap_fwd,
    .gap_bwd = cpu_gap_bwd,
    .act_fwd = cpu_act_fwd,
    .act_bwd = cpu_act_bwd,
    .add = cpu_add,
    .accumulate = cpu_accumulate,
    .add_relu = cpu_add_relu,
    .relu_bwd_split = cpu_relu_bwd_split,
    .relu_bwd_split_add = cpu_relu_bwd_split_add,
    .channel_copy = cpu_channel_copy,
    .xent_ls_fwd_bwd = cpu_xent_ls_fwd_bwd,
    .layernorm_fwd = cpu_layernorm_fwd,
    .layernorm_bwd = cpu_layernorm_bwd,
    .layernorm_bwd_acc = cpu_layernorm_bwd_acc,
    .embedding_fwd = cpu_embedding_fwd,
    .embedding_bwd = cpu_embedding_bwd,
    .bcast_add_fwd = cpu_bcast_add_fwd,
    .bcast_add_bwd = cpu_bcast_add_bwd,
    .attn_workspace = cpu_attn_workspace,
    .attn_fwd = cpu_attn_fwd,
    .attn_bwd = cpu_attn_bwd,
    .destroy = cpu_destroy,
};

/* OpenBLAS picks its kernels by CPU model when it loads; a model newer than
 * the library (Debian 12's 0.3.21 on recent Xeons) gets the SSE3 "Prescott"
 * fallback, several times slower for the linear layers and wide
 * convolutions. It cannot be changed in-process: cdl's programs start
 * again with OPENBLAS_CORETYPE set (cli/blas_core.c); a program of the
 * library's users is told once how to fix it. */
const char *cdl_blas_core(void)
{
    const char *core = openblas_get_corename();
    return core ? core : "unknown";
}

const char *cdl_blas_core_advice(void)
{
    if (getenv("OPENBLAS_CORETYPE") || strcmp(cdl_blas_core(), "Prescott") != 0)
        return NULL;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512bw") ? "SkylakeX"
           : __builtin_cpu_supports("avx2")   ? "Haswell"
                                              : NULL;
#else
    return NULL;
#endif
}

static void check_blas_kernels(void)
{
    static atomic_flag checked = ATOMIC_FLAG_INIT;   /* backends made in two threads */
    if (atomic_flag_test_and_set(&checked))
        return;
    /* Once per job, not once per rank: the first rank variable set decides. */
    const char *rank_vars[] = {"RANK", "PMIX_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"};
    for (size_t i = 0; i < sizeof rank_vars / sizeof *rank_vars; i++) {
        const char *v = getenv(rank_vars[i]);
        if (v && *v) {
            if (strcmp(v, "0") != 0)
                return;
            break;
        }
    }
    const char *better = cdl_blas_core_advice();
    if (better)
        log_line(CDL_LOG_WARNING, stderr,
                 "cdl: warning: OpenBLAS does not know this CPU and uses its slow SSE3 kernels "
                 "(core Prescott): export OPENBLAS_CORETYPE=%s for the ones this CPU supports",
                 better);
}

cdl_backend *cpu_backend_open(const cdl_backend_params *params)
{
    cdl_backend *be = cdl_backend_cpu_create(params->threads);
    if (be)
        ((cpu_impl *)be->impl)->fast_conv = params->fast_conv == 1;
    return be;
}

cdl_backend *cdl_backend_cpu_create(int threads)
{
    if (threads == 0)
        threads = cdl_default_threads();
    if (threads < 1 || threads > CPU_MAX_THREADS) {
        cdl_error("CPU backend: %d threads requested; use 1..%d (0 = one per CPU of this task)",
                  threads, CPU_MAX_THREADS);
        return NULL;
    }
    check_blas_kernels();

    cdl_backend *be = cdl_calloc(1, sizeof *be);
    cpu_impl *impl = cdl_calloc(1, sizeof *impl);
    if (!be || !impl) {
        cdl_free(be);
        cdl_free(impl);
        return NULL;
    }
    impl->threads = threads;
    impl->pool = pool_create(threads);
    if (!impl->pool) {
        cdl_free(impl);
        cdl_free(be);
        return NULL;
    }
    be->ops = &cpu_ops;
    be->host_memory = 1;
    be->threads = threads;
    be->impl = impl;
    /* Debian's OpenBLAS is the pthread build: left alone it starts its own
     * threads next to ours and both pools fight for the cores. */
    blas_hold();
    return be;
}
