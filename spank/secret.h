/* The step's store secret, CDL_STORE_TOKEN (docs/rank-contract.md, threat
 * model). Rank 0's store admits only clients presenting it, so it must be
 * unpredictable to other users yet the same on every node of the step, and
 * the nodes' slurmstepd do not talk to each other:
 *  - a step on one node: 128 bits from getrandom();
 *  - a step on several nodes: HMAC-SHA256(site key, "cdl-step-secret/1",
 *    uid, job id, step id) with the administrator's secret_key (default:
 *    munge's key, which every Slurm node has and only root and munge can
 *    read). Users cannot read the key, so they cannot compute any step's
 *    secret; every step's differs.
 * The plugin puts it only into the tasks' environment (spank_setenv in
 * task_init), never into srun's or a file. */
#ifndef CDL_SPANK_SECRET_H
#define CDL_SPANK_SECRET_H

#include <stddef.h>
#include <stdint.h>

#define SPK_SECRET_KEY_MAX 8192
#define SPK_SECRET_HEX 64   /* hex digits of an HMAC-SHA256 secret */

/* Reads the site key at path (as root): a regular file, not a link, not
 * accessible to group or others, 32..SPK_SECRET_KEY_MAX bytes, owned by
 * root, Slurm's SlurmUser (from the slurm.conf in SLURM_CONF, else
 * /etc/slurm/slurm.conf) or munge, in a directory no one else may write.
 * -1 with an error naming secret_key=PATH, the owner and what to fix. */
int spk_secret_read_key(const char *path, unsigned char *key, size_t cap, size_t *len);

/* out (SPK_SECRET_HEX + 1 bytes): the secret of step (uid, job, step). */
void spk_secret_derive(const unsigned char *key, size_t klen, uint32_t uid, uint32_t jobid,
                       uint32_t stepid, char *out);

/* The secret of this step: random for one node, derived for several. */
int spk_secret_step(const char *key_path, uint32_t nnodes, uint32_t uid, uint32_t jobid,
                    uint32_t stepid, char *out, size_t len);

#endif
