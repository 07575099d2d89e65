/* Choosing a backend by name, its creation parameters, and the optional
 * asynchronous entries with their synchronous fallbacks (backend.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cdl/cdl.h>

#include "backends.h"
#include "log.h"
#include "sized.h"

void cdl_backend_params_init_sized(cdl_backend_params *out, size_t size)
{
    cdl_backend_params d, *p = &d;
    memset(p, 0, sizeof *p);
    p->size = sizeof *p;
    p->device = -1;
    p->tf32_conv = p->tf32_matmul = -1;
    sized_write(out, size, p, sizeof *p);
}

void cdl_backend_params_from_env_sized(cdl_backend_params *out, size_t size)
{
    cdl_backend_params d, *p = &d;
    cdl_backend_params_init(p);
    p->log = getenv("CDL_LOG");
    const char *rpg = getenv("CDL_REPLICAS_PER_GPU");
    p->replicas_per_gpu = rpg && atoi(rpg) > 1 ? atoi(rpg) : 0;
    sized_write(out, size, p, sizeof *p);
}

/* Programs built before the macros of these names (sized.h). */
void (cdl_backend_params_init)(cdl_backend_params *p)
{
    cdl_backend_params_init_sized(p, SIZED_UPTO(cdl_backend_params, precision));
}

void (cdl_backend_params_from_env)(cdl_backend_params *p)
{
    cdl_backend_params_from_env_sized(p, SIZED_UPTO(cdl_backend_params, precision));
}

/* The caller's params as this libcdl's struct: fields it does not know
 * (an older caller's smaller size) keep their defaults. */
static int read_params(const cdl_backend_params *in, cdl_backend_params *out)
{
    cdl_backend_params_init(out);
    if (!in)
        return 0;
    return sized_read(in, out, sizeof *out, offsetof(cdl_backend_params, threads) +
                      sizeof in->threads, "cdl_backend_params", "cdl_backend_params_init");
}

int backend_log_has(const char *s, const char *topic)
{
    size_t n = strlen(topic);
    while (s && *s) {
        size_t len = strcspn(s, ",");
        if ((len == n && !strncmp(s, topic, n)) || (len == 3 && !strncmp(s, "all", 3)))
            return 1;
        s += len + (s[len] == ',');
    }
    return 0;
}

/* The CPU backend computes in fp32 only: bf16 there would be slower, not
 * faster (no bf16 GEMMs in OpenBLAS's sgemm path), so it is refused rather
 * than emulated. With auto, why the GPU was not taken comes first. */
static cdl_backend *cpu_create(const cdl_backend_params *p, const char *gpu_error)
{
    if (p->precision != CDL_PRECISION_FP32) {
        cdl_error("precision %s needs a CUDA GPU: the CPU backend computes in fp32 only; use "
                  "--precision fp32 (the default) on the CPU, or --device cuda on a node with "
                  "a GPU%s%s%s", cdl_precision_name(p->precision), gpu_error ? " (" : "",
                  gpu_error ? gpu_error : "", gpu_error ? ")" : "");
        return NULL;
    }
    cdl_backend *be = cpu_backend_open(p);
    /* CDL_LOG=cpu: how many threads it took (ranks sharing CPUs take a
     * share each: cdl_rank_threads), and fast_conv when set. */
    if (be && backend_log_has(p->log, "cpu"))
        log_line(CDL_LOG_INFO, stderr, "cdl: cpu backend with %d thread%s%s", be->threads,
                 be->threads == 1 ? "" : "s",
                 p->fast_conv == 1 ? ", fast_conv (Winograd F(4x4) on AVX2 CPUs and Zen 4)" : "");
    return be;
}

cdl_backend *cdl_backend_create_with(const char *name, const cdl_backend_params *params)
{
    cdl_backend_params p;
    if (read_params(params, &p) != 0)
        return NULL;
    if (p.precision != CDL_PRECISION_FP32 && p.precision != CDL_PRECISION_BF16) {
        cdl_error("cdl_backend_params.precision %d: use CDL_PRECISION_FP32 or "
                  "CDL_PRECISION_BF16", p.precision);
        return NULL;
    }
    if (!name || !strcmp(name, "cpu"))
        return cpu_create(&p, NULL);
    if (!strcmp(name, "cuda"))
        return cuda_backend_open(&p);
    if (!strcmp(name, "auto")) {
        cdl_backend *be = cuda_backend_open_auto(&p);
        if (be)
            return be;
        char why[512];
        snprintf(why, sizeof why, "%s", cdl_last_error());
        return cpu_create(&p, why);
    }
    cdl_error("unknown device '%s': use cpu, cuda or auto", name);
    return NULL;
}

cdl_backend *cdl_backend_create(const char *name, int threads)
{
    cdl_backend_params p;
    cdl_backend_params_init(&p);
    p.threads = threads;
    return cdl_backend_create_with(name, &p);
}

cdl_backend *cdl_backend_cuda_create(int device)
{
    cdl_backend_params p;
    cdl_backend_params_init(&p);
    p.device = device;
    return cuda_backend_open(&p);
}

int cdl_backend_cuda_device_count(void)
{
    return cuda_backend_visible();
}

void cdl_backend_destroy(cdl_backend *be)
{
    if (be)
        be->ops->destroy(be);
}

