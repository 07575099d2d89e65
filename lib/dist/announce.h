/* Rank discovery and cdl_dist creation for libcdl's own harness, which
 * says whether rank 0 prints what it found: "cdl: rank 0 of N: ranks from
 * ..." and "cdl: rank 0: collectives over ...". The public entries
 * (cdl_rank_discover, cdl_dist_create_with) always print them; cdl-train
 * -q passes announce = 0 from its configuration (the library reads no
 * environment for it). Discovery owns its line and prints it once per
 * process, whichever call comes first: a program that calls
 * cdl_rank_discover and then cdl_train_run says it once. */
#ifndef CDL_DIST_ANNOUNCE_H
#define CDL_DIST_ANNOUNCE_H

#include <cdl/dist.h>

int rank_discover(cdl_rank_info *info, int announce);
cdl_dist *dist_create(const cdl_rank_info *info, const char *backend, cdl_backend *be,
                      const cdl_dist_config *cfg, int announce);

#endif
