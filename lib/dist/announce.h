/* Rank discovery and cdl_dist creation for libcdl's own harness, which
 * says whether rank 0 prints what it found: "cdl: rank 0 of N: ranks from
 * ..." and "cdl: rank 0: collectives over ...". The public entries
 * (cdl_rank_discover, cdl_dist_create_with) always print them; cdl-train
 * -q passes announce = 0 from its configuration (the library reads no
 * environment for it). Discovery owns its line and prints it once per
 * process, whichever call comes first: a program that calls
 * cdl_rank_discover and then cdl_train_run says it once. */
/* stop (NULL: never): 1 when the process was asked to stop (cdl_train_run's
 * SIGTERM/SIGUSR1); the set-up's waits are then left at once (the
 * bootstrap's, boot.h; the shared-memory attach; NCCL's communicator
 * setup), and dist_create fails with an error naming the rank and the
 * wait. MPI_Init and MPI_Comm_split cannot be left: a stop there ends the
 * process with stop_status (its watchdog, watchdog.h). */
#ifndef CDL_DIST_ANNOUNCE_H
#define CDL_DIST_ANNOUNCE_H

#include <cdl/dist.h>

int rank_discover(cdl_rank_info *info, int announce);
cdl_dist *dist_create(const cdl_rank_info *info, const char *backend, cdl_backend *be,
                      const cdl_dist_config *cfg, int announce, int (*stop)(void),
                      int stop_status);

#endif