int cdl_backend_parse_tf32(const char *s, const char *what, int *conv, int *matmul)
{
    if (!conv || !matmul)
        return cdl_error("cdl_backend_parse_tf32: conv or matmul is NULL");
    if (!what)
        what = "tf32";
    if (s && !strcasecmp(s, "on")) {
        *conv = 1;
        *matmul = 1;
    } else if (s && !strcasecmp(s, "off")) {
        *conv = 0;
        *matmul = 0;
    } else if (s && !strcasecmp(s, "default")) {
        *conv = 1;
        *matmul = 0;
    } else {
        return cdl_error("%s '%s': use on (TF32 for convolutions and matrix products), off "
                         "(strict FP32) or default (TF32 for convolutions only, like PyTorch)",
                         what, s ? s : "(null)");
    }
    return 0;
}

int cdl_backend_parse_precision(const char *s, const char *what, int *precision)
{
    if (!precision)
        return cdl_error("cdl_backend_parse_precision: precision is NULL");
    if (!what)
        what = "precision";
    if (s && !strcasecmp(s, "fp32"))
        *precision = CDL_PRECISION_FP32;
    else if (s && !strcasecmp(s, "bf16"))
        *precision = CDL_PRECISION_BF16;
    else
        return cdl_error("%s '%s': use fp32 (every op in fp32) or bf16 (on GPUs: matrix "
                         "products in bf16 with fp32 accumulation and fp32 weights)",
                         what, s ? s : "(null)");
    return 0;
}

const char *cdl_precision_name(int precision)
{
    return precision == CDL_PRECISION_BF16 ? "bf16" : precision == CDL_PRECISION_FP32 ? "fp32"
                                                                                      : "unknown";
}

/* ------------------------------------ optional entries and their fallbacks */

int cdl_backend_is_async(const cdl_backend *be)
{
    return be->ops->mark != NULL;
}

/* The entries below that report failures refuse a NULL backend (a
 * cdl_backend_create that failed, unchecked) with an error. */
#define NEED_BACKEND(be)                                                                           \
    do {                                                                                           \
        if (!(be))                                                                                 \
            return cdl_error("%s: the backend is NULL (did cdl_backend_create fail?)", __func__); \
    } while (0)

void *cdl_backend_host_alloc(cdl_backend *be, size_t bytes)
{
    if (!be) {
        cdl_error("cdl_backend_host_alloc: the backend is NULL (did cdl_backend_create fail?)");
        return NULL;
    }
    return be->ops->host_alloc ? be->ops->host_alloc(be, bytes)
                               : cdl_calloc(1, bytes ? bytes : 1);
}

void cdl_backend_host_free(cdl_backend *be, void *p)
{
    if (be->ops->host_free)
        be->ops->host_free(be, p);
    else
        cdl_free(p);
}

int cdl_backend_copy_in(cdl_backend *be, void *dst_dev, const void *src_host, size_t bytes)
{
    NEED_BACKEND(be);
    if (be->ops->copy_in)
        return be->ops->copy_in(be, dst_dev, src_host, bytes);
    be->ops->to_device(be, dst_dev, src_host, bytes);
    return 0;
}

int cdl_backend_copy_in_wait(cdl_backend *be)
{
    NEED_BACKEND(be);
    return be->ops->copy_in_wait ? be->ops->copy_in_wait(be) : 0;
}

int cdl_backend_mark(cdl_backend *be, int slot)
{
    NEED_BACKEND(be);
    if (slot < 0 || slot >= CDL_BACKEND_MARKS)
        return cdl_error("backend %s: step mark slot %d is not 0..%d", be->ops->name, slot,
                         CDL_BACKEND_MARKS - 1);
    return be->ops->mark ? be->ops->mark(be, slot) : 0;
}

/* Without marks every op is done when it returns; sync() still reports a
 * fault the ops kept. */
int cdl_backend_mark_done(cdl_backend *be, int slot)
{
    NEED_BACKEND(be);
    if (be->ops->mark_done)
        return be->ops->mark_done(be, slot);
    return be->ops->sync(be) == 0 ? 1 : -1;
}

int cdl_backend_mark_wait(cdl_backend *be, int slot)
{
    NEED_BACKEND(be);
    return be->ops->mark_wait ? be->ops->mark_wait(be, slot) : be->ops->sync(be);
}

int cdl_backend_graph_begin(cdl_backend *be, uint64_t key)
{
    NEED_BACKEND(be);
    return be->ops->graph_begin ? be->ops->graph_begin(be, key) : 0;
}

int cdl_backend_graph_end(cdl_backend *be)
{
    NEED_BACKEND(be);
    return be->ops->graph_end ? be->ops->graph_end(be) : 0;
}

void cdl_backend_graph_reset(cdl_backend *be)
{
    if (be->ops->graph_reset)
        be->ops->graph_reset(be);
}

void *cdl_backend_stream(cdl_backend *be)
{
    return be->ops->stream ? be->ops->stream(be) : NULL;
}

const char *cdl_backend_device_name(cdl_backend *be)
{
    return be->ops->device_name ? be->ops->device_name(be) : NULL;
}

int cdl_backend_device_uuid(cdl_backend *be, unsigned char uuid[16])
{
    if (!uuid)
        return cdl_error("cdl_backend_device_uuid: uuid is NULL");
    memset(uuid, 0, 16);
    NEED_BACKEND(be);
    if (!be->ops->device_uuid)
        return cdl_error("backend %s has no device identity (only GPU backends do)",
                         be->ops->name);
    return be->ops->device_uuid(be, uuid);
}
