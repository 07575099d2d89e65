/* Bootstrap: how ranks exchange the little they need before collectives
 * work (shared-memory segment names, NCCL ids, node layout).
 *
 * Two implementations behind one interface: PMIx (Put / Commit / Fence with
 * collected data / Get) when a PMIx server started the job, else the TCP
 * store that rank 0 serves at MASTER_ADDR:MASTER_PORT (store.h). Keys are per
 * rank: boot_put stores under this rank, boot_get reads another rank's. */
#ifndef CDL_DIST_BOOT_H
#define CDL_DIST_BOOT_H

#include <stddef.h>

#include <cdl/dist.h>

#include "store.h"

typedef struct boot boot;

/* Collective over all ranks of info. Bounded by timeout_s. */
/* What every rank publishes first: text, so that any later release can
 * still read it (its size never changes). */
typedef struct boot_release {
    char release[96];   /* "cdl 0.1.0 (rank contract 5)", then after its NUL
                         * the build (cdl_build_id(), "" when none): builds
                         * that compare the string only never see it */
    char host[64];      /* SLURMD_NODENAME, else the host name */
} boot_release;
void boot_release_of(boot_release *r, const char *release);
/* The build of r (after the release's NUL): a plain id, or "" when r has
 * none (an earlier build's record, a release tarball's build). */
const char *boot_release_build(const boot_release *r);
/* 0 when other (rank other_rank's) is this rank's release, else -1 with an
 * error naming both ranks, nodes, releases and builds. One side is rank 0.
 * Builds of the same release agree (the site's libcdl built on each node). */
int boot_release_compare(int rank, const boot_release *me, int other_rank,
                         const boot_release *other);

/* Every rank must run the same cdl release (cdl_version()): checked first,
 * with an error naming both releases and nodes. */
/* stop (NULL: never): 1 when this process was asked to stop
 * (cdl_train_run's SIGTERM/SIGUSR1); every wait of the bootstrap (the
 * store's connect, gets and barriers; a PMIx fence) is then left at once
 * with an error naming the rank and the wait. */
boot *boot_open(const cdl_rank_info *info, double timeout_s, double hello_s,
                int (*stop)(void));
/* The same, as if this rank ran `release` (tests: another version). */
boot *boot_open_as(const cdl_rank_info *info, double timeout_s, double hello_s,
                   const char *release);
void boot_close(boot *b);
const char *boot_kind(const boot *b);            /* "pmix" or "store" */

/* Publishes this rank's value for key (visible to others after boot_fence). */
int boot_put(boot *b, const char *key, const void *val, size_t len);
/* Collective: every rank's puts before it are visible to all after it. */
int boot_fence(boot *b);
/* Reads rank's value for key into buf (exactly len bytes expected). */
int boot_get(boot *b, int rank, const char *key, void *buf, size_t len);
/* From now on b's waits no longer look at boot_open's stop: the bootstrap
 * is done, and what follows (hier:store's collectives over the same store)
 * must let a step end after a signal. NULL: nothing. */
void boot_stop_off(boot *b);
/* The TCP store behind b, or NULL under PMIx. */
store *boot_store(boot *b);

/* PMIx (pmix_boot.c). pmix_present: the environment shows a PMIx server
 * (PMIX_RANK / PMIX_NAMESPACE) and libcdl was built with PMIx. */
int pmix_present(void);
/* Fills info from PMIx job-level keys; source "pmix". */
int pmix_discover(cdl_rank_info *info);

struct boot_ops {
    const char *kind;
    int (*put)(boot *b, const char *key, const void *val, size_t len);
    int (*fence)(boot *b);
    int (*get)(boot *b, int rank, const char *key, void *buf, size_t len);
    void (*close)(boot *b);
};

struct boot {
    const struct boot_ops *ops;
    int rank, world;
    double timeout;
    store *st;        /* store bootstrap */
    void *impl;       /* PMIx bootstrap */
    long fences;      /* fences done, to name them */
    int (*stop)(void);   /* boot_open's */
};

/* PMIx bootstrap; NULL with cdl_error when unavailable. */
int pmix_boot_open(boot *b, const cdl_rank_info *info);

#endif
