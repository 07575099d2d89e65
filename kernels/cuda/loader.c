/* The CUDA backend's functions in the shared libcdl of a CUDA build: they
 * load the module cdl-cuda.so (kernels/cuda/module.h) on first use and
 * call it. A process that never asks for a GPU loads nothing: no CUDA
 * runtime, cuBLAS, cuDNN or NCCL in its memory, and it starts on a node
 * that has none of them. --device auto and cdl_backend_cuda_device_count()
 * on a node without an NVIDIA driver answer "no GPU" without loading
 * anything either; an explicit --device cuda always asks the module (and
 * through it the CUDA runtime, whose error then says what is missing).
 *
 * Where the module is looked for, first found first: $CDL_CUDA_MODULE (an
 * absolute path, for a module kept elsewhere), then DIR/cdl/cdl-cuda.so
 * and DIR/cdl-cuda.so where DIR holds this libcdl.so (its installed place
 * in $(pkglibdir), relocated with the library; and the build tree's
 * .libs), then $(pkglibdir) as configured. Only in libcdl.la: programs
 * linking libcdl_core.la have the CUDA code itself. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cdl/cdl.h>

#include "kernels/cuda/module.h"
#include "lib/core/backends.h"
#include "lib/dist/util.h"

#ifndef CDL_CUDA_MODULE_DIR
#error "CDL_CUDA_MODULE_DIR: the build passes $(pkglibdir)"
#endif

static pthread_once_t once = PTHREAD_ONCE_INIT;
static const cdl_cuda_module *mod;
static char load_error[1536];   /* why mod is NULL, repeated on every call */

/* Whether this node has an NVIDIA driver the CUDA runtime could use. */
static int driver_present(void)
{
    static const char *const marks[] = {"/proc/driver/nvidia/version", "/dev/nvidiactl",
                                        "/dev/nvidia0", "/dev/dxg"};
    for (size_t i = 0; i < sizeof marks / sizeof marks[0]; i++)
        if (access(marks[i], F_OK) == 0)
            return 1;
    return 0;
}

/* dlopen path, or an error in load_error. 1: loaded. */
static int try_open(const char *path, void **h)
{
    if (access(path, F_OK) != 0)
        return 0;
    *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!*h)
        snprintf(load_error, sizeof load_error,
                 "cannot load the CUDA backend %s: %s (load the CUDA, cuDNN and NCCL libraries "
                 "this cdl was built with, e.g. `module load cuda`; or use --device cpu)",
                 path, dlerror());
    return 1;
}

static int same_build(const cdl_cuda_module *m, const char *path)
{
    const char *id = m->abi == CDL_CUDA_MODULE_ABI ? m->build_id() : "?";
    if (m->abi == CDL_CUDA_MODULE_ABI && !strcmp(m->version, CDL_VERSION_STRING) &&
        !strcmp(id, cdl_build_id()) && m->params_size == sizeof(cdl_backend_params) &&
        m->ops_size == sizeof(cdl_backend_ops))
        return 1;
    snprintf(load_error, sizeof load_error,
             "the CUDA backend %s belongs to another build of cdl (%s%s%s, module interface %d) "
             "than this libcdl (%s%s%s, interface %d): install the module and libcdl of one "
             "build together, or use --device cpu",
             path, m->abi == CDL_CUDA_MODULE_ABI ? m->version : "?", *id ? " " : "", id, m->abi,
             CDL_VERSION_STRING, *cdl_build_id() ? " " : "", cdl_build_id(), CDL_CUDA_MODULE_ABI);
    return 0;
}

