/* libcdl: a training library in C for HPC clusters.
 *
 * Conventions shared by every public header:
 *  - Functions that can fail return 0 on success and -1 on failure (or NULL
 *    for constructors); cdl_last_error() then says what failed and what to do.
 *  - NULL: such a function given a NULL object (a model, optimizer, loader,
 *    backend, cdl_dist, file) or a NULL out-pointer fails like that, naming
 *    itself, unless its comment gives NULL a meaning. The functions that
 *    cannot report a failure (void ones, accessors such as cdl_model_nparams,
 *    the _defaults/_init functions) take only valid pointers: NULL there is
 *    the caller's bug, as with the C library. cdl_X_destroy, cdl_st_close,
 *    cdl_dataset_free and cdl_free accept NULL and do nothing.
 *  - Tensors are float32, NCHW, contiguous. Pointers called *_dev live in the
 *    backend's memory (host memory for the CPU backend).
 *  - Nothing is allocated inside a training step; every buffer a step needs is
 *    sized when the model, optimizer and loader are created.
 */
#ifndef CDL_CDL_H
#define CDL_CDL_H

#include <stddef.h>
#include <stdint.h>

#include <cdl/backend.h>
#include <cdl/model.h>
#include <cdl/optim.h>
#include <cdl/data.h>
#include <cdl/ckpt.h>
#include <cdl/dist.h>
#include <cdl/train.h>
#include <cdl/version.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The library's version, "MAJOR.MINOR.PATCH", at run time (a program
 * built against older headers may run with a newer libcdl of the same
 * soname); CDL_VERSION_STRING is the headers' (cdl/version.h). */
const char *cdl_version(void);

/* Which build of that version the library is: `git describe --dirty` of
 * the source it was built from ("v0.1.0-72-g755e68e-dirty"), or "" when
 * built outside a git checkout (a release tarball, where the version says
 * it all). Two builds of one version differ here; cdl-train --version
 * shows it and training checkpoints record it ("cdl_build"). Ranks of one
 * job are compared by version only (cdl_dist_create): a site's libcdl
 * built on each node from the same release has no id, or the same. */
const char *cdl_build_id(void);

/* The message of the last failure on this thread ("" if none yet). It
 * names the file, rank, option or value involved and says what to do.
 * Like errno, it is meaningful only right after a call that reported a
 * failure (-1, or NULL from a constructor): a call that succeeds does not
 * clear it, and may even replace it (cdl_backend_create("auto", ...)
 * records why it found no GPU, then makes a CPU backend). So test the
 * return value, never whether the message is empty. The pointer stays
 * valid for the thread's life; the text changes with the next failure. */
const char *cdl_last_error(void);

/* Records a failure message (printf-style) for cdl_last_error(); returns -1 so
 * callers can write `return cdl_error("...")`. */
int cdl_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* All heap memory of libcdl and its CPU kernels goes through these, so tests
 * can prove a training step allocates nothing (cdl_alloc_count before/after). */
void *cdl_malloc(size_t bytes);            /* 64-byte aligned, NULL + error on failure */
void *cdl_calloc(size_t n, size_t size);   /* zeroed, 64-byte aligned */
void cdl_free(void *p);
uint64_t cdl_alloc_count(void);            /* number of successful cdl_malloc/calloc calls */

/* Number of CPUs this process should keep busy: SLURM_CPUS_PER_TASK (at
 * most the CPUs in this process's affinity mask), else OMP_NUM_THREADS,
 * else the CPUs in the affinity mask. */
int cdl_default_threads(void);

/* Objects are made by cdl_X_create and released by cdl_X_destroy. The names
 * before that rule, deprecated (for code not yet updated; to be removed): */
#define cdl_model_free cdl_model_destroy
#define cdl_optim_free cdl_optim_destroy
#define cdl_loader_free cdl_loader_destroy
#define cdl_dist_init cdl_dist_create
#define cdl_dist_finalize cdl_dist_destroy

#ifdef __cplusplus
}
#endif
#endif