static void load(void)
{
    Dl_info info;
    char dir[1024] = "", path[1100];
    if (dladdr((void *)&cuda_backend_open, &info) && info.dli_fname) {
        const char *slash = strrchr(info.dli_fname, '/');
        if (!strstr(slash ? slash + 1 : info.dli_fname, "libcdl.so")) {
            snprintf(load_error, sizeof load_error,
                     "this program links libcdl statically (libcdl.a), and the CUDA backend is "
                     "a module of the shared libcdl: link with -lcdl (the shared library) to use "
                     "GPUs, or use --device cpu");
            return;
        }
        if (slash)
            snprintf(dir, sizeof dir, "%.*s", (int)(slash - info.dli_fname), info.dli_fname);
    }
    void *h = NULL;
    int found = 0;
    const char *env = getenv("CDL_CUDA_MODULE");
    if (env && *env) {
        if (env[0] != '/') {
            snprintf(load_error, sizeof load_error,
                     "CDL_CUDA_MODULE '%s': give the absolute path of cdl-cuda.so (or unset it)",
                     env);
            return;
        }
        snprintf(path, sizeof path, "%s", env);
        found = try_open(path, &h);
        if (!found) {
            snprintf(load_error, sizeof load_error,
                     "CDL_CUDA_MODULE '%s': no such file (unset it to use the installed module)",
                     env);
            return;
        }
    }
    const char *const fmt[] = {"%s/cdl/" CDL_CUDA_MODULE_FILE, "%s/" CDL_CUDA_MODULE_FILE};
    for (int i = 0; !found && *dir && i < 2; i++) {
        snprintf(path, sizeof path, fmt[i], dir);
        found = try_open(path, &h);
    }
    if (!found) {
        snprintf(path, sizeof path, "%s/" CDL_CUDA_MODULE_FILE, CDL_CUDA_MODULE_DIR);
        found = try_open(path, &h);
    }
    if (!found) {
        snprintf(load_error, sizeof load_error,
                 "this libcdl was built with CUDA, but its CUDA backend module %s is not "
                 "installed (looked in %s%s%s%s%s): install it (the package libcdl0-cuda, or make "
                 "install of this build), set CDL_CUDA_MODULE to its path, or use --device cpu",
                 CDL_CUDA_MODULE_FILE, dir, *dir ? "/cdl, " : "", dir, *dir ? " and " : "",
                 CDL_CUDA_MODULE_DIR);
        return;
    }
    if (!h)
        return;   /* try_open said why */
    const cdl_cuda_module *m = dlsym(h, CDL_CUDA_MODULE_SYMBOL);
    if (!m) {
        snprintf(load_error, sizeof load_error,
                 "%s is not a cdl CUDA backend module (no %s): reinstall it, or use --device cpu",
                 path, CDL_CUDA_MODULE_SYMBOL);
        dlclose(h);
        return;
    }
    if (!same_build(m, path)) {
        dlclose(h);
        return;
    }
    /* What the module's code calls inside libcdl (module.c). */
    cdl_cuda_host host = {
        .backend_log_has = backend_log_has,
        .boot_put = boot_put,
        .boot_get = boot_get,
        .dist_now = dist_now,
        .dist_note_peer_lost = dist_note_peer_lost,
        .kern_sgd_scalars = kern_sgd_scalars,
        .kern_adam_scalars = kern_adam_scalars,
    };
    m->init(&host);
    mod = m;   /* kept loaded for the process's life */
}

/* The module, or NULL with cdl_error. */
static const cdl_cuda_module *module(void)
{
    pthread_once(&once, load);
    if (!mod)
        cdl_error("%s", load_error);
    return mod;
}

static int no_driver(void)
{
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    return cdl_error("no CUDA GPU is visible (no NVIDIA driver on this node: no "
                     "/proc/driver/nvidia/version or /dev/nvidiactl; CUDA_VISIBLE_DEVICES=%s): use "
                     "--device cpu, or run on a node with an NVIDIA GPU and its driver (e.g. srun "
                     "--gpus=1; check nvidia-smi)", vis ? vis : "(unset)");
}

cdl_backend *cuda_backend_open(const cdl_backend_params *params)
{
    const cdl_cuda_module *m = module();
    return m ? m->backend_open(params) : NULL;
}

/* Whether --device auto and the device count may answer "no GPU" without
 * loading anything: no NVIDIA driver on this node, and no module named
 * explicitly (CDL_CUDA_MODULE, which is asked anyway). */
static int plainly_no_gpu(void)
{
    const char *env = getenv("CDL_CUDA_MODULE");
    return !driver_present() && !(env && *env);
}

cdl_backend *cuda_backend_open_auto(const cdl_backend_params *params)
{
    if (plainly_no_gpu()) {
        no_driver();
        return NULL;
    }
    return cuda_backend_open(params);
}

int cuda_backend_visible(void)
{
    if (plainly_no_gpu())
        return 0;
    const cdl_cuda_module *m = module();
    return m ? m->backend_visible() : 0;
}

#ifdef HAVE_NCCL
/* The module with NCCL, or NULL with cdl_error (a module built without
 * NCCL from the same sources passes same_build). */
static const cdl_cuda_module *nccl_module(void)
{
    const cdl_cuda_module *m = module();
    if (m && !m->nccl_prepare) {
        cdl_error("the CUDA backend module was built without NCCL, this libcdl with it: install "
                  "the module of this build, or use another --dist-backend (mpi, hier:mpi)");
        return NULL;
    }
    return m;
}

int nccl_prepare(const coll_group *g, boot *b)
{
    const cdl_cuda_module *m = nccl_module();
    return m ? m->nccl_prepare(g, b) : -1;
}

coll *coll_nccl_create(const coll_group *g, boot *b, int device, int host_buffers,
                       double timeout_s, void *compute_stream)
{
    const cdl_cuda_module *m = nccl_module();
    return m ? m->coll_nccl_create(g, b, device, host_buffers, timeout_s, compute_stream) : NULL;
}
#endif
